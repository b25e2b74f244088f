"""Is the config's tokenizer the one the data was tokenized with?

A tokenizer whose vocabulary is smaller than the ids is refused when decoding. One with a large
enough vocabulary decodes any id, and the wrong one turns every document into plausible-looking
nonsense that the scorers flag in every source: a confident wrong verdict. The check here is the
round trip: a sequence the preprocessing wrote is the tokenizer's own encoding of its text, so
encoding the decoded text gives the same ids back (measured on tokenizers trained here, a
byte-level BPE and a SentencePiece-style BPE (Metaspace): 100% of sequences with the run's
tokenizer, 0-13% with another of the same vocabulary size). Special tokens at either end are
left out, and the first word may come back split otherwise (a dropped dummy prefix).
Each `.idx` sequence is checked on its own (documents preprocessed with --split-sentences were
encoded one sentence at a time), a long one on its first MAX_TOKENS ids, with a few ids of slack
at the cut (the last word there is cut in two).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from dataloaders.mapped_pages import releasing_pages
from dataloaders.tokenizer import special_ids
from forensics.errors import ForensicsError

PER_DATASET = 16  # sequences sampled per dataset
MAX_TOKENS = 256  # ids of one sequence checked
CUT_SLACK = 4  # ids before a cut that may re-encode differently
MIN_ROUND_TRIP = 0.5  # below this share of sequences the tokenizer is refused


def sampled_sequences(replayer: Any, distinct: pl.DataFrame) -> list[list[int]]:
    """The first sequence of up to PER_DATASET documents of each dataset, as id lists."""
    out = []
    for (name,), part in distinct.group_by(["dataset"], maintain_order=True):
        spec = replayer.specs[name]
        ds = replayer.datasets[spec.prefix]
        for doc in part["doc_id"].head(PER_DATASET).to_list():
            first = int(ds.document_indices[doc])
            if int(ds.document_indices[doc + 1]) > first:
                ids = ds[first][: MAX_TOKENS + 1].tolist()
                if ids:
                    out.append(ids)
    return out


def _trimmed(ids: list[int], special: set[int]) -> tuple[list[int], bool]:
    """The ids a round trip checks (up to MAX_TOKENS, special tokens at either end left out)
    and whether they were cut."""
    cut = len(ids) > MAX_TOKENS
    ids = ids[:MAX_TOKENS]
    while ids and ids[0] in special:
        ids = ids[1:]
    while ids and ids[-1] in special and not cut:
        ids = ids[:-1]
    return ids, cut


def _same_ids(ids: list[int], again: list[int], cut: bool) -> bool:
    """Whether `again` (the encoding of `ids`' decoded text) gives `ids` back."""
    if again == ids:
        return True
    # The first word may come back split otherwise (a SentencePiece dummy prefix dropped by the
    # decoder and added again by the encoder): compare from the third id on, shifted by the
    # difference that split makes (-1, 0 or +1 ids), up to the cut's slack.
    end = len(ids) - CUT_SLACK if cut else len(ids)
    for shift in (-1, 0, 1):
        if not cut and len(again) != len(ids) + shift:
            continue
        if end > 2 and again[2 + shift : end + shift] == ids[2:end]:
            return True
    return False


def round_trips(tokenizer: Any, ids: list[int], special: set[int] | None = None) -> bool:
    """Whether `ids` is the tokenizer's encoding of its own decoded text (up to the cut), the
    special tokens at either end left out."""
    ids, cut = _trimmed(ids, special or set())
    if not ids:
        return True
    text = tokenizer.decode(ids, skip_special_tokens=False)
    return _same_ids(ids, tokenizer.encode(text, add_special_tokens=False).ids, cut)


def round_trips_batch(
    tokenizer: Any, sequences: list[list[int]], special: set[int] | None = None
) -> np.ndarray:
    """`round_trips` of every sequence, decoded and encoded by the tokenizer's batch calls
    (its Rust threads: several times faster than one call per sequence on a large sample)."""
    trimmed = [_trimmed(ids, special or set()) for ids in sequences]
    texts = tokenizer.decode_batch([ids for ids, _ in trimmed], skip_special_tokens=False)
    if hasattr(tokenizer, "encode_batch"):
        again = tokenizer.encode_batch(texts, add_special_tokens=False)
    else:  # a decoder with no batch call (dataloaders.tokenizer_megatron's SentencePiece)
        again = [tokenizer.encode(text, add_special_tokens=False) for text in texts]
    return np.array(
        [not ids or _same_ids(ids, enc.ids, cut)
         for (ids, cut), enc in zip(trimmed, again, strict=True)],
        dtype=bool,
    )  # fmt: skip


@releasing_pages
def check_tokenizer(replayer: Any, distinct: pl.DataFrame, tokenizer_path: Any) -> float | None:
    """Refuse in one line, naming the tokenizer, when most sampled sequences do not round-trip;
    returns the share that does (None when the family has no .idx sequences to sample)."""
    if not replayer.token_files or distinct.height == 0:
        return None
    tokenizer = replayer.tokenizer()
    sequences = sampled_sequences(replayer, distinct)
    if max((max(s) for s in sequences), default=-1) >= replayer.vocab_size():
        return None  # the decoder refuses these ids itself, with its own message
    special = special_ids(tokenizer)
    good = sum(round_trips(tokenizer, s, special) for s in sequences)
    share = good / len(sequences) if sequences else 1.0
    if share < MIN_ROUND_TRIP:
        raise ForensicsError(
            f"{tokenizer_path}: does not look like the tokenizer this data was tokenized with: "
            f"only {good} of {len(sequences)} sampled sequences re-encode to their own ids (the "
            "run's tokenizer gives nearly all); give the tokenizer of the preprocessing "
            "(config: tokenizer)"
        )
    return share
