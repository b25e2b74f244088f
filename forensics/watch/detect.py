"""Triage's detectors on a sliding window of the growing log.

Every poll that brings rows re-runs `forensics.triage.analyze.triage` (the one implementation
of the grad-norm alarm, loss-scale collapse, spikes and their verdicts, divergence and plateaus)
on the last `window_steps` steps. The window is what keeps the cost per poll flat: it is long
enough for every decision the detectors make (a spike's recovery window four times over, the
plateau length twice, the loss-scale window, plus the trailing history the robust statistics
and the grad-norm baseline need), and events whose onset lies in that leading history
(`context_steps`) are not raised from a trimmed window: they were judged while their history
was still in view.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from forensics.errors import ForensicsError
from forensics.triage.analyze import TriageResult, triage
from forensics.triage.canonical import order_steps, resolve_restarts
from forensics.triage.config import RunInfo, TriageConfig
from forensics.triage.trend import ema_by_step, trailing_median


def window_steps(cfg: TriageConfig) -> int:
    """Steps of log kept in view (see the module docstring)."""
    return (
        max(4 * cfg.recovery_window, 2 * cfg.plateau_steps, cfg.loss_scale_window)
        + cfg.grad_baseline_rows
    )


class WindowDetector:
    """The recent rows of the log and the triage of them."""

    def __init__(self, cfg: TriageConfig, info: RunInfo, path: Path) -> None:
        self.cfg, self.info, self.path = cfg, info, path
        self.table: pl.DataFrame | None = None
        self.trimmed_before: int | None = None  # first step kept once rows were dropped
        self.first_step: int | None = None  # the run's first step seen (run-level rates)
        self.notes: list[str] = []
        self.restarts = 0

    def add(self, rows: pl.DataFrame) -> None:
        """Append parsed rows; a restarted job's repeated iterations replace the old attempt's."""
        rows = rows.drop("__line", strict=False)
        before = None if self.table is None else self.table["step"]
        rows = order_steps(rows, self.path, self.notes, before)
        if self.table is None:
            both = rows
        else:
            both = pl.concat([self.table, rows], how="diagonal_relaxed")
        notes: list[str] = []
        both = resolve_restarts(both, self.path, notes)
        if notes:
            self.restarts += 1
            self.notes += notes
        if self.first_step is None and both.height:
            self.first_step = int(both["step"][0])
        last = int(both["step"][-1])
        keep_from = last - window_steps(self.cfg)
        if int(both["step"][0]) < keep_from:
            both = both.filter(pl.col("step") >= keep_from)
            self.trimmed_before = int(both["step"][0])
        self.table = both

    def interval(self) -> float:
        if self.table is None or self.table.height < 2:
            return 1.0
        return max(1.0, float(np.median(np.diff(self.table["step"].to_numpy()[-64:]))))

    def context_steps(self) -> int:
        rows = max(self.cfg.grad_baseline_rows, self.cfg.window_rows)
        # ... and the pre-spike trend a spike is judged against (2 x the recovery window).
        return max(int(rows * self.interval()), 2 * self.cfg.recovery_window)

    def zone_start(self) -> int | None:
        """Events starting before this step are not raised from the current window."""
        if self.trimmed_before is None:
            return None
        return self.trimmed_before + self.context_steps()

    def analyse(self) -> TriageResult | None:
        if self.table is None or self.table.height == 0:
            return None
        try:
            return triage(self.table, self.cfg, self.info)
        except ForensicsError:  # no finite loss yet in view: nothing to judge
            return None

    @property
    def last_step(self) -> int | None:
        return None if self.table is None else int(self.table["step"][-1])

    def latest(self) -> dict[str, Any]:
        """The last values, for the live view and the Prometheus file."""
        if self.table is None or self.table.height == 0:
            return {}
        t = self.table
        out: dict[str, Any] = {"step": int(t["step"][-1])}
        for col in ("loss", "grad_norm", "lr", "loss_scale"):
            if col in t.columns:
                vals = t[col].drop_nulls()
                if len(vals):
                    out[col] = float(vals[-1])
        return out

    def grad_ratio(self) -> float | None:
        """The grad norm's fast EMA over its trailing-median baseline now (the alarm's ratio),
        for the live view and the Prometheus file; None with under four logged norms."""
        table = self.table
        if table is None or "grad_norm" not in table.columns:
            return None
        g = table.select("step", "grad_norm").filter(
            pl.col("grad_norm").is_finite() & (pl.col("grad_norm") > 0)
        )
        g = g.tail(self.cfg.grad_baseline_rows + 1)
        if g.height < 4:
            return None
        steps, vals = g["step"].to_numpy(), g["grad_norm"].to_numpy()
        fast = ema_by_step(steps, vals, self.cfg.grad_half_life)
        base = trailing_median(vals, self.cfg.grad_baseline_rows)
        if np.isfinite(base[-1]) and base[-1] > 0:
            return float(fast[-1] / base[-1])
        return None
