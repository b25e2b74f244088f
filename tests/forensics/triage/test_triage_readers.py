"""Readers: every format into the same table; bad input is one clear error or a named warning."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import polars as pl
import pytest

from forensics.errors import ForensicsError
from forensics.triage.columns import canonical_name
from forensics.triage.readers import read_log, read_log_with_warnings
from forensics_testing import loss_curves
from forensics_testing.repo_paths import REPO_ROOT

SHARED = REPO_ROOT.parent / "shared"
LOGS = SHARED / "curves" / "megatron_logs"
needs_shared = pytest.mark.skipif(not LOGS.is_dir(), reason="../shared/curves not present")


@pytest.mark.parametrize(
    ("raw", "name"),
    [
        ("lm loss", "loss"),
        ("train/loss", "loss"),
        ("grad-norm", "grad_norm"),
        ("learning-rate", "lr"),
        ("train/learning_rate", "lr"),
        ("loss-scale", "loss_scale"),
        ("consumed tokens", "tokens"),
        ("lm loss web", "loss:web"),
        ("loss/code", "loss:code"),
        ("web lm loss", "loss:web"),
        ("number of nan iterations", "number_of_nan_iterations"),
        ("mtp_1 loss", "mtp_1_loss"),
    ],
)
def test_canonical_names(raw: str, name: str) -> None:
    assert canonical_name(raw) == name


@needs_shared
def test_real_megatron_deepspeed_log_with_launcher_prefix_and_seconds() -> None:
    df, notes = read_log_with_warnings(LOGS / "train_tr11-176B-ml_chronicles.log")
    assert df["step"].dtype == pl.Int64 and df["step"].is_sorted()
    row = df.filter(pl.col("step") == 31219).row(0, named=True)
    assert row["loss"] == pytest.approx(5.098124)
    assert row["grad_norm"] == pytest.approx(960.351)
    assert row["lr"] == pytest.approx(5.279e-05)
    assert row["tokens"] == pytest.approx(97850851328)
    assert row["iteration_time_s"] == pytest.approx(106.36)  # "(s)" stays seconds
    assert "tflops" in df.columns  # an unknown field survives
    # lines 14-18 are cut off after "learning": warned by line number, loss left missing
    assert any("line 14" in n and "cut off" in n for n in notes)
    assert df.filter(pl.col("step") == 42780)["loss"].is_null().all()


@needs_shared
def test_real_megatron_log_ms_restart_nan_and_validation() -> None:
    df, notes = read_log_with_warnings(LOGS / "train_tr8-104B-wide_chronicles.log")
    # the excerpt restarts (7000-7220, then 6900...): the later attempt wins
    assert 7220 not in df["step"].to_list() and 6900 in df["step"].to_list()
    assert any("restart" in n for n in notes)
    row = df.filter(pl.col("step") == 8738).row(0, named=True)
    assert row["iteration_time_s"] == pytest.approx(61.9476)  # ms -> s
    assert row["loss_scale"] == 65536.0
    assert df.filter(pl.col("step") == 9027)["loss"].is_null().all()  # loss not printed


def test_restart_keeps_last_attempt_and_nan_loss(tmp_path: Path) -> None:
    df = loss_curves.healthy(30)
    lines = loss_curves.megatron_lines(df.filter(pl.col("step") <= 20), prefix="[default3]:")
    lines += loss_curves.megatron_lines(df.filter(pl.col("step") > 10), prefix="", ms=False)
    lines[5] = lines[5].replace("lm loss:", "lm loss: nan | old loss:")
    log = tmp_path / "train.log"
    log.write_text("some preamble\n" + "\n".join(lines) + "\n")
    out, notes = read_log_with_warnings(log)
    assert out["step"].to_list() == list(range(1, 31))
    assert any("10 rows superseded" in n for n in notes)
    assert out.filter(pl.col("step") == 6)["loss"].is_nan().all()


def test_per_domain_losses_become_curves(tmp_path: Path) -> None:
    log = tmp_path / "m.log"
    log.write_text(
        " iteration 1/ 10 | lm loss: 3.0 | lm loss web: 3.2 | lm loss code: 2.1 | grad norm: 1 |\n"
        " iteration 2/ 10 | lm loss: 2.9 | lm loss web: 3.1 | lm loss code: 2.0 | grad norm: 1 |\n"
    )
    df = read_log(log)
    assert {"loss", "loss:web", "loss:code"} <= set(df.columns)
    assert df["loss:code"].to_list() == [2.1, 2.0]


def test_non_numeric_field_is_warned_by_line(tmp_path: Path) -> None:
    f = tmp_path / "curve.csv"
    f.write_text("# source: test\nstep,loss,lr\n1,3.0,1e-4\n2,oops,1e-4\n3,2.8,1e-4\n")
    with pytest.warns(UserWarning, match=r"line 4: 'loss' = 'oops'"):
        df = read_log(f)
    assert df["loss"].to_list()[0] == 3.0 and df["loss"][1] is None


def test_wandb_csv_export(tmp_path: Path) -> None:
    f = tmp_path / "wandb_export.csv"
    f.write_text(
        '"Step","run-7 - train/loss","run-7 - train/loss__MIN","run-7 - train/loss__MAX"\n'
        "10,3.5,3.4,3.6\n20,3.2,3.1,3.3\n"
    )
    df = read_log(f)
    assert df.columns == ["step", "loss"] and df["loss"].to_list() == [3.5, 3.2]


def test_jsonl_bad_line_warned_and_skipped(tmp_path: Path) -> None:
    f = tmp_path / "metrics.jsonl"
    f.write_text(
        '{"step": 1, "train": {"loss": 3.0, "grad_norm": 1.0}}\n{"step": 2, "loss"\n'
        '{"step": 3, "train": {"loss": 2.8, "grad_norm": 1.1}}\n'
    )
    df, notes = read_log_with_warnings(f)
    assert df["step"].to_list() == [1, 3] and df["loss"].to_list() == [3.0, 2.8]
    assert any("line 2" in n and "not valid JSON" in n for n in notes)


def test_hf_trainer_state(tmp_path: Path) -> None:
    f = tmp_path / "trainer_state.json"
    hist = [
        {"epoch": 0.1, "grad_norm": 1.5, "learning_rate": 1e-4, "loss": 3.1, "step": 10},
        {"epoch": 0.2, "eval_loss": 3.0, "step": 10},
        {"epoch": 0.2, "grad_norm": 1.2, "learning_rate": 9e-5, "loss": 2.9, "step": 20},
        {"train_runtime": 12.0, "step": 20},
    ]
    f.write_text(json.dumps({"global_step": 20, "log_history": hist}))
    df = read_log(f)
    assert df["step"].to_list() == [10, 20]
    assert df["loss"].to_list() == [3.1, 2.9] and df["lr"].to_list() == [1e-4, 9e-5]
    assert df["val_loss"].to_list()[0] == 3.0


def _write_events(path: Path, rows: list[tuple[int, str, float]]) -> None:
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    with open(path, "wb") as fh:
        w = RecordWriter(fh)
        w.write(event_pb2.Event(wall_time=0.0, file_version="brain.Event:2").SerializeToString())
        for step, tag, value in rows:
            v = summary_pb2.Summary.Value(tag=tag, simple_value=value)
            ev = event_pb2.Event(wall_time=1.0, step=step, summary=summary_pb2.Summary(value=[v]))
            w.write(ev.SerializeToString())
        w.flush()


def test_tensorboard_megatron_tags(tmp_path: Path) -> None:
    rows = []
    for s in range(1, 6):
        rows += [(s, "lm loss", 3.0 - 0.1 * s), (s, "grad-norm", 1.0), (s, "learning-rate", 1e-4)]
        rows += [(s, "loss-scale", 4096.0), (s * 512, "lm loss vs samples", 9.0)]
    f = tmp_path / "events.out.tfevents.123.host"
    _write_events(f, rows)
    df = read_log(tmp_path)  # a run directory
    assert df["step"].to_list() == [1, 2, 3, 4, 5]
    assert df["loss"].to_list() == pytest.approx([2.9, 2.8, 2.7, 2.6, 2.5])
    assert {"grad_norm", "lr", "loss_scale"} <= set(df.columns)


def test_truncated_tensorboard_file_keeps_complete_records(tmp_path: Path) -> None:
    f = tmp_path / "events.out.tfevents.1.host"
    _write_events(f, [(s, "lm loss", 3.0) for s in range(1, 11)])
    data = f.read_bytes()
    f.write_bytes(data[:-7])
    df, notes = read_log_with_warnings(f)
    assert df["step"].to_list() == list(range(1, 10))
    assert any("truncated TensorBoard record" in n for n in notes)
    g = tmp_path / "x" / "events.out.tfevents.2.host"
    g.parent.mkdir()
    g.write_bytes(struct.pack("<Q", 50) + b"\x00" * 10)
    with pytest.raises(ForensicsError, match="no scalar summaries"):
        read_log(g)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "empty"),
        ("step,grad_norm\n1,0.5\n2,0.4\n", "no loss field"),
        ("step,loss\n", "no rows"),
        ("hello world\nnothing here\n", "cannot tell the log format"),
        (" iteration 1/ 10 | grad norm: 1.0 |\n", "no loss field"),
        ("step,loss\n1,abc\n2,def\n", "no loss values"),
    ],
)
def test_bad_input_is_one_clear_error(tmp_path: Path, content: str, message: str) -> None:
    f = tmp_path / "bad.log"
    f.write_text(content)
    with pytest.raises(ForensicsError, match=message) as err:
        read_log(f)
    assert str(f) in str(err.value) and "\n" not in str(err.value)


def test_missing_file_and_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(ForensicsError, match="no such file"):
        read_log(tmp_path / "nope.log")
    (tmp_path / "a.csv").write_text("step,loss\n1,2\n")
    with pytest.raises(ForensicsError, match="unknown"):
        read_log(tmp_path / "a.csv", format="parquet")


def test_logger_prefix_with_pipes_and_timestamps(tmp_path: Path) -> None:
    log = tmp_path / "nemo.log"
    log.write_text(
        "INFO | rank0 | [2024-05-01 12:00:01] iteration 5/ 100 | lm loss: 3.5 | grad norm: 2.0 |\n"
        "INFO | rank0 | [2024-05-01 12:00:02] iteration 6/ 100 | lm loss: 3.4 | grad norm: 1.9 |\n"
    )
    df = read_log(log)
    assert df["step"].to_list() == [5, 6] and df["loss"].to_list() == [3.5, 3.4]
    assert df["grad_norm"].to_list() == [2.0, 1.9]
