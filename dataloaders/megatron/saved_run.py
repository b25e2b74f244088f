"""The run read back from a Megatron save folder (`--from-checkpoint DIR`): the Megatron
family's answer to `Family.saved_run` (dataloaders/family_base.py). A Megatron-Bridge folder goes to
its own reader (bridge_save.py); everything else here is Megatron-LM's.

Megatron-LM keeps the job's whole `args` Namespace in every checkpoint (NVIDIA/Megatron-LM
d98e8a64ddf34856e74b24714e3bedb2f5a39553, megatron/training/checkpointing.py:1571
`state_dict['args'] = args` in generate_state_dict). The legacy `torch` format writes that dict
with `torch.save` to `iter_{N:07d}/mp_rank_{TP:02d}[_{PP:03d}]/model_optim_rng.pt` (:1017,
names from get_checkpoint_name :230-270); `torch_dist` passes it to
`dist_checkpointing.save` (:896), which writes every non-sharded entry (`args` among them) to
`iter_{N:07d}/common.pt` with `torch.save` (megatron-core
dist_checkpointing/strategies/common.py:40-48, COMMON_STATE_FNAME). The tracker file
`latest_checkpointed_iteration.txt` holds the newest iteration, or `release` (:378-410).

The pickle is read with `torch.load(weights_only=True)` allowing exactly the globals
megatron-core itself registers for its checkpoints (megatron/core/safe_globals.py: Namespace,
the enums the arguments hold, the numpy types of the RNG state, ...), megatron-core's own
classes rebuilt as inert stand-ins; any other global is refused by name, unread
(dataloaders.safe_pickle). The
Namespace then goes through the `--megatron-args` reader (launch_args.py).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dataloaders.errors import ForensicsError
from dataloaders.family_base import ConfigFromDict
from dataloaders.megatron.bridge_save import config_from_bridge, is_bridge_save_folder
from dataloaders.megatron.launch_args import args_to_argv, raw_config_from_megatron_args
from dataloaders.megatron.saved_jobs import describe, same_run
from dataloaders.safe_pickle import load_torch_save, megatron_globals
from dataloaders.trainers.megatron_lm import MegatronLM

TRACKER = "latest_checkpointed_iteration.txt"
_SAVER = MegatronLM()  # names the checkpoint folders (`iter_NNNNNNN`)


def load_saved_args(path: Path) -> dict[str, Any]:
    """The checkpoint's top-level dict (args, iteration, ...) read with weights_only=True and
    exactly the globals Megatron's args and RNG state need (dataloaders.safe_pickle)."""
    state = load_torch_save(
        path,
        megatron_globals(),
        "a Megatron checkpoint",
        "; give --config or --megatron-args instead",
    )
    if not isinstance(state, dict) or not isinstance(state.get("args"), argparse.Namespace):
        raise ForensicsError(f"{path}: no Megatron `args` in this checkpoint")
    return state


def _tracked_iteration(save: Path) -> int | None:
    tracker = save / TRACKER
    if not tracker.is_file():
        return None
    text = tracker.read_text(encoding="utf-8").strip()
    if text == "release":
        return None
    if not text.isdigit():
        raise ForensicsError(f"{tracker}: holds {text[:40]!r}, not an iteration")
    return int(text)


def pick_checkpoint(folder: Path, step: int | None) -> tuple[Path, str]:
    """The checkpoint directory to read and why: `folder` itself when it is one; else the first
    `iter_N` at or after `step` (saved by the job that trained the step), else the tracker's."""
    if _SAVER.checkpoint_iteration(folder.name) is not None or folder.name == "release":
        return folder, "given"
    iters = _SAVER.checkpoints(folder)
    tracked = _tracked_iteration(folder)
    if step is not None and any(i >= step for i in iters):
        first = min(i for i in iters if i >= step)
        return folder / _SAVER.checkpoint_name(
            first
        ), f"the first checkpoint at or after step {step}"
    if tracked is not None:
        return folder / _SAVER.checkpoint_name(tracked), f"{TRACKER} says {tracked}"
    if (folder / "release").is_dir():
        return folder / "release", "the release checkpoint"
    if iters:
        return folder / _SAVER.checkpoint_name(iters[-1]), "the newest iter_ directory"
    raise ForensicsError(
        f"{folder}: no Megatron checkpoint in it (no iter_NNNNNNN directory, no {TRACKER})"
    )


def _args_file(checkpoint: Path) -> Path:
    """common.pt (torch_dist) or the first tensor/pipeline rank's model_optim_rng.pt."""
    if (checkpoint / "common.pt").is_file():
        return checkpoint / "common.pt"
    ranks = sorted(checkpoint.glob("mp_rank_*/model_optim_rng.pt"))
    if ranks:
        return ranks[0]
    if not checkpoint.is_dir():
        raise ForensicsError(f"{checkpoint}: checkpoint directory not found")
    raise ForensicsError(
        f"{checkpoint}: neither common.pt (torch_dist) nor mp_rank_*/model_optim_rng.pt in it"
    )


def is_megatron_save_folder(folder: Path) -> bool:
    """A Megatron-LM or Megatron-Bridge save folder, or one of its checkpoints, told by the names
    Megatron gives them (nothing is read): an `iter_NNNNNNN` or `release` checkpoint, the
    tracker file, or such a checkpoint inside. A damaged tracker still names the folder
    Megatron's: the reader then says what is wrong with it."""
    if _SAVER.checkpoint_iteration(folder.name) is not None or folder.name == "release":
        return True
    if (folder / TRACKER).is_file() or (folder / "release").is_dir():
        return True
    return is_bridge_save_folder(folder) or any(
        _SAVER.checkpoint_iteration(p.name) is not None and p.is_dir() for p in folder.iterdir()
    )


