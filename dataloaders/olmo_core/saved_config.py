"""The run config of an OLMo-core run, read from what the trainer wrote into its save folder.

OLMo-core's ConfigSaverCallback writes the experiment's config (`config.as_config_dict()`, with
`dataset`, `data_loader` and `trainer` entries in the library's scripts) as `config.json` into
every checkpoint directory, and the dataset's resolved paths as `data_paths.txt` beside it
(ai2-olmo-core 3.0.0 olmo_core/train/callbacks/config_saver.py:57-75 `post_checkpoint_saved`;
the library's scripts set `.config = config.as_config_dict()`, allenai/OLMo-core
fa6c5014c9f6e9ee789da2d9c20d5126fee8df0d src/examples/llm/train.py:126-127). Checkpoints are the
`step{N}` folders of the save folder (the trainer's `checkpoints`,
dataloaders.trainers.olmo_core), each with the trainer state `train/rank0.pt`
(train/checkpoint.py:431), whose `world_size` and `max_steps` entries come from
`Trainer.state_dict()` (train/trainer.py:986-1000).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dataloaders.errors import ForensicsError
from dataloaders.family_base import ConfigFromDict
from dataloaders.olmo_core.remote import SCHEMES
from dataloaders.olmo_core.state import load_trainer_state
from dataloaders.storage.urls import scheme_of, shown
from dataloaders.trainers.olmo_core import OLMoCore

CONFIG_NAME = "config.json"
DATA_PATHS_NAME = "data_paths.txt"
_TRAINER = OLMoCore()
_REMOTE = ("s3://", "gs://", "r2://", "weka://", "http://", "https://", "hf://")
# Model parallelism of TransformerTrainModuleConfig: with any of them the data-parallel size is
# not the world size the trainer state records.
_MODEL_PARALLEL = ("tp_config", "cp_config", "pp_config", "ep_config")


def is_olmo_core_save_folder(folder: Path) -> bool:
    """An OLMo-core save folder, or one of its `stepN/` checkpoints: OLMo-core's
    ConfigSaverCallback writes the experiment's config.json into each step folder
    (ai2-olmo-core 3.0.0, olmo_core/train/callbacks/config_saver.py:57-75)."""
    named = _TRAINER.checkpoint_iteration  # OLMo-core's `stepN` folder names
    if named(folder.name) is not None and (folder / CONFIG_NAME).is_file():
        return True
    return any(
        p.is_dir() and named(p.name) is not None and (p / CONFIG_NAME).is_file()
        for p in folder.iterdir()
    )


def saved_run_config(
    folder: Path, say: Callable[[str], None], config_from_dict: ConfigFromDict
) -> Any:
    """The run from an OLMo-core save folder (made a run config by `config_from_dict`); `say`
    gets what was read. Relative data paths resolve against the current directory, as they
    did for the training job (the same rule as Megatron's saved args)."""
    raw = run_config_from_save_folder(folder)
    say(f"read the experiment's config and data paths from {folder}/step*/{CONFIG_NAME}")
    data = raw.get("data", {})
    say(f"  dp_world_size {data.get('dp_world_size')}, seed {data.get('seed')}")
    say(f"  checkpoints {raw.get('checkpoints')}")
    return config_from_dict(raw, base_dir=Path.cwd(), source=None)


def _step_dir(save_folder: Path, step: int) -> Path:
    """The checkpoint folder of `step` in `save_folder`, as OLMo-core names it."""
    return save_folder / _TRAINER.checkpoint_name(step)


def _saved_steps(save_folder: Path) -> list[int]:
    """The steps of the checkpoint folders that hold a trainer state folder (`train/`), sorted.
    Not the trainer's `checkpoints` (OLMo-core's rule for a checkpoint to load): the run is read
    from the trainer state, and a folder whose `train/rank0.pt` is missing is refused by name
    when read, not passed over for an older one."""
    steps = (_TRAINER.checkpoint_iteration(p.name) for p in save_folder.iterdir())
    return sorted(
        s for s in steps if s is not None and (_step_dir(save_folder, s) / "train").is_dir()
    )


def _section(config: dict[str, Any], key: str, where: Path) -> dict[str, Any]:
    value = config.get(key)
    if isinstance(value, list):  # olmo_core/internal/experiment.py:100, the composable API
        raise ForensicsError(
            f"{where}: {key} is a list of instance sources (OLMo-core's composable data API); "
            "only NumpyFSLDatasetConfig runs are replayed"
        )
    if not isinstance(value, dict):
        raise ForensicsError(f"{where}: no {key!r} section (not an OLMo-core experiment config)")
    return value


def _need(section: dict[str, Any], key: str, where: Path, name: str) -> Any:
    value = section.get(key)
    if value is None:
        raise ForensicsError(f"{where}: {name}.{key} is not set; write a config for this run")
    return value


def _whole(section: dict[str, Any], key: str, where: Path, name: str, least: int = 0) -> Any:
    """`section[key]` when it is a whole number >= `least` (or absent: None); anything else (a
    string, a float, a bool) is refused naming the field, before it reaches arithmetic."""
    value = section.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ForensicsError(
            f"{where}: {name}.{key} is {value!r}; the trainer writes a whole number"
            + (f" of at least {least}" if least else "")
        )
    return value


def _local(path: str, where: Path) -> str:
    """A saved token-file path as the config names it: a URL in a scheme OLMo-core's io reads
    stays a URL (read through the storage layer, dataloaders/olmo_core/remote.py)."""
    if path.startswith(_REMOTE) and scheme_of(path) not in SCHEMES:
        raise ForensicsError(
            f"{where}: the run read token files from {shown(path)}, a scheme this tool does "
            f"not read ({', '.join(SCHEMES)} are); copy them locally and write a config"
        )
    return path.replace("file://", "")


def _sources(dataset: dict[str, Any], step_dir: Path) -> dict[str, Any]:
    """The data fields that name the token files: data_paths.txt when the run wrote it (the
    files the dataset read, in its order), else the saved paths / globs / permutation."""
    where = step_dir / CONFIG_NAME
    listing = step_dir / DATA_PATHS_NAME
    name = str(dataset.get("mix") or "train")
    if listing.is_file():
        files = [p for p in listing.read_text(encoding="utf-8").splitlines() if p.strip()]
        if not files:
            raise ForensicsError(f"{listing}: lists no token files")
        return {"sources": [{"name": name, "paths": [_local(p, listing) for p in files]}]}
    if dataset.get("mix") is not None:
        raise ForensicsError(
            f"{where}: the run reads data mix {dataset['mix']!r} and the folder has no "
            f"{DATA_PATHS_NAME}; write a config with data.mix_file (the mix's listing)"
        )
    paths = [_local(str(p), where) for p in _need(dataset, "paths", where, "dataset")]
    out: dict[str, Any] = {"sources": [{"name": name, "paths": paths}]}
    if dataset.get("expand_glob"):
        out["expand_glob"] = True
    if dataset.get("source_permutation_seed") is not None:
        out["source_permutation_seed"] = dataset["source_permutation_seed"]
    return out


def _dataset_fields(dataset: dict[str, Any], where: Path) -> dict[str, Any]:
    """sequence length, token ids, dtype and instance filter of a NumpyFSLDatasetConfig."""
    kind = str(dataset.get("_CLASS_", ""))
    if not kind.endswith(".NumpyFSLDatasetConfig"):
        raise ForensicsError(
            f"{where}: dataset is {kind or 'not a NumpyFSLDatasetConfig'}; only "
            "NumpyFSLDatasetConfig runs are replayed"
        )
    if dataset.get("source_mixture_config") is not None:
        raise ForensicsError(f"{where}: dataset.source_mixture_config runs are not replayed")
    tokenizer = _section(dataset, "tokenizer", where)
    out: dict[str, Any] = {"format": "olmo-core"}
    _need(dataset, "sequence_length", where, "dataset")
    out["sequence_length"] = _whole(dataset, "sequence_length", where, "dataset", least=1)
    for key in ("vocab_size", "eos_token_id", "pad_token_id"):
        _need(tokenizer, key, where, "dataset.tokenizer")
        out[key] = _whole(tokenizer, key, where, "dataset.tokenizer")
    if tokenizer.get("bos_token_id") is not None:
        out["bos_token_id"] = _whole(tokenizer, "bos_token_id", where, "dataset.tokenizer")
    if dataset.get("max_target_sequence_length") is not None:
        out["max_target_sequence_length"] = _whole(
            dataset, "max_target_sequence_length", where, "dataset", least=1
        )
    if dataset.get("dtype") is not None:
        out["dtype"] = dataset["dtype"]
    if dataset.get("generate_doc_lengths"):
        out["generate_doc_lengths"] = True
    flt = dataset.get("instance_filter_config")
    if flt is not None:
        keys = ("repetition_max_period", "repetition_min_period", "repetition_max_count")
        out["instance_filter"] = {k: flt[k] for k in keys if k in flt}
    return out


def _trainer_state(step_dir: Path) -> dict[str, Any]:
    path = step_dir / "train" / "rank0.pt"
    if not path.is_file():
        raise ForensicsError(f"{path}: trainer state not found")
    state = load_trainer_state(path)
    if not isinstance(state, dict):
        raise ForensicsError(f"{path}: expected the trainer's state mapping")
    return state


def _dp_world_size(config: dict[str, Any], state: dict[str, Any], where: Path) -> int:
    module = config.get("train_module")
    if isinstance(module, dict):
        used = [k for k in _MODEL_PARALLEL if module.get(k) is not None]
        if used:
            raise ForensicsError(
                f"{where}: train_module.{used[0]} is set, so the data-parallel size is not the "
                "world size; write a config with data.dp_world_size"
            )
    world = state.get("world_size")
    if not isinstance(world, int) or world <= 0:
        raise ForensicsError(f"{where}: the trainer state records no world_size")
    return world


def _train_iters(trainer: dict[str, Any], state: dict[str, Any], batch: int, where: Path) -> int:
    """Trainer.max_steps as the trainer state recorded it, else from trainer.max_duration."""
    if isinstance(state.get("max_steps"), int):
        return int(state["max_steps"])
    duration = trainer.get("max_duration") or {}
    unit, value = duration.get("unit"), duration.get("value")
    if unit == "steps" and isinstance(value, int):
        return value
    if unit == "tokens" and isinstance(value, int):
        return -(-value // batch)  # trainer.py:541-545, ceil(tokens / tokens per batch)
    raise ForensicsError(f"{where}: trainer.max_duration {duration!r} gives no step count")


def _find_step_dirs(save_folder: Path) -> tuple[Path, list[int]]:
    """The save folder and its checkpoint steps; a `step{N}` folder stands for its parent."""
    if not save_folder.is_dir():
        raise ForensicsError(f"{save_folder}: save folder not found")
    named_step = _TRAINER.checkpoint_iteration(save_folder.name) is not None
    if named_step and (save_folder / CONFIG_NAME).is_file():
        save_folder = save_folder.parent
    steps = _saved_steps(save_folder)
    with_config = [s for s in steps if (_step_dir(save_folder, s) / CONFIG_NAME).is_file()]
    if not with_config:
        raise ForensicsError(
            f"{save_folder}: no step{{N}} checkpoint with {CONFIG_NAME} (OLMo-core's "
            "ConfigSaverCallback writes it); write a config for this run"
        )
    return save_folder, steps


def _read_config(step_dir: Path) -> dict[str, Any]:
    where = step_dir / CONFIG_NAME
    try:
        config = json.loads(where.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise ForensicsError(f"{where}: not valid JSON ({err})") from None
    if not isinstance(config, dict):
        raise ForensicsError(f"{where}: expected the experiment config mapping")
    return config


def _order_fields(config: dict[str, Any], step_dir: Path) -> tuple[dict[str, Any], list[Any]]:
    """(the data fields that decide the order, but the token files; the token files)."""
    where = step_dir / CONFIG_NAME
    dataset = _section(config, "dataset", where)
    loader = _section(config, "data_loader", where)
    kind = str(loader.get("_CLASS_", "NumpyDataLoaderConfig"))
    if not kind.endswith("NumpyDataLoaderConfig"):
        raise ForensicsError(f"{where}: data_loader is {kind}; only NumpyDataLoaderConfig runs")
    data = _dataset_fields(dataset, where)
    files = _sources(dataset, step_dir)
    data.update({k: v for k, v in files.items() if k != "sources"})
    for key in ("global_batch_size", "seed"):
        _need(loader, key, where, "data_loader")
        data[key] = _whole(loader, key, where, "data_loader", least=1 if key != "seed" else 0)
    work_dir = loader.get("work_dir") or dataset.get("work_dir")
    if work_dir is not None:
        data["work_dir"] = str(work_dir)
    return data, files["sources"]


def _stages(save_folder: Path, steps: list[int]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The newest checkpoint's data fields, and the data stages: a checkpoint whose token files
    differ from the one before it was saved by a job restarted on other data (OLMo-core's
    ignore_fingerprint_mismatch) from the newest checkpoint before it, so the replay continues
    over the new files from the step after that one. Any other change is refused."""
    saved = [s for s in steps if (_step_dir(save_folder, s) / CONFIG_NAME).is_file()]
    data: dict[str, Any] = {}
    stages: list[dict[str, Any]] = []
    before = None
    for step in saved:
        step_dir = _step_dir(save_folder, step)
        fields, sources = _order_fields(_read_config(step_dir), step_dir)
        if stages and fields != data:
            changed = sorted(k for k in set(fields) | set(data) if fields.get(k) != data.get(k))
            raise ForensicsError(
                f"{step_dir / CONFIG_NAME}: data.{changed[0]} is {fields.get(changed[0])!r}, "
                f"{data.get(changed[0])!r} in {_TRAINER.checkpoint_name(before)}; write a config "
                "for this run"
            )
        if not stages or sources != stages[-1]["sources"]:
            stages.append({"after": before, "sources": sources})
        data, before = fields, step
    return data, stages


def run_config_from_save_folder(save_folder: Path) -> dict[str, Any]:
    """Our run-config mapping (the shape of configs/example-olmo-core.yaml) of the run whose
    checkpoints are in `save_folder`, from its checkpoints' config.json and data_paths.txt and
    the newest trainer state; anything needed and missing is a one-line ForensicsError."""
    save_folder, steps = _find_step_dirs(Path(save_folder))
    data, stages = _stages(save_folder, steps)
    newest = max(s for s in steps if (_step_dir(save_folder, s) / CONFIG_NAME).is_file())
    step_dir = _step_dir(save_folder, newest)
    where = step_dir / CONFIG_NAME
    config = _read_config(step_dir)
    trainer = config.get("trainer") if isinstance(config.get("trainer"), dict) else {}
    state = _trainer_state(step_dir)
    data["dp_world_size"] = _dp_world_size(config, state, where)
    data["sources"] = stages[0]["sources"]
    resumes = []
    for number, stage in enumerate(stages[1:], start=1):
        after = stage["after"]
        named = [{**src, "name": f"{src['name']}-stage{number}"} for src in stage["sources"]]
        state_file = _step_dir(save_folder, after) / "train" / "rank0.pt"
        resumes.append({"iteration": after + 1, "state": str(state_file), "sources": named})
    if resumes:
        data["resumes"] = resumes
    seq = int(data["sequence_length"])
    if not isinstance(data["global_batch_size"], int) or data["global_batch_size"] % seq:
        raise ForensicsError(
            f"{where}: data_loader.global_batch_size {data['global_batch_size']!r} is not a "
            f"whole number of {seq}-token instances"
        )
    batch = data["global_batch_size"] // seq
    return {
        "name": str(config.get("run_name") or save_folder.name),
        "data": data,
        "training": {
            "global_batch_size": batch,
            "train_iters": _train_iters(trainer, state, data["global_batch_size"], where),
            "trainer": OLMoCore.name,
        },
        "checkpoints": steps,
        "checkpoint_dir": str(save_folder),
    }
