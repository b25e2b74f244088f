"""HF `datasets` replay against the real pipeline: the same files, seed, buffer, epochs, world size
and DataLoader workers, iterated with the real library and a real torch DataLoader, must give the
document order our replay gives (iteration, position, doc_id), for every combination here."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

datasets = pytest.importorskip("datasets")
torch = pytest.importorskip("torch")

from dataloaders.hf import open_hf_replayer, record_shards  # noqa: E402
from dataloaders.run_config import config_from_dict  # noqa: E402
from forensics.errors import ForensicsError  # noqa: E402
from forensics_testing.repo_paths import REPO_ROOT  # noqa: E402


@pytest.fixture(autouse=True)
def _no_reader_shutdown_sleep(monkeypatch):
    """The real Parquet stream sleeps 5 s after its reader threads (an Arrow bug workaround) at
    every epoch; it changes nothing in the order, so the reference runs without it."""
    monkeypatch.setattr(datasets.config, "SLEEP_TIME_ON_THREADS_SHUTDOWN", 0)


WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
SHARD_ROWS = [37, 52, 29, 61, 44, 33]  # uneven on purpose: workers and ranks run out unevenly


def _texts(rng: np.random.Generator, first_uid: int, n: int) -> list[str]:
    return [
        f"doc{first_uid + i} " + " ".join(rng.choice(WORDS, size=int(rng.integers(1, 40))))
        for i in range(n)
    ]


def write_shards(folder: Path, kind: str, rows: list[int] = SHARD_ROWS) -> list[str]:
    """Shards whose `uid` column is the dataset-wide row number (what doc_id must equal)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    uid = 0
    names = []
    for s, n in enumerate(rows):
        table = pa.table(
            {
                "text": _texts(rng, uid, n),
                "uid": np.arange(uid, uid + n, dtype=np.int64),
                "src": [f"crawl-{s % 3}"] * n,
            }
        )
        if kind == "parquet":
            name = f"part-{s:02d}.parquet"
            pq.write_table(table, folder / name, row_group_size=16)
        elif kind == "json":
            name = f"part-{s:02d}.jsonl"
            with (folder / name).open("w") as handle:
                for row in table.to_pylist():
                    handle.write(json.dumps(row) + "\n")
        else:
            name = f"part-{s:02d}.arrow"
            with pa.ipc.new_stream(folder / name, table.schema) as writer:
                for batch in table.to_batches(max_chunksize=13):
                    writer.write_batch(batch)
        names.append(name)
        uid += n
    return names


def make_config(
    folder: Path, files: list[str], train_iters: int = 10_000, tokenizer: Path | None = None, **data
):
    world = data.get("world_size", 1)
    raw = {
        "data": {"format": "hf", "files": files, "provenance_fields": ["src"], **data},
        "training": {
            "global_batch_size": world * data["per_device_batch_size"],
            "train_iters": train_iters,
        },
    }
    if tokenizer is not None:
        raw["tokenizer"] = str(tokenizer)
    if data.get("streaming"):
        raw["data"].setdefault("datasets_version", datasets.__version__)
    return config_from_dict(raw, base_dir=folder, source=folder / "run.yaml")


def uids(batch: list[dict]) -> list[int]:
    """DataLoader collate: keep the row ids (module level: picklable for workers)."""
    return [int(x["uid"]) for x in batch]


def real_streaming(folder: Path, files: list[str], builder: str, rank: int, **cfg) -> list:
    """The run itself: load_dataset(streaming) -> shuffle -> split -> set_epoch -> DataLoader."""
    from datasets.distributed import split_dataset_by_node

    paths = [str(folder / f) for f in files]
    ds = datasets.load_dataset(builder, data_files=paths, split="train", streaming=True)
    if cfg.get("shuffle", True):
        ds = ds.shuffle(seed=cfg.get("seed", 42), buffer_size=cfg.get("buffer_size", 1000))
    if cfg.get("world_size", 1) > 1:
        ds = split_dataset_by_node(
            ds, rank=rank, world_size=cfg["world_size"], strategy=cfg.get("split_strategy", "auto")
        )
    if cfg.get("with_format"):
        ds = ds.with_format(cfg["with_format"])
    out = []
    for epoch in range(cfg.get("epochs", 1)):
        ds.set_epoch(epoch if cfg.get("set_epoch", True) else 0)
        loader = torch.utils.data.DataLoader(
            ds,
            batch_size=cfg["per_device_batch_size"],
            num_workers=cfg.get("num_workers", 0),
            drop_last=cfg.get("drop_last", False),
            collate_fn=uids,
        )
        out.extend(list(loader))
    return out


