"""What the Megatron-family save-folder readers share (a Megatron-LM `--save` directory and a
Megatron-Bridge one): whether two jobs' configs are one run, and the lines that say what was
read. The readers (saved_run.py, bridge_save.py) each build a run config their own way and
meet here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dataloaders.errors import ForensicsError
from dataloaders.megatron.config import MegatronData


def same_run(job: dict[str, Any], last: dict[str, Any], job_path: Path, path: Path) -> None:
    """Jobs of one run may differ in their blend only (stages); anything else changes which
    batch an iteration is in a way one config cannot state."""
    for section in ("data", "training", "tokenizer", "tokenizer_args"):
        a, b = job.get(section), last.get(section)
        if section == "data":
            a = {k: v for k, v in a.items() if k != "blend"}
            b = {k: v for k, v in b.items() if k != "blend"}
        if a != b:
            keys = sorted(k for k in (a or {}) if (a or {}).get(k) != (b or {}).get(k))
            what = f"{section}.{keys[0]}" if keys and isinstance(a, dict) else section
            raise ForensicsError(
                f"{job_path} and {path}: the jobs differ in {what}, not only in their data "
                "blend; write a config for this run (docs/from-checkpoint.md)"
            )


def describe(config: Any) -> list[str]:
    """One line per field the replay depends on."""
    data = config.data
    if not isinstance(data, MegatronData):  # the saved args are a Megatron job's
        raise TypeError(f"describe: a Megatron data section, not {type(data).__name__}")
    lines = []
    stages = data.data_stages
    for stage in stages:
        since = f" (from iteration {stage.start_iteration})" if len(stages) > 1 else ""
        for d in stage.blend:
            weight = f" weight {d.weight}" if d.weight is not None else ""
            lines.append(f"  data: {d.prefix}{weight}{since}")
    lines += [f"  seed: {data.seed}", f"  seq_length: {data.seq_length}", f"  split: {data.split}"]
    if data.cache_path is not None:
        lines.append(f"  cache_path: {data.cache_path}")
    t = config.training
    for key in ("global_batch_size", "micro_batch_size", "data_parallel_size", "train_iters"):
        lines.append(f"  {key}: {getattr(t, key)}")
    for key in ("train_samples", "rampup_batch_size"):
        if getattr(t, key) is not None:
            lines.append(f"  {key}: {getattr(t, key)}")
    kind = config.tokenizer_args.tokenizer_type if config.tokenizer_args else None
    lines.append(f"  tokenizer: {config.tokenizer}" + (f" ({kind})" if kind else ""))
    lines.append(f"  checkpoint_dir: {config.checkpoint_dir}")
    return lines
