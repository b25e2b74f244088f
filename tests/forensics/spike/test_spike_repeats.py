"""`forensics spike` flags documents by OLMo-core's repeated-n-gram rule on their token ids (the
rule `forensics scan` flags them by), and a blamed embedding cluster dirty by a document rule
takes every window document that rule flags in its dataset."""

from __future__ import annotations

import numpy as np
import polars as pl

from forensics.replay import open_replayer
from forensics.spike.repeats import REPEATS_RULE, document_repeats, flag_repeats
from forensics.spike.rule_members import rule_members
from forensics_testing.olmo_core_run import config_dict, write_config, write_documents


def _table_doc(rng: np.random.Generator) -> np.ndarray:
    """A legit table: a header, a short border (a 2-token cell rule x 6), rows of varying
    cells between pipe tokens (periodic in shape, never in content)."""
    pipe, rule = 900, [901, 902]
    header = [pipe, 30, pipe, 31, pipe, 32, pipe]
    border = [pipe, *rule * 6, pipe]
    rows = [[pipe, *rng.integers(40, 800, 3).tolist(), pipe, int(rng.integers(40, 800)), pipe]
            for _ in range(40)]  # fmt: skip
    return np.asarray(header + border + sum(rows, []), dtype=np.int64)


def test_spike_flags_a_repeated_ngram_document_on_its_token_ids(tmp_path) -> None:
    from dataloaders.run_config import load_config

    rng = np.random.default_rng(3)
    repeated = np.concatenate([rng.integers(2, 900, 17), np.tile([7, 8, 9], 40), [11, 12]])
    clean = rng.integers(2, 900, 300)
    docs = [clean, repeated, _table_doc(rng)]
    write_documents(tmp_path / "web.npy", docs)
    config = config_dict({"web": ["web.npy"]}, seq=64, ipb=2, seed=1, train_iters=3)
    replayer = open_replayer(load_config(write_config(tmp_path, config)))
    distinct = pl.DataFrame({"dataset": ["web"] * 3, "doc_id": [0, 1, 2]})
    for got, want in zip(replayer.document_tokens(distinct), docs, strict=True):
        assert got.tolist() == [*want.tolist(), 0]  # the document as the token file holds it
    found = document_repeats(replayer, distinct)
    assert found is not None
    assert found["ngram_times"].to_list()[1] == 40 and found["ngram_period"].to_list()[1] == 3
    assert max(found["ngram_times"].to_list()[0::2]) < 32  # clean text, a 6-cell border
    scored = distinct.with_columns(
        garbage_score=pl.lit(0.0),
        spam_score=pl.lit(0.0),
        garbage_reason=pl.Series(["", "", ""]),
        garbage_rule=pl.Series(["", "", ""]),
    )
    flagged = flag_repeats(scored, found)
    assert flagged["garbage_score"].to_list() == [0.0, 1.0, 0.0]
    assert flagged["garbage_reason"].to_list() == [
        "",
        "a 3-token n-gram repeated 40 times in a row",
        "",
    ]
    assert flagged["garbage_rule"].to_list() == ["", REPEATS_RULE, ""]


def test_a_flagged_document_keeps_its_other_reasons() -> None:
    scored = pl.DataFrame(
        {
            "dataset": ["web"],
            "doc_id": [4],
            "garbage_score": [0.8],
            "spam_score": [0.0],
            "garbage_reason": ["12 C1 control characters"],
            "garbage_rule": ["c1"],
        }
    )
    repeats = pl.DataFrame(
        {"dataset": ["web"], "doc_id": [4], "ngram_times": [50], "ngram_period": [1]}
    )
    row = flag_repeats(scored, repeats).row(0, named=True)
    assert row["garbage_score"] == 1.0
    assert (
        row["garbage_reason"]
        == "12 C1 control characters; a 1-token n-gram repeated 50 times in a row"
    )
    assert row["garbage_rule"] == f"c1;{REPEATS_RULE}"


def _window() -> pl.DataFrame:
    """Window documents: 0-2 in embedding cluster e1 (two flagged by repeats), 3-6 repeats in
    other clusters of `web`, 7 repeats in `books`, 8 mojibake in `web`, 9 clean."""
    rules = ["repeated_ngram", "repeated_ngram", "", *["repeated_ngram"] * 4, "repeated_ngram",
             "legacy", ""]  # fmt: skip
    return pl.DataFrame(
        {
            "dataset": ["web"] * 7 + ["books"] + ["web"] * 2,
            "doc_id": list(range(10)),
            "garbage_score": [0.0 if r == "" else 1.0 for r in rules],
            "spam_score": [0.0] * 10,
            "garbage_rule": rules,
        }
    )


def test_a_blamed_embedding_cluster_takes_its_rules_documents_in_its_dataset() -> None:
    ranked = pl.DataFrame({"id": ["e1", "s1"], "kind": ["embedding", "source"]})
    seen = pl.DataFrame({"dataset": ["web"] * 3, "doc_id": [0, 1, 2], "cluster": ["e1"] * 3})
    notes: list[str] = []
    got = rule_members(ranked, seen, _window(), notes)
    assert got["doc_id"].to_list() == [0, 1, 2, 3, 4, 5, 6]
    assert set(got["cluster"].to_list()) == {"e1"}
    assert notes == [
        "e1 is dirty by the document rule repeated_ngram: the 4 other window documents of web "
        "it flags belong to the culprit too"
    ]


def test_source_and_clean_clusters_take_nothing_more() -> None:
    ranked = pl.DataFrame({"id": ["e1", "s1"], "kind": ["embedding", "source"]})
    source = pl.DataFrame({"dataset": ["web"] * 2, "doc_id": [0, 1], "cluster": ["s1"] * 2})
    clean = pl.DataFrame({"dataset": ["web"], "doc_id": [2], "cluster": ["e1"]})
    for seen in (source, clean):
        notes: list[str] = []
        assert rule_members(ranked, seen, _window(), notes).equals(seen) and not notes


def test_megatron_document_tokens_are_scans(tmp_path) -> None:
    """The Megatron replayer's document tokens are those `forensics scan` checks (its own
    reading of the `.bin` through the sequence pointers), and decode to the documents' text."""
    from dataloaders.run_config import load_config
    from forensics.scan.shard import document_tokens
    from forensics_testing.demo.build import build_run
    from forensics_testing.small_run import SMALL

    run = tmp_path / "run"
    build_run(run, SMALL, progress=False)
    replayer = open_replayer(load_config(run / "forensics.yaml"))
    docs = replayer.replay(1, 20, progress=False).select("dataset", "doc_id").unique()
    docs = docs.sort("dataset", "doc_id")
    ours = replayer.document_tokens(docs)
    assert len(ours) == docs.height > 10
    for got, want in zip(ours, document_tokens(replayer, docs), strict=True):
        assert got.tolist() == want.tolist()
    text = replayer.documents(docs, progress=False)["text"].to_list()
    assert replayer._decode(ours) == text
