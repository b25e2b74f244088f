"""How the report prints a share, for every section that prints one."""

from __future__ import annotations


def pct(x: float) -> str:
    """A share as the report prints it: "0%", "<0.1%", one decimal below 10%, else none."""
    if x == 0:
        return "0%"
    if x < 0.001:
        return "<0.1%"
    return f"{100 * x:.1f}%" if x < 0.1 else f"{100 * x:.0f}%"
