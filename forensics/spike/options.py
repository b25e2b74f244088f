"""What `forensics spike` takes and what it gives back."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forensics.cluster.sample import SAMPLE_DOCS
from forensics.errors import ForensicsError
from forensics.pipeline.engines import check_engine
from forensics.rollback import Rollback
from forensics.skip import check_threshold
from forensics.skip.plan import SkipPlan
from forensics.window import SPIKE_WINDOW


@dataclass(frozen=True)
class Engine:
    """Where the replay census and the decode and score parts run (`--engine`, `--workers`,
    `--ray-address`) and whether a progress bar shows them."""

    name: str = "local"
    workers: int = 1
    address: str | None = None
    progress: bool = False

    @property
    def in_process(self) -> bool:
        """This process alone (no pool, no cluster): the stages run one after the other."""
        return self.name == "local" and self.workers == 1

    def __str__(self) -> str:
        """How a stage line names it: "local (2 workers)", "ray (1 worker)"."""
        return f"{self.name} ({self.workers} worker{'' if self.workers == 1 else 's'})"


@dataclass(frozen=True)
class EmbedSettings:
    """What the embedding clusters are made with; all of it keys the cluster stage's cache
    (forensics.spike.cluster_cache). `cap` None: the embedder's default; 0: no embedding."""

    cap: int | None = None
    model: str | None = None
    device: str = "cpu"


@dataclass(frozen=True)
class SkipSettings:
    """What the skip plan takes in besides the blame: the scope past the spike (`after`), the
    share over which an iteration is skipped, and whether the dense iterations ahead join."""

    after: int = 0
    threshold: float = 0.0
    skip_ahead: bool = False
    ahead_share: float = 0.25


@dataclass(frozen=True)
class RerunArgs:
    """The command-line choices the report's suggested rerun with a checkpoint repeats (the
    window size and `--baseline` as given), and whether this analysis rescored already."""

    window: int
    baseline: str | None
    rescored: bool


@dataclass(frozen=True)
class SpikeOptions:
    """Everything `forensics spike` takes besides the config and the output directory."""

    step: int
    window: int = SPIKE_WINDOW  # iterations replayed before the spike (rollback.spike_window)
    baseline: str | None = None  # "FIRST-LAST", or "stage" (start of the window's data stage)
    baseline_offset: int | None = None  # baseline ends this many iterations before the window
    after: int = 0  # also skip this many iterations past the spike
    threshold: float = 0.0  # skip an iteration when its culprit share exceeds this (0: any)
    skip_ahead: bool = False  # add the densest iterations ahead to the skip ranges
    ahead_share: float = 0.25  # "dense" ahead: at least this share of the batch is culprit
    culprits: tuple[str, ...] | None = None  # cluster ids to blame instead of the verdicts
    embed_cap: int | None = None  # documents embedded (None: the embedder's default; 0: skip)
    # "static" (model2vec distilled from MiniLM; the CPU default), "minilm", or a local
    # model2vec / sentence-transformers directory (None: static on a CPU, MiniLM on a GPU)
    embed_model: str | None = None
    device: str = "cpu"  # torch device for the embeddings ("cuda" on a GPU machine)
    # Where decode and score run: "local" (this process with workers=1, else a process pool of
    # `workers`) or "ray" (Ray Data; `ray_address` HOST:PORT, None: a local Ray instance).
    engine: str = "local"
    workers: int = 1
    ray_address: str | None = None
    rescore: Any = None  # forensics.rescore.RescoreOptions: the model's view (None: data only)
    # Decode and score every distinct document (the reference), instead of the three passes:
    # census of every sample, a sample of each group's documents, every document of the groups
    # named culprit or suspect (forensics.spike.passes).
    exhaustive: bool = False
    sample_docs: int = SAMPLE_DOCS  # documents scored per group in the evidence pass
    force: bool = False
    progress: bool = True

    def check(self) -> None:
        """Bad values, before anything is opened or written."""
        if self.after < 0:
            raise ForensicsError(f"--after {self.after}: must be >= 0")
        if self.embed_cap is not None and self.embed_cap < 0:
            raise ForensicsError(
                f"--embed-cap {self.embed_cap}: must be >= 0 (0: no embedding clusters)"
            )
        if not 0.0 <= self.ahead_share <= 1.0:
            raise ForensicsError(f"--ahead-share {self.ahead_share}: must be in [0, 1]")
        check_threshold(self.threshold)
        if self.sample_docs < 1:
            raise ForensicsError(f"--sample-docs {self.sample_docs}: must be >= 1")

        check_engine(self.engine, self.workers, self.ray_address)
        if self.rescore is not None:  # a wrong checkpoint or losses path fails before any work
            self.rescore.check()

    def engine_settings(self) -> Engine:
        """Where the parts run, from --engine, --workers, --ray-address and the progress bar."""
        return Engine(self.engine, self.workers, self.ray_address, self.progress)

    def embed_settings(self) -> EmbedSettings:
        """The embedding clusters' options, from --embed-cap, --embed-model, --device."""
        return EmbedSettings(self.embed_cap, self.embed_model, self.device)

    def skip_settings(self) -> SkipSettings:
        """The skip plan's options, from --after, --threshold, --skip-ahead, --ahead-share."""
        return SkipSettings(self.after, self.threshold, self.skip_ahead, self.ahead_share)

    def rerun_args(self) -> RerunArgs:
        """What the report's suggested rerun with a checkpoint repeats of this command."""
        return RerunArgs(self.window, self.baseline, self.rescore is not None)


@dataclass
class SpikeResult:
    """What a run produced: paths, the skip plan as written, the report, stage timings."""

    out: Path
    skip: SkipPlan
    report: Any
    rollback: Rollback
    window: tuple[int, int]
    baseline: tuple[int, int]
    timings: dict[str, float] = field(default_factory=dict)
    cached: dict[str, bool] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
