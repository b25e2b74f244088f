"""A run config from the training job's own Megatron arguments.

What a user has at hand after a spike is the launch command. This reads the data and schedule
flags of Megatron-LM's `pretrain_gpt.py` and ignores the hundreds of others:

    --data-path [W1] P1 [W2] P2 ...   (or --data-args-path FILE holding that list)
    --split --seed --seq-length --global-batch-size --micro-batch-size
    --rampup-batch-size START INCR SAMPLES --train-iters --train-samples
    --data-cache-path --save/--load (checkpoint directory) --mid-level-dataset-surplus
    --tokenizer-type --tokenizer-model --vocab-file --merge-file --vocab-size
    --tiktoken-pattern --tiktoken-num-special-tokens --tokenizer-special-tokens
    --tokenizer-sentencepiece-legacy --legacy-tokenizer --vocab-extra-ids

Arguments that change the order in a way the replay does not model are refused in one line
(UNSUPPORTED, and --dataloader-type other than single): a replay without them would name other
batches. Megatron's defaults apply when a flag is absent (seed 1234, split "969, 30, 1").
The manifest of prefix P defaults to `P.manifest.parquet` when that file exists.
`--megatron-args` takes the string, or `@FILE` to read it from a file (newlines and
backslash-continuations are fine).
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

from dataloaders.errors import ForensicsError
from dataloaders.family_base import ConfigFromDict
from dataloaders.megatron.config import MegatronData
from dataloaders.regular_files import check_input_path
from dataloaders.run_sections import MEGATRON_TOKENIZER_TYPES, TokenizerArgs
from dataloaders.storage.urls import is_remote

UNSUPPORTED = {
    "--train-data-path": "per-split data paths",
    "--per-split-data-args-path": "per-split data paths",
    "--mock-data": "mock data",
    "--step-batch-size-schedule": "a step batch-size schedule",
    # Arguments that change which samples a launch reads or their order, which the replay does
    # not model (NVIDIA/Megatron-LM d98e8a64dd): refused, since a replay without them is
    # silently wrong. Cited as file:line of that commit.
    "--phase-transition-iterations": "phases: each sizes its own dataset and restarts the "
    "consumed-samples count (arguments.py:3263, training.py:5445-5450 and 5495-5497)",
    "--fim-data": "the FIM dataset rewrites each sample's tokens (arguments.py:3355, "
    "pretrain_gpt.py:434-452 and 474-475)",
    "--sft": "the SFT dataset packs conversations (arguments.py:3773, pretrain_gpt.py:468-469)",
    "--hybrid-context-parallel": "the hybrid context-parallel sampler regroups samples "
    "(datasets/data_samplers.py:54-62 and 190)",
    "--per-dataset-sequences-path": "sequence counts read from a file instead of the .idx files "
    "(arguments.py:3291, pretrain_gpt.py:400-402)",
}

# --dataloader-type (arguments.py:2936-2938; None means single, arguments.py:1254-1255): only
# `single` (MegatronPretrainingSampler) is replayed. `cyclic` builds
# MegatronPretrainingRandomSampler, a new random order per epoch seeded with the epoch number;
# `external` hands the dataset to the user's own loader (datasets/data_samplers.py:39-82).
DATALOADER_TYPES = ("single", "cyclic", "external")


# The launch flags RunConfig.tokenizer_args carries, under their `args` names (each field of
# TokenizerArgs is one).
TOKENIZER_ARGS: tuple[str, ...] = tuple(TokenizerArgs.model_fields)
# The `data.format` the arguments describe.
MEGATRON_FORMAT: str = MegatronData.model_fields["format"].default


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would exit(2) with usage text
        raise ForensicsError(f"--megatron-args: {message}")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(add_help=False, allow_abbrev=False)
    p.add_argument("--data-path", nargs="+")
    p.add_argument("--data-args-path")
    p.add_argument("--split", default="969, 30, 1")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--seq-length", type=int)
    p.add_argument("--global-batch-size", type=int)
    p.add_argument("--micro-batch-size", type=int, default=1)
    p.add_argument("--rampup-batch-size", nargs=3, type=int)
    p.add_argument("--train-iters", type=int)
    p.add_argument("--train-samples", type=int)
    p.add_argument("--data-cache-path")
    p.add_argument("--object-storage-cache-path")
    p.add_argument("--tokenizer-model")
    p.add_argument("--tokenizer-type")
    p.add_argument("--tiktoken-pattern")
    p.add_argument("--tiktoken-num-special-tokens", type=int, default=1000)
    p.add_argument("--tokenizer-special-tokens", nargs="+")
    p.add_argument("--tokenizer-sentencepiece-legacy", action="store_true")
    p.add_argument("--legacy-tokenizer", action="store_true")
    p.add_argument("--vocab-size", type=int)
    p.add_argument("--vocab-extra-ids", type=int, default=0)
    p.add_argument("--vocab-file")
    p.add_argument("--merge-file")
    p.add_argument("--save")
    p.add_argument("--load")
    p.add_argument("--mid-level-dataset-surplus", type=float, default=0.005)
    p.add_argument("--dataloader-type", choices=DATALOADER_TYPES, default="single")
    return p


def split_megatron_args(text: str) -> list[str]:
    """The argument string (or `@file`) as argv; shell quoting and line continuations allowed."""
    text = text.strip()
    if text.startswith("@"):
        path = Path(text[1:]).expanduser()
        check_input_path(path, "--megatron-args")
        if not path.is_file():
            raise ForensicsError(f"{path}: Megatron arguments file not found")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ForensicsError(f"{path}: not a text file of Megatron arguments") from None
    try:
        return shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as err:
        raise ForensicsError(f"--megatron-args: cannot split the arguments ({err})") from None


def _blend(values: list[str], cwd: Path) -> list[dict[str, Any]]:
    """Megatron's get_blend_from_list: weights and prefixes interleaved, or prefixes alone."""
    weights: list[float] | None = None
    prefixes = values
    if len(values) % 2 == 0:
        try:
            weights = [float(v) for v in values[0::2]]
            prefixes = values[1::2]
        except ValueError:
            weights, prefixes = None, values
    blend = []
    names: dict[str, int] = {}
    for i, raw in enumerate(prefixes):
        if is_remote(raw.strip()):  # s3:// or msc://: placed in the cache by the config
            url = raw.strip()
            name = url.rstrip("/").rsplit("/", 1)[-1]
            if name in names:
                name = "/".join(url.rstrip("/").rsplit("/", 2)[-2:])
            names[name] = i
            remote: dict[str, Any] = {"prefix": url, "name": name}
            if weights is not None:
                remote["weight"] = weights[i]
            blend.append(remote)
            continue
        prefix = (cwd / Path(raw.strip()).expanduser()).resolve()
        name = prefix.name
        if name in names:  # same file name in two folders: keep the names unique
            name = f"{prefix.parent.name}/{prefix.name}"
        names[name] = i
        entry: dict[str, Any] = {"prefix": str(prefix), "name": name}
        if weights is not None:
            entry["weight"] = weights[i]
        manifest = Path(f"{prefix}.manifest.parquet")
        if manifest.is_file():
            entry["manifest"] = str(manifest)
        blend.append(entry)
    return blend


