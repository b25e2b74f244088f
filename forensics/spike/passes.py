"""Passes 2 and 3 of `forensics spike`: evidence from a sample, then every document of what is
named.

Pass 1, the census (forensics.spike.doc_census), counts every group over every sample from the
index. Pass 2 decodes and scores a seeded sample of each group's documents
(forensics.cluster.sample: `sample_docs` per group, coordinated across groups by permanent
random numbers) and judges every source group on the census's exact counts and the sample's
estimated flagged rate, with its 95% interval. Pass 3 decodes and scores every document of the
groups that verdict names (culprits, suspects, groups named with `--culprit`) and of the groups
whose interval crosses the dirty line, then judges again; until nothing new is named. A named
group's figures, and so the block list, are then exact. Both passes run in parts on the chosen
engine (forensics.spike.parts), each part named by its documents, so a rerun scores nothing
twice.

When the sample is already every document (a small window: every group at most `sample_docs`
documents) there is nothing to estimate: `evidence_passes` returns None and the spike takes
the exhaustive path, whose figures are all exact.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from forensics.cluster.positions import positions_in
from forensics.cluster.presence import PresenceMemo
from forensics.cluster.sample import CONFIDENCE, SampleDesign
from forensics.cluster.source import DEFAULT_FACETS, cluster_sources, unjudged_groups
from forensics.cluster.texts import ScoredTexts
from forensics.cluster.verdict import culprit_docs, reachable_floor_expr
from forensics.pipeline import module_version
from forensics.spike.doc_census import census_path, census_stage, choose_sample, coded
from forensics.spike.options import Engine
from forensics.spike.parts import (
    keys_digest,
    part_columns,
    plan_named_parts,
    run_parts,
    score_columns,
)
from forensics.spike.repeats import REPEATS_SCHEMA, repeats_stage
from forensics.spike.rule_members import cluster_causes
from forensics.spike.run_context import SpikeRun
from forensics.spike.stages import fit_verdicts
from forensics.spike.tokcheck import check_tokenizer
from forensics.spike.token_signal import (
    STATS_SCHEMA,
    reference_unigrams_file,
    token_reference,
    token_stage,
)

MAX_PASSES = 10  # rounds of pass 3; each adds the documents of newly named groups
FACETS_DIFFER = (
    "every document was scored: this data family's replay table does not carry the facets its "
    "decoded documents do, so the groups could not be counted from the index alone"
)


@dataclass
class Evidence:
    """The sides' documents (every document, scores where scored), the design, the scored
    set's name (the cluster cache's key), and what was scored."""

    window_docs: pl.DataFrame
    baseline_docs: pl.DataFrame
    design: SampleDesign
    scored_key: str
    sampled: int  # distinct documents in the evidence pass's sample
    scored: int  # distinct documents scored in all (sample and named groups)
    distinct: int  # distinct documents of window and baseline
    named: list[str]  # the source groups scored whole in pass 3
    # what `rule_datasets_whole` continues from: the parts scored
    items: list[dict[str, Any]] | None = None
    unjudged: int = 0  # fine groups left out of the verdicts (cluster_sources)
    figures: pl.DataFrame | None = None  # the scored documents' FIGURE_COLUMNS (`scored_figures`)
    texts: ScoredTexts | None = None  # the scored documents' texts, read by key (not in the sides)


def evidence_passes(
    run: SpikeRun,
    replay: pl.LazyFrame,
    rows: pl.DataFrame,
    sample_docs: int,
    culprits: tuple[str, ...] | None,
    engine: Engine,
) -> Evidence | None:
    """Passes 1 to 3 (module docstring); None when the sample is every document (or the
    census cannot stand for the documents: `census_agrees`). `culprits`: the groups named by
    hand (`--culprit`), scored whole; `rows`: the window's replay rows
    (forensics.spike.stages.window_rows)."""
    design = SampleDesign(sample_docs)
    census_file = census_path(run.cache, run.key)
    chosen = choose_sample(census_stage(replay, census_file, run.clock, run.hits, run.progress),
                           sample_docs)  # fmt: skip
    todo = chosen.filter(pl.col("_chosen")).select("dataset", "doc_id")
    reference = token_reference(chosen.select("side", "dataset", "doc_id"))
    todo = pl.concat([todo, reference]).unique().sort("dataset", "doc_id")
    sides = narrow_sides(chosen)
    del chosen  # its rows are the sides'
    distinct = distinct_documents(sides)
    if todo.height >= distinct:
        return None
    sampled = todo.height
    check_tokenizer(run.replayer, todo, run.config.tokenizer)
    named_by_hand = set(culprits or ())
    items: list[dict[str, Any]] = []
    scored_set = todo.head(0)
    notes_before = len(run.notes)
    named: list[str] = []
    presence = PresenceMemo()  # the groups judged each round are the same: their presence once
    last: tuple[pl.DataFrame, pl.DataFrame] | None = None  # the last round's sides
    for round_number in range(MAX_PASSES + 1):
        last = None  # rebuilt below with more documents scored: not held while scoring
        label = "sample" if round_number == 0 else "exhaustive"
        scored_set = pl.concat([scored_set, todo]).sort("dataset", "doc_id")
        scored, key = score_set(run, replay, todo, scored_set, items, label, engine)
        if round_number == 0 and not census_agrees(sides, scored):
            del run.notes[notes_before:]  # the exhaustive path says its own
            run.notes.append(FACETS_DIFFER)
            return None
        window_docs, baseline_docs = sampled_sides(sides, scored)
        figures = scored_figures(scored)
        del scored  # its rows are in the sides now
        with run.clock.stage("verdicts", f"pass {round_number + 2}: source groups", spinner=True):
            ranked = source_verdicts(run, window_docs, baseline_docs, rows, design, presence)
        todo, names = named_documents(ranked, window_docs, named_by_hand)
        last = window_docs, baseline_docs
        del window_docs, baseline_docs, ranked
        named = sorted(set(named) | set(names))
        if todo.height == 0:
            break
    else:
        run.notes.append(
            f"pass 3 stopped after {MAX_PASSES} rounds with {todo.height:,} documents of newly "
            "named groups unscored: their flagged rates are estimates (--exhaustive scores all)"
        )
    unique_notes(run.notes, notes_before)
    assert last is not None  # the loop ran at least once
    window_docs, baseline_docs = last
    return Evidence(window_docs, baseline_docs, design, key, sampled, scored_set.height,
                    distinct, named, items, unjudged_groups(window_docs, design),
                    figures, ScoredTexts.from_items(items))  # fmt: skip


def rule_datasets_whole(
    run: SpikeRun,
    replay: pl.LazyFrame,
    evidence: Evidence,
    ranked: pl.DataFrame,
    culprits: tuple[str, ...] | None,
    engine: Engine,
) -> Evidence:
    """Every window document of the datasets where a blamed embedding cluster's document rule
    takes its culprit documents from (forensics.spike.rule_members), scored: that rule's block
    list is then exact. The clusters stand as judged; only the scores are added."""
    todo = rule_documents_unscored(ranked, evidence.window_docs, culprits)
    if todo.height == 0 or evidence.items is None:
        return evidence
    scored_set = pl.concat([scored_rows_keys(evidence.window_docs), scored_rows_keys(
        evidence.baseline_docs), todo]).unique().sort("dataset", "doc_id")  # fmt: skip
    scored, _ = score_set(run, replay, todo, scored_set, evidence.items, "exhaustive", engine)
    sides = census_columns(evidence.window_docs), census_columns(evidence.baseline_docs)
    window_docs, baseline_docs = sampled_sides(sides, scored)
    return replace(evidence, window_docs=window_docs, baseline_docs=baseline_docs,
                   figures=scored_figures(scored), texts=ScoredTexts.from_items(evidence.items),
                   scored=scored_set.height,
                   unjudged=unjudged_groups(window_docs, evidence.design))  # fmt: skip


def rule_documents_unscored(
    ranked: pl.DataFrame, window_docs: pl.DataFrame, culprits: tuple[str, ...] | None
) -> pl.DataFrame:
    """(dataset, doc_id) of the unscored window documents of each dataset a blamed embedding
    cluster's document rule reaches into (forensics.spike.rule_members.cluster_causes)."""
    empty = window_docs.head(0).select("dataset", "doc_id")
    only = list(culprits) if culprits else None
    seen = culprit_docs(ranked, window_docs, only=only)
    if not seen.height or "garbage_rule" not in window_docs.columns:
        return empty
    datasets = cluster_causes(ranked, seen, window_docs)["dataset"].unique()
    unscored = pl.col("dataset").is_in(datasets.implode()) & ~pl.col("_scored")
    return window_docs.filter(unscored).select("dataset", "doc_id").sort("dataset", "doc_id")


