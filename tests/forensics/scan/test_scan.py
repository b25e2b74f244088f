"""`forensics scan` end to end on a generated run with dirty stretches planted ahead.

The run (forensics_testing/scan_run.py) has real text, a real BPE and real .bin/.idx files; three
dirty datasets (mojibake, template spam, repeated n-grams) enter the blend at data stage starts
and leave at the next, so the planted stretches are known exactly: 21-30, 51-60, 91-98. The
clean dataset holds every harvested page, those the scorers flag too, so the scan's false
positives are in the run and measured here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest import free_port
from polars.testing import assert_frame_equal

from dataloaders.run_config import load_config
from forensics.errors import ForensicsError
from forensics.scan.run import ScanOptions, run_scan
from forensics.scan.shard import FAULT_ENV
from forensics_testing.repo_paths import REPO_ROOT
from forensics_testing.scan_run import ScanRunSpec, build_scan_run

SPEC = ScanRunSpec()
PLANTED = {(a, b): kind for kind, a, b in SPEC.stretches}
KIND_FLAG = {"mojibake": "garbage", "spam": "spam", "ngram": "ngram"}
SHARD = 10
ROOT = REPO_ROOT
# The scorers' false positives on the clean pages, at most: docs/scoring.md measures a clean
# FPR of 0.00-0.30% on its four labelled sets (scripts/bench_score.py); this harvest also holds
# README badge blocks (link farms to the spam rules), pydantic's changelog (a doorway page) and
# ftfy's docs quoting mojibake, which the sets do not: 6 of its 600 pages flagged, 1.0%
# (2026-12-07). One more flagged clean page fails the test.
CLEAN_PAGES_FLAGGED = 0.01
# Samples of the clean iterations that hold a flagged clean page: 38 of 1,472 measured (2.6%),
# the most in one iteration 3 of 16, under the 0.2 threshold, so no stretch nobody planted.
CLEAN_SAMPLES_FLAGGED = 0.03


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("scan-run")
    build_scan_run(out, SPEC)
    return out


@pytest.fixture(scope="module")
def local_result(run_dir, tmp_path_factory):
    """The reference scan: local engine, two workers."""
    out = tmp_path_factory.mktemp("scan-local") / "out"
    result = run_scan(
        run_dir / "forensics.yaml",
        out,
        ScanOptions(
            first=1, last=SPEC.train_iters, workers=2, shard_iterations=SHARD, progress=False
        ),
    )
    return result


def comparable(out: Path) -> tuple[pl.DataFrame, dict, pl.DataFrame]:
    skip = json.loads((out / "skip.json").read_text())
    skip.pop("notes")
    return pl.read_parquet(out / "scan.parquet"), skip, pl.read_parquet(out / "blocklist.parquet")


def assert_same_scan(a: Path, b: Path) -> None:
    scan_a, skip_a, block_a = comparable(a)
    scan_b, skip_b, block_b = comparable(b)
    assert_frame_equal(scan_a, scan_b)
    assert_frame_equal(block_a, block_b)
    assert skip_a == skip_b


def test_finds_every_planted_stretch_and_no_clean_one(local_result, run_dir) -> None:
    from forensics.commands.check_skip import check_skip

    scan, skip = local_result.scan, local_result.skip
    assert scan.height == SPEC.train_iters
    assert (scan["samples"] == SPEC.global_batch_size).all()
    found = {(s["first"], s["last"]): s for s in skip["stretches"]}
    assert set(found) == set(PLANTED), skip["stretches"]
    for span, kind in PLANTED.items():
        kinds = found[span]["kinds"]
        assert max(kinds, key=kinds.get) == KIND_FLAG[kind], (span, kinds)
    assert skip["iterations"] == [list(s) for s in sorted(PLANTED)]
    planted = pl.any_horizontal(pl.col("iteration").is_between(a, b) for a, b in PLANTED)
    clean = scan.filter(~planted)
    assert clean["flagged_share"].max() <= ScanOptions(1, 1).threshold
    assert clean["flagged_samples"].sum() <= CLEAN_SAMPLES_FLAGGED * clean["samples"].sum()
    # the instance rule fires only where repeated n-grams were planted
    assert scan.filter(~planted)["instance_ngram_samples"].sum() == 0
    assert scan.filter(pl.col("iteration").is_between(91, 98))["instance_ngram_samples"].sum() > 0
    instances = pl.read_parquet(local_result.out / "instances.parquet")
    assert instances.height == scan["instance_ngram_samples"].sum()
    assert instances["iteration"].is_between(91, 98).all()
    assert (instances["ngram_times"] >= 32).all()
    assert (
        instances["ngram_end"] - instances["ngram_start"] >= 32 * instances["ngram_period"]
    ).all()
    # the block list: the dirty datasets' documents, and the scorers' false positives among the
    # clean pages, measured against the stated bound
    truth = json.loads((run_dir / "truth.json").read_text())
    assert truth["clean_documents"] == SPEC.clean_docs  # every harvested page is in the run
    block = json.loads((local_result.out / "blocklist.json").read_text())
    assert set(block["documents"]) >= {"mojibake", "spam", "ngram"}
    assert len(block["documents"].get("clean", [])) <= CLEAN_PAGES_FLAGGED * SPEC.clean_docs
    # spike's skip format: check-skip accepts it for this run and no other
    check_skip(local_result.out / "skip.json", run_dir / "forensics.yaml")
    report = (local_result.out / "report.html").read_text()
    assert "21-30" in report and "dirty-spam" in report and "<script" not in report


def test_ray_engine_matches_local_and_retries_a_dead_worker(
    local_result, run_dir, ray_head, tmp_path, monkeypatch
) -> None:
    marker = tmp_path / "worker-died"
    monkeypatch.setenv(FAULT_ENV, f"41:{marker}")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    out = tmp_path / "ray"
    result = run_scan(
        run_dir / "forensics.yaml",
        out,
        ScanOptions(
            first=1,
            last=SPEC.train_iters,
            engine="ray",
            ray_address=ray_head,
            workers=2,
            shard_iterations=SHARD,
            progress=False,
        ),
    )
    assert marker.is_file(), "the fault was not injected: the test proves nothing"
    assert result.shards == SPEC.train_iters // SHARD
    pids = {s.pid for s in result.summaries}
    assert os.getpid() not in pids  # the shards ran in Ray workers, not in the driver
    assert_same_scan(local_result.out, out)


def test_killed_scan_resumes_to_the_same_result(local_result, run_dir, tmp_path) -> None:
    out = tmp_path / "killed"
    cmd = [
        sys.executable,
        "-m",
        "forensics.cli",
        "scan",
        "--config",
        str(run_dir / "forensics.yaml"),
        "--from",
        "1",
        "--to",
        str(SPEC.train_iters),
        "--out",
        str(out),
        "--shard-iterations",
        str(SHARD),
        "--quiet",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    parts = out / ".scan" / "parts"
    deadline = time.time() + 120
    while time.time() < deadline and len(list(parts.glob("*.done.json"))) < 3:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done = len(list(parts.glob("*.done.json")))
    total = SPEC.train_iters // SHARD
    assert 3 <= done < total, f"{done} of {total} shards done when killed"
    assert not (out / "skip.json").exists()
    result = run_scan(
        run_dir / "forensics.yaml",
        out,
        ScanOptions(first=1, last=SPEC.train_iters, shard_iterations=SHARD, progress=False),
    )
    assert result.resumed == done
    assert_same_scan(local_result.out, out)
    # finished: a rerun refuses to overwrite without --force
    with pytest.raises(ForensicsError, match="already exists"):
        run_scan(
            run_dir / "forensics.yaml",
            out,
            ScanOptions(first=1, last=SPEC.train_iters, shard_iterations=SHARD, progress=False),
        )
    # --force with another threshold reuses every shard and only redoes the outputs
    again = run_scan(
        run_dir / "forensics.yaml",
        out,
        ScanOptions(
            first=1,
            last=SPEC.train_iters,
            shard_iterations=SHARD,
            threshold=0.9,
            force=True,
            progress=False,
        ),
    )
    assert again.resumed == total and again.skip["iterations"] == []


@pytest.mark.parametrize(
    ("first", "last", "message"),
    [
        (50, 40, "--from 50 is after --to 40"),
        (100, 500, "--to 500 is beyond the end of training (last iteration 120)"),
        (0, 10, "--from 0: iterations are 1-indexed"),
    ],
)
def test_bad_range_is_refused_before_any_work(run_dir, tmp_path, first, last, message) -> None:
    with pytest.raises(ForensicsError) as err:
        run_scan(run_dir / "forensics.yaml", tmp_path / "out", ScanOptions(first, last))
    assert str(err.value) == message
    assert not (tmp_path / "out").exists()


def test_unreachable_ray_address_is_one_red_line(run_dir, tmp_path) -> None:
    """Through the CLI: exit code 2, one line on stderr, nothing written, in seconds."""
    port = free_port()  # nothing listens there
    cmd = [
        sys.executable,
        "-m",
        "forensics.cli",
        "scan",
        "--config",
        str(run_dir / "forensics.yaml"),
        "--from",
        "1",
        "--to",
        "10",
        "--out",
        str(tmp_path / "out"),
        "--engine",
        "ray",
        "--ray-address",
        f"127.0.0.1:{port}",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--ray-address 127.0.0.1:{port}: no Ray head" in lines[0], lines
    assert not (tmp_path / "out").exists()


def test_scan_of_another_config_in_the_same_directory_is_refused(local_result, run_dir) -> None:
    config = load_config(run_dir / "forensics.yaml")
    with pytest.raises(ForensicsError, match="holds another scan"):
        run_scan(config, local_result.out, ScanOptions(first=1, last=20, progress=False))


def test_local_worker_dying_is_retried(local_result, run_dir, tmp_path, monkeypatch) -> None:
    """A pool worker killed mid-scan breaks the pool; it is rebuilt and the shard redone."""
    marker = tmp_path / "worker-died"
    monkeypatch.setenv(FAULT_ENV, f"61:{marker}")
    out = tmp_path / "local-fault"
    result = run_scan(
        run_dir / "forensics.yaml",
        out,
        ScanOptions(first=1, last=SPEC.train_iters, shard_iterations=SHARD, progress=False),
    )
    assert marker.is_file(), "the fault was not injected: the test proves nothing"
    assert len({s.pid for s in result.summaries}) >= 2  # a second worker finished the scan
    assert_same_scan(local_result.out, out)


def test_instance_flags_agree_with_olmo_core_on_the_replayed_samples(local_result, run_dir) -> None:
    """Every sample of the n-gram stretch, rebuilt from the replay and checked by OLMo-core's own
    `find_periodic_sequences` as its `_validate_instance` does (numpy_dataset.py:353-363)."""
    from forensics.replay import open_replayer
    from forensics_testing.olmo_repeats_oracle import load_olmo

    olmo = load_olmo()
    rep = open_replayer(load_config(run_dir / "forensics.yaml"))
    table = rep.replay(91, 98, progress=False)
    flagged = {
        (i, p)
        for i, p in pl.read_parquet(local_result.out / "instances.parquet")
        .select("iteration", "position")
        .iter_rows()
    }
    checked = 0
    for (it, pos), seg in table.group_by(["iteration", "position"], maintain_order=True):
        tokens = np.concatenate(
            [
                np.asarray(rep._doc_tokens(name, doc, start, end), dtype=np.int64)
                for name, doc, start, end in seg.select(
                    "dataset", "doc_id", "token_start", "token_end"
                ).iter_rows()
            ]
        )
        assert len(tokens) == SPEC.seq_length + 1
        drop = any(m.times >= 32 for m in olmo(tokens, max_period=13, min_period=1))
        assert drop == ((it, pos) in flagged), (it, pos)
        checked += 1
    assert checked == 8 * SPEC.global_batch_size and flagged
