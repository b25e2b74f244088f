"""A warm rerun (another threshold, --culprit) reads every expensive part back from the cache
and writes, byte for byte, what a cold run with its options writes (timestamps aside)."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest

from forensics.spike import SpikeOptions, run_spike
from forensics_testing.demo.build import build_run
from forensics_testing.small_run import SMALL, WINDOW, snapshot

EMBED_CAP = 60  # embedding on: the cluster cache keeps the assignments too
STAMP = re.compile(rb"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\dZ?")  # provenance, the tracker's header


def outputs(out: Path) -> dict[str, bytes]:
    """The published files (the cache left out), timestamps blanked."""
    return {
        name: STAMP.sub(b"<time>", data)
        for name, data in snapshot(out).items()
        if not name.startswith(".cache")
    }


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    root = tmp_path_factory.mktemp("warm")
    build_run(root / "run", SMALL, progress=False)
    return root / "run" / "forensics.yaml"


def cold(config: Path, out: Path, opts: SpikeOptions) -> dict[str, bytes]:
    """What a run into an empty `out` publishes (then `out` is emptied again)."""
    shutil.rmtree(out, ignore_errors=True)
    run_spike(config, out, opts)
    files = outputs(out)
    shutil.rmtree(out)
    return files


def test_warm_reruns_write_what_cold_runs_write(small: Path, tmp_path: Path) -> None:
    out = tmp_path / "spike"  # one path for every run: the outputs name it
    base = SpikeOptions(step=SMALL.spike_iteration, window=WINDOW, embed_cap=EMBED_CAP,
                        progress=False)  # fmt: skip
    first = run_spike(small, out, base)
    assert first.cached.get("cluster") is False and first.cached.get("documents") is False
    culprit = first.report.culprit
    assert culprit is not None
    reruns = {
        "same": base,
        "threshold": replace(base, threshold=0.05),
        "culprit": replace(base, culprits=(str(culprit["id"]),)),
    }
    warm = {}
    for name, opts in reruns.items():
        result = run_spike(small, out, replace(opts, force=True))
        expensive = ("replay", "decode", "score", "sides", "distinct", "cluster", "documents")
        hits = {s: result.cached.get(s) for s in expensive}
        # --culprit naming the culprit the verdicts blame: the same documents, read back too
        assert all(hits.values()), (name, hits)
        assert "embed" not in result.timings, name  # no k-means, no PCA, no embedder
        warm[name] = outputs(out)
    for name, opts in reruns.items():
        fresh = cold(small, out, opts)
        assert sorted(warm[name]) == sorted(fresh), name
        differ = [f for f in fresh if warm[name][f] != fresh[f]]
        assert not differ, (name, differ)
    # the threshold's rerun recomputed what depends on it: another skip plan than the first's
    assert warm["threshold"]["skip.json"] != warm["same"]["skip.json"]


def test_a_culprit_the_verdicts_do_not_blame_rebuilds_the_documents(
    small: Path, tmp_path: Path
) -> None:
    """--culprit naming a clean cluster: other documents are blamed, so documents.parquet is
    built again (and is what a cold run with that --culprit writes); the clusters are read."""
    out = tmp_path / "spike"
    base = SpikeOptions(step=SMALL.spike_iteration, window=WINDOW, embed_cap=EMBED_CAP,
                        progress=False)  # fmt: skip
    first = run_spike(small, out, base)
    clean = first.report.clusters.filter(pl.col("verdict") == "clean")["id"][0]
    pick = replace(base, culprits=(str(clean),), force=True)
    again = run_spike(small, out, pick)
    assert again.cached["cluster"] and again.cached["documents"] is False, again.cached
    blamed = pl.read_parquet(out / "documents.parquet")["culprit"].drop_nulls().unique()
    assert blamed.to_list() == [clean]
    warm = outputs(out)
    assert warm == cold(small, out, pick)


def test_old_cluster_keys_are_dropped(tmp_path: Path) -> None:
    """Each code version or embedding option leaves a key: the KEPT_KEYS latest stay, with all
    three of their files; the key just used stays whatever its age."""
    from forensics.spike.cluster_cache import KEPT_KEYS, drop_stale

    keys = [f"k{i}" for i in range(KEPT_KEYS + 2)]
    for age, key in enumerate(keys):  # k0 the newest
        for name in (f"clusters-{key}.json", f"clusters-{key}.parquet", f"assign-{key}.parquet"):
            (tmp_path / name).write_text("x")
            os.utime(tmp_path / name, (1e9 - age, 1e9 - age))
    drop_stale(tmp_path, keys[-1])  # the oldest, used now
    left = sorted(p.name for p in tmp_path.iterdir())
    kept = {keys[-1], *keys[: KEPT_KEYS - 1]}
    assert left == sorted(
        f"{kind}-{k}.{ext}"
        for k in kept
        for kind, ext in (("clusters", "json"), ("clusters", "parquet"), ("assign", "parquet"))
    )
