"""Packing documents into fixed-length token sequences, as a `map(group_texts, batched=True)` does.

Documents are tokenized with the run's tokenizer (no special tokens, then `eos_token` appended when
set), concatenated in the epoch's order, and cut every N tokens. With `pack_group_size` G the
concatenation restarts every G documents and each group's tail (< N tokens) is dropped, like
transformers' run_clm `group_texts` over map batches of G examples; without it the whole epoch is
one group.
"""

from __future__ import annotations

import numpy as np
import polars as pl

_SCHEMA = {"seq": pl.Int64, "doc_id": pl.Int64, "token_start": pl.Int64, "token_end": pl.Int64}


def token_lengths(texts: list[str | None], tokenizer: object, eos: bool) -> np.ndarray:
    """Tokens per document (+1 for the appended EOS)."""
    clean = [t or "" for t in texts]
    encoded = tokenizer.encode_batch(clean, add_special_tokens=False)  # type: ignore[attr-defined]
    return np.fromiter((len(e.ids) for e in encoded), dtype=np.int64, count=len(clean)) + int(eos)


def pack(docs: np.ndarray, lengths: np.ndarray, n_tokens: int, group: int | None) -> pl.DataFrame:
    """Segments of the packed sequences of one epoch.

    docs     int64[n]  document ids in epoch order
    lengths  int64[n]  their token counts (EOS included), same order
    Returns one row per (sequence, document) overlap: seq (sequence number in the epoch, 0-based),
    doc_id, token_start, token_end (token range inside the document, end exclusive), ordered by
    seq then position in the sequence.
    """
    n = len(docs)
    group_size = group or max(n, 1)
    frames = []
    seq_base = 0
    for g0 in range(0, n, group_size):
        d = docs[g0 : g0 + group_size]
        ln = lengths[g0 : g0 + group_size]
        ends = np.cumsum(ln)  # token offset (in the group) one past each document
        starts = ends - ln
        n_seq = int(ends[-1] // n_tokens) if len(ends) else 0
        keep = (ln > 0) & (starts < n_seq * n_tokens)
        d, ln, starts = d[keep], ln[keep], starts[keep]
        first = starts // n_tokens
        last = np.minimum((starts + ln - 1) // n_tokens, n_seq - 1)
        count = last - first + 1
        rep_doc = np.repeat(d, count)
        rep_start = np.repeat(starts, count)
        rep_len = np.repeat(ln, count)
        # sequence number of each segment: first + 0, 1, ... within each document
        step = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
        seq = np.repeat(first, count) + step
        frames.append(
            pl.DataFrame(
                {
                    "seq": seq + seq_base,
                    "doc_id": rep_doc,
                    "token_start": np.maximum(seq * n_tokens - rep_start, 0),
                    "token_end": np.minimum((seq + 1) * n_tokens - rep_start, rep_len),
                },
                schema=_SCHEMA,
            )
        )
        seq_base += n_seq
    if not frames:
        return pl.DataFrame(
            schema={
                "seq": pl.Int64,
                "doc_id": pl.Int64,
                "token_start": pl.Int64,
                "token_end": pl.Int64,
            }
        )
    return pl.concat(frames)
