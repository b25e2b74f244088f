"""Train a tiny GPT-2 on CPU over a generated Megatron run's exact batch order, then triage its
real loss curve and run `spike --checkpoint` on it.

    python scripts/train_tiny_run.py --out tiny-run [--iters 600] [--every 50] [--force]

1. builds a small Megatron run with forensics_testing.demo.build (real .bin/.idx, manifests,
   tokenizer, a dirty crawl batch of mojibake + template spam entering the blend at a mixture
   switch);
2. trains a GPT-2-style model (transformers, CPU, one thread) over the exact samples our replay
   says Megatron would feed, in that order; writes logs/train.log in Megatron-LM's training_log
   format (lm loss, grad norm before clipping, learning rate per iteration) and Hugging Face
   checkpoints (config.json + model.safetensors) in checkpoints/iter_NNNNNNN/ every --every;
3. runs `forensics triage` on the log and says what the curve does around the switch;
4. runs the spike pipeline with --checkpoint (the last checkpoint before the analysed step) and
   --grad-norm, and prints per-cluster loss z and grad-norm z, the culprit vs the rest, and the
   culprit's rank by model-side evidence alone. Everything lands in <out>/tiny_run.json.

Nothing here is simulated: the log is this run's. Within 10 minutes on 2 cores (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from dataloaders.run_config import load_config
from forensics.replay import open_replayer
from forensics.rescore import RescoreOptions
from forensics.spike import SpikeOptions, run_spike
from forensics_testing.demo.train import (
    TinyModel,
    iteration_batches,
    megatron_log_line,
    tiny_gpt2,
    train,
)

ROOT = Path(__file__).resolve().parents[1]

from forensics_testing.demo.build import DemoSpec, build_run  # noqa: E402

WINDOW = 40


def spec_for(iters: int, every: int) -> DemoSpec:
    """The run: the dirty batch joins at 2/3 of training, as a mixture switch."""
    switch = (2 * iters) // 3 + 1
    return DemoSpec(
        name="tiny-run",
        seed=4242,
        seq_length=128,
        global_batch_size=16,
        train_iters=iters,
        switch_iteration=switch,
        spike_iteration=switch + 20,  # only for the builder's (replaced) simulated log
        checkpoint_interval=every,
        log_tail=iters - switch - 20,
        dirty_kind="mixed",
        docs_prose=600,
        docs_code=400,
        docs_per_crawl=80,
        crawls_v1=3,
        crawls_v2=2,
        vocab_size=2000,
        blend_before={"prose": 0.5, "code": 0.3, "web": 0.2},
        blend_after={"prose": 0.3, "code": 0.2, "web": 0.1, "web_v2": 0.4},
    )


def curve_story(history: list[tuple[int, float, float, float]], switch: int) -> dict:
    """What the real curve does around the switch, in numbers."""
    import numpy as np

    its = np.array([h[0] for h in history])
    loss = np.array([h[1] for h in history])
    grad = np.array([h[2] for h in history])
    before = (its >= switch - 30) & (its < switch)
    after = (its >= switch) & (its < switch + 30)
    return {
        "loss_mean_30_before_switch": round(float(loss[before].mean()), 4),
        "loss_mean_30_after_switch": round(float(loss[after].mean()), 4),
        "loss_max_after_switch": round(float(loss[its >= switch].max()), 4),
        "grad_norm_mean_30_before_switch": round(float(grad[before].mean()), 4),
        "grad_norm_mean_30_after_switch": round(float(grad[after].mean()), 4),
        "grad_norm_max_after_switch": round(float(grad[its >= switch].max()), 4),
        "final_loss": round(float(loss[-10:].mean()), 4),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("tiny-run"))
    parser.add_argument("--iters", type=int, default=600)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)  # 2 shared cores: more threads only contend
    out: Path = args.out
    if out.exists():
        if not args.force:
            print(f"{out}: exists; pass --force to rebuild it", file=sys.stderr)
            return 2
        shutil.rmtree(out)
    spec = spec_for(args.iters, args.every)
    t0 = time.perf_counter()
    truth = build_run(out / "run", spec, progress=False)
    run_dir = out / "run"
    (run_dir / "logs" / "train.log").unlink()  # the builder's simulated log: replaced below
    for empty in (run_dir / "checkpoints").iterdir():
        shutil.rmtree(empty)
    replayer = open_replayer(load_config(run_dir / "forensics.yaml"))
    model = tiny_gpt2(spec.vocab_size, spec.seq_length, TinyModel(n_layer=2, n_embd=128, n_head=4))
    lines = [f"using world size: 1, data-parallel size: 1, global batch size: "
             f"{spec.global_batch_size}"]  # fmt: skip
    tick = [time.perf_counter()]

    def on_step(it: int, loss: float, gnorm: float, lr: float) -> None:
        now = time.perf_counter()
        ms, tick[0] = 1000 * (now - tick[0]), now
        lines.append(megatron_log_line(it, args.iters, spec.global_batch_size, lr, loss, gnorm, ms))
        if it % args.every == 0:
            lines.append(f"  successfully saved checkpoint from iteration {it:7d} to checkpoints")
        if it % 100 == 0:
            print(f"iteration {it}: lm loss {loss:.3f}, grad norm {gnorm:.2f}", flush=True)

    t1 = time.perf_counter()
    history = train(
        model,
        iteration_batches(replayer, 1, args.iters),
        total=args.iters,
        peak_lr=args.lr,
        warmup=30,
        on_step=on_step,
        save_every=args.every,
        save_dir=run_dir / "checkpoints",
    )
    train_s = time.perf_counter() - t1
    (run_dir / "logs" / "train.log").write_text("\n".join(lines) + "\n")
    story = curve_story(history, spec.switch_iteration)

    triage_dir = out / "triage"
    cmd = [sys.executable, "-m", "forensics.cli", "triage", str(run_dir / "logs" / "train.log"),
           "--out", str(triage_dir), "--checkpoints", str(run_dir / "checkpoints")]  # fmt: skip
    subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True, text=True)
    events = json.loads((triage_dir / "events.json").read_text())
    events = events.get("events", events) if isinstance(events, dict) else events
    after = [e for e in events if e.get("step", 0) >= spec.switch_iteration - 5]
    spikes = [e for e in after if e.get("kind") == "spike"]
    if spikes:
        step = int(spikes[0]["step"]) + 1  # the window ends at the spike's onset (inclusive)
        why = f"triage: {spikes[0]['kind']} ({spikes[0].get('verdict')}) at {spikes[0]['step']}"
    else:
        step = spec.switch_iteration + WINDOW - 1
        why = "triage found no spike after the switch; analysing the window after it anyway"
    step = min(max(step, spec.switch_iteration + 5), args.iters)
    ckpts = sorted(int(p.name[5:]) for p in (run_dir / "checkpoints").iterdir())
    pre = max(c for c in ckpts if c < step)
    window = min(WINDOW, step - 1)
    spike_dir = out / f"spike-{step}"
    result = run_spike(
        run_dir / "forensics.yaml",
        spike_dir,
        SpikeOptions(
            step=step,
            window=window,
            embed_cap=0,
            progress=False,
            force=True,
            rescore=RescoreOptions(
                checkpoint=run_dir / "checkpoints" / f"iter_{pre:07d}",
                grad_norm=True,
                cap=160,
                progress=False,
            ),
        ),
    )
    view = result.report.model or {}
    dirty = f"crawl_batch={truth['dirty_crawl_batch']}"
    rows = view.get("clusters", [])
    culprit_row = next((c for c in rows if c["name"] == dirty), None)
    rest = [c for c in rows if c["name"] != dirty and c["units"] >= 3]

    def mean(key: str) -> float | None:
        vals = [c[key] for c in rest if c[key] is not None]
        return round(sum(vals) / len(vals), 3) if vals else None

    summary = {
        "iterations": args.iters,
        "switch_iteration": spec.switch_iteration,
        "dirty_crawl_batch": truth["dirty_crawl_batch"],
        "curve": story,
        "triage_events_after_switch": [
            {k: e.get(k) for k in ("kind", "step", "verdict", "curve")} for e in after
        ],
        "analysed_step": step,
        "why_this_step": why,
        "checkpoint_rescored": pre,
        "report_culprit": result.report.culprit["id"] if result.report.culprit else None,
        "dirty_batch_model_row": culprit_row,
        "rest_mean": {k: mean(k) for k in ("loss_z", "max_token_z", "grad_norm_z")},
        "dirty_batch_rank_by_model_evidence": rows.index(culprit_row) + 1 if culprit_row else None,
        "clusters_scored": len(rows),
        "agreement": view.get("agreement"),
        "seconds": {
            "build": round(t1 - t0, 1),
            "train": round(train_s, 1),
            "total": round(time.perf_counter() - t0, 1),
        },  # fmt: skip
    }
    (out / "tiny_run.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    print(f"\n{'cluster':<34} {'verdict':<58} {'loss z':>7} {'max z':>7} {'grad z':>7} {'n':>4}")
    for c in rows[:12]:
        g = "n/a" if c["grad_norm_z"] is None else f"{c['grad_norm_z']:+.2f}"
        print(f"{c['name'][:34]:<34} {c['combined'][:58]:<58} {c['loss_z']:+7.2f} "
              f"{c['max_token_z']:+7.2f} {g:>7} {c['units']:>4}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
