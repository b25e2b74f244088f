"""Never HEALTHY by mistake.

Non-finite training in every form Megatron logs it is a divergence event; a log of nothing but
nan is an error; a corrupt TensorBoard record is counted and reported instead of silently ending
the read. The Megatron forms follow its source (NVIDIA/Megatron-LM d98e8a64ddf34856e74b24714e3bedb2
f5a39553, megatron/training/training.py): a skipped iteration whose loss is nan/inf bumps
`number of nan iterations` (3303-3315); the loss is summed only over applied iterations and printed
only when its interval average is >= 0 (3304-3310, 3625-3626), so a nan loss is left out of the
line; the grad norm is printed as is (3633).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from forensics.cli import app
from forensics.errors import ForensicsError
from forensics.triage.analyze import triage
from forensics.triage.readers import read_log, read_log_with_warnings
from forensics_testing import loss_curves
from forensics_testing.repo_paths import REPO_ROOT

runner = CliRunner()
LOGS = REPO_ROOT.parent / "shared" / "curves" / "megatron_logs"
needs_shared = pytest.mark.skipif(not LOGS.is_dir(), reason="../shared/curves not present")
BREAK = 1001


def _healthy_lines(n: int = 1200, template: str = "synthetic") -> list[str]:
    """Healthy lines: from our generator, or a verbatim BLOOM-176B Megatron-DeepSpeed line
    (launcher prefix and all fields kept) with its iteration, loss and grad norm replaced."""
    df = loss_curves.healthy(n)
    if template == "synthetic":
        return loss_curves.megatron_lines(df)
    real = (LOGS / "train_tr11-176B-ml_chronicles.log").read_text().splitlines()
    line = next(ln for ln in real if "grad norm:" in ln and "lm loss:" in ln)
    out = []
    for step, loss, grad in df.select("step", "loss", "grad_norm").iter_rows():
        ln = re.sub(r"iteration\s+\d+/", f"iteration {step:8d}/", line)
        ln = re.sub(r"lm loss: [^|]+\|", f"lm loss: {loss:.6E} |", ln)
        out.append(re.sub(r"grad norm: [^|]+\|", f"grad norm: {grad:.3f} |", ln))
    return out


def _corrupt(lines: list[str], form: str) -> list[str]:
    """Replace the line of iteration BREAK (and, for a lasting nan, every later one)."""
    out = []
    for ln in lines:
        step = int(re.search(r"iteration\s+(\d+)", ln).group(1))
        if step == BREAK or (form.endswith("lasting") and step > BREAK):
            if form.startswith("lm_loss_nan"):
                ln = re.sub(r"lm loss: [^|]+\|", "lm loss: nan |", ln)
            elif form == "grad_norm_nan":
                ln = re.sub(r"grad norm: [^|]+\|", "grad norm: nan |", ln)
            elif form == "counter":  # a skipped nan iteration: loss left out, counter at 1
                ln = re.sub(r" lm loss: [^|]+\|", "", ln)
                ln = ln.replace("skipped iterations:   0", "skipped iterations:   1")
                ln = ln.replace("nan iterations:   0", "nan iterations:   1")
            elif form == "omitted":  # a nan loss on an applied iteration: left out, counters 0
                ln = re.sub(r" lm loss: [^|]+\|", "", ln)
        out.append(ln)
    return out


@pytest.mark.parametrize("template", ["synthetic", pytest.param("bloom176b", marks=needs_shared)])
@pytest.mark.parametrize(
    "form", ["lm_loss_nan", "lm_loss_nan_lasting", "grad_norm_nan", "counter", "omitted"]
)
def test_every_megatron_nan_form_is_a_divergence(tmp_path: Path, form: str, template: str) -> None:
    log = tmp_path / "train.log"
    log.write_text("\n".join(_corrupt(_healthy_lines(template=template), form)) + "\n")
    r = triage(read_log(log))
    assert r.summary["status"] == "act"
    (div,) = [e for e in r.events if e["kind"] == "divergence"]
    assert div["step"] == BREAK
    summary = div["evidence"]["summary"]
    assert summary.startswith(f"training went non-finite at step {BREAK}")
    if form == "lm_loss_nan_lasting":
        assert "and 199 later logged steps" in summary
    else:
        assert f"finite again from step {BREAK + 1}" in summary


def test_cli_says_act_and_divergence_on_a_nan(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("\n".join(_corrupt(_healthy_lines(), "counter")) + "\n")
    out = tmp_path / "out"
    res = runner.invoke(app, ["triage", str(log), "--out", str(out)])
    assert res.exit_code == 0, res.output
    first = res.output.splitlines()[0]
    assert first.startswith("ACT") and "divergence" in first, res.output
    assert f"divergence @ {BREAK}: training went non-finite at step {BREAK}" in res.output
    assert "HEALTHY" not in res.output
    (div,) = [e for e in json.loads((out / "events.json").read_text()) if e["kind"] == "divergence"]
    assert div["step"] == BREAK


def test_ci_padding_rows_and_calibration_skips_stay_healthy(tmp_path: Path) -> None:
    # All-nan rows after the end (CI golden files) are no evidence; nor is an fp16 interval whose
    # iterations were all skipped (no loss to print, nan counter 0).
    df = loss_curves.healthy(1200)
    lines = loss_curves.megatron_lines(df)
    lines[9] = re.sub(r" lm loss: [^|]+\|", "", lines[9]).replace(
        "skipped iterations:   0", "skipped iterations:   1"
    )
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    assert triage(read_log(log)).summary["status"] == "healthy"
    csv = tmp_path / "golden.csv"
    pad = pl.DataFrame({"step": range(1201, 1301)}).with_columns(
        pl.lit(float("nan")).alias("loss"), pl.lit(float("nan")).alias("iteration_time")
    )
    df.select("step", "loss", pl.lit(1.2).alias("iteration_time")).vstack(
        pad.with_columns(pl.col("step").cast(pl.Int64))
    ).write_csv(csv)
    r = triage(read_log(csv))
    assert r.summary["status"] == "healthy" and r.events == []


@needs_shared
def test_real_megatron_lines_skipped_interval_and_omitted_loss() -> None:
    # Real lines: iteration 10 of a fp16 run printed no loss with all 10 iterations skipped
    # (calibration, not a nan); BLOOM 104B's iteration 9027 printed no loss with both counters
    # at 0 (a nan on an applied iteration): the first is healthy, the second a divergence.
    r = triage(read_log(LOGS / "experiments_gpt2-meg_meg_gpt2_base_n16_dp1_tp4_pp16-1809577.log"))
    assert "divergence" not in r.summary["events"]
    r = triage(read_log(LOGS / "train_tr8-104B-wide_chronicles.log"))
    (div,) = [e for e in r.events if e["kind"] == "divergence"]
    assert div["end_step"] >= 9027


@pytest.mark.parametrize("body", ["step,loss\n1,nan\n2,nan\n3,inf\n", "step,loss,lr\n1,nan,1\n"])
def test_a_log_with_no_finite_loss_is_an_error(tmp_path: Path, body: str) -> None:
    f = tmp_path / "all_nan.csv"
    f.write_text(body)
    with pytest.raises(ForensicsError, match="no finite loss") as err:
        read_log(f)
    assert str(f) in str(err.value) and "\n" not in str(err.value)
    proc = subprocess.run(
        [sys.executable, "-m", "forensics.cli", "triage", str(f), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "400"},
    )
    (line,) = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and line.startswith("error: ") and "no finite loss" in line
    assert not (tmp_path / "o" / "summary.json").exists()


def _events_file(path: Path, n: int) -> None:
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    with open(path, "wb") as fh:
        w = RecordWriter(fh)
        w.write(event_pb2.Event(wall_time=0.0, file_version="brain.Event:2").SerializeToString())
        for step in range(1, n + 1):
            v = summary_pb2.Summary.Value(tag="lm loss", simple_value=3.0 - step * 1e-4)
            ev = event_pb2.Event(wall_time=1.0, step=step, summary=summary_pb2.Summary(value=[v]))
            w.write(ev.SerializeToString())
        w.flush()


def _record_offsets(data: bytes) -> list[int]:
    import struct

    offs, off = [], 0
    while off < len(data):
        offs.append(off)
        (length,) = struct.unpack_from("<Q", data, off)
        off += 16 + length
    return offs


@pytest.mark.parametrize("where", ["data", "length"])
def test_flipped_byte_in_tensorboard_file_is_counted_not_half_the_run(
    tmp_path: Path, where: str
) -> None:
    f = tmp_path / "events.out.tfevents.1.host"
    _events_file(f, 1500)
    data = bytearray(f.read_bytes())
    off = _record_offsets(bytes(data))[751]  # the record of step 751
    data[off + (20 if where == "data" else 2)] ^= 0x10
    f.write_bytes(bytes(data))
    # tensorboard's own loader stops at the bad CRC (event_file_loader.py, `Load`: DataLossError
    # -> break): half the run would vanish without a word.
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader

    assert sum(1 for _ in RawEventFileLoader(str(f)).Load()) == 751
    df, notes = read_log_with_warnings(f)
    assert df.height == 1499 and 751 not in df["step"].to_list()
    assert df["step"][-1] == 1500
    (note,) = [n for n in notes if "unreadable" in n]
    assert "1 unreadable records skipped" in note and str(f) in note
    assert ("1 failed the data CRC" if where == "data" else "1 the length CRC") in note
