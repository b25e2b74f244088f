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
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from dataloaders.megatron.config import DatasetSpec
from dataloaders.megatron.indexed import IndexedDataset
from dataloaders.run_config import RunConfig
from dataloaders.trainers import Trainer
from forensics.errors import ForensicsError
from forensics.rebuild.launches import Launch, plan_launches
from forensics.skip.flags import flag_trainer
from forensics.skip.plan import SkipPlan

REBUILT_SUFFIX = "_rebuilt"  # a rebuilt dataset's name: a name must mean one prefix in a config

# The recipe for a rebuilt dataset's weight (`forensics rebuild --keep`).
KEEP_SHARE = "share"  # the blend weight stays: the dataset keeps its share of samples
KEEP_PASSES = "passes"  # the weight falls with its tokens: its documents are drawn as often
RECIPES = (KEEP_SHARE, KEEP_PASSES)


@dataclass
class RebuildPlan:
    """The rebuild of one skip plan's block list.

    resume      first iteration the restart trains (the rollback checkpoint + 1)
    datasets    name -> (source spec, its filtered copy's prefix) for each dataset that loses
                documents and is drawn from `resume` on
    emptied     datasets whose every document is blocked: dropped from the blends instead
    idle        block-list datasets not drawn from `resume` on (nothing to rebuild for them)
    keep        the recipe: KEEP_SHARE or KEEP_PASSES
    kept_tokens name -> share of its tokens the filtered copy keeps (from the .idx)
    stages      the rebuilt run's stages (config dicts), the original ones before `resume`
    launches    the restart as the trainer runs it: one launch per stage from `resume` on
    upload_to   where the copies go in object storage (`rebuild --upload-to`), or None: local
    """

    skip: SkipPlan
    resume: int
    datasets: dict[str, tuple[DatasetSpec, Path]]
    emptied: list[str]
    idle: list[str]
    keep: str = KEEP_SHARE
    kept_tokens: dict[str, float] = field(default_factory=dict)
    stages: list[dict[str, Any]] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)
    upload_to: str | None = None  # an s3:// prefix the filtered copies are uploaded under
    out_cache: Path | None = None  # the rebuilt config's object-storage cache (upload_to)

    @cached_property
    def trainer(self) -> Trainer:
        """The trainer the skip plan was written for (skip.json names it): its launch words."""
        return flag_trainer(self.skip.chosen)

    def data_path_lines(self) -> list[tuple[int, str]]:
        """(first iteration, `--data-path ...`) of every launch of the restart."""
        return [(x.first, x.data_path) for x in self.launches]


def stage_at(stages: list[Any], iteration: int) -> int:
    """Index of the stage in force at `iteration`."""
    return max(i for i, s in enumerate(stages) if s.start_iteration <= iteration)


def copy_prefixes(specs: dict[str, DatasetSpec], out: Path, taken: set[str]) -> dict[str, Path]:
    """Each blocked dataset's filtered copy in `out`, named after its prefix's file name; two
    prefixes with one file name (data/a/web, data/b/web) get the parent folder's name in front,
    then a number, so that no copy overwrites another and no --data-path lists one twice."""
    names: dict[str, Path] = {}
    used = set(taken)
    clash = {
        n for n in specs if [s.prefix.name for s in specs.values()].count(specs[n].prefix.name) > 1
    }
    for name in sorted(specs):
        prefix = specs[name].prefix
        base = f"{prefix.parent.name}_{prefix.name}" if name in clash else prefix.name
        candidate, k = base, 2
        while candidate in used:
            candidate, k = f"{base}_{k}", k + 1
        used.add(candidate)
        names[name] = out / candidate
    return names


