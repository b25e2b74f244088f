"""How the report prints a share, for every section that prints one."""

from __future__ import annotations


def pct(x: float) -> str:
    """A share as the report prints it: "0%", "<0.1%", one decimal below 10%, else none."""
    if x == 0:
        return "0%"
    if x < 0.001:
        return "<0.1%"
    return f"{100 * x:.1f}%" if x < 0.1 else f"{100 * x:.0f}%"


def flagged_cell(row: dict) -> str:
    """A group's flagged rate as the cluster tables print it: "12%" where every document was
    scored, "12% (8-17%)" with its 95% interval where the rate is a sample's estimate."""
    rate = f"{100 * row['flagged_rate']:.0f}%"
    scored = row.get("scored_docs")
    if scored is None or row.get("flagged_low") is None or int(scored) >= int(row["docs"]):
        return rate
    return f"{rate} ({100 * row['flagged_low']:.0f}-{100 * row['flagged_high']:.0f}%)"