def expected_rows(per_rank: list[list[list[int]]], size: int) -> list[tuple[int, int, int]]:
    """(iteration, position, doc_id): iteration i = i-th batch of every rank (plain DDP loop)."""
    n = min(len(b) for b in per_rank)
    rows = [
        (i + 1, rank * size + j, uid)
        for rank, batches in enumerate(per_rank)
        for i, batch in enumerate(batches[:n])
        for j, uid in enumerate(batch)
    ]
    return sorted(rows)


def replayed_rows(replayer) -> list[tuple[int, int, int]]:
    table = replayer.replay(1, replayer.last_iteration, progress=False)
    return list(table.select("iteration", "position", "doc_id").iter_rows())


STREAMING_CASES = [
    dict(seed=3, buffer_size=20, per_device_batch_size=8),
    dict(seed=3, buffer_size=20, per_device_batch_size=8, epochs=2),
    dict(seed=11, buffer_size=50, per_device_batch_size=4, world_size=2, epochs=2),
    dict(seed=11, buffer_size=17, per_device_batch_size=4, world_size=3, epochs=2),
    dict(seed=5, buffer_size=17, per_device_batch_size=4, world_size=4),  # 6 % 4: by examples
    dict(seed=5, buffer_size=30, per_device_batch_size=5, num_workers=2, epochs=2),
    dict(seed=9, buffer_size=25, per_device_batch_size=4, world_size=2, num_workers=3),
    dict(seed=1, buffer_size=64, per_device_batch_size=8, with_format="numpy", drop_last=True),
    dict(seed=2, shuffle=False, per_device_batch_size=6, world_size=3, num_workers=2),
    dict(seed=4, buffer_size=40, per_device_batch_size=6, epochs=2, set_epoch=False),
]


@pytest.fixture(scope="module")
def shard_sets(tmp_path_factory) -> dict[str, tuple[Path, list[str]]]:
    root = tmp_path_factory.mktemp("hf-shards")
    return {kind: (root / kind, write_shards(root / kind, kind)) for kind in ("parquet", "json")}


@pytest.mark.parametrize(
    "case", STREAMING_CASES, ids=lambda c: "-".join(f"{v}" for v in c.values())
)
def test_streaming_order_matches_the_real_pipeline(shard_sets, case):
    folder, files = shard_sets["parquet"]
    cfg = make_config(folder, files, streaming=True, **case)
    replayer = open_hf_replayer(cfg)
    per_rank = [
        real_streaming(folder, files, "parquet", rank, **case)
        for rank in range(case.get("world_size", 1))
    ]
    assert replayed_rows(replayer) == expected_rows(per_rank, case["per_device_batch_size"])
    assert replayer.replay(1, 1, progress=False)["exact"].all()


@pytest.mark.parametrize("kind", ["json", "arrow"])
def test_streaming_order_for_json_and_arrow_files(shard_sets, tmp_path, kind):
    if kind == "json":
        folder, files = shard_sets["json"]
    else:
        folder, files = tmp_path, write_shards(tmp_path, "arrow")
    case = dict(seed=8, buffer_size=23, per_device_batch_size=4, world_size=2, epochs=2)
    replayer = open_hf_replayer(make_config(folder, files, streaming=True, **case))
    per_rank = [real_streaming(folder, files, kind, r, **case) for r in range(2)]
    assert replayed_rows(replayer) == expected_rows(per_rank, 4)