def plan_rebuild(
    config: RunConfig,
    skip: SkipPlan,
    out: Path,
    keep: str = KEEP_SHARE,
    upload_to: str | None = None,
) -> RebuildPlan:
    """Decide the datasets to filter and the stages of the rebuilt run (no files touched)."""
    if keep not in RECIPES:
        raise ForensicsError(f"--keep {keep!r}: give one of {', '.join(RECIPES)}")
    stages = config.data.data_stages
    resume = int(skip.rollback.get("resume_iteration") or skip.rollback["iteration"] + 1)
    ahead = stages[stage_at(stages, resume) :]
    drawn = {spec.display_name: spec for stage in ahead for spec in stage.blend}
    blocked = {name: ids for name, ids in skip.documents.items() if ids}
    if not blocked:
        raise ForensicsError("the skip plan's block list is empty: there is nothing to rebuild")
    names = {s.display_name for st in stages for s in st.blend}
    unknown = sorted(set(blocked) - names)
    if unknown:
        raise ForensicsError(
            f"the block list names dataset(s) {', '.join(unknown)} that this config does not have"
        )
    taken = sorted(
        n for n in names if n.endswith(REBUILT_SUFFIX) and n[: -len(REBUILT_SUFFIX)] in blocked
    )
    if taken:
        raise ForensicsError(
            f"the config already has a dataset named {taken[0]}, the name the rebuilt copy of "
            f"{taken[0][: -len(REBUILT_SUFFIX)]} would take; rename it in the config"
        )
    emptied: list[str] = []
    filtered: dict[str, DatasetSpec] = {}
    kept_tokens: dict[str, float] = {}
    for name in sorted(set(blocked) & set(drawn)):
        source = IndexedDataset(drawn[name].prefix, remote=drawn[name].remote)
        ids = np.unique(np.asarray(blocked[name], dtype=np.int64))
        if ids.size >= source.num_documents:
            emptied.append(name)
            continue
        filtered[name] = drawn[name]
        counts = source.document_token_counts()
        total = int(counts.sum())
        inside = ids[(ids >= 0) & (ids < counts.size)]
        kept_tokens[name] = (total - int(counts[inside].sum())) / total if total else 1.0
    copies = copy_prefixes(filtered, out, set())
    datasets = {name: (filtered[name], copies[name]) for name in filtered}
    idle = sorted(set(blocked) - set(drawn))
    if not datasets and not emptied:
        raise ForensicsError(
            f"the block list's datasets ({', '.join(idle)}) are not drawn from iteration {resume} "
            "on: there is nothing to rebuild; the skip flags are the whole fix"
        )
    plan = RebuildPlan(skip, resume, datasets, emptied, idle, keep, kept_tokens)
    plan.upload_to = upload_to.rstrip("/") if upload_to else None
    plan.out_cache = out / "object-cache"
    plan.stages = rebuilt_stages(stages, resume, plan)
    plan.launches = plan_launches(
        plan.stages, stages, resume, int(skip.rollback["iteration"]), plan.trainer
    )
    return plan


def reweighted(blend: list[dict[str, Any]], plan: RebuildPlan) -> list[dict[str, Any]]:
    """KEEP_PASSES: each rebuilt dataset's weight times the share of tokens it keeps, and the
    other datasets' weights scaled up to fill what it gives up (the sum of weights stays, so a
    rebuilt dataset's share of samples falls exactly with its tokens); rounded to 6 significant
    digits, as the --data-path line prints them."""
    if plan.keep != KEEP_PASSES:
        return blend
    total = sum(float(e["weight"]) for e in blend)
    rebuilt = [e for e in blend if e.get("source_name") in plan.kept_tokens]
    if not rebuilt:  # nothing lost here: the blend (and so the order) stays the original's
        return blend
    others = [e for e in blend if e not in rebuilt]
    lowered = sum(float(e["weight"]) * plan.kept_tokens[e["source_name"]] for e in rebuilt)
    rest = sum(float(e["weight"]) for e in others)
    scale = (total - lowered) / rest if rest else 1.0
    out = []
    for e in blend:
        factor = plan.kept_tokens[e["source_name"]] if e in rebuilt else scale
        out.append(e | {"weight": float(f"{float(e['weight']) * factor:.6g}")})
    return out


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
            entry = spec.model_dump(mode="json", exclude_none=True) | {"source_name": name}
            entry.setdefault("weight", 1.0)
            if name in plan.datasets:
                prefix = plan.datasets[name][1]
                entry.pop("remote", None)  # the copy is local, whatever its source was
                entry |= {
                    "name": name + REBUILT_SUFFIX,
                    "prefix": str(prefix),
                    "manifest": f"{prefix}.manifest.parquet",
                }
                if plan.upload_to:  # read from where it is uploaded, as the restart reads it
                    entry["prefix"] = f"{plan.upload_to}/{prefix.name}"
            blend.append(entry)
        start = resume if i == 0 else stage.start_iteration
        if not blend:
            raise ForensicsError(
                f"the block list empties every dataset of the blend from iteration {start}"
            )
        blend = [
            {k: v for k, v in e.items() if k != "source_name"} for e in reweighted(blend, plan)
        ]
        out.append({"start_iteration": start, "blend": blend})
    return out


def rebuilt_config(config: RunConfig, plan: RebuildPlan) -> dict[str, Any]:
    """The run config of the rebuilt run, as a mapping (absolute paths): `forensics replay`
    reads it to give the data order from the restart on."""
    raw = config.model_dump(mode="json", exclude={"source"}, exclude_none=True)
    data = {k: v for k, v in raw["data"].items() if k not in ("blend", "stages")}
    data["stages"] = plan.stages
    if plan.upload_to and not data.get("object_storage_cache_path"):
        data["object_storage_cache_path"] = str(plan.out_cache)
    name = raw.get("name") or "run"
    raw["name"] = f"{name}, rebuilt without the block list of spike {plan.skip.step}"
    raw["data"] = data
    if not raw["training"].get("applied_skips"):
        raw["training"].pop("applied_skips", None)
    return raw
