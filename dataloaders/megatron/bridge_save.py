"""A run config from a Megatron-Bridge save folder: `--from-checkpoint DIR` on a Bridge run.

Bridge writes, on rank 0, beside each checkpoint's weights (megatron-bridge 0.6.2,
megatron/bridge/training/checkpointing.py:1430-1467; file names from
training/utils/checkpoint_utils.py:32-34, 91-153):
- `iter_{N:07d}/run_config.yaml`: the job's whole ConfigContainer (`cfg.to_yaml`), read here
  with `yaml.safe_load`, as Bridge reads it (checkpoint_utils.py:385-441); `_target_` keys name
  classes and are never constructed;
- `iter_{N:07d}/train_state.pt` and a copy at the top, `latest_train_state.pt`: `torch.save` of
  `TrainState.state_dict()` (training/state.py:57-77), tensors only, read with
  `torch.load(weights_only=True)` and no extra globals (Bridge reads it the same way,
  checkpoint_utils.py:444-470);
- `latest_checkpointed_iteration.txt`, the step, "for compatibility" with Megatron-LM.

The data are built by megatron-core's BlendedMegatronDatasetBuilder from `dataset`
(Bridge's GPTDatasetConfig, training/config.py:222) and drawn in the order of megatron-core's
pretraining sampler from `train_state.consumed_train_samples`, so the job is described to the
Megatron reader as the Megatron-LM arguments the same fields are (`_ARGS`). Each dataset field is
mapped, known to leave the sample order alone (`_ORDER_FREE`), or refused in one line.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from dataloaders.errors import ForensicsError
from dataloaders.family_base import ConfigFromDict
from dataloaders.megatron.launch_args import raw_config_from_megatron_args
from dataloaders.megatron.saved_jobs import describe, same_run
from dataloaders.safe_pickle import load_torch_save
from dataloaders.trainers import MEGATRON_BRIDGE, get_trainer

RUN_CONFIG = "run_config.yaml"
TRAIN_STATE = "train_state.pt"
LATEST_TRAIN_STATE = "latest_train_state.pt"
_TRAINER = get_trainer(MEGATRON_BRIDGE)  # its flags, and its checkpoint folders (`iter_NNNNNNN`)
_GPT_DATASET = "megatron.bridge.training.config.GPTDatasetConfig"

# dataset field -> the Megatron-LM flag that states it (megatron-core GPTDatasetConfig /
# BlendedMegatronDatasetConfig fields, megatron/core/datasets/blended_megatron_dataset_config.py)
_ARGS = {
    "random_seed": "--seed",
    "seq_length": "--seq-length",
    "split": "--split",
    "mid_level_dataset_surplus": "--mid-level-dataset-surplus",
    "path_to_cache": "--data-cache-path",
}
# Fields that change how a sample is masked, stored, cached or loaded, never which documents
# and tokens a global sample holds or the order samples are drawn in.
_ORDER_FREE = frozenset(
    {
        "_target_", "reset_position_ids", "reset_attention_mask", "eod_mask_loss",
        "create_attention_mask", "inter_document_masking", "allow_ambiguous_pad_tokens",
        "drop_last_partial_validation_sequence", "multiple_validation_sets", "full_validation",
        "num_dataset_builder_threads", "num_workers", "pin_memory", "persistent_workers",
        "mmap_bin_files", "defer_npy_index_mmap", "fast_cache_load", "object_storage_cache_path",
        "token_dtype_code", "tokenizer", "trust_remote_code", "split_matrix", "data_sharding",
        "dataloader_save", "dataloader_load", "context_parallel_size", "sequence_parallel_size",
        "data_parallel_size",  # GPTDatasetConfig's own field (default 1), not the job's DP size
    }
)  # fmt: skip
# Fields that must hold the value megatron-core's pretraining path uses, else refused.
_REQUIRED = {
    "blend_per_split": (None, "per-split blends"),
    "data_path": (None, "dataset.data_path instead of dataset.blend"),
    "mock": (False, "mock data"),
    "per_dataset_sequences_path": (None, "sequence counts read from a file"),
    "sequences_per_dataset": (None, "sequence counts given instead of read from the .idx files"),
    "hybrid_context_parallel": (False, "the hybrid context-parallel sampler regroups samples"),
    "drop_last": (True, "a last partial batch kept"),
    "dataloader_type": ("single", "only the `single` pretraining sampler is replayed"),
}
_TOKENIZER_ARGS = {
    "tokenizer_type": "--tokenizer-type",
    "tokenizer_model": "--tokenizer-model",
    "vocab_file": "--vocab-file",
    "merge_file": "--merge-file",
    "vocab_size": "--vocab-size",
    "vocab_extra_ids": "--vocab-extra-ids",
    "tiktoken_pattern": "--tiktoken-pattern",
    "tiktoken_num_special_tokens": "--tiktoken-num-special-tokens",
}


def is_bridge_save_folder(folder: Path) -> bool:
    """A Bridge save folder (`latest_train_state.pt`, or an `iter_N/` holding run_config.yaml),
    or one of its `iter_N/` checkpoints."""
    if _TRAINER.checkpoint_iteration(folder.name) is not None:
        return (folder / RUN_CONFIG).is_file()
    if (folder / LATEST_TRAIN_STATE).is_file():
        return True
    return bool(_iterations(folder))


def read_run_config(path: Path) -> dict[str, Any]:
    """run_config.yaml as plain data (yaml.safe_load: no object is constructed)."""
    import yaml

    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise ForensicsError(f"{path}: cannot read the run config ({err})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("dataset"), dict):
        raise ForensicsError(f"{path}: not a Megatron-Bridge run config (no `dataset` section)")
    return raw


def read_train_state(path: Path) -> dict[str, Any]:
    """train_state.pt's counters as Python numbers (tensors only: any pickled global is
    refused by name before anything is unpickled)."""
    # Bridge's TrainState.state_dict() holds tensors only (training/state.py): nothing beyond
    # torch's own defaults is allowed
    state = load_torch_save(path, [], "a Megatron-Bridge train state", mmap=False)
    if not isinstance(state, dict) or "step" not in state:
        raise ForensicsError(f"{path}: no `step` in this train state")
    return {k: v.item() if hasattr(v, "item") else v for k, v in state.items()}


def _iterations(save: Path) -> list[int]:
    """The save folder's checkpoints that hold a run config, oldest first."""
    return [i for i in _TRAINER.checkpoints(save) if (_folder(save, i) / RUN_CONFIG).is_file()]


