"""`forensics spike` and `forensics rebuild` end to end on a tiny torchtitan run: one file of
mojibake pages lands inside the window; torchtitan 0.3.0 has no option to skip steps, so the
restart plan is the rebuild (the file list without the dirty file) from the rollback checkpoint,
a `step-N` folder found through the trainer and pinned with `--checkpoint.load_step=N`
(dataloaders/trainers/torchtitan.py cites the lines).

Where the dirty file lands is the replay's: the replay itself is held to torchtitan's own loader
in tests/dataloaders/torchtitan/; here the subject is what spike and rebuild make of the run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
from typer.testing import CliRunner

from dataloaders.run_config import load_config
from dataloaders.trainers import TORCHTITAN
from dataloaders.trainers.torchtitan import NO_SKIP
from forensics.cli import app
from forensics.replay import open_replayer
from forensics_testing.titan_spike_run import CHECKPOINTS, DIRTY, ROWS, build_titan_run

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _cli(*args: str) -> None:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output


def test_spike_and_rebuild_of_a_torchtitan_run(tmp_path: Path) -> None:
    config = build_titan_run(tmp_path)
    run = load_config(config)
    assert run.training.trainer == TORCHTITAN  # the family's default trainer
    assert run.available_checkpoints() == list(CHECKPOINTS)  # the step-N folders
    replayer = open_replayer(run)
    table = replayer.replay(1, replayer.last_iteration, text=False, progress=False)
    dirty = list(range(DIRTY * ROWS, (DIRTY + 1) * ROWS))  # doc_id: row over the files
    hit = sorted(table.filter(pl.col("doc_id").is_in(dirty))["iteration"].unique().to_list())
    assert hit[0] > max(c for c in CHECKPOINTS if c < hit[0]) > 8, hit
    step = hit[len(hit) // 2]  # the dirty file still comes in after the spike
    spike = tmp_path / "spike"
    _cli(
        "spike", "--config", str(config), "--step", str(step), "--window",
        str(step - hit[0] + 1), "--baseline", f"1-{hit[0] - 2}", "--embed-cap", "0",
        "--out", str(spike),
    )  # fmt: skip
    skip = json.loads((spike / "skip.json").read_text())
    assert skip["trainer"] == TORCHTITAN and set(skip["documents"]["web"]) == set(dirty)
    rollback = max(c for c in CHECKPOINTS if c < hit[0])
    assert skip["rollback"]["iteration"] == rollback and skip["rollback"]["checkpoint"]
    assert f"step-{rollback}," in skip["rollback"]["note"]  # the trainer's folder name
    # no skip flag: refused in one line, the pin kept; no restart-torchtitan.flags
    flag = skip["flags"][TORCHTITAN]
    assert flag["flag"] is None and flag["refusal"] == NO_SKIP
    assert flag["pin"] == f"--checkpoint.load_step={rollback}"
    assert not (spike / f"restart-{TORCHTITAN}.flags").exists()
    action = skip["action"]
    assert action["kind"] == "rebuild" and action["stopgap"] is None
    assert action["why"].endswith(NO_SKIP) and skip["ahead"]["advice"].endswith(NO_SKIP)
    assert action["restart_file"].endswith("/data_files.json")
    assert action["restart_pin"] == flag["pin"]
    report = (spike / "report.md").read_text()
    assert f"and --checkpoint.load_step={rollback} on the launch line" in report
    args = (spike / "megatron_args.txt").read_text()
    assert f"# {NO_SKIP}: --checkpoint.load_step={rollback}" in args

    # check-skip has no flag to check: it says so in one line
    checked = CliRunner().invoke(
        app, ["check-skip", str(spike / "skip.json"), "--config", str(config)]
    )
    assert checked.exit_code != 0 and str(checked.exception).endswith(f"skip.json: {NO_SKIP}")

    out = tmp_path / "rebuild"
    _cli("rebuild", str(spike), "--config", str(config), "--out", str(out))
    summary = json.loads((out / "rebuild.json").read_text())
    dirty_file = str(tmp_path / "data" / f"web-{DIRTY:02d}.parquet")
    assert [r["file"] for r in summary["files_removed"]] == [dirty_file]
    assert summary["load_rollback_checkpoint"] == f"--checkpoint.load_step={rollback}"
    kept = json.loads((out / "data_files.json").read_text())["web"]
    assert kept == [f for f in map(str, run.data.sources[0].files) if f != dirty_file]
    # the rebuilt run draws none of the dirty texts
    rebuilt = open_replayer(load_config(out / "rebuilt.yaml"))
    drawn = rebuilt.replay(1, 30, text=False, progress=False).select("dataset", "doc_id")
    texts = set(rebuilt.documents(drawn.unique(), progress=False)["text"].to_list())
    assert texts and not texts & set(pq.read_table(dirty_file)["text"].to_pylist())
