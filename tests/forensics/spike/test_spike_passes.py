"""The three passes of `forensics spike` (census, evidence from a sample, every document of
what is named) against `--exhaustive` (every document decoded and scored): the same verdicts,
culprit groups and block list, on the suite's small run, with a sample small enough that most
groups are estimated; the passes in parts on both engines; and the sample's statistics."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from forensics.cluster.sample import (
    SampleDesign,
    evidence_text,
    flagged_interval,
    own_sample,
    permanent_random,
)
from forensics.errors import ForensicsError
from forensics.spike import SpikeOptions, run_spike
from forensics_testing.demo.build import build_run
from forensics_testing.small_run import SMALL, WINDOW
from forensics_testing.verdicts import assert_same_judged_verdicts

# The small run's story (a mixture switch, a dirty crawl batch) with groups of up to a few
# hundred documents: big enough that a sample of SAMPLE settles its clean groups (nothing of
# 20 flagged: an interval below the dirty floor), so some stay estimated on any corpus.
PASSES_RUN = replace(SMALL, name="passes", global_batch_size=32, docs_prose=400, docs_code=300,
                     docs_per_crawl=60)  # fmt: skip
SAMPLE = 20  # documents per group


def _options(**kw) -> SpikeOptions:
    return SpikeOptions(step=PASSES_RUN.spike_iteration, window=WINDOW, embed_cap=0,
                        progress=False, **kw)  # fmt: skip


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """PASSES_RUN analysed --exhaustive and by the passes with SAMPLE documents per group."""
    root = tmp_path_factory.mktemp("passes")
    build_run(root / "run", PASSES_RUN, progress=False)
    config = root / "run" / "forensics.yaml"
    exhaustive = run_spike(config, root / "exhaustive", _options(exhaustive=True))
    passes = run_spike(config, root / "passes", _options(sample_docs=SAMPLE))
    return {"config": config, "exhaustive": exhaustive, "passes": passes, "root": root}


def _same_outcome(ours, reference) -> None:
    assert_same_judged_verdicts(
        ours, reference, ("facet", "key", "verdict", "label", "explained_by")
    )
    assert ours.skip.culprit_clusters == reference.skip.culprit_clusters
    assert ours.skip.documents == reference.skip.documents  # the block list
    assert ours.skip.to_dict()["documents_flagged"] == reference.skip.to_dict()["documents_flagged"]
    assert ours.skip.iterations == reference.skip.iterations
    assert ours.rollback.iteration == reference.rollback.iteration


def test_passes_give_the_exhaustive_verdicts_and_block_list(both: dict) -> None:
    passes, exhaustive = both["passes"], both["exhaustive"]
    assert exhaustive.skip.culprit_clusters, "the small run has a culprit to find"
    _same_outcome(passes, exhaustive)
    # the passes really sampled: fewer documents scored than drawn, groups estimated
    ranked = passes.report.clusters
    estimated = ranked.filter(pl.col("scored_docs") < pl.col("docs"))
    assert estimated.height > 0
    assert (estimated["scored_docs"] == SAMPLE).all()
    assert ((estimated["flagged_low"] <= estimated["flagged_rate"])
            & (estimated["flagged_rate"] <= estimated["flagged_high"])).all()  # fmt: skip
    assert "decode" not in passes.timings and {"census", "sample"} <= set(passes.timings)
    # the named groups are scored whole: their figures are exact, the same as exhaustive's
    reference = exhaustive.report.clusters
    for row in ranked.filter(pl.col("verdict") != "clean").iter_rows(named=True):
        assert row["scored_docs"] == row["docs"], row["id"]
        same = reference.filter(pl.col("id") == row["id"]).row(0, named=True)
        assert (row["docs"], row["flagged"]) == (same["docs"], same["flagged"])


def test_documents_parquet_holds_the_scored_documents_figures(both: dict) -> None:
    """The sides of the passes leave the rules' per-document figures (repeated n-grams, token
    statistics) out; documents.parquet joins them back: each scored window document's are the
    exhaustive run's, an unscored one's are null, and the file's strings are strings."""
    from forensics.spike.passes import FIGURE_COLUMNS

    ours = pl.read_parquet(both["passes"].out / "documents.parquet")
    theirs = pl.read_parquet(both["exhaustive"].out / "documents.parquet")
    figures = [c for c in FIGURE_COLUMNS if c in theirs.columns]
    assert figures, "the small run's family lists token ids: its figures are computed"
    assert set(figures) <= set(ours.columns)
    assert ours.schema["source"] == theirs.schema["source"] == pl.Utf8
    keys = ["dataset", "doc_id"]
    scored = ours.filter(pl.col("flagged").is_not_null()).select(*keys, *figures)
    assert 0 < scored.height < ours.height
    want = theirs.join(scored.select(keys), on=keys, how="semi").select(*keys, *figures)
    assert scored.sort(keys).equals(want.sort(keys))
    assert ours.filter(pl.col("flagged").is_null())[figures[0]].null_count() == (
        ours.height - scored.height
    )


