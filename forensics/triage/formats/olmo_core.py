"""OLMo-core's console log (`--format olmo-core`): one record per logged step, a progress
marker then one indented `name=value` line per metric.

The format, from ai2-olmo-core 3.0.0 (allenai/OLMo-core fa6c5014c9 has the same lines):
- olmo_core/train/callbacks/console_logger.py `log_metrics`: the record is
  `f"{prefix}\\n" + "\\n".join(f"    {name}={format_float(value)}" ...)`, prefix
  `[step={step}/{max_steps or '???'},epoch={epoch}(,eta=...)]` from `_get_progress_marker`; the
  default metrics are `train/CE loss`, `optim/total grad norm`, `optim/LR*`, `throughput/*` ...
- olmo_core/utils.py `setup_logging`: without rich (a file, not a terminal) each record is
  `%(asctime)s\\t%(hostname)s:%(local_rank)s\\t%(name)s:%(lineno)s\\t%(levelname)s\\t%(message)s`,
  so the marker line carries that prefix and the metric lines follow it bare.
- olmo_core/utils.py `format_float`: `nan`, `inf`, `1,234` (thousands), `1.500B` (suffixes
  K... E above 1e9), `1.23E-05`.
- olmo_core/train/trainer.py `_fit_epoch`: a skipped step logs
  `Skipping training on step {global_step:,d} intentionally...` and no train metrics.

A metric line belongs to the marker directly above it, with nothing but metric lines between:
a `    key=value` line elsewhere in the log (a printed config) is not a metric. A checkpoint step
logs two records (train/CE loss before the save, throughput and checkpoint/* after it:
trainer.py `_log_metrics` runs again once the checkpointer's post_step has saved), read as one.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import ClassVar

import polars as pl

from dataloaders.trainers import OLMO_CORE_OUTPUT
from forensics.errors import ForensicsError
from forensics.triage.formats.base import Head, LineState, LogFormat
from forensics.triage.formats.text import line_frame, numbered_lines

# `[step=310/450,epoch=1,eta=...]` (the marker may follow the logging prefix).
MARKER_RE = r"\[step=(\d+)/[^,\]]*,epoch=\d+"
_METRIC_RE = r"^ {4}(\S[^=]*?)=(\S*)\s*$"
SKIP_RE = re.compile(r"Skipping training on step ([\d,]+) intentionally")
# setup_logging's record prefix for the library's own loggers (asctime, host:rank, name:line, level)
_PREFIX_RE = r"(?m)^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[.,]\d{3}\t[^\t]*\tolmo_core[\w.]*:\d+\t[A-Z]+\t"
_SUFFIX = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}

_MARKER = re.compile(MARKER_RE)


class OlmoCoreLog(LogFormat):
    """OLMo-core's console log: a `[step=N/M,epoch=E]` marker, then `    name=value` metric
    lines."""

    name: ClassVar[str] = OLMO_CORE_OUTPUT  # the trainer's own name for what it writes
    grows = True

    def recognises(self, head: Head) -> bool:
        if looks_like_olmo_core(head.text):
            return True
        if is_olmo_core_log(head.text):
            raise ForensicsError(
                f"{head.path}: an OLMo-core log without a '[step=N/M,epoch=E]' metrics record yet"
            )
        return False

    def read(self, path: Path, notes: list[str]) -> tuple[pl.DataFrame, str]:
        raw = olmo_core_raw(numbered_lines(path))
        if raw is None:
            raise ForensicsError(f"{path}: no OLMo-core '[step=N/M,epoch=E]' records with metrics")
        return raw, "line"

    def parse_lines(self, lines: list[tuple[int, str]], state: LineState) -> pl.DataFrame | None:
        """Records span lines (a marker, then its metrics), and a checkpoint step logs two
        records: the newest step's records wait in `state.header` until another step's marker
        arrives."""
        held = [tuple(x) for x in json.loads(state.header)] if state.header else []
        lines = [*held, *lines]
        markers = [(i, m.group(1)) for i, (_, t) in enumerate(lines) if (m := _MARKER.search(t))]
        cut = len(lines)
        for i, step in reversed(markers):
            if step != markers[-1][1]:
                break
            cut = i
        state.header = json.dumps(lines[cut:]) if cut < len(lines) else None
        if cut == 0:
            return None
        return olmo_core_raw(line_frame(lines[:cut]))


def looks_like_olmo_core(head: str) -> bool:
    """True when a log's first lines hold an OLMo-core progress marker with metrics below it."""
    return re.search(MARKER_RE + r"[^\n]*\]\s*\n {4}\S[^=\n]*=", head) is not None


def is_olmo_core_log(head: str) -> bool:
    """True when a log's first lines are OLMo-core's logging records, metrics or not yet."""
    return re.search(_PREFIX_RE, head) is not None


def number(text: str) -> str:
    """`format_float`'s text -> a plain number polars reads (`1,234` -> 1234, `1.5B` -> 1.5e9)."""
    text = text.replace(",", "")
    if text and text[-1] in _SUFFIX:
        try:
            return repr(float(text[:-1]) * _SUFFIX[text[-1]])
        except ValueError:
            return text
    return text


def olmo_core_raw(lines: pl.DataFrame) -> pl.DataFrame | None:
    """OLMo-core console lines (`text`, `__line` columns, in file order) -> one raw row per
    logged step: `step`, one column per metric name, `__line` of the step's marker; None when
    no marker has metrics under it."""
    text = pl.col("text").str.replace_all(r"\r", "")
    tagged = lines.select(
        "__line",
        text.str.extract(MARKER_RE, 1).alias("marker"),
        text.str.extract(_METRIC_RE, 1).alias("name"),
        text.str.extract(_METRIC_RE, 2).alias("value"),
    )
    # a block: one non-metric line and the metric lines right after it
    tagged = tagged.with_columns(pl.col("name").is_null().cum_sum().alias("block"))
    heads = tagged.filter(pl.col("name").is_null() & pl.col("marker").is_not_null()).select(
        "block", pl.col("marker").alias("step"), pl.col("__line").alias("head_line")
    )
    metrics = tagged.filter(pl.col("name").is_not_null()).join(heads, on="block", how="inner")
    if metrics.height == 0:
        return None
    metrics = metrics.with_columns(
        pl.col("value").map_elements(number, return_dtype=pl.Utf8).alias("value")
    )
    wide = metrics.pivot(
        on="name", index=["head_line", "step"], values="value", aggregate_function="last"
    ).sort("head_line")
    # One step can log two records back to back (a checkpoint step: the train metrics, then the
    # throughput and checkpoint/* metrics after the save); they are one row. The same step
    # again after other steps is a restarted job, left to resolve_restarts.
    run = (pl.col("step") != pl.col("step").shift(1)).fill_null(True).cum_sum().alias("__run")
    names = [c for c in wide.columns if c not in ("head_line", "step")]
    merged = (
        wide.with_columns(run)
        .group_by("__run", maintain_order=True)
        .agg(
            pl.col("head_line").first().alias("__line"),
            pl.col("step").first(),
            *[pl.col(c).drop_nulls().last() for c in names],
        )
    )
    return merged.drop("__run")


def skipped_steps(lines: list[str]) -> list[int]:
    """The steps an OLMo-core trainer said it skipped (steps_to_skip), in log order."""
    return [int(m.group(1).replace(",", "")) for ln in lines if (m := SKIP_RE.search(ln))]