def real_map_style(folder: Path, files: list[str], cache: Path, rank: int, **cfg) -> list:
    from datasets.distributed import split_dataset_by_node

    paths = [str(folder / f) for f in files]
    base = datasets.load_dataset("parquet", data_files=paths, split="train", cache_dir=str(cache))
    out = []
    for epoch in range(cfg.get("epochs", 1)):
        ds = base.shuffle(seed=cfg["seed"] + epoch) if cfg.get("shuffle", True) else base
        if cfg.get("world_size", 1) > 1:
            ds = split_dataset_by_node(ds, rank=rank, world_size=cfg["world_size"])
        loader = torch.utils.data.DataLoader(
            ds, batch_size=cfg["per_device_batch_size"], collate_fn=uids
        )
        out.extend(list(loader))
    return out


@pytest.mark.parametrize(
    "case",
    [
        dict(seed=13, per_device_batch_size=8, epochs=2),
        dict(seed=14, per_device_batch_size=5, world_size=3, epochs=2),
        dict(seed=15, shuffle=False, per_device_batch_size=7, world_size=2),
    ],
)
def test_map_style_order_matches_the_real_pipeline(shard_sets, tmp_path, case):
    folder, files = shard_sets["parquet"]
    replayer = open_hf_replayer(make_config(folder, files, **case))
    per_rank = [
        real_map_style(folder, files, tmp_path / "cache", r, **case)
        for r in range(case.get("world_size", 1))
    ]
    assert replayed_rows(replayer) == expected_rows(per_rank, case["per_device_batch_size"])


def test_save_to_disk_directory(shard_sets, tmp_path):
    folder, files = shard_sets["json"]
    paths = [str(folder / f) for f in files]
    base = datasets.load_dataset("json", data_files=paths, split="train", cache_dir=str(tmp_path))
    base.save_to_disk(str(tmp_path / "saved"), num_shards=3)
    raw = {
        "data": {"format": "hf", "path": "saved", "seed": 21, "per_device_batch_size": 8},
        "training": {"global_batch_size": 8, "train_iters": 30},
    }
    replayer = open_hf_replayer(config_from_dict(raw, base_dir=tmp_path, source=None))
    loaded = datasets.load_from_disk(str(tmp_path / "saved")).shuffle(seed=21)
    real = list(torch.utils.data.DataLoader(loaded, batch_size=8, collate_fn=uids))[:30]
    assert replayer.last_iteration == 30
    assert replayed_rows(replayer) == expected_rows([real], 8)
    table = replayer.replay(3, 4, text=True, progress=False)
    assert [t.split()[0] for t in table["text"]] == [f"doc{d}" for d in table["doc_id"]]


# ---------------------------------------------------------------- packing


def write_tokenizer(path: Path, n_docs: int) -> Path:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    vocab = ["[UNK]", "</s>", *WORDS, *(f"doc{i}" for i in range(n_docs))]
    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.save(str(path))
    return path


@pytest.mark.parametrize("group", [None, 40])
def test_packed_sequences_match_a_real_group_texts_pipeline(shard_sets, tmp_path, group):
    """shuffle -> tokenize (+EOS) -> group_texts into 24-token sequences -> split -> batches."""
    from datasets.distributed import split_dataset_by_node
    from tokenizers import Tokenizer

    folder, files = shard_sets["parquet"]
    tok_path = write_tokenizer(tmp_path / "tokenizer.json", sum(SHARD_ROWS))
    tok = Tokenizer.from_file(str(tok_path))
    eos = tok.token_to_id("</s>")
    n, size, world, seed = 24, 3, 2, 31
    case = dict(seed=seed, per_device_batch_size=size, world_size=world, epochs=2)
    cfg = make_config(
        folder, files, pack_tokens=n, pack_group_size=group, eos_token="</s>",
        tokenizer=tok_path, **case,
    )  # fmt: skip
    replayer = open_hf_replayer(cfg)

    def tokenize(batch):
        encoded = tok.encode_batch(batch["text"], add_special_tokens=False)
        return {"input_ids": [e.ids + [eos] for e in encoded]}

    def group_texts(batch):
        flat = [t for ids in batch["input_ids"] for t in ids]
        total = len(flat) // n * n
        return {"input_ids": [flat[i : i + n] for i in range(0, total, n)]}

    paths = [str(folder / f) for f in files]
    base = datasets.load_dataset(
        "parquet", data_files=paths, split="train", cache_dir=str(tmp_path)
    )
    per_rank: list[list] = [[] for _ in range(world)]
    for epoch in range(2):
        ds = base.shuffle(seed=seed + epoch)
        ds = ds.map(tokenize, batched=True, remove_columns=ds.column_names)
        ds = ds.map(group_texts, batched=True, batch_size=group or len(ds))
        for rank in range(world):
            mine = split_dataset_by_node(ds, rank=rank, world_size=world)
            loader = torch.utils.data.DataLoader(
                mine, batch_size=size, collate_fn=lambda b: [x["input_ids"] for x in b]
            )
            per_rank[rank].extend(list(loader))
    n_iters = min(len(b) for b in per_rank)
    assert replayer.last_iteration == n_iters

    table = replayer.replay(1, n_iters, text=True, progress=False)
    docs = replayer.documents(table.select("dataset", "doc_id").unique(), progress=False)
    ids = {
        d: tok.encode(t, add_special_tokens=False).ids + [eos]
        for d, t in docs.select("doc_id", "text").iter_rows()
    }
    got: dict[tuple[int, int], list[int]] = {}
    for it, pos, doc, start, end in table.select(
        "iteration", "position", "doc_id", "token_start", "token_end"
    ).iter_rows():
        got.setdefault((it, pos), []).extend(ids[doc][start:end])
    expected = {
        (i + 1, rank * size + j): seq
        for rank, batches in enumerate(per_rank)
        for i, batch in enumerate(batches[:n_iters])
        for j, seq in enumerate(batch)
    }
    assert got == expected
    # the decoded segment is the segment's own tokens (EOS excluded)
    first = table.row(0, named=True)
    seg = ids[first["doc_id"]][first["token_start"] : first["token_end"]]
    assert first["text"] == tok.decode([t for t in seg if t != eos])


