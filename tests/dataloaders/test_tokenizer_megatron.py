"""Megatron's SentencePiece and TikTokenizer runs decode to the text megatron-core itself decodes.

The tokenizers are the library's: a SentencePiece model trained here with sentencepiece's own
trainer (byte_fallback=True) and a TikTokenizer JSON vocab in NVIDIA's format, each loaded through
megatron-core 0.16.1's `build_tokenizer` (megatron/core/tokenizers/text/utils/build_tokenizer.py)
from the same argument names the launch line sets. The ids are megatron-core's own encoding of
documents joined with the EOD id, as `tools/preprocess_data.py --append-eod` writes them, and every
window of the stream is decoded, so segments that start or end inside a multibyte character (byte
fallback pieces, byte-level tiktoken tokens) are compared too.
"""

from __future__ import annotations

import argparse
import base64
import json
from pathlib import Path

import pytest

from dataloaders.megatron.launch_args import config_from_megatron_args
from dataloaders.run_config import config_from_dict
from dataloaders.tokenizer import load_tokenizer
from forensics.errors import ForensicsError

pytest.importorskip("megatron.core")
sentencepiece = pytest.importorskip("sentencepiece")
pytest.importorskip("tiktoken")

TRAIN = (Path(__file__).read_text(encoding="utf-8") + "\nplain ascii words and numbers 1234\n") * 4
DOCS = [
    "Zürich café — naïve coöperation: 東京 and 🙂 tokens\nsecond line",
    "  leading spaces, <s> a literal tag, </s> and <SPECIAL_9> in text ",
    "ǅ ß Ω ∑ 𝔘𝔫𝔦 ⁇ end",
    "",
    "last document\twith a tab",
]


def _windows(stream: list[int], widths: tuple[int, ...] = (1, 2, 3, 5, 8, 13)) -> list[list[int]]:
    """Every slice of `stream` of each width: the segments a sample boundary can cut."""
    return [stream[i : i + w] for w in widths for i in range(len(stream) - w + 1)]


def _megatron(**flags: object):  # noqa: ANN202 (megatron-core's tokenizer object)
    from megatron.core.tokenizers.text.utils.build_tokenizer import build_tokenizer

    args = {"tokenizer_special_tokens": None, "tokenizer_metadata": None, **flags}
    return build_tokenizer(argparse.Namespace(**args))


def _stream(tok) -> list[int]:  # noqa: ANN001
    """The documents as preprocessing writes them. With legacy=True megatron-core's wrapper has
    no `eod` (its eos_id reads an `eos_token` that list-given special tokens never set), so
    those runs end documents with the model's own `</s>` id."""
    try:
        eod = tok.eod
    except AttributeError:
        eod = tok._tokenizer.tokenizer.eos_id()
    out: list[int] = []
    for doc in DOCS:
        out += [*tok.tokenize(doc), eod]
    return out


@pytest.fixture(scope="module")
def sp_model(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("spm")
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(TRAIN.splitlines()),
        model_prefix=str(folder / "tok"),
        vocab_size=600,
        byte_fallback=True,
        model_type="bpe",
        minloglevel=2,
    )
    return folder / "tok.model"


@pytest.fixture(scope="module")
def tiktoken_vocab(tmp_path_factory) -> Path:
    """NVIDIA's TikTokenizer JSON: ranks 0..255 the single bytes, then byte-level BPE merges
    (learned here with the `tokenizers` trainer) in merge order."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok.train_from_iterator(
        [TRAIN], trainers.BpeTrainer(vocab_size=600, initial_alphabet=alphabet, show_progress=False)
    )
    to_byte = {ch: b for b, ch in _byte_level_chars().items()}
    ranks = [bytes([i]) for i in range(256)]
    seen = set(ranks)
    for merge in json.loads(tok.to_str())["model"]["merges"]:
        left, right = merge if isinstance(merge, list) else merge.split(" ")
        token = bytes(to_byte[c] for c in left + right)
        if token not in seen:
            seen.add(token)
            ranks.append(token)
    vocab = [_entry(i, t) for i, t in enumerate(ranks)]
    path = tmp_path_factory.mktemp("tiktoken") / "vocab.json"
    path.write_text(json.dumps(vocab), encoding="utf-8")
    return path


def _entry(rank: int, token: bytes) -> dict[str, object]:
    text = token.decode("utf-8", "replace")
    return {"rank": rank, "token_bytes": base64.b64encode(token).decode(), "token_str": text}


def _byte_level_chars() -> dict[int, str]:
    """GPT-2's byte -> printable character table (the ByteLevel pre-tokenizer's alphabet)."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


