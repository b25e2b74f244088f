"""Each JSONL line against its own document: the check that catches two swapped lines.

preprocess_data.py writes line i's `text`, encoded by the run's tokenizer, as document i (one
or more sequences; an EOD token after it with --append-eod). Re-encoding each line and comparing
with its document pairs them one by one: a line moved by one place meets another document's
ids. The length-ratio check of forensics.manifest catches shifted, reversed and shuffled files
without a tokenizer, not a swap of two lines of similar length.

Ids are compared as the round-trip check of a spike does (forensics.spike.tokcheck): special
tokens at either end left out, and the first two ids free (a SentencePiece dummy prefix can
split the first word otherwise). A document preprocessed with --split-sentences was encoded one
sentence at a time, so its ids can differ from the whole text's at sentence boundaries: it must
then agree in length within MATCH_SLACK and in its opening ids.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from forensics.errors import ForensicsError

BATCH = 1024  # lines encoded at once
OPENING = 16  # ids compared at the start of a document encoded sentence by sentence
MATCH_SLACK = 0.02  # share of its length a sentence-split document may differ by (at least 2)


def check_lines(jsonl: Path, dataset: Any, prefix: Path, tokenizer_path: Path) -> None:
    """Refuse, naming the first line, when a line's text does not encode to its document."""
    from dataloaders.tokenizer import load_tokenizer
    from forensics.spike.tokcheck import special_ids

    tokenizer = load_tokenizer(tokenizer_path)
    if not hasattr(tokenizer, "encode_batch"):
        raise ForensicsError(
            f"--tokenizer {tokenizer_path}: cannot encode text; give a tokenizer.json"
        )
    special = special_ids(tokenizer)
    batch: list[tuple[int, str]] = []
    with open(jsonl, encoding="utf-8") as stream:
        for number, line in enumerate(stream):
            text = json.loads(line).get("text")
            if isinstance(text, str):
                batch.append((number, text))
            if len(batch) == BATCH:
                _check_batch(batch, tokenizer, special, dataset, jsonl, prefix)
                batch = []
    if batch:
        _check_batch(batch, tokenizer, special, dataset, jsonl, prefix)


def _check_batch(
    batch: list[tuple[int, str]], tokenizer: Any, special: set[int], dataset: Any, jsonl: Path,
    prefix: Path,
) -> None:  # fmt: skip
    encoded = tokenizer.encode_batch([text for _, text in batch], add_special_tokens=False)
    for (doc, _), enc in zip(batch, encoded, strict=True):
        ids = _trimmed(list(enc.ids), special)
        own = _trimmed(_document_ids(dataset, doc), special)
        if not _same(ids, own):
            raise ForensicsError(
                f"{jsonl}: line {doc + 1} is not document {doc} of {prefix}.idx: its text "
                f"encodes to {len(ids):,} tokens, the document holds {len(own):,} other ones "
                "(lines swapped, edited, or not the file preprocess_data.py read); nothing was "
                "written"
            )


def _document_ids(dataset: Any, doc: int) -> list[int]:
    first, end = int(dataset.document_indices[doc]), int(dataset.document_indices[doc + 1])
    if end <= first:
        return []
    return np.concatenate([np.asarray(dataset[s]) for s in range(first, end)]).tolist()


def _trimmed(ids: list[int], special: set[int]) -> list[int]:
    start, end = 0, len(ids)
    while start < end and ids[start] in special:
        start += 1
    while end > start and ids[end - 1] in special:
        end -= 1
    return ids[start:end]


def _same(ids: list[int], own: list[int]) -> bool:
    """Whether the line's ids are its document's (see the module docstring)."""
    if ids == own or ids[2:] == own[2:] and abs(len(ids) - len(own)) <= 1:
        return True
    slack = max(2, int(len(own) * MATCH_SLACK))
    return abs(len(ids) - len(own)) <= slack and ids[2:OPENING] == own[2:OPENING]
