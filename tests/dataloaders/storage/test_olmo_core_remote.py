"""OLMo-core runs whose token files live in S3 (moto's server on 127.0.0.1), read as
ai2-olmo-core 3.0.0's `olmo_core/io.py` reads them (dataloaders/olmo_core/remote.py).

Oracle: the library itself, its NumpyFSLDataset and data loader given the same `s3://` paths,
reading them from the same endpoint through its own io (`_get_s3_client`, io.py:867-884, with the
endpoint from AWS_ENDPOINT_URL as botocore reads it: io.py:912 gives no endpoint for s3)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml

from dataloaders.errors import ConfigError
from dataloaders.olmo_core import files
from dataloaders.run_config import load_config
from dataloaders.storage import fetched
from forensics.replay import open_replayer
from forensics_testing.olmo_core_run import (
    config_dict,
    oracle_positions,
    oracle_spec,
    random_docs,
    run_oracle,
    write_config,
    write_documents,
)

NAMES = ("web-0", "web-1", "code-0")
SOURCES = {"web": ["web-0.npy", "web-1.npy"], "code": ["code-0.npy"]}


@pytest.fixture
def olmo_run(s3, tmp_path):
    """Three token files with Dolma metadata, on disk and on the S3 endpoint; the local and
    the remote config of one run."""
    rng = np.random.default_rng(9)
    local = tmp_path / "local"
    local.mkdir()
    for name, n in zip(NAMES, (400, 300, 350), strict=True):
        rows = [[f"{name}-doc{i}", "src", str(i)] for i in range(n)]
        write_documents(local / f"{name}.npy", random_docs(rng, n), metadata=rows)
        for suffix in (".npy", ".csv.gz"):
            s3.put(local / f"{name}{suffix}", f"olmo/{name}{suffix}")
    config = config_dict(SOURCES, seq=32, ipb=8, seed=17, world=2, train_iters=120)
    remote = yaml.safe_load(yaml.safe_dump(config))
    for source in remote["data"]["sources"]:
        source["paths"] = [s3.url(f"olmo/{p}") for p in source["paths"]]
    return (
        write_config(local, config),
        write_config(tmp_path, remote, "remote.yaml"),
        config,
        remote,
    )


def test_remote_replay_is_what_olmo_core_reads_from_s3(olmo_run, tmp_path, monkeypatch):
    local_path, remote_path, config, remote = olmo_run
    spec = oracle_spec(config, tmp_path)
    spec["paths"] = [p for s in remote["data"]["sources"] for p in s["paths"]]
    spec["work_dir"] = str(tmp_path / "oracle-work")
    out = run_oracle([spec], tmp_path)[0]
    monkeypatch.setenv("FORENSICS_STORAGE_BLOCK_BYTES", "256")
    fetched.reset()
    replayer = open_replayer(load_config(remote_path))
    first, last = 100, 104
    table = replayer.replay(first, last, progress=False)
    local = open_replayer(load_config(local_path)).replay(first, last, progress=False)
    # the same rows; the `file` facet names each file where it lives (its URL here)
    differ = [c for c in table.columns if not table[c].equals(local[c])]
    assert differ == ["file"], differ
    assert [u.rsplit("/", 1)[1] for u in table["file"]] == [
        p.rsplit("/", 1)[1] for p in local["file"]
    ]
    assert all(u.startswith("s3://") for u in table["file"])
    want = oracle_positions(out)
    samples = table.unique(["iteration", "position"]).sort("iteration", "position")
    got: dict[int, list[int]] = {}
    for it, inst in samples.select("iteration", "dataset_sample").iter_rows():
        got.setdefault(it, []).append(inst)
    assert got == {s: want[s] for s in range(first, last + 1)}
    tokens = {
        (s["step"], r * len(s["index"]) + j): ids
        for r, rank in enumerate(out["ranks"])
        for s in rank["steps"]
        for j, ids in enumerate(s["input_ids"])
    }
    pieces = replayer.segments(samples["dataset_sample"].to_numpy(), samples["stage"].to_numpy())
    rebuilt: dict[int, list[int]] = {}
    for row, f, d, a, b in zip(*(pieces[k].tolist() for k in pieces), strict=True):
        start, _ = replayer._doc_span(f, d)
        part = files.read_tokens(replayer.files[f], start + a, start + b, replayer.data)
        rebuilt.setdefault(row, []).extend(part.tolist())
    for row, key in enumerate(samples.select("iteration", "position").iter_rows()):
        assert rebuilt[row] == tokens[key], f"tokens of sample {key}"
    # 5 iterations x 8 instances x 32 tokens x 2 bytes, in 256-byte blocks: a small part
    total = sum((local_path.parent / f"{n}.npy").stat().st_size for n in NAMES)
    window = fetched.summary()["objects"]
    npy = sum(v for k, v in window.items() if k.endswith(".npy"))
    assert 0 < npy < total / 4, window


def test_schemes_and_variables_as_olmo_core_reads_them(s3, monkeypatch, tmp_path):
    """r2:// needs R2_PROFILE and R2_ENDPOINT_URL (io.py:891-897, 914-921), as OLMo-core says;
    a scheme its io does not read is refused in one line."""
    from dataloaders.storage import head

    monkeypatch.delenv("R2_PROFILE", raising=False)
    with pytest.raises(ConfigError, match=r"^r2://b/x\.npy: r2:// paths need \$R2_PROFILE"):
        head("r2://b/x.npy")
    (tmp_path / "credentials").write_text(
        "[r2]\naws_access_key_id = k\naws_secret_access_key = s\n", encoding="utf-8"
    )
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("R2_PROFILE", "r2")
    monkeypatch.setenv("R2_ENDPOINT_URL", s3.endpoint)
    path = tmp_path / "x.npy"
    np.arange(10, dtype=np.uint16).tofile(path)
    s3.put(path, "r2/x.npy")
    assert head(f"r2://{s3.bucket}/r2/x.npy").size == 20  # through the R2 profile's endpoint
    config = config_dict({"web": ["hf://datasets/x.npy"]}, seq=4, ipb=2, seed=1, train_iters=2)
    with pytest.raises(ConfigError, match="OLMo-core reads s3, r2, weka, gs, http, https"):
        load_config(write_config(tmp_path, config, "bad.yaml"))


def test_saved_data_paths_keep_their_urls(tmp_path):
    """data_paths.txt of a run that read s3:// files: the URLs stay (read remotely)."""
    from dataloaders.errors import ForensicsError
    from dataloaders.olmo_core.saved_config import _local

    assert _local("s3://bucket/a/x.npy", tmp_path) == "s3://bucket/a/x.npy"
    with pytest.raises(ForensicsError, match="a scheme this tool does not read"):
        _local("hf://datasets/x.npy", tmp_path)


