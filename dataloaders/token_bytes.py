"""Decode token id arrays through a table of each token's bytes, where that is the library's own
decoding: one compiled copy loop and one UTF-8 decode per document.

Why: `tokenizers.Tokenizer.decode_batch` builds a Rust `String` per token, maps it back to bytes
character by character, and needs every id as a Python int first (`ndarray.tolist()`); on a
byte-level BPE that was about a million tokens per CPU-second, most of a scan's decode time.
For the tokenizers whose decoding *is* "concatenate the tokens' bytes, then decode UTF-8 with
one U+FFFD per invalid sequence", a table of bytes per id gives the same text directly:

- a `tokenizers.Tokenizer` whose decoder is exactly `ByteLevel` (GPT-2, Llama 3, Qwen, and the
  byte-level BPEs trained by `tokenizers`): its decoder maps each character of each token back
  to its byte (the GPT-2 byte-to-unicode table; a token holding a character outside that table
  contributes its own UTF-8 bytes) and returns `String::from_utf8_lossy` of the whole sequence
  (huggingface/tokenizers, tokenizers/src/pre_tokenizers/byte_level.rs, `decode_chain`), which
  substitutes maximal invalid subparts as Python's "replace" handler does. Added tokens are
  only taken when every character of theirs is printable ASCII other than space, which that
  table maps to itself, so whether a version decodes them through the decoder or as their
  content gives the same bytes;
- `tokenizer_megatron.TikTokenDecoder`: `tiktoken.Encoding.decode` is
  `decode_bytes(ids).decode("utf-8", errors="replace")` (tiktoken/core.py), and the table is
  `decode_single_token_bytes` of every id.

Every other tokenizer (SentencePiece, WordPiece, Metaspace, decoder sequences) decodes with its
own `decode_batch`. tests/dataloaders/test_token_bytes.py checks the table against the
libraries on random id sequences, cut characters included.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dataloaders.lazy_jit import kernel

# Tokenizers seen by `byte_table` (id -> (tokenizer, table or None)); the tokenizer is held so
# its id cannot be reused by another object while the entry lives.
_TABLES: dict[int, tuple[Any, ByteTable | None]] = {}
_PLAIN_ASCII = frozenset(chr(c) for c in range(0x21, 0x7F))


class ByteTable:
    """The bytes of every token id: id i is `data[offsets[i]:offsets[i + 1]]`.

    `offsets` int64 [vocab + 1], `data` uint8 [total bytes]. An id the tokenizer has no token
    for holds no bytes (the library skips it too).
    """

    def __init__(self, pieces: Sequence[bytes]) -> None:
        lengths = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces))
        self.offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        self.data = np.frombuffer(b"".join(pieces), dtype=np.uint8)

    @property
    def size(self) -> int:
        return len(self.offsets) - 1

    def decode(self, ids: np.ndarray, bounds: np.ndarray) -> list[str]:
        """The text of each row of `ids` (int64, all in 0..size-1): row r is
        `ids[bounds[r]:bounds[r + 1]]`."""
        out, out_bounds = _concat(ids, bounds, self.offsets, self.data)
        view = memoryview(out)
        cuts = out_bounds.tolist()
        pairs = zip(cuts[:-1], cuts[1:], strict=True)
        return [str(view[a:b], "utf-8", "replace") for a, b in pairs]


@kernel(cache=True, nogil=True)
def _concat(ids, bounds, tok_offsets, tok_data):
    """(bytes uint8, row byte bounds int64 [rows + 1]): each row's tokens' bytes, in order."""
    n_rows = len(bounds) - 1
    out_bounds = np.zeros(n_rows + 1, dtype=np.int64)
    total = 0
    for r in range(n_rows):
        for k in range(bounds[r], bounds[r + 1]):
            t = ids[k]
            total += tok_offsets[t + 1] - tok_offsets[t]
        out_bounds[r + 1] = total
    out = np.empty(total, dtype=np.uint8)
    p = 0
    for k in range(len(ids)):
        t = ids[k]
        for j in range(tok_offsets[t], tok_offsets[t + 1]):
            out[p] = tok_data[j]
            p += 1
    return out, out_bounds


def _gpt2_char_bytes() -> dict[str, int]:
    """GPT-2's byte-to-unicode table, inverted: the character ByteLevel writes for each byte."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = dict(zip(keep, keep, strict=True))
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = 256 + extra
            extra += 1
    return {chr(c): b for b, c in chars.items()}


def _byte_level_table(tokenizer: Any) -> ByteTable | None:
    """The table of a `tokenizers.Tokenizer` with a plain ByteLevel decoder, else None."""
    from tokenizers import Tokenizer, decoders

    if not isinstance(tokenizer, Tokenizer):
        return None
    if not isinstance(tokenizer.decoder, decoders.ByteLevel):
        return None
    added = tokenizer.get_added_tokens_decoder()
    if any(not set(t.content) <= _PLAIN_ASCII for t in added.values()):
        return None
    char_bytes = _gpt2_char_bytes()
    pieces: list[bytes] = []
    for i in range(tokenizer.get_vocab_size(with_added_tokens=True)):
        token = tokenizer.id_to_token(i)
        if token is None:
            pieces.append(b"")
        elif all(c in char_bytes for c in token):
            pieces.append(bytes(char_bytes[c] for c in token))
        else:
            pieces.append(token.encode("utf-8"))
    return ByteTable(pieces)


def _table_of(tokenizer: Any) -> ByteTable | None:
    own = getattr(tokenizer, "token_bytes", None)
    if callable(own):
        pieces = own()
        return ByteTable(pieces) if pieces is not None else None
    return _byte_level_table(tokenizer)


def byte_table(tokenizer: Any) -> ByteTable | None:
    """The tokenizer's byte table (built once per tokenizer object), or None when its decoding
    is not a concatenation of per-token bytes."""
    key = id(tokenizer)
    if key not in _TABLES or _TABLES[key][0] is not tokenizer:
        _TABLES[key] = (tokenizer, _table_of(tokenizer))
    return _TABLES[key][1]


def decode_arrays(tokenizer: Any, rows: Sequence[np.ndarray | list[int]]) -> list[str]:
    """`tokenizer.decode_batch(rows, skip_special_tokens=False)` for id arrays (or lists):
    through the byte table where the tokenizer has one, else the library's batch call."""
    table = byte_table(tokenizer) if rows else None
    if table is not None:
        lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        bounds = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        ids = np.concatenate(rows).astype(np.int64, copy=False)
        if len(ids) == 0 or (0 <= ids.min() and ids.max() < table.size):
            return table.decode(ids, bounds)
    lists = [r.tolist() if isinstance(r, np.ndarray) else list(r) for r in rows]
    return tokenizer.decode_batch(lists, skip_special_tokens=False)
