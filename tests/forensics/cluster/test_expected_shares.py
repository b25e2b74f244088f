"""Expected shares from the window stage's blend, and density in the why lines, on
generated Megatron runs in the real formats (.bin/.idx, manifests, a staged blend).

The expected numbers are computed here from the config's weights, the raw .idx bytes and the
manifest, not with forensics' own functions.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml

from forensics_testing.demo.build import DemoSpec, build_run

# The switch raises code from 2% to 50% of the samples: against the baseline (stage 1) code is
# over-represented by design; against the window's own blend (stage 2) it is not.
SWITCH = DemoSpec(
    name="switch",
    seed=11,
    seq_length=64,
    global_batch_size=8,
    train_iters=300,
    switch_iteration=151,
    spike_iteration=200,
    checkpoint_interval=50,
    log_tail=20,
    dirty_kind="mixed",
    docs_prose=120,
    docs_code=300,
    docs_per_crawl=30,
    crawls_v1=2,
    crawls_v2=2,
    vocab_size=1000,
    blend_before={"prose": 0.78, "code": 0.02, "web": 0.2},
    blend_after={"prose": 0.2, "code": 0.5, "web": 0.1, "web_v2": 0.2},
)
WINDOW = 40
# A dirty batch that arrives 10 iterations before the spike, against a baseline of one iteration.
BURST = replace(
    SWITCH,
    name="burst",
    global_batch_size=16,
    switch_iteration=31,
    spike_iteration=40,
    checkpoint_interval=5,
    blend_after={"prose": 0.2, "code": 0.2, "web": 0.1, "web_v2": 0.5},
)
BURST_WINDOW = 30


def _pct(x: float) -> str:
    """The report's way of writing a share (written out again here, on purpose)."""
    return f"{100 * x:.1f}%" if x < 0.1 else f"{100 * x:.0f}%"


def _spike(run: Path, step: int, window: int, baseline: str):
    from forensics.spike import SpikeOptions, run_spike

    options = SpikeOptions(step=step, window=window, baseline=baseline, embed_cap=0, progress=False)
    return run_spike(run / "forensics.yaml", run / "spike", options)


def _train_tokens_by(run: Path, name: str, split: str, facet: str) -> dict[str, int]:
    """Tokens of the train split's documents per manifest value, read from the raw .idx bytes
    (megatron-core's layout: 9-byte magic, version, dtype code, sequence and document counts,
    int32 sequence lengths, int64 pointers, int64 document indices)."""
    raw = (run / "data" / f"{name}_text_document.idx").read_bytes()
    assert raw[:9] == b"MMIDIDX\x00\x00"
    sequences = int(np.frombuffer(raw, "<u8", 1, 18)[0])
    lengths = np.frombuffer(raw, "<i4", sequences, 34).astype(np.int64)
    weights = [float(x) for x in split.split(",")]
    end = int(round(weights[0] / sum(weights) * sequences))  # train split: sequences [0, end)
    manifest = pl.read_parquet(run / "data" / f"{name}.manifest.parquet").sort("doc_id")
    keys = manifest[facet].to_list()[:end]  # one sequence per document (no --split-sentences)
    out: dict[str, int] = {}
    for key, n in zip(keys, lengths[:end].tolist(), strict=True):
        out[str(key)] = out.get(str(key), 0) + n
    return out


@pytest.fixture(scope="module")
def switch_run(tmp_path_factory: pytest.TempPathFactory):
    run = tmp_path_factory.mktemp("switch") / "run"
    truth = build_run(run, SWITCH, progress=False)
    return run, truth, _spike(run, SWITCH.spike_iteration, WINDOW, "41-140")


