"""Where to restart after a malignant spike: the rollback checkpoint.

Adam's second-moment estimate (and the weights) absorb the bad batches over the tens of
iterations before the loss visibly spikes, so restarting from the checkpoint just before the
spike restarts from polluted optimizer state. The usual recipe (PaLM; BLOOM's runbooks) is to go
back 50-100 iterations before the spike and skip the bad data from there. The rule:

1. the latest available checkpoint in [S-100, S-50];
2. else the latest checkpoint before S-50 (i.e. before S-100: older, but clean);
3. else S-100, with a note: no usable checkpoint was listed, so the iteration is a target, not a
   file that exists.

A checkpoint `iter_C` holds the state after iteration C; the restarted job runs C+1 first, so the
skip ranges start at C+1.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

NEAR = 50  # the rollback lands at least this many iterations before the spike ...
FAR = 100  # ... and preferably no more than this many
# Iterations `forensics spike` replays before the spike by default: three rollback distances, so
# the window holds every batch trained since the rollback point and the data that came in
# before it (a crawl batch can enter the mixture well before the loss shows it).
SPIKE_WINDOW = 300


def spike_window(step: int, rollback: int) -> tuple[int, str]:
    """The `--window` for a spike at `step` with a restart from `rollback`, and why: triage and
    the watcher suggest it and spike defaults to SPIKE_WINDOW, so they say the same thing.

    Early in a run the window leaves at least half of the iterations before the spike for the
    baseline (spike compares the window with iterations before it)."""
    back = step - rollback
    room = max(1, step // 2)  # iterations the window may take and still leave a baseline
    if back > SPIKE_WINDOW:
        return back, f"--window {back}: back to the rollback checkpoint {rollback}"
    if room < SPIKE_WINDOW:
        window = max(min(back, step - 1), room)
        return window, (
            f"--window {window}: spike's default {SPIKE_WINDOW} would reach before iteration 1; "
            "the iterations before the window are the baseline"
        )
    return SPIKE_WINDOW, (
        f"--window {SPIKE_WINDOW} (spike's default): the {back} iterations since the rollback "
        f"checkpoint {rollback} and the data that came in before them"
    )


@dataclass(frozen=True)
class Rollback:
    """The recommended restart point.

    iteration   checkpoint iteration to load (state after this iteration; 0 = from scratch)
    checkpoint  True when `iteration` is a checkpoint known to exist (listed or found on disk)
    rule        which branch of the rule chose it: "window", "older", "no-checkpoint"
    note        a sentence for the report (why this one, or what is missing)
    earlier     when the culprit entered before `iteration`: the latest checkpoint before its
                onset (None when there is none or no onset was given)
    onset       the first iteration holding culprit documents, when known
    """

    iteration: int
    checkpoint: bool
    rule: str
    note: str
    earlier: int | None = None
    onset: int | None = None

    @property
    def resume_iteration(self) -> int:
        """The first iteration the restarted job runs."""
        return self.iteration + 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"resume_iteration": self.resume_iteration}


def recommend_rollback(
    step: int,
    checkpoints: Iterable[int],
    *,
    onset: int | None = None,
    near: int = NEAR,
    far: int = FAR,
) -> Rollback:
    """Pick the rollback checkpoint for a spike at `step` (see the module docstring).

    `onset` is the first iteration whose batch holds culprit documents, if known: when it lies
    at or before the chosen checkpoint, the optimizer state there already saw the bad data, and
    the note says so and names the latest checkpoint before the onset (`earlier`).
    """
    available = sorted({int(c) for c in checkpoints if 0 <= int(c) < step})
    lo, hi = step - far, step - near
    in_window = [c for c in available if lo <= c <= hi]
    older = [c for c in available if c < lo]
    if in_window:
        chosen, rule = in_window[-1], "window"
        note = (
            f"checkpoint iter_{chosen:07d} is {step - chosen} iterations before the spike "
            f"(the latest in {max(lo, 0)}-{hi})"
        )
        exists = True
    elif older:
        chosen, rule = older[-1], "older"
        note = (
            f"no checkpoint in {max(lo, 0)}-{hi}; iter_{chosen:07d} is the latest before it "
            f"({step - chosen} iterations before the spike: more to recompute, but clean)"
        )
        exists = True
    else:
        chosen, rule, exists = max(lo, 0), "no-checkpoint", False
        why = (
            "no checkpoint list was given (config: checkpoints or checkpoint_dir)"
            if not available
            else f"no listed checkpoint is at or before iteration {hi}"
        )
        note = f"{why}: iteration {chosen} is a target; use the nearest checkpoint at or before it"

    earlier = None
    if onset is not None and onset <= chosen:
        before = [c for c in available if c < onset]
        earlier = before[-1] if before else None
        note += (
            f"; the culprit is present from iteration {onset}, before this checkpoint, so its "
            "optimizer state already saw it"
            + (
                f": iter_{earlier:07d} (before the onset) is the clean choice"
                if earlier is not None
                else ": no checkpoint before the onset is listed"
            )
        )
    return Rollback(
        iteration=chosen, checkpoint=exists, rule=rule, note=note, earlier=earlier, onset=onset
    )