# ---------------------------------------------------------------- resumes


def test_streaming_resume_from_state_dict_is_replayed(shard_sets):
    """A StatefulDataLoader-style restart (num_workers 0): the source resumes where the state
    says, the shuffle buffer starts empty; the replay reproduces the restarted order."""
    folder, files = shard_sets["parquet"]
    case = dict(seed=17, buffer_size=40, per_device_batch_size=6)
    resumes = [{"iteration": 5, "mode": "state_dict"}, {"iteration": 19, "mode": "state_dict"}]
    replayer = open_hf_replayer(make_config(folder, files, streaming=True, resumes=resumes, **case))
    paths = [str(folder / f) for f in files]
    ds = datasets.load_dataset("parquet", data_files=paths, split="train", streaming=True)
    ds = ds.shuffle(seed=17, buffer_size=40)
    batches: list[list[int]] = []
    for stop in (4, 18, None):
        current: list[int] = []
        for example in ds:
            current.append(example["uid"])
            if len(current) == 6:
                batches.append(current)
                current = []
                if len(batches) == stop:
                    break
        else:
            if current:
                batches.append(current)
            break
        ds.load_state_dict(ds.state_dict())
    uninterrupted = real_streaming(folder, files, "parquet", 0, **case)
    assert batches != uninterrupted  # the restart really changed the order
    assert replayed_rows(replayer) == expected_rows([batches], 6)
    assert replayer.replay(1, replayer.last_iteration, progress=False)["exact"].all()


def test_unrecorded_streaming_resume_is_labelled_best_effort(shard_sets):
    folder, files = shard_sets["parquet"]
    case = dict(seed=17, buffer_size=40, per_device_batch_size=6)
    resumes = [{"iteration": 7, "mode": "unknown"}]
    replayer = open_hf_replayer(make_config(folder, files, streaming=True, resumes=resumes, **case))
    table = replayer.replay(1, replayer.last_iteration, progress=False)
    exact = table.group_by("iteration").agg(pl.col("exact").all()).sort("iteration")
    assert exact.filter(pl.col("iteration") < 7)["exact"].all()
    assert not exact.filter(pl.col("iteration") >= 7)["exact"].any()
    uninterrupted = real_streaming(folder, files, "parquet", 0, **case)
    assert replayed_rows(replayer) == expected_rows([uninterrupted], 6)


# ---------------------------------------------------------------- the Replayer protocol


