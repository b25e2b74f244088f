"""The skip plan: what `skip.json` holds, as one typed object that every reader shares.

`forensics spike` builds it, `check-skip`, the report and the terminal read it back. Reading
validates the types, so a hand-edited file fails with the key that is wrong instead of a
traceback somewhere downstream.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from dataloaders.schedule import Schedule
from dataloaders.trainers import Trainer
from forensics.errors import ForensicsError
from forensics.publish_set import refuse_if_mid_publish
from forensics.skip.flags import TrainerFlag, representable, write_all
from forensics.skip.ranges import Range, collateral, expand, merge_ranges, sample_ranges

VERSION = 2


@dataclass
class SkipPlan:
    """skip.json. Iterations are logged, 1-indexed, absolute; ranges inclusive.

    trainer       the loop that will read the flags (config `training.trainer` or --trainer)
    iterations    the batches to skip (for the chosen trainer's syntax: possibly widened)
    samples       their global sample ranges, half-open
    flags         every trainer's flag for the same batches (or its refusal), chosen one first
    composed      iterations an earlier restart already skipped that lie after the rollback and
                  are skipped again (training.applied_skips)
    documents     the block list: culprit documents by dataset
    action        what to do first: rebuild (the block list removed) or skip (forensics.skip.action)
    readme        one sentence per key (forensics.skip.readme)
    """

    step: int
    window: list[int]
    rollback: dict[str, Any]
    scope: list[int]
    threshold: float
    trainer: str
    iterations: list[list[int]]
    samples: list[list[int]]
    documents: dict[str, list[int]]
    culprit_clusters: list[str]
    documents_seen_in_window: int
    documents_flagged: dict[str, list[int]]
    flags: dict[str, TrainerFlag]
    collateral: dict[str, Any]
    ahead: dict[str, Any]
    fingerprint: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    composed: list[int] = field(default_factory=list)
    tracker_file: str | None = None
    version: int = VERSION
    action: dict[str, Any] = field(default_factory=dict)
    readme: dict[str, str] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)  # who wrote it (forensics.provenance)

    @property
    def chosen(self) -> TrainerFlag:
        return self.flags[self.trainer]

    @property
    def ranges(self) -> list[Range]:
        return [(int(a), int(b)) for a, b in self.iterations]

    def to_dict(self) -> dict[str, Any]:
        """The file's content: `action` first (what to do), `readme` last."""
        names = ["action"] + [f.name for f in fields(self) if f.name not in ("action", "readme")]
        out = {name: getattr(self, name) for name in [*names, "readme"]}
        out["flags"] = {name: flag.to_dict() for name, flag in self.flags.items()}
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_dict(cls, data: Any, where: str = "skip.json") -> SkipPlan:
        if not isinstance(data, dict):
            raise ForensicsError(f"{where}: not a skip file (expected a JSON object)")
        if data.get("version") != VERSION:
            raise ForensicsError(
                f"{where}: skip file version {data.get('version')!r}, this forensics reads "
                f"version {VERSION}; rerun forensics spike to write it anew"
            )
        required = [f.name for f in fields(cls) if f.default is MISSING]
        required = [n for n in required if fields_by_name(cls)[n].default_factory is MISSING]
        missing = [n for n in required if n not in data]
        if missing:
            raise ForensicsError(
                f"{where}: not a skip file from forensics spike (no {', '.join(missing)})"
            )
        _check_types(data, where)
        values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        values["flags"] = {k: TrainerFlag.from_dict(v) for k, v in data["flags"].items()}
        if values["trainer"] not in values["flags"]:
            raise ForensicsError(f"{where}: trainer {values['trainer']!r} has no entry in flags")
        return cls(**values)

    @classmethod
    def read(cls, path: Path) -> SkipPlan:
        refuse_if_mid_publish(path.parent, path.name)  # before "not found": a kill may leave none
        if not path.is_file():
            raise ForensicsError(f"{path}: skip file not found")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ForensicsError(f"{path}: not valid JSON ({err})") from None
        except RecursionError:
            raise ForensicsError(f"{path}: JSON nested too deeply to be a skip file") from None
        return cls.from_dict(data, str(path))


def fields_by_name(cls: type) -> dict[str, Any]:
    return {f.name: f for f in fields(cls)}


def _check_types(data: dict[str, Any], where: str) -> None:
    """The keys a reader relies on, with the types it relies on."""

    def bad(key: str, want: str) -> ForensicsError:
        return ForensicsError(f"{where}: {key} must be {want} (edited?)")

    for key in ("step", "documents_seen_in_window"):
        if not isinstance(data[key], int) or isinstance(data[key], bool):
            raise bad(key, "an integer")
    for key in ("iterations", "samples"):
        rows = data[key]
        if not isinstance(rows, list) or not all(
            isinstance(r, list) and len(r) == 2 and all(isinstance(v, int) for v in r) for r in rows
        ):
            raise bad(key, "a list of [first, last] integer pairs")
        if key == "iterations" and any(a < 1 or b < a for a, b in rows):
            raise bad(key, "ranges with 1 <= first <= last")
    for key in ("documents", "documents_flagged"):
        docs = data[key]
        if not isinstance(docs, dict) or not all(
            isinstance(v, list) and all(isinstance(i, int) for i in v) for v in docs.values()
        ):
            raise bad(key, "an object of dataset -> list of document ids")
    for key in ("rollback", "collateral", "ahead", "fingerprint", "flags"):
        if not isinstance(data[key], dict):
            raise bad(key, "an object")
    for name, flag in data["flags"].items():
        if not isinstance(flag, dict) or not isinstance(flag.get("flag"), str | None):
            raise bad(f"flags.{name}", "an object with a string flag")
    if not isinstance(data["rollback"].get("iteration"), int):
        raise bad("rollback.iteration", "an integer")
    if not isinstance(data["trainer"], str):
        raise bad("trainer", "a string")


def plan_flags(
    trainer: Trainer, chosen: list[int], schedule: Schedule, checkpoint: int
) -> tuple[list[Range], list[int], int, dict[str, TrainerFlag]]:
    """The ranges to skip on a restart from `checkpoint` and every trainer's flag for them.

    Skips an earlier restart applied after the checkpoint are composed in (a job rolled back
    before them would otherwise train those batches again). The ranges are widened only where
    the chosen trainer's syntax needs it. Returns (ranges, composed iterations, iterations
    added by widening, flags).
    """
    ahead = np.flatnonzero(schedule.skipped[checkpoint + 1 :]) + checkpoint + 1
    earlier = sorted(set(ahead.tolist()) - set(chosen))
    exact = merge_ranges([*chosen, *earlier])
    ranges = representable(trainer, exact, schedule, checkpoint)
    joined = len(expand(ranges)) - len(expand(exact))
    return ranges, earlier, joined, write_all(trainer, ranges, schedule, checkpoint)


@dataclass(frozen=True)
class FlagChoice:
    """The iterations to skip as `trainer` is told them (plan_flags' answer).

    ranges    inclusive iteration ranges, widened where the trainer's syntax needs it
    composed  iterations an earlier restart skipped after the checkpoint, skipped again
    joined    iterations the widening added
    flags     every trainer's flag for the ranges (or its refusal)
    """

    trainer: str
    ranges: list[Range]
    composed: list[int]
    joined: int
    flags: dict[str, TrainerFlag]

    @property
    def exact(self) -> bool:
        """Whether the trainer is told the ranges exactly (nothing to skip counts as exact);
        when not, `flags[trainer].refusal` says why."""
        return not self.ranges or self.flags[self.trainer].flag is not None


def choose_flags(trainer: Trainer, chosen: list[int], replayer: Any, checkpoint: int) -> FlagChoice:
    """plan_flags over the replayer's schedule (the one its skips and stages are counted in)."""
    ranges, composed, joined, flags = plan_flags(trainer, chosen, replayer.schedule, checkpoint)
    return FlagChoice(trainer.name, ranges, composed, joined, flags)


def build_skip_plan(
    choice: FlagChoice,
    replayer: Any,
    costed: Any,
    *,
    samples_from: int | None = None,
    **fields: Any,
) -> SkipPlan:
    """The skip plan of `choice`, for `forensics spike` and `forensics scan` alike: the flags,
    the skipped iterations' global samples (of the iterations from `samples_from` on; default:
    all of them) and what skipping costs over `costed` (iteration, samples, flagged_samples);
    the other SkipPlan fields as given."""
    ranges = choice.ranges
    samples: list[list[int]] = []
    if ranges:
        first = min(a for a, _ in ranges) if samples_from is None else samples_from
        last = max(first, *(b for _, b in ranges))
        samples = sample_ranges(replayer.iteration_samples(first, last), ranges)
    return SkipPlan(
        trainer=choice.trainer,
        iterations=[list(r) for r in ranges],
        samples=samples,
        flags=choice.flags,
        collateral=collateral(costed, ranges) | {"iterations_joined_for_trainer": choice.joined},
        composed=choice.composed,
        **fields,
    )
