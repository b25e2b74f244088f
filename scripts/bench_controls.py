"""The clean control's false-culprit rate: how often `forensics spike` names, skips or blocks
anything when the data is not to blame.

    python scripts/bench_controls.py [--seeds 40] [--real-seeds 0 1 2] [--out bench-controls]

1. Generated windows (forensics_testing.windows, cheap): clean windows at the scorer's 1% and
   3% false-positive rates, and windows where a clean crawl batch is new at a mixture switch
   (at the blend's share: the blend explains it). The verdict rule of the spike pipeline
   (cluster_sources -> assign_verdicts / fitted_verdicts); a false culprit is any culprit, a
   false block any document culpit_docs would block.
2. A real CPU training loop with a spike the optimizer causes (--real-seeds): the demo builder's
   Megatron run with its dirty crawl batch rewritten as clean pages (so a clean crawl batch
   enters at the mixture switch), a GPT-2 (transformers, 2 x 128) trained over the run's exact
   batch order, its learning rate multiplied by LR_BOOST for BOOST_STEPS iterations after the
   switch; the log is the trainer's own, in Megatron's format. `forensics spike` at the spike,
   without and with the pre-spike checkpoint. A false culprit: a culprit named, iterations
   skipped or documents in the block list.

Prints one table per part and writes OUT/summary.json.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dataloaders.megatron.indexed import IndexedDataset, optimal_dtype, write_indexed_dataset  # noqa: E402
from dataloaders.run_config import load_config  # noqa: E402
from forensics.cluster import assign_verdicts, cluster_sources, culprit_docs  # noqa: E402
from forensics.cluster.controls import looks_like_baseline, unexplained_groups  # noqa: E402
from forensics.replay import open_replayer  # noqa: E402
from forensics.report.first_screen import first_screen  # noqa: E402
from forensics.rescore import RescoreOptions  # noqa: E402
from forensics.spike import SpikeOptions, run_spike  # noqa: E402
from forensics.triage.analyze import triage  # noqa: E402
from forensics.triage.readers import read_log  # noqa: E402
from forensics_testing.demo.build import DemoSpec, build_run  # noqa: E402
from forensics_testing.demo.train import (  # noqa: E402
    TinyModel,
    iteration_batches,
    megatron_log_line,
    tiny_gpt2,
    train,
)
from forensics_testing.windows import generate_run  # noqa: E402

LR_BOOST, BOOST_STEPS = 200.0, 8


def generated(seeds: int) -> list[dict]:
    """Part 1: per kind of window, runs, false culprits, false blocks."""
    rows = []
    for kind, kw in (
        ("clean, 1% scorer FP", {"dirty_share": 0.0, "false_positive_rate": 0.01}),
        ("clean, 3% scorer FP", {"dirty_share": 0.0, "false_positive_rate": 0.03}),
        ("new clean batch (12%), no blend", {"dirty_share": 0.12, "dirty_flag_rate": 0.0}),
    ):
        culprits = blocked = said_clean = runs_listed = 0
        for seed in range(seeds):
            run = generate_run(2000, 2000, seed=1000 + seed, **kw)
            ranked = assign_verdicts(cluster_sources(run.window, run.baseline))
            named = ranked.filter(pl.col("verdict") == "culprit").height
            culprits += named > 0
            blocked += culprit_docs(ranked, run.window).height > 0
            said_clean += looks_like_baseline(ranked)
            runs_listed += unexplained_groups(ranked).height > 0
        rows.append(
            {
                "windows": kind,
                "runs": seeds,
                "false culprits": culprits,
                "false blocks": blocked,
                "said 'looks like the baseline'": said_clean,
                "listed for the model": runs_listed,
            }
        )
    return rows


def clean_crawl(out: Path, truth: dict, seed: int) -> None:
    """Rewrite the builder's dirty crawl batch as clean pages: prose documents of the run,
    re-tokenized by the run's own tokenizer."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    prose = IndexedDataset(out / "data" / "prose_text_document")
    texts = [tok.decode(prose[i].tolist()) for i in range(prose.sequence_count)]
    prefix = out / "data" / "web_v2_text_document"
    web = IndexedDataset(prefix)
    docs = [web[i].tolist() for i in range(web.sequence_count)]
    del web
    rng = random.Random(seed)
    eod = tok.token_to_id("<|endoftext|>")
    for doc_id in truth["dirty_doc_ids"]:
        docs[doc_id] = tok.encode(rng.choice(texts)).ids + [eod]
    write_indexed_dataset(
        prefix, (np.asarray(d) for d in docs), optimal_dtype(tok.get_vocab_size())
    )


ITERS, SWITCH, BOOST = 300, 201, 226


