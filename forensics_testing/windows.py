"""Generated windows with a known culprit, for tests, the benchmark and demos.

Why generated and not real: the property under test ("a dirty, over-represented crawl batch is
the top culprit; clean batches are clean; a clean window has no culprit") needs ground truth,
which no public training log comes with. The texts are built to exercise the real components:
clean documents are prose on a handful of topics (so the embedder finds topics), the dirty batch
mixes mojibake (real UTF-8 bytes decoded as cp1252) and slot-filled template spam, and the
scores imitate the scorer's contract (dirty documents flagged at `dirty_flag_rate`, clean ones at
the scorer's ~1% false-positive rate).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

TOPICS: dict[str, list[str]] = {
    "astronomy": "telescope galaxy orbit planet star nebula comet spectrum redshift luminosity "
    "observatory eclipse asteroid solar lunar cosmic radiation gravity supernova quasar".split(),
    "cooking": "recipe oven flour butter garlic onion simmer roast sauce pepper basil dough "
    "knead bake skillet broth vinegar caramelize whisk seasoning".split(),
    "finance": "market bond equity interest inflation dividend portfolio credit yield bank "
    "liquidity hedge currency deficit revenue earnings valuation audit asset pension".split(),
    "biology": "cell protein enzyme gene membrane mitochondria species evolution tissue neuron "
    "bacteria receptor genome mutation organism metabolism hormone pathway ribosome".split(),
    "software": "compiler function variable thread memory cache kernel database query server "
    "latency library interface module runtime debugger pointer allocation syntax".split(),
    "history": "empire dynasty treaty revolution monarch parliament colony archive battle "
    "chronicle medieval republic constitution reform migration settlement trade".split(),
}
GLUE = "the of and to in is that for with as on by this was are from which an be it".split()
ACCENTED = (
    "Le café de la Crème à Zürich servait un crème brûlée délicieux — « très naïf » dit-il; "
    "São Paulo, Kraków, Málaga: prix 5 €, “qualité” garantie, Straße, façade, über, año."
)
SPAM_SKELETON = (
    "Buy cheap {p} in {c} today! Best {p} deals in {c}. Click here for {p} discount {n}% off. "
    "Top rated {p} store {c}. Free shipping {p} {c}. Call now {p} {c} best price guaranteed."
)
PRODUCTS = "sneakers watches handbags phones laptops sunglasses perfume jackets tablets".split()
CITIES = "Austin Boston Denver Phoenix Seattle Dallas Miami Portland Chicago Atlanta".split()
HOSTILE = (
    "Totally normal page <script>alert(1)</script> \x1b[2J\x1b[31mRED\x1b[0m \x1b]0;pwned\x07 end"
)


@dataclass(frozen=True)
class GeneratedRun:
    """A generated window and baseline, with the truth about which batch is dirty."""

    window: pl.DataFrame  # one row per distinct window document (the document-table contract)
    baseline: pl.DataFrame  # same columns, the baseline window's documents
    replay: pl.DataFrame  # one row per (iteration, sample) touching a window document
    dirty_batch: str | None  # crawl_batch value of the dirty batch, None for a clean window
    clean_batches: list[str]


def _prose(rng: np.random.Generator, topic: str, n_words: int) -> str:
    words = TOPICS[topic]
    picks = rng.random(n_words) < 0.45
    topical = rng.choice(words, size=n_words)
    glue = rng.choice(GLUE, size=n_words)
    tokens = np.where(picks, topical, glue)
    return " ".join(tokens.tolist()).capitalize() + "."


def _mojibake(rng: np.random.Generator) -> str:
    broken = ACCENTED.encode("utf-8").decode("cp1252", errors="replace")
    return f"{broken} {_prose(rng, 'history', 40)} {broken}"


def _spam(rng: np.random.Generator) -> str:
    return SPAM_SKELETON.format(
        p=rng.choice(PRODUCTS), c=rng.choice(CITIES), n=int(rng.integers(10, 90))
    )


def _docs(
    rng: np.random.Generator,
    n: int,
    batches: list[tuple[str, str, float]],
    dirty_batch: str | None,
    dirty_flag_rate: float,
    false_positive_rate: float,
    first_doc_id: int,
    hostile: bool,
    words: int,
) -> pl.DataFrame:
    """`n` documents drawn from `batches` = [(dataset, crawl_batch, weight)], texts and scores."""
    weights = np.array([w for _, _, w in batches], dtype=np.float64)
    which = rng.choice(len(batches), size=n, p=weights / weights.sum())
    topics = list(TOPICS)
    datasets, crawl, text, gs, ss, gr, sr, domain = [], [], [], [], [], [], [], []
    for b in which.tolist():
        dataset, batch, _ = batches[b]
        datasets.append(dataset)
        crawl.append(batch)
        g = s = 0.0
        g_reason = s_reason = ""
        if batch == dirty_batch and rng.random() < dirty_flag_rate:
            if rng.random() < 0.55:
                text.append(_mojibake(rng))
                g, g_reason = float(rng.uniform(0.6, 1.0)), "mojibake: UTF-8 read as cp1252"
            else:
                text.append(_spam(rng))
                s, s_reason = float(rng.uniform(0.6, 1.0)), "template spam: shared skeleton"
            domain.append(f"spam{int(rng.integers(0, 40))}.example")
        else:
            topic = topics[(b + int(rng.integers(0, 3))) % len(topics)]
            text.append(_prose(rng, topic, words))
            domain.append(f"{topic}{int(rng.integers(0, 30))}.example.org")
            if rng.random() < false_positive_rate:
                if rng.random() < 0.5:
                    g, g_reason = float(rng.uniform(0.5, 0.7)), "mojibake: stray U+FFFD pair"
                else:
                    s, s_reason = float(rng.uniform(0.5, 0.7)), "repetition: top 2-gram 0.21"
            else:
                g, s = float(rng.uniform(0, 0.3)), float(rng.uniform(0, 0.3))
        gs.append(g)
        ss.append(s)
        gr.append(g_reason)
        sr.append(s_reason)
    if hostile and dirty_batch is not None:
        idx = next((i for i, c in enumerate(crawl) if c == dirty_batch), None)
        if idx is not None:
            text[idx] = HOSTILE
            gs[idx], gr[idx] = 1.0, "control characters: ESC <script>"
    ids = np.arange(first_doc_id, first_doc_id + n, dtype=np.int64)
    return pl.DataFrame(
        {
            "dataset": datasets,
            "doc_id": ids,
            "source": [f"{d}/{c.split('-')[0]}" for d, c in zip(datasets, crawl, strict=True)],
            "crawl_batch": crawl,
            "domain": domain,
            "file": [f"{d}/{c}.jsonl" for d, c in zip(datasets, crawl, strict=True)],
            "text": text,
            "garbage_score": gs,
            "spam_score": ss,
            "garbage_reason": gr,
            "spam_reason": sr,
            "samples": np.ones(n, dtype=np.int64),
        },
        schema_overrides={"doc_id": pl.Int64},
    )


def generate_run(
    n_window: int = 2000,
    n_baseline: int = 2000,
    *,
    dirty_share: float = 0.10,
    dirty_in_baseline_share: float = 0.0,
    dirty_flag_rate: float = 0.7,
    false_positive_rate: float = 0.01,
    n_clean_batches: int = 8,
    window: tuple[int, int] = (80935, 81234),
    switch_iteration: int | None = 81001,
    hostile: bool = False,
    words: int = 60,
    dirty_dataset: str = "web_v2",
    seed: int = 0,
) -> GeneratedRun:
    """A window where one crawl batch (`dirty_share` of it) is dirty, and its baseline.

    dirty_share=0 gives a clean window (no dirty batch at all). dirty_in_baseline_share > 0 puts
    the dirty batch in the baseline too, at that share (then it is over-represented, not new).
    `dirty_dataset` names the dataset holding the dirty batch (a clean one's name mixes it in).
    The replay table spreads each window document over one sample; documents of the dirty batch
    only appear from `switch_iteration` on (the mixture switch).
    """
    rng = np.random.default_rng(seed)
    datasets = ["web_v1", "books", "code", "wiki"]
    clean = [
        (datasets[i % len(datasets)], f"crawl-2026-{i + 1:02d}", 1.0 + (i % 3))
        for i in range(n_clean_batches)
    ]
    clean_names = [b for _, b, _ in clean]
    dirty = "crawl-2026-10-17" if dirty_share > 0 else None

    def batches(share: float) -> list[tuple[str, str, float]]:
        if dirty is None or share <= 0:
            return clean
        total = sum(w for _, _, w in clean)
        return [*clean, (dirty_dataset, dirty, total * share / (1 - share))]

    win = _docs(
        rng, n_window, batches(dirty_share), dirty, dirty_flag_rate, false_positive_rate,
        first_doc_id=1_000_000, hostile=hostile, words=words,
    )  # fmt: skip
    base = _docs(
        rng, n_baseline, batches(dirty_in_baseline_share), dirty, dirty_flag_rate,
        false_positive_rate, first_doc_id=0, hostile=False, words=words,
    )  # fmt: skip
    replay = _replay(rng, win, window, switch_iteration, dirty)
    return GeneratedRun(win, base, replay, dirty, clean_names)


def _replay(
    rng: np.random.Generator,
    win: pl.DataFrame,
    window: tuple[int, int],
    switch_iteration: int | None,
    dirty: str | None,
) -> pl.DataFrame:
    """(iteration, sample_index, dataset, doc_id, crawl_batch): each document in one sample."""
    first, last = window
    is_dirty = (win["crawl_batch"] == dirty).to_numpy() if dirty else np.zeros(win.height, bool)
    start = first if switch_iteration is None else max(first, min(switch_iteration, last))
    iteration = np.where(
        is_dirty,
        rng.integers(start, last + 1, size=win.height),
        rng.integers(first, last + 1, size=win.height),
    )
    order = np.lexsort((rng.random(win.height), iteration))
    table = pl.DataFrame(
        {
            "iteration": iteration[order].astype(np.int64),
            "dataset": win["dataset"].to_numpy()[order],
            "doc_id": win["doc_id"].to_numpy()[order],
            "crawl_batch": win["crawl_batch"].to_numpy()[order],
        }
    )
    return table.with_row_index("sample_index").with_columns(pl.col("sample_index").cast(pl.Int64))


def split_burst(run: GeneratedRun, parts: int) -> tuple[GeneratedRun, list[str]]:
    """The dirty batch's documents dealt round-robin over `parts` new datasets (each its own
    source, crawl batch and file), in the window and in the baseline alike: one burst that no
    single source value holds, the way a burst of one kind of text falls into several embedding
    clusters by topic. Returns the run and the new crawl batch names. The replay table is not
    relabelled (tests of the cluster table read the window and the baseline only)."""
    if run.dirty_batch is None:
        raise ValueError("split_burst: the run has no dirty batch")
    dirty = pl.col("crawl_batch") == run.dirty_batch
    part = (pl.col("_i") % parts).cast(pl.Utf8)
    names = {
        "dataset": "burst_" + part,
        "source": "burst_" + part + "/burst",
        "crawl_batch": "burst-" + part,
        "file": "burst_" + part + "/burst.jsonl",
    }

    def deal(table: pl.DataFrame) -> pl.DataFrame:
        return (
            table.with_row_index("_i")
            .with_columns(
                *[pl.when(dirty).then(v).otherwise(pl.col(k)).alias(k) for k, v in names.items()]
            )
            .drop("_i")
        )

    split = GeneratedRun(
        deal(run.window), deal(run.baseline), run.replay, run.dirty_batch, run.clean_batches
    )
    return split, [f"burst-{k}" for k in range(parts)]
