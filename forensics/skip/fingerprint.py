"""Differences between the run a skip file was made for and the run at hand."""

from __future__ import annotations

from typing import Any


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
