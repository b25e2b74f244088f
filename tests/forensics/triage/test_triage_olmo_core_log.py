"""OLMo-core's console log, as its own Trainer wrote it (ai2-olmo-core 3.0.0 on CPU, the run of
scripts/real_loop_olmo.py): triage reads it and `forensics watch` follows it in pieces, with one
row per step. A checkpoint step logs two records (train/CE loss before the save, throughput
after it), which are one row; a step the trainer skipped (steps_to_skip) has no loss.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from forensics.cli import app
from forensics.errors import ForensicsError
from forensics.triage.formats.olmo_core import number, skipped_steps
from forensics.triage.readers import detect_format, read_log_with_warnings
from forensics.watch.parse import ChunkParser, detect_line_format
from forensics_testing.loss_curves import make, megatron_lines
from forensics_testing.refusal import refused

# olmo_core_console.log: the library's own lines, verbatim (the start of a run and its steps
# 18-21, checkpointing every 20 steps); SKIP: the trainer's steps_to_skip warning
# (olmo_core/train/trainer.py `_fit_epoch`)
LOG = (Path(__file__).parent / "olmo_core_console.log").read_text().splitlines()
PREAMBLE = "\n".join(LOG[:16])  # prints and logging before the first step
RECORDS = "\n".join(LOG[16:])
SKIP = (
    "2026-12-03 17:10:00.000\tvm:0\tolmo_core.train.trainer:1712\tWARNING\t"
    "Skipping training on step 1,022 intentionally..."
)
STEPS = {18: 3.074, 19: 3.214, 20: 3.026, 21: 3.175}


def _log(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "train.log"
    path.write_text(text + "\n")
    return path


def test_triage_reads_one_row_per_step(tmp_path):
    path = _log(tmp_path, PREAMBLE + "\n" + RECORDS)
    assert detect_format(path) == "olmo-core"
    table, notes = read_log_with_warnings(path)
    assert notes == []
    assert dict(zip(table["step"], table["loss"], strict=True)) == STEPS
    row = table.filter(table["step"] == 20).row(0, named=True)
    assert row["tokens"] == 40960 and row["checkpoint_save_duration_s"] == pytest.approx(0.5837)
    assert table.filter(table["step"] == 19)["throughput_device_flopsps"][0] == 5.937e9


def test_watch_gets_each_step_once_whatever_the_pieces(tmp_path):
    path = _log(tmp_path, PREAMBLE + "\n" + RECORDS + "\n" + SKIP)
    lines = list(enumerate(path.read_text().splitlines(), start=1))
    for size in (1, 2, 3, 7, len(lines)):
        parser = ChunkParser(path, "olmo-core")
        got: dict[int, float] = {}
        for i in range(0, len(lines), size):
            rows = parser.parse(lines[i : i + size])
            for step, loss in [] if rows is None else rows.select("step", "loss").rows():
                assert step not in got, (size, step)
                got[step] = loss
        # the newest step waits for another step's marker: it may still log a second record
        assert got == {s: v for s, v in STEPS.items() if s < 21}, size
        assert parser.notes == []


def test_a_preamble_is_not_taken_for_another_format(tmp_path):
    """The lines a trainer prints before its first metrics (one holding a comma) leave the
    format undecided until the first record."""
    path = _log(tmp_path, PREAMBLE.split("\n")[0])  # a library's print, before any logging
    assert detect_line_format(path, "auto") is None
    path = _log(tmp_path, PREAMBLE)
    assert detect_line_format(path, "auto") is None
    with pytest.raises(ForensicsError, match="OLMo-core log without"):
        detect_format(path)
    path.write_text(PREAMBLE + "\n" + RECORDS + "\n")
    assert detect_line_format(path, "auto") == "olmo-core"


def test_skipped_steps_and_numbers():
    assert skipped_steps([SKIP, RECORDS]) == [1022]
    assert [number(x) for x in ("1,576", "5.741B", "1.23E-05", "nan")] == [
        "1576",
        "5741000000.0",
        "1.23E-05",
        "nan",
    ]


def test_checkpoints_dir_is_read_as_the_logs_trainer_saves_it(tmp_path):
    """`triage --checkpoints SAVE` without a config asks the trainer whose log this is: an
    OLMo-core log's save folder holds `stepN` checkpoints (the library's own naming and
    listing: dataloaders/trainers/olmo_core.py, checked against OLMo-core in
    tests/dataloaders/olmo_core/test_olmo_core_trainer_run.py), a Megatron log's `iter_N`."""
    save = tmp_path / "save"
    (save / "step20").mkdir(parents=True)
    (save / "step20" / ".metadata").write_bytes(b"")  # a model-only checkpoint (find_checkpoints)
    (save / "step40").mkdir()  # named like one, holds nothing: not a checkpoint
    path = _log(tmp_path, PREAMBLE + "\n" + RECORDS)
    args = ["triage", str(path), "--checkpoints", str(save)]
    done = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "out")])
    assert done.exit_code == 0, done.output
    megatron = tmp_path / "megatron.log"
    megatron.write_text("\n".join(megatron_lines(make("healthy", n=50))) + "\n")
    done = CliRunner().invoke(
        app, ["triage", str(megatron), "--checkpoints", str(save), "--out", str(tmp_path / "o2")]
    )
    refused(done, f"--checkpoints {save}: no megatron-lm checkpoint folders (iter_N) found")
