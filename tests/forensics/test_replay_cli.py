"""`forensics replay` and `forensics manifest` end to end on real files, and their bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml
from typer.testing import CliRunner

from dataloaders.megatron.indexed import write_indexed_dataset
from forensics.cli import app
from forensics.errors import ForensicsError
from forensics_testing.repo_paths import REPO_ROOT

WORDS = [f"w{i}" for i in range(200)]


def _tokenizer(path: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<eod>": 0, **{w: i + 1 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<eod>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(path))
    return path


@pytest.fixture
def run(tmp_path: Path) -> dict[str, Path]:
    """Two datasets from JSONL (text + source/url), a tokenizer, manifests, a config."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(_tokenizer(tmp_path / "tokenizer.json")))
    rng = np.random.default_rng(3)
    paths = {"tokenizer": tmp_path / "tokenizer.json"}
    for name, n in (("web", 120), ("code", 60)):
        lines = []
        for i in range(n):
            text = " ".join(rng.choice(WORDS, size=int(rng.integers(5, 80))))
            lines.append({"text": text, "source": f"{name}-src{i % 3}", "url": f"u/{name}/{i}"})
        jsonl = tmp_path / f"{name}.jsonl"
        jsonl.write_text("".join(json.dumps(r) + "\n" for r in lines))
        docs = [tok.encode(r["text"]).ids + [0] for r in lines]
        write_indexed_dataset(tmp_path / name, docs, np.uint16)
        paths[name] = tmp_path / name
        paths[f"{name}_jsonl"] = jsonl
    config = {
        "data": {
            "format": "megatron",
            "seq_length": 32,
            "split": "98,2,0",
            "blend": [
                {"name": "web", "prefix": "web", "weight": 0.6},
                {"name": "code", "prefix": "code", "weight": 0.4},
            ],
        },
        "training": {"global_batch_size": 16, "train_iters": 40},
        "tokenizer": "tokenizer.json",
    }
    paths["config"] = tmp_path / "forensics.yaml"
    paths["config"].write_text(yaml.safe_dump(config))
    return paths


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=True)


def test_manifest_then_replay_with_text(run: dict[str, Path], tmp_path: Path) -> None:
    for name in ("web", "code"):
        result = _invoke(
            "manifest",
            str(run[f"{name}_jsonl"]),
            "--fields",
            "source,url",
            "--prefix",
            str(run[name]),
        )
        assert result.exit_code == 0, result.output
    out = tmp_path / "window.parquet"
    result = _invoke(
        "replay",
        "--config",
        str(run["config"]),
        "--step",
        "30",
        "--window",
        "5",
        "--out",
        str(out),
        "--text",
        "--no-progress",
    )
    assert result.exit_code == 0, result.output
    table = pl.read_parquet(out)
    assert table["iteration"].unique().sort().to_list() == list(range(26, 31))
    assert table.select("iteration", "position").n_unique() == 5 * 16
    assert table["sample_index"].min() == 25 * 16 and table["sample_index"].max() == 30 * 16 - 1
    assert {"source", "url", "text", "exact"} <= set(table.columns)
    # Facets belong to the row's document; text is the document's words at those tokens.
    for row in table.sample(20, seed=1).iter_rows(named=True):
        name = row["dataset"]
        assert row["url"] == f"u/{name}/{row['doc_id']}"
        line = json.loads(run[f"{name}_jsonl"].read_text().splitlines()[row["doc_id"]])
        words = line["text"].split() + ["<eod>"]
        expected = words[row["token_start"] : row["token_end"]]
        assert row["text"].split() == expected
    # Each sample holds seq_length + 1 tokens.
    per_sample = table.group_by("sample_index").agg(
        (pl.col("token_end") - pl.col("token_start")).sum()
    )
    assert per_sample["token_end"].unique().to_list() == [33]


