"""torchtitan's console log (`--format torchtitan`): one `step: N  loss: ...` line per logged
step, `validate step: N  loss: ...` after a validation.

The lines, from torchtitan 0.3.0 (the PyPI wheel; its files are pytorch/torchtitan
1fdf90d3f9b756ef709ce262bc839f1dab679b5e's, where the line numbers below are the same):
- components/metrics.py:523-532, `MetricsProcessor.log` (called on step 1 and every
  `metrics.log_freq` steps, metrics.py:362-363):

      f"{color.red}step: {step:2}  "
      f"{color.green}loss: {global_avg_loss:8.5f}  "
      f"{color.orange}grad_norm: {grad_norm:7.4f}  "
      f"{color.turquoise}memory: {device_mem_stats.max_reserved_gib:5.2f}GiB"
      f"({device_mem_stats.max_reserved_pct:.2f}%)  "
      f"{color.blue}tps: {round(tps):,}  "
      f"{color.cyan}tflops: {tflops:,.2f}  "
      f"{color.magenta}mfu: {mfu_str}{color.reset}"      (mfu_str: "12.34%" or "N/A")

- metrics.py:566-572, `log_validation`: `validate step: {step:2}  loss: {loss:7.4f}  memory:
  ...  tps: ...`.
- The colors are ANSI escapes unless `--metrics.disable_color_printing` (metrics.py:345); the
  record is `[titan] %(asctime)s - %(name)s - %(levelname)s - %(message)s` on stdout
  (tools/logging.py:15-24), and torchrun's `--tee`/`--local-ranks-filter` (run_train.sh) puts
  `[rank0]:` before it. Escapes and prefixes are ignored here.
- trainer.py:994-998: a non-finite loss on a logging step raises `Loss is not finite
  (global_avg_loss=nan) at step N. Stopping training.` instead of printing the line: read as
  that step's loss, with a note.

Fields are split generically (`name: value`, two spaces apart), so torchtitan 0.1's line
(no grad_norm, `loss: {:7.4f}`) reads too and a field added later survives.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar

import polars as pl

from dataloaders.trainers import TORCHTITAN_OUTPUT
from forensics.errors import ForensicsError
from forensics.triage.formats.base import Head, LineState, LogFormat
from forensics.triage.formats.text import line_frame, numbered_lines

_ANSI = r"\x1b\[[0-9;]*m"
# `step:  1  loss: 12.25000  ...` (after the escapes are removed); not `validate step:`
STEP_RE = r"step:\s*(\d+)\s+loss:\s*\S+"
_VALID_PREFIX = "validate "
_FIELD_RE = r"[a-z_]+:\s*\S+"
NOT_FINITE_RE = r"Loss is not finite \(global_avg_loss=([^)]*)\) at step (\d+)"
# init_logger's record prefix (tools/logging.py:20-22), what a log shows before any step line
_RECORD_RE = (
    r"(?m)^(?:\[rank\d+\]:)?\[titan\] \d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} - \S+ - [A-Z]+ - "
)


class TorchtitanLog(LogFormat):
    """torchtitan's stdout: `step: N  loss: X  grad_norm: G  memory: ...` lines."""

    name: ClassVar[str] = TORCHTITAN_OUTPUT  # the trainer's own name for what it writes
    grows = True

    def recognises(self, head: Head) -> bool:
        text = re.sub(_ANSI, "", head.text)
        if re.search(_RECORD_RE + r"[^\n]*?" + STEP_RE, text):
            return True
        if re.search(_RECORD_RE, text):
            raise ForensicsError(
                f"{head.path}: a torchtitan log without a 'step: N loss: ...' line yet"
            )
        return False

    def read(self, path: Path, notes: list[str]) -> tuple[pl.DataFrame, str]:
        raw = torchtitan_raw(numbered_lines(path), path, notes)
        if raw is None:
            raise ForensicsError(f"{path}: no torchtitan 'step: N loss: ...' lines found")
        return raw, "line"

    def parse_lines(self, lines: list[tuple[int, str]], state: LineState) -> pl.DataFrame | None:
        return torchtitan_raw(line_frame(lines), state.path, state.notes)


