"""Oracle: megatron-core 0.16.1 builds a tiny GPTModel on CPU, saves it as Megatron-LM does (legacy
`mp_rank_XX/model_optim_rng.pt` and `torch_dist`), and writes its own per-token losses.

Run as `python megatron_gpt.py OUT CONFIG_JSON`; spawns tensor-parallel ranks (gloo). With
pipeline_model_parallel_size > 1 a second set of tensor x pipeline ranks loads the torch_dist
checkpoint with megatron-core's own resharding loader and saves that topology too (legacy_pp/,
torch_dist_pp/): the same weights, so the same reference losses. CONFIG_JSON
holds the Megatron-LM argument names (num_layers, hidden_size, swiglu, normalization, ...). Writes
OUT/legacy/iter_0000010/mp_rank_XX/model_optim_rng.pt, OUT/torch_dist/iter_0000010/ and
OUT/tokens.npy + OUT/losses.npy (megatron-core's own forward with labels: float32[n, L]).

Five CPU shims, none of which touches the arithmetic (megatron-core 0.16.1 assumes CUDA here):
- `torch.cuda.current_device` returns the CPU device: RotaryEmbedding.get_emb moves inv_freq to
  it (megatron/core/models/common/embeddings/rotary_pos_embedding.py:160-162);
- `torch.cuda.synchronize` is a no-op: the torch_dist writer calls it before copying tensors
  (megatron/core/dist_checkpointing/strategies/filesystem_async.py:230); nothing runs on a GPU;
- the torch_dist writer's memory logging reads 0: it needs psutil, which megatron-core does not
  declare (filesystem_async.py:636-642, called only for a debug log line);
- the causal mask is passed explicitly: get_default_causal_mask allocates on "cuda"
  (megatron/core/transformer/utils.py:35); the same upper-triangular boolean mask;
- the CUDA RNG tracker's `fork` is a no-op context: DotProductAttention forks it around dropout
  (megatron/core/transformer/dot_product_attention.py:216-217), a no-op in eval mode anyway.

What Megatron-LM's save adds around the model's state (megatron/training/checkpointing.py,
NVIDIA/Megatron-LM, `generate_state_dict` / `save_checkpoint`): `args` (the argparse Namespace),
`checkpoint_version` 3.0, `iteration`; legacy files are `torch.save`d per rank under
`iter_{:07d}/mp_rank_{tp:02d}` (`_{pp:03d}` appended when pipeline-parallel), with
`model = model.state_dict_for_save_checkpoint()`; torch_dist uses `model.sharded_state_dict()` and
`dist_checkpointing.save`, which puts the non-tensor entries in common.pt.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import warnings

import torch

ITERATION = 10


def _shim() -> None:
    torch.cuda.current_device = lambda: torch.device("cpu")
    torch.cuda.synchronize = lambda *a, **k: None
    from megatron.core.dist_checkpointing.strategies import filesystem_async

    filesystem_async._process_memory = lambda: 0


def _config(args: argparse.Namespace, pp: int):  # noqa: ANN202
    from megatron.core.transformer.transformer_config import TransformerConfig

    act = torch.nn.functional.silu if args.swiglu else torch.nn.functional.gelu
    return TransformerConfig(
        num_layers=args.num_layers,
        hidden_size=args.hidden_size,
        ffn_hidden_size=args.ffn_hidden_size,
        num_attention_heads=args.num_attention_heads,
        num_query_groups=args.num_query_groups if args.group_query_attention else None,
        kv_channels=args.kv_channels,
        gated_linear_unit=args.swiglu,
        activation_func=act,
        normalization=args.normalization,
        layernorm_epsilon=args.norm_epsilon,
        add_bias_linear=args.add_bias_linear,
        add_qkv_bias=args.add_qkv_bias,
        tensor_model_parallel_size=args.tensor_model_parallel_size,
        pipeline_model_parallel_size=pp,
        pipeline_dtype=torch.float32,
        use_cpu_initialization=True,
        params_dtype=torch.float32,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        init_method_std=args.init_method_std,
    )


def _model(args: argparse.Namespace, pp: int = 1, pre: bool = True, post: bool = True):  # noqa: ANN202
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel

    return GPTModel(
        _config(args, pp),
        get_gpt_layer_local_spec(normalization=args.normalization),
        vocab_size=args.padded_vocab_size,
        max_sequence_length=args.max_position_embeddings,
        position_embedding_type=args.position_embedding_type,
        rotary_percent=args.rotary_percent,
        rotary_base=args.rotary_base,
        share_embeddings_and_output_weights=not args.untie_embeddings_and_output_weights,
        pre_process=pre,
        post_process=post,
    )


def _start(rank: int, world: int, init: str, tp: int, pp: int) -> None:
    warnings.filterwarnings("ignore")
    _shim()
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    from megatron.core import parallel_state as ps
    from megatron.core import tensor_parallel

    ps.initialize_model_parallel(tp, pp)
    tensor_parallel.get_cuda_rng_tracker().fork = lambda *a, **k: contextlib.nullcontext()


def _legacy_save(out: str, model, meta: dict, pp_size: int) -> None:  # noqa: ANN001
    from megatron.core import parallel_state as ps

    tp, pp = ps.get_tensor_model_parallel_rank(), ps.get_pipeline_model_parallel_rank()
    name = f"mp_rank_{tp:02d}" + (f"_{pp:03d}" if pp_size > 1 else "")
    legacy = os.path.join(out, f"iter_{ITERATION:07d}", name)
    os.makedirs(legacy, exist_ok=True)
    torch.save({**meta, "model": model.state_dict_for_save_checkpoint()},
               os.path.join(legacy, "model_optim_rng.pt"))  # fmt: skip


def _pipeline_rank(rank: int, world: int, out: str, args: argparse.Namespace, init: str) -> None:
    """Re-shard the tensor-parallel torch_dist checkpoint onto tensor x pipeline ranks with
    megatron-core's own loader, then save that topology in both formats."""
    pp = args.pipeline_model_parallel_size
    _start(rank, world, init, args.tensor_model_parallel_size, pp)
    from megatron.core import dist_checkpointing
    from megatron.core import parallel_state as ps

    first, last = ps.is_pipeline_first_stage(), ps.is_pipeline_last_stage()
    model = _model(args, pp, first, last).eval()
    src = os.path.join(out, "torch_dist", f"iter_{ITERATION:07d}")
    state = dist_checkpointing.load({"model": model.sharded_state_dict()}, src)
    model.load_state_dict(state["model"])
    meta = {"args": args, "checkpoint_version": 3.0, "iteration": ITERATION}
    _legacy_save(os.path.join(out, "legacy_pp"), model, meta, pp)
    dist_dir = os.path.join(out, "torch_dist_pp", f"iter_{ITERATION:07d}")
    os.makedirs(dist_dir, exist_ok=True)
    dist_checkpointing.save({**meta, "model": model.sharded_state_dict()}, dist_dir)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def _rank(rank: int, world: int, out: str, args: argparse.Namespace, init: str) -> None:
    """Build (tensor-parallel only), perturb, save in both formats, forward with labels."""
    _start(rank, world, init, args.tensor_model_parallel_size, 1)
    from megatron.core import dist_checkpointing

    torch.manual_seed(args.seed)
    model = _model(args).eval()
    with torch.no_grad():  # non-zero biases and norm weights, so a mapping error shows
        for name, param in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                param.add_(0.1 * torch.randn(param.shape))
    meta = {"args": args, "checkpoint_version": 3.0, "iteration": ITERATION}
    _legacy_save(os.path.join(out, "legacy"), model, meta, 1)
    dist_dir = os.path.join(out, "torch_dist", f"iter_{ITERATION:07d}")
    os.makedirs(dist_dir, exist_ok=True)
    dist_checkpointing.save({**meta, "model": model.sharded_state_dict()}, dist_dir)
    gen = torch.Generator().manual_seed(args.seed + 1)
    tokens = torch.randint(0, args.vocab_size, (args.samples, args.seq_length + 1), generator=gen)
    ids, labels = tokens[:, :-1], tokens[:, 1:]
    positions = torch.arange(args.seq_length).unsqueeze(0).expand(len(ids), -1)
    mask = torch.triu(torch.ones(args.seq_length, args.seq_length), diagonal=1).bool()[None, None]
    with torch.no_grad():
        losses = model(ids, positions, mask, labels=labels)
    if rank == 0:
        import numpy as np

        for root in ("legacy", "torch_dist", "legacy_pp", "torch_dist_pp"):
            os.makedirs(os.path.join(out, root), exist_ok=True)
            with open(os.path.join(out, root, "latest_checkpointed_iteration.txt"), "w") as f:
                f.write(str(ITERATION))
        np.save(os.path.join(out, "tokens.npy"), tokens.numpy().astype(np.int64))
        np.save(os.path.join(out, "losses.npy"), losses.float().numpy())
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def main() -> None:
    out, spec = sys.argv[1], json.loads(sys.argv[2])
    args = argparse.Namespace(**spec)
    world = args.tensor_model_parallel_size
    with tempfile.TemporaryDirectory() as tmp:
        torch.multiprocessing.spawn(_rank, args=(world, out, args, f"file://{tmp}/a"), nprocs=world)
        if args.pipeline_model_parallel_size > 1:
            world *= args.pipeline_model_parallel_size
            torch.multiprocessing.spawn(
                _pipeline_rank, args=(world, out, args, f"file://{tmp}/b"), nprocs=world
            )


if __name__ == "__main__":
    main()
