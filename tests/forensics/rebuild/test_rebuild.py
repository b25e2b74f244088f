"""`forensics rebuild` on a generated demo-like run: the rebuilt data, replayed, holds none of the
block list's documents and keeps every other one (same tokens, same text, same provenance); the
iterations before the restart replay as before; the writer matches megatron-core's builder.

The truths come from the source files and skip.json directly, not from the rebuild's summary.
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
import torch

from dataloaders.megatron.filtered import write_without_documents
from dataloaders.megatron.indexed import IndexedDataset, IndexedDatasetWriter
from dataloaders.run_config import load_config
from forensics.errors import ForensicsError
from forensics.rebuild import run_rebuild
from forensics.replay import open_replayer
from forensics.spike import SpikeOptions, run_spike
from forensics_testing.demo.build import DemoSpec, build_run

SPEC = DemoSpec(
    name="rebuild",
    seed=7,
    seq_length=128,
    global_batch_size=16,
    train_iters=900,
    switch_iteration=401,
    spike_iteration=440,
    checkpoint_interval=50,
    log_tail=20,
    docs_prose=300,
    docs_code=250,
    docs_per_crawl=60,
    crawls_v1=2,
    crawls_v2=3,
    blend_before={"code": 0.45, "prose": 0.35, "web": 0.2},
    blend_after={"code": 0.3, "prose": 0.25, "web": 0.1, "web_v2": 0.35},
    vocab_size=3000,
)


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory: pytest.TempPathFactory) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    root = tmp_path_factory.mktemp("rebuild")
    build_run(root / "run", SPEC, progress=False)
    config = root / "run" / "forensics.yaml"
    spike = root / "run" / f"spike-{SPEC.spike_iteration}"
    run_spike(
        config,
        spike,
        SpikeOptions(step=SPEC.spike_iteration, window=60, embed_cap=0, progress=False),
    )
    result = run_rebuild(spike / "skip.json", load_config(config))
    skip = json.loads((spike / "skip.json").read_text())
    return {"root": root, "config": config, "spike": spike, "result": result, "skip": skip}


def test_replayed_rebuild_holds_no_blocked_document(rebuilt: dict) -> None:
    result, skip = rebuilt["result"], rebuilt["skip"]
    assert skip["documents"], "the spike blamed nothing: the fixture is wrong"
    replayer = open_replayer(load_config(result.config_path))
    resume = result.plan.resume
    table = replayer.replay(resume, replayer.last_iteration, text=False, progress=False)
    for name, blocked in skip["documents"].items():
        rows = table.filter(pl.col("dataset") == f"{name}_rebuilt")
        assert rows.height, f"{name}: the rebuilt dataset is never drawn"
        drawn = set(rows["original_doc_id"].cast(pl.Int64).to_list())
        assert not drawn & set(blocked)
        assert table.filter(pl.col("dataset") == name).height == 0  # the old files are gone


def test_every_other_document_is_kept_whole(rebuilt: dict) -> None:
    result, skip = rebuilt["result"], rebuilt["skip"]
    original = open_replayer(load_config(rebuilt["config"]))
    new = open_replayer(load_config(result.config_path))
    for name, blocked in skip["documents"].items():
        spec, prefix = result.plan.datasets[name]
        source, copy = IndexedDataset(spec.prefix), IndexedDataset(prefix)
        manifest = pl.read_parquet(f"{prefix}.manifest.parquet")
        ids = manifest["original_doc_id"].cast(pl.Int64).to_list()
        assert ids == sorted(set(range(source.num_documents)) - set(blocked))
        for new_id, old_id in enumerate(ids):  # tokens identical, in the original order
            np.testing.assert_array_equal(copy[new_id], source[old_id])
        facets = pl.read_parquet(spec.manifest).filter(pl.col("doc_id").is_in(ids))
        assert manifest["url"].to_list() == facets.sort("doc_id")["url"].to_list()
        sample = pl.DataFrame({"dataset": [f"{name}_rebuilt"] * 5, "doc_id": list(range(5))})
        before = pl.DataFrame({"dataset": [name] * 5, "doc_id": ids[:5]})
        texts_new = new.documents(sample, progress=False)["text"].to_list()
        assert texts_new == original.documents(before, progress=False)["text"].to_list()


def test_iterations_before_the_restart_are_unchanged(rebuilt: dict) -> None:
    resume = rebuilt["result"].plan.resume
    cols = ["iteration", "position", "dataset", "doc_id", "token_start", "token_end"]
    a = open_replayer(load_config(rebuilt["config"])).replay(resume - 40, resume - 1, text=False)
    b = open_replayer(load_config(rebuilt["result"].config_path))
    assert a.select(cols).equals(b.replay(resume - 40, resume - 1, text=False).select(cols))


def test_summary_flags_and_note(rebuilt: dict) -> None:
    out = rebuilt["result"].out
    summary = json.loads((out / "rebuild.json").read_text())
    flags = (out / "restart-rebuilt.flags").read_text()
    rollback = rebuilt["skip"]["rollback"]["iteration"]
    assert flags.startswith(f"--ckpt-step {rollback} --data-path ") and "#" not in flags
    assert flags.count("\n") == 1 and "_rebuilt" not in flags  # prefixes, not names
    assert (out / "data_path.txt").read_text().strip() in flags
    assert "data order changes from iteration" in summary["notes"][0]
    assert set(summary["readme"]) <= set(summary) and summary["provenance"]["version"]
    assert set(summary["files"]) == {p.name for p in out.iterdir() if p.is_file()}


def test_refusals_write_nothing(rebuilt: dict, tmp_path: Path) -> None:
    skip_file, config = rebuilt["spike"] / "skip.json", load_config(rebuilt["config"])
    before = sorted(p.name for p in rebuilt["result"].out.iterdir())
    with pytest.raises(ForensicsError, match="already holds"):
        run_rebuild(skip_file, config)
    assert sorted(p.name for p in rebuilt["result"].out.iterdir()) == before
    data_dir = rebuilt["root"] / "run" / "data"
    with pytest.raises(ForensicsError, match="input of the run"):
        run_rebuild(skip_file, config, data_dir, force=True)
    base = load_config(rebuilt["config"])
    other = base.model_copy(update={"data": base.data.model_copy(update={"seed": 99})})
    with pytest.raises(ForensicsError, match="made for another run"):
        run_rebuild(skip_file, other, tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_another_familys_block_list_is_refused_in_one_line(rebuilt: dict, tmp_path: Path) -> None:
    hf = tmp_path / "hf.yaml"
    (tmp_path / "a.jsonl").write_text('{"text": "x"}\n')
    hf.write_text(
        "data: {format: hf, files: [a.jsonl], streaming: false, seed: 1, world_size: 1,\n"
        "       per_device_batch_size: 2}\n"
        "training: {global_batch_size: 2, train_iters: 3}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "forensics.cli", "rebuild", str(rebuilt["spike"]), "--config",
         str(hf), "--out", str(tmp_path / "o")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    # HF runs are rebuilt (tests/forensics/rebuild/test_rebuild_files.py), but not with a block
    # list of this Megatron run's doc_ids
    assert "made for another run" in proc.stderr and proc.stderr.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_filtered_copy_equals_megatron_builder(tmp_path: Path, megatron) -> None:
    rng = np.random.default_rng(3)
    with IndexedDatasetWriter(tmp_path / "src", np.uint16) as w:
        docs = []
        for _ in range(60):
            lengths = [int(n) for n in rng.integers(1, 30, size=int(rng.integers(1, 4)))]
            tokens = rng.integers(0, 60000, size=sum(lengths)).astype(np.uint16)
            docs.append((tokens, lengths))
            w.add_document(tokens, lengths)
    drop = np.array([0, 5, 6, 7, 30, 59])
    write_without_documents(tmp_path / "src", drop, tmp_path / "ours")
    builder = megatron.indexed.IndexedDatasetBuilder(str(tmp_path / "theirs.bin"), np.uint16)
    for i, (tokens, lengths) in enumerate(docs):
        if i not in set(drop.tolist()):
            builder.add_document(torch.from_numpy(tokens.astype(np.int64)), lengths)
    builder.finalize(str(tmp_path / "theirs.idx"))
    for ext in ("bin", "idx"):
        assert (tmp_path / f"ours.{ext}").read_bytes() == (tmp_path / f"theirs.{ext}").read_bytes()
    with pytest.raises(ForensicsError, match="block list names document 60"):
        write_without_documents(tmp_path / "src", np.array([60]), tmp_path / "bad")
    with pytest.raises(ForensicsError, match="never overwrites its input"):
        write_without_documents(tmp_path / "src", drop, tmp_path / "src")


def test_skip_json_report_and_terminal_lead_with_the_same_action(rebuilt: dict) -> None:
    spike = rebuilt["spike"]
    action = rebuilt["skip"]["action"]
    assert list(rebuilt["skip"])[0] == "action" and "action" in rebuilt["skip"]["readme"]
    assert set(rebuilt["skip"]) <= set(rebuilt["skip"]["readme"])
    assert action["kind"] == "rebuild", action  # the dirty batch stays in the blend ahead
    report = json.loads((spike / "report.json").read_text())
    labels = [label for label, _ in report["summary"]]
    assert labels.index("ACTION") < labels.index("STOPGAP") and "SKIP" not in labels
    first = dict(report["summary"])["ACTION"]
    assert first == f"remove and rebuild: {action['command']}"
    md = (spike / "report.md").read_text()
    html = (spike / "report.html").read_text()
    assert first in md and "remove and rebuild: forensics rebuild" in html
    assert md.index("ACTION") < md.index("STOPGAP")


def test_every_output_says_who_wrote_it_and_md_follows_html(rebuilt: dict) -> None:
    import re

    spike, out = rebuilt["spike"], rebuilt["result"].out
    stamp = rebuilt["skip"]["provenance"]
    assert stamp["run"] == SPEC.name and stamp["version"] and stamp["written_at"]
    assert json.loads((spike / "report.json").read_text())["provenance"] == stamp
    for name in ("report.md", "report.html", "megatron_args.txt"):
        assert stamp["written_at"] in (spike / name).read_text(), name
    assert json.loads((out / "rebuild.json").read_text())["provenance"]["version"]
    md = re.findall(r"^## (.+)$", (spike / "report.md").read_text(), re.M)
    html = re.findall(r"<h2>([^<]+)</h2>", (spike / "report.html").read_text())
    assert md == html and "Skip and restart" in md and "Documents by cluster" in md
    for name in (spike / "restart-megatron-lm.flags", out / "restart-rebuilt.flags"):
        assert "#" not in name.read_text()  # flags only, pasteable