def _folder(save: Path, iteration: int) -> Path:
    """The checkpoint folder of `iteration` in the save folder `save`."""
    return save / _TRAINER.checkpoint_name(iteration)


def pick_bridge_checkpoint(folder: Path, step: int | None) -> tuple[Path, str]:
    """The `iter_N` to read and why: `folder` itself when it is one; else the first at or after
    `step` (saved by the job that trained the step), else the one latest_train_state.pt names."""
    if _TRAINER.checkpoint_iteration(folder.name) is not None:
        return folder, "given"
    iters = _iterations(folder)
    if step is not None and any(i >= step for i in iters):
        first = min(i for i in iters if i >= step)
        return _folder(folder, first), f"the first checkpoint at or after step {step}"
    latest = folder / LATEST_TRAIN_STATE
    if latest.is_file():
        tracked = int(read_train_state(latest)["step"])
        if tracked in iters:
            return _folder(folder, tracked), f"{LATEST_TRAIN_STATE} says {tracked}"
    if iters:
        return _folder(folder, iters[-1]), "the newest iter_ directory"
    raise ForensicsError(f"{folder}: no Megatron-Bridge checkpoint (no iter_NNNNNNN/{RUN_CONFIG})")


def _dataset_argv(dataset: dict[str, Any], path: Path) -> list[str]:
    """The Megatron-LM data flags `dataset` states (refusing what the replay cannot follow)."""
    target = dataset.get("_target_")
    if target != _GPT_DATASET:
        raise ForensicsError(
            f"{path}: dataset is {target}, not {_GPT_DATASET}; only pretraining on "
            "indexed .bin/.idx data is replayed"
        )
    for key, value in dataset.items():
        if key in _REQUIRED:
            want, what = _REQUIRED[key]
            if value != want:
                raise ForensicsError(f"{path}: dataset.{key} = {value!r} ({what}) is not replayed")
        elif key not in _ARGS and key not in _ORDER_FREE and key not in _HANDLED:
            raise ForensicsError(
                f"{path}: dataset.{key} is a field forensics does not know; it may change "
                "which samples are drawn; write a config (docs/from-checkpoint.md)"
            )
    blend = dataset.get("blend")
    if not (isinstance(blend, list) and len(blend) == 2 and isinstance(blend[0], list)):
        raise ForensicsError(f"{path}: dataset.blend is {blend!r}, not [prefixes, weights]")
    prefixes, weights = blend
    if weights is not None and len(weights) != len(prefixes):
        raise ForensicsError(f"{path}: dataset.blend has {len(prefixes)} prefixes, weights differ")
    argv = ["--data-path"]
    for i, prefix in enumerate(prefixes):
        argv += ([str(weights[i])] if weights is not None else []) + [str(prefix)]
    for key, flag in _ARGS.items():
        if dataset.get(key) is not None:
            argv += [flag, str(dataset[key])]
    return argv


