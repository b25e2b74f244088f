"""One place that maps the many spellings of a logged metric onto our column names.

Megatron prints `lm loss`, Megatron-DeepSpeed `lm loss`, some forks `loss`; TensorBoard tags are
`lm loss` / `grad-norm` / `learning-rate`; W&B and Hugging Face use `train/loss`,
`train/grad_norm`, `train/learning_rate`. Every reader funnels its raw field names through
`canonical_name`, so a new spelling is one edit here, and unknown fields survive under a
snake_case name instead of being dropped.

Canonical columns: `step` (Int64), `loss`, `grad_norm`, `lr`, `loss_scale`, `consumed_samples`,
`global_batch_size`, `tokens`, `val_loss`, `iteration_time_s`, and `loss:<domain>` for
per-domain training losses (e.g. `lm loss web` or `loss/code`).
"""

from __future__ import annotations

import re

# Known spellings, after `_key` normalisation (lower case, `_`/`-` -> space, single spaces).
_ALIASES: dict[str, str] = {}
for _canon, _names in {
    "step": ["step", "steps", "iteration", "iter", "global step", "_step", "trainer/global step"],
    "loss": [
        "lm loss",
        "loss",
        "train loss",
        "training loss",
        "train/loss",
        "train/lm loss",
        "train/ce loss",
    ],
    "grad_norm": [
        "grad norm",
        "gradient norm",
        "grad norm total",
        "train/grad norm",
        "optim/total grad norm",
    ],
    "lr": ["learning rate", "lr", "train/learning rate", "train/lr", "optim/lr (group 0)"],
    "loss_scale": ["loss scale", "loss scaler", "train/loss scale"],
    "consumed_samples": ["consumed samples", "samples", "train/consumed samples"],
    "global_batch_size": ["global batch size", "batch size", "train/global batch size"],
    "tokens": [
        "consumed tokens",
        "tokens",
        "num tokens",
        "train/tokens",
        "train/num tokens",
        "throughput/total tokens",
    ],
    "val_loss": [
        "val loss",
        "val/loss",
        "validation loss",
        "eval loss",
        "eval/loss",
        "lm loss value",
    ],
    # `iteration-time` is Megatron's TensorBoard/W&B scalar (and its CI golden values'
    # `iteration_time`): elapsed_time_per_iteration in seconds (NVIDIA/Megatron-LM d98e8a6,
    # megatron/training/training.py, training_log; stdout prints it x 1000 as "(ms)").
    "iteration_time_s": [
        "elapsed time per iteration (s)",
        "iteration time (s)",
        "iteration time",
    ],
}.items():
    for _n in _names:
        _ALIASES[_n] = _canon

# Millisecond timings are converted to seconds so `iteration_time_s` means one thing.
MS_FIELDS = {"elapsed time per iteration (ms)", "iteration time (ms)"}

# `lm loss web`, `lm loss (web)`, `loss/code`, `loss:code`, `train/loss/code`, `web lm loss`.
_DOMAIN_AFTER = re.compile(r"^(?:train/)?(?:lm )?loss(?: |/|:|\()\s*(?P<d>[^()]+?)\)?$")
_DOMAIN_BEFORE = re.compile(r"^(?:train/)?(?P<d>.+?)(?: |/)lm loss$")
# Words after "loss" that name a property of the loss, not a data domain.
_NOT_DOMAINS = {"scale", "scaler", "value", "ppl", "scale (fp16)", "std", "min", "max", "avg"}


def _key(raw: str) -> str:
    """Lower-case, `_`/`-` become spaces, whitespace collapsed: the form aliases are keyed by."""
    return " ".join(raw.strip().lower().replace("_", " ").replace("-", " ").split())


def snake(raw: str) -> str:
    """A safe column name for a field we do not know: `number of nan iterations` -> snake case."""
    name = re.sub(r"[^0-9a-z]+", "_", raw.strip().lower()).strip("_")
    return name or "field"


def canonical_name(raw: str) -> str:
    """Map a raw field name onto our column name (unknown fields -> snake_case of the name)."""
    key = _key(raw)
    if key in _ALIASES:
        return _ALIASES[key]
    if key in MS_FIELDS:
        return "iteration_time_s"
    m = _DOMAIN_AFTER.match(key) or _DOMAIN_BEFORE.match(key)
    if m and m.group("d").strip() not in _NOT_DOMAINS:
        domain = m.group("d").strip().replace(" ", "_")
        if domain not in {"train", "training", "lm", "val", "validation", "eval"}:
            return f"loss:{domain}"
    return snake(raw)


def is_ms_field(raw: str) -> bool:
    """True for a timing field reported in milliseconds (converted to seconds on read)."""
    return _key(raw) in MS_FIELDS


def loss_curves(columns: list[str]) -> list[str]:
    """The training-loss columns of a table: `loss` first, then per-domain `loss:<d>` sorted."""
    out = ["loss"] if "loss" in columns else []
    return out + sorted(c for c in columns if c.startswith("loss:"))