def test_at_a_switch_the_window_stage_blend_gives_the_expected_shares(switch_run) -> None:
    run, truth, result = switch_run
    ranked = result.report.clusters
    config = yaml.safe_load((run / "forensics.yaml").read_text())
    stage2 = {d["name"]: d["weight"] for d in config["data"]["stages"][1]["blend"]}
    w = {k: v / sum(stage2.values()) for k, v in stage2.items()}
    code = ranked.filter(pl.col("key") == "pypi-code").row(0, named=True)
    assert code["expected_share"] == pytest.approx(w["code"], rel=1e-12)
    assert code["blend_stages"] == "stage 2"
    # the baseline (stage 1, code at 2%) says code is over-represented; the blend says it is not
    assert code["enrichment"] >= 1.5 and code["p_value"] < 1e-3
    assert code["verdict"] == "clean" and code["blend_ratio"] < 1.5
    # a crawl batch of web_v2 is its share of web_v2's train-split tokens times web_v2's weight
    tokens = _train_tokens_by(run, "web_v2", config["data"]["split"], "crawl_batch")
    for batch in truth["clean_crawl_batches"][SWITCH.crawls_v1 :] + [truth["dirty_crawl_batch"]]:
        row = ranked.filter(pl.col("key") == batch).row(0, named=True)
        want = w["web_v2"] * tokens[batch] / sum(tokens.values())
        assert row["expected_share"] == pytest.approx(want, rel=1e-12)
    # new and clean at the switch: "new, clean", never an amber suspect
    new_clean = ranked.filter(pl.col("key") == truth["clean_crawl_batches"][-1]).row(0, named=True)
    assert new_clean["new_in_window"] and new_clean["label"] == "new, clean"
    amber = ranked.filter(
        (pl.col("verdict") == "suspect") & ~pl.col("dirty") & pl.col("explained_by").is_null()
    )
    assert amber.height == 0, amber.select("id", "facet", "key")
    top = result.report.culprit
    assert top is not None and top["key"] == truth["dirty_crawl_batch"]
    dirty = ranked.filter(pl.col("key") == truth["dirty_crawl_batch"]).row(0, named=True)
    summary = "\n".join(text for _, text in _summary(result))
    assert f"expected {_pct(dirty['expected_share'])} (blend of stage 2)" in summary
    md = (run / "spike" / "report.md").read_text()
    assert f"/ {100 * w['code']:.2f}% (stage 2)" in md
    assert any("expected shares: the blend of data stage 2" in n for n in result.notes)


def _summary(result) -> list[tuple[str, str]]:
    from forensics.report import summary_lines

    return summary_lines(result.report)


def test_a_dirty_burst_against_a_degenerate_baseline_is_blamed_with_its_density(
    tmp_path: Path,
) -> None:
    from dataloaders.run_config import load_config
    from forensics.replay import open_replayer

    run = tmp_path / "run"
    truth = build_run(run, BURST, progress=False)
    result = _spike(run, BURST.spike_iteration, BURST_WINDOW, "1-1")
    assert any("too small to judge" in n for n in result.notes)
    top = result.report.culprit
    assert top is not None and top["key"] == truth["dirty_crawl_batch"]
    # the density, counted here from the replayed window and the truth's dirty documents
    first, last = BURST.spike_iteration - BURST_WINDOW + 1, BURST.spike_iteration
    rows = open_replayer(load_config(run / "forensics.yaml")).replay(first, last, progress=False)
    dirty = set(truth["dirty_doc_ids"])
    per_iteration: dict[int, set[int]] = {}
    samples: dict[int, set[int]] = {}
    for it, sample, dataset, doc in rows.select(
        "iteration", "sample_index", "dataset", "doc_id"
    ).iter_rows():
        samples.setdefault(it, set()).add(sample)
        if dataset == "web_v2" and doc in dirty:
            per_iteration.setdefault(it, set()).add(sample)
    shares = {it: len(s) / len(samples[it]) for it, s in per_iteration.items()}
    peak = max(shares.values())
    at = min(it for it, s in shares.items() if s == peak)
    assert min(shares) >= BURST.switch_iteration
    line = (
        f"in {len(shares)} of {BURST_WINDOW} iterations, up to {_pct(peak)} of a step at "
        f"iteration {at}, {last - at} iteration{'s' if last - at != 1 else ''} before the spike"
    )
    summary = [text for _, text in _summary(result)]
    assert any(line in text for text in summary), summary
    assert any("a burst" in text for text in summary)
