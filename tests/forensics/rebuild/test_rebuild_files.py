"""`forensics rebuild` on the file-based families (Hugging Face files, OLMo-core token files,
MosaicML streams): a spike blames a whole dirty file, the rebuild writes a config without it, and
the rebuilt run replays without any of its documents and with every other file's; a block list
that covers part of a file is refused in one line, with nothing written.

The truths come from the source files (texts, uids) and skip.json, not from the rebuild's
summary; where the library can check the new file list cheaply, it does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import yaml
from tokenizers import Tokenizer
from typer.testing import CliRunner

from dataloaders.run_config import load_config
from dataloaders.trainers import get_trainer
from forensics.cli import app
from forensics.replay import open_replayer
from forensics.skip.action import action_for_plan
from forensics.skip.plan import SkipPlan
from forensics_testing.file_runs import (
    BATCH,
    DIRTY,
    DIRTY_STREAM,
    MDS_SHARDS,
    RANKS,
    ROWS,
    build_hf_run,
    build_mosaic_run,
    olmo_pages,
)
from forensics_testing.mosaic_support import run_oracle
from forensics_testing.olmo_core_run import config_dict, oracle_positions, oracle_spec, write_config
from forensics_testing.olmo_core_run import run_oracle as run_olmo_oracle
from forensics_testing.refusal import one_line_error

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def spike(config: Path, step: int, window: int, baseline: str, out: Path, *extra: str) -> dict:
    """`forensics spike` through the CLI; returns skip.json."""
    result = CliRunner().invoke(
        app,
        [
            "spike", "--config", str(config), "--step", str(step), "--window", str(window),
            "--baseline", baseline, "--embed-cap", "0", "--out", str(out), *extra,
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads((out / "skip.json").read_text())


def rebuild(spike_dir: Path, config: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    """`forensics rebuild` in a subprocess (the one-line refusal goes through the CLI's handler)."""
    return subprocess.run(
        [sys.executable, "-m", "forensics.cli", "rebuild", str(spike_dir), "--config", str(config),
         "--out", str(out), *extra],
        capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip


def replayed_texts(config: Path) -> pl.DataFrame:
    """Every document the run `config` draws (whole run), with its text and facets."""
    replayer = open_replayer(load_config(config))
    table = replayer.replay(1, replayer.last_iteration, text=False, progress=False)
    keys = table.select("dataset", "doc_id").unique()
    return replayer.documents(keys, progress=False)


def refuse_partial(spike_dir: Path, config: Path, tmp: Path, dataset: str, needle: str) -> None:
    """The block list without its first document: part of a file. One line, nothing written;
    and the action the spike would write for it is the user's own removal."""
    skip = json.loads((spike_dir / "skip.json").read_text())
    skip["documents"][dataset] = skip["documents"][dataset][1:]
    partial = tmp / "partial"
    partial.mkdir()
    (partial / "skip.json").write_text(json.dumps(skip))
    proc = rebuild(partial, config, tmp / "no-out")
    n = len(skip["documents"][dataset])
    one_line_error(proc, needle, f"{n} of its {n + 1} documents are blocked", "your own pipeline")
    assert "skip flags" in proc.stderr
    assert not (tmp / "no-out").exists()
    action = action_if_material(partial / "skip.json", config)
    assert action["kind"] == "remove" and "forensics rebuild" not in action["command"]


def action_if_material(skip_file: Path, config: Path) -> dict:
    """The action the spike writes for this block list were the culprit 50% of the run ahead."""
    plan = SkipPlan.read(skip_file)
    plan.ahead = {"share_of_remaining_samples": 0.5}
    run = load_config(config)
    return action_for_plan(
        plan, run, skip_file.parent, get_trainer(plan.trainer), open_replayer(run)
    )


def test_hf_rebuild_drops_the_dirty_file(tmp_path: Path, monkeypatch) -> None:
    import datasets

    monkeypatch.setattr(datasets.config, "SLEEP_TIME_ON_THREADS_SHUTDOWN", 0)
    config, per_rank = build_hf_run(tmp_path)
    dirty = set(range(DIRTY * ROWS, (DIRTY + 1) * ROWS))  # uid = row number in the old files
    hit = [
        i + 1 for i in range(len(per_rank[0])) if any(u in dirty for r in per_rank for u in r[i])
    ]
    step = hit[len(hit) // 2]  # the dirty file still comes in after the spike: the rebuild leads
    skip = spike(config, step, step - hit[0] + 1, f"1-{hit[0] - 2}", tmp_path / "spike")
    dirty_file = tmp_path / f"web-{DIRTY:02d}.parquet"
    assert set(skip["documents"]["hf"]) == dirty
    assert skip["action"]["kind"] == "rebuild", skip["action"]
    assert skip["action"]["command"].startswith("forensics rebuild")
    # the report and the terminal restart with the file the rebuild writes for this family
    assert skip["action"]["restart_file"].endswith("/data_files.json")
    report_md = (tmp_path / "spike" / "report.md").read_text()
    assert f"with {skip['action']['restart_file']} (the new data_files list)" in report_md
    out = tmp_path / "rebuild"
    proc = rebuild(tmp_path / "spike", config, out)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "rebuild.json").read_text())
    assert [r["file"] for r in summary["files_removed"]] == [str(dirty_file)]
    before = load_config(config).data.files
    new_files = json.loads((out / "data_files.json").read_text())
    assert new_files == [str(p) for p in before if p != dirty_file]
    assert yaml.safe_load((out / "rebuilt.yaml").read_text())["data"]["files"] == new_files
    assert "data order changes from iteration" in summary["notes"][0]
    # the library reads the new list: every row of the old files but the dirty file's
    rows = datasets.load_dataset("parquet", data_files=new_files, split="train")
    assert rows.num_rows == len(before) * ROWS - ROWS
    # our replay of the rebuilt run: none of the dirty texts, every other file's documents
    dirty_texts = set(pq.read_table(dirty_file)["text"].to_pylist())
    kept_texts = {t for f in new_files for t in pq.read_table(f)["text"].to_pylist()}
    drawn = replayed_texts(out / "rebuilt.yaml")
    assert not dirty_texts & set(drawn["text"].to_list())
    assert set(drawn["text"].to_list()) <= kept_texts
    assert set(drawn["file"].to_list()) == {Path(f).name for f in new_files}
    # an existing output is never replaced without --force
    again = rebuild(tmp_path / "spike", config, out)
    one_line_error(again, "already holds")
    assert rebuild(tmp_path / "spike", config, out, "--force").returncode == 0
    refuse_partial(tmp_path / "spike", config, tmp_path, "hf", str(dirty_file))


def texts_in_order(config: Path) -> list[list[str]]:
    """Per iteration of the run `config`, the texts of its samples in position order."""
    replayer = open_replayer(load_config(config))
    table = replayer.replay(1, replayer.last_iteration, text=False, progress=False)
    docs = replayer.documents(table.select("dataset", "doc_id").unique(), progress=False)
    table = table.join(docs.select("dataset", "doc_id", "text"), on=["dataset", "doc_id"])
    return [
        part.sort("position")["text"].to_list()
        for _, part in table.group_by("iteration", maintain_order=True)
    ]


def test_mosaic_rebuild_drops_the_dirty_shard(tmp_path: Path) -> None:
    config, per_rank, dirty = build_mosaic_run(tmp_path)
    hit = [
        i + 1 for i in range(len(per_rank[0])) if any(u in dirty for b in per_rank for u in b[i])
    ]
    step = hit[-1]  # the shard's every sample is drawn by then: nothing ahead, the action skips
    skip = spike(config, step, step - hit[0] + 1, f"1-{hit[0] - 2}", tmp_path / "spike")
    offset = sum(MDS_SHARDS["web"])  # uid = offset + forum's doc_id
    assert {offset + d for d in skip["documents"][DIRTY_STREAM]} == dirty
    # were it material ahead, the whole shard leads with the rebuild
    action = action_if_material(tmp_path / "spike" / "skip.json", config)
    assert action["kind"] == "rebuild" and action["command"].startswith("forensics rebuild")
    out = tmp_path / "rebuild"
    proc = rebuild(tmp_path / "spike", config, out)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "rebuild.json").read_text())
    assert [r["file"] for r in summary["files_removed"]] == [
        str(tmp_path / DIRTY_STREAM / "shard.00001.mds")
    ]
    streams = json.loads((out / "streams.json").read_text())
    assert streams == [
        {"name": "web", "local": str(tmp_path / "web"), "remote": None},
        {"name": "forum", "local": str(out / "forum_rebuilt"), "remote": None},
    ]
    index = json.loads((out / "forum_rebuilt" / "index.json").read_text())
    assert [s["raw_data"]["basename"] for s in index["shards"]] == [
        "shard.00000.mds",
        "shard.00002.mds",
    ]
    # uid -> text from the original run's replay, then the real StreamingDataset on the rebuilt
    # streams against our replay of rebuilt.yaml, batch for batch
    before = open_replayer(load_config(config))
    keys = pl.concat([before.documents_by_facet("dataset", name) for name in MDS_SHARDS])
    original = before.documents(keys, progress=False)  # every sample, drawn or not
    text_of = {
        (offset if name == DIRTY_STREAM else 0) + d: t
        for name, d, t in original.select("dataset", "doc_id", "text").iter_rows()
    }
    spec = {
        "streams": [{"local": s["local"]} for s in streams],
        "dataset": {"batch_size": BATCH, "shuffle": True, "shuffle_seed": 21,
                    "shuffle_block_size": 64},
        "num_workers": 1, "drop_last": True, "epochs": 1,
    }  # fmt: skip
    ranks = [r["epochs"][0] for r in run_oracle(spec, tmp_path / "oracle2", ranks_per_node=RANKS)]
    library = [[text_of[u] for rank in ranks for u in rank[i]] for i in range(len(ranks[0]))]
    ours = texts_in_order(out / "rebuilt.yaml")  # train_iters runs on into the next epoch
    assert len(ours) > len(library) and ours[: len(library)] == library
    drawn = {t for batch in library for t in batch}  # 240 samples, 15 whole batches
    assert not drawn & {text_of[u] for u in dirty}
    assert drawn == {t for u, t in text_of.items() if u not in dirty}
    refuse_partial(tmp_path / "spike", config, tmp_path, DIRTY_STREAM, "shard.00001.mds")


