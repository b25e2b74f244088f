"""torchtitan's saved dataloader state, read from its checkpoint folder without running any of
its code.

torchtitan 0.3.0 saves `{"dataloader": loader, ...}` with torch.distributed.checkpoint
(components/checkpointer/dcp.py:151-158, :459-464 -> `dcp.save`, :310) into `<folder>/step-N`
(`_create_checkpoint_id`, :686-690). DCP calls the loader's `state_dict()`,
`{"dp_rank_<r>": pickle.dumps(StatefulDataLoader.state_dict()), "world_size": W}`
(components/dataloader.py:140-147), so the checkpoint holds the non-tensor entries
`dataloader.dp_rank_<r>` (one per DP rank, each in its rank's shard) and `dataloader.world_size`.
Each is read through dataloaders.safe_pickle: the `.metadata` by its allow-list unpickler, the
entry's `torch.save` bytes by torch's weights-only reader, and the inner pickle by the
allow-list unpickler with nothing allowed beyond plain data (`TORCHTITAN_LOADER_STATE`).

The loader's state is torchdata's (`dataset_state` is the dataset's own `state_dict()`):
- HuggingFaceTextDataset (text_datasets.py:220-235): `inputs_buffer`, `labels_buffer`,
  `positions_buffer`, and `sample_idx` + `epoch` (map-style) or `data`, the HF IterableDataset's
  state_dict (streaming);
- InterleavedDataset (interleaved.py:136-141): `rng_state` (random.Random.getstate()) and
  `sources` {index: that source's state}.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dataloaders.errors import ForensicsError
from dataloaders.safe_pickle import (
    TORCHTITAN_LOADER_STATE,
    dcp_object,
    load_pickle_bytes,
    read_dcp_metadata,
)

STEP_FOLDER = re.compile(r"step-(\d+)")  # dcp.py:666, `_find_load_step`'s pattern
WHAT = "a torchtitan dataloader state"


@dataclass(frozen=True)
class SourceState:
    """One source's saved position on one rank."""

    inputs_buffer: list[int]
    epoch: int | None  # map-style: the saved epoch; streaming: None (the data state has it)
    sample_idx: int | None  # map-style: documents of the epoch read
    data: dict[str, Any] | None  # streaming: the IterableDataset's state_dict


@dataclass(frozen=True)
class RankState:
    """A DP rank's saved loader: its sources' states, the interleaver's RNG state (None for
    a single source), and the batches it had yielded (torchdata's `_num_yielded`)."""

    sources: list[SourceState]
    rng_state: tuple | None
    batches_yielded: int | None


def _source(state: Any, where: str) -> SourceState:
    if not isinstance(state, dict) or not isinstance(state.get("inputs_buffer"), list):
        raise ForensicsError(f"{where}: not a HuggingFaceTextDataset state (no inputs_buffer)")
    buffer = state["inputs_buffer"]
    if not all(isinstance(t, int) for t in buffer):
        raise ForensicsError(f"{where}: inputs_buffer holds something other than token ids")
    if "data" in state:
        if not isinstance(state["data"], dict):
            raise ForensicsError(f"{where}: its streaming `data` state is not a dict")
        return SourceState(buffer, None, None, state["data"])
    idx, epoch = state.get("sample_idx"), state.get("epoch", 0)  # epoch: :198-201's default
    if not isinstance(idx, int) or not isinstance(epoch, int) or idx < 0 or epoch < 0:
        raise ForensicsError(f"{where}: no sample_idx/epoch counters (a dataset torchtitan 0.3.0 "
                             "does not write)")  # fmt: skip
    return SourceState(buffer, epoch, idx, None)


def _rank(state: Any, where: str) -> RankState:
    if not isinstance(state, dict) or "dataset_state" not in state:
        raise ForensicsError(f"{where}: not a StatefulDataLoader state (no dataset_state)")
    dataset = state["dataset_state"]
    yielded = state.get("_num_yielded")
    yielded = yielded if isinstance(yielded, int) else None
    if isinstance(dataset, dict) and "rng_state" in dataset and "sources" in dataset:
        rng = dataset["rng_state"]
        sources = dataset["sources"]
        if not isinstance(rng, tuple) or not isinstance(sources, dict):
            raise ForensicsError(f"{where}: an InterleavedDataset state without its rng_state")
        order = sorted(sources)
        if order != list(range(len(order))):
            raise ForensicsError(f"{where}: interleaved sources are numbered {order}")
        states = [_source(sources[i], f"{where} source {i}") for i in order]
        return RankState(states, rng, yielded)
    return RankState([_source(dataset, where)], None, yielded)