def test_a_culprit_named_by_hand_is_scored_whole(both: dict, tmp_path: Path) -> None:
    """`--culprit` naming a group the sample only estimated: its every document is scored, so
    its block list is --exhaustive's (each run on a copy of its output, cache included)."""
    ranked = both["passes"].report.clusters
    chosen = ranked.filter((pl.col("scored_docs") < pl.col("docs")) & (pl.col("kind") == "source"))
    name = chosen["id"][0]
    for mode in ("passes", "exhaustive"):
        shutil.copytree(both["root"] / mode, tmp_path / mode, symlinks=True)
    config = both["config"]
    ours = run_spike(config, tmp_path / "passes", _options(sample_docs=SAMPLE, culprits=(name,),
                                                          force=True))  # fmt: skip
    reference = run_spike(config, tmp_path / "exhaustive",
                          _options(exhaustive=True, culprits=(name,), force=True))  # fmt: skip
    assert ours.skip.culprit_clusters == reference.skip.culprit_clusters == [name]
    assert ours.skip.documents == reference.skip.documents
    row = ours.report.clusters.filter(pl.col("id") == name).row(0, named=True)
    assert row["scored_docs"] == row["docs"]


def test_the_report_says_which_figures_are_exact(both: dict) -> None:
    passes_out = both["root"] / "passes"
    md = (passes_out / "report.md").read_text()
    culprit = (
        both["exhaustive"].report.clusters.filter(pl.col("verdict") == "culprit").row(0, named=True)
    )
    whole = f"exact: all {culprit['docs']} documents scored"
    assert "figures: document counts, shares, newness, density and exposure are exact" in md
    assert whole in md  # the culprit's flagged rate, scored whole
    assert f"% ({0}-" in md or "% (0-" in md  # an estimated rate with its interval
    assert "figures:" in (passes_out / "report.html").read_text()
    assert "**FIGURES** all exact except " in md  # the first screen's line, the terminal's too
    exhaustive_md = (both["root"] / "exhaustive" / "report.md").read_text()
    assert "figures:" not in exhaustive_md and whole in exhaustive_md
    docs = pl.read_parquet(next((passes_out / ".cache").glob("documents-*.parquet")))
    assert docs["flagged"].null_count() > 0, "an unscored document is neither flagged nor clean"
    assert "_u" not in docs.columns and "_scored" not in docs.columns


def test_a_sample_of_every_document_takes_the_exhaustive_path(both: dict, tmp_path: Path) -> None:
    """Every group at most --sample-docs documents: nothing to estimate, every figure exact."""
    result = run_spike(both["config"], tmp_path / "out", _options(sample_docs=100_000))
    assert "decode" in result.timings and "sample" not in result.timings
    assert not any(n.startswith("figures:") for n in result.notes)
    _same_outcome(result, both["exhaustive"])


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_passes_run_in_parts_on_both_engines(
    both: dict, engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request
) -> None:
    """The sample and the named groups decoded and scored in parts on a process pool and on a
    Ray head (127.0.0.1): the same scored documents and the same outcome as in this process."""
    import forensics.spike.parts as parts_module

    monkeypatch.setattr(parts_module, "PART_DOCUMENTS", 40)  # several parts per pass
    address = None
    if engine == "ray":
        address = request.getfixturevalue("ray_head")
        monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    out = tmp_path / engine
    options = _options(sample_docs=SAMPLE, engine=engine, workers=2, ray_address=address)
    result = run_spike(both["config"], out, options)
    _same_outcome(result, both["passes"])
    parts = list((out / ".cache").glob("evidence-*/part-*.parquet"))
    assert len(parts) > 2


def test_bad_sample_size_is_refused(both: dict, tmp_path: Path) -> None:
    with pytest.raises(ForensicsError, match="--sample-docs 0: must be >= 1"):
        run_spike(both["config"], tmp_path / "x", _options(sample_docs=0))
    assert not (tmp_path / "x").exists()


def test_sample_docs_with_exhaustive_is_refused(tmp_path: Path) -> None:
    from forensics_testing.small_run import cli

    done = cli("spike", "--step", "10", "--exhaustive", "--sample-docs", "50", "--out",
               str(tmp_path / "x"), cwd=tmp_path)  # fmt: skip
    assert done.returncode != 0
    assert "--sample-docs 50 with --exhaustive: every document is scored then" in done.stderr
    assert not (tmp_path / "x").exists()


