"""`forensics triage` end to end: files written, terminal summary, bad input = one red line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from forensics.cli import app
from forensics.triage.plot import decimate
from forensics.triage.report import json_safe
from forensics_testing import loss_curves
from forensics_testing.refusal import refused

runner = CliRunner()


def _log(tmp_path: Path, shape: str) -> Path:
    log = tmp_path / f"{shape}.log"
    log.write_text("\n".join(loss_curves.megatron_lines(loss_curves.make(shape, n=4500))) + "\n")
    return log


def test_cli_malignant_run_writes_all_outputs(tmp_path: Path) -> None:
    ck = tmp_path / "ckpt"
    for it in (2000, 2920, 2950):
        (ck / f"iter_{it:07d}").mkdir(parents=True)
    out = tmp_path / "out"
    res = runner.invoke(
        app,
        [
            "triage",
            str(_log(tmp_path, "malignant_step")),
            "--out",
            str(out),
            "--checkpoints",
            str(ck),
            "--config",
            "cfg.yaml",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "ACT" in res.output and "malignant" in res.output and "roll back to 2950" in res.output
    events = json.loads((out / "events.json").read_text())
    (spike,) = [e for e in events if e["kind"] == "spike"]
    assert spike["rollback_iteration"] == 2950
    assert spike["next_command"] == (
        "forensics spike --config cfg.yaml --step 3000 --window 300 --out spike-3000/"
    )
    png = (out / "triage.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 20_000
    md = (out / "report.md").read_text()
    assert "Spike at iteration 3000: **malignant**" in md and "triage.png" in md
    assert json.loads((out / "summary.json").read_text())["status"] == "act"
    assert not list(out.glob(".*.tmp"))


def test_cli_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_text("")
    proc = subprocess.run(
        [sys.executable, "-m", "forensics.cli", "triage", str(empty), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "400"},  # rich wraps at the terminal width
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "empty" in proc.stderr
    assert not (tmp_path / "o").exists()


def test_cli_bad_checkpoints_and_warnings_named(tmp_path: Path) -> None:
    f = tmp_path / "c.csv"
    rows = loss_curves.healthy(300).select("step", "loss")
    text = rows.write_csv().splitlines()
    text[10] = text[10].split(",")[0] + ",n/a"
    f.write_text("\n".join(text) + "\n")
    res = runner.invoke(app, ["triage", str(f), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0 and "line 11" in res.output
    res = runner.invoke(
        app, ["triage", str(f), "--out", str(tmp_path / "o2"), "--checkpoints", "a,b"]
    )
    refused(res, "--checkpoints a,b: not a directory and not a comma-separated list")
    assert not (tmp_path / "o2").exists()


def test_triage_never_imports_torch(tmp_path: Path) -> None:
    f = tmp_path / "c.csv"
    loss_curves.healthy(200).select("step", "loss").write_csv(f)
    code = (
        "import sys; from forensics.cli import app; from typer.testing import CliRunner;"
        f"r = CliRunner().invoke(app, ['triage', {str(f)!r}, '--out', {str(tmp_path / 'o')!r}]);"
        "assert r.exit_code == 0, r.output; assert 'torch' not in sys.modules; print('ok')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stdout.strip() == "ok", proc.stderr


def test_decimate_keeps_extremes() -> None:
    x = pl.int_range(0, 100_000, eager=True).to_numpy()
    y = (x % 7).astype(float)
    y[54_321] = 99.0
    xs, ys = decimate(x, y, 1000)
    assert len(xs) <= 1000 and ys.max() == 99.0 and xs[ys.argmax()] == 54_321


@pytest.mark.parametrize("flag", ["--recovery-window", "--plateau-steps"])
def test_cli_rejects_nonpositive_windows(tmp_path: Path, flag: str) -> None:
    f = tmp_path / "c.csv"
    loss_curves.healthy(50).select("step", "loss").write_csv(f)
    res = runner.invoke(app, ["triage", str(f), "--out", str(tmp_path / "o"), flag, "0"])
    refused(res, f"{flag} 0: must be a positive number of steps")
    assert not (tmp_path / "o").exists()


def test_json_outputs_are_strict_json(tmp_path: Path) -> None:
    f = tmp_path / "c.csv"
    f.write_text("step,loss,grad_norm\n1,3.0,nan\n2,nan,1.0\n3,2.9,inf\n4,2.8,1.0\n")
    out = tmp_path / "o"
    assert runner.invoke(app, ["triage", str(f), "--out", str(out)]).exit_code == 0
    for name in ("events.json", "summary.json"):
        json.loads((out / name).read_text(), parse_constant=lambda c: pytest.fail(c))
    cleaned = json_safe({"a": [np.float64("nan"), np.int64(3), float("inf")], "b": 1.5})
    assert cleaned == {"a": [None, 3, None], "b": 1.5} and type(cleaned["a"][1]) is int


def test_triage_png_names_every_line_and_span_in_a_legend() -> None:
    """Each panel has a legend: the loss's spike lines, the grad norm and its alarm, the lr,
    the loss scale and its collapse (a benign spike with a grad-norm precursor and an fp16
    loss scale halving ten times at the spike)."""
    from forensics.triage.analyze import triage
    from forensics.triage.plot import triage_figure

    df = loss_curves.make("benign_spike")
    s = df["step"].to_numpy()
    halvings = np.clip(s - loss_curves.SPIKE_STEP + 1, 0, 10)
    result = triage(df.with_columns(pl.Series("loss_scale", 65536.0 / 2.0**halvings)))
    kinds = {e["kind"] for e in result.events}
    assert {"grad_norm_alarm", "loss_scale_collapse", "spike"} <= kinds
    fig = triage_figure(result)
    legends = [[t.get_text() for t in ax.get_legend().get_texts()]
               for ax in fig.axes if ax.get_legend()]  # fmt: skip
    loss, grad, lr = legends
    assert "benign spike: peak" in loss and "EMA" in loss
    assert grad == ["grad norm", "grad-norm alarm (EMA over its baseline)"]
    assert set(lr) == {"lr", "loss scale (right axis)", "loss-scale collapse"}
