"""What a rebuild changes: which datasets lose documents, the blends from the restart on, the new
`--data-path` lines and the run config that replays the rebuilt order.

One place owns "which datasets, which prefixes, from which iteration" (the blend builder's rule
in megatron-core: datasets never size themselves). The files themselves are written by
`forensics.rebuild.run`.

A restart with a new `--data-path` is what `data.stages` models: Megatron builds a new
BlendedDataset for the same number of training samples and the loader continues at the consumed
samples, so global sample c of the restart is the new blend's sample c. The rebuilt run is
therefore the original stages before the restart, then the same blends from the restart's first
iteration on with each blocked dataset replaced by its filtered copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dataloaders.config import RunConfig
from dataloaders.config_data import DatasetSpec
from forensics.errors import ForensicsError
from forensics.skip.plan import SkipPlan

REBUILT_SUFFIX = "_rebuilt"  # a rebuilt dataset's name: a name must mean one prefix in a config


@dataclass
class RebuildPlan:
    """The rebuild of one skip plan's block list.

    resume      first iteration the restart trains (the rollback checkpoint + 1)
    datasets    name -> (source spec, its filtered copy's prefix) for each dataset that loses
                documents and is drawn from `resume` on
    emptied     datasets whose every document is blocked: dropped from the blends instead
    idle        block-list datasets not drawn from `resume` on (nothing to rebuild for them)
    stages      the rebuilt run's stages (config dicts), the original ones before `resume`
    """

    skip: SkipPlan
    resume: int
    datasets: dict[str, tuple[DatasetSpec, Path]]
    emptied: list[str]
    idle: list[str]
    stages: list[dict[str, Any]] = field(default_factory=list)

    def data_path_lines(self) -> list[tuple[int, str]]:
        """(first iteration, `--data-path ...`) of every rebuilt stage, from `resume` on."""
        return [
            (s["start_iteration"], data_path_line(s["blend"]))
            for s in self.stages
            if s["start_iteration"] >= self.resume
        ]


def stage_at(stages: list[Any], iteration: int) -> int:
    """Index of the stage in force at `iteration`."""
    return max(i for i, s in enumerate(stages) if s.start_iteration <= iteration)


def data_path_line(blend: list[dict[str, Any]]) -> str:
    """Megatron's `--data-path W1 P1 W2 P2 ...` for a blend (config dicts, absolute prefixes)."""
    parts = []
    for spec in blend:
        parts += [f"{float(spec['weight']):g}", str(spec["prefix"])]
    return "--data-path " + " ".join(parts)


def plan_rebuild(config: RunConfig, skip: SkipPlan, out: Path) -> RebuildPlan:
    """Decide the datasets to filter and the stages of the rebuilt run (no files touched)."""
    stages = config.data.data_stages
    resume = int(skip.rollback.get("resume_iteration") or skip.rollback["iteration"] + 1)
    ahead = stages[stage_at(stages, resume) :]
    drawn = {spec.display_name: spec for stage in ahead for spec in stage.blend}
    blocked = {name: ids for name, ids in skip.documents.items() if ids}
    if not blocked:
        raise ForensicsError("the skip plan's block list is empty: there is nothing to rebuild")
    unknown = sorted(set(blocked) - {s.display_name for st in stages for s in st.blend})
    if unknown:
        raise ForensicsError(
            f"the block list names dataset(s) {', '.join(unknown)} that this config does not have"
        )
    datasets: dict[str, tuple[DatasetSpec, Path]] = {}
    emptied: list[str] = []
    for name in sorted(set(blocked) & set(drawn)):
        from dataloaders.megatron.indexed import IndexedDataset

        spec = drawn[name]
        if len(set(blocked[name])) >= IndexedDataset(spec.prefix).num_documents:
            emptied.append(name)
        else:
            datasets[name] = (spec, out / spec.prefix.name)
    idle = sorted(set(blocked) - set(drawn))
    if not datasets and not emptied:
        raise ForensicsError(
            f"the block list's datasets ({', '.join(idle)}) are not drawn from iteration {resume} "
            "on: there is nothing to rebuild; the skip flags are the whole fix"
        )
    plan = RebuildPlan(skip, resume, datasets, emptied, idle)
    plan.stages = rebuilt_stages(stages, resume, plan)
    return plan


def rebuilt_stages(stages: list[Any], resume: int, plan: RebuildPlan) -> list[dict[str, Any]]:
    """The original stages before `resume`; from `resume` on the same blends with each blocked
    dataset replaced by its filtered copy (renamed) or dropped when emptied."""
    first = stage_at(stages, resume)
    before = stages[: first + 1] if stages[first].start_iteration < resume else stages[:first]
    out = [s.model_dump(mode="json", exclude_none=True) for s in before]
    for i, stage in enumerate(stages[first:]):
        blend = []
        for spec in stage.blend:
            name = spec.display_name
            if name in plan.emptied:
                continue
            entry = spec.model_dump(mode="json", exclude_none=True)
            if name in plan.datasets:
                prefix = plan.datasets[name][1]
                entry |= {
                    "name": name + REBUILT_SUFFIX,
                    "prefix": str(prefix),
                    "manifest": f"{prefix}.manifest.parquet",
                }
            blend.append(entry)
        start = resume if i == 0 else stage.start_iteration
        if not blend:
            raise ForensicsError(
                f"the block list empties every dataset of the blend from iteration {start}"
            )
        out.append({"start_iteration": start, "blend": blend})
    return out


def rebuilt_config(config: RunConfig, plan: RebuildPlan) -> dict[str, Any]:
    """The run config of the rebuilt run, as a mapping (absolute paths): `forensics replay`
    reads it to give the data order from the restart on."""
    raw = config.model_dump(mode="json", exclude={"source"}, exclude_none=True)
    data = {k: v for k, v in raw["data"].items() if k not in ("blend", "stages")}
    data["stages"] = plan.stages
    name = raw.get("name") or "run"
    raw["name"] = f"{name}, rebuilt without the block list of spike {plan.skip.step}"
    raw["data"] = data
    if not raw["training"].get("applied_skips"):
        raw["training"].pop("applied_skips", None)
    return raw
