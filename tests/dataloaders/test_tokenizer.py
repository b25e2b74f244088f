"""The run's tokenizer in each layout Megatron runs use decodes replayed tokens to the same text."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from dataloaders.megatron.launch_args import config_from_megatron_args
from dataloaders.run_config import config_from_dict
from dataloaders.tokenizer import load_tokenizer
from forensics.errors import ForensicsError

TEXT = "Zürich café — naïve coöperation: 東京 and 123 tokens\nsecond line"


@pytest.fixture(scope="module")
def gpt2_style(tmp_path_factory) -> tuple[Path, list[int]]:
    """A byte-level BPE trained here, saved both as tokenizer.json and as vocab.json/merges.txt."""
    folder = tmp_path_factory.mktemp("tok")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [Path(__file__).read_text(encoding="utf-8"), TEXT] * 20
    trainer = trainers.BpeTrainer(
        vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus, trainer)
    tok.save(str(folder / "tokenizer.json"))
    tok.model.save(str(folder))  # vocab.json + merges.txt, GPT-2's layout
    return folder, tok.encode(TEXT).ids


def test_every_layout_decodes_the_same_text(gpt2_style):
    folder, ids = gpt2_style
    layouts = [
        load_tokenizer(folder / "tokenizer.json"),
        load_tokenizer(folder),  # a directory holding tokenizer.json
        load_tokenizer(folder / "vocab.json"),  # merges.txt found beside it
        load_tokenizer(folder / "vocab.json", folder / "merges.txt"),
    ]
    for tok in layouts:
        assert tok.decode(ids) == TEXT


def test_gpt2_directory_without_tokenizer_json(gpt2_style, tmp_path):
    folder, ids = gpt2_style
    for name in ("vocab.json", "merges.txt"):
        (tmp_path / name).write_bytes((folder / name).read_bytes())
    assert load_tokenizer(tmp_path).decode(ids) == TEXT


def test_megatron_vocab_and_merge_files(gpt2_style, tmp_path):
    folder, ids = gpt2_style
    config = config_from_megatron_args(
        [
            "--data-path", str(tmp_path / "web_text_document"),
            "--seq-length", "128", "--global-batch-size", "8", "--train-iters", "10",
            "--tokenizer-type", "GPT2BPETokenizer",
            "--vocab-file", str(folder / "vocab.json"),
            "--merge-file", str(folder / "merges.txt"),
        ],
        config_from_dict=config_from_dict,
    )  # fmt: skip
    assert config.tokenizer == folder / "vocab.json"
    assert config.tokenizer_merges == folder / "merges.txt"
    assert load_tokenizer(config.tokenizer, config.tokenizer_merges).decode(ids) == TEXT


def test_bad_tokenizers_are_one_line_errors(tmp_path):
    (tmp_path / "spm.model").write_bytes(b"\x00\x01")
    (tmp_path / "broken.json").write_text("{not json", encoding="utf-8")
    cases = {
        None: "needs `tokenizer:`",
        tmp_path / "missing.json": "not found",
        tmp_path / "spm.model": "SentencePiece",
        tmp_path / "broken.json": "not a tokenizer.json",
        tmp_path: "no tokenizer.json",
    }
    for path, message in cases.items():
        with pytest.raises(ForensicsError, match=message):
            load_tokenizer(path)
