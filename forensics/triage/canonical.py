"""From a reader's raw columns to the triage table: canonical names, numbers (bad values noted
by line), a file out of order told apart from a restart, restarts resolved, sorted by step.
Every format goes through `finish` (readers.py), and `forensics watch` through `canonical_rows`,
`order_steps` and `resolve_restarts` on each poll, so a log reads the same whichever way it
arrives.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from forensics.errors import ForensicsError
from forensics.triage.columns import canonical_name, is_ms_field, loss_curves

# Columns whose values must be numbers; a bad value there is always reported.
_CORE = {"loss", "grad_norm", "lr", "loss_scale", "consumed_samples", "global_batch_size", "tokens"}
MAX_WARNINGS_SHOWN = 5
# Rows in step order after a drop that make it a restart even when none re-logs an earlier
# step (a log excerpt, or a job resumed from a checkpoint older than the log's first line): a
# reversed file has runs of 1 row, a shuffled one mostly of 1 or 2.
_RESTART_RUN = 3


def finish(raw: pl.DataFrame, unit: str, path: Path, notes: list[str]) -> pl.DataFrame:
    """Canonical names, numbers (bad values warned by line), restarts resolved, sorted by step."""
    table = canonical_rows(raw, unit, path, notes)
    table = order_steps(table, path, notes)
    table = resolve_restarts(table, path, notes)
    curves = loss_curves(table.columns)
    if not curves:
        raise ForensicsError(
            f"{path}: no loss field found (fields: {', '.join(c for c in table.columns[1:13])})"
        )
    if (
        table.height == 0
        or table.select(pl.any_horizontal(pl.col(curves).is_not_null()).any()).item() is False
    ):
        raise ForensicsError(f"{path}: the log has no loss values")
    if not table.select(pl.any_horizontal(pl.col(curves).is_finite()).any()).item():
        raise ForensicsError(
            f"{path}: no finite loss in {table.height} rows (every loss is nan/inf): the run "
            "diverged from its first logged step, or the log is not a training log"
        )
    return table.drop("__line")


def canonical_rows(raw: pl.DataFrame, unit: str, path: Path, notes: list[str]) -> pl.DataFrame:
    """Raw fields -> canonical Float64 columns and an Int64 `step` (rows without one dropped,
    bad values noted by line); `__line` kept. Shared by `read_log` and `forensics watch`."""
    renames: dict[str, str] = {}
    for col in raw.columns:
        if col == "__line":
            continue
        name = canonical_name(col)
        if name in renames.values() or name == "__line":
            name = f"{name}_{len(renames)}"
        renames[col] = name
    if "step" not in renames.values():
        raise ForensicsError(
            f"{path}: no step/iteration column (columns: {', '.join(raw.columns[:12])})"
        )
    bad: list[str] = []
    exprs = [pl.col("__line")]
    for col, name in renames.items():
        num, problems = _to_number(raw, col, name)
        if num is None:  # a text field (e.g. a date): not ours to judge
            continue
        bad.extend(problems)
        if is_ms_field(col):
            num = num / 1000.0
        exprs.append(num.alias(name))
    table = raw.select(exprs)
    if bad:
        shown = "; ".join(bad[:MAX_WARNINGS_SHOWN])
        more = (
            f" (and {len(bad) - MAX_WARNINGS_SHOWN} more)" if len(bad) > MAX_WARNINGS_SHOWN else ""
        )
        notes.append(f"{path}: non-numeric values read as missing: {shown}{more}")
    table = table.with_columns(pl.col("step").cast(pl.Int64, strict=False))
    n_nostep = table.filter(pl.col("step").is_null()).height
    if n_nostep:
        first = table.filter(pl.col("step").is_null())["__line"][0]
        notes.append(f"{path}: {n_nostep} rows without a step (first: {unit} {first}); skipped")
        table = table.drop_nulls("step")
    return table


def _to_number(raw: pl.DataFrame, col: str, name: str) -> tuple[pl.Series | None, list[str]]:
    """Cast one column to Float64; report values that are not numbers by line number."""
    s = raw[col]
    if s.dtype.is_numeric() or s.dtype == pl.Boolean:
        return s.cast(pl.Float64), []
    if s.dtype != pl.Utf8:
        s = s.cast(pl.Utf8, strict=False)
    text = s.str.strip_chars()
    num = text.cast(pl.Float64, strict=False)
    bad_mask = text.is_not_null() & (text != "") & num.is_null()
    n_bad = int(bad_mask.sum())
    n_text = int((text.is_not_null() & (text != "")).sum())
    core = name in _CORE or name.startswith("loss:") or name == "step"
    if n_bad and not core and n_bad > n_text // 2:
        return None, []  # a text column, not a numeric one with a few bad values
    lines = raw["__line"].filter(bad_mask).head(MAX_WARNINGS_SHOWN).to_list()
    vals = text.filter(bad_mask).head(MAX_WARNINGS_SHOWN).to_list()
    problems = [f"line {ln}: {col!r} = {v[:40]!r}" for ln, v in zip(lines, vals, strict=True)]
    problems += [f"{col!r}"] * max(0, n_bad - len(problems))
    return num, problems


def order_steps(
    table: pl.DataFrame,
    path: Path,
    notes: list[str],
    before: pl.Series | None = None,
) -> pl.DataFrame:
    """Rows in file order whose step goes back anywhere: a restart, or a file out of order.

    Told apart by the log's own evidence. A restarted job re-logs a stretch of steps in order:
    the rows after each drop (up to the next drop) share a step with the rows above them, or
    run on in order for `_RESTART_RUN` rows or more (the file's last stretch may be shorter: a
    job just relaunched). A reversed or shuffled file has drops followed by a row or two that
    re-log nothing. When every drop is a restart the table is returned as it is (`resolve_restarts`
    keeps the last run's rows). When some drop is not, and no step appears twice, the order
    carries no information: the rows are sorted by step, with a note. When steps also repeat,
    which repeated row is the latest cannot be known: refused in one line.

    `before`: steps read earlier from the same growing file (`forensics watch`), counted as
    logged above these rows; a drop below all of them is a restart (an appended line was written
    later, and the window no longer shows how far back the job went).
    """
    steps = table["step"].to_numpy()
    if len(steps) < 2 or bool((steps[1:] > steps[:-1]).all()):
        return table
    starts = np.flatnonzero(steps[1:] <= steps[:-1]) + 1  # first row of each later segment
    first = (
        (table.select("step").with_row_index("row").select(pl.col("row").min().over("step")))[:, 0]
        .to_numpy()
        .astype(np.int64)
    )
    if before is not None and len(before):
        first = np.where(np.isin(steps, before.to_numpy()), -1, first)
    ends = np.append(starts[1:], len(steps))
    relogs = np.minimum.reduceat(first, starts) < starts  # a segment re-logs an earlier step
    relogs |= ends - starts >= _RESTART_RUN  # or runs on in order, as a relaunched job does
    relogs[-1] |= ends[-1] - starts[-1] < _RESTART_RUN  # the last: a job just relaunched
    if before is not None and len(before):
        relogs |= steps[starts] < before.min()
    drops = int((~relogs).sum())
    if drops == 0:
        return table
    repeated = len(np.unique(steps)) < len(steps) or bool(first.min() < 0)
    if repeated:
        raise ForensicsError(
            f"{path}: the steps are out of order ({drops} places where the step goes back "
            "without re-logging an earlier step, as a restarted job would) and some steps "
            "appear twice: which row of a repeated step is the latest cannot be told; give the "
            "log in the order it was written"
        )
    notes.append(
        f"{path}: the steps are out of order (the step goes back in {len(starts)} places, "
        f"{drops} of them followed by no re-logged step and no run in order, as a restart "
        "would be: a reversed or shuffled file); read in step order"
    )
    return table.sort("step", maintain_order=True)


def resolve_restarts(table: pl.DataFrame, path: Path, notes: list[str]) -> pl.DataFrame:
    """After a restart the iterations repeat: keep the last run's rows.

    A row survives when every later row has a larger step, i.e. rows of an abandoned attempt
    (including steps it reached that the restarted run has not reached again) are dropped.
    """
    later_min = pl.col("step").reverse().cum_min().reverse().shift(-1)
    kept = table.filter(later_min.is_null() | (pl.col("step") < later_min))
    dropped = table.height - kept.height
    if dropped:
        notes.append(
            f"{path}: {dropped} rows superseded by a later restart (iterations repeated); "
            "kept the last run's values"
        )
    return kept.sort("step")


def rows_to_frame(rows: list[dict[str, object]]) -> pl.DataFrame:
    """Rows of mixed types -> string columns (str() of a float round-trips); `finish` casts."""
    cols: dict[str, list[object]] = {}
    for i, row in enumerate(rows):
        for k in row:
            if k not in cols:
                cols[k] = [None] * i
        for k, col in cols.items():
            v = row.get(k)
            col.append(v if k == "__line" or v is None else str(v))
    lines = pl.Series("__line", cols.get("__line", [None] * len(rows)), dtype=pl.Int64)
    fields = {k: pl.Series(k, v, dtype=pl.Utf8) for k, v in cols.items() if k != "__line"}
    return pl.DataFrame([*fields.values(), lines])  # rows without any field keep their height
