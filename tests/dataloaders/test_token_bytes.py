"""`token_bytes.decode_arrays` gives exactly the libraries' own decoding (tokenizers' ByteLevel
decoder, tiktoken's Encoding), cut characters and invalid byte runs included, and leaves every
other tokenizer to the library."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path

import numpy as np
import pytest
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

from dataloaders.token_bytes import byte_table, decode_arrays
from dataloaders.tokenizer import load_tokenizer

ROOT = Path(__file__).resolve().parents[2]
TEXT = "Zürich café — naïve coöperation: 東京 and 123 tokens 😀 Ελληνικά русский\n\tend"


def _corpus() -> list[str]:
    """Text from the repository (its docs and this package's source) plus non-ASCII lines."""
    files = sorted((ROOT / "docs").glob("*.md"))[:8] + sorted((ROOT / "dataloaders").glob("*.py"))
    return [f.read_text(encoding="utf-8") for f in files] + [TEXT] * 20


def _byte_bpe(special: str = "<|endoftext|>") -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=900,
        special_tokens=[special],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer)
    return tok


def _rows(tok_ids: list[list[int]], vocab: int, seed: int) -> list[np.ndarray]:
    """Real documents, every short window of them (characters cut at both ends), and random
    ids (invalid UTF-8 of every kind), as uint16 arrays like a `.bin`'s."""
    rnd = random.Random(seed)
    rows = [np.asarray(ids, dtype=np.uint16) for ids in tok_ids]
    for ids in tok_ids[:6]:
        rows += [np.asarray(ids[i : i + w], dtype=np.uint16) for w in (1, 2, 3) for i in range(60)]
    rows += [
        np.asarray([rnd.randrange(vocab) for _ in range(rnd.randint(0, 40))], dtype=np.uint16)
        for _ in range(400)
    ]
    return rows


def test_byte_level_tables_decode_as_tokenizers_does() -> None:
    tok = _byte_bpe()
    assert byte_table(tok) is not None
    docs = [e.ids + [tok.token_to_id("<|endoftext|>")] for e in tok.encode_batch(_corpus())]
    rows = _rows(docs, tok.get_vocab_size(), seed=1)
    ours = decode_arrays(tok, rows)
    theirs = tok.decode_batch([r.tolist() for r in rows], skip_special_tokens=False)
    assert ours == theirs
    assert "\ufffd" in "".join(ours) and "<|endoftext|>" in "".join(ours)
    assert decode_arrays(tok, [r.tolist() for r in rows[:50]]) == theirs[:50]  # lists too


def test_gpt2_vocab_and_merges_layout_uses_the_table(tmp_path) -> None:
    tok = _byte_bpe()
    tok.model.save(str(tmp_path))  # vocab.json + merges.txt
    loaded = load_tokenizer(tmp_path / "vocab.json")
    assert byte_table(loaded) is not None
    rows = _rows([tok.encode(TEXT).ids], tok.get_vocab_size(), seed=2)
    lists = [r.tolist() for r in rows]
    assert decode_arrays(loaded, rows) == loaded.decode_batch(lists, skip_special_tokens=False)


def test_other_tokenizers_decode_with_the_library() -> None:
    """A spaced added token (versions differ on whether it passes through the decoder), a
    Metaspace decoder, ids past the vocabulary: the library decodes, so the text is its own."""
    spaced = _byte_bpe()
    spaced.add_tokens([AddedToken("two words", special=False)])
    metaspace = _byte_bpe()
    metaspace.decoder = decoders.Metaspace()
    for tok in (spaced, metaspace):
        assert byte_table(tok) is None
        rows = _rows([tok.encode(TEXT).ids], tok.get_vocab_size(), seed=3)
        lists = [r.tolist() for r in rows]
        assert decode_arrays(tok, rows) == tok.decode_batch(lists, skip_special_tokens=False)
    plain = _byte_bpe()
    past = [np.asarray([5, plain.get_vocab_size() + 3, 7])]
    assert decode_arrays(plain, past) == plain.decode_batch([past[0].tolist()], False)


def _tiktoken_vocab(path: Path) -> Path:
    """NVIDIA's TikTokenizer JSON: the 256 single bytes, then multi-byte tokens of TEXT."""
    tokens = [bytes([i]) for i in range(256)]
    for word in TEXT.split() + ["the", " the", "ing", " and"]:
        raw = word.encode("utf-8")
        for piece in (raw, raw[:2], raw[1:]):
            if len(piece) > 1 and piece not in tokens:
                tokens.append(piece)
    entries = [
        {"rank": i, "token_bytes": base64.b64encode(t).decode(), "token_str": ""}
        for i, t in enumerate(tokens)
    ]
    path.write_text(json.dumps(entries), encoding="utf-8")
    return path


def test_tiktoken_tables_decode_as_tiktoken_does(tmp_path) -> None:
    pytest.importorskip("tiktoken")
    vocab = _tiktoken_vocab(tmp_path / "vocab.json")
    n = len(json.loads(vocab.read_text(encoding="utf-8")))
    args = {
        "tokenizer_type": "TikTokenizer",
        "vocab_size": n + 16,
        "tiktoken_num_special_tokens": 16,
    }
    ours = load_tokenizer(vocab, args=args)
    assert byte_table(ours) is not None
    docs = [ours.encode(TEXT).ids + [ours.eod], ours.encode(TEXT[::-1]).ids]
    rows = _rows(docs, n + 16, seed=4)
    decoded = decode_arrays(ours, rows)
    assert decoded == ours.encoding.decode_batch([r.tolist() for r in rows])
    assert "\ufffd" in "".join(decoded) and "</s>" in "".join(decoded)