def read_loader_states(step_dir: Path) -> list[RankState]:
    """Every DP rank's loader state saved in the torchtitan checkpoint folder `step_dir`
    (`.../step-N`), rank 0 first."""
    step_dir = Path(step_dir)
    meta_path = step_dir / ".metadata"
    if not meta_path.is_file():
        raise ForensicsError(f"{step_dir}: no .metadata (not a torchtitan DCP checkpoint folder)")
    metadata = read_dcp_metadata(meta_path)
    keys = set(metadata.state_dict_metadata)
    if "dataloader.world_size" not in keys:
        raise ForensicsError(
            f"{step_dir}: holds no dataloader state (a model-only checkpoint: torchtitan's last "
            "save keeps the model only by default, checkpoint.last_save_model_only)"
        )
    world = dcp_object(step_dir, metadata, "dataloader.world_size", [])
    if not isinstance(world, int) or world < 1:
        raise ForensicsError(f"{step_dir}: dataloader.world_size is {world!r}, not a rank count")
    ranks = []
    for rank in range(world):
        key = f"dataloader.dp_rank_{rank}"
        raw = dcp_object(step_dir, metadata, key, [])
        if not isinstance(raw, bytes):
            raise ForensicsError(f"{step_dir}: {key} is a {type(raw).__name__}, not a pickle")
        where = f"{step_dir}: {key}"
        ranks.append(_rank(load_pickle_bytes(raw, TORCHTITAN_LOADER_STATE, where, WHAT), where))
    return ranks


def step_folder(folder: Path, step: int | None) -> Path:
    """The checkpoint folder of `step` (None: the latest) given the step folder itself, the
    checkpoint folder holding `step-N` folders, or the dump folder holding `checkpoint/`
    (torchtitan's default checkpoint.folder, components/checkpointer/base.py:229). A step folder
    counts when it holds a DCP `.metadata` (dcp.py:674-682)."""
    folder = Path(folder)
    if STEP_FOLDER.fullmatch(folder.name) and (folder / ".metadata").is_file():
        if step is not None and int(folder.name.split("-")[1]) != step:
            raise ForensicsError(f"{folder}: is not the checkpoint of step {step}")
        return folder
    for parent in (folder, folder / "checkpoint"):
        steps = {
            int(m.group(1)): p
            for p in (parent.iterdir() if parent.is_dir() else [])
            if (m := STEP_FOLDER.fullmatch(p.name)) and (p / ".metadata").is_file()
        }
        if steps:
            if step is None:
                return steps[max(steps)]
            if step in steps:
                return steps[step]
            raise ForensicsError(
                f"{parent}: no step-{step} checkpoint (it has steps {sorted(steps)})"
            )
    raise ForensicsError(f"{folder}: no torchtitan checkpoint (step-N folders with a .metadata)")


def saved_loader_state(folder: Path, step: int | None = None) -> tuple[int, list[RankState]]:
    """(step, every rank's loader state) of a torchtitan save folder: the hook a save-folder
    reader calls (the family's answer to "what did this run's loader save at step N")."""
    path = step_folder(folder, step)
    return int(path.name.split("-")[1]), read_loader_states(path)


def recognises_save(folder: Path) -> bool:
    """Whether `folder` is a torchtitan save (a step folder, a checkpoint folder or a dump
    folder, as `step_folder` takes them) whose latest step holds a dataloader state: its
    `.metadata` is read (allow-list unpickler), nothing else."""
    try:
        path = step_folder(folder, None)
        metadata = read_dcp_metadata(path / ".metadata")
    except ForensicsError:
        return False
    return "dataloader.world_size" in metadata.state_dict_metadata


def resume_entry(folder: Path, step: int | None = None) -> dict[str, Any]:
    """The `data.resumes` entry of a restart from this save (`{iteration: N, checkpoint:
    .../step-N}`), its loader state checked readable. A torchtitan save names no data files
    (its datasets' loaders are code in its dataset table; the optional job-config JSON,
    debug.save_config_file, holds only their names and paths), so the `data:` section comes from
    the user's config and the save folder gives the restarts."""
    path = step_folder(folder, step)
    read_loader_states(path)
    return {"iteration": int(path.name.split("-")[1]), "checkpoint": str(path)}
