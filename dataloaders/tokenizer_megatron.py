"""Megatron's SentencePiece and TikTokenizer tokenizers, decoding exactly as megatron-core does.

A Megatron run tokenized with `--tokenizer-type SentencePieceTokenizer | GPTSentencePieceTokenizer
| Llama2Tokenizer | TikTokenizer` holds ids that only that tokenizer's own decoding turns back into
the same text. Both classes here expose the three calls the replay uses on a `tokenizers.Tokenizer`
(`decode`, `decode_batch`, `get_vocab_size`), so the replay treats every tokenizer alike.

Sources (megatron-core 0.16.1, megatron/core/tokenizers/; NVIDIA/Megatron-LM
d98e8a64ddf34856e74b24714e3bedb2f5a39553 decodes the same way, except where noted):
- text/utils/build_tokenizer.py:7-43 (core/tokenizers/utils/build_tokenizer.py on main): the three
  SentencePiece names build one `SentencePieceTokenizer(legacy=--tokenizer-sentencepiece-legacy,
  special_tokens=--tokenizer-special-tokens)`; TikTokenizer gets `pattern`, `vocab_size` (only when
  --vocab-size is given), `num_special_tokens`, `special_tokens`.
- text/libraries/sentencepiece_tokenizer.py:226-244 `ids_to_text`: `sp.decode_ids(ids)`; with
  legacy=True the ids are split at the added special tokens, the parts joined with spaces, and the
  text stripped. :275-311 `add_special_tokens`: a token the model lacks gets the next id past it.
- text/libraries/tiktoken_tokenizer.py:24-25 (defaults), :31-73 (the JSON vocab, cut to
  `vocab_size - num_special_tokens` entries, ids shifted up by `num_special_tokens`), :101-170
  (specials, then the `tiktoken.Encoding` it builds). Its 0.16.1 `ids_to_text` (:214-230) decodes
  token by token, garbling every character split across two tokens; Megatron-LM main decodes
  with that Encoding instead (tiktoken_tokenizer.py:226-230 at d98e8a64dd: the joined bytes, one
  U+FFFD per invalid byte), as Megatron-LM's legacy CustomTikTokenizer.detokenize did. This
  module returns that decoding.
- Megatron-LM before 32570939300c4377060bc8f13c90275ea7e649fe (`--legacy-tokenizer`,
  megatron/training/tokenizer/tokenizer.py at its parent): _SentencePieceTokenizer:407-452 adds
  <CLS> <SEP> <EOD> <MASK>, pad, bos, eos (and <extra_id_i>) past the model, and :492-503 joins at
  them with spaces without stripping; _GPTSentencePieceTokenizer:557 and _Llama2Tokenizer:607 are
  `decode_ids`; CustomTikTokenizer:670-781 has three named specials and `Encoding.decode`.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dataloaders.errors import ForensicsError

SENTENCEPIECE_TYPES = ("SentencePieceTokenizer", "GPTSentencePieceTokenizer", "Llama2Tokenizer")
TIKTOKEN_DEFAULT_VOCAB = 2**17  # tiktoken_tokenizer.py:24 DEFAULT_TIKTOKEN_MAX_VOCAB
TIKTOKEN_DEFAULT_SPECIALS = 1000  # Megatron's --tiktoken-num-special-tokens default
TIKTOKEN_SPECIALS = ["<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>"]  # :25
LEGACY_TIKTOKEN_SPECIALS = ["<unk>", "<s>", "</s>"]  # CustomTikTokenizer
TIKTOKEN_PATTERNS = {  # tiktoken_tokenizer.py:20-23
    "v1": r"[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
    "v2": r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}


@dataclass(frozen=True)
class Encoding:
    """What `tokenizers.Tokenizer.encode` returns, as far as callers read it."""

    ids: list[int]


class _Decoder:
    """The part of the `tokenizers.Tokenizer` interface the replay calls (and `encode`, which
    the spike's tokenizer check uses to see that the data round-trips)."""

    vocab_size: int

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        raise NotImplementedError

    def encode(self, text: str, add_special_tokens: bool = False) -> Encoding:
        raise NotImplementedError

    def decode_batch(self, batch: list[list[int]], skip_special_tokens: bool = False) -> list[str]:
        return [self.decode(ids) for ids in batch]

    def get_vocab_size(self, with_added_tokens: bool = True) -> int:
        return self.vocab_size


class SentencePieceDecoder(_Decoder):
    """megatron-core's SentencePieceTokenizer.ids_to_text, or (legacy_tokenizer) Megatron-LM's
    legacy class of `tokenizer_type`; `sp.decode_ids` itself, so byte-fallback pieces cut at a
    segment edge decode to one U+FFFD per byte, as in the run's own tokenizer."""

    def __init__(
        self,
        path: Path,
        *,
        tokenizer_type: str = "GPTSentencePieceTokenizer",
        legacy: bool = False,
        special_tokens: list[str] | None = None,
        legacy_tokenizer: bool = False,
        vocab_extra_ids: int = 0,
    ) -> None:
        import sentencepiece

        self.sp = sentencepiece.SentencePieceProcessor()
        try:
            self.sp.Load(str(path))
        except (OSError, RuntimeError) as err:
            raise ForensicsError(f"{path}: not a SentencePiece model ({err})") from None
        self.specials: dict[int, str] = {}
        self.strip = False
        self.vocab_size = self.sp.get_piece_size()
        if legacy_tokenizer:
            if tokenizer_type == "SentencePieceTokenizer":
                self._legacy_megatron_lm_specials(vocab_extra_ids)
        elif special_tokens:
            if not legacy:  # sentencepiece_tokenizer.py:77-83 raises the same
                raise ForensicsError(
                    "tokenizer_args.tokenizer_special_tokens needs "
                    "tokenizer_sentencepiece_legacy (megatron-core refuses special tokens "
                    "without --tokenizer-sentencepiece-legacy)"
                )
            for token in special_tokens:
                self._add(token)
        self.strip = legacy and not legacy_tokenizer

    def encode(self, text: str, add_special_tokens: bool = False) -> Encoding:
        """The model's own encoding of plain text (megatron-core's text_to_ids on text holding
        no special token)."""
        return Encoding(list(self.sp.encode_as_ids(text)))

    def _add(self, token: str) -> None:
        """sentencepiece_tokenizer.py:282-293: the model's own piece, else the next id."""
        known = self.sp.piece_to_id(token)
        if known != self.sp.unk_id():
            self.specials[known] = token
        elif token not in self.specials.values():
            self.specials[self.vocab_size] = token
            self.vocab_size += 1

    def _legacy_megatron_lm_specials(self, vocab_extra_ids: int) -> None:
        """_SentencePieceTokenizer._initalize: the specials, added past the model's pieces."""
        pieces = {self.sp.id_to_piece(i): i for i in range(self.sp.get_piece_size())}
        names = ["<CLS>", "<SEP>", "<EOD>", "<MASK>"]
        for get, fallback in ((self.sp.pad_id, "<PAD>"), (self.sp.bos_id, "<BOS>")) + (
            (self.sp.eos_id, "<EOS>"),
        ):
            piece_id = get()
            size = self.sp.get_piece_size()
            names.append(self.sp.id_to_piece(piece_id) if 0 <= piece_id < size else fallback)
        names += [f"<extra_id_{i}>" for i in range(vocab_extra_ids)]
        for name in names:
            if name not in pieces:
                pieces[name] = len(pieces)
            self.specials[pieces[name]] = name
        self.vocab_size = len(pieces)

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        text, last = "", 0
        for i, token in enumerate(ids):
            if token in self.specials:
                text += self.sp.decode_ids(ids[last:i]) + " " + self.specials[token] + " "
                last = i + 1
        text += self.sp.decode_ids(ids[last:])
        return text.strip() if self.strip else text

    def decode_batch(self, batch: list[list[int]], skip_special_tokens: bool = False) -> list[str]:
        if not self.specials and not self.strip:  # one call into the library for the batch
            return list(self.sp.decode_ids(batch)) if batch else []
        return super().decode_batch(batch)


def _read_tiktoken_vocab(path: Path, keep: int) -> list[bytes]:
    """reload_mergeable_ranks (tiktoken_tokenizer.py:31-73): the first `keep` token byte strings,
    each entry checked the way megatron-core asserts it, as one-line errors."""
    try:
        vocab = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ForensicsError(f"{path}: not a TikTokenizer JSON vocab ({err})") from None
    if not isinstance(vocab, list):
        raise ForensicsError(f"{path}: not a TikTokenizer JSON vocab (a list of ranks)")
    if len(vocab) < keep:
        raise ForensicsError(
            f"{path}: {len(vocab)} tokens, but the vocabulary size needs {keep} past the "
            "special tokens: give the run's --vocab-size (tokenizer_args.vocab_size)"
        )
    out: list[bytes] = []
    for i, entry in enumerate(vocab[:keep]):
        if not isinstance(entry, dict) or entry.keys() != {"rank", "token_bytes", "token_str"}:
            raise ForensicsError(f"{path}: entry {i} is not {{rank, token_bytes, token_str}}")
        if entry["rank"] != i:
            raise ForensicsError(f"{path}: entry {i} has rank {entry['rank']!r}")
        out.append(base64.b64decode(entry["token_bytes"]))
    if len(set(out)) != len(out):
        raise ForensicsError(f"{path}: the same token bytes appear under two ranks")
    return out


class TikTokenDecoder(_Decoder):
    """The `tiktoken.Encoding` megatron-core's TikTokenTokenizer builds, decoding joined bytes."""

    def __init__(
        self,
        path: Path,
        *,
        pattern: str | None = None,
        vocab_size: int | None = None,
        num_special_tokens: int | None = None,
        special_tokens: list[str] | None = None,
        legacy_tokenizer: bool = False,
    ) -> None:
        import tiktoken

        if pattern not in (None, *TIKTOKEN_PATTERNS):
            raise ForensicsError(f"tiktoken_pattern {pattern!r}: Megatron knows v1 and v2")
        if legacy_tokenizer and pattern is None:  # CustomTikTokenizer asserts a pattern
            raise ForensicsError("--legacy-tokenizer TikTokenizer needs --tiktoken-pattern")
        self.vocab_size = vocab_size or TIKTOKEN_DEFAULT_VOCAB
        specials_n = TIKTOKEN_DEFAULT_SPECIALS if num_special_tokens is None else num_special_tokens
        named = list(special_tokens or (LEGACY_TIKTOKEN_SPECIALS if legacy_tokenizer else []))
        named = named or list(TIKTOKEN_SPECIALS)
        required = LEGACY_TIKTOKEN_SPECIALS if legacy_tokenizer else TIKTOKEN_SPECIALS
        if len(set(named)) != len(named) or not set(required) <= set(named):
            raise ForensicsError(
                f"tokenizer_special_tokens must be unique and include {' '.join(required)}"
            )
        if not len(named) <= specials_n < self.vocab_size:
            raise ForensicsError(
                f"tiktoken_num_special_tokens {specials_n} must be at least the {len(named)} "
                f"named special tokens and below the vocabulary size {self.vocab_size}"
            )
        names = named + [f"<SPECIAL_{i}>" for i in range(len(named), specials_n)]
        ranks = _read_tiktoken_vocab(path, self.vocab_size - specials_n)
        self.encoding = tiktoken.Encoding(
            name=path.parent.name,
            pat_str=TIKTOKEN_PATTERNS[pattern or "v2"],
            mergeable_ranks={tok: i + specials_n for i, tok in enumerate(ranks)},
            special_tokens={name: i for i, name in enumerate(names)},
        )
        self.eod = names.index("</s>")

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self.encoding.decode(ids)

    def encode(self, text: str, add_special_tokens: bool = False) -> Encoding:
        """Plain text, special-token strings encoded as text (tiktoken's encode_ordinary)."""
        return Encoding(self.encoding.encode_ordinary(text))

    def decode_batch(self, batch: list[list[int]], skip_special_tokens: bool = False) -> list[str]:
        return self.encoding.decode_batch(batch)

    def token_bytes(self) -> list[bytes] | None:
        """Every id's bytes, for `token_bytes.ByteTable`: `Encoding.decode` is the joined bytes
        decoded as UTF-8 with replacement (tiktoken/core.py), so the table decodes the same."""
        try:
            single = self.encoding.decode_single_token_bytes
            return [single(i) for i in range(self.encoding.n_vocab)]
        except KeyError:  # an id without a token: leave decoding to tiktoken
            return None


def is_tiktoken_vocab(path: Path) -> bool:
    """Whether a .json file is a TikTokenizer vocab (a list of ranks), not a tokenizer.json."""
    with open(path, "rb") as f:
        head = f.read(4096).lstrip()
    return head.startswith(b"[") and b'"token_bytes"' in head


def megatron_tokenizer(path: Path, args: dict[str, Any]) -> _Decoder:
    """The decoder Megatron's build_tokenizer makes from `--tokenizer-type` and its flags."""
    kind = args.get("tokenizer_type")
    legacy_tokenizer = bool(args.get("legacy_tokenizer"))
    if kind in SENTENCEPIECE_TYPES:
        return SentencePieceDecoder(
            path,
            tokenizer_type=kind,
            legacy=bool(args.get("tokenizer_sentencepiece_legacy")),
            special_tokens=args.get("tokenizer_special_tokens"),
            legacy_tokenizer=legacy_tokenizer,
            vocab_extra_ids=int(args.get("vocab_extra_ids") or 0),
        )
    if kind == "TikTokenizer":
        return TikTokenDecoder(
            path,
            pattern=args.get("tiktoken_pattern"),
            vocab_size=args.get("vocab_size"),
            num_special_tokens=args.get("tiktoken_num_special_tokens"),
            special_tokens=args.get("tokenizer_special_tokens"),
            legacy_tokenizer=legacy_tokenizer,
        )
    raise ForensicsError(f"tokenizer_type {kind!r} is not a SentencePiece or TikTokenizer type")
