"""Load the run's tokenizer, to turn replayed tokens back into text.

Megatron runs name their tokenizer in several ways, and the replay must accept what the user has at
hand rather than ask for a conversion at 3 a.m.:

- a Hugging Face `tokenizer.json` file (`--tokenizer-type HuggingFaceTokenizer`, most new runs);
- a directory holding `tokenizer.json` (a saved Hugging Face tokenizer, `--tokenizer-model DIR`);
- GPT-2's `vocab.json` + `merges.txt` (`--tokenizer-type GPT2BPETokenizer --vocab-file
  --merge-file`), rebuilt as a byte-level BPE with the `tokenizers` library.

SentencePiece `.model` files cannot be read by `tokenizers` alone; the error says how to convert.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def load_tokenizer(path: Path | None, merges: Path | None = None) -> Any:
    """A `tokenizers.Tokenizer` from a tokenizer.json, a directory, or a GPT-2 vocab + merges."""
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
    if path.suffix == ".model":
        raise ForensicsError(
            f"{path}: a SentencePiece model; convert it once with transformers "
            "(AutoTokenizer.from_pretrained(dir).save_pretrained(out)) and give out/tokenizer.json"
        )
    if merges is not None or (path.name.endswith("vocab.json") and _sibling_merges(path)):
        return _gpt2_bpe(path, merges or _sibling_merges(path))  # type: ignore[arg-type]
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(str(path))
    except Exception as err:  # tokenizers raises a bare Exception on a bad file
        raise ForensicsError(f"{path}: not a tokenizer.json ({err})") from None


def _sibling_merges(vocab: Path) -> Path | None:
    for name in ("merges.txt", vocab.name.replace("vocab.json", "merges.txt")):
        candidate = vocab.with_name(name)
        if candidate.is_file():
            return candidate
    return None