def config_from_megatron_args(
    argv: list[str],
    *,
    config_from_dict: ConfigFromDict,
    cwd: Path | None = None,
    extra_training: dict[str, Any] | None = None,
) -> Any:
    """The run config of Megatron-LM training arguments, made by `config_from_dict` (relative
    paths resolve against `cwd`; `extra_training` adds what a saved Namespace knows beyond the
    flags, e.g. the DP size)."""
    cwd = (cwd or Path.cwd()).resolve()
    raw = raw_config_from_megatron_args(argv, cwd=cwd, extra_training=extra_training)
    return config_from_dict(raw, base_dir=cwd, source=None)


def raw_config_from_megatron_args(
    argv: list[str], *, cwd: Path, extra_training: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The run config mapping (before validation) the arguments describe."""
    for flag, what in UNSUPPORTED.items():
        if any(a == flag or a.startswith(flag + "=") for a in argv):
            raise ForensicsError(f"--megatron-args: {flag} ({what}) is not supported; use a config")
    args, _unknown = _parser().parse_known_args(argv)
    if args.dataloader_type != "single":
        raise ForensicsError(
            f"--megatron-args: --dataloader-type {args.dataloader_type} is not replayed (only "
            "single, Megatron's default: cyclic draws a random order per epoch, external is your "
            "own loader); the replay and skip flags would name other batches"
        )
    data_path = args.data_path
    if args.data_args_path:
        path = (cwd / args.data_args_path).resolve()
        check_input_path(path, "--data-args-path")
        if not path.is_file():
            raise ForensicsError(f"{path}: --data-args-path file not found")
        data_path = path.read_text(encoding="utf-8").split()
    if not data_path:
        raise ForensicsError("--megatron-args: no --data-path (or --data-args-path) given")
    for flag, value in (
        ("--seq-length", args.seq_length),
        ("--global-batch-size", args.global_batch_size),
    ):
        if value is None:
            raise ForensicsError(f"--megatron-args: {flag} is required")
    data: dict[str, Any] = {
        "format": MEGATRON_FORMAT,
        "seed": args.seed,
        "seq_length": args.seq_length,
        "split": args.split,
        "mid_level_dataset_surplus": args.mid_level_dataset_surplus,
        "blend": _blend(data_path, cwd),
    }
    if args.data_cache_path:
        data["cache_path"] = args.data_cache_path
    if args.object_storage_cache_path:
        data["object_storage_cache_path"] = str((cwd / args.object_storage_cache_path).resolve())
    training: dict[str, Any] = {
        "global_batch_size": args.global_batch_size,
        "micro_batch_size": args.micro_batch_size,
        **(extra_training or {}),
    }
    for key in ("train_iters", "train_samples"):
        if getattr(args, key) is not None:
            training[key] = getattr(args, key)
    if args.rampup_batch_size:
        training["rampup_batch_size"] = list(args.rampup_batch_size)
    raw: dict[str, Any] = {"data": data, "training": training}
    if args.tokenizer_model:
        raw["tokenizer"] = args.tokenizer_model
    elif args.vocab_file:  # GPT2BPETokenizer: --vocab-file vocab.json --merge-file merges.txt
        raw["tokenizer"] = args.vocab_file
        if args.merge_file:
            raw["tokenizer_merges"] = args.merge_file
    if args.tokenizer_type in MEGATRON_TOKENIZER_TYPES:
        raw["tokenizer_args"] = {key: getattr(args, key) for key in TOKENIZER_ARGS}
    checkpoint_dir = args.save or args.load
    if checkpoint_dir:
        raw["checkpoint_dir"] = checkpoint_dir
    return raw


def args_to_argv(args: argparse.Namespace) -> list[str]:
    """A saved Megatron `args` Namespace as the launch flags this module reads (each flag this
    parser knows, plus the refused ones, from the attribute of the same name)."""
    argv: list[str] = []
    flags = [a.option_strings[0] for a in _parser()._actions] + list(UNSUPPORTED)
    for flag in flags:
        value = getattr(args, flag[2:].replace("-", "_"), None)
        if value is None or value is False or value == []:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, list | tuple):
            argv += [flag, *(str(v) for v in value)]
        else:
            argv += [flag, str(value)]
    return argv
