"""torchtitan as a trainer: no skip option (refused in one line wherever a skip is offered), the
`--checkpoint.load_step=R` pin, and its `step-N` checkpoint folders.

What is held here, from torchtitan 0.3.0 (the PyPI wheel; cited line by line in
dataloaders/trainers/torchtitan.py):
- trainer.py:1031-1039: every step draws and trains one global batch; no field of its config
  names steps to skip.
- components/checkpointer/dcp.py:640-684 `_find_load_step`: entries whose name contains
  `step-(\\d+)` and that hold DCP's `.metadata` (or `model.safetensors.index.json`) are the
  checkpoints; 555-566: `--checkpoint.load_step=R` loads `step-R`, not the latest.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from dataloaders.run_sections import TrainingSpec
from dataloaders.schedule import Schedule
from dataloaders.trainers import MEGATRON_LM, TORCHTITAN, get_trainer, parse_skip_flag
from dataloaders.trainers.torchtitan import NO_SKIP
from forensics.commands.triage import parse_checkpoints
from forensics.errors import ForensicsError
from forensics.skip.action import REBUILD, REMOVE, SKIP, decide_action
from forensics.skip.flags import restart_line, write_all, write_flag
from forensics_testing.titan_oracle import ORACLES, titan_python

TITAN = get_trainer(TORCHTITAN)


def _schedule() -> Schedule:
    """gas 4: global batch 8 of micro-batches of 2."""
    return Schedule(TrainingSpec(global_batch_size=8, micro_batch_size=2, train_iters=100))


def test_every_skip_is_refused_in_one_line_naming_the_version() -> None:
    assert "\n" not in NO_SKIP and NO_SKIP.startswith(
        "torchtitan 0.3.0 has no option to skip iterations; restart from the rebuild"
    )
    assert TITAN.no_skip == NO_SKIP and get_trainer(MEGATRON_LM).no_skip is None
    with pytest.raises(ForensicsError, match="^torchtitan 0.3.0 has no option to skip"):
        parse_skip_flag(TORCHTITAN, "--checkpoint.load_step 20 --anything 21")
    assert TITAN.parse("") == []  # nothing to skip is no skip flag
    with pytest.raises(ForensicsError, match="no option to skip"):
        TITAN.spell([(21, 22)], _schedule(), 20)
    assert TITAN.spell([], _schedule(), 20) == ""
    flag = write_flag(TITAN, [(21, 22), (40, 40)], _schedule(), 20)
    assert flag.flag is None and flag.refusal == NO_SKIP and flag.consequence == NO_SKIP
    assert restart_line(flag) is None  # no restart-torchtitan.flags is written
    # beside the other trainers' flags for the same iterations (they are written as before)
    flags = write_all(get_trainer(MEGATRON_LM), [(21, 22)], _schedule(), 20)
    assert flags[TORCHTITAN].refusal == NO_SKIP and flags[MEGATRON_LM].flag


def test_the_pin_loads_the_rollback_step_and_leads_the_line() -> None:
    assert TITAN.pin(20) == "--checkpoint.load_step=20"
    assert TITAN.pin_leads_flags(TITAN.pin(20))
    # no Megatron blend, no early stop: each refused in one line
    with pytest.raises(ForensicsError, match="^torchtitan 0.3.0 reads no Megatron blend"):
        TITAN.data_words([{"prefix": "/d/a", "weight": 1.0}])
    with pytest.raises(ForensicsError, match="^torchtitan 0.3.0 has no option to stop after"):
        TITAN.exit_words(120)


def test_its_loop_trains_every_global_batch_in_order() -> None:
    schedule = _schedule()
    end = TITAN.run(schedule.loop_start(20), [], until=25)
    assert [(d.iteration, d.first_sample, d.size, d.trained) for d in end.draws] == [
        (i, 8 * (i - 1), 8, True) for i in range(21, 26)
    ]
    assert (end.iteration, end.consumed_samples, end.position) == (25, 200, 200)
    with pytest.raises(ForensicsError, match="no option to skip"):
        TITAN.run(schedule.loop_start(20), [21], until=25)


def test_the_action_is_removing_the_culprit_at_any_share_with_no_stopgap() -> None:
    ahead = {"share_of_remaining_samples": 0.001, "iterations_holding_it": 3, "iterations": 80}
    megatron = decide_action(ahead, skip_iterations=5, blocked_documents=9, command="forensics x")
    assert megatron["kind"] == SKIP  # under the material share: a skip trainer skips
    titan = decide_action(
        ahead, skip_iterations=5, blocked_documents=9, command="forensics x", no_skip=NO_SKIP
    )
    assert titan["kind"] == REBUILD and titan["command"] == "forensics x"
    assert titan["stopgap"] is None and titan["why"].endswith(NO_SKIP)
    own = decide_action(
        ahead, skip_iterations=5, blocked_documents=9, command=None, no_skip=NO_SKIP
    )
    assert own["kind"] == REMOVE and own["stopgap"] is None


def _dcp_checkpoint(folder: Path) -> None:
    """A checkpoint folder as torch's DCP writer leaves it (torchtitan saves through
    `dcp.save`/`dcp.async_save`, dcp.py:228-328): shards, then `.metadata` last."""
    import torch
    import torch.distributed.checkpoint as dcp

    dcp.save({"train_state": {"step": torch.tensor(1)}}, checkpoint_id=str(folder))


def test_checkpoints_are_the_step_folders_torchtitan_would_load(tmp_path: Path) -> None:
    folder = tmp_path / "outputs" / "checkpoint"  # dump_folder / checkpoint.folder
    for step in (10, 20, 30):
        _dcp_checkpoint(folder / f"step-{step}")
    (folder / "step-40").mkdir()  # a save in progress: no .metadata yet
    (folder / "step-40" / "__0_0.distcp").write_bytes(b"partial")
    (folder / "step-50").mkdir()  # a last save in HF safetensors (last_save_in_hf)
    (folder / "step-50" / "model.safetensors.index.json").write_text("{}")
    (folder / "iter_0000060").mkdir()  # Megatron's name: not torchtitan's
    (folder / "notes.txt").write_text("step-70")
    assert TITAN.checkpoints(folder) == [10, 20, 30, 50]
    assert TITAN.checkpoints(tmp_path / "missing") == []
    assert get_trainer(MEGATRON_LM).checkpoints(folder) == [60]  # the default: iter_N
    (folder / "iter_0000060").rmdir()
    # `forensics triage --checkpoints DIR` reads the folders of the run's trainer
    assert parse_checkpoints(str(folder), TITAN) == (10, 20, 30, 50)


def test_torchtitan_reads_the_pin_and_the_folder_as_we_do(tmp_path: Path) -> None:
    """torchtitan's own ConfigManager parses the pin to load_step R, and its own
    `_find_load_step` takes the latest of the folders we list (tests/oracles/
    torchtitan_checkpoint_oracle.py, in .venv-titan)."""
    python = titan_python()
    folder = tmp_path / "checkpoint"
    for step in (10, 20, 30):
        _dcp_checkpoint(folder / f"step-{step}")
    (folder / "step-40").mkdir()  # a save in progress
    done = subprocess.run(
        [python, str(ORACLES / "torchtitan_checkpoint_oracle.py"), str(folder), TITAN.pin(20)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said == {"load_step": 20, "latest": max(TITAN.checkpoints(folder))}
    assert TITAN.checkpoints(folder) == [10, 20, 30]


def test_the_run_config_asks_its_trainer_for_checkpoints(tmp_path: Path) -> None:
    from dataloaders.run_config import RunConfig

    folder = tmp_path / "checkpoint"
    _dcp_checkpoint(folder / "step-20")
    (folder / "iter_0000030").mkdir()
    blend = [{"prefix": str(tmp_path / "web"), "weight": 1.0}]
    stages = [{"start_iteration": 1, "blend": blend}]
    data = {"format": "megatron", "seq_length": 16, "stages": stages}
    raw = {"checkpoint_dir": str(folder), "checkpoints": [5]}
    training = {"global_batch_size": 8, "train_iters": 100}
    titan = RunConfig.model_validate(
        {**raw, "training": {**training, "trainer": TORCHTITAN}, "data": data}
    )
    assert titan.available_checkpoints() == [5, 20]
    megatron = RunConfig.model_validate({**raw, "training": training, "data": data})
    assert megatron.available_checkpoints() == [5, 30]


def test_the_example_config_is_read_by_torchtitans_trainer() -> None:
    from dataloaders.run_config import load_config
    from forensics_testing.repo_paths import REPO_ROOT

    config = load_config(REPO_ROOT / "configs" / "example-torchtitan.yaml")
    assert config.training.trainer == TORCHTITAN  # the family's default, not Megatron-LM's
    assert config.data.accumulation(config.training.global_batch_size) == 8
    raw = config.model_dump(mode="json", exclude_none=True)
    raw["training"]["trainer"] = MEGATRON_LM
    with pytest.raises(ValueError, match="a torchtitan data loader is read by torchtitan's"):
        type(config).model_validate(raw)


def test_removing_by_hand_restarts_with_the_pin(tmp_path: Path) -> None:
    """A block list the rebuild cannot remove (not whole files) is the user's to remove; the
    restart they are shown still loads the rollback with --checkpoint.load_step=R."""
    from types import SimpleNamespace

    from dataloaders.run_config import load_config
    from forensics.report.first_screen import commands
    from forensics.report.skip_view import ActionView, ReportSkip
    from forensics.skip.action import action_for_plan
    from forensics_testing.repo_paths import REPO_ROOT

    config = load_config(REPO_ROOT / "configs" / "example-torchtitan.yaml")
    ahead = {"share_of_remaining_samples": 0.002, "iterations_holding_it": 2, "iterations": 90}
    skip = SimpleNamespace(
        trainer=TORCHTITAN, ahead=ahead, ranges=[(21, 25)], documents={"fineweb": [3, 9]},
        rollback={"iteration": 20}, step=25,
    )  # fmt: skip
    action = action_for_plan(skip, config, tmp_path / "spike-25", get_trainer(TORCHTITAN))
    assert action["kind"] == REMOVE and action["restart_pin"] == "--checkpoint.load_step=20"
    view = ReportSkip([[21, 25]], TORCHTITAN, {}, action=ActionView.from_dict(action))
    restart = commands(view, 20)[-1]
    assert restart.text == "(your restart on the filtered data) --checkpoint.load_step=20"
