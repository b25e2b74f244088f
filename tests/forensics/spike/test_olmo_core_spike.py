"""`forensics spike` end to end on a generated OLMo-core run: the job restarts at iteration 61 on
changed data (a new `forum` source of mojibake pages added, OLMo-core's
ignore_fingerprint_mismatch), the loss spikes in the new data stage; the spike must blame the
forum source and write the steps_to_skip override that skips the iterations that drew it.

The data-loader state of the restart and where the forum instances land come from iterating the
real library (ai2-olmo-core, tests/oracles/olmo_core_loader.py), not from our replay.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from dataloaders.trainers import parse_skip_flag
from forensics.skip import expand
from forensics_testing.file_runs import olmo_pages
from forensics_testing.olmo_core_run import (
    ORACLE_PY,
    config_dict,
    oracle_spec,
    run_oracle,
    write_config,
)
from forensics_testing.refusal import refused

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SEQ, IPB, WORLD, SEED = 64, 12, 2, 17
RESTART, TRAIN_ITERS = 61, 90
DOCS = 100


def build_run(folder: Path) -> tuple[Path, dict]:
    texts, tok = olmo_pages(folder, DOCS)
    for name, docs in texts.items():
        ids = [np.asarray(tok.encode(t).ids + [0], dtype=np.uint16) for t in docs]
        np.concatenate(ids).tofile(folder / f"{name}.npy")
    config = config_dict(
        {"web": ["web.npy"], "books": ["books.npy"]},
        seq=SEQ,
        ipb=IPB,
        seed=SEED,
        world=WORLD,
        train_iters=TRAIN_ITERS,
    )
    config["data"]["eos_token_id"] = 0
    config["data"]["vocab_size"] = 3000
    config["tokenizer"] = "tokenizer.json"
    config["checkpoints"] = list(range(10, TRAIN_ITERS + 1, 10))
    new_paths = [str(folder / p) for p in ("web.npy", "books.npy", "forum.npy")]
    spec = oracle_spec(config, folder, restart={"after": RESTART - 1, "paths": new_paths})
    out = run_oracle([spec], folder)[0]
    (folder / "state.json").write_text(json.dumps(out["ranks"][0]["state"]))
    sources = [*config["data"]["sources"], {"name": "forum", "paths": ["forum.npy"]}]
    config["data"]["resumes"] = [{"iteration": RESTART, "state": "state.json", "sources": sources}]
    return write_config(folder, config), out["resumed"]


def test_spike_blames_the_source_added_at_the_restart(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from forensics.cli import app

    monkeypatch.setenv("FORENSICS_CACHE", str(tmp_path / "cache"))
    config, resumed = build_run(tmp_path)
    # the forum file is last in the restarted dataset: its instances are the top indices
    forum_instances = np.fromfile(tmp_path / "forum.npy", dtype=np.uint16).size // SEQ
    first_forum = resumed["size"] - forum_instances
    by_step: dict[int, list[int]] = {}
    for rank in resumed["ranks"]:
        for s in rank["steps"]:
            by_step.setdefault(s["step"], []).extend(s["index"])
    hit = sorted(i for i, inst in by_step.items() if any(x >= first_forum for x in inst))
    assert hit and hit[0] >= RESTART, "precondition: the forum source is drawn after the restart"
    step, window = RESTART + 19, 20
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "spike",
            "--config", str(config),
            "--step", str(step),
            "--window", str(window),
            "--baseline", f"{RESTART - window}-{RESTART - 1}",
            "--embed-cap", "0",
            "--out", str(out),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    skip = json.loads((out / "skip.json").read_text())
    assert set(skip["documents"]) == {"forum"}, skip["documents"]
    assert skip["culprit_clusters"]
    # no mixture weights in OLMo-core: after the restart forum is expected at its share of the
    # library's dataset (its instances over the resumed dataset's size)
    report = json.loads((out / "report.json").read_text())
    forum = next(c for c in report["clusters"] if c["id"] == skip["culprit_clusters"][0])
    assert forum["expected_share"] == pytest.approx(forum_instances / resumed["size"], rel=1e-9)
    assert forum["blend_stages"] == "stage 2"
    skipped = set(expand(skip["iterations"]))
    in_window = [i for i in hit if step - window < i <= step]
    assert set(in_window) <= skipped
    assert skip["trainer"] == "olmo-core"  # the default for an olmo-core data loader
    flag = skip["flags"]["olmo-core"]["flag"]
    assert flag.startswith('--trainer.steps_to_skip=[{"start":') and len(flag.split()) == 1
    steps = parse_skip_flag("olmo-core", flag)
    assert {i for a, b in steps for i in range(a, b)} == skipped  # stop exclusive
    assert skip["fingerprint"]["format"] == "olmo-core"
    assert "--trainer.steps_to_skip=" in (out / "megatron_args.txt").read_text()
    # The restart file, word-split as $(cat ...) does, is what OLMo-core's own experiment CLI
    # makes of it (allenai/OLMo-core fa6c5014 src/olmo_core/internal/experiment.py:415
    # `config.merge(cli_context.overrides)`, values by yaml.safe_load, src/olmo_core/config.py:361):
    # the real TrainerConfig.merge, run in the oracle venv, must give these StepSkipRanges.
    words = (out / "restart-olmo-core.flags").read_text().split()
    # OLMo-core's fit() resumes the save folder's latest checkpoint and ignores load_path when
    # there is one (allenai/OLMo-core fa6c5014 src/olmo_core/train/trainer.py:684-697): the pin
    # asks for a new save folder loading the rollback's step directory, beside the flags.
    pin = skip["flags"]["olmo-core"]["pin"]
    rollback = skip["rollback"]["iteration"]
    assert f"--trainer.load_path=<old save_folder>/step{rollback}" in pin
    assert "--trainer.save_folder=NEW" in pin and "load_path" not in " ".join(words)
    assert _olmo_core_merge(words) == [list(s) for s in steps]
    check = CliRunner().invoke(app, ["check-skip", str(out / "skip.json"), "--config", str(config)])
    assert check.exit_code == 0, check.output
    a, b = steps[0]  # an edited range is refused
    skip["flags"]["olmo-core"]["flag"] = flag.replace(f'"stop":{b}}}', f'"stop":{b + 1}}}', 1)
    (out / "skip.json").write_text(json.dumps(skip))
    check = CliRunner().invoke(app, ["check-skip", str(out / "skip.json"), "--config", str(config)])
    refused(check, "the olmo-core flag is wrong for this run")


def _olmo_core_merge(words: list[str]) -> list[list[int]]:
    """ai2-olmo-core's TrainerConfig.merge of the override words (prefix `trainer`, as an
    ExperimentConfig hands them down): the steps_to_skip it builds, as [start, stop] lists."""
    script = (
        "import json, sys\n"
        "from olmo_core.train.common import StepSkipRange\n"
        "from olmo_core.train.config import TrainerConfig\n"
        "merged = TrainerConfig(save_folder='x').merge(sys.argv[1:], prefix='trainer')\n"
        "assert all(isinstance(s, StepSkipRange) for s in merged.steps_to_skip)\n"
        "print(json.dumps([[s.start, s.stop] for s in merged.steps_to_skip]))\n"
    )
    done = subprocess.run(
        [str(ORACLE_PY), "-c", script, *words], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_replay_text_is_the_decoded_document_piece(tmp_path, monkeypatch):
    """`replay --text` pieces decode to the documents' own text, cut at instance boundaries
    (a run without the oracle: the order is tested elsewhere; here the tokens -> text path)."""
    from dataloaders.run_config import load_config
    from forensics.replay import open_replayer

    monkeypatch.setenv("FORENSICS_CACHE", str(tmp_path / "cache"))
    texts, tok = olmo_pages(tmp_path, DOCS)
    ids = [tok.encode(t).ids + [0] for t in texts["web"][:40]]
    np.concatenate([np.asarray(i, dtype=np.uint16) for i in ids]).tofile(tmp_path / "web.npy")
    config = config_dict({"web": ["web.npy"]}, seq=SEQ, ipb=4, seed=1, train_iters=5)
    config["data"]["vocab_size"] = 3000
    config["tokenizer"] = "tokenizer.json"
    replayer = open_replayer(load_config(write_config(tmp_path, config)))
    table = replayer.replay(1, 5, text=True, progress=False)
    for row in table.iter_rows(named=True):
        doc = ids[row["doc_id"]]  # one file: doc_id is the document number
        want = tok.decode(doc[row["token_start"] : row["token_end"]], skip_special_tokens=False)
        assert row["text"] == want
    whole = replayer.documents(table.select("dataset", "doc_id").unique(), progress=False)
    for row in whole.iter_rows(named=True):
        assert row["text"] == tok.decode(ids[row["doc_id"]], skip_special_tokens=False)
