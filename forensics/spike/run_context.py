"""One spike investigation in progress: what every stage reads besides its input tables."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dataloaders.run_config import RunConfig, load_config
from dataloaders.trainers import Trainer
from forensics.inputs_guard import input_stats
from forensics.outputs import hold_lock
from forensics.pipeline import StageClock, cache_key
from forensics.publish_set import finish_before_writing
from forensics.replay import open_replayer
from forensics.skip import json_fingerprint
from forensics.spike.options import SpikeOptions
from forensics.spike.outdir import check_output_dir, write_marker
from forensics.window import SpikeWindows, choose_windows


@dataclass
class SpikeRun:
    """The config, the spike's step, the opened replayer, the windows, the run's trainer, and
    the run's cache, clock and notes. The command's other options are not here: each stage takes
    those it reads as arguments (forensics.spike.options' settings).

    `key` names the expensive stages' cache files: everything their tables depend on (config,
    data fingerprint, window, baseline); the cheap options (threshold, --after) are not in it.
    """

    config: RunConfig
    origin: str  # where the config came from: a YAML path, or "--megatron-args"
    step: int  # the spike's iteration (--step)
    out: Path
    replayer: Any  # dataloaders.base.Replayer
    plan: SpikeWindows
    fingerprint: dict[str, Any]
    clock: StageClock
    trainer: Trainer  # the loop that reads the skip flags and names the checkpoints
    hits: dict[str, bool] = field(default_factory=dict)  # stage -> read from the cache
    notes: list[str] = field(default_factory=list)  # said in the report and skip.json
    inputs: dict[str, Any] = field(default_factory=dict)  # the data files' stats at the start
    _lock: Any = None

    @property
    def cache(self) -> Path:
        return self.out / ".cache"

    @property
    def progress(self) -> bool:
        """Whether the stages show progress bars (the clock's display: off under --quiet)."""
        return self.clock.progress

    @property
    def config_hash(self) -> str:
        return self.config.config_hash()

    @property
    def key(self) -> str:
        return cache_key(
            config=self.config_hash,
            data=self.fingerprint,
            window=self.plan.window,
            baseline=self.plan.baseline,
        )

    def __enter__(self) -> SpikeRun:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._lock is not None:
            self._lock.close()


def _config_and_origin(config: Path | str | RunConfig) -> tuple[RunConfig, str]:
    """The run config and a few words saying where it came from (for the marker and messages):
    a YAML path is loaded; a RunConfig (e.g. from --megatron-args) is taken as is."""
    if isinstance(config, RunConfig):
        origin = config.origin or (
            str(config.source) if config.source is not None else "--megatron-args"
        )
        return config, origin
    return load_config(config), str(Path(config).resolve())


def open_run(
    config: Path | str | RunConfig,
    out: Path,
    options: SpikeOptions,
    trainer: Trainer | None = None,
) -> SpikeRun:
    """Load and check everything, then take the output directory's lock. `trainer`: the one
    the command resolved (--trainer); None for the config's training.trainer.

    Bad input raises ForensicsError before anything is written (the lock and the marker come
    last), so a refusal leaves the output directory as it was."""
    config, origin = _config_and_origin(config)
    inputs = input_stats(config)  # before anything reads the data
    out = Path(out)
    finish_before_writing(out, out / ".cache", "forensics spike", force=options.force)
    check_output_dir(out, config.config_hash(), options.step, options.force)
    clock = StageClock(options.progress)
    with clock.stage("open", f"config {origin}", spinner=True):
        replayer = open_replayer(config)
        plan = choose_windows(
            replayer, config, options.step, options.window, options.baseline,
            options.baseline_offset,
        )  # fmt: skip
        fingerprint = json_fingerprint(replayer)
    trainer = trainer or config.training.registered_trainer
    run = SpikeRun(config, origin, options.step, out, replayer, plan, fingerprint, clock, trainer)
    run.inputs = inputs
    run.notes += [f"the window crosses the start of a data stage at iteration {s}"
                  for s in plan.crossings]  # fmt: skip
    run.notes.append(f"baseline {plan.baseline[0]}-{plan.baseline[1]}: {plan.baseline_how}")
    run._lock = hold_lock(run.cache, "forensics spike")  # held until the run's `with` ends
    # again, under the lock: a run that started while another was finishing must not replace
    # its outputs without --force
    check_output_dir(out, config.config_hash(), options.step, options.force)
    write_marker(run.cache, run.config_hash, options.step, origin)
    return run
