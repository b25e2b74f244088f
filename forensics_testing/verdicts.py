"""The passes' verdicts against `--exhaustive`'s, as the three-pass contract states it
(docs/commands/spike.md): every group the passes judge has the exhaustive verdict, every group
the exhaustive run does not call clean is judged, and the groups left out (fine facets' groups
neither over-represented in the census nor scored whole) are clean there and as many as the
figures note says."""

from __future__ import annotations

from typing import Any

import polars as pl

FINE = ("domain", "file")


def assert_same_judged_verdicts(
    ours: Any, reference: Any, columns: tuple[str, ...], source_only: bool = False
) -> None:
    """`ours` and `reference`: SpikeResults; `columns`: the cluster columns compared per id
    (the first must be `facet`, one of them `verdict`); `source_only`: embedding clusters
    (k-means over another sample of documents) not compared."""

    def rows(result: Any) -> dict[str, tuple]:
        ranked = result.report.clusters
        if source_only:
            ranked = ranked.filter(pl.col("kind") == "source")
        return {r[0]: r[1:] for r in ranked.select("id", *columns).rows()}

    mine, theirs = rows(ours), rows(reference)
    assert mine == {k: theirs[k] for k in mine}
    verdict = columns.index("verdict")
    left_out = {k: v for k, v in theirs.items() if k not in mine}
    assert all(v[0] in FINE and v[verdict] == "clean" for v in left_out.values()), left_out
    said = [n for n in ours.report.notes if n.startswith("figures:")]
    if left_out:
        assert f"; {len(left_out):,} groups of the fine facets (domain, file)" in said[0]