def scored_rows_keys(docs: pl.DataFrame) -> pl.DataFrame:
    """(dataset, doc_id) of a sampled side's scored documents."""
    return docs.filter(pl.col("_scored")).select("dataset", "doc_id")


def score_set(
    run: SpikeRun,
    replay: pl.LazyFrame,
    new: pl.DataFrame,
    scored_set: pl.DataFrame,
    items: list[dict[str, Any]],
    label: str,
    engine: Engine,
) -> tuple[pl.DataFrame, str]:
    """Decode and score `new` in parts (added to `items`), then the whole scored set's table
    (the cross-document template signal recomputed over it, the repeated n-gram and token
    rules applied) and its name."""
    # kept between passes and runs (each part named by its documents), apart from the
    # exhaustive path's parts-<key>-<v>/, which is merged and removed
    folder = run.cache / f"evidence-{run.key}-{module_version('forensics.score')}"
    fresh = plan_named_parts(new, folder)
    unigrams = reference_unigrams_file(run, replay)
    for item in fresh if unigrams else []:
        item["unigrams"], item["tokens"] = str(unigrams), item["out"].replace("/part-", "/tokraw-")
    for item in fresh if run.replayer.document_token_ids else []:
        item["repeats"] = item["out"].replace("/part-", "/ngrams-")
    run.hits.setdefault(label, all(Path(i["out"]).is_file() for i in fresh))
    what = f"{new.height:,} documents on {engine}"
    with run.clock.stage(label, what):
        run_parts(run.config, fresh, engine.name, engine.workers, engine.address, engine.progress,
                  run.replayer, f"{label}: decode+score")  # fmt: skip
    items.extend(fresh)
    key = keys_digest(scored_set)
    with run.clock.stage("score", f"{scored_set.height:,} scored documents", spinner=True):
        scored = merged_scores(items)
    repeats = [Path(i["repeats"]) for i in items if "repeats" in i]
    scored = repeats_stage(run, scored_set, scored, key=key, computed=repeats)
    computed = [Path(i["tokens"]) for i in items if "tokens" in i]
    return token_stage(run, replay, scored_set, scored, key=key, computed=computed), key


