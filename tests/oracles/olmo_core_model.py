"""Oracle: ai2-olmo-core 3.0.0 builds a tiny OLMo 2-style Transformer on CPU, saves it the way its
Trainer's checkpointer does, and writes its own per-token losses.

Run with .venv-olmo's python: `olmo_core_model.py OUT`. Writes OUT/step10/model_and_optim/
(olmo_core.distributed.checkpoint.save_model_and_optim_state, what
olmo_core/train/train_module/transformer/train_module.py `state_dict_to_save` feeds the
Checkpointer), OUT/step10/config.json ({"model": TransformerConfig.as_config_dict(), ...}, as
olmo_core/train/callbacks/config_saver.py writes the experiment config into every checkpoint),
OUT/tokens.npy and OUT/losses.npy (Transformer.forward(labels=..., loss_reduction="none")).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import warnings

import numpy as np
import torch


def main() -> None:
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    out = sys.argv[1]
    spec = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    from olmo_core.distributed.checkpoint import save_model_and_optim_state
    from olmo_core.nn.transformer import TransformerBlockType, TransformerConfig

    with tempfile.TemporaryDirectory() as tmp:
        torch.distributed.init_process_group("gloo", init_method=f"file://{tmp}/pg", rank=0,
                                             world_size=1)  # fmt: skip
        config = TransformerConfig.llama_like(
            d_model=64,
            n_layers=2,
            n_heads=4,
            n_kv_heads=spec.get("n_kv_heads", 2),
            vocab_size=128,
            block_name=TransformerBlockType.reordered_norm,
            qk_norm=True,
            rope_theta=500_000,
            layer_norm_eps=1e-6,
        )
        torch.manual_seed(11)
        model = config.build(init_device="cpu")
        model.init_weights(max_seq_len=64, device=torch.device("cpu"))
        with torch.no_grad():  # norms away from 1, so a mapping error shows
            for name, param in model.named_parameters():
                if "norm" in name:
                    param.add_(0.2 * torch.randn(param.shape))
        model.eval()
        step = os.path.join(out, "step10")
        save_model_and_optim_state(os.path.join(step, "model_and_optim"), model)
        with open(os.path.join(step, "config.json"), "w") as f:
            json.dump({"model": config.as_config_dict(), "run_name": "oracle"}, f)
        gen = torch.Generator().manual_seed(12)
        tokens = torch.randint(0, 120, (3, 17), generator=gen)
        with torch.no_grad():
            result = model(tokens[:, :-1], labels=tokens[:, 1:], loss_reduction="none")
        loss = getattr(result, "ce_loss", None)
        if loss is None:
            loss = result.loss
        np.save(os.path.join(out, "tokens.npy"), tokens.numpy())
        np.save(os.path.join(out, "losses.npy"), loss.float().reshape(3, 16).numpy())
        np.save(os.path.join(out, "logits.npy"), result.logits.float().numpy())
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