def test_an_embedding_culprits_rule_dataset_is_scored_whole() -> None:
    """A blamed embedding cluster dirty by the repeated n-gram rule takes every window document
    that rule flags in its dataset (forensics.spike.rule_members): the dataset's unscored
    documents are scored before the blame, so that list is exact; another dataset is not."""
    from forensics.spike.passes import rule_documents_unscored

    rule = "repeated_ngram"
    window = pl.DataFrame({
        "dataset": ["a"] * 5 + ["b"] * 3,
        "doc_id": [0, 1, 2, 3, 4, 0, 1, 2],
        "garbage_score": [1.0, 1.0, 0.0, None, None, 0.0, None, None],
        "spam_score": [0.0, 0.0, 0.0, None, None, 0.0, None, None],
        "garbage_rule": [rule, rule, "", None, None, "", None, None],
        "_scored": [True, True, True, False, False, True, False, False],
    })  # fmt: skip
    ranked = pl.DataFrame({
        "id": ["e1", "s1"],
        "kind": ["embedding", "source"],
        "verdict": ["culprit", "clean"],
        "members": [[0, 1, 2], [5, 6, 7]],
    })  # fmt: skip
    todo = rule_documents_unscored(ranked, window, None)
    assert todo.rows() == [("a", 3), ("a", 4)]
    clean = ranked.with_columns(pl.lit("clean").alias("verdict"))
    assert rule_documents_unscored(clean, window, None).height == 0


def test_permanent_random_numbers_follow_the_document_not_the_row() -> None:
    docs = pl.DataFrame({"dataset": ["a", "a", "b", "b"], "doc_id": [1, 2, 1, 2]})
    u = permanent_random(docs).to_list()
    assert len(set(u)) == 4 and all(0 <= x < 1 for x in u)
    assert permanent_random(docs.reverse()).to_list() == u[::-1]
    assert permanent_random(docs.head(1)).to_list() == u[:1]


def test_permanent_random_numbers_are_fixed(monkeypatch) -> None:
    """The numbers are part of the design (the same sample on every run and machine): pinned,
    also when hashed a few rows at a time and from a categorical dataset column."""
    import forensics.cluster.sample as sample

    docs = pl.DataFrame({"dataset": ["web", "code", "web"], "doc_id": [0, 123456789, 0]})
    pinned = [0.42993125175054336, 0.3126836628693255, 0.42993125175054336]
    assert permanent_random(docs).to_list() == pinned
    monkeypatch.setattr(sample, "HASH_ROWS", 2)
    coded = docs.with_columns(pl.col("dataset").cast(pl.Categorical))
    assert permanent_random(coded).to_list() == pinned


def test_own_sample_is_the_groups_smallest_numbers() -> None:
    rng = np.random.default_rng(0)
    frame = pl.DataFrame({"g": rng.integers(0, 3, 500), "_u": rng.random(500)})
    picked = frame.filter(own_sample(frame, 20, pl.col("g")))
    assert picked.group_by("g").len()["len"].to_list() == [20, 20, 20]
    for (g,), part in picked.group_by(["g"]):
        rest = frame.filter((pl.col("g") == g) & ~pl.col("_u").is_in(part["_u"].implode()))
        assert part["_u"].max() < rest["_u"].min()


@pytest.mark.parametrize("sample_docs", [1, 3, 20, 1_000])
def test_own_sample_is_polars_ordinal_rank_in_each_group(sample_docs: int) -> None:
    """The numpy sample (candidates under a cutoff, then ranked) is polars' ordinal rank of
    `_u` within each group, at most `sample_docs`: over two keys (a categorical with missing
    values, a string), ties broken by row order, groups of one document, and numbers far from
    uniform (most of a group above its cutoff: the short groups ranked whole)."""
    rng = np.random.default_rng(11)
    n = 3_000
    domain = rng.choice(["a", "b", "c", None, *map(str, range(200))], n,
                        p=[0.3, 0.2, 0.2, 0.1, *[0.2 / 200] * 200])  # fmt: skip
    u = np.where(domain == "a", 0.999 + rng.random(n) * 1e-3, rng.random(n))  # "a": none low
    u[:40] = u[40:80]  # ties
    frame = pl.DataFrame({
        "side": pl.Series(rng.choice(["window", "baseline"], n)).cast(pl.Categorical),
        "domain": pl.Series(domain.tolist(), dtype=pl.Utf8),
        "_u": u,
    }).with_columns(pl.col("domain").cast(pl.Categorical))  # fmt: skip
    keys = (pl.col("side"), pl.col("domain"))
    expected = frame.select(
        (pl.col("_u").rank("ordinal").over(*keys) <= sample_docs).alias("_own")
    ).to_series()
    assert own_sample(frame, sample_docs, *keys).equals(expected)
    as_strings = frame.with_columns(pl.col("domain").cast(pl.Utf8))
    assert own_sample(as_strings, sample_docs, *keys).equals(expected)