def torchtitan_raw(lines: pl.DataFrame, path: Path, notes: list[str]) -> pl.DataFrame | None:
    """torchtitan lines (`text`, `__line` columns) -> one raw row per logged step (`step`,
    `loss`, `grad_norm`, `memory (GiB)`, `memory (%)`, `tps`, `tflops`, `mfu (%)`, and
    `validation loss` where a validation was logged for the step); None when none is a step
    line. `forensics watch` calls this on each batch of new lines."""
    text = pl.col("text").str.replace_all(_ANSI, "")
    lines = lines.select("__line", text.alias("text"))
    tail = pl.col("text").str.slice(pl.col("text").str.find(STEP_RE))
    before = pl.col("text").str.slice(0, pl.col("text").str.find(STEP_RE))
    stepped = lines.filter(pl.col("text").str.contains(STEP_RE)).select(
        "__line", tail.alias("tail"), before.str.ends_with(_VALID_PREFIX).alias("valid")
    )
    train = _fields(stepped.filter(~pl.col("valid")))
    stopped = _not_finite(lines, path, notes)
    if train is None and stopped is None:
        return None
    raw = pl.concat([f for f in (train, stopped) if f is not None], how="diagonal")
    valid = _fields(stepped.filter(pl.col("valid")))
    if valid is not None:
        valid = valid.select(
            pl.col("step").alias("__vstep"), pl.col("loss").alias("validation loss")
        ).unique("__vstep", keep="last")
        raw = raw.with_columns(pl.col("step").alias("__vstep"))
        raw = raw.join(valid, on="__vstep", how="left").drop("__vstep")
    return raw.sort("__line")


def _fields(stepped: pl.DataFrame) -> pl.DataFrame | None:
    """Step lines from `step:` on (`__line`, `tail`) -> one string column per field."""
    if stepped.height == 0:
        return None
    pairs = (
        stepped.select("__line", pl.col("tail").str.extract_all(_FIELD_RE).alias("f"))
        .explode("f")
        .select(
            "__line",
            pl.col("f").str.extract(r"^([a-z_]+):", 1).alias("key"),
            pl.col("f").str.extract(r"^[a-z_]+:\s*(\S+)", 1).alias("value"),
        )
        .drop_nulls("key")
    )
    wide = pairs.pivot(on="key", index="__line", values="value", aggregate_function="first")
    columns = []
    for name in wide.columns:
        cell = pl.col(name)
        if name == "memory":  # `42.25GiB(53.40%)`
            columns += [
                cell.str.extract(r"^([\d.]+)GiB", 1).alias("memory (GiB)"),
                cell.str.extract(r"\(([\d.]+)%\)", 1).alias("memory (%)"),
            ]
        elif name == "mfu":  # `12.34%`, or `N/A` under quantization
            mfu = pl.when(cell != "N/A").then(cell.str.strip_suffix("%"))
            columns.append(mfu.alias("mfu (%)"))
        elif name in ("tps", "tflops"):  # `{:,}` thousands
            columns.append(cell.str.replace_all(",", "", literal=True).alias(name))
        else:
            columns.append(cell)
    return wide.select(columns)


def _not_finite(lines: pl.DataFrame, path: Path, notes: list[str]) -> pl.DataFrame | None:
    """The step whose non-finite loss stopped the job (its value as the step's loss)."""
    found = lines.filter(pl.col("text").str.contains(NOT_FINITE_RE)).select(
        "__line",
        pl.col("text").str.extract(NOT_FINITE_RE, 2).alias("step"),
        pl.col("text").str.extract(NOT_FINITE_RE, 1).alias("loss"),
    )
    if found.height == 0:
        return None
    first = found.row(0, named=True)
    notes.append(
        f"{path}: the job stopped at step {first['step']} (line {first['__line']}): torchtitan "
        f"raised 'Loss is not finite (global_avg_loss={first['loss']})'; read as that step's "
        "loss"
    )
    return found