def test_remote_spike_and_rebuild_equal_local(s3, tmp_path):
    """spike and rebuild on the remote copy: the same block list and restart flags as the
    local run's, and a rebuilt file list that still names the kept files by URL."""
    import json

    from typer.testing import CliRunner

    from forensics.cli import app
    from forensics_testing.remote_runs import olmo_spike_run

    local, remote = olmo_spike_run(tmp_path / "run", s3)
    args = ["--step", "80", "--window", "20", "--embed-cap", "0", "--quiet"]
    outs = {label: tmp_path / f"spike-{label}" for label in ("local", "remote")}

    def spike(config: Path, out: Path, *more: str) -> str:
        argv = ["spike", "--config", str(config), *args, *more, "--out", str(out)]
        done = CliRunner().invoke(app, argv)
        assert done.exit_code == 0, done.output
        return done.output

    # web.npy named the culprit, as a user does with --culprit after reading the report
    spike(local, outs["local"])
    report = json.loads((outs["local"] / "report.json").read_text())
    web = next(c["id"] for c in report["clusters"] if c["key"] == str(local.parent / "web.npy"))
    spike(local, outs["local"], "--culprit", web, "--force")
    output = spike(remote, outs["remote"], "--culprit", web)
    assert "bytes fetched" in output
    skips = {k: json.loads((v / "skip.json").read_text()) for k, v in outs.items()}
    assert skips["remote"]["documents"] == skips["local"]["documents"] == {"web": list(range(100))}
    flags = "restart-olmo-core.flags"
    assert (outs["remote"] / flags).read_bytes() == (outs["local"] / flags).read_bytes()
    docs = {k: pl.read_parquet(v / "documents.parquet") for k, v in outs.items()}
    differ = [c for c in docs["local"].columns if not docs["local"][c].equals(docs["remote"][c])]
    assert differ == ["file"]  # each file named where it lives
    rebuilt = tmp_path / "rebuilt"
    done = CliRunner().invoke(
        app, ["rebuild", str(outs["remote"]), "--config", str(remote), "--out", str(rebuilt)]
    )
    assert done.exit_code == 0, done.output
    flags = (rebuilt / "restart-rebuilt.flags").read_text()
    kept = [s3.url("olmo/books.npy"), s3.url("olmo/forum.npy")]
    assert flags.startswith("--dataset.paths=" + json.dumps(kept, separators=(",", ":")))
    again = load_config(rebuilt / "rebuilt.yaml")  # the rebuilt config reads them remotely
    assert [p for s in again.data.sources for p in s.paths] == kept
