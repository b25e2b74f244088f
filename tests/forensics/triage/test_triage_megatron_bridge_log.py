"""Megatron-Bridge's training log: triage reads it (`--format megatron-bridge`, and `auto` as
Megatron's layout) and `forensics watch` follows it in pieces, one row per logged iteration.

The lines are built by Bridge's own format statements, copied verbatim from megatron-bridge 0.6.2
megatron/bridge/training/utils/train_utils.py:1173-1221 (the statements `training_log` runs before
`print_rank_last(log_string)` at 1225), with the values of a run that skipped iterations 3-4
(`skipped samples` appears once a step was skipped, 1176-1177).
"""

# ruff: noqa: UP032 (Bridge's own str.format calls, kept verbatim)
from __future__ import annotations

from datetime import datetime
from pathlib import Path

import polars as pl

from forensics.triage.readers import detect_format, read_log_with_warnings
from forensics.watch.parse import ChunkParser

LOSSES = {1: 10.9312, 2: 10.5217, 5: 9.8802, 6: 14.2291}  # iterations 3-4 skipped: not logged
GBS = 8


def _line(iteration: int, loss: float, skipped: int) -> str:
    """One log line, as train_utils.py:1173-1221 writes it."""
    train_iters, consumed, skipped_samples = 300, iteration * GBS, skipped * GBS
    elapsed_time_per_iteration, per_gpu_tf, learning_rate, batch_size = 0.4123, 35.2, 3e-4, GBS
    loss_scale, grad_norm, skipped_iters, nan_iters = 1.0, 1.234, 0, 0
    log_string = f" [{datetime(2026, 12, 7, 1, 2, iteration).strftime('%Y-%m-%d %H:%M:%S')}]"
    log_string += " iteration {:8d}/{:8d} |".format(iteration, train_iters)
    log_string += " consumed samples: {:12d} |".format(consumed)
    if skipped_samples > 0:
        log_string += " skipped samples: {:12d} |".format(skipped_samples)
    log_string += " elapsed time per iteration (ms): {:.1f} |".format(
        elapsed_time_per_iteration * 1000.0
    )
    log_string += f" throughput per GPU (TFLOP/s/GPU): {per_gpu_tf:.1f} |"
    log_string += f" learning rate: {learning_rate:.6E} |"
    log_string += f" global batch size: {batch_size:5d} |"
    for key, avg in (("lm loss", loss),):
        if avg >= 0.0:
            log_string += " {}: {:.6E} |".format(key, avg)
    log_string += f" loss scale: {loss_scale:.1f} |"
    log_string += f" grad norm: {grad_norm:.3f} |"
    log_string += " number of skipped iterations: {:3d} |".format(skipped_iters)
    log_string += " number of nan iterations: {:3d} |".format(nan_iters)
    return log_string


def _log(tmp_path: Path) -> Path:
    lines = ["Setting up model...", "> building train, validation, and test datasets ..."]
    lines += [_line(i, loss, 2 if i > 4 else 0) for i, loss in LOSSES.items()]
    path = tmp_path / "bridge.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_triage_reads_bridge_lines(tmp_path: Path) -> None:
    path = _log(tmp_path)
    assert _line(5, 9.8802, 2).startswith(
        " [2026-12-07 01:02:05] iteration        5/     300 | consumed samples:           40 |"
        " skipped samples:           16 | elapsed time per iteration (ms): 412.3 |"
    )
    table, notes = read_log_with_warnings(path, "megatron-bridge")
    assert notes == []
    assert dict(zip(table["step"], table["loss"], strict=True)) == LOSSES
    assert table["skipped_samples"].to_list() == [None, None, 16, 16]
    assert table["consumed_samples"].to_list() == [8, 16, 40, 48]
    # `auto` reads the same lines as Megatron's layout, field for field
    assert detect_format(path) == "megatron"
    auto, _ = read_log_with_warnings(path)
    assert auto.equals(table)


def test_watch_gets_each_iteration_once_whatever_the_pieces(tmp_path: Path) -> None:
    path = _log(tmp_path)
    lines = list(enumerate(path.read_text().splitlines(), start=1))
    for size in (1, 2, 3, len(lines)):
        parser = ChunkParser(path, "megatron-bridge")
        rows = [parser.parse(lines[i : i + size]) for i in range(0, len(lines), size)]
        got = pl.concat([r for r in rows if r is not None and r.height], how="diagonal")
        assert dict(got.select("step", "loss").rows()) == LOSSES, size
