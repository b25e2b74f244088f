"""Where to restart after a spike: the rollback checkpoint, from evidence when there is some.

A checkpoint C (Megatron's `iter_C`; each trainer names its folders, `Trainer.checkpoint_name`)
holds the state after iteration C; the restarted job runs C+1 first, so a
checkpoint is clean of data that first entered at iteration X when C < X, and the skip ranges
start at C+1.

The rule, in order:

1. evidence: when the culprit's first document is known (spike's replay), or new data entered
   (a data stage starting shortly before the spike, which triage reads from the config), the
   latest checkpoint before it, and before any earlier warning (a grad-norm alarm, a stage
   switch) that came ahead of it. Restarting any later resumes from weights and optimizer state
   that already trained on the culprit; restarting earlier throws away clean iterations.
2. the fallback, when nothing is known about where the trouble entered: Adam's second-moment
   estimate (and the weights) absorb the bad batches over the tens of iterations before the
   loss visibly spikes, so restarting just before the spike restarts from polluted state. The
   usual recipe (PaLM; BLOOM's runbooks) goes back 50-100 iterations: the latest checkpoint in
   [S-100, S-50], else the latest before S-50 (older, but clean); a warning (a grad-norm alarm
   the spike followed) at or before that checkpoint moves it to the latest before the warning.
3. no listed checkpoint fits: the iteration is a target, not a file that exists, and the note
   says so.

`Rollback.note` is one line that says which rule chose the checkpoint and why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from dataloaders.trainers import DEFAULT_TRAINER, REGISTRY, Trainer

NEAR = 50  # the rollback lands at least this many iterations before the spike ...
FAR = 100  # ... and preferably no more than this many


@dataclass(frozen=True)
class Mark:
    """A point the rollback must go before: `iteration` is the first iteration affected (the
    culprit's first document, a grad-norm alarm's first step, a stage's first iteration);
    `what` names it for the note ("the culprit's first document")."""

    iteration: int
    what: str


@dataclass(frozen=True)
class Rollback:
    """The recommended restart point.

    iteration   checkpoint iteration to load (state after this iteration; 0 = from scratch)
    checkpoint  True when `iteration` is a checkpoint known to exist (listed or found on disk)
    rule        which rule chose it: "evidence" (before the culprit's first document or the new
                data), "window" (latest in [S-100, S-50]), "older" (latest before that),
                "warning" (the fallback moved before a warning), "no-checkpoint" (a target)
    note        one line: which rule chose it and why (or what is missing)
    before      the iteration the rollback goes before (the earliest evidence or warning),
                None under the fixed window
    onset       the first iteration holding culprit documents (or new data), when known
    """

    iteration: int
    checkpoint: bool
    rule: str
    note: str
    before: int | None = None
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
    onset: Mark | int | None = None,
    warnings: Iterable[Mark] = (),
    near: int = NEAR,
    far: int = FAR,
    trainer: Trainer | None = None,
) -> Rollback:
    """Pick the rollback checkpoint for a spike at `step` (see the module docstring).

    `checkpoints`: the iterations saved (`Trainer.checkpoints` of the save folder, or a list).
    `onset`: where the culprit (or the new data) first entered, if known (an int is "the
    culprit's first document"). `warnings`: earlier signs of trouble tied to this spike (the
    caller keeps only those that belong to it); only those before `step` count. `trainer`: the
    run's, which names the checkpoint folder in the note (default: Megatron-LM's)."""
    name = (trainer or REGISTRY[DEFAULT_TRAINER]).checkpoint_name
    available = sorted({int(c) for c in checkpoints if 0 <= int(c) < step})
    if isinstance(onset, int):
        onset = Mark(onset, "the culprit's first document")
    marks = sorted(
        (m for m in warnings if 0 < m.iteration <= step), key=lambda m: (m.iteration, m.what)
    )
    if onset is not None and 0 < onset.iteration <= step:
        first = min([onset, *marks], key=lambda m: m.iteration)
        return _before(step, available, first, onset, "evidence", name)
    rb = _fixed_window(step, available, near, far, name)
    early = [m for m in marks if m.iteration <= rb.iteration]
    if early:
        return _before(step, available, early[0], None, "warning", name)
    return rb


def _before(
    step: int,
    available: list[int],
    mark: Mark,
    onset: Mark | None,
    rule: str,
    name: Callable[[int], str],
) -> Rollback:
    """The latest checkpoint before `mark` (state after C < mark.iteration: never trained on
    it); a target with a note when none is listed."""
    clean = [c for c in available if c < mark.iteration]
    where = f"{mark.what} (iteration {mark.iteration})"
    if onset is not None and mark is not onset:
        where += f", which came before {onset.what} (iteration {onset.iteration})"
    label = "rule: the latest checkpoint before " + where
    if clean:
        chosen = clean[-1]
        note = f"{label}: {name(chosen)}, {step - chosen} iterations before the spike"
        exists = True
    else:
        chosen, exists, rule = max(mark.iteration - 1, 0), False, "no-checkpoint"
        why = (
            "no checkpoint list was given (config: checkpoints or checkpoint_dir)"
            if not available
            else f"no listed checkpoint is before iteration {mark.iteration}"
        )
        note = f"{label}; {why}: iteration {chosen} is a target, use the latest checkpoint at or "
        note += "before it"
    return Rollback(
        iteration=chosen,
        checkpoint=exists,
        rule=rule,
        note=note,
        before=mark.iteration,
        onset=None if onset is None else onset.iteration,
    )


def _fixed_window(
    step: int, available: list[int], near: int, far: int, name: Callable[[int], str]
) -> Rollback:
    """The fallback: latest checkpoint in [S-far, S-near], else the latest before it, else
    S-far as a target."""
    lo, hi = step - far, step - near
    in_window = [c for c in available if lo <= c <= hi]
    older = [c for c in available if c < lo]
    head = f"rule: nothing says where the trouble entered, so {near}-{far} iterations before the "
    head += "spike (the fixed fallback)"
    if in_window:
        chosen = in_window[-1]
        note = f"{head}: {name(chosen)}, the latest in {max(lo, 0)}-{hi}"
        return Rollback(chosen, True, "window", note)
    if older:
        chosen = older[-1]
        note = (
            f"{head}: no checkpoint in {max(lo, 0)}-{hi}; {name(chosen)} is the latest before "
            f"it ({step - chosen} iterations before the spike: more to recompute, but clean)"
        )
        return Rollback(chosen, True, "older", note)
    chosen = max(lo, 0)
    why = (
        "no checkpoint list was given (config: checkpoints or checkpoint_dir)"
        if not available
        else f"no listed checkpoint is at or before iteration {hi}"
    )
    note = f"{head}; {why}: iteration {chosen} is a target, use the nearest checkpoint at or "
    note += "before it"
    return Rollback(chosen, False, "no-checkpoint", note)
