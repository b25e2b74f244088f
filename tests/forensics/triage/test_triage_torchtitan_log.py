"""torchtitan's console log: triage reads it (`--format torchtitan`, and `auto`), one row per
logged step, and `forensics watch` follows it in pieces.

The log of the first test is written by torchtitan 0.3.0's own `MetricsProcessor.log` and
`log_validation` through its own `init_logger` (tests/oracles/torchtitan_metrics_log.py in
.venv-titan), colors on as its default is. The others build lines from its format strings,
copied from torchtitan 0.3.0 components/metrics.py:523-532 and 566-572 (pytorch/torchtitan
1fdf90d3f9b7, the commit the wheel's files are), for the cases a run seldom prints: no
colors under torchrun's rank prefix, `mfu: N/A`, a nan grad norm, a restart, the non-finite loss
that stops the job (trainer.py:994-998) and torchtitan 0.1's line (v0.1.0, f7084fc78567,
metrics.py:401-407).
"""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest

from forensics.errors import ForensicsError
from forensics.triage.analyze import triage
from forensics.triage.readers import detect_format, read_log_with_warnings
from forensics.watch.parse import ChunkParser
from forensics_testing.loss_curves import SPIKE_STEP, make
from forensics_testing.titan_oracle import write_titan_log

# a run whose loss steps up at SPIKE_STEP and stays up, logged as torchtitan does by default:
# step 1 and every 10th step (metrics.log_freq = 10, metrics.py:279 and 362-363)
CURVE = make("malignant_step", n=4000).filter((pl.col("step") % 10 == 0) | (pl.col("step") == 1))


def test_triage_reads_the_log_torchtitan_writes(tmp_path: Path) -> None:
    steps, loss, norm = (CURVE[c].to_list() for c in ("step", "loss", "grad_norm"))
    spec = {
        "color": True,
        "log_freq": 10,
        "steps": [[s, x, x + 0.5, g] for s, x, g in zip(steps, loss, norm, strict=True)],
        "validations": [[1000, 4.25], [2000, 4.125]],
    }
    path = write_titan_log(tmp_path / "train.log", spec)
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert (
        f"\x1b[31mstep:  1  \x1b[32mloss: {loss[0]:8.5f}  \x1b[38;2;180;60;0mgrad_norm: " in first
    )
    assert detect_format(path) == "torchtitan"
    table, notes = read_log_with_warnings(path)
    assert notes == []
    assert table["step"].to_list() == steps
    assert table["loss"].to_list() == [round(x, 5) for x in loss]  # `{:8.5f}`
    assert table["grad_norm"].to_list() == [round(g, 4) for g in norm]  # `{:7.4f}`
    assert table.filter(pl.col("val_loss").is_not_null()).select("step", "val_loss").rows() == [
        (1000, 4.25),
        (2000, 4.125),
    ]
    assert set(table["memory_gib"]) == {42.25} and table["tps"].min() > 0
    spikes = [e for e in triage(table).events if e["kind"] == "spike"]
    assert [(e["step"], e["verdict"]) for e in spikes] == [(SPIKE_STEP, "malignant")]


def _line(step: int, loss: float, grad_norm: float, mfu: float | None) -> str:
    """One record as torchtitan 0.3.0 prints it without colors (NoColor's fields are "")."""
    mfu_str = f"{mfu:.2f}%" if mfu is not None else "N/A"
    tps, tflops, gib, pct = 12345.6, 1234.5678, 42.25, 53.4
    message = (
        f"step: {step:2}  "
        f"loss: {loss:8.5f}  "
        f"grad_norm: {grad_norm:7.4f}  "
        f"memory: {gib:5.2f}GiB"
        f"({pct:.2f}%)  "
        f"tps: {round(tps):,}  "
        f"tflops: {tflops:,.2f}  "
        f"mfu: {mfu_str}"
    )
    return f"[rank0]:[titan] 2026-12-07 04:40:{step % 60:02d},123 - root - INFO - {message}"


