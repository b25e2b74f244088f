"""Restarts of a streaming run: the state_dict a checkpoint stored, checked against the config,
and the world each part of the run ran on (streaming's elastic resumption).

What StreamingDataset does with a loaded state (mosaicml-streaming 0.13.0, dataset.py at
mosaicml/streaming@89e7bb90): load_state_dict (:816-856) parks it; the next __iter__ reads it in
_resume (:691-750), taking the state's epoch, sample_in_epoch, num_canonical_nodes, shuffle_seed
and initial_physical_nodes, and partitions that epoch from sample_in_epoch on over the resumed
run's world (_get_work :1012-1066, get_partitions with drop_first = sample_in_epoch).

A state saved at the end of an epoch whose size the world does not divide counts the repeated
samples (StreamingDataLoader.state_dict, dataloader.py:63-79: samples yielded x ranks), e.g.
4002 of 4000: the partition is then empty, __iter__ returns at once (:1500-1503), and the
following __iter__ finds the state stale (obj["epoch"] < next epoch, :726) and starts the next
epoch at sample 0. get_partitions refuses only a state further than the epoch plus its padding
(partition/__init__.py:57-61). The replay does the same: the resumed epoch yields what its
partition holds (nothing, at such an epoch end) and the next epoch follows from its start.

On another node count, initial_physical_nodes is kept for the later epochs (a dataset copy that
ran _resume keeps it: the main process without workers, persistent workers). A fresh worker of
a later epoch has none and, where nodes and canonical nodes do not divide, streaming raises; the
replay describes the runs that went on (docs/mosaic-streaming.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dataloaders.errors import ForensicsError
from dataloaders.mosaic.config import MosaicState
from dataloaders.mosaic.order import World


@dataclass(frozen=True)
class Setting:
    """The world and per-device batch a part of the run iterated with (after replication)."""

    world: World
    batch_size: int


def resume_settings(data: Any, global_batch: int, where: str) -> list[Setting]:
    """The setting in force after each of data.resumes: the fields a resume gives, the rest as
    before it. Refused when the global batch changes (iterations would change size)."""
    out = []
    nodes, ranks, workers = data.num_nodes, data.ranks_per_node, data.num_workers
    batch = data.batch_size
    for resume in data.resumes:
        nodes = resume.num_nodes or nodes
        ranks = resume.ranks_per_node or ranks
        workers = workers if resume.num_workers is None else resume.num_workers
        batch = resume.batch_size or batch
        try:
            world = World(nodes, ranks, max(workers, 1)).replicate(data.replication)
        except ValueError as err:
            raise ForensicsError(
                f"{where}data.resumes (iteration {resume.iteration}): {err}"
            ) from None
        if batch * world.num_ranks != global_batch:
            raise ForensicsError(
                f"{where}data.resumes (iteration {resume.iteration}): batch_size {batch} x "
                f"{world.num_ranks} ranks is not the global batch {global_batch}: a restart that "
                "changes the global batch is not replayed"
            )
        out.append(Setting(world, batch))
    return out


def load_state(resume: Any) -> Any:
    """The resume's MosaicState: inline, or read from its state_file (one-line error), a JSON
    file of the state_dict or of Composer's dataset_state holding it under "train"
    (composer/core/state.py:_dataset_state_dict)."""
    if resume.state is not None:
        return resume.state
    path = Path(resume.state_file)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(raw, dict) and "epoch" not in raw and isinstance(raw.get("train"), dict):
            raw = raw["train"]  # Composer's dataset_state: {"train": state_dict, "eval": {}}
        return MosaicState.model_validate(raw)
    except (OSError, ValueError) as err:
        first = str(err).splitlines()[0]
        raise ForensicsError(f"{path}: not a StreamingDataset state_dict ({first})") from None


def check_state(
    state: Any, *, plan: Any, data: Any, start: World, setting: Setting, where: str
) -> None:
    """The state must describe this run: the seed and canonical nodes the config gives (the
    resumed run takes the state's, so a mismatch means another run), the initial world the
    config starts on, and a position the library accepts."""
    if state.shuffle_seed != plan.shuffle_seed:
        raise ForensicsError(
            f"{where}the checkpoint's shuffle_seed is {state.shuffle_seed}, the config says "
            f"{plan.shuffle_seed}: the resumed run used the checkpoint's, so the config "
            "does not describe this run"
        )
    if state.num_canonical_nodes != plan.num_canonical_nodes:
        given = "" if data.num_canonical_nodes else " (streaming's default)"
        raise ForensicsError(
            f"{where}the checkpoint's num_canonical_nodes is {state.num_canonical_nodes}, "
            f"the config gives {plan.num_canonical_nodes}{given}: set "
            "data.num_canonical_nodes to the run's"
        )
    if state.initial_physical_nodes not in (None, start.num_nodes):
        raise ForensicsError(
            f"{where}the run started on {state.initial_physical_nodes} nodes and the config "
            f"gives {start.num_nodes}: set data.num_nodes to the nodes the run started on and "
            "give the resumed world in this resume's num_nodes"
        )
    world_size = setting.world.num_ranks
    padded = plan.epoch_size + world_size - plan.epoch_size % world_size
    if state.sample_in_epoch > padded:
        raise ForensicsError(
            f"{where}sample_in_epoch {state.sample_in_epoch} is beyond the epoch "
            f"({plan.epoch_size} samples, {padded} with the repeats that even it out over "
            f"{world_size} ranks): streaming refuses this state"
        )
