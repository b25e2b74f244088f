"""The statistics every cluster gets, source or embedding, computed for all groups at once.

Why one function for both kinds: a crawl batch and an embedding cluster answer the same two
questions (is it over-represented in the window compared with the baseline? are its documents
flagged far more often than the data around them?), and the verdict rule must read the same
numbers for both, or the ranking across kinds means nothing.

"The data around them" has two estimates, and each is tested: the rest of the window (the same
iterations, so the same blend) and the baseline (the data before the spike). The verdict rule
reads the first, and the second where the rest of the window is itself dirty (a burst filling
most of the window: the rest of a burst group is the burst's other groups).

Shares are over *documents*: one row per distinct document consumed in the window (or the
baseline), however many samples touched it. A document repeated in many samples is one unit of
evidence about its source, not many.

All inputs are 1-D integer arrays with one entry per group (a group = one value of one facet, or
one embedding cluster); totals are scalars.
"""

from __future__ import annotations

import numpy as np

# A score at or above FLAG_THRESHOLD marks a document as flagged: the scorer's contract, defined
# once in forensics/score/table.py (named here too, as cluster/source.py imports it from here).
from forensics.score import FLAG_THRESHOLD as FLAG_THRESHOLD

# Pseudo-documents that pull a small group's flagged rate towards the rest of the window, so that
# 2 flagged documents out of 2 do not outrank 700 out of 1,000.
SHRINK_DOCS = 20.0
# -log10(corrected p) at which the over-representation evidence counts in full.
FULL_EVIDENCE_LOG10P = 20.0
# The smallest p-value we report (float64 underflows below this).
P_FLOOR = 1e-300

SUSPICION_FORMULA = (
    "suspicion = excess x (0.5 + 0.5 x evidence), where excess = max(0, shrunk flagged rate - "
    "flagged rate of the rest of the window), the shrunk rate = (flagged + 20 x rest rate) / "
    "(docs + 20), and evidence = min(1, -log10(corrected enrichment p) / 20) when the group is "
    "over-represented (0 otherwise). A dirty group that is not over-represented scores half its "
    "excess; an over-represented dirty group scores up to its full excess."
)


