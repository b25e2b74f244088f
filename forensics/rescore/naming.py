"""The model names what the scorers miss: a source group whose documents' loss under the
pre-spike checkpoint stands out against the baseline's is a culprit on the model's evidence.

The scorers know mojibake, template spam and repeated n-grams; the token rule knows ids that
decode to nonsense. Dirt none of them was built for (text shuffled into word salad, a dump in a
format nobody wrote a rule for) still makes the model's loss jump. The same two halves as the
data side's verdict (cluster/verdict.py) are asked:

- what changed: the group is over-represented against the baseline (or the blend), new in the
  window, or bursting before the spike (presence density >= baseline_fit.BURST_FACTOR); a group
  as common before the spike as in it is never blamed for its loss, however high;
- what could hurt: its documents' per-segment loss z (against the baseline samples scored by
  the same checkpoint) is higher than its *own* baseline documents' where the baseline holds
  at least MIN_OWN of them (code, another language: a clean group with a naturally higher loss
  is compared with itself, one-sided Welch t-test), else than the baseline's (z_mean x sqrt(n),
  one-sided); the effect (mean z above the reference) >= MODEL_EFFECT, and the p-value
  Holm-corrected over every source group tested < P_MAX.

Only source groups are named: a source is what the block list and a rebuild can remove, and
its baseline share is known; embedding clusters keep the model's numbers beside them.
Nesting, as the data side does it: a named group inside a data-side culprit is explained by it;
of two named groups one inside the other, the outer gives way when what lies outside the inner
one does not surprise the model (the crawl batch, not its dataset), else the inner gives way
(the crawl batch, not each of its domains).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl

from forensics.cluster.source import MISSING_KEY
from forensics.cluster.stats import holm
from forensics.rescore.stage import Rescore

MODEL_EFFECT = 0.5  # mean loss z above the reference (baseline sds) a named group must reach
OUTSIDE_P = 0.01  # a group's documents outside a named group inside it surprise the model
P_MAX = 1e-3  # Holm-corrected, as the data side's tests
MIN_UNITS = 5  # scored window segments a group needs to be named
MIN_OWN = 5  # baseline segments of its own a group needs to be compared with itself
BURST_FACTOR = 2.0  # the presence density that counts as a burst (cluster.baseline_fit)

NAMING_RULE = (
    "named by the model: a source group new in the window, over-represented or bursting before "
    "the spike, whose documents' mean segment loss z is at least "
    f"{MODEL_EFFECT:g} above its own baseline documents' (Welch t-test; where the baseline holds "
    f"at least {MIN_OWN} of them, so a group with a naturally higher loss is compared with "
    "itself) or else above the baseline's (z x sqrt(n)), one-sided, Holm-corrected over the "
    f"groups tested, p < {P_MAX:g}, with at least {MIN_UNITS} scored segments"
)


def scored_units(result: Rescore) -> pl.DataFrame:
    """side, row, dataset, doc_id, loss_z: one row per scored document segment (the sample's z
    where only per-sample losses are known)."""
    sides = result.samples.select("row", "side", pl.col("loss_z").alias("_sample_z"))
    segs = result.segments.select("row", "dataset", "doc_id", *(
        ["loss_z"] if result.token_level else []))  # fmt: skip
    units = segs.join(sides, on="row")
    if result.token_level:
        units = units.drop("_sample_z")
    else:
        units = units.unique(["row", "dataset", "doc_id"]).rename({"_sample_z": "loss_z"})
    return units.filter(pl.col("loss_z").is_not_null() & pl.col("loss_z").is_finite())


def _baseline_members(
    row: dict[str, Any], baseline_units: pl.DataFrame, baseline_docs: pl.DataFrame | None
) -> np.ndarray:
    """The baseline units of a source group (its facet's value among the baseline documents)."""
    facet = row.get("facet")
    if baseline_docs is None or facet is None or facet not in baseline_docs.columns:
        return np.empty(0)
    key = row.get("key")
    value = pl.col(facet).cast(pl.Utf8)
    match = value.is_null() if key == MISSING_KEY else value == str(key)
    docs = baseline_docs.filter(match).select("dataset", "doc_id")
    return baseline_units.join(docs, on=["dataset", "doc_id"])["loss_z"].to_numpy()


def _test(window: np.ndarray, own: np.ndarray) -> tuple[float, float, str]:
    """(effect, one-sided p, reference): against its own baseline units when it has enough,
    else against the baseline (whose z's have mean 0, sd 1 by construction)."""
    if own.size >= MIN_OWN:
        from scipy.stats import ttest_ind

        effect = float(window.mean() - own.mean())
        if window.size < 2:
            return effect, 1.0, "own"
        p = float(ttest_ind(window, own, equal_var=False, alternative="greater").pvalue)
        return effect, (1.0 if math.isnan(p) else p), "own"
    effect = float(window.mean())
    return effect, 0.5 * math.erfc(effect * math.sqrt(window.size) / math.sqrt(2)), "baseline"


def changed_expr(columns: list[str]) -> pl.Expr:
    """Over-represented, new in the window, or bursting (whichever columns the table has)."""
    expr = pl.col("over_represented") | pl.col("new_in_window")
    if "density" in columns:
        expr = expr | (pl.col("density").fill_null(0.0) >= BURST_FACTOR)
    return expr.fill_null(False)


def model_naming(
    ranked: pl.DataFrame,
    window_docs: pl.DataFrame,
    result: Rescore,
    baseline_docs: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """`ranked` plus model_effect, model_reference ("own" / "baseline"), model_holm_p and
    named_by ("data" for the data side's culprits, "model" for the groups the model names);
    a named group's verdict becomes culprit (label "culprit")."""
    units = scored_units(result)
    window_units = units.filter(pl.col("side") == "window")
    baseline_units = units.filter(pl.col("side") == "baseline")
    docs = window_docs.select("dataset", "doc_id").with_row_index("_m")
    n = ranked.height
    effect, p_raw, ref = [math.nan] * n, [1.0] * n, [None] * n
    tested: list[int] = []
    rows = list(ranked.iter_rows(named=True))
    for i, row in enumerate(rows):
        if row.get("kind") != "source" or not row.get("members"):
            continue
        members = docs.filter(pl.col("_m").is_in(row["members"])).select("dataset", "doc_id")
        mine = window_units.join(members, on=["dataset", "doc_id"])["loss_z"].to_numpy()
        if mine.size < MIN_UNITS:
            continue
        own = _baseline_members(row, baseline_units, baseline_docs)
        effect[i], p_raw[i], ref[i] = _test(mine, own)
        tested.append(i)
    p_holm = [1.0] * n
    if tested:
        for i, p in zip(tested, holm(np.array([p_raw[i] for i in tested])), strict=True):
            p_holm[i] = float(p)
    out = ranked.with_columns(
        pl.Series("model_effect", effect, dtype=pl.Float64).fill_nan(None),
        pl.Series("model_reference", ref, dtype=pl.Utf8),
        pl.Series("model_holm_p", p_holm, dtype=pl.Float64),
    )
    surprised = (pl.col("model_effect") >= MODEL_EFFECT) & (pl.col("model_holm_p") < P_MAX)
    candidate = surprised.fill_null(False) & changed_expr(out.columns) & (
        pl.col("verdict") != "culprit")  # fmt: skip
    flags = out.select(candidate).to_series().to_list()
    explained = _nest(out, flags, window_units, docs)
    named = [f and e is None for f, e in zip(flags, explained, strict=True)]
    old_explained = out["explained_by"].to_list()
    return out.with_columns(
        pl.Series("named_by", [
            "model" if nm else ("data" if v == "culprit" else None)
            for nm, v in zip(named, out["verdict"].to_list(), strict=True)
        ], dtype=pl.Utf8),
        pl.Series("verdict", [
            "culprit" if nm else v for nm, v in zip(named, out["verdict"].to_list(), strict=True)
        ], dtype=pl.Utf8),
        pl.Series("explained_by", [
            e if e is not None else o for e, o in zip(explained, old_explained, strict=True)
        ], dtype=pl.Utf8),
    ).with_columns(_label(out, named))  # fmt: skip


def _label(table: pl.DataFrame, named: list[bool]) -> pl.Series:
    """The report's label: "culprit" for a named group, else what it was."""
    old = table["label"].to_list() if "label" in table.columns else table["verdict"].to_list()
    return pl.Series("label", ["culprit" if nm else o for nm, o in zip(named, old, strict=True)],
                     dtype=pl.Utf8)  # fmt: skip


def _nest(
    table: pl.DataFrame, flags: list[bool], window_units: pl.DataFrame, docs: pl.DataFrame
) -> list[str | None]:
    """explained_by for the model's candidates (module docstring), None where one stands.

    A candidate the data side already explains, or half of whose documents lie in a data-side
    culprit, is explained by it. Of two candidates B inside A, pairs taken from the smallest A
    up, A gives way to B when A's documents outside B (and outside the data-side culprits)
    do not surprise the model; otherwise B gives way to A."""
    ids = table["id"].to_list()
    members = [set(m or []) for m in table["members"].to_list()]
    verdicts, kinds = table["verdict"].to_list(), table["kind"].to_list()
    already = table["explained_by"].to_list()
    out: list[str | None] = [None] * len(ids)
    data_culprits = [j for j, v in enumerate(verdicts) if v == "culprit" and kinds[j] == "source"]
    blamed = set().union(*(members[j] for j in data_culprits)) if data_culprits else set()
    candidates = [i for i, f in enumerate(flags) if f]
    for i in candidates:
        out[i] = already[i]
        for j in data_culprits:
            if out[i] is None and len(members[i] & members[j]) >= 0.5 * len(members[i]):
                out[i] = ids[j]

    def outside_surprised(a: int, b: int) -> bool:
        rest = sorted(members[a] - members[b] - blamed)
        keys = docs.filter(pl.col("_m").is_in(rest)).select("dataset", "doc_id")
        z = window_units.join(keys, on=["dataset", "doc_id"])["loss_z"].to_numpy()
        if z.size < MIN_UNITS:
            return False
        effect, p, _ = _test(z, np.empty(0))
        return effect >= MODEL_EFFECT / 2 and p < OUTSIDE_P

    standing = [i for i in candidates if out[i] is None]
    pairs = sorted(
        ((a, b) for a in standing for b in standing if a != b and members[b] < members[a]),
        key=lambda ab: (len(members[ab[0]]), len(members[ab[1]])),
    )
    for a, b in pairs:
        if out[a] is not None or out[b] is not None:
            continue
        if outside_surprised(a, b):
            out[b] = ids[a]
        else:
            out[a] = ids[b]
    return out
