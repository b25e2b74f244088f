"""Replayer API beyond the table: exposure, documents, stages (mixture switch), fingerprint."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest import random_documents

from dataloaders.megatron.indexed import write_indexed_dataset
from dataloaders.run_config import config_from_dict
from forensics.replay import open_replayer


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("expo")
    rng = np.random.default_rng(11)
    out = {}
    for name, n in (("a", 200), ("b", 80), ("c", 50)):
        out[name] = write_indexed_dataset(
            tmp / name, random_documents(rng, n, 30_000, 1, 150), np.uint16
        )
    return out


def _config(stages: list[list[tuple[str, Path, float]]], starts: list[int], iters: int = 60):
    data = {
        "format": "megatron",
        "seq_length": 40,
        "split": "95,5,0",
        "stages": [
            {
                "start_iteration": s,
                "blend": [{"name": n, "prefix": str(p), "weight": w} for n, p, w in blend],
            }
            for s, blend in zip(starts, stages, strict=True)
        ],
    }
    raw = {"data": data, "training": {"global_batch_size": 12, "train_iters": iters}}
    return config_from_dict(raw, base_dir=Path("/"), source=None)


@pytest.mark.parametrize("switch", [False, True])
def test_exposure_matches_the_replay_table(data, switch: bool) -> None:
    first = [("a", data["a"], 0.7), ("b", data["b"], 0.3)]
    if switch:  # a mixture switch at 25 and a resume at 40 that rewinds the sample count
        config = _config([first, [("a", data["a"], 0.2), ("c", data["c"], 0.8)]], [1, 25])
        raw = config.model_dump(mode="json", exclude={"source"})
        raw["training"]["resumes"] = [{"iteration": 40, "consumed_samples": 300}]
        config = config_from_dict(raw, base_dir=Path("/"), source=None)
    else:
        config = _config([first], [1])
    replayer = open_replayer(config)
    table = replayer.replay(1, 60, progress=False)
    flagged = pl.DataFrame({"dataset": ["a", "a", "b", "zz"], "doc_id": [3, 17, 5, 1]})
    expo = replayer.exposure(flagged, 1, 60)
    hits = table.join(flagged, on=["dataset", "doc_id"], how="semi")
    expected = (
        hits.group_by("iteration")
        .agg(pl.col("sample_index").n_unique().alias("n"))
        .sort("iteration")
    )
    got = expo.filter(pl.col("flagged_samples") > 0)
    assert got["iteration"].to_list() == expected["iteration"].to_list()
    assert got["flagged_samples"].to_list() == expected["n"].to_list()
    assert expo["samples"].to_list() == [12] * 60
    assert expected.height > 0


def test_mixture_switch_continues_global_samples(data) -> None:
    first = [("a", data["a"], 0.7), ("b", data["b"], 0.3)]
    second = [("a", data["a"], 0.4), ("b", data["b"], 0.3), ("c", data["c"], 0.3)]
    switched = open_replayer(_config([first, second], [1, 31]))
    table = switched.replay(29, 33, progress=False)
    assert table.group_by("iteration").agg(pl.col("stage").first()).sort("iteration")[
        "stage"
    ].to_list() == [0, 0, 1, 1, 1]
    # Iterations 31.. are the second blend's global samples 360.. (not its samples 0..).
    only_second = open_replayer(_config([second], [1]))
    after = table.filter(pl.col("iteration") >= 31).drop("stage")
    reference = only_second.replay(31, 33, progress=False).drop("stage")
    assert after.equals(reference)
    assert after["sample_index"].min() == 30 * 12


def test_documents_and_fingerprint(data, tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models

    vocab = {f"t{i}": i for i in range(30_000)}
    Tokenizer(models.WordLevel(vocab, unk_token="t0")).save(str(tmp_path / "tok.json"))
    pl.DataFrame({"doc_id": range(200), "source": [f"s{i % 4}" for i in range(200)]}).write_parquet(
        tmp_path / "a.manifest.parquet"
    )
    config = _config([[("a", data["a"], 1.0)]], [1])
    raw = config.model_dump(mode="json", exclude={"source"})
    raw["data"]["stages"][0]["blend"][0]["manifest"] = str(tmp_path / "a.manifest.parquet")
    raw["tokenizer"] = str(tmp_path / "tok.json")
    replayer = open_replayer(config_from_dict(raw, base_dir=tmp_path, source=None))
    docs = replayer.documents(
        pl.DataFrame({"dataset": ["a", "a"], "doc_id": [5, 9]}), progress=False
    )
    assert docs["source"].to_list() == ["s1", "s1"]
    tokens = replayer.datasets[data["a"]][5]
    assert docs["text"][0].split() == [f"t{t}" for t in tokens]
    fp = replayer.fingerprint()
    assert fp["datasets"]["a"]["documents"] == 200
    assert fp["config_hash"] == replayer.config.config_hash()
    assert len(fp["datasets"]["a"]["idx_sha256"]) == 64


@pytest.mark.parametrize("split", ["0,100,0", "1,999,0"])
def test_empty_train_split_is_refused(data, split: str) -> None:
    """Megatron would loop forever in _get_num_epochs; we refuse when opening."""
    from forensics.errors import ForensicsError

    config = _config([[("c", data["c"], 1.0)]], [1])
    raw = config.model_dump(mode="json", exclude={"source"})
    raw["data"]["split"] = split
    with pytest.raises(ForensicsError, match="would hang"):
        open_replayer(config_from_dict(raw, base_dir=Path("/"), source=None))
