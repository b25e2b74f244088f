"""The demo's generated run: real formats, deterministic, a dirty batch that is really dirty,
a simulated log the triage reader parses, and configs/demo.yaml in step with the builder."""

from __future__ import annotations

import subprocess
from pathlib import Path

import polars as pl
import pytest

from forensics_testing.demo.build import TINY, DemoSpec, build_run, relocated_config
from forensics_testing.repo_paths import REPO_ROOT

ROOT = REPO_ROOT


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("tiny") / "run"
    return out, build_run(out, TINY, progress=False)


def test_committed_demo_config_matches_the_builder() -> None:
    assert (ROOT / "configs" / "demo.yaml").read_text() == relocated_config(
        DemoSpec(), "../demo-run"
    )


def test_run_is_real_megatron_data_with_a_dirty_batch(tiny: tuple[Path, dict]) -> None:
    from tokenizers import Tokenizer

    from dataloaders.megatron.indexed import IndexedDataset
    from dataloaders.run_config import load_config

    out, truth = tiny
    config = load_config(out / "forensics.yaml")
    assert [s.start_iteration for s in config.data.stages] == [1, TINY.switch_iteration]
    assert config.available_checkpoints()[0] == TINY.checkpoint_interval
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    ds = IndexedDataset(out / "data" / "web_v2_text_document")
    manifest = pl.read_parquet(out / "data" / "web_v2.manifest.parquet")
    assert manifest.height == ds.num_documents == truth["documents"]["web_v2"]
    dirty = set(truth["dirty_doc_ids"])
    assert (
        set(manifest.filter(pl.col("crawl_batch") == truth["dirty_crawl_batch"])["doc_id"]) == dirty
    )
    texts = {i: tok.decode(ds[i].tolist()) for i in sorted(dirty)}
    mojibake = [t for t in texts.values() if "\u00c3" in t or "\u00e2\u20ac" in t]
    spam = [t for t in texts.values() if "Click here for" in t]
    assert len(mojibake) == truth["dirty_what"]["mojibake"] > 0
    assert len(spam) == truth["dirty_what"]["spam"] > 0
    clean = [tok.decode(ds[i].tolist()) for i in range(ds.num_documents) if i not in dirty]
    assert not any("\u00c3\u00a9" in t for t in clean)  # "é" read as cp1252 only in the dirt


def test_build_is_deterministic(tiny: tuple[Path, dict], tmp_path: Path) -> None:
    out, _ = tiny
    again = tmp_path / "again"
    build_run(again, TINY, progress=False)
    for f in sorted(p for p in out.rglob("*") if p.is_file()):
        assert (again / f.relative_to(out)).read_bytes() == f.read_bytes(), f


def test_simulated_log_parses_and_spikes_where_the_dirt_lands(tiny: tuple[Path, dict]) -> None:
    from forensics.triage.readers import read_log

    out, _ = tiny
    log = read_log(out / "logs" / "train.log")
    assert log["step"].to_list() == list(range(1, TINY.spike_iteration + TINY.log_tail + 1))
    after = log.filter(pl.col("step") >= TINY.switch_iteration)
    peak = after.sort("loss", descending=True)["step"][0]
    assert TINY.spike_iteration <= peak <= TINY.spike_iteration + 2
    loss = dict(log.select("step", "loss").iter_rows())
    last = TINY.spike_iteration + TINY.log_tail
    assert loss[last] > loss[TINY.spike_iteration - 1] + 1.0  # malignant: it does not come back
    assert "SIMULATED" in (out / "logs" / "train.log").read_text().splitlines()[0]


def test_refuses_to_build_into_a_foreign_directory(tmp_path: Path) -> None:
    from forensics.errors import ForensicsError

    (tmp_path / "mine.txt").write_text("x")
    with pytest.raises(ForensicsError, match="not a generated run"):
        build_run(tmp_path, TINY, progress=False)


def test_demo_script_is_valid_bash() -> None:
    subprocess.run(["bash", "-n", str(ROOT / "scripts" / "demo.sh")], check=True)