@pytest.mark.parametrize(
    "flags",
    [
        {"tokenizer_type": "GPTSentencePieceTokenizer", "tokenizer_sentencepiece_legacy": False},
        {"tokenizer_type": "SentencePieceTokenizer", "tokenizer_sentencepiece_legacy": False},
        {"tokenizer_type": "Llama2Tokenizer", "tokenizer_sentencepiece_legacy": True},
        {
            "tokenizer_type": "SentencePieceTokenizer",
            "tokenizer_sentencepiece_legacy": True,
            "tokenizer_special_tokens": ["<s>", "</s>", "<extra_0>", "<extra_1>"],
        },
    ],
)
def test_sentencepiece_segments_equal_megatron_core(sp_model, flags) -> None:
    mcore = _megatron(tokenizer_model=str(sp_model), **flags)
    ours = load_tokenizer(sp_model, args=flags)
    stream = _stream(mcore)
    assert ours.get_vocab_size() == mcore.vocab_size
    assert any(3 <= t < 259 for t in stream), "no byte-fallback piece in the data"
    windows = _windows(stream)
    assert ours.decode_batch(windows) == [mcore.detokenize(w) for w in windows]
    assert "\ufffd" in "".join(ours.decode_batch(windows))  # cut characters were compared
    assert ours.decode(stream) == mcore.detokenize(stream)


@pytest.mark.parametrize(
    "flags",
    [
        {"tiktoken_pattern": "v2", "tiktoken_num_special_tokens": 16},
        {"tiktoken_pattern": "v1", "tiktoken_num_special_tokens": 1000},
        {"tiktoken_pattern": None, "tiktoken_num_special_tokens": 7},
    ],
)
def test_tiktoken_segments_equal_megatron_core(tiktoken_vocab, flags) -> None:
    """The oracle is the `tiktoken.Encoding` megatron-core builds from the run's flags; its
    `ids_to_text` agrees wherever no character is split between two tokens (it decodes token by
    token, tiktoken_tokenizer.py:214-230)."""
    entries = len(json.loads(tiktoken_vocab.read_text(encoding="utf-8")))
    flags = {**flags, "vocab_size": entries + flags["tiktoken_num_special_tokens"]}
    mcore = _megatron(tokenizer_type="TikTokenizer", tokenizer_model=str(tiktoken_vocab), **flags)
    encoding = mcore._tokenizer.tokenizer  # the tiktoken.Encoding megatron-core built
    ours = load_tokenizer(tiktoken_vocab, args={"tokenizer_type": "TikTokenizer", **flags})
    stream = _stream(mcore)
    assert ours.get_vocab_size() == mcore.vocab_size
    assert mcore.eod in stream and {1, 2} <= set(stream)  # literal <s>, </s> are special ids
    windows = _windows(stream)
    decoded = ours.decode_batch(windows)
    assert decoded == [encoding.decode(w) for w in windows]
    assert "\ufffd" in "".join(decoded)
    whole = [w for w in windows if all(encoding.decode_single_token_bytes(t).isascii() for t in w)]
    assert whole and [ours.decode(w) for w in whole] == [mcore.detokenize(w) for w in whole]


