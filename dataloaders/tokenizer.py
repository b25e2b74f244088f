"""Load the run's tokenizer, to turn replayed tokens back into text.

Megatron runs name their tokenizer in several ways, and the replay must accept what the user has at
hand rather than ask for a conversion at 3 a.m.:

- a Hugging Face `tokenizer.json` file (`--tokenizer-type HuggingFaceTokenizer`, most new runs);
- a directory holding `tokenizer.json` (a saved Hugging Face tokenizer, `--tokenizer-model DIR`);
- GPT-2's `vocab.json` + `merges.txt` (`--tokenizer-type GPT2BPETokenizer --vocab-file
  --merge-file`), rebuilt as a byte-level BPE with the `tokenizers` library;
- a SentencePiece `.model` (`SentencePieceTokenizer`, `GPTSentencePieceTokenizer`,
  `Llama2Tokenizer`) or NVIDIA's TikTokenizer JSON vocab (`TikTokenizer`), decoded with
  `sentencepiece` / `tiktoken` exactly as megatron-core decodes them
  (dataloaders/tokenizer_megatron.py).
  A `tokenizer.json` converted from a `.model` decodes differently where a segment cuts a
  character, so the `.model` itself is read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dataloaders import tokenizer_megatron as tm
from dataloaders.errors import ForensicsError


def _gpt2_bpe(vocab: Path, merges: Path) -> Any:
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE

    try:
        model = BPE.from_file(str(vocab), str(merges))
    except Exception as err:  # tokenizers raises bare Exceptions on malformed files
        raise ForensicsError(f"{vocab}: not a GPT-2 vocab.json/merges.txt pair ({err})") from None
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def load_tokenizer(
    path: Path | None, merges: Path | None = None, args: dict[str, Any] | None = None
) -> Any:
    """A `tokenizers.Tokenizer` from a tokenizer.json, a directory, or a GPT-2 vocab + merges, or
    a decoder of Megatron's SentencePiece / TikTokenizer types; `args` are Megatron's tokenizer
    flags (`RunConfig.tokenizer_args`)."""
    if path is None:
        raise ForensicsError(
            "decoding text needs `tokenizer:` in the config (a tokenizer.json, a directory "
            "holding one, or a GPT-2 vocab.json with merges.txt beside it)"
        )
    path = Path(path)
    if path.is_dir():
        if (path / "tokenizer.json").is_file():
            path = path / "tokenizer.json"
        elif (path / "vocab.json").is_file() and (path / "merges.txt").is_file():
            return _gpt2_bpe(path / "vocab.json", path / "merges.txt")
        else:
            raise ForensicsError(f"{path}: no tokenizer.json (nor vocab.json + merges.txt) in it")
    if not path.is_file():
        raise ForensicsError(f"{path}: tokenizer file not found")
    megatron = _megatron_decoder(path, args or {})
    if megatron is not None:
        return megatron
    if merges is not None or (path.name.endswith("vocab.json") and _sibling_merges(path)):
        return _gpt2_bpe(path, merges or _sibling_merges(path))  # type: ignore[arg-type]
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(str(path))
    except Exception as err:  # tokenizers raises a bare Exception on a bad file
        raise ForensicsError(f"{path}: not a tokenizer.json ({err})") from None


def _megatron_decoder(path: Path, args: dict[str, Any]) -> Any:
    """The SentencePiece / TikTokenizer decoder `args` (or the file itself) asks for, else None.
    Without --tokenizer-type a `.model` decodes as megatron-core's SentencePiece types all do
    (legacy off), and a JSON list of ranks as its TikTokenizer with Megatron's defaults."""
    kind = args.get("tokenizer_type")
    if kind is None:
        if args.get("legacy_tokenizer"):  # its three SentencePiece classes decode differently
            raise ForensicsError("--legacy-tokenizer needs the run's --tokenizer-type")
        if path.suffix == ".model":
            kind = "GPTSentencePieceTokenizer"
        elif path.suffix == ".json" and tm.is_tiktoken_vocab(path):
            kind = "TikTokenizer"
        else:
            return None
        args = {**args, "tokenizer_type": kind}
    if kind in tm.SENTENCEPIECE_TYPES or kind == "TikTokenizer":
        return tm.megatron_tokenizer(path, args)
    if path.suffix == ".model":
        raise ForensicsError(f"{path}: a SentencePiece model, but the tokenizer type is {kind}")
    return None


def _sibling_merges(vocab: Path) -> Path | None:
    for name in ("merges.txt", vocab.name.replace("vocab.json", "merges.txt")):
        candidate = vocab.with_name(name)
        if candidate.is_file():
            return candidate
    return None


def special_ids(tokenizer: Any) -> set[int]:
    """The tokenizer's special tokens (BOS, EOS, EOD, pad): preprocessing adds them around the
    text, and a tokenizer's pre-tokenizer (a SentencePiece `Metaspace` prefix, say) treats text
    after one differently, so they are left out of the round trip."""
    try:
        added = tokenizer.get_added_tokens_decoder()
    except AttributeError:
        return set()
    return {int(i) for i, token in added.items() if getattr(token, "special", False)}