def _reached(docs: list[str], tok, seq: int) -> list[str]:  # noqa: ANN001
    """The documents of one token file (each followed by EOS) that start before its last whole
    instance ends: those an epoch over the file's instances touches."""
    sizes = [len(tok.encode(t).ids) + 1 for t in docs]
    end = sum(sizes) // seq * seq
    starts = np.cumsum([0, *sizes[:-1]])
    return [t for t, start in zip(docs, starts, strict=True) if start < end]


def build_olmo_run(folder: Path) -> tuple[Path, dict[str, list[str]]]:
    """An OLMo-core run of three token files: web.npy and forum.npy (mojibake pages) in source
    web, books.npy in source books."""
    texts, tok = olmo_pages(folder, 100)
    for name, docs in texts.items():
        ids = [np.asarray(tok.encode(t).ids + [0], dtype=np.uint16) for t in docs]
        np.concatenate(ids).tofile(folder / f"{name}.npy")
    sources = {"web": ["web.npy", "forum.npy"], "books": ["books.npy"]}
    config = config_dict(sources, seq=64, ipb=12, seed=17, world=2, train_iters=90)
    config["data"] |= {"eos_token_id": 0, "vocab_size": 3000}
    config |= {"tokenizer": "tokenizer.json", "checkpoints": list(range(10, 91, 10))}
    return write_config(folder, config), texts


