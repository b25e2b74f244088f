"""Skip ranges for the restarted job, in the flag syntax of each trainer, and their check.

Iterations are 1-indexed and absolute (iteration i consumed global batch i). The restarted job
loads checkpoint R and runs R+1 first; we skip iterations in [R+1, S+after].

Two trainers, two semantics (../shared/notes/megatron.md, "Skipping on restart"):

- NVIDIA Megatron-LM `--iterations-to-skip 8400 8401 ...`: the training loop tests
  `iteration in args.iterations_to_skip` *before* the step, while `iteration` still counts the
  completed steps (the step then runs, the counter becomes iteration + 1 and that is the number
  the log prints). So the value k drops the batch logged as iteration k + 1: to skip our
  (logged, 1-indexed) iteration i the flag lists i - 1. The skipped batch is drawn and dropped,
  and the counter and consumed samples still advance, so the numbers stay absolute. No range
  syntax: the list is expanded.
- Megatron-DeepSpeed `--skip-train-iteration-range a-b ...` (as in BigScience's
  megatron/arguments.py and training.py): the argument parser sorts the ranges and merges
  *overlapping* ones (`prev_end >= start`; adjacent ranges stay apart); at (re)start, ranges
  ending before the loaded iteration are dropped; in training, when the *next* iteration number
  falls in the front range, it drains batches up to the range's end from the data iterator
  WITHOUT advancing the iteration counter (or consumed samples), then pops the range. After the
  first range the counter therefore lags the data by the number of batches drained so far, and
  every later range must be written shifted down by that count. A shifted range that overlaps
  its shifted predecessor would be merged by the parser, so the canonical ranges are first made
  representable (`deepspeed_representable`): a clean gap shorter than the previous range is
  skipped too.

Both flag strings are parsed back (`parse_megatron_lm`, `parse_megatron_deepspeed`, the latter by
simulating the loop above) to the set of absolute batches they drop; the tests hold them equal.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import polars as pl

from forensics.errors import ForensicsError

Range = tuple[int, int]  # inclusive, 1-indexed iterations

DEEPSPEED_CAVEAT = (
    "Megatron-DeepSpeed drains skipped batches without advancing the iteration counter or "
    "consumed samples, so every range after the first is written shifted down by the iterations "
    "skipped before it; the run then ends that many batches later in the data, and its logged "
    "iteration numbers stay behind the data by the same count. Use this string only for a restart "
    "from the recommended checkpoint."
)


# -- ranges -------------------------------------------------------------------------------------


def merge_ranges(iterations: Iterable[int]) -> list[Range]:
    """Sorted, merged inclusive ranges covering exactly `iterations`."""
    out: list[list[int]] = []
    for it in sorted({int(i) for i in iterations}):
        if out and it == out[-1][1] + 1:
            out[-1][1] = it
        else:
            out.append([it, it])
    return [(a, b) for a, b in out]


def expand(ranges: Iterable[Sequence[int]]) -> list[int]:
    """All iterations of inclusive ranges, sorted and unique."""
    return sorted({i for a, b in ranges for i in range(int(a), int(b) + 1)})


def deepspeed_representable(ranges: Sequence[Range]) -> list[Range]:
    """Merge ranges until Megatron-DeepSpeed's shifted form keeps them apart.

    Range k is written shifted by the iterations skipped before it; the parser keeps it apart
    from its (shifted) predecessor k-1 only when they do not overlap, i.e. when the clean gap
    between them is at least as long as range k-1 (`a_k - b_{k-1} - 1 >= b_{k-1} - a_{k-1} + 1`).
    Otherwise the gap is skipped as well.
    """
    out: list[Range] = []
    for a, b in sorted(ranges):
        if out:
            pa, pb = out[-1]
            if a - pb - 1 < pb - pa + 1:
                out[-1] = (pa, max(pb, b))
                continue
        out.append((a, b))
    return out


# -- flag strings -------------------------------------------------------------------------------


def megatron_lm_flag(ranges: Sequence[Range]) -> str:
    """`--iterations-to-skip ...` for NVIDIA Megatron-LM: absolute, expanded, and each value one
    less than the logged iteration it drops (the loop compares the completed-step count)."""
    its = expand(ranges)
    if not its:
        return ""
    return "--iterations-to-skip " + " ".join(str(i - 1) for i in its)


def megatron_deepspeed_ranges(ranges: Sequence[Range]) -> list[Range]:
    """The ranges as Megatron-DeepSpeed must be given them: each shifted by earlier skips."""
    out: list[Range] = []
    skipped = 0
    for a, b in sorted(ranges):
        out.append((a - skipped, b - skipped))
        skipped += b - a + 1
    return out


def megatron_deepspeed_flag(ranges: Sequence[Range]) -> str:
    """`--skip-train-iteration-range a-b ...` for Megatron-DeepSpeed (shifted; see module doc)."""
    shifted = megatron_deepspeed_ranges(ranges)
    if not shifted:
        return ""
    return "--skip-train-iteration-range " + " ".join(f"{a}-{b}" for a, b in shifted)


def _flag_values(flag: str, name: str) -> list[str]:
    tokens = flag.split()
    if not tokens:
        return []
    if tokens[0] != name:
        raise ForensicsError(f"expected a flag string starting with {name}, got {tokens[0]!r}")
    return tokens[1:]


def parse_megatron_lm(flag: str) -> set[int]:
    """The (logged, 1-indexed) iterations a Megatron-LM `--iterations-to-skip` string drops:
    value k drops the step taken when k steps are complete, logged as iteration k + 1."""
    out = set()
    for tok in _flag_values(flag, "--iterations-to-skip"):
        if not tok.isdigit():
            raise ForensicsError(f"--iterations-to-skip: not a completed-step count: {tok!r}")
        out.add(int(tok) + 1)
    return out


def _parse_deepspeed_argument(flag: str) -> list[list[int]]:
    """Megatron-DeepSpeed's argument parsing: split `a-b`, sort, merge overlapping ranges."""
    pairs = []
    for tok in _flag_values(flag, "--skip-train-iteration-range"):
        m = re.fullmatch(r"(\d+)-(\d+)", tok)
        if not m or int(m.group(2)) < int(m.group(1)):
            raise ForensicsError(
                f"--skip-train-iteration-range: not a range a-b with a<=b: {tok!r}"
            )
        pairs.append([int(m.group(1)), int(m.group(2))])
    merged: list[list[int]] = []
    for a, b in sorted(pairs):
        if merged and merged[-1][1] >= a:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return merged