def control_spec(seed: int) -> object:
    """The run: a clean crawl batch enters at the switch; the lr boost comes 25 iterations
    later (`spike_iteration` only places the builder's simulated log, replaced here)."""
    return DemoSpec(
        name=f"lr-control-{seed}",
        seed=100 + seed,
        seq_length=64,
        global_batch_size=8,
        train_iters=ITERS,
        switch_iteration=SWITCH,
        spike_iteration=BOOST,
        checkpoint_interval=25,
        log_tail=ITERS - BOOST,
        docs_prose=200,
        docs_code=120,
        docs_per_crawl=40,
        crawls_v1=2,
        crawls_v2=2,
        vocab_size=1000,
        blend_before={"prose": 0.5, "code": 0.3, "web": 0.2},
        blend_after={"prose": 0.3, "code": 0.2, "web": 0.1, "web_v2": 0.4},
    )


def train_with_boost(seed: int, run_dir: Path) -> dict[int, float]:
    """Build the run, train over its exact batches with the lr boost, write the trainer's own
    Megatron-format log and its checkpoints; returns the loss per iteration."""
    import torch

    torch.set_num_threads(1)
    spec = control_spec(seed)
    shutil.rmtree(run_dir, ignore_errors=True)
    truth = build_run(run_dir, spec, progress=False)
    clean_crawl(run_dir, truth, seed)
    for empty in (run_dir / "checkpoints").iterdir():
        shutil.rmtree(empty)
    replayer = open_replayer(load_config(run_dir / "forensics.yaml"))
    model = tiny_gpt2(spec.vocab_size, spec.seq_length, TinyModel(n_embd=128, n_head=4, seed=seed))
    lines = ["using world size: 1, data-parallel size: 1, global batch size: 8"]

    def on_step(it: int, loss: float, gnorm: float, lr: float) -> None:
        lines.append(megatron_log_line(it, ITERS, 8, lr, loss, gnorm, 100.0))

    history = train(
        model,
        iteration_batches(replayer, 1, ITERS),
        total=ITERS,
        peak_lr=3e-3,
        on_step=on_step,
        save_every=25,
        save_dir=run_dir / "checkpoints",
        lr_scale=lambda it: LR_BOOST if BOOST <= it < BOOST + BOOST_STEPS else 1.0,
    )
    (run_dir / "logs" / "train.log").write_text("\n".join(lines) + "\n")
    return {it: value for it, value, _, _ in history}


def analyse(run_dir: Path, step: int, label: str, checkpoint: Path | None) -> dict:
    """`forensics spike` at `step`: culprits, skipped iterations, blocked documents, headline."""
    rescore = None if checkpoint is None else RescoreOptions(checkpoint=checkpoint, progress=False)
    opts = SpikeOptions(step=step, window=30, baseline="150-179", embed_cap=0, rescore=rescore,
                        progress=False, force=True)  # fmt: skip
    res = run_spike(run_dir / "forensics.yaml", run_dir / f"spike-{label}", opts)
    plan = res.skip.to_dict()
    return {
        f"{label}: culprits": res.report.clusters.filter(pl.col("verdict") == "culprit").height,
        f"{label}: skipped its": sum(b - a + 1 for a, b in plan["iterations"]),
        f"{label}: blocked docs": sum(len(v) for v in plan["documents"].values()),
        f"{label}: headline": first_screen(res.report).headline,
    }


def real_loop(seed: int, out: Path) -> dict:
    """Part 2, one seed: train with the lr boost, then analyse the peak without and with the
    checkpoint saved just before the boost."""
    run_dir = out / f"seed{seed}"
    t0 = time.perf_counter()
    loss = train_with_boost(seed, run_dir)
    train_s = time.perf_counter() - t0
    peak = max(range(BOOST, BOOST + 20), key=lambda i: loss[i])
    found = triage(read_log(run_dir / "logs" / "train.log"))
    spikes = [e for e in found.events if e.get("kind") == "spike" and e["step"] >= SWITCH]
    row: dict = {
        "seed": seed,
        "pre-boost loss": round(float(np.mean([loss[i] for i in range(BOOST - 10, BOOST)])), 3),
        "peak loss": round(loss[peak], 3),
        "peak iteration": peak,
        "triage": spikes[0].get("verdict") if spikes else "no spike",
        "train s": round(train_s),
    }
    row |= analyse(run_dir, peak, "data", None)
    row |= analyse(run_dir, peak, "model", run_dir / "checkpoints" / f"iter_{BOOST - 1:07d}")
    return row


def table(rows: list[dict]) -> str:
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--real-seeds", type=int, nargs="*", default=[])
    parser.add_argument("--out", type=Path, default=Path("bench-controls"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    part1 = generated(args.seeds)
    print(table(part1), f"\n({time.perf_counter() - t0:.0f} s)\n", flush=True)
    part2 = [real_loop(s, args.out) for s in args.real_seeds]
    if part2:
        print(table(part2))
    (args.out / "summary.json").write_text(
        json.dumps({"generated": part1, "real": part2}, indent=1)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