def merged_scores(items: list[dict[str, Any]]) -> pl.DataFrame:
    """The scored documents of every part in `items` (the template clusters computed across
    all of them: forensics.spike.parts.score_columns), without their texts (`ScoredTexts`
    reads those from the parts where they are shown)."""
    files = [str(i["out"]) for i in items]
    scores = score_columns(files)
    return pl.concat([part_columns(files, {"text"}), scores], how="horizontal")


def census_agrees(sides: tuple[pl.DataFrame, pl.DataFrame], scored: pl.DataFrame) -> bool:
    """Whether the census (from the replay table; `narrow_sides`) gives the scored documents
    the facets, and the facet values, their decoded rows give: the groups the clusters count
    must be the same either way, or the passes would judge other groups than --exhaustive
    does. Each scored document's census row is found by binary search (`positions_in`): the
    window's, else the baseline's."""
    facets = [c for c in DEFAULT_FACETS if c in scored.columns and c != "dataset"]
    if any(f not in sides[0].columns for f in facets):
        return False
    if not facets:
        return True
    keys = scored.select("dataset", "doc_id")
    in_window = positions_in(sides[0], keys)
    in_baseline = np.where(in_window < 0, positions_in(sides[1], keys), -1)
    found = []
    for side, positions in zip(sides, (in_window, in_baseline), strict=True):
        rows = np.flatnonzero(positions >= 0)
        picked = side.select(facets)[positions[rows]]  # the rows first, then their strings
        row = pl.Series("_row", rows, dtype=pl.Int64)
        found.append(picked.with_columns(pl.col(facets).cast(pl.Utf8), row))
    census = pl.concat(found).rename({f: f"{f}_census" for f in facets})
    theirs = scored.select(pl.col(facets).cast(pl.Utf8)).with_row_index("_row")
    joined = theirs.with_columns(pl.col("_row").cast(pl.Int64)).join(census, on="_row", how="left")
    same = [pl.col(f).eq_missing(pl.col(f"{f}_census")).all() for f in facets]
    return all(joined.select(same).row(0))