def test_replay_from_megatron_args(run: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "args.parquet"
    args = (
        f"--data-path 0.6 {run['web']} 0.4 {run['code']} --split 98,2,0 --seq-length 32 "
        "--global-batch-size 16 --train-iters 40 --lr 3e-4 --bf16 --num-layers 2"
    )
    result = _invoke(
        "replay",
        "--megatron-args",
        args,
        "--step",
        "30",
        "--window",
        "5",
        "--out",
        str(out),
        "--no-progress",
    )
    assert result.exit_code == 0, result.output
    by_config = tmp_path / "config.parquet"
    _invoke(
        "replay",
        "--config",
        str(run["config"]),
        "--step",
        "30",
        "--window",
        "5",
        "--out",
        str(by_config),
        "--no-progress",
    )
    assert pl.read_parquet(out).equals(pl.read_parquet(by_config))


@pytest.mark.parametrize(
    ("step", "window", "message"),
    [(41, 1, "beyond the end of training"), (3, 5, "before iteration 1"), (0, 1, "1-indexed")],
)
def test_bad_window_writes_nothing(run: dict[str, Path], tmp_path: Path, step, window, message):
    out = tmp_path / "bad.parquet"
    result = _invoke(
        "replay",
        "--config",
        str(run["config"]),
        "--step",
        str(step),
        "--window",
        str(window),
        "--out",
        str(out),
        "--no-progress",
    )
    assert isinstance(result.exception, ForensicsError)
    assert message in str(result.exception)
    assert not out.exists()


def test_missing_and_truncated_data(run: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "bad.parquet"
    args = ["replay", "--config", str(run["config"]), "--step", "3", "--out", str(out)]
    bin_file = Path(f"{run['code']}.bin")
    data = bin_file.read_bytes()
    bin_file.write_bytes(data[:-10])
    result = _invoke(*args)
    assert "code.bin: truncated data file" in str(result.exception)
    bin_file.unlink()
    result = _invoke(*args)
    assert "code.bin: Megatron dataset file not found" in str(result.exception)
    assert not out.exists()


def test_manifest_row_count_must_match(run: dict[str, Path], tmp_path: Path) -> None:
    result = _invoke(
        "manifest", str(run["code_jsonl"]), "--fields", "source", "--prefix", str(run["web"])
    )
    assert "120 documents" in str(result.exception)
    assert not Path(f"{run['web']}.manifest.parquet").exists()
    # A stale manifest (wrong row count) named in the config is refused at replay time.
    pl.DataFrame({"doc_id": range(5), "source": ["x"] * 5}).write_parquet(
        Path(f"{run['web']}.manifest.parquet")
    )
    result = _invoke(
        "replay",
        "--config",
        str(run["config"]),
        "--step",
        "3",
        "--out",
        str(tmp_path / "x.parquet"),
        "--no-progress",
    )
    assert "web.manifest.parquet: manifest has 5 rows" in str(result.exception)


def test_seed_mismatch_with_megatron_cache(run: dict[str, Path], tmp_path: Path) -> None:
    """A cache description written for seed 1234 and a config saying 999: named field."""
    cache = tmp_path / "data-cache"
    cache.mkdir()
    desc = {
        "class": "GPTDataset",
        "dataset_path": str(run["web"]),
        "num_samples": 10,
        "index_split": "train",
        "random_seed": 1234,
        "sequence_length": 32,
        "split": "98,2,0",
        "split_matrix": [[0, 0.98], [0.98, 1.0], None],
        "tokenizer": {},
    }
    (cache / "abc-GPTDataset-train-description.txt").write_text(json.dumps(desc, indent=4))
    cfg = yaml.safe_load(run["config"].read_text())
    cfg["data"]["cache_path"] = str(cache)
    cfg["data"]["seed"] = 999
    path = tmp_path / "seed.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "seed.parquet"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "forensics.cli",
            "replay",
            "--config",
            str(path),
            "--step",
            "2",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
    )
    assert proc.returncode == 2
    message = proc.stderr.replace("\n", "")  # rich wraps long lines when not on a terminal
    assert message.startswith("error: ") and "Traceback" not in message
    assert "GPTDataset-train-description.txt" in message
    assert "random_seed: cache has 1234, config gives 999" in message
    assert not out.exists()


def test_help_replay_and_score_never_import_torch(run: dict[str, Path], tmp_path: Path) -> None:
    """`forensics --help`, `replay --text` and `score` start fast: no torch, no
    sentence-transformers, no megatron-core, no scikit-learn (checked in a fresh interpreter)."""
    out = tmp_path / "w.parquet"
    scored = tmp_path / "s.parquet"
    code = (
        "import sys; from forensics.cli import app; from typer.testing import CliRunner;"
        "r = CliRunner().invoke(app, ['--help']); assert r.exit_code == 0, r.output;"
        f"r = CliRunner().invoke(app, ['replay', '--config', {str(run['config'])!r}, '--step', "
        f"'20', '--window', '5', '--text', '--out', {str(out)!r}]);"
        "assert r.exit_code == 0, r.output;"
        f"r = CliRunner().invoke(app, ['score', {str(out)!r}, '--out', {str(scored)!r}]);"
        "assert r.exit_code == 0, r.output;"
        "heavy = [m for m in ('torch', 'sentence_transformers', 'megatron', 'sklearn')"
        " if m in sys.modules]; print('heavy:', heavy)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stdout.strip() == "heavy: []", proc.stdout + proc.stderr
    assert pl.read_parquet(scored).height == pl.read_parquet(out).height