def test_protocol_methods_on_a_streaming_run(shard_sets):
    folder, files = shard_sets["parquet"]
    case = dict(seed=3, buffer_size=30, per_device_batch_size=4, world_size=2, epochs=2)
    replayer = open_hf_replayer(make_config(folder, files, streaming=True, train_iters=40, **case))
    assert replayer.last_iteration == 40
    assert replayer.facets == ["file", "src"]
    table = replayer.replay(10, 12, text=True, progress=False)
    assert table.columns[:9] == [
        "iteration", "position", "sample_index", "stage", "dataset",
        "dataset_sample", "doc_id", "token_start", "token_end",
    ]  # fmt: skip
    assert table.columns[-3:] == ["src", "text", "exact"]
    assert (table["sample_index"] == (table["iteration"] - 1) * 8 + table["position"]).all()
    offsets = np.cumsum([0, *SHARD_ROWS])
    for doc, file, src, text in table.select("doc_id", "file", "src", "text").iter_rows():
        shard = int(np.searchsorted(offsets, doc, side="right") - 1)
        assert text.split()[0] == f"doc{doc}"
        assert (file, src) == (files[shard], f"crawl-{shard % 3}")

    samples = replayer.iteration_samples(10, 12)
    assert samples["first_sample"].to_list() == [72, 80, 88]
    assert samples["end_sample"].to_list() == [80, 88, 96]

    shard2 = pl.DataFrame(
        {"dataset": "hf", "doc_id": np.arange(offsets[2], offsets[3], dtype=np.int64)}
    )
    exposure = replayer.exposure(shard2, 1, 40)
    full = replayer.replay(1, 40, progress=False)
    truth = (
        full.with_columns(pl.col("doc_id").is_between(offsets[2], offsets[3] - 1).alias("bad"))
        .group_by("iteration")
        .agg(pl.len().alias("samples"), pl.col("bad").sum().alias("flagged_samples"))
        .sort("iteration")
    )
    assert exposure["samples"].to_list() == truth["samples"].to_list()
    assert exposure["flagged_samples"].to_list() == truth["flagged_samples"].to_list()
    assert exposure["flagged_samples"].sum() > 0

    docs = replayer.documents(pl.DataFrame({"dataset": ["hf", "hf"], "doc_id": [5, 200]}))
    assert [t.split()[0] for t in docs["text"]] == ["doc5", "doc200"]

    import hashlib

    prints = replayer.fingerprint()["shards"]
    assert [p["sha256"] for p in prints] == [
        hashlib.sha256((folder / f).read_bytes()).hexdigest() for f in files
    ]
    with pytest.raises(ForensicsError, match="outside"):
        replayer.replay(39, 41)


# ---------------------------------------------------------------- bad input


def test_bad_input_is_one_clear_error(shard_sets, tmp_path):
    src, files = shard_sets["json"]
    folder = tmp_path / "run"
    folder.mkdir()
    for f in files:
        (folder / f).write_bytes((src / f).read_bytes())
    shards = record_shards([folder / f for f in files], base=folder)
    case = dict(streaming=True, seed=1, per_device_batch_size=4)

    with pytest.raises(ForensicsError, match="'body' is not a column"):
        open_hf_replayer(make_config(folder, files, text_field="body", **case))
    with pytest.raises(ForensicsError, match="datasets 0.0.1"):
        open_hf_replayer(make_config(folder, files, datasets_version="0.0.1", **case))
    with pytest.raises(ForensicsError, match="datasets_version"):
        config_from_dict(
            {
                "data": {"format": "hf", "files": files, "streaming": True,
                         "per_device_batch_size": 4},
                "training": {"global_batch_size": 4, "train_iters": 3},
            },
            base_dir=folder, source=folder / "run.yaml",
        )  # fmt: skip
    raw = make_config(folder, files, **case).model_dump(mode="json", exclude={"source"})
    raw["training"]["global_batch_size"] *= 2
    with pytest.raises(ForensicsError, match="global_batch_size 8"):  # refused on reading
        config_from_dict(raw, base_dir=folder, source=folder / "run.yaml")

    assert open_hf_replayer(make_config(folder, files, shards=shards, **case)).last_iteration > 0
    # same size, one byte different: the hash catches it
    third = folder / files[2]
    data = third.read_bytes()
    at = data.index(b"alpha")
    third.write_bytes(data[:at] + b"alphb" + data[at + 5 :])
    with pytest.raises(ForensicsError, match=f"shard {third} changed: its sha256"):
        open_hf_replayer(make_config(folder, files, shards=shards, **case))
    # a shard that grew
    with third.open("ab") as handle:
        handle.write(b'{"text": "doc999 extra", "uid": 999, "src": "x"}\n')
    with pytest.raises(ForensicsError, match="bytes, the run's was"):
        open_hf_replayer(make_config(folder, files, shards=shards, **case))
    # a missing shard
    third.unlink()
    with pytest.raises(ForensicsError, match=f"shard {third} not found"):
        open_hf_replayer(make_config(folder, files, **case))
    with pytest.raises(ForensicsError, match="no file matches"):
        open_hf_replayer(make_config(folder, ["nothing-*.jsonl"], **case))


