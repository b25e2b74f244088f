"""A checked manifest mapped from our cache (dataloaders.megatron.manifest_map): the rows and
figures of the manifest itself, checked once per version of the files, rewritten when gone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest import random_documents

from dataloaders.megatron.indexed import IndexedDataset, write_indexed_dataset
from dataloaders.megatron.manifest_map import mapped_manifest, stretches
from dataloaders.megatron.manifests import load_manifest
from forensics.errors import ForensicsError


@pytest.fixture
def dataset(tmp_path: Path) -> tuple[IndexedDataset, Path]:
    rng = np.random.default_rng(3)
    docs = random_documents(rng, 500, 1000)
    ds = IndexedDataset(write_indexed_dataset(tmp_path / "web", docs, np.uint16))
    sources = rng.choice(["crawl-a", "crawl-b", None], size=500).tolist()
    manifest = pl.DataFrame({
        "doc_id": np.arange(500),
        "source": sources,
        "url": [f"https://example.org/{i}" for i in range(500)],
        "doc_tokens": ds.document_token_counts(),
    })  # fmt: skip
    path = tmp_path / "web.manifest.parquet"
    manifest.write_parquet(path)
    return ds, path


def _load(ds: IndexedDataset, path: Path):
    return lambda: load_manifest(path, ds.num_documents, ds.document_token_counts())


def test_mapped_rows_are_the_manifests(dataset) -> None:
    ds, path = dataset
    table = load_manifest(path, ds.num_documents, ds.document_token_counts())
    mapped = mapped_manifest(path, ds.idx_file, _load(ds, path))
    assert mapped.columns == table.columns and mapped.height == table.height
    rows = np.array([499, 0, 17, 17, 250])
    assert mapped.gather(["source", "url"], rows).equals(table[rows].select("source", "url"))
    assert mapped.column("source").equals(table["source"])


def test_a_gather_read_in_stretches_keeps_the_rows_order(dataset, monkeypatch) -> None:
    """A gather whose rows span more of the file than STRETCH_BYTES reads the map in ascending
    stretches (its pages handed back between them) and gives the rows in the order asked,
    repeats included."""
    import dataloaders.megatron.manifest_map as manifest_map

    ds, path = dataset
    table = load_manifest(path, ds.num_documents, ds.document_token_counts())
    mapped = mapped_manifest(path, ds.idx_file, _load(ds, path))
    monkeypatch.setattr(manifest_map, "STRETCH_BYTES", 4096)
    assert mapped.mapped and 1 < mapped.span_rows < 100
    rows = np.random.default_rng(5).integers(0, 500, size=300)
    assert mapped.gather(["source", "url"], rows).equals(table[rows].select("source", "url"))
    assert mapped.gather(["source"], rows[:0]).height == 0


def test_stretches_are_cut_by_the_span_of_their_rows() -> None:
    """Each stretch's row ids lie within one `span` of rows, however many rows that is: a
    dense gather reads few long stretches, a scattered one many short ones."""
    ordered = np.sort(np.random.default_rng(3).integers(0, 10_000, size=2_000))
    bounds = stretches(ordered, 1_000)
    assert bounds[0][0] == 0 and bounds[-1][1] == len(ordered)
    assert all(a == b for (_, a), (b, _) in zip(bounds, bounds[1:], strict=False))
    assert len(bounds) == 10
    for start, end in bounds:
        assert ordered[start] // 1_000 == ordered[end - 1] // 1_000
    assert stretches(np.arange(50), 1_000) == [(0, 50)]
    assert stretches(np.array([], dtype=np.int64), 1_000) == [(0, 0)]


def test_a_gather_over_many_record_batches_takes_from_each(tmp_path, monkeypatch) -> None:
    """A copy written as several record batches (polars' IPC writer cuts a big frame so) is
    gathered batch by batch (a take on a column of several chunks would concatenate them
    first: a copy of the whole column): the rows asked for, in order, repeats included; so
    too from a frame held in memory in two chunks; a doc id past the end is refused."""
    import pyarrow.ipc as ipc

    import dataloaders.megatron.manifest_map as manifest_map
    from dataloaders.megatron.manifest_map import MappedManifest

    n = 1_000
    frame = pl.DataFrame({"source": [f"s{i % 7}" for i in range(n)],
                          "url": [f"https://x/{i}" for i in range(n)]})  # fmt: skip
    path = tmp_path / "m.arrow"
    table = frame.to_arrow(compat_level=pl.CompatLevel.oldest())
    with ipc.new_file(path, table.schema) as writer:
        writer.write_table(table, max_chunksize=64)
    mapped = MappedManifest(path)
    assert mapped.mapped and len(mapped._batches) == 16
    monkeypatch.setattr(manifest_map, "STRETCH_BYTES", 2_048)
    rows = np.random.default_rng(7).integers(0, n, size=400)
    rows[:3] = [n - 1, 0, 63]
    for manifest in (mapped, MappedManifest(table=pl.concat([frame[:500], frame[500:]],
                                                            rechunk=False))):  # fmt: skip
        assert manifest.gather(["url", "source"], rows).equals(frame[rows].select("url", "source"))
        assert manifest.gather(["url"], rows[:0]).schema == {"url": pl.Utf8}
        with pytest.raises(IndexError, match="1,000 rows"):
            manifest.gather(["url"], np.array([n]))


def test_sums_by_a_column_are_a_group_by(dataset) -> None:
    ds, path = dataset
    mapped = mapped_manifest(path, ds.idx_file, _load(ds, path))
    values = np.arange(500, dtype=np.float64) * 3
    expected = (
        pl.DataFrame({"key": mapped.column("source"), "v": values})
        .group_by("key")
        .agg(pl.col("v").sum().alias("total"))
    )
    got = mapped.sums_by("source", values)
    joined = expected.join(got, on="key", how="full", nulls_equal=True)
    assert joined.height == expected.height == got.height == 3  # two crawls and "none"
    assert (joined["total"] == joined["total_right"]).all()


def test_checked_once_rewritten_when_removed(dataset, monkeypatch, tmp_path) -> None:
    """Opened again, the stamped copy is mapped without checking the manifest again; a copy
    removed from the cache (its stamp left) is checked and written again."""
    import dataloaders.megatron.checked as checked

    ds, path = dataset
    calls = []

    def load() -> pl.DataFrame:
        calls.append(1)
        return _load(ds, path)()

    monkeypatch.setattr(checked, "clock", lambda: 1e12)  # the files have settled: stamped
    mapped_manifest(path, ds.idx_file, load)
    mapped_manifest(path, ds.idx_file, load)
    assert len(calls) == 1
    copies = list((tmp_path / "forensics-cache").glob("megatron/manifests/*.arrow"))
    assert len(copies) == 1
    copies[0].unlink()
    again = mapped_manifest(path, ds.idx_file, load)
    assert len(calls) == 2 and copies[0].is_file() and again.height == 500


def test_a_bad_manifest_is_still_refused(dataset) -> None:
    ds, path = dataset
    pl.read_parquet(path).head(499).write_parquet(path)
    with pytest.raises(ForensicsError, match="499 rows but the dataset has 500"):
        mapped_manifest(path, ds.idx_file, _load(ds, path))


def test_an_unwritable_cache_holds_the_manifest_in_memory(dataset, monkeypatch, tmp_path) -> None:
    """A cache that cannot take the copy (here a path under a plain file, which not even root
    can write) is no error: the checked manifest is held in memory, as it was before."""
    ds, path = dataset
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("FORENSICS_CACHE", str(blocker / "cache"))
    mapped = mapped_manifest(path, ds.idx_file, _load(ds, path))
    table = load_manifest(path, ds.num_documents, ds.document_token_counts())
    assert mapped.gather(["url"], np.array([3, 1])).equals(table[[3, 1]].select("url"))
    assert mapped.sums_by("source", np.ones(500)).height == 3