_HANDLED = frozenset({"blend", "add_extra_token_to_sequence"})


def _train_argv(train: dict[str, Any], path: Path) -> list[str]:
    for key, what in (
        ("num_epochs", "the iteration count derived from epochs"),
        ("step_batch_size_schedule", "a step batch-size schedule"),
    ):
        if train.get(key) is not None:
            raise ForensicsError(f"{path}: train.{key} ({what}) is not replayed")
    if train.get("decrease_batch_size_if_needed"):
        raise ForensicsError(
            f"{path}: train.decrease_batch_size_if_needed (batches shrunk on the fly) is not "
            "replayed"
        )
    argv: list[str] = []
    for key in ("global_batch_size", "micro_batch_size", "train_iters", "train_samples"):
        if train.get(key) is not None:
            argv += ["--" + key.replace("_", "-"), str(train[key])]
    if train.get("rampup_batch_size"):
        raise ForensicsError(
            f"{path}: train.rampup_batch_size: the ramp rounds to micro_batch_size x the "
            "data-parallel size, which Bridge does not save; write a config with "
            "training.data_parallel_size (docs/from-checkpoint.md)"
        )
    return argv


def _tokenizer_argv(tokenizer: dict[str, Any]) -> list[str]:
    argv: list[str] = []
    for key, flag in _TOKENIZER_ARGS.items():
        if tokenizer.get(key) is not None:
            argv += [flag, str(tokenizer[key])]
    for key in ("tokenizer_sentencepiece_legacy",):
        if tokenizer.get(key):
            argv.append("--" + key.replace("_", "-"))
    if tokenizer.get("special_tokens"):
        argv += ["--tokenizer-special-tokens", *map(str, tokenizer["special_tokens"])]
    return argv


def raw_from_run_config(run: dict[str, Any], path: Path) -> dict[str, Any]:
    """The project's raw Megatron run config for one Bridge job's run_config.yaml."""
    dataset = run["dataset"]
    argv = _dataset_argv(dataset, path) + _train_argv(run.get("train") or {}, path)
    argv += _tokenizer_argv(run.get("tokenizer") or {})
    checkpoint = run.get("checkpoint") or {}
    for key in ("save", "load"):
        if checkpoint.get(key):
            argv += ["--" + key, str(checkpoint[key])]
    try:
        raw = raw_config_from_megatron_args(argv, cwd=Path.cwd().resolve())
    except ForensicsError as err:
        raise ForensicsError(f"{path}: {str(err).removeprefix('--megatron-args: ')}") from None
    raw["data"]["add_extra_token"] = dataset.get("add_extra_token_to_sequence") is not False
    raw["training"]["trainer"] = MEGATRON_BRIDGE
    return raw


def skips_of(run: dict[str, Any]) -> list[int]:
    """The job's train.iterations_to_skip (refused when it is not a list of integers)."""
    values = (run.get("train") or {}).get("iterations_to_skip") or []
    if not isinstance(values, list) or not all(isinstance(v, int) for v in values):
        raise ForensicsError(f"train.iterations_to_skip is {values!r}, not a list of integers")
    return values


def bridge_jobs(
    checkpoint: Path, say: Callable[[str], None]
) -> list[tuple[int, dict[str, Any], Path]]:
    """(resumed-from iteration, run config, file) of each job that led to `checkpoint`, oldest
    first. A job that loaded with `checkpoint.ckpt_step` says where it resumed; otherwise the
    job is taken to have resumed from the newest checkpoint before its first save whose config
    differs (Bridge records nothing else), and that is said. Checkpoints past a ckpt_step left
    by a rolled-back job are not followed."""
    save = checkpoint.parent
    here = _TRAINER.checkpoint_iteration(checkpoint.name)
    iters = _iterations(save) if here is not None else []
    path = checkpoint / RUN_CONFIG
    run = read_run_config(path)
    here = here if iters else 0
    jobs: list[tuple[int, dict[str, Any], Path]] = []
    while True:
        step = (run.get("checkpoint") or {}).get("ckpt_step")
        if isinstance(step, int) and 0 <= step < here:
            start = step
        else:
            start = 0
            for it in reversed([i for i in iters if i < here]):
                earlier = read_run_config(_folder(save, it) / RUN_CONFIG)
                if _job_key(earlier) != _job_key(run):
                    start = it
                    say(
                        f"  {path} was saved by a job taken to have resumed from iteration "
                        f"{it}, the newest checkpoint before it with another config (Bridge "
                        "records no resume point without checkpoint.ckpt_step)"
                    )
                    break
            else:
                _say_if_pruned([i for i in iters if i <= here], run, say)
        jobs.append((start, run, path))
        if start == 0 or start not in iters:
            break
        path = _folder(save, start) / RUN_CONFIG
        run, here = read_run_config(path), start
        say(f"an earlier job saved {path}")
    return jobs[::-1]