def holm(p: np.ndarray) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values (step-down, monotone), for all groups tested together.

    Holm controls the family-wise error like Bonferroni but is uniformly more powerful; both
    correct for the number of groups, which matters when a facet like `domain` has thousands.
    """
    p = np.asarray(p, dtype=np.float64)
    m = p.size
    if m == 0:
        return p.copy()
    order = np.argsort(p, kind="stable")
    scaled = p[order] * (m - np.arange(m))
    adjusted_sorted = np.minimum(1.0, np.maximum.accumulate(scaled))
    out = np.empty_like(p)
    out[order] = adjusted_sorted
    return out


def enrichment_p(
    window_docs: np.ndarray, baseline_docs: np.ndarray, n_window: int, n_baseline: int
):
    """One-sided exact (Fisher / hypergeometric) test: is a group over-represented in the window?

    The 2x2 table per group is [[a, n_window - a], [c, n_baseline - c]]; under the null the a
    window documents of the group are a hypergeometric draw of n_window from the pooled
    n_window + n_baseline documents, of which a + c belong to the group. p = P(X >= a), the same
    as scipy.stats.fisher_exact(alternative="greater"), vectorised over all groups.
    """
    from scipy.stats import hypergeom

    a = np.asarray(window_docs, dtype=np.int64)
    c = np.asarray(baseline_docs, dtype=np.int64)
    return hypergeom.sf(a - 1, n_window + n_baseline, a + c, n_window)


def flagged_p(flagged: np.ndarray, docs: np.ndarray, n_window: int, n_flagged_window: int):
    """One-sided exact test that a group's documents are flagged more often than the window's.

    Under the null a group of `docs` documents is a random draw from the window, which holds
    `n_flagged_window` flagged documents out of `n_window`; p = P(X >= flagged).
    """
    from scipy.stats import hypergeom

    f = np.asarray(flagged, dtype=np.int64)
    d = np.asarray(docs, dtype=np.int64)
    return hypergeom.sf(f - 1, n_window, n_flagged_window, d)


def baseline_flagged_p(
    flagged: np.ndarray, docs: np.ndarray, n_baseline: int, n_flagged_baseline: int
) -> np.ndarray:
    """One-sided exact (Fisher) test that a group's documents are flagged more often than the
    baseline's documents.

    The 2x2 table per group is [[flagged, docs - flagged], [fb, n_baseline - fb]] with fb =
    `n_flagged_baseline`; with its margins fixed the group's flagged count is a hypergeometric
    draw of `docs` from the pooled docs + n_baseline documents, of which flagged + fb are
    flagged. p = P(X >= flagged), scipy.stats.fisher_exact(alternative="greater") vectorised.
    """
    from scipy.stats import hypergeom

    f = np.asarray(flagged, dtype=np.int64)
    d = np.asarray(docs, dtype=np.int64)
    return hypergeom.sf(f - 1, d + n_baseline, f + n_flagged_baseline, d)


def _against_baseline(
    f: np.ndarray, a: np.ndarray, n_baseline: int, n_flagged_baseline: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """The baseline's flagged rate and each group's Holm-corrected p-value against it (NaN and 1
    where the baseline's flagged count is not known)."""
    if n_flagged_baseline is None:
        return np.full(a.shape, np.nan), np.ones(a.shape)
    rate = np.full(a.shape, min(1.0, n_flagged_baseline / max(n_baseline, 1)))
    raw = baseline_flagged_p(f, a, n_baseline, int(n_flagged_baseline))
    return rate, np.maximum(holm(raw), P_FLOOR)


def group_statistics(
    docs: np.ndarray,
    flagged: np.ndarray,
    garbage: np.ndarray,
    spam: np.ndarray,
    baseline_docs: np.ndarray,
    n_window: int,
    n_baseline: int,
    n_flagged_window: int,
    enrichment_raw_p: np.ndarray | None = None,
    n_flagged_baseline: int | None = None,
) -> dict[str, np.ndarray]:
    """Shares, enrichment, corrected p-values, flagged rates and suspicion for every group.

    docs, flagged, garbage, spam: per group, its window documents, how many are flagged (garbage
    or spam score >= 0.5), how many garbage-flagged, how many spam-flagged. baseline_docs: per
    group, its baseline documents. The p-values are Holm-corrected over all groups passed in one
    call, so pass every group that was tested (all facets together).

    enrichment = window share / baseline share with half a document added to each count
    ((a + 0.5) / (n_window + 1)) / ((c + 0.5) / (n_baseline + 1)), finite even for a group that
    is new in the window (c = 0); `new_in_window` says so explicitly. `enrichment_raw_p`
    replaces the exact test's uncorrected p-values (embedding clusters, whose counts are
    estimates from a sample, pass a design-based test); the Holm correction still applies.

    `n_flagged_baseline`: the baseline's flagged documents. Each group's flagged count is then
    also tested against the baseline's rate (`baseline_flag_p_value`, Holm-corrected over the
    groups like `flag_p_value`); without it that test is not made (p = 1, rate NaN).
    """
    a = np.asarray(docs, dtype=np.float64)
    c = np.asarray(baseline_docs, dtype=np.float64)
    f = np.asarray(flagged, dtype=np.float64)
    g = np.asarray(garbage, dtype=np.float64)
    s = np.asarray(spam, dtype=np.float64)
    nw, nb = max(int(n_window), 1), max(int(n_baseline), 1)

    window_share = a / nw
    baseline_share = c / nb
    enrichment = ((a + 0.5) / (nw + 1)) / ((c + 0.5) / (nb + 1))
    new_in_window = (c == 0) & (a > 0)

    with np.errstate(invalid="ignore", divide="ignore"):
        flagged_rate = np.where(a > 0, f / np.maximum(a, 1), 0.0)
        garbage_rate = np.where(a > 0, g / np.maximum(a, 1), 0.0)
        spam_rate = np.where(a > 0, s / np.maximum(a, 1), 0.0)
        rest = nw - a
        rest_rate = np.where(rest > 0, (n_flagged_window - f) / np.maximum(rest, 1), 0.0)
    rest_rate = np.clip(rest_rate, 0.0, 1.0)

    raw = enrichment_p(a, c, nw, nb) if enrichment_raw_p is None else enrichment_raw_p
    p_value = np.maximum(holm(raw), P_FLOOR)
    flag_p_value = np.maximum(holm(flagged_p(f, a, nw, n_flagged_window)), P_FLOOR)
    baseline_rate, baseline_flag_p = _against_baseline(f, a, int(n_baseline), n_flagged_baseline)

    shrunk = (f + SHRINK_DOCS * rest_rate) / (a + SHRINK_DOCS)
    excess = np.maximum(0.0, shrunk - rest_rate)
    evidence = np.where(
        enrichment > 1.0, np.minimum(1.0, -np.log10(p_value) / FULL_EVIDENCE_LOG10P), 0.0
    )
    suspicion = excess * (0.5 + 0.5 * evidence)

    return {
        "window_share": window_share,
        "baseline_share": baseline_share,
        "enrichment": enrichment,
        "p_value": p_value,
        "flagged_rate": flagged_rate,
        "garbage_rate": garbage_rate,
        "spam_rate": spam_rate,
        "rest_flagged_rate": rest_rate,
        "flag_p_value": flag_p_value,
        "baseline_flagged_rate": baseline_rate,
        "baseline_flag_p_value": baseline_flag_p,
        "suspicion": suspicion,
        "new_in_window": new_in_window,
    }


def stratified_share_p(
    window_share: np.ndarray,
    window_var: np.ndarray,
    baseline_share: np.ndarray,
    baseline_var: np.ndarray,
    n_window: int,
    n_baseline: int,
) -> np.ndarray:
    """One-sided p that a group's window share exceeds its baseline share, from estimates.

    For groups whose counts are estimated from a stratified sample (embedding clusters): the
    shares are the weighted estimates and *_var their sampling variances; the binomial variance
    p(1 - p) / N of each full window is added, as the exact test has it for counted groups. A
    normal approximation: z = (share_w - share_b) / sqrt(total variance).
    """
    from scipy.stats import norm

    pw, pb = np.asarray(window_share, float), np.asarray(baseline_share, float)
    var = (
        np.asarray(window_var, float)
        + np.asarray(baseline_var, float)
        + pw * (1 - pw) / max(n_window, 1)
        + pb * (1 - pb) / max(n_baseline, 1)
    )
    # A floor of one document's worth of variance keeps a fully counted, tiny difference sane.
    var = np.maximum(var, 1.0 / max(n_window, 1) ** 2)
    return norm.sf((pw - pb) / np.sqrt(var))
