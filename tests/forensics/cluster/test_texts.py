"""The scored documents' texts read back by key from the parts that scored them
(forensics.cluster.texts): each row's own text in the order asked, null where a document was
not scored, and a clear refusal when a part has gone from the cache."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from forensics.cluster.texts import ScoredTexts, with_texts
from forensics.errors import ForensicsError


def _part(folder: Path, name: str, rows: list[tuple[str, int, str]]) -> dict:
    """A part as forensics.spike.parts lays one out: its keys file and its scored rows."""
    keys = pl.DataFrame({"dataset": [r[0] for r in rows], "doc_id": [r[1] for r in rows]})
    keys.write_parquet(folder / f"keys-{name}.parquet")
    scored = keys.with_columns(pl.Series("text", [r[2] for r in rows]), pl.lit(0.0).alias("x"))
    scored.write_parquet(folder / f"part-{name}.parquet")
    return {
        "keys": str(folder / f"keys-{name}.parquet"),
        "out": str(folder / f"part-{name}.parquet"),
    }


@pytest.fixture
def store(tmp_path: Path) -> ScoredTexts:
    first = _part(
        tmp_path, "a", [("code", 3, "def f(): pass"), ("web", 7, "hello"), ("web", 9, "")]
    )
    second = _part(tmp_path, "b", [("code", 1, "import os"), ("web", 8, "Ã© mojibake")])
    return ScoredTexts.from_items([first, second])


def test_texts_are_found_by_key_in_the_order_asked(store: ScoredTexts) -> None:
    keys = pl.DataFrame({
        "dataset": ["web", "code", "web", "prose", "code", "web", "web"],
        "doc_id": [8, 3, 7, 7, 1, 9, 10],
    })  # fmt: skip
    got = store.texts(keys).to_list()
    assert got == ["Ã© mojibake", "def f(): pass", "hello", None, "import os", "", None]
    assert store.texts(keys.head(0)).to_list() == []


def test_with_texts_keeps_a_tables_own_texts(store: ScoredTexts) -> None:
    own = pl.DataFrame({"dataset": ["web"], "doc_id": [7], "text": ["its own"]})
    assert with_texts(own, store)["text"].to_list() == ["its own"]
    bare = pl.DataFrame({"dataset": ["web", "web"], "doc_id": [9, 7], "n": [1, 2]})
    added = with_texts(bare, store)
    assert added.columns == ["dataset", "doc_id", "n", "text"]
    assert added["text"].to_list() == ["", "hello"]
    assert with_texts(bare, None).columns == bare.columns  # nothing to read them from


def test_a_missing_part_is_refused_by_name(store: ScoredTexts) -> None:
    Path(store.parts[1]).unlink()
    keys = pl.DataFrame({"dataset": ["web"], "doc_id": [7]})
    assert store.texts(keys).to_list() == ["hello"]  # the other part is not read
    with pytest.raises(ForensicsError, match="part-b.parquet: a scored part is missing"):
        store.texts(pl.DataFrame({"dataset": ["code"], "doc_id": [1]}))