def _log(tmp_path: Path) -> Path:
    lines = [
        "[rank0]:[titan] 2026-12-07 04:39:00,001 - root - INFO - Training starts at step 1",
        _line(1, 10.5, 3.25, 41.5),
        _line(10, 9.75, float("nan"), None),  # quantized: mfu N/A; a nan grad norm
        _line(20, 9.25, 1.5, None),
        "[rank0]:[titan] 2026-12-07 04:41:00,001 - root - INFO - Training starts at step 11",
        _line(20, 9.125, 1.25, 40.0),  # the restarted job re-logs step 20
        _line(30, 8.5, 1.0, 40.0),
        "[rank0]: RuntimeError: Loss is not finite (global_avg_loss=nan) at step 40. "
        "Stopping training.",
    ]
    path = tmp_path / "titan.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_triage_reads_every_field_under_the_rank_prefix(tmp_path: Path) -> None:
    path = _log(tmp_path)
    assert _line(10, 9.75, 1.5, None).endswith(
        "- root - INFO - step: 10  loss:  9.75000  grad_norm:  1.5000  memory: 42.25GiB(53.40%)  "
        "tps: 12,346  tflops: 1,234.57  mfu: N/A"
    )
    assert detect_format(path) == "torchtitan"
    table, notes = read_log_with_warnings(path, "torchtitan")
    assert table["step"].to_list() == [1, 10, 20, 30, 40]
    assert table["loss"].to_list()[:4] == [10.5, 9.75, 9.125, 8.5]  # the restart's 20 wins
    assert math.isnan(table["loss"][4])  # the step that stopped the job
    assert math.isnan(table["grad_norm"][1])
    assert table["mfu"].to_list()[:4] == [41.5, None, 40.0, 40.0]
    assert table["tps"][0] == 12346 and table["tflops"][0] == 1234.57
    assert any("stopped at step 40" in n and "Loss is not finite" in n for n in notes)
    assert any("superseded by a later restart" in n for n in notes)


def test_torchtitan_0_1_lines_read_too(tmp_path: Path) -> None:
    """v0.1.0 (f7084fc78567) metrics.py:401-407: no grad_norm, `loss: {:7.4f}`, `mfu: {:.2f}%`."""
    path = tmp_path / "old.log"
    path.write_text(
        "[titan] 2025-01-01 00:00:01,000 - root - INFO - step:  1  loss: 10.8123  memory: "
        "12.50GiB(15.80%)  tps: 1,024  tflops: 0.50  mfu: 0.05%\n",
        encoding="utf-8",
    )
    table, _ = read_log_with_warnings(path)
    assert table.select("step", "loss", "mfu").rows() == [(1, 10.8123, 0.05)]


def test_a_log_without_a_step_line_yet_is_named(tmp_path: Path) -> None:
    path = tmp_path / "early.log"
    path.write_text(
        "[titan] 2026-12-07 04:39:00,001 - root - INFO - Starting job: Llama 3 debug training\n",
        encoding="utf-8",
    )
    with pytest.raises(ForensicsError, match="a torchtitan log without a 'step: N loss: ...'"):
        detect_format(path)


def test_watch_gets_each_step_once_whatever_the_pieces(tmp_path: Path) -> None:
    path = _log(tmp_path)
    lines = list(enumerate(path.read_text().splitlines(), start=1))
    for size in (1, 3, len(lines)):
        parser = ChunkParser(path, "torchtitan")
        rows = [parser.parse(lines[i : i + size]) for i in range(0, len(lines), size)]
        got = pl.concat([r for r in rows if r is not None and r.height], how="diagonal")
        assert got["step"].to_list()[:3] == [1, 10, 20], size


def test_the_rollback_names_torchtitans_checkpoint_folder(tmp_path: Path) -> None:
    """`triage --checkpoints` on a torchtitan log: the rollback note names `step-N`, the folder
    torchtitan saves (components/checkpointer/dcp.py:686-690), not Megatron's iter_NNNNNNN."""
    from typer.testing import CliRunner

    from forensics.cli import app

    path = tmp_path / "train.log"
    rows = CURVE.select("step", "loss", "grad_norm").rows()
    path.write_text("\n".join(_line(s, x, g, 40.0) for s, x, g in rows) + "\n", encoding="utf-8")
    out = tmp_path / "triage"
    args = ["triage", str(path), "--out", str(out), "--checkpoints", "2500,2900"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    text = (out / "events.json").read_text(encoding="utf-8")
    assert "step-2900, the latest in" in text and "iter_0002900" not in text