CENSUS_COLUMNS = ("dataset", "doc_id", "_u")  # and the facets: what a side holds unscored
# Per-document figures the rules have already read (their verdicts are in the scores and
# reasons): only documents.parquet shows them, so a sampled side does not carry a null of each
# for every unscored document; documents.parquet joins them back (`scored_figures`).
FIGURE_COLUMNS = tuple(
    c for c in (*REPEATS_SCHEMA, *STATS_SCHEMA) if c not in ("dataset", "doc_id", "token_reason")
)


def scored_figures(scored: pl.DataFrame) -> pl.DataFrame | None:
    """dataset, doc_id and the FIGURE_COLUMNS of the scored documents (None: it has none)."""
    figures = [c for c in scored.columns if c in FIGURE_COLUMNS]
    return scored.select("dataset", "doc_id", *figures) if figures else None


def narrow_sides(chosen: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The window's and the baseline's documents of the census with its sample (`chosen`:
    forensics.spike.doc_census.choose_sample): its `census_columns`, in the census's order,
    (dataset, doc_id) within a side, as the exhaustive path sorts a side."""

    def side(name: str) -> pl.DataFrame:
        return chosen.filter(pl.col("side") == name).drop("side", "_chosen")

    return side("window"), side("baseline")


def distinct_documents(sides: tuple[pl.DataFrame, pl.DataFrame]) -> int:
    """Distinct (dataset, doc_id) of both sides (`narrow_sides`): the window's and the
    baseline's documents, less the window's found in the baseline (`positions_in`: a binary
    search, no hash table of every document)."""
    window, baseline = sides
    both = int(np.count_nonzero(positions_in(baseline, window.select("dataset", "doc_id")) >= 0))
    return window.height + baseline.height - both


def census_columns(docs: pl.DataFrame) -> pl.DataFrame:
    """A sampled side's columns from the census (keys, `_u`, facets), without its scores."""
    facets = [c for c in DEFAULT_FACETS if c in docs.columns and c != "dataset"]
    return docs.select(c for c in docs.columns if c in CENSUS_COLUMNS or c in facets)


def sampled_sides(
    sides: tuple[pl.DataFrame, pl.DataFrame], scored: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Every document of each side (`narrow_sides`: the census's rows, facets and `_u`, in
    order) with its scores where it was scored (`_scored`). The scores are found by their keys
    (`positions_in`) and put beside the side's columns, which are shared, never copied. The
    scores' string columns but a text are categoricals (forensics.spike.doc_census.coded):
    most documents are not scored, and a null string costs a row 16 bytes, a null code 4. The
    texts are not among the scores (`merged_scores`): forensics.cluster.texts reads them."""
    keys = ["dataset", "doc_id"]
    facets = [c for c in sides[0].columns if c not in CENSUS_COLUMNS]
    values = scored.drop(*[c for c in [*facets, *FIGURE_COLUMNS] if c in scored.columns])
    values = coded(values, [c for c, t in values.schema.items() if t == pl.Utf8
                            and c not in ("dataset", "text")])  # fmt: skip
    wide = values.drop(keys)

    def side(rows: pl.DataFrame) -> pl.DataFrame:
        positions = positions_in(rows, values.select(keys))
        at = np.full(rows.height, -1, dtype=np.int64)  # each row's scores' row, -1: unscored
        hit = positions >= 0
        at[positions[hit]] = np.flatnonzero(hit)
        taken = pl.Series("_at", pa.array(at, mask=at < 0))
        found = wide.select(pl.all().gather(taken))
        return rows.hstack(found.get_columns()).with_columns(taken.is_not_null().alias("_scored"))

    return side(sides[0]), side(sides[1])


def source_verdicts(
    run: SpikeRun,
    window_docs: pl.DataFrame,
    baseline_docs: pl.DataFrame,
    rows: pl.DataFrame,
    design: SampleDesign,
    presence: PresenceMemo | None = None,
) -> pl.DataFrame:
    """The source groups' verdicts as the final clusters will give them (source verdicts do not
    depend on the embedding clusters: those are tested, nested and explained on their own)."""
    clusters = cluster_sources(window_docs, baseline_docs, design=design)
    return fit_verdicts(clusters, window_docs, baseline_docs, rows, run.plan, run.config,
                        run.replayer, [], presence)  # fmt: skip


def named_groups(ranked: pl.DataFrame, culprits: set[str]) -> pl.DataFrame:
    """The source groups pass 3 scores whole: culprits, suspects, `--culprit`'s, and those not
    scored whole whose flagged-rate interval reaches the lowest flagged rate at which either
    half of the dirty rule could hold (`reachable_floor_expr`)."""
    if ranked.height == 0:
        return ranked
    sampled = pl.col("scored_docs") < pl.col("docs")
    undecided = sampled & (pl.col("flagged_high") >= reachable_floor_expr())
    return ranked.filter(
        (pl.col("kind") == "source")
        & (pl.col("verdict").is_in(["culprit", "suspect"]) | pl.col("id").is_in(culprits)
           | undecided)
    )  # fmt: skip


def named_documents(
    ranked: pl.DataFrame, window_docs: pl.DataFrame, culprits: set[str]
) -> tuple[pl.DataFrame, list[str]]:
    """(dataset, doc_id) of the named groups' window documents not scored yet, and the named
    groups' ids."""
    named = named_groups(ranked, culprits)
    rows = named.select(pl.col("members").explode().drop_nulls().unique())["members"]
    unscored = (
        window_docs.select("dataset", "doc_id", "_scored")
        .gather(rows.cast(pl.Int64).to_numpy())
        .filter(~pl.col("_scored"))
        .select("dataset", "doc_id")
        .unique()
        .sort("dataset", "doc_id")
    )
    return unscored, named["id"].to_list()


def unique_notes(notes: list[str], start: int) -> None:
    """The notes added since `start` once each (a stage that ran every round says it once)."""
    seen: set[str] = set()
    fresh = [n for n in notes[start:] if not (n in seen or seen.add(n))]
    del notes[start:]
    notes.extend(fresh)


def figures_note(evidence: Evidence) -> str:
    """What the report's figures rest on, for the report's notes and skip.json."""
    return (
        "figures: document counts, shares, newness, density and exposure are exact (the census "
        f"of every sample, from the index); {evidence.scored:,} of the {evidence.distinct:,} "
        f"distinct documents were decoded and scored (a seeded sample of up to "
        f"{evidence.design.sample_docs:,} per group, {evidence.sampled:,} documents, then "
        f"every document of the {len(evidence.named)} groups named); flagged rates are exact "
        "for groups scored whole and otherwise estimates from their sample, with "
        f"{CONFIDENCE:.0%} Clopper-Pearson intervals; the block list is exact; embedding "
        "clusters are estimated from the scored documents"
        + unjudged_text(evidence.unjudged)
        + ". --exhaustive scores every document"
    )


def unjudged_text(count: int) -> str:
    """The figures note's clause on the fine groups left out of the verdicts, or ""."""
    if not count:
        return ""
    return (
        f"; {count:,} {'group' if count == 1 else 'groups'} of the fine facets (domain, file) "
        "neither over-represented in the census nor scored whole were not judged"
    )
