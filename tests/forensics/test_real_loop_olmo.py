"""The loop closed by a real trainer, small: scripts/real_loop_olmo.py trains the byte-level model
with ai2-olmo-core's own Trainer on CPU (gloo) over token files with a planted burst of repeated
n-grams, `forensics watch` follows the trainer's log while it trains, triage and spike name the
burst (the model's view read from the trainer's own checkpoint), and the Trainer restarts from
the rollback checkpoint with the words of restart-olmo-core.flags.

What must hold: the data side names the burst with no cluster chosen by hand (its culprits are
burst documents only; the block list holds every burst document) and the model's view from the
trainer's checkpoint confirms it (loss z over 3); the trainer's own log says it skipped exactly
the skip plan's steps ("Skipping training on step N intentionally..."), every burst step among
them; the burst run's training loss jumps (over 1.5x its level before the burst) and stays up
on the clean batches after it, while the restart's clean-batch loss after the burst stays
under 1.25x.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import polars as pl
import pytest

from forensics.spike.repeats import REPEATS_RULE
from forensics_testing.olmo_core_run import oracle_python
from forensics_testing.repo_paths import REPO_ROOT

FIRST, LAST = 91, 100


@pytest.mark.slow
@pytest.mark.oracle
def test_trainer_skips_the_named_burst_and_does_not_spike(tmp_path):
    oracle_python()  # .venv-olmo, or a skip
    out = tmp_path / "loop"
    cmd = [sys.executable, str(REPO_ROOT / "scripts" / "real_loop_olmo.py"), str(out)]
    cmd += ["--steps", "120", "--burst", str(FIRST), str(LAST), "--save-interval", "30"]
    cmd += ["--seq", "64", "--batch", "8", "--no-control", "--port", "29641"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    burst = list(range(FIRST, LAST + 1))
    # the trainer's own log skipped exactly the planned steps; the plan holds every burst step
    # (the blamed cluster's cause, OLMo-core's repeated-n-gram rule, takes every window document
    # it flags), and any other step it holds drew a document that rule flags (the corpus's own:
    # a banner of asterisks, a table border, a doctest's indentation)
    assert summary["trainer_skipped"] == summary["planned_skip"], summary
    planned = summary["planned_skip"]
    assert set(burst) <= set(planned), planned
    docs = pl.read_parquet(out / "spike" / "documents.parquet")
    ruled = docs.filter(pl.col("garbage_rule").str.contains(REPEATS_RULE))
    drew = set(ruled.explode("iterations")["iterations"].to_list())
    assert set(planned) - set(burst) <= drew, (planned, sorted(drew))
    # the watcher raised the spike from the live log, inside the burst
    raised = [e for e in summary["watch_spikes"] if e.get("message") == "raised"]
    assert raised and FIRST <= raised[0]["step"] <= LAST, summary["watch_spikes"]
    # the data side names the burst on its own (no cluster chosen by hand): every blamed
    # cluster is a data-side culprit made of burst documents only, and the block list holds
    # every burst document (the others it holds are flagged by the same rule, drawn above)
    culprits = summary["blamed"]["culprit_clusters"]
    assert culprits and "--culprit" not in summary["spike_command"], summary["spike_command"]
    assert {c["data_verdict"] for c in summary["culprits"]} == {"culprit"}, summary["culprits"]
    burst_docs = set(summary["burst_doc_ids"])
    assert len(burst_docs) == summary["burst_instances"]
    in_culprit = docs.filter(pl.col("clusters").list.eval(pl.element().is_in(culprits)).list.any())
    assert in_culprit.height and set(in_culprit["doc_id"]) <= burst_docs
    blocked = set(summary["blamed"]["documents"]["train"])
    assert burst_docs <= blocked and blocked - burst_docs <= set(ruled["doc_id"])
    # the model (the checkpoint before the burst) choked on it: it confirms the culprit
    assert summary["rescore_checkpoint"] < FIRST
    assert summary["culprit_loss_z"] > 3, summary["culprit_loss_z"]
    assert "confirmed by the model" in summary["model_agreement"], summary["model_agreement"]
    # a real spike in the burst run; after the burst, the restart's clean-batch loss stays near
    # the level before it while the burst run's does not
    assert summary["burst"]["peak_from_burst_ratio"] > 1.5, summary["burst"]
    assert summary["burst"]["peak_after_burst_ratio"] > 1.25, summary["burst"]
    assert summary["restart"]["peak_after_burst_ratio"] < 1.25, summary["restart"]
