"""Dirt no text scorer was built for, named: the token rule (no checkpoint) and the model's view
(`--checkpoint`), on a generated Megatron run whose new crawl batches at a mixture switch are

- crawl batch -1: another tokenizer's ids (a SentencePiece BPE trained here by the
  `sentencepiece` library; valid ids that decode to word salad under the run's byte-level BPE)
  and numeric dumps (forensics_testing.foreign_run);
- crawl batch -2: the same web pages with their words shuffled, in the run's own tokenizer: it
  round-trips, has the baseline's unigrams and bytes per token, and no scorer flags it;
- crawl batch -3: clean pages (the control: new at the switch, and nothing wrong with it).

The checkpoint is a real transformers GPT-2 trained here for 200 iterations on the run's own
pre-switch batches (forensics_testing.demo.train), saved with save_pretrained."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import polars as pl
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

from dataloaders.run_config import load_config  # noqa: E402
from forensics.replay import open_replayer  # noqa: E402
from forensics.report.first_screen import first_screen  # noqa: E402
from forensics.rescore import RescoreOptions  # noqa: E402
from forensics.spike import SpikeOptions, run_spike  # noqa: E402
from forensics_testing.demo.build import DemoSpec  # noqa: E402
from forensics_testing.demo.train import iteration_batches, save, tiny_gpt2, train  # noqa: E402
from forensics_testing.foreign_run import FOREIGN, build_foreign_run  # noqa: E402

SPEC = DemoSpec(
    name="foreign",
    seed=7,
    seq_length=64,
    global_batch_size=8,
    train_iters=400,
    switch_iteration=201,
    spike_iteration=240,
    checkpoint_interval=50,
    log_tail=20,
    docs_prose=150,
    docs_code=100,
    docs_per_crawl=30,
    crawls_v1=2,
    crawls_v2=3,
    vocab_size=800,
    blend_before={"prose": 0.5, "code": 0.3, "web": 0.2},
    blend_after={"prose": 0.3, "code": 0.2, "web": 0.1, "web_v2": 0.4},
)
TRAIN_ITERS = 200  # the checkpoint sees the clean blend only, as the pre-spike one would


def _spike(root: Path, name: str, checkpoint: Path | None):
    rescore = None if checkpoint is None else RescoreOptions(checkpoint=checkpoint, progress=False)
    opts = SpikeOptions(step=SPEC.spike_iteration, window=30, baseline="100-129", embed_cap=0,
                        rescore=rescore, progress=False)  # fmt: skip
    return run_spike(root / "run" / "forensics.yaml", root / name, opts)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("foreign")
    truth = build_foreign_run(root / "run", SPEC, shuffled=True)
    replayer = open_replayer(load_config(root / "run" / "forensics.yaml"))
    model = tiny_gpt2(SPEC.vocab_size, SPEC.seq_length)
    train(model, iteration_batches(replayer, 1, TRAIN_ITERS), total=TRAIN_ITERS, peak_lr=3e-3)
    save(model, root / "trained")
    return {
        "root": root,
        "truth": truth,
        "data": _spike(root, "data", None),
        "model": _spike(root, "model", root / "trained"),
        "replayer": replayer,
    }


def _batch_of(run: dict, crawl: str) -> set[int]:
    manifest = pl.read_parquet(run["root"] / "run" / "data" / "web_v2.manifest.parquet")
    return set(manifest.filter(pl.col("crawl_batch") == crawl)["doc_id"].to_list())


def _row(result, key: str) -> dict:
    clusters = result.report.clusters
    return clusters.filter((pl.col("facet") == "crawl_batch") & (pl.col("key") == key)).row(
        0, named=True
    )


def test_token_rule_flags_foreign_ids_and_numeric_dumps_not_clean_text(run: dict) -> None:
    out = run["data"].out
    stats = pl.read_parquet(next((out / ".cache").glob("tokstats-*.parquet")))
    kinds = {int(k): v for k, v in run["truth"]["kinds"].items()}
    web = stats.filter(pl.col("dataset") == "web_v2")
    reason = dict(zip(web["doc_id"].to_list(), web["token_reason"].to_list(), strict=True))
    drawn = [d for d in kinds if d in reason]
    assert len(drawn) >= 15
    for doc in drawn:  # every foreign and numeric document the replay drew is flagged, and why
        expect = "do not re-encode" if kinds[doc] == FOREIGN else "bytes per token"
        assert expect in reason[doc], (doc, kinds[doc], reason[doc])
    dirty = set(kinds) | set(run["truth"]["shuffled_doc_ids"])
    clean = stats.filter(~((pl.col("dataset") == "web_v2") & pl.col("doc_id").is_in(dirty)))
    assert clean.height > 200
    assert (clean["token_reason"] != "").mean() <= 0.03  # about the scorers' own false positives
    # the shuffled pages round-trip with ordinary statistics: not this rule's to see
    shuffled = web.filter(pl.col("doc_id").is_in(run["truth"]["shuffled_doc_ids"]))
    assert shuffled.height >= 10 and shuffled["round_trip"].all()
    assert (shuffled["token_reason"] != "").mean() <= 0.1


def _recall_precision(blocked: set[int], dirty: set[int]) -> tuple[float, float]:
    return len(blocked & dirty) / len(dirty), len(blocked & dirty) / max(len(blocked), 1)


def test_without_a_checkpoint_the_data_side_names_the_foreign_batch(run: dict) -> None:
    res = run["data"]
    top = res.report.culprit
    assert (top["facet"], top["key"]) == ("crawl_batch", run["truth"]["dirty_crawl_batch"])
    blocked = set(res.skip.to_dict()["documents"].get("web_v2", []))
    recall, precision = _recall_precision(blocked, set(run["truth"]["dirty_doc_ids"]))
    assert recall >= 0.9 and precision >= 0.95
    # the shuffled batch is new at the blend's share and unflagged: left to the model, with the
    # command that asks the pre-spike checkpoint (its path quoted)
    lines = dict(first_screen(res.report).reasons)
    text = "\n".join(t for _, t in first_screen(res.report).reasons)
    assert "no checkpoint given" in lines["MODEL"]
    assert f"crawl_batch={run['truth']['shuffled_crawl_batch']}" in text
    command = res.report.checkpoint_command
    words = shlex.split(command)
    assert words[:2] == ["forensics", "spike"] and "--checkpoint" in words
    assert Path(words[words.index("--checkpoint") + 1]).name == "iter_0000200"
    assert f"ask the pre-spike checkpoint: {command}" in text


def test_the_model_names_the_batch_no_scorer_flags(run: dict) -> None:
    res = run["model"]
    shuffled = run["truth"]["shuffled_crawl_batch"]
    row = _row(res, shuffled)
    assert row["verdict"] == "culprit" and row["named_by"] == "model"
    assert row["flagged_rate"] < 0.2  # no scorer flags it
    assert row["model_effect"] >= 0.5 and row["model_holm_p"] < 1e-3
    # the foreign batch stays the data side's culprit, confirmed by the model
    foreign = _row(res, run["truth"]["dirty_crawl_batch"])
    assert foreign["verdict"] == "culprit" and foreign["named_by"] == "data"
    # both blocked: recall and precision over each batch's documents
    blocked = set(res.skip.to_dict()["documents"].get("web_v2", []))
    dirty, words = set(run["truth"]["dirty_doc_ids"]), set(run["truth"]["shuffled_doc_ids"])
    assert blocked <= dirty | words
    for truth in (dirty, words):
        recall, _ = _recall_precision(blocked, truth)
        assert recall >= 0.9
    # the report says the model, not a scorer, named it, and shows its highest-loss documents
    report = json.loads((res.out / "report.json").read_text())
    named = report["model"]["named"][row["id"]]
    assert named and all(d["doc_id"] in words for d in named)
    md = (res.out / "report.md").read_text()
    assert "named by the model" in md


def test_clean_groups_are_not_named_by_the_model(run: dict) -> None:
    """The clean new batch at the switch, and the datasets whose loss is their own (code): the
    model names nothing else."""
    res = run["model"]
    clusters = res.report.clusters
    named = clusters.filter(pl.col("named_by") == "model")
    assert named["key"].to_list() == [run["truth"]["shuffled_crawl_batch"]]
    batches = sorted(clusters.filter(pl.col("facet") == "crawl_batch")["key"].drop_nulls())
    control = [b for b in batches if b.startswith("crawl-")
               and b not in (run["truth"]["dirty_crawl_batch"],
                             run["truth"]["shuffled_crawl_batch"])]  # fmt: skip
    assert control
    for key in control:
        assert _row(res, key)["verdict"] != "culprit"
    is_code = ((pl.col("facet") == "dataset") & (pl.col("key") == "code")) | pl.col(
        "aliases"
    ).list.contains("dataset=code")
    code = clusters.filter(is_code.fill_null(False))
    assert code["verdict"].to_list() == ["clean"] and code["model_reference"].to_list() == ["own"]
    culprit_docs = set(res.skip.to_dict()["documents"].get("code", []))
    assert not culprit_docs
