"""Inputs that look right but are not: a tokenizer that is not the data's, with a vocabulary
large enough to decode every id, is refused before anything is scored (forensics.spike.tokcheck:
the round trip of each sampled sequence tells it apart from the run's own); data rewritten while
a spike runs is refused; a manifest from a reordered JSONL, or with two lines or rows swapped, is
refused, nulls in a facet warned; `replay --text` with a permuted tokenizer is refused.

The data is real text (Python sources of the installed packages) tokenized by one byte-level BPE
tokenizer; the wrong tokenizer is another, trained on other files, with the same vocabulary size.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml

from dataloaders.megatron.indexed import IndexedDatasetWriter
from dataloaders.run_config import load_config
from forensics.replay import open_replayer
from forensics.spike.tokcheck import check_tokenizer
from forensics_testing.demo.texts import python_files, site_packages
from forensics_testing.refusal import one_line_error

REPO = Path(__file__).resolve().parents[2]


def train(texts: list[str], path: Path) -> object:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=3000,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.save(str(path))
    return tok


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("tokrun")
    files = python_files(site_packages(), seed=3)[:900]
    texts = [f.read_text(encoding="utf-8", errors="replace")[:4000] for f in files]
    texts = [t for t in texts if len(t) > 200]
    right = train(texts[:300], root / "right.json")
    train(texts[300:600], root / "wrong.json")
    with (root / "src.jsonl").open("w") as jsonl:
        for i, text in enumerate(texts[600:]):
            record = {"text": text, "source": f"s{i % 3}", "url": None if i in (4, 9) else f"u{i}"}
            jsonl.write(json.dumps(record) + "\n")
    with IndexedDatasetWriter(root / "src", np.uint16) as writer:
        for text in texts[600:]:
            ids = right.encode(text).ids + [0]  # --append-eod
            writer.add_document(np.asarray(ids, dtype=np.uint16), [len(ids)])
    raw = {
        "data": {
            "format": "megatron",
            "seq_length": 64,
            "split": "100,0,0",
            "blend": [{"prefix": "src", "name": "src"}],
        },
        "training": {"global_batch_size": 4, "train_iters": 40},
        "tokenizer": "right.json",
    }
    (root / "right.yaml").write_text(yaml.safe_dump(raw))
    (root / "wrong.yaml").write_text(yaml.safe_dump(raw | {"tokenizer": "wrong.json"}))
    return {"root": root}


def distinct(replayer) -> pl.DataFrame:
    table = replayer.replay(1, 20, text=False, progress=False)
    return table.select("dataset", "doc_id").unique().sort("dataset", "doc_id")


def test_the_runs_tokenizer_round_trips(run: dict) -> None:
    config = load_config(run["root"] / "right.yaml")
    replayer = open_replayer(config)
    assert check_tokenizer(replayer, distinct(replayer), config.tokenizer) > 0.95


def test_another_tokenizer_of_the_same_size_is_refused_naming_it(run: dict) -> None:
    env = os.environ | {"PYTHONPATH": str(REPO)}
    config = str(run["root"] / "wrong.yaml")
    proc = subprocess.run(
        [sys.executable, "-m", "forensics.cli", "spike", "--config", config, "--step", "30",
         "--window", "10", "--out", str(run["root"] / "spike"), "--quiet"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    one_line_error(proc, str(run["root"] / "wrong.json"), "re-encode to their own ids")
    assert not (run["root"] / "spike" / "report.md").exists()


def rewrite_same_size(path: Path) -> None:
    """Rewrite a data file in place with other bytes of the same length (a re-export)."""
    data = bytearray(path.read_bytes())
    data[: len(data) // 2] = bytes(reversed(data[: len(data) // 2]))
    path.write_bytes(bytes(data))


def test_data_rewritten_during_a_spike_is_refused(run: dict, monkeypatch, tmp_path: Path) -> None:
    import shutil

    import forensics.spike.run as spike_run
    from forensics.errors import ForensicsError
    from forensics.spike import SpikeOptions, run_spike

    root = tmp_path / "copy"
    shutil.copytree(run["root"], root, ignore=shutil.ignore_patterns("spike*"))
    real = spike_run.exposure_stage

    def rewriting(*args, **kwargs):
        rewrite_same_size(root / "src.bin")
        return real(*args, **kwargs)

    monkeypatch.setattr(spike_run, "exposure_stage", rewriting)
    options = SpikeOptions(step=30, window=10, embed_cap=0, progress=False)
    with pytest.raises(ForensicsError, match="src.bin: changed while forensics spike ran"):
        run_spike(root / "right.yaml", root / "spike", options)
    assert not (root / "spike" / "report.md").exists()
    assert not (root / "spike" / "skip.json").exists()


def manifest_cli(root: Path, jsonl: Path, *extra: str) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "forensics.cli", "manifest", str(jsonl), "--prefix",
         str(root / "src"), *extra],
        capture_output=True, text=True, env=env,
    )  # fmt: skip


def test_manifest_of_the_jsonl_in_order_is_written_and_nulls_are_warned(
    run: dict, tmp_path: Path
) -> None:
    out = tmp_path / "m.parquet"
    proc = manifest_cli(run["root"], run["root"] / "src.jsonl", "--fields", "source,url", "--out",
                        str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "warning: url is missing in 2 of" in proc.stderr and "(first: line 5, 10)" in proc.stderr
    assert pl.read_parquet(out).columns == ["doc_id", "source", "url", "doc_tokens", "doc_hash"]
    assert "without --tokenizer each line is matched to its document only by length" in proc.stderr


def test_manifest_of_a_reordered_jsonl_is_refused(run: dict, tmp_path: Path) -> None:
    lines = (run["root"] / "src.jsonl").read_text().splitlines(keepends=True)
    shuffled = tmp_path / "shuffled.jsonl"
    order = np.random.default_rng(1).permutation(len(lines))
    shuffled.write_text("".join(lines[i] for i in order))
    out = tmp_path / "m.parquet"
    proc = manifest_cli(run["root"], shuffled, "--fields", "source", "--out", str(out))
    one_line_error(proc, str(shuffled), "not in the order preprocess_data.py read them")
    assert not out.exists()


def test_a_spike_past_the_logs_end_is_warned(run: dict, tmp_path: Path) -> None:
    import shutil

    from forensics.spike import SpikeOptions, run_spike
    from forensics_testing import loss_curves

    root = tmp_path / "copy"
    shutil.copytree(run["root"], root, ignore=shutil.ignore_patterns("spike*"))
    lines = loss_curves.megatron_lines(loss_curves.make("malignant_step", n=20))
    (root / "train.log").write_text("\n".join(lines) + "\n")
    raw = yaml.safe_load((root / "right.yaml").read_text()) | {"log": "train.log"}
    (root / "logged.yaml").write_text(yaml.safe_dump(raw))
    options = SpikeOptions(step=30, window=10, embed_cap=0, progress=False)
    result = run_spike(root / "logged.yaml", root / "spike", options)
    warning = "the spike step 30 is past the training log's last iteration (20)"
    assert any(warning in note for note in result.notes), result.notes
    assert warning.replace("(20)", r"\(20\)") in (root / "spike" / "report.md").read_text()


def _swapped(lines: list[str], i: int) -> list[str]:
    return lines[:i] + [lines[i + 1], lines[i]] + lines[i + 2 :]


def test_manifest_of_a_jsonl_with_two_adjacent_lines_swapped_is_refused(
    run: dict, tmp_path: Path
) -> None:
    """The length check alone lets one swap through (two lines out of hundreds); with the
    tokenizer, line 8 meets document 7's ids and is refused by number."""
    lines = (run["root"] / "src.jsonl").read_text().splitlines(keepends=True)
    swapped = tmp_path / "swapped.jsonl"
    swapped.write_text("".join(_swapped(lines, 7)))
    out = tmp_path / "m.parquet"
    tokenizer = str(run["root"] / "right.json")
    proc = manifest_cli(run["root"], swapped, "--fields", "source", "--out", str(out),
                        "--tokenizer", tokenizer)  # fmt: skip
    one_line_error(proc, str(swapped), "line 8 is not document 7 of")
    assert not out.exists()
    proc = manifest_cli(run["root"], run["root"] / "src.jsonl", "--fields", "source", "--out",
                        str(out), "--tokenizer", tokenizer)  # fmt: skip
    assert proc.returncode == 0 and "warning" not in proc.stderr.replace("url", ""), proc.stderr


