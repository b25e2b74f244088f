"""Score documents for encoding garbage and template spam.

Public API (used by `forensics score` and by `forensics spike`):

    from forensics.score import score_table, FLAG_THRESHOLD
    scored = score_table(df, "text", progress=False, workers=None)

`scored` has every input column plus `garbage_score`, `spam_score` (Float64 in [0, 1];
>= FLAG_THRESHOLD means flagged), `garbage_reason`, `spam_reason` (Utf8, "" when not flagged).
Row order is preserved. Signals live in one module per family: `garbage` (+ `legacy_codecs`,
`patterns`), `spam` (per document), `skeleton` (across the documents of the table); the
compiled (numba) loops they share are `utf8_scan` (characters and words, over the UTF-8 bytes)
and `doc_counts` (per-document counts over the word hashes); `reencode` holds the legacy-codec
rules' own (what text re-encoded with GBK, Big5, Shift-JIS or EUC-KR gives back as UTF-8).
"""

from __future__ import annotations

from forensics.score.table import FLAG_THRESHOLD, score_table, score_texts

__all__ = ["FLAG_THRESHOLD", "score_table", "score_texts"]