def test_launch_flags_reach_the_decoder(sp_model, tiktoken_vocab, tmp_path) -> None:
    base = ["--data-path", str(tmp_path / "d_text_document"), "--seq-length", "16",
            "--global-batch-size", "4", "--train-iters", "3"]  # fmt: skip
    entries = len(json.loads(tiktoken_vocab.read_text(encoding="utf-8")))
    tik = config_from_megatron_args(
        [
            *base,
            "--tokenizer-type",
            "TikTokenizer",
            "--tokenizer-model",
            str(tiktoken_vocab),
            "--tiktoken-pattern",
            "v1",
            "--tiktoken-num-special-tokens",
            "32",
            "--vocab-size",
            str(entries + 32),
        ],  # fmt: skip
        config_from_dict=config_from_dict,
    )
    assert tik.tokenizer_args is not None and tik.tokenizer_args.tiktoken_num_special_tokens == 32
    mcore = _megatron(
        tokenizer_type="TikTokenizer", tokenizer_model=str(tiktoken_vocab),
        tiktoken_pattern="v1", tiktoken_num_special_tokens=32, vocab_size=entries + 32,
    )  # fmt: skip
    ours = load_tokenizer(tik.tokenizer, args=tik.tokenizer_args.model_dump())
    stream = _stream(mcore)
    assert ours.decode(stream) == mcore._tokenizer.tokenizer.decode(stream)
    spm = config_from_megatron_args(
        [
            *base,
            "--tokenizer-type",
            "SentencePieceTokenizer",
            "--tokenizer-model",
            str(sp_model),
            "--tokenizer-sentencepiece-legacy",
            "--tokenizer-special-tokens",
            "<extra_0>",
        ],  # fmt: skip
        config_from_dict=config_from_dict,
    )
    assert spm.tokenizer_args is not None and spm.tokenizer_args.tokenizer_sentencepiece_legacy
    mcore = _megatron(
        tokenizer_type="SentencePieceTokenizer", tokenizer_model=str(sp_model),
        tokenizer_sentencepiece_legacy=True, tokenizer_special_tokens=["<extra_0>"],
    )  # fmt: skip
    ours = load_tokenizer(spm.tokenizer, args=spm.tokenizer_args.model_dump())
    stream = [*_stream(mcore), 600]  # the added special token's id, past the model's pieces
    assert ours.decode(stream) == mcore.detokenize(stream)


def test_files_alone_decode_with_megatron_defaults(sp_model, tiktoken_vocab, tmp_path) -> None:
    """Without --tokenizer-type: a .model is megatron-core's SentencePiece (legacy off); a JSON
    list of ranks is its TikTokenizer with Megatron's defaults (1000 specials, 131072 ids)."""
    mcore = _megatron(
        tokenizer_type="GPTSentencePieceTokenizer",
        tokenizer_model=str(sp_model),
        tokenizer_sentencepiece_legacy=False,
    )
    stream = _stream(mcore)
    assert load_tokenizer(sp_model).decode(stream) == mcore.detokenize(stream)
    vocab = json.loads(tiktoken_vocab.read_text(encoding="utf-8"))
    big = [*vocab]
    while len(big) < 2**17 - 1000:  # pad to Megatron's default vocabulary with unique tokens
        token = b"\xff\xfe" + len(big).to_bytes(4, "big")
        big.append(_entry(len(big), token))
    path = tmp_path / "full.json"
    path.write_text(json.dumps(big), encoding="utf-8")
    mcore = _megatron(
        tokenizer_type="TikTokenizer",
        tokenizer_model=str(path),
        tiktoken_pattern=None,
        vocab_size=None,
        tiktoken_num_special_tokens=1000,
    )
    stream = _stream(mcore)
    ours = load_tokenizer(path)
    assert ours.get_vocab_size() == 2**17 == mcore.vocab_size
    assert ours.decode(stream) == mcore._tokenizer.tokenizer.decode(stream)


