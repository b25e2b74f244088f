"""Megatron-LM checkpoints written the way its trainer writes them, around a real `args`.

`args` is the Namespace Megatron-LM's own parser made (tests/oracles/megatron_lm_args.pt, see
tests/oracles/megatron_args_dump.py), with the run's paths and sizes set on it. The state dict has
generate_state_dict's keys (NVIDIA/Megatron-LM core_v0.16.1 megatron/training/checkpointing.py;
`args`, `checkpoint_version` 3.0, `iteration`, `model`, `rng_state` from get_rng_state,
`opt_param_scheduler`, `num_floating_point_operations_so_far`). Legacy `torch` checkpoints are
`torch.save`d to iter_N/mp_rank_00/model_optim_rng.pt; `torch_dist` ones go through
megatron-core's own `save_preprocess` and common save strategy, which write iter_N/common.pt
exactly as `dist_checkpointing.save` does before the sharded tensors (whose writer needs CUDA).
"""

from __future__ import annotations

import argparse
import copy
import random
from pathlib import Path

import numpy as np
import torch

ARGS_FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "oracles" / "megatron_lm_args.pt"


def megatron_args(**values: object) -> argparse.Namespace:
    """The saved Namespace from Megatron-LM's parser, with `values` set on it."""
    args = copy.deepcopy(torch.load(ARGS_FIXTURE, weights_only=False)["args"])
    for key, value in values.items():
        setattr(args, key, value)
    return args


def _state(args: argparse.Namespace, iteration: int) -> dict:
    rng = {
        "random_rng_state": random.getstate(),
        "np_rng_state": np.random.get_state(),
        "torch_rng_state": torch.get_rng_state(),
        "cuda_rng_state": torch.zeros(16, dtype=torch.uint8),  # no GPU here: the same shape
        "rng_tracker_states": {},
    }
    return {
        "args": args,
        "checkpoint_version": 3.0,
        "iteration": iteration,
        "model": {"embedding.word_embeddings.weight": torch.zeros(8, 4)},
        "rng_state": [rng],
        "opt_param_scheduler": {"max_lr": 1e-4, "num_steps": iteration * 8},
        "num_floating_point_operations_so_far": 0,
    }


def write_legacy(save: Path, iteration: int, args: argparse.Namespace) -> Path:
    """iter_N/mp_rank_00/model_optim_rng.pt and the tracker file."""
    path = save / f"iter_{iteration:07d}" / "mp_rank_00" / "model_optim_rng.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(_state(args, iteration), path)
    (save / "latest_checkpointed_iteration.txt").write_text(str(iteration))
    return path


def write_torch_dist(save: Path, iteration: int, args: argparse.Namespace) -> Path:
    """iter_N/common.pt through megatron-core's own save_preprocess and common strategy."""
    import torch.distributed as dist
    from megatron.core.dist_checkpointing import ShardedTensor
    from megatron.core.dist_checkpointing.serialization import (
        get_default_save_common_strategy,
        save_preprocess,
    )

    if not dist.is_initialized():
        dist.init_process_group(
            "gloo", init_method=f"file://{save.parent / '.pg'}", rank=0, world_size=1
        )
    state = _state(args, iteration)
    weight = state["model"].pop("embedding.word_embeddings.weight")
    state["model"]["embedding.word_embeddings.weight"] = ShardedTensor.from_rank_offsets(
        "embedding.word_embeddings.weight", weight, replica_id=0
    )
    del state["rng_state"]  # torch_dist saves it as a ShardedObject, outside common.pt
    folder = save / f"iter_{iteration:07d}"
    folder.mkdir(parents=True, exist_ok=True)
    _sharded, common = save_preprocess(state, True, None)
    get_default_save_common_strategy().save_common(common, folder)
    (save / "latest_checkpointed_iteration.txt").write_text(str(iteration))
    return folder / "common.pt"