def test_replay_never_imports_torch(shard_sets):
    """`forensics replay` must start fast: datasets would import torch for every IterableDataset;
    a fresh interpreter replaying a streaming run (with_format torch, workers) must not load it."""
    import subprocess
    import sys

    folder, files = shard_sets["parquet"]
    script = f"""
import sys
from pathlib import Path
from dataloaders.hf import open_hf_replayer
from dataloaders.run_config import config_from_dict
data = {{"format": "hf", "files": {files!r}, "streaming": True, "per_device_batch_size": 4,
        "datasets_version": {datasets.__version__!r}, "num_workers": 2, "with_format": "torch"}}
cfg = config_from_dict({{"data": data, "training": {{"global_batch_size": 4, "train_iters": 5}}}},
                       base_dir=Path({str(folder)!r}), source=None)
table = open_hf_replayer(cfg).replay(1, 5, text=True)
assert len(table) == 20, len(table)
print("torch" in sys.modules)
"""
    root = REPO_ROOT
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=root, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "False"


def test_example_config_validates():
    from dataloaders.run_config import load_config

    config = load_config(REPO_ROOT / "configs" / "example-hf.yaml")
    assert config.data.format == "hf"
    assert config.training.global_batch_size == config.data.global_batch_size


def test_record_command_writes_shards_the_replay_accepts(shard_sets, tmp_path):
    import subprocess
    import sys

    import yaml

    src, files = shard_sets["parquet"]
    for f in files[:3]:
        (tmp_path / f).write_bytes((src / f).read_bytes())
    raw = {
        "data": {"format": "hf", "files": ["part-*.parquet"], "per_device_batch_size": 4},
        "training": {"global_batch_size": 4, "train_iters": 5},
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(raw))
    root = REPO_ROOT
    done = subprocess.run(
        [sys.executable, "-m", "dataloaders.hf", "record", str(path)],
        cwd=root, capture_output=True, text=True, check=True,
    )  # fmt: skip
    shards = yaml.safe_load(done.stdout)["shards"]
    assert [s["file"] for s in shards] == files[:3]
    raw["data"]["shards"] = shards
    config = config_from_dict(raw, base_dir=tmp_path, source=path)
    assert open_hf_replayer(config).last_iteration == 5
    shards[1]["size"] += 1
    config = config_from_dict(raw, base_dir=tmp_path, source=path)
    with pytest.raises(ForensicsError, match="part-01.parquet changed"):
        open_hf_replayer(config)


def test_order_is_cached_and_a_touched_shard_misses(shard_sets, tmp_path, monkeypatch):
    from dataloaders.hf import order

    src, files = shard_sets["parquet"]
    for f in files:
        (tmp_path / f).write_bytes((src / f).read_bytes())
    case = dict(streaming=True, seed=6, buffer_size=20, per_device_batch_size=4, world_size=2)
    first = replayed_rows(open_hf_replayer(make_config(tmp_path, files, **case)))

    def no_streaming(*args, **kwargs):
        raise AssertionError("the order was rebuilt")

    monkeypatch.setattr(order, "epoch_batches", no_streaming)
    assert replayed_rows(open_hf_replayer(make_config(tmp_path, files, **case))) == first
    os.utime(tmp_path / files[3])
    with pytest.raises(AssertionError, match="rebuilt"):
        _ = open_hf_replayer(make_config(tmp_path, files, **case)).last_iteration
