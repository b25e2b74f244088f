"""JSON lines (`{"step": 1, "loss": 2.3, ...}`), nested objects flattened; and Hugging Face's
`trainer_state.json` (its `log_history`), rewritten whole as the Trainer saves."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar

import polars as pl

from forensics.errors import ForensicsError
from forensics.triage.canonical import MAX_WARNINGS_SHOWN, rows_to_frame
from forensics.triage.formats.base import Head, LineState, LogFormat
from forensics.triage.formats.text import flatten, read_text


class JsonlLog(LogFormat):
    """One JSON object per line."""

    name: ClassVar[str] = "jsonl"
    grows = True

    def named(self, name: str) -> bool:
        return name.endswith((".jsonl", ".ndjson"))

    def recognises(self, head: Head) -> bool:
        return head.first.lstrip().startswith("{")

    def read(self, path: Path, notes: list[str]) -> tuple[pl.DataFrame, str]:
        rows = jsonl_rows(enumerate(read_text(path), start=1), path, notes)
        if not rows:
            raise ForensicsError(f"{path}: no JSON objects found")
        return rows_to_frame(rows), "line"

    def parse_lines(self, lines: list[tuple[int, str]], state: LineState) -> pl.DataFrame | None:
        rows = jsonl_rows(lines, state.path, state.notes)
        return rows_to_frame(rows) if rows else None


def jsonl_rows(
    numbered: Iterable[tuple[int, str]], path: Path, notes: list[str]
) -> list[dict[str, object]]:
    """(line number, line) pairs -> flattened JSON objects; unreadable lines are counted in one
    note that names the first few by number (a log with thousands of torn lines stays readable)."""
    rows: list[dict[str, object]] = []
    bad: list[str] = []
    n_bad = 0
    for i, ln in numbered:
        if not ln.strip():
            continue
        try:
            obj = json.loads(ln)
        except json.JSONDecodeError as err:
            n_bad += 1
            if len(bad) < MAX_WARNINGS_SHOWN:
                bad.append(f"line {i}: not valid JSON ({err.msg})")
            continue
        if not isinstance(obj, dict):
            n_bad += 1
            if len(bad) < MAX_WARNINGS_SHOWN:
                bad.append(f"line {i}: not a JSON object")
            continue
        flat = flatten(obj)
        flat["__line"] = i
        rows.append(flat)
    if n_bad:
        more = f" (and {n_bad - len(bad)} more)" if n_bad > len(bad) else ""
        notes.append(f"{path}: {n_bad} unreadable lines skipped: {'; '.join(bad)}{more}")
    return rows


class HFTrainerStateLog(LogFormat):
    """Hugging Face `trainer_state.json`: training rows of `log_history` (`eval_loss` joined)."""

    name: ClassVar[str] = "hf-trainer-state"

    def recognises(self, head: Head) -> bool:
        text = head.text
        return text.lstrip().startswith("{") and '"log_history"' in text

    def read(self, path: Path, notes: list[str]) -> tuple[pl.DataFrame, str]:
        try:
            state = json.loads(path.read_text(encoding="utf-8", errors="replace"))
        except json.JSONDecodeError as err:
            raise ForensicsError(f"{path}: not valid JSON (line {err.lineno}: {err.msg})") from None
        history = state.get("log_history") if isinstance(state, dict) else None
        if not isinstance(history, list):
            raise ForensicsError(f"{path}: no 'log_history' list (not a trainer_state.json?)")
        train, evals = [], {}
        for i, entry in enumerate(history):
            if not isinstance(entry, dict) or "step" not in entry:
                continue
            if "loss" in entry:
                row = {k: v for k, v in flatten(entry).items() if k != "eval_loss"}
                row["__line"] = i
                train.append(row)
            elif "eval_loss" in entry and isinstance(entry["step"], int | float | str):
                evals[entry["step"]] = entry["eval_loss"]
        if not train:
            raise ForensicsError(f"{path}: log_history has no training rows with a 'loss' field")
        for row in train:
            step = row.get("step")  # absent when the entry's step was a list or an object
            if isinstance(step, int | float | str) and step in evals:
                row["eval_loss"] = evals[step]
        return rows_to_frame(train), "log_history entry"