def parse_megatron_deepspeed(flag: str, resume_from: int) -> set[int]:
    """The absolute batches (= iterations of the original run) a Megatron-DeepSpeed restart from
    checkpoint `resume_from` drains, by simulating its training loop.

    The counter starts at `resume_from`; the data position too. Before each iteration, if the
    front range holds counter+1, the loop drains batches until the counter would pass the range's
    end (end - counter batches), pops it and does not advance the counter; otherwise it trains one
    batch and advances both. Ranges ending before `resume_from` are dropped at start; a front
    range still behind the counter after that never fires (and blocks the ones after it), as in
    the trainer.
    """
    pending = [r for r in _parse_deepspeed_argument(flag) if r[1] >= resume_from]
    counter = position = resume_from
    dropped: set[int] = set()
    while pending:
        start, end = pending[0]
        if start <= counter + 1 <= end:
            n = end - counter
            dropped.update(range(position + 1, position + n + 1))
            position += n
            pending.pop(0)
        elif counter + 1 > end:
            break
        else:
            counter += 1
            position += 1
    return dropped


# -- choosing and costing -----------------------------------------------------------------------


def check_threshold(threshold: float) -> None:
    """A culprit share threshold is in [0, 1): at 1 no iteration could ever be skipped."""
    if not 0.0 <= threshold < 1.0:
        raise ForensicsError(f"--threshold must be in [0, 1), got {threshold}")


def select_iterations(exposure: pl.DataFrame, threshold: float = 0.0) -> list[int]:
    """Iterations whose culprit share (flagged_samples / samples) exceeds `threshold`.

    `exposure` has iteration, samples, flagged_samples (Replayer.exposure); threshold 0 means any
    culprit sample at all.
    """
    check_threshold(threshold)
    chosen = exposure.filter(
        (pl.col("flagged_samples") > 0)
        & (pl.col("flagged_samples") > threshold * pl.col("samples"))
    )
    return chosen["iteration"].sort().to_list()


def collateral(exposure: pl.DataFrame, ranges: Sequence[Range]) -> dict[str, int | float]:
    """What the ranges cost and miss within the exposure table's iterations.

    clean_samples_skipped    samples in skipped iterations that hold no culprit document
    culprit_samples_missed   samples holding culprit documents in iterations not skipped
    """
    skipped = set(expand(ranges))
    marked = exposure.with_columns(pl.col("iteration").is_in(list(skipped)).alias("_skip"))
    sk = marked.filter(pl.col("_skip"))
    kept = marked.filter(~pl.col("_skip"))
    culprit_total = int(marked["flagged_samples"].sum() or 0)
    return {
        "iterations_skipped": sk.height,
        "samples_skipped": int(sk["samples"].sum() or 0),
        "clean_samples_skipped": int((sk["samples"] - sk["flagged_samples"]).sum() or 0),
        "culprit_samples_skipped": int(sk["flagged_samples"].sum() or 0),
        "culprit_samples_missed": int(kept["flagged_samples"].sum() or 0),
        "culprit_samples_total": culprit_total,
        "culprit_iterations_missed": int((kept["flagged_samples"] > 0).sum()),
    }


def sample_ranges(iteration_samples: pl.DataFrame, ranges: Sequence[Range]) -> list[list[int]]:
    """Half-open global sample ranges [first, end) of the skipped iterations, merged.

    `iteration_samples` has iteration, first_sample, end_sample (Replayer.iteration_samples).
    """
    skipped = set(expand(ranges))
    rows = (
        iteration_samples.filter(pl.col("iteration").is_in(list(skipped)))
        .sort("iteration")
        .select("first_sample", "end_sample")
        .rows()
    )
    out: list[list[int]] = []
    for first, end in rows:
        if out and out[-1][1] == first:
            out[-1][1] = end
        else:
            out.append([int(first), int(end)])
    return out


# -- fingerprint --------------------------------------------------------------------------------


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
