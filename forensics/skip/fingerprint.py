"""A run's data fingerprint as skip.json holds it, and the differences between the run a skip
file was made for and the run at hand."""

from __future__ import annotations

import json
from typing import Any


def json_fingerprint(replayer: Any) -> dict[str, Any]:
    """The replayer's `fingerprint()` as it reads back from JSON (paths and other values JSON
    lacks become strings), so a fresh one compares equal to the one a skip file holds."""
    return json.loads(json.dumps(replayer.fingerprint(), default=str))


def diff_items(recorded: Any, now: Any, where: str = "") -> list[tuple[str, Any, Any]]:
    """(where, recorded, now) for every leaf that differs; a missing side is `...`."""
    if isinstance(recorded, dict) and isinstance(now, dict):
        out: list[tuple[str, Any, Any]] = []
        for key in sorted(set(recorded) | set(now), key=str):
            at = f"{where}.{key}" if where else str(key)
            out.extend(diff_items(recorded.get(key, ...), now.get(key, ...), at))
        return out
    if isinstance(recorded, list) and isinstance(now, list) and len(recorded) == len(now):
        out = []
        for i, (a, b) in enumerate(zip(recorded, now, strict=True)):
            out.extend(diff_items(a, b, f"{where}[{i}]"))
        return out
    return [] if recorded == now else [(where or "fingerprint", recorded, now)]


def describe(item: tuple[str, Any, Any]) -> str:
    """One difference as a reader wants it."""
    where, old, new = item
    if new is ...:
        return f"{where}: missing now"
    if old is ...:
        return f"{where}: not in the skip file"
    return f"{where}: skip file has {old!r}, now {new!r}"


def fingerprint_differences(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Human-readable differences between two fingerprints (nested dicts / lists / scalars)."""
    return [describe(item) for item in diff_items(expected, actual, path)]