def _say_if_pruned(iters: list[int], run: dict[str, Any], say: Callable[[str], None]) -> None:
    """The first job's checkpoints start later than its save_interval: older ones are gone
    (pruned, or the job resumed from elsewhere); say what is assumed."""
    interval = (run.get("checkpoint") or {}).get("save_interval")
    if iters and isinstance(interval, int) and interval > 0 and iters[0] > interval:
        say(
            f"  no checkpoint before iteration {iters[0]} (save_interval {interval}): the job "
            "that saved it is taken to have trained from iteration 1 on the same data"
        )


def _job_key(run: dict[str, Any]) -> tuple:
    return (repr(run.get("dataset")), repr(run.get("train")), repr(run.get("tokenizer")))


def applied_skips(jobs: list[tuple[int, dict[str, Any], Path]]) -> list[dict[str, Any]]:
    """training.applied_skips for the jobs that ran with train.iterations_to_skip."""
    trainer = _TRAINER
    out = []
    for start, run, path in jobs:
        try:
            values = skips_of(run)
        except ForensicsError as err:
            raise ForensicsError(f"{path}: {err}") from None
        later = [v for v in values if v > start]
        if later:
            flag = trainer.flag + "[" + ",".join(map(str, later)) + "]"
            out.append({"trainer": trainer.name, "resume_from": start, "flag": flag})
    return out


def config_from_bridge(
    folder: Path, step: int | None, say: Callable[[str], None], config_from_dict: ConfigFromDict
) -> Any:
    """The run config a Bridge save folder describes, made by `config_from_dict`; `say` gets
    what was read. Jobs that trained on another blend become data stages; any other difference
    is refused."""
    checkpoint, why = pick_bridge_checkpoint(folder, step)
    say(f"read the run's config from {checkpoint / RUN_CONFIG} ({why})")
    jobs = bridge_jobs(checkpoint, say)
    raws = [(start, raw_from_run_config(run, path), path) for start, run, path in jobs]
    last_raw, last_path = raws[-1][1], raws[-1][2]
    stages: list[dict[str, Any]] = []
    for start, raw, path in raws:
        same_run(raw, last_raw, path, last_path)
        if not stages or stages[-1]["blend"] != raw["data"]["blend"]:
            stages.append({"start_iteration": start + 1, "blend": raw["data"]["blend"]})
    if stages[0]["start_iteration"] != 1:
        say(
            f"  iterations 1-{stages[0]['start_iteration'] - 1} were trained by a job whose "
            "checkpoints are gone: its data is taken to be the same"
        )
        stages[0]["start_iteration"] = 1
    raw = last_raw
    if len(stages) > 1:
        data = {k: v for k, v in raw["data"].items() if k != "blend"}
        raw = {**raw, "data": {**data, "stages": stages}}
    skips = applied_skips(jobs)
    if skips:
        raw = {**raw, "training": {**raw["training"], "applied_skips": skips}}
    try:
        config = config_from_dict(raw, base_dir=Path.cwd(), source=None)
    except ForensicsError as err:
        raise ForensicsError(f"{last_path}: {err}") from None
    _check_consumed(checkpoint, config)
    for line in describe(config):
        say(line)
    say(
        "  (data_parallel_size: Bridge does not save it; 1 is assumed, which sizes only the "
        "micro-batch counts of the Megatron-DeepSpeed flags)"
    )
    for skip in skips:
        say(f"  applied: {skip['flag']} (resumed from iteration {skip['resume_from']})")
    return config


def _check_consumed(checkpoint: Path, config: Any) -> None:
    """A train state whose consumed samples are not step x batch (a changed batch size) needs
    the resumes a config states: refused rather than replayed wrong."""
    path = checkpoint / TRAIN_STATE
    if not path.is_file():
        raise ForensicsError(f"{checkpoint}: no {TRAIN_STATE} beside {RUN_CONFIG}")
    state = read_train_state(path)
    training = config.training
    step, consumed = int(state["step"]), int(state.get("consumed_train_samples", -1))
    expected = step * training.global_batch_size
    if consumed != expected:
        raise ForensicsError(
            f"{path}: step {step} consumed {consumed:,} samples, not {expected:,} "
            f"({step} x {training.global_batch_size}): the batch size changed; write a config "
            "with training.resumes (docs/from-checkpoint.md)"
        )