def _copy_with_manifest(run: dict, tmp_path: Path) -> tuple[Path, pl.DataFrame]:
    """A copy of the run with src.manifest.parquet (as `forensics manifest --prefix` writes it)
    and the documents iterations 1-20 draw."""
    import shutil

    from dataloaders.megatron.manifest_writer import build_manifest

    root = tmp_path / "copy"
    shutil.copytree(run["root"], root, ignore=shutil.ignore_patterns("spike*"))
    build_manifest(
        root / "src.jsonl", ["source"], root / "src.manifest.parquet", prefix=root / "src"
    )
    drawn = distinct(open_replayer(load_config(root / "right.yaml")))
    return root, drawn


def _swap_rows(path: Path, a: int, b: int, columns: list[str]) -> None:
    table = pl.read_parquet(path)
    order = list(range(table.height))
    order[a], order[b] = b, a
    moved = table.select(columns)[order]
    table.with_columns([moved[c] for c in columns]).write_parquet(path)


def test_a_manifest_with_two_rows_swapped_is_refused_when_read(run: dict, tmp_path: Path) -> None:
    """Rows of two documents of other lengths swapped: doc_tokens disagrees; of equal length
    (only the facets and hash moved): doc_hash disagrees for a drawn document."""
    from forensics.errors import ForensicsError

    root, drawn = _copy_with_manifest(run, tmp_path)
    manifest = root / "src.manifest.parquet"
    a, b = drawn["doc_id"].to_list()[:2]
    pristine = manifest.read_bytes()
    _swap_rows(manifest, a, b, ["source", "doc_tokens", "doc_hash"])
    with pytest.raises(ForensicsError, match=f"row of doc_id {min(a, b)} says .* tokens but"):
        distinct(open_replayer(load_config(root / "right.yaml")))
    manifest.write_bytes(pristine)
    _swap_rows(manifest, a, b, ["source", "doc_hash"])
    with pytest.raises(ForensicsError, match="has another document's doc_hash"):
        open_replayer(load_config(root / "right.yaml")).replay(1, 20, text=False, progress=False)


