"""The model's view: rescore the window's exact samples with the pre-spike checkpoint.

    options = RescoreOptions(checkpoint=Path("iter_0002200_hf"))   # or losses=Path("l.parquet")
    result = rescore(replayer, replay, options, cache_dir=cache)    # samples + segments, z-scored
    ranked, view = rescore_stage(replayer, replay, ranked, window_docs, options, cache, out, ...)

Modules: export (the exact token sequences, `replay --tokens`), model (load a Hugging Face causal
LM, per-token losses, per-sample gradient norms; torch imported lazily), losses (`--losses FILE`),
metrics (per-sample / per-segment numbers and z-scores), stage (sample choice, cache), verdict
(per-cluster evidence and how it combines with the data-side verdict).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from dataloaders.atomic import write_parquet_atomic
from forensics.rescore.naming import model_naming
from forensics.rescore.stage import DEFAULT_CAP, Rescore, RescoreOptions, rescore, rescore_parquet
from forensics.rescore.verdict import cluster_evidence, model_view

RESCORE_FILE = "rescore.parquet"

__all__ = [
    "DEFAULT_CAP",
    "RESCORE_FILE",
    "Rescore",
    "RescoreOptions",
    "rescore",
    "rescore_parquet",
    "rescore_stage",
]


def _tokenizer(replayer: Any) -> Any:
    """The run's tokenizer for the peak spans, or None (the spans are then left out)."""
    try:
        return replayer.tokenizer()
    except Exception:  # no tokenizer configured: numbers without text
        return None


def rescore_stage(
    replayer: Any,
    replay: pl.DataFrame,
    ranked: pl.DataFrame,
    window_docs: pl.DataFrame,
    options: RescoreOptions,
    cache: Path,
    out: Path,
    fingerprint: Any,
    hits: dict[str, bool],
    baseline_docs: pl.DataFrame | None = None,
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """The spike pipeline's hook: score, write rescore.parquet, add the model's evidence to the
    clusters (and combine the verdicts), name the groups whose loss stands out that no scorer
    flags (forensics.rescore.naming; `baseline_docs` gives each group its own baseline), and
    build the report's model section."""
    result = rescore(replayer, replay, options, cache_dir=cache, fingerprint=fingerprint, hits=hits)
    write_parquet_atomic(rescore_parquet(result), Path(out) / RESCORE_FILE)
    ranked = cluster_evidence(ranked, window_docs, result)
    ranked = model_naming(ranked, window_docs, result, baseline_docs)
    view = model_view(ranked, result, tokenizer=_tokenizer(replayer), window_docs=window_docs)
    return ranked, view
