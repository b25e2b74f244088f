"""Streaming runs as llm-foundry users configure them, checked against mosaicml-streaming 0.13.0
itself (the oracle venv): every default is the library's, `epoch_size: "4k"` parses as the
library's number_abbrev_to_int does, an llm-foundry `train_loader.dataset` section replays what
the real StreamingDataset yields, and shards written compressed by the library's own MDSWriter
are read.

Library source: mosaicml/streaming@89e7bb9082457a59f6efcfa4ef910102e07a9729 (its streaming/base/
is byte-identical to the 0.13.0 wheel): dataset.py:317-343 (defaults), util.py:125-166
(number_abbrev_to_int), compression.py:79-259 (codecs), stream.py:353-412 (a missing raw shard is
decompressed from its zip); llm-foundry text_data.py at mosaicml/llm-foundry@8c8dd48f.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from dataloaders.mosaic.config import IGNORED_FIELDS, MosaicData
from dataloaders.mosaic.numbers import number_abbrev_to_int
from dataloaders.run_config import config_from_dict
from forensics.errors import ForensicsError
from forensics.replay import open_replayer
from forensics_testing.mosaic_support import run_library_functions, run_oracle, write_mds

# Every StreamingDataset keyword we default, and the torch DataLoader's num_workers / drop_last.
DEFAULTED = [
    "epoch_size", "sampling_method", "sampling_granularity", "partition_algo",
    "num_canonical_nodes", "shuffle", "shuffle_algo", "shuffle_seed", "shuffle_block_size",
    "batching_method", "replication", "stream_name", "stream_config", "download_retry",
    "download_timeout", "validate_hash", "keep_zip", "predownload", "cache_limit",
    "allow_unsafe_types", "num_workers", "drop_last",
]  # fmt: skip


@pytest.fixture(scope="module")
def library_defaults(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("signature")
    return run_library_functions([{"fn": "signature"}], folder)[0]


@pytest.mark.parametrize("field", DEFAULTED)
def test_default_is_the_librarys(field: str, library_defaults: dict[str, Any]):
    assert field in library_defaults, f"StreamingDataset has no keyword {field}"
    ours = MosaicData.model_fields[field].get_default(call_default_factory=True)
    assert ours == library_defaults[field]


def _rows(name: str, n: int, uid0: int) -> list[dict[str, Any]]:
    return [{"text": f"{name} document {i}", "uid": uid0 + i} for i in range(n)]


def _expected(per_rank: list[dict[str, Any]], batch: int) -> list:
    rows, it = [], 0
    for e in range(len(per_rank[0]["epochs"])):
        for b in range(len(per_rank[0]["epochs"][e])):
            it += 1
            for r, p in enumerate(per_rank):
                rows += [(it, r * batch + j, u) for j, u in enumerate(p["epochs"][e][b])]
    return rows


def _uids(replayer: Any, iters: int, offsets: dict[str, int]) -> list:
    table = replayer.replay(1, iters, text=True)
    return [
        (it, pos, offsets[ds] + doc)
        for it, pos, ds, doc in table.select("iteration", "position", "dataset", "doc_id").rows()
    ]


def _config(root: Path, data: dict[str, Any], gbs: int, iters: int) -> Any:
    raw = {
        "data": {"format": "mosaic-streaming", **data},
        "training": {"global_batch_size": gbs, "train_iters": iters},
    }
    return config_from_dict(raw, base_dir=root, source=None)


def test_derived_defaults_match_the_library(tmp_path: Path):
    """num_canonical_nodes (per shuffle_algo) and shuffle_block_size left unset: the library's
    resolved values (its state_dict's num_canonical_nodes) and its whole order over two ranks."""
    write_mds(tmp_path / "c4" / "train", _rows("c4", 203, 0), [60, 60, 83])
    for algo, ncn in (("py1e", 1), ("py1s", 64)):
        dataset = {"local": str(tmp_path / "c4"), "split": "train", "batch_size": 5,
                   "shuffle": True, "shuffle_algo": algo}  # fmt: skip
        spec = {"streams": [], "dataset": dataset, "num_workers": 1, "drop_last": False,
                "epochs": 2, "state_after_epochs": 2}  # fmt: skip
        per_rank = run_oracle(spec, tmp_path / f"oracle-{algo}", ranks_per_node=2)
        assert per_rank[0]["state"]["num_canonical_nodes"] == ncn
        expected = _expected(per_rank, 5)
        data = {k: v for k, v in dataset.items()}
        data["ranks_per_node"], data["num_workers"] = 2, 1
        replayer = open_replayer(_config(tmp_path, data, 10, expected[-1][0]))
        assert replayer.plan.num_canonical_nodes == ncn
        assert replayer.plan.shuffle_block_size == max(4_000_000 // ncn, 1 << 18)
        assert _uids(replayer, expected[-1][0], {"c4": 0}) == expected


ABBREVS = ["4k", "4K", " 2.5m ", "1b", "3t", "0.1k", "1e3k", "1e3", "12", "-4k", "abc", "4kb",
           "", "k", "1.5", "０k", 4000, 4000.7, "7 k"]  # fmt: skip


def test_number_abbreviations_parse_as_the_library_parses_them(tmp_path: Path):
    library = run_library_functions([{"fn": "abbrev", "value": v} for v in ABBREVS], tmp_path)
    for value, want in zip(ABBREVS, library, strict=True):
        try:
            got: dict[str, Any] = {"value": number_abbrev_to_int(value)}
        except ValueError:
            got = {"error": "ValueError"}
        assert got == want, value
    assert library[0] == {"value": 4000}


def test_epoch_size_string_in_the_config(tmp_path: Path):
    write_mds(tmp_path / "web", _rows("web", 50, 0), [20, 30])
    data = {"streams": [{"local": "web", "proportion": 1.0}], "batch_size": 5}
    for given, want in (("4k", 4000), ("0.2K", 200), (300, 300), ("0k", None), (0, None)):
        config = _config(tmp_path, {**data, "epoch_size": given}, 5, 10)
        assert config.data.epoch_size == want
    for bad, text in (("4x", "unsupported value/suffix '4x'"), ("-1k", "cannot be negative")):
        with pytest.raises(ForensicsError, match=text):
            _config(tmp_path, {**data, "epoch_size": bad}, 5, 10)


def test_llm_foundry_dataset_section_replays_the_library(tmp_path: Path):
    """An llm-foundry train_loader.dataset (local + remote + split, download and cache knobs,
    tokenization fields, streams as a mapping) replays what the real StreamingDataset built
    from the same keywords yields; the fields without effect on the order are listed."""
    root = tmp_path / "data"
    write_mds(root / "web" / "train", _rows("web", 157, 0), [40, 40, 77])
    write_mds(root / "code" / "train", _rows("code", 90, 1000), [30, 60])
    knobs = {"split": "train", "epoch_size": "0.3k", "shuffle": True, "shuffle_seed": 17,
             "predownload": 8, "cache_limit": "10mb", "download_retry": 3,
             "download_timeout": 30, "keep_zip": True, "allow_unsafe_types": True,
             "num_canonical_nodes": 2, "batch_size": 4}  # fmt: skip
    streams = {
        "web": {"local": str(root / "web"), "remote": str(tmp_path / "remote" / "web"),
                "proportion": 0.6},
        "code": {"local": str(root / "code"), "remote": str(tmp_path / "remote" / "code"),
                 "proportion": 0.4},
    }  # fmt: skip
    spec = {"streams": [{**s, "split": "train"} for s in streams.values()],
            "dataset": knobs, "num_workers": 2, "drop_last": True, "epochs": 2}  # fmt: skip
    expected = _expected(run_oracle(spec, tmp_path / "oracle", ranks_per_node=2), 4)
    llm_foundry = {**knobs, "streams": streams, "max_seq_len": 2048, "eos_token_id": 0,
                   "token_encoding_type": "int32", "ranks_per_node": 2, "num_workers": 2,
                   "drop_last": True}  # fmt: skip
    config = _config(tmp_path, llm_foundry, 8, expected[-1][0])
    assert [s.display_name for s in config.data.streams] == ["web", "code"]
    assert config.data.streams[0].local == root / "web" / "train"
    assert config.data.epoch_size == 300
    ignored = set(config.data.ignored_fields)
    assert ignored >= {"remote", "predownload", "cache_limit", "max_seq_len", "keep_zip"}
    assert ignored <= set(IGNORED_FIELDS)
    replayer = open_replayer(config)
    assert _uids(replayer, expected[-1][0], {"web": 0, "code": 1000}) == expected
    (note,) = replayer.notes
    assert note.startswith("data: remote, download_retry, download_timeout, keep_zip, predownload")


def test_fields_that_would_change_the_order_are_refused(tmp_path: Path):
    write_mds(tmp_path / "web", _rows("web", 50, 0), [20, 30])
    base = {"local": "web", "batch_size": 5}
    for extra, text in (
        ({"stream_name": "custom"}, "stream_name / stream_config: only streaming's own Stream"),
        ({"stream_config": {"proportion": 2}}, "stream_name / stream_config"),
        ({"seq_parallel_replication": 2}, "seq_parallel_replication > 1"),
        ({"streams": [{"local": "web"}]}, "give either streams or the dataset's own local"),
        ({"replication": 3, "ranks_per_node": 2}, "replication 3 does not divide the 2 ranks"),
    ):
        with pytest.raises(ForensicsError) as err:
            _config(tmp_path, {**base, **extra}, 5, 10)
        assert text in str(err.value) and "\n" not in str(err.value)


CODECS = ["zstd", "zstd:7", "gz", "bz2", "br", "snappy"]


def test_compressed_shards_written_by_mdswriter(tmp_path: Path):
    """Streams written by the library's MDSWriter(compression=...) in every codec it has,
    present only compressed: the replay reads them (decompressing in memory, writing nothing)
    and yields what the real StreamingDataset yields from a copy of the same folders."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    cases, offsets = [], {}
    for k, codec in enumerate(CODECS):
        name = codec.replace(":", "-")
        rows = _rows(name, 40 + 7 * k, 1000 * k)
        offsets[name] = 1000 * k
        cases.append({"fn": "write", "out": str(ours / name), "rows": rows,
                      "columns": {"text": "str", "uid": "int"}, "compression": codec,
                      "size_limit": 600})  # fmt: skip
    assert run_library_functions(cases, tmp_path / "write") == [{}] * len(CODECS)
    shutil.copytree(ours, theirs)
    names = list(offsets)
    index = json.loads((ours / "zstd-7" / "index.json").read_text())
    assert len(index["shards"]) > 1 and index["shards"][0]["compression"] == "zstd:7"
    assert not list(ours.rglob("*.mds"))  # only the compressed files are there
    dataset = {"shuffle": True, "batch_size": 4, "shuffle_block_size": 30}
    spec = {"streams": [{"local": str(theirs / n)} for n in names], "dataset": dataset,
            "num_workers": 0, "drop_last": False, "epochs": 1}  # fmt: skip
    expected = _expected(run_oracle(spec, tmp_path / "oracle", ranks_per_node=1), 4)
    data = {"streams": [{"local": str(ours / n)} for n in names], **dataset}
    replayer = open_replayer(_config(tmp_path, data, 4, expected[-1][0]))
    assert _uids(replayer, expected[-1][0], offsets) == expected
    table = replayer.replay(1, expected[-1][0], text=True)
    texts = table.select("text", "dataset", "doc_id").rows()
    assert all(t == f"{d} document {i}" for t, d, i in texts)
    assert not list(ours.rglob("*.mds"))


def test_unknown_compression_is_refused(tmp_path: Path):
    write_mds(tmp_path / "web", _rows("web", 50, 0), [20, 30])
    index_path = tmp_path / "web" / "index.json"
    index = json.loads(index_path.read_text())
    shard = tmp_path / "web" / "shard.00000.mds"
    shard.rename(tmp_path / "web" / "shard.00000.mds.lz4")
    index["shards"][0] |= {"compression": "lz4", "zip_data": {
        "basename": "shard.00000.mds.lz4", "bytes": index["shards"][0]["raw_data"]["bytes"],
        "hashes": {}}}  # fmt: skip
    index_path.write_text(json.dumps(index))
    config = _config(tmp_path, {"local": "web", "batch_size": 5}, 5, 10)
    with pytest.raises(ForensicsError) as err:
        open_replayer(config)
    assert "shard.00000.mds.lz4: compression 'lz4' is not one streaming 0.13 writes" in str(
        err.value
    )


def _zstd_only(folder: Path) -> Path:
    """A one-shard stream kept only as shard.00000.mds.zstd (compressed with the zstd package
    streaming uses), its index.json saying so as MDSWriter's does."""
    import zstd

    write_mds(folder, _rows("web", 30, 0), [30])
    index = json.loads((folder / "index.json").read_text())
    raw = folder / "shard.00000.mds"
    packed = zstd.compress(raw.read_bytes(), 3)
    (folder / "shard.00000.mds.zstd").write_bytes(packed)
    raw.unlink()
    zip_data = {"basename": "shard.00000.mds.zstd", "bytes": len(packed), "hashes": {}}
    index["shards"][0] |= {"compression": "zstd", "zip_data": zip_data}
    (folder / "index.json").write_text(json.dumps(index))
    return folder / "index.json"


def test_compressed_shard_of_another_size_is_refused(tmp_path: Path):
    index_path = _zstd_only(tmp_path / "web")
    config = _config(tmp_path, {"local": "web", "batch_size": 5}, 5, 6)
    assert open_replayer(config).replay(1, 6, text=True)["text"][0].startswith("web document")
    index = json.loads(index_path.read_text())
    index["shards"][0]["raw_data"]["bytes"] += 1
    index_path.write_text(json.dumps(index))
    with pytest.raises(ForensicsError) as err:
        open_replayer(config).replay(1, 6, text=True)
    assert "shard.00000.mds.zstd: decompresses to" in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_codec_library_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import sys

    _zstd_only(tmp_path / "web")
    monkeypatch.setitem(sys.modules, "zstd", None)  # `import zstd` now fails
    with pytest.raises(ForensicsError) as err:
        open_replayer(_config(tmp_path, {"local": "web", "batch_size": 5}, 5, 6))
    assert "needs the zstd package (pip install zstd)" in str(err.value)
