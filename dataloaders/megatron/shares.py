"""What share of a stage's samples each dataset, and each manifest facet value, should get.

The blend decides the first: BlendedDataset's greedy loop gives dataset k a share w_k of the
stage's samples, w the weights as the loop sees them (`blending.blend_weights`; weights for none
of several prefixes: their GPTDataset lengths, as `Stage` computes them). Inside a dataset, the
GPTDataset walks its train split's documents in shuffled epochs, so a facet value (a crawl batch,
a source) gets, in expectation, its share of the split's tokens; samples are runs of tokens, so
that is its share of the dataset's samples too.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from dataloaders.megatron.blending import blend_weights
from dataloaders.megatron.gpt_indices import split_range


def stage_blend_shares(replayer: Any, index: int) -> dict[str, float]:
    """Dataset name -> its share of data stage `index`'s samples (the weights sum to 1)."""
    specs = replayer.stage_specs[index].blend
    weighted = ["weight" in s.model_fields_set for s in specs]
    names = [s.display_name for s in specs]
    if all(weighted):
        return dict(zip(names, blend_weights([s.weight for s in specs]), strict=True))
    if len(specs) == 1:
        return {names[0]: 1.0}
    # several prefixes without weights: their lengths (the indices must be built to know them)
    return dict(zip(names, replayer.stage(index).weights, strict=True))


def split_token_shares(replayer: Any, facet: str) -> pl.DataFrame | None:
    """dataset, key (the facet's value, null where a document has none), share (of the
    dataset's train-split tokens): one row per value per dataset of the run.

    facet "dataset": each dataset is all of itself (share 1). None when a dataset of the run has
    no manifest holding `facet` (its values' shares are then unknown).
    """
    frames = []
    for name, spec in replayer.specs.items():
        if facet == "dataset":
            frames.append(pl.DataFrame({"dataset": [name], "key": [name], "share": [1.0]}))
            continue
        manifest = replayer.manifests.table(name)
        if manifest is None or facet not in manifest.columns:
            return None
        ds = replayer.datasets[spec.prefix]
        span = split_range(replayer.data.split, len(ds), 0) or (0, 0)
        seq = np.arange(span[0], span[1], dtype=np.int64)
        doc, _ = replayer._seq_to_doc(ds, seq)
        # tokens of each train-split sequence (int64[sequences in the split]) and its document
        tokens = np.asarray(ds.sequence_lengths[span[0] : span[1]], dtype=np.int64)
        per_doc = np.bincount(doc, weights=tokens, minlength=manifest.height)
        per = manifest.sums_by(facet, per_doc).select(
            pl.lit(name).alias("dataset"),
            "key",
            (pl.col("total") / max(int(tokens.sum()), 1)).alias("share"),
        )
        frames.append(per)
    if not frames:
        return None
    return pl.concat(frames, how="vertical_relaxed")