def test_olmo_core_rebuild_drops_the_dirty_token_file(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FORENSICS_CACHE", str(tmp_path / "cache"))
    config, texts = build_olmo_run(tmp_path)
    forum = tmp_path / "forum.npy"
    # the forum file is drawn from the start (no mixture switch): name it the culprit, as a
    # user does with --culprit after reading the report
    spike(config, 40, 10, "1-20", tmp_path / "spike")
    report = json.loads((tmp_path / "spike" / "report.json").read_text())
    cluster = next(c["id"] for c in report["clusters"] if c["key"] == str(forum))
    skip = spike(config, 40, 10, "1-20", tmp_path / "spike", "--culprit", cluster, "--force")
    replayer = open_replayer(load_config(config))
    whole = replayer.documents_by_facet("file", str(forum))["doc_id"].to_list()
    assert sorted(skip["documents"]["web"]) == sorted(whole) and "books" not in skip["documents"]
    action = action_if_material(tmp_path / "spike" / "skip.json", config)
    assert action["kind"] == "rebuild" and action["command"].startswith("forensics rebuild")
    out = tmp_path / "rebuild"
    proc = rebuild(tmp_path / "spike", config, out)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "rebuild.json").read_text())
    assert [r["file"] for r in summary["files_removed"]] == [str(forum)]
    flags = (out / "restart-rebuilt.flags").read_text().split()
    paths = json.loads(flags[0].removeprefix("--dataset.paths="))
    assert paths == [str(tmp_path / "web.npy"), str(tmp_path / "books.npy")]
    assert flags[1] == "--data_loader.ignore_fingerprint_mismatch=true" and len(flags) == 2
    assert "--trainer.load_path=<old save_folder>/step" in summary["load_rollback_checkpoint"]
    rebuilt = yaml.safe_load((out / "rebuilt.yaml").read_text())
    assert rebuilt["data"]["sources"] == [
        {"name": "web", "paths": [paths[0]]},
        {"name": "books", "paths": [paths[1]]},
    ]
    # the library's NumpyFSLDataLoader over the flag's paths: our replay of rebuilt.yaml, step
    # for step
    spec = oracle_spec(rebuilt, tmp_path) | {"paths": paths, "work_dir": str(tmp_path / "w2")}
    (tmp_path / "oracle").mkdir()
    want = oracle_positions(run_olmo_oracle([spec], tmp_path / "oracle")[0])
    again = open_replayer(load_config(out / "rebuilt.yaml"))
    table = again.replay(1, again.last_iteration, text=False, progress=False)
    got: dict[int, list[int]] = {}
    samples = table.unique(["iteration", "position"]).sort("iteration", "position")
    for it, inst in samples.select("iteration", "dataset_sample").iter_rows():
        got.setdefault(it, []).append(inst)
    assert got == want
    drawn = replayed_texts(out / "rebuilt.yaml")
    assert set(drawn["file"].to_list()) == set(paths)
    drawn_texts = {t.removesuffix("<|endoftext|>") for t in drawn["text"].to_list()}  # EOS 0
    assert not drawn_texts & set(texts["forum"])
    # nearly every instance is drawn; the documents wholly in a file's tail shorter than an
    # instance never are (NumpyFSLDataset: a file holds size // sequence_length instances)
    kept = set(texts["web"]) | set(texts["books"])
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    reached = {t for name in ("web", "books") for t in _reached(texts[name], tok, 64)}
    assert drawn_texts <= kept and len(reached - drawn_texts) <= 2
    refuse_partial(tmp_path / "spike", config, tmp_path, "web", str(forum))
