"""A log whose steps run backwards or are shuffled is read in step order (with a note) or refused,
never as a restart that leaves one point; a real restart is still a restart."""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import pytest

from forensics.errors import ForensicsError
from forensics.triage.analyze import triage
from forensics.triage.config import RunInfo, TriageConfig
from forensics.triage.readers import read_log_with_warnings
from forensics.watch.detect import WindowDetector
from forensics_testing import loss_curves
from forensics_testing.repo_paths import REPO_ROOT

CURVES = REPO_ROOT.parent / "shared" / "curves"
needs_shared = pytest.mark.skipif(not CURVES.is_dir(), reason="../shared/curves not present")


def _reordered(src: Path, tmp: Path, how: str) -> Path:
    """`src` with its data lines reversed or shuffled (comment and header lines kept on top)."""
    lines = src.read_text().splitlines()
    keep = 2 if src.suffix == ".csv" else 1  # the `# source:` line (and a CSV's header)
    head, body = lines[:keep], lines[keep:]
    body = body[::-1] if how == "reversed" else random.Random(7).sample(body, len(body))
    out = tmp / f"{how}{src.suffix}"
    out.write_text("\n".join(head + body) + "\n")
    return out


@needs_shared
@pytest.mark.parametrize("how", ["reversed", "shuffled"])
@pytest.mark.parametrize(
    "name",
    [
        "mlm_gpt__gpt3_15b_8t_release_sm__dev_dgx_h100.csv",
        "megatron_logs/experiments_gpt2-meg-ds-3d_meg_ds_3d_gpt2_perf_n16-ds-off.log",
    ],
)
def test_real_log_out_of_order_reads_as_in_order(tmp_path: Path, name: str, how: str) -> None:
    original, notes = read_log_with_warnings(CURVES / name)
    assert not notes
    table, notes = read_log_with_warnings(_reordered(CURVES / name, tmp_path, how))
    assert table.equals(original)  # every point, not the last one of a "restart"
    assert any("out of order" in n and "read in step order" in n for n in notes)
    assert not any("superseded" in n for n in notes)


def test_descending_csv_with_a_malignant_spike_is_still_malignant(tmp_path: Path) -> None:
    curve = loss_curves.make("malignant_step").select("step", "loss", "grad_norm")
    ascending, descending = tmp_path / "up.csv", tmp_path / "down.csv"
    curve.write_csv(ascending)
    curve.sort("step", descending=True).write_csv(descending)
    verdicts = []
    for path in (ascending, descending):
        table, _ = read_log_with_warnings(path)
        assert table.height == curve.height
        events = triage(table, TriageConfig(), RunInfo()).events
        verdicts.append(sorted(e.get("verdict") or "" for e in events if e["kind"] == "spike"))
    assert "malignant" in verdicts[0] and verdicts[1] == verdicts[0]


def test_wandb_export_sorted_descending(tmp_path: Path) -> None:
    f = tmp_path / "wandb_export.csv"
    rows = "".join(f"{s},{4 - s / 100:.2f}\n" for s in range(90, 0, -10))
    f.write_text('"Step","run-7 - train/loss"\n' + rows)
    table, notes = read_log_with_warnings(f)
    assert table["step"].to_list() == list(range(10, 100, 10))
    assert any("out of order" in n for n in notes)


def _restart_lines() -> list[str]:
    """Steps 1-20, then a job restarted from step 10 that re-logs 11-30 (a real restart)."""
    df = loss_curves.healthy(30)
    lines = loss_curves.megatron_lines(df.filter(pl.col("step") <= 20))
    return lines + loss_curves.megatron_lines(df.filter(pl.col("step") > 10))


@pytest.mark.parametrize("how", ["reversed", "shuffled"])
def test_restart_log_out_of_order_is_refused(tmp_path: Path, how: str) -> None:
    lines = _restart_lines()
    lines = lines[::-1] if how == "reversed" else random.Random(3).sample(lines, len(lines))
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    with pytest.raises(ForensicsError, match=r"train\.log: the steps are out of order .* twice"):
        read_log_with_warnings(log)


def test_crash_loop_restarts_are_restarts(tmp_path: Path) -> None:
    """A job relaunched again and again from step 10, each time logging a row or two before it
    dies, re-logs steps: restarts, not disorder."""
    df = loss_curves.healthy(40)
    lines = loss_curves.megatron_lines(df.filter(pl.col("step") <= 12))
    for last in (11, 12, 11):
        lines += loss_curves.megatron_lines(df.filter(pl.col("step").is_between(11, last)))
    lines += loss_curves.megatron_lines(df.filter(pl.col("step") > 10))
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    table, notes = read_log_with_warnings(log)
    assert table["step"].to_list() == list(range(1, 41))
    assert any("superseded by a later restart" in n for n in notes)
    assert not any("out of order" in n for n in notes)


def test_watch_reads_a_reversed_log_in_order_and_a_later_restart_as_one(tmp_path: Path) -> None:
    """The watcher's first batch is a whole reversed file: read in order. A later batch that
    drops below everything in view is a restart (appended lines were written later)."""
    df = loss_curves.healthy(40).select("step", "loss")
    detector = WindowDetector(TriageConfig(), RunInfo(), tmp_path / "train.csv")
    detector.add(df.filter(pl.col("step") > 20).reverse())
    assert detector.table is not None and detector.table["step"].to_list() == list(range(21, 41))
    assert any("out of order" in n for n in detector.notes)
    detector.add(df.filter(pl.col("step").is_between(5, 30)))
    assert detector.table["step"].to_list() == list(range(5, 31))
    assert detector.restarts == 1
