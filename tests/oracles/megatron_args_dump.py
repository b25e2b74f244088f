"""Write the `args` Namespace Megatron-LM's own argument parser makes from a launch line.

Usage: python megatron_args_dump.py MEGATRON_LM_CHECKOUT OUT.pt FLAG...

MEGATRON_LM_CHECKOUT is a Megatron-LM source tree at the commit that matches the installed
megatron-core (NVIDIA/Megatron-LM tag core_v0.16.1, 55ac7082517c3878ae653c07c09c534b8aed49f6,
for megatron-core 0.16.1). Its `megatron/training/arguments.py` `parse_args` and
`validate_args` run on the CPU once `megatron.training` is entered without its `__init__.py`
(which imports the GPU training loop: triton) and `six` (imported by its BERT tokenizer, unused
here) is a stub. OUT.pt holds `{"args": Namespace}`, pickled by `torch.save` as
megatron/training/checkpointing.py saves it (`state_dict['args'] = args`, generate_state_dict).
tests/oracles/megatron_lm_args.pt was written by:

    python tests/oracles/megatron_args_dump.py MEGATRON_LM tests/oracles/megatron_lm_args.pt \
      --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 \
      --max-position-embeddings 64 --micro-batch-size 2 --global-batch-size 8 \
      --train-iters 300 --save-interval 50 --lr 1e-4 --seed 7 --split 969,30,1 \
      --data-path 0.6 /run/data/web_text_document 0.4 /run/data/code_text_document \
      --tokenizer-type GPTSentencePieceTokenizer --tokenizer-model /run/tok.model \
      --save /run/checkpoints --data-cache-path /run/cache --bf16
"""

from __future__ import annotations

import sys
import types
from pathlib import Path


def main() -> None:
    checkout, out, flags = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
    six = types.ModuleType("six")
    six.PY2, six.PY3 = False, True  # type: ignore[attr-defined]
    sys.modules.setdefault("six", six)
    # After site-packages: megatron.core stays the installed one; megatron.legacy comes from
    # the checkout (megatron/ is a namespace package in both).
    sys.path.append(str(checkout))
    package = types.ModuleType("megatron.training")
    package.__path__ = [str(checkout / "megatron" / "training")]  # type: ignore[attr-defined]
    sys.modules["megatron.training"] = package
    import megatron.training.global_vars as global_vars

    for name in ("get_args", "get_timers", "get_adlr_autoresume", "get_tokenizer"):
        setattr(package, name, getattr(global_vars, name))
    import torch
    from megatron.training.arguments import parse_args, validate_args

    sys.argv = ["pretrain_gpt.py", *flags]
    args = parse_args()
    validate_args(args, {})
    torch.save({"args": args}, out)


if __name__ == "__main__":
    main()
