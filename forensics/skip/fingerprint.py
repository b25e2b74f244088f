"""A run's data fingerprint as skip.json holds it, and the differences between the run a skip
file was made for and the run at hand."""

from __future__ import annotations

import json
from typing import Any


def json_fingerprint(replayer: Any) -> dict[str, Any]:
    """The replayer's `fingerprint()` as it reads back from JSON (paths and other values JSON
    lacks become strings), so a fresh one compares equal to the one a skip file holds."""
    return json.loads(json.dumps(replayer.fingerprint(), default=str))


def fingerprint_differences(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Human-readable differences between two fingerprints (nested dicts / lists / scalars)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out: list[str] = []
        for key in sorted(set(expected) | set(actual), key=str):
            where = f"{path}.{key}" if path else str(key)
            if key not in actual:
                out.append(f"{where}: missing now")
            elif key not in expected:
                out.append(f"{where}: not in the skip file")
            else:
                out.extend(fingerprint_differences(expected[key], actual[key], where))
        return out
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        out = []
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            out.extend(fingerprint_differences(e, a, f"{path}[{i}]"))
        return out
    if expected != actual:
        return [f"{path or 'fingerprint'}: skip file has {expected!r}, now {actual!r}"]
    return []