def test_bad_megatron_tokenizers_are_one_line_errors(sp_model, tiktoken_vocab, tmp_path) -> None:
    (tmp_path / "broken.model").write_bytes(b"\x00\x01")
    (tmp_path / "ranks.json").write_text('[{"rank": 1, "token_bytes": "AA==", "token_str": ""}]')
    cases = [
        (tmp_path / "broken.model", {}, "not a SentencePiece model"),
        (tiktoken_vocab, {"tokenizer_type": "TikTokenizer"}, "give the run's --vocab-size"),
        (tmp_path / "ranks.json", {"tokenizer_type": "TikTokenizer", "vocab_size": 1001},
         "entry 0 has rank 1"),
        (tiktoken_vocab, {"tokenizer_type": "TikTokenizer", "tiktoken_pattern": "v3"},
         "Megatron knows v1 and v2"),
        (tiktoken_vocab, {"tokenizer_type": "TikTokenizer", "tokenizer_special_tokens": ["<s>"]},
         "include <unk> <s> </s>"),
        (sp_model, {"tokenizer_type": "Llama2Tokenizer", "tokenizer_special_tokens": ["<x>"]},
         "needs tokenizer_sentencepiece_legacy"),
        (sp_model, {"legacy_tokenizer": True}, "--legacy-tokenizer needs the run's"),
        (sp_model, {"tokenizer_type": "HuggingFaceTokenizer"}, "a SentencePiece model, but"),
    ]  # fmt: skip
    for path, args, message in cases:
        with pytest.raises(ForensicsError, match=message):
            load_tokenizer(path, args=args)


@pytest.mark.parametrize(
    "kind,extra",
    [
        ("SentencePieceTokenizer", 0),
        ("SentencePieceTokenizer", 2),
        ("GPTSentencePieceTokenizer", 0),
        ("Llama2Tokenizer", 0),
    ],  # fmt: skip
)
def test_legacy_sentencepiece_equals_megatron_lm(sp_model, kind, extra) -> None:
    """`--legacy-tokenizer`: Megatron-LM's own legacy classes (tests/oracles/upstream) decode."""
    from oracles.upstream import megatron_lm_legacy_tokenizer as legacy

    if kind == "SentencePieceTokenizer":
        theirs = legacy._SentencePieceTokenizer(str(sp_model), vocab_extra_ids=extra)
    else:
        theirs = getattr(legacy, f"_{kind}")(str(sp_model))
    out: list[int] = []
    for doc in DOCS:
        out += [*theirs.tokenize(doc), theirs.eod]
    if kind == "SentencePieceTokenizer":  # the added specials past the model: <CLS>, <extra_id_1>
        out[5:5] = [theirs.cls, theirs.vocab_size - 1]
    args = {"tokenizer_type": kind, "legacy_tokenizer": True, "vocab_extra_ids": extra}
    ours = load_tokenizer(sp_model, args=args)
    assert ours.get_vocab_size() == theirs.vocab_size
    windows = _windows(out)
    assert ours.decode_batch(windows) == [theirs.detokenize(w) for w in windows]


def test_legacy_tiktoken_equals_megatron_lm(tiktoken_vocab) -> None:
    from oracles.upstream import megatron_lm_legacy_tokenizer as legacy

    entries = len(json.loads(tiktoken_vocab.read_text(encoding="utf-8")))
    flags = {
        "tiktoken_pattern": "v2",
        "vocab_size": entries + 10,
        "tiktoken_num_special_tokens": 10,
    }
    theirs = legacy.CustomTikTokenizer(
        path=str(tiktoken_vocab),
        pattern=legacy.PATTERN_TIKTOKEN_V2,
        vocab_size=flags["vocab_size"],
        num_special_tokens=10,
        special_tokens=None,
    )
    out: list[int] = []
    for doc in DOCS:
        out += [*theirs.tokenize(doc), theirs.eod, 5]  # 5: <SPECIAL_5> with three named specials
    args = {"tokenizer_type": "TikTokenizer", "legacy_tokenizer": True, **flags}
    ours = load_tokenizer(tiktoken_vocab, args=args)
    windows = _windows(out)
    assert ours.decode_batch(windows) == [theirs.detokenize(w) for w in windows]
