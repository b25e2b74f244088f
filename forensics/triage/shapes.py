"""What triage reads off a loss curve, as plain records: the logged columns beside the loss,
a divergence, a plateau, and one curve's whole result. The detectors (regimes, spikes, climb)
fill them; the causes, events and plans read them."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from forensics.triage.climb import Climb
from forensics.triage.spikes import Spike
from forensics.triage.trend import PowerLawFit


@dataclass
class Columns:
    """The full table's columns as numpy arrays (NaN where not logged), aligned on `step`."""

    step: np.ndarray
    lr: np.ndarray | None
    grad_norm: np.ndarray | None
    loss_scale: np.ndarray | None
    tokens: np.ndarray | None
    samples: np.ndarray | None
    batch: np.ndarray | None

    @classmethod
    def of(cls, table: pl.DataFrame) -> Columns:
        def col(name: str) -> np.ndarray | None:
            if name not in table.columns or table[name].is_null().all():
                return None
            return table[name].cast(pl.Float64).fill_null(float("nan")).to_numpy()

        return cls(
            step=table["step"].to_numpy(),
            lr=col("lr"),
            grad_norm=col("grad_norm"),
            loss_scale=col("loss_scale"),
            tokens=col("tokens"),
            samples=col("consumed_samples"),
            batch=col("global_batch_size"),
        )

    def at(self, values: np.ndarray | None, step: int) -> float | None:
        """Last finite value at or before `step` (None when there is none)."""
        if values is None:
            return None
        i = int(np.searchsorted(self.step, step, side="right"))
        vals = values[:i]
        vals = vals[np.isfinite(vals)]
        return float(vals[-1]) if len(vals) else None


@dataclass
class Divergence:
    step: int
    end_step: int
    trigger: str
    from_level: float
    to_level: float | None
    grad_norm_before: str
    likely_causes: list[dict[str, object]] = field(default_factory=list)


@dataclass
class Plateau:
    step: int
    end_step: int
    level: float
    observed_drop: float
    predicted_drop: float
    checks: list[dict[str, object]] = field(default_factory=list)
    conclusion: str = ""


@dataclass
class CurveResult:
    """One loss curve: its finite points, its normal shape, and what was found on it."""

    name: str
    steps: np.ndarray
    loss: np.ndarray
    ema: np.ndarray
    bad_steps: np.ndarray
    fit: PowerLawFit | None
    spikes: list[Spike]
    divergence: Divergence | None
    plateaus: list[Plateau]
    climbs: list[Climb] = field(default_factory=list)

    @property
    def blips(self) -> list[Spike]:
        return [s for s in self.spikes if s.blip]