def test_clopper_pearson_intervals() -> None:
    """scipy's exact interval: 120 of 120 flagged reads 97-100% (the issue's own example);
    0 of 30 reads 0-11.6% (the rule of three's exact form)."""
    low, high = flagged_interval(np.array([120, 0, 5]), np.array([120, 30, 0]))
    assert round(low[0], 4) == 0.9697 and high[0] == 1.0
    assert low[1] == 0.0 and round(high[1], 3) == 0.116
    assert (low[2], high[2]) == (0.0, 1.0)
    from scipy.stats import binomtest

    k, n = np.array([0, 1, 7, 60, 119, 120]), np.full(6, 120)
    lows, highs = flagged_interval(k, n)
    for i in range(6):  # the library's own interval, group by group
        ci = binomtest(int(k[i]), int(n[i])).proportion_ci(0.95, method="exact")
        assert abs(lows[i] - ci.low) < 1e-12 and abs(highs[i] - ci.high) < 1e-12
    row = {"docs": 31_000, "scored_docs": 120, "flagged_low": low[0], "flagged_high": high[0]}
    assert evidence_text(row) == "95% interval 97-100%, 120 of 31,000 documents scored"
    assert evidence_text({"docs": 17}) == "exact: all 17 documents scored"
    assert SampleDesign().sample_docs == 120


def test_the_sides_documents_read_from_the_census_are_the_replays(both: dict) -> None:
    """The passes read each side's documents (sides-<key>.parquet) from the census's file:
    the rows the replay table holds, each once, in (side, dataset, doc_id) order."""
    cache = both["root"] / "passes" / ".cache"
    (sides,) = cache.glob("sides-*.parquet")
    (replay,) = cache.glob("replay-*.parquet")
    assert list(cache.glob("census-*.parquet"))
    columns = ["side", "dataset", "doc_id"]
    expected = pl.read_parquet(replay).select(columns).unique().sort(columns)
    found = pl.read_parquet(sides)
    assert found.height > 0 and found.equals(expected)


def test_a_sampled_group_the_baseline_half_could_make_dirty_is_scored_whole() -> None:
    """A sampled group's interval (2-56%) below the window's floor (5 x an estimated 12% of the
    rest) but above the baseline's (20%): the dirty rule's baseline half could still hold, so
    the sample does not settle it and pass 3 scores it whole. Neither half reachable: settled.
    (polars 2.2's harvest of the small run made such a group, clean by its sample and suspect
    --exhaustive.)"""
    from forensics.spike.passes import named_groups

    def ranked(high: float, baseline: float | None) -> pl.DataFrame:
        return pl.DataFrame({
            "id": ["s3"], "kind": ["source"], "verdict": ["clean"], "docs": [71],
            "scored_docs": [10], "flagged_high": [high], "rest_flagged_rate": [0.1186],
            "baseline_flagged_rate": [baseline],
        }, schema_overrides={"baseline_flagged_rate": pl.Float64})  # fmt: skip

    assert named_groups(ranked(0.556, 0.0213), set())["id"].to_list() == ["s3"]
    assert named_groups(ranked(0.556, None), set()).height == 0  # baseline not tested
    assert named_groups(ranked(0.556, float("nan")), set()).height == 0
    assert named_groups(ranked(0.19, 0.0213), set()).height == 0  # below both floors
    assert named_groups(ranked(0.60, None), set())["id"].to_list() == ["s3"]  # window floor


def test_every_shown_text_is_the_exhaustive_runs(both: dict) -> None:
    """The sampled sides leave the texts in the scored parts (forensics.cluster.texts);
    documents.parquet and the examples read them back by key: each scored document's text is
    --exhaustive's, an unscored one's is null."""
    keys = ["dataset", "doc_id"]
    ours = pl.read_parquet(both["passes"].out / "documents.parquet")
    theirs = pl.read_parquet(both["exhaustive"].out / "documents.parquet")
    scored = ours.filter(pl.col("flagged").is_not_null()).select(*keys, "text")
    assert scored.height > 0 and scored["text"].null_count() == 0
    want = theirs.join(scored.select(keys), on=keys, how="semi").select(*keys, "text")
    assert scored.sort(keys).equals(want.sort(keys))
    assert ours.filter(pl.col("flagged").is_null())["text"].null_count() == (
        ours.height - scored.height
    )
    examples = {
        (e["cluster"], e["doc_id"]): e["excerpt"]
        for e in both["passes"].report.examples.iter_rows(named=True)
    }
    reference = {
        (e["cluster"], e["doc_id"]): e["excerpt"]
        for e in both["exhaustive"].report.examples.iter_rows(named=True)
    }
    assert examples and all(reference.get(k) == v for k, v in examples.items())