def test_a_manifest_without_doc_tokens_is_read_with_a_warning(
    run: dict, tmp_path: Path, capfd: pytest.CaptureFixture
) -> None:
    root, _ = _copy_with_manifest(run, tmp_path)
    manifest = root / "src.manifest.parquet"
    pl.read_parquet(manifest).drop("doc_tokens", "doc_hash").write_parquet(manifest)
    table = open_replayer(load_config(root / "right.yaml")).replay(1, 5, text=False, progress=False)
    assert "source" in table.columns
    err = capfd.readouterr().err
    assert f"warning: {manifest}: has no doc_tokens column" in err and "two swapped rows" in err


def permuted(source: Path, path: Path) -> None:
    """The tokenizer with its ordinary tokens' ids permuted: same vocabulary, same size, every
    id decoding to another token (special tokens keep theirs)."""
    data = json.loads(source.read_text())
    vocab = data["model"]["vocab"]
    special = {t["content"] for t in data["added_tokens"]}
    names = [n for n in vocab if n not in special]
    ids = [vocab[n] for n in names]
    shuffled = np.random.default_rng(5).permutation(ids).tolist()
    data["model"]["vocab"] = {n: vocab[n] for n in special} | dict(
        zip(names, shuffled, strict=True)
    )
    path.write_text(json.dumps(data))


def test_replay_text_with_a_permuted_tokenizer_is_refused(run: dict, tmp_path: Path) -> None:
    """`replay --text` decodes with the config's tokenizer: one whose ids are permuted decodes
    every document into other tokens, so it is refused as spike refuses it, before anything is
    written; without --text nothing is decoded and the replay stands."""
    import shutil

    root = tmp_path / "copy"
    shutil.copytree(run["root"], root, ignore=shutil.ignore_patterns("spike*"))
    permuted(root / "right.json", root / "permuted.json")
    raw = yaml.safe_load((root / "right.yaml").read_text()) | {"tokenizer": "permuted.json"}
    (root / "permuted.yaml").write_text(yaml.safe_dump(raw))
    env = os.environ | {"PYTHONPATH": str(REPO)}

    def replay(config: str, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "forensics.cli", "replay", "--config", str(root / config),
             "--step", "30", "--window", "10", "--out", str(root / "w.parquet"), *extra],
            capture_output=True, text=True, env=env,
        )  # fmt: skip

    one_line_error(replay("permuted.yaml", "--text"), str(root / "permuted.json"), "re-encode")
    assert not (root / "w.parquet").exists()
    assert replay("permuted.yaml").returncode == 0
    good = replay("right.yaml", "--text", "--force")
    assert good.returncode == 0, good.stderr
    assert pl.read_parquet(root / "w.parquet")["text"].drop_nulls().len() > 0
