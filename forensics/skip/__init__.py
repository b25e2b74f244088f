"""What to skip on the restart, and how each trainer is told: ranges (`ranges`), the trainers'
flags proven against their loops (`flags`), Megatron-LM's tracker file (`tracker`), and the
plan that skip.json holds (`plan`)."""

from forensics.skip.fingerprint import fingerprint_differences, json_fingerprint
from forensics.skip.ranges import (
    Range,
    check_threshold,
    collateral,
    expand,
    merge_ranges,
    sample_ranges,
    select_iterations,
)

__all__ = [
    "Range",
    "check_threshold",
    "collateral",
    "expand",
    "fingerprint_differences",
    "json_fingerprint",
    "merge_ranges",
    "sample_ranges",
    "select_iterations",
]