def config_from_megatron_save(
    folder: Path, step: int | None, say: Callable[[str], None], config_from_dict: ConfigFromDict
) -> Any:
    """The run config a Megatron save folder describes (a Bridge one read by its own reader),
    made by `config_from_dict`; `say` gets what was read."""
    if is_bridge_save_folder(folder):
        return config_from_bridge(folder, step, say, config_from_dict)
    checkpoint, why = pick_checkpoint(folder, step)
    path = _args_file(checkpoint)
    state = load_saved_args(path)
    say(f"read the run's arguments from {path} ({why})")
    earlier = _earlier_jobs(checkpoint, state, say)
    return config_from_saved_args(state, path, config_from_dict, say, earlier)


def _earlier_jobs(
    checkpoint: Path, state: dict[str, Any], say: Callable[[str], None]
) -> list[tuple[int, dict[str, Any], Path]]:
    """(resumed-from iteration, state, file) of each earlier job of the run, oldest first.
    Megatron sets `args.iteration` to the iteration a job loaded (core_v0.16.1
    megatron/training/training.py:1537) and saves that Namespace, so the job before one that
    resumed from R is the one that saved the newest checkpoint at or before R; checkpoints past
    R left by a rolled-back job are not followed."""
    if _SAVER.checkpoint_iteration(checkpoint.name) is None:
        return []
    iters = _SAVER.checkpoints(checkpoint.parent)[::-1]
    jobs: list[tuple[int, dict[str, Any], Path]] = []
    resumed = getattr(state["args"], "iteration", None)
    while isinstance(resumed, int) and resumed > 0:
        before = [it for it in iters if it <= resumed]
        if not before:
            break
        path = _args_file(checkpoint.parent / _SAVER.checkpoint_name(before[0]))
        earlier = load_saved_args(path)
        start = getattr(earlier["args"], "iteration", None)
        if not isinstance(start, int) or start >= before[0]:
            break
        jobs.append((start, earlier, path))
        say(f"an earlier job (resumed from iteration {start}) saved {path}")
        resumed = start
    return jobs[::-1]


def config_from_saved_args(
    state: dict[str, Any],
    path: Path,
    config_from_dict: ConfigFromDict,
    say: Callable[[str], None] = print,
    earlier: list[tuple[int, dict[str, Any], Path]] | None = None,
) -> Any:
    """`state['args']` as Megatron arguments, made a run config by `config_from_dict`, with
    what was read printed one field a line.
    Earlier jobs that trained on another blend (a restart with a new --data-path) become the
    config's data stages; any other difference between the jobs is refused."""
    raw = _raw(state, path)
    jobs = [(start, _raw(st, p), p) for start, st, p in earlier or []]
    this_start = getattr(state["args"], "iteration", 0)
    jobs.append((this_start if isinstance(this_start, int) else 0, raw, path))
    stages: list[dict[str, Any]] = []
    for start, job, job_path in jobs:
        same_run(job, raw, job_path, path)
        if not stages or stages[-1]["blend"] != job["data"]["blend"]:
            stages.append({"start_iteration": max(start, 0) + 1, "blend": job["data"]["blend"]})
    if stages[0]["start_iteration"] != 1:
        say(
            f"  iterations 1-{stages[0]['start_iteration'] - 1} were trained by a job whose "
            "checkpoints are gone: its data is taken to be the same"
        )
        stages[0]["start_iteration"] = 1
    if len(stages) > 1:
        data = {k: v for k, v in raw["data"].items() if k != "blend"}
        raw = {**raw, "data": {**data, "stages": stages}}
    try:
        config = config_from_dict(raw, base_dir=Path.cwd(), source=None)
    except ForensicsError as err:
        raise ForensicsError(f"{path}: {err}") from None
    _check_consumed(state, config, path)
    for line in describe(config):
        say(line)
    return config


def _raw(state: dict[str, Any], path: Path) -> dict[str, Any]:
    args = state["args"]
    try:
        return raw_config_from_megatron_args(
            args_to_argv(args), cwd=Path.cwd().resolve(), extra_training=_parallel(args)
        )
    except ForensicsError as err:
        raise ForensicsError(f"{path}: {str(err).removeprefix('--megatron-args: ')}") from None


def _parallel(args: argparse.Namespace) -> dict[str, Any]:
    dp = getattr(args, "data_parallel_size", None)
    return {"data_parallel_size": int(dp)} if isinstance(dp, int) and dp > 0 else {}


def _check_consumed(state: dict[str, Any], config: Any, path: Path) -> None:
    """A checkpoint whose consumed sample count is not iterations x batch (a changed batch size
    or drained batches) needs the resumes a config states; refuse rather than replay wrong."""
    iteration = state.get("iteration")
    consumed = getattr(state["args"], "consumed_train_samples", None)
    training = config.training
    if not isinstance(iteration, int) or not isinstance(consumed, int):
        return
    if training.rampup_batch_size is not None:
        return  # a ramp: schedule.py replays the count step by step
    expected = iteration * training.global_batch_size
    if consumed != expected:
        raise ForensicsError(
            f"{path}: iteration {iteration} consumed {consumed:,} samples, not {expected:,} "
            f"({iteration} x {training.global_batch_size}): the batch size changed or batches "
            "were drained; write a config with training.resumes (docs/from-checkpoint.md)"
        )
