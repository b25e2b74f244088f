"""Our OLMo-core replay against AI2's own `src/scripts/dump_training_batch.py`.

The script (allenai/OLMo-core fa6c5014c9f6e9ee789da2d9c20d5126fee8df0d, copied verbatim into
tests/oracles/upstream/) rebuilds the dataset from a checkpoint's config.json, verifies the
fingerprint in train/rank0.pt, and returns `data_loader[step]` (dump_training_batch.py:221-229)
of a one-rank NumpyFSLDataLoader reshuffled for the checkpoint's epoch. `__getitem__` indexes
the epoch's global-indices rows from 0 (data_loader.py:692-718), while the trainer's step counter
is 1-based and counts across epochs (train/trainer.py:1466-1479 `_fit_epoch`: `global_step += 1`
before the step). So `--step s` returns the batch of trainer step
(epoch - 1) * batches_per_epoch + s + 1, with the instances in global-row order (column c of the
row: rank c % W's (c // W)-th instance). The test holds our replay to exactly that, on a run with
2 DP ranks resumed in epoch 2.
"""

from __future__ import annotations

import json
import subprocess

import numpy as np

from dataloaders.olmo_core.order import position_columns
from dataloaders.run_config import load_config
from forensics.replay import open_replayer
from forensics_testing.olmo_core_run import (
    EOS,
    ORACLE_SCRIPT,
    PAD,
    VOCAB,
    config_dict,
    oracle_python,
    random_docs,
    write_config,
    write_documents,
)

MIX = "OLMoE-mix-0824-dev"  # 4 files: the smallest pretraining mix OLMo-core ships
MIX_FILES = [  # olmo_core/data/mixes/OLMoE-mix-0824-dev.txt, {TOKENIZER} = our identifier
    "preprocessed/proof-pile-2/v0_decontaminated/algebraic-stack/train/{T}/part-00-00000.npy",
    "preprocessed/starcoder/v1-decon-100_to_20k-2star-top_token_030/{T}/part-099-00000.npy",
    "preprocessed/dclm/text_openhermes_reddit_eli5_vs_rw_v2_bigram_200k_train/{T}/part-000-00000.npy",
    "preprocessed/olmo-mix/danyh-compiled-v1_7/documents/wiki/{T}/part-1-00000.npy",
]
SOURCES = ["proofpile-2-stack", "starcoder", "dclm", "wikipedia"]
SEQ, IPB, WORLD, SEED, STATE_AFTER = 32, 8, 2, 1234, 45


def test_replay_agrees_with_dump_training_batch(tmp_path):
    base = tmp_path / "ai2-llm"
    rng = np.random.default_rng(9)
    paths = []
    for rel in MIX_FILES:
        path = base / rel.format(T="toy-tok")
        path.parent.mkdir(parents=True)
        write_documents(path, random_docs(rng, 40))
        paths.append(path)
    spec = {
        "checkpoint": str(tmp_path / "ckpt" / f"step{STATE_AFTER}"),
        "mix": MIX,
        "mix_base_dir": str(base),
        "tokenizer_id": "toy-tok",
        "vocab_size": VOCAB,
        "eos_token_id": EOS,
        "pad_token_id": PAD,
        "sequence_length": SEQ,
        "global_batch_size": SEQ * IPB,
        "seed": SEED,
        "world_size": WORLD,
        "work_dir": str(tmp_path / "run-work"),
        "dump_work_dir": str(tmp_path / "dump-work"),
        "state_after": STATE_AFTER,
        "steps": [0, 3, 7],
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    script = ORACLE_SCRIPT.parent / "olmo_core_dump.py"
    proc = subprocess.run(
        [str(oracle_python()), str(script), str(tmp_path / "spec.json"), str(tmp_path / "o.json")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads((tmp_path / "o.json").read_text())
    assert out["paths"] == [str(p) for p in paths]
    # the oracle venv kept our torch (ai2-olmo-core needs torch < 2.14; it must not replace it)
    assert out["versions"]["torch"].startswith("2.13.0") and out["versions"]["olmo_core"] == "3.0.0"
    state = out["state"]
    config = config_dict(
        {name: [str(p)] for name, p in zip(SOURCES, paths, strict=True)},
        seq=SEQ,
        ipb=IPB,
        seed=SEED,
        world=WORLD,
        train_iters=200,
        resumes=[{"iteration": STATE_AFTER + 1, "state": spec["checkpoint"] + "/train/rank0.pt"}],
    )
    replayer = open_replayer(load_config(write_config(tmp_path, config)))  # checks rank0.pt
    assert state["epoch"] == 2, "precondition: the checkpoint is in the second epoch"
    cols = position_columns(IPB, WORLD)
    for step, dump in out["dumps"].items():
        iteration = (state["epoch"] - 1) * replayer.batches_per_epoch + int(step) + 1
        by_position = replayer.batch_instances(np.asarray([iteration]))[0]
        by_column = np.empty(IPB, dtype=np.int64)
        by_column[cols] = by_position
        assert by_column.tolist() == dump["index"], f"dump --step {step}"
        for inst, ids in zip(dump["index"], dump["input_ids"], strict=True):
            assert replayer.instance_tokens(inst).tolist() == ids
