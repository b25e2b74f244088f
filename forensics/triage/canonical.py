"""From a reader's raw columns to the triage table: canonical names, numbers (bad values noted
by line), restarts resolved, sorted by step. Every format goes through `finish` (readers.py), and
`forensics watch` through `canonical_rows` and `resolve_restarts` on each poll, so a log reads
the same whichever way it arrives.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from forensics.errors import ForensicsError
from forensics.triage.columns import canonical_name, is_ms_field, loss_curves

# Columns whose values must be numbers; a bad value there is always reported.
_CORE = {"loss", "grad_norm", "lr", "loss_scale", "consumed_samples", "global_batch_size", "tokens"}
MAX_WARNINGS_SHOWN = 5


def finish(raw: pl.DataFrame, unit: str, path: Path, notes: list[str]) -> pl.DataFrame:
    """Canonical names, numbers (bad values warned by line), restarts resolved, sorted by step."""
    table = canonical_rows(raw, unit, path, notes)
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
