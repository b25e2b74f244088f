"""A plain-torch decoder that computes what megatron-core's GPTModel computes, for rescoring.

Why not megatron-core itself: its GPTModel needs an initialised process group and, in 0.16.1,
CUDA calls on the forward path (RotaryEmbedding.get_emb, get_default_causal_mask); a team rescoring
on a laptop or a CPU node has neither. The arithmetic below follows megatron-core 0.16.1 (paths
are in the installed wheel, megatron/core/...), and tests/forensics/rescore/test_megatron.py checks
it against megatron-core's own forward on checkpoints megatron-core wrote:
- attention: the fused QKV weight is laid out per query group as [q (heads/group x d), k (d),
  v (d)] (transformer/attention.py:1387-1430, get_query_key_value_tensors), keys and values are
  repeated per group with repeat_interleave (transformer/dot_product_attention.py:170-175), scores
  are scaled by 1/sqrt(kv_channels) and soft-maxed in float32 under a causal mask;
- RoPE: inv_freq = 1/base^(arange(0, dim, 2)/dim), dim = kv_channels x rotary_percent
  (models/common/embeddings/rotary_pos_embedding.py:79-81), applied to the first dim channels of
  each head, halves rotated (rope_utils.py:73-126, not interleaved);
- MLP: with a gated linear unit the fc1 output is chunked into (gate, linear) and the activation
  applies to the gate (transformer/mlp.py:219-221);
- pre-norm residual blocks, a final norm, and the output layer (or the word embeddings when tied).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

ACTIVATIONS = ("gelu", "openai_gelu", "silu", "squared_relu")


@dataclass(frozen=True)
class GPTSpec:
    """The shape and options of a Megatron GPT model (Megatron-LM argument names in the docs)."""

    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    kv_channels: int
    vocab_rows: int
    normalization: str  # LayerNorm | RMSNorm
    norm_epsilon: float
    activation: str  # one of ACTIVATIONS
    gated: bool  # --swiglu: gated linear unit
    position_embedding_type: str  # learned_absolute | rope | none
    rotary_base: float = 10000.0
    rotary_percent: float = 1.0


def _torch() -> Any:
    import torch

    return torch


def _activation(name: str, x: Any) -> Any:
    f = _torch().nn.functional
    if name == "gelu":
        return f.gelu(x)
    if name == "openai_gelu":
        return f.gelu(x, approximate="tanh")
    if name == "silu":
        return f.silu(x)
    return f.relu(x).pow(2)


def build_gpt(spec: GPTSpec, weights: dict[str, Any]) -> Any:
    """An eval-mode torch module holding `weights` (names as in megatron.LAYER_NAMES, TOP_NAMES)
    whose forward(input_ids=...) returns an object with `.logits`, as transformers models do."""
    torch = _torch()

    class MegatronGPT(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.spec = spec
            self.config = SimpleNamespace(vocab_size=spec.vocab_rows)
            self.params = torch.nn.ParameterDict(
                {k.replace(".", "__"): torch.nn.Parameter(v) for k, v in weights.items()}
            )

        def _get(self, name: str) -> Any:
            key = name.replace(".", "__")
            return self.params[key] if key in self.params else None

        def get_output_embeddings(self) -> Any:
            """The output layer's weight (the word embeddings when tied), looked up on each call
            so that it follows the module across .to(device)."""
            weight = self._get("output_layer.weight")
            if weight is None:
                weight = self._get("embedding.word_embeddings.weight")
            return SimpleNamespace(weight=weight)

        def _norm(self, prefix: str, x: Any) -> Any:
            w, b = self._get(prefix + ".weight"), self._get(prefix + ".bias")
            if spec.normalization == "RMSNorm":
                return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, spec.norm_epsilon)
            return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, spec.norm_epsilon)

        def _linear(self, prefix: str, x: Any) -> Any:
            return torch.nn.functional.linear(
                x, self._get(prefix + ".weight"), self._get(prefix + ".bias")
            )

        def forward(self, input_ids: Any) -> Any:
            x = self._get("embedding.word_embeddings.weight")[input_ids]
            seq = input_ids.shape[1]
            positions = torch.arange(seq, device=input_ids.device)
            if spec.position_embedding_type == "learned_absolute":
                x = x + self._get("embedding.position_embeddings.weight")[positions]
            rope = (
                _rope(spec, positions, x.dtype) if spec.position_embedding_type == "rope" else None
            )
            mask = torch.ones(seq, seq, dtype=torch.bool, device=x.device).triu(1)
            for i in range(spec.num_layers):
                x = x + self._attention(
                    f"layers.{i}", self._norm(f"layers.{i}.qkv_norm", x), rope, mask
                )
                x = x + self._mlp(f"layers.{i}", self._norm(f"layers.{i}.mlp_norm", x))
            x = self._norm("final_norm", x)
            out = self.get_output_embeddings().weight
            return SimpleNamespace(logits=torch.nn.functional.linear(x, out))

        def _attention(self, prefix: str, x: Any, rope: Any, mask: Any) -> Any:
            return _attention(self, prefix, x, rope, mask)

        def _mlp(self, prefix: str, x: Any) -> Any:
            h = self._linear(prefix + ".fc1", x)
            if spec.gated:
                gate, linear = torch.chunk(h, 2, dim=-1)
                h = _activation(spec.activation, gate) * linear
            else:
                h = _activation(spec.activation, h)
            return self._linear(prefix + ".fc2", h)

    return MegatronGPT().eval()


def _attention(model: Any, prefix: str, x: Any, rope: Any, mask: Any) -> Any:
    """Self-attention of one layer on the normed input x [b, s, hidden]."""
    torch = _torch()
    spec = model.spec
    b, s, _ = x.shape
    d, ng = spec.kv_channels, spec.num_query_groups
    per = spec.num_attention_heads // ng
    qkv = model._linear(prefix + ".qkv", x).view(b, s, ng, (per + 2) * d)
    q, k, v = torch.split(qkv, [per * d, d, d], dim=-1)
    q = q.reshape(b, s, ng * per, d)
    if rope is not None:
        q, k = _apply_rope(q, rope), _apply_rope(k, rope)
    k = k.repeat_interleave(per, dim=2)
    v = v.repeat_interleave(per, dim=2)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [b, heads, s, d]
    scores = (q @ k.transpose(-1, -2)) / (d**0.5)
    probs = scores.float().masked_fill(mask, float("-inf")).softmax(-1).to(v.dtype)
    ctx = (probs @ v).transpose(1, 2).reshape(b, s, ng * per * d)
    return model._linear(prefix + ".proj", ctx)


def _rope(spec: GPTSpec, positions: Any, dtype: Any) -> tuple[Any, Any]:
    """cos and sin, [s, 1, rot_dim]: megatron-core's RotaryEmbedding (not interleaved)."""
    torch = _torch()
    dim = int(spec.kv_channels * spec.rotary_percent)
    inv_freq = 1.0 / (spec.rotary_base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)).to(
        positions.device
    )
    freqs = torch.outer(positions.float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)[:, None, :]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _apply_rope(t: Any, rope: tuple[Any, Any]) -> Any:
    """t [b, s, heads, d]: rotate the first rot_dim channels, pass the rest through."""
    torch = _torch()
    cos, sin = rope
    rot = cos.shape[-1]
    head, rest = t[..., :rot], t[..., rot:]
    x1, x2 = torch.chunk(head, 2, dim=-1)
    rotated = torch.cat((-x2, x1), dim=-1)
    return torch.cat((head * cos + rotated * sin, rest), dim=-1)
