"""The rebuild's words and small files: the rebuilt config, the flag files, rebuild.json and the
note saying what the restart does differently (the data order changes from the restart on)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from dataloaders.atomic import write_json_atomic, write_text_atomic
from dataloaders.families import get_family
from forensics.provenance import provenance
from forensics.rebuild.launches import data_path_file, launches_note, paste_form
from forensics.rebuild.plan import KEEP_SHARE, RebuildPlan
from forensics.skip.flags import flag_trainer


def recipe_notes(plan: RebuildPlan, counts: dict[str, dict[str, Any]]) -> list[str]:
    """Both consequences of the weight recipe, the chosen one first (`--keep share|passes`)."""
    notes = []
    for name, row in counts.items():
        factor = row["repeat_factor"]
        share = (
            f"--keep share (the blend weight stays): {name} keeps its share of samples, so each "
            f"of its remaining documents is drawn {factor:.2f}x as often as before"
        )
        passes = (
            f"--keep passes (the weight falls with its tokens, the other datasets' weights rise "
            f"to fill the difference): each remaining document of {name} is drawn as often as "
            f"before, and its share of samples falls to {1 / factor:.2f}x"
        )
        chosen, other = (share, passes) if plan.keep == KEEP_SHARE else (passes, share)
        notes.append(f"Chosen: {chosen}. The alternative, {other}.")
    return notes


def order_note(plan: RebuildPlan, out: Path, counts: dict[str, dict[str, Any]]) -> list[str]:
    """What changes with the rebuilt data, one sentence each."""
    rb = plan.skip.rollback["iteration"]
    config = shlex.quote(str(out / "rebuilt.yaml"))
    changed = [x for x in plan.launches if x.changed]
    first_new = changed[0].first if changed else plan.resume
    notes = [
        f"The data order changes from iteration {first_new} on: Megatron builds new blend and "
        "shuffle indices for a new --data-path, so the batches of every launch with a rebuilt "
        "dataset differ from the original run's (global sample c is the new blend's sample c). "
        f"Iterations up to {max(rb, first_new - 1)} are unchanged. Replay the new order: "
        "forensics replay --config "
        f"{config} --step STEP --window W.",
    ]
    kept = launches_note(plan.launches)
    if kept:
        notes.append(kept)
    if len(plan.launches) > 1:
        notes.append(
            f"The restart is {len(plan.launches)} launches, one per data stage, run in order: "
            + ", ".join(x.file for x in plan.launches)
            + ". Keep --train-iters and --save as they are (--train-iters sizes the blend's "
            "indices; --exit-interval saves the checkpoint the next launch loads)."
        )
    notes += [
        "Do not also pass the skip flags of skip.json: they name batches of the old order; the "
        "restart loads the rollback checkpoint with the new --data-path instead.",
        *recipe_notes(plan, counts),
        "Megatron's --split is by position within each dataset, so the train/validation "
        "boundary of a filtered dataset moves by the documents removed before it.",
        "The first start builds new index files for the rebuilt data (--data-cache-path).",
    ]
    if plan.emptied:
        notes.append(
            f"Every document of {', '.join(plan.emptied)} is blocked: dropped from the blend "
            "(Megatron renormalises the remaining weights)."
        )
    if plan.idle:
        notes.append(
            f"{', '.join(plan.idle)}: not drawn from iteration {plan.resume} on, left as is."
        )
    return notes


def restart_flags(plan: RebuildPlan) -> tuple[str, str | None]:
    """(flags-only line of the first launch, an instruction for a pin that is not a flag)."""
    line, pin = plan.launches[0].flags(plan.trainer)
    return f"{line}\n", pin


def write_texts(
    plan: RebuildPlan,
    raw: dict[str, Any],
    counts: dict[str, dict[str, Any]],
    staging: Path,
    skip_file: Path,
    out: Path,
) -> dict[str, Any]:
    """Write rebuilt.yaml, one data_path file and one restart flags file per launch,
    rebuild.json and rebuild.md into `staging`; returns the summary (rebuild.json's content)."""
    import yaml

    for row in counts.values():
        total = row["tokens_kept"] + row["tokens_removed"]
        row["repeat_factor"] = round(total / row["tokens_kept"], 4) if row["tokens_kept"] else None
    flags, pin_step = restart_flags(plan)
    header = "# " + " ".join(f"{k}={v}" for k, v in provenance(raw.get("name")).items()) + "\n"
    write_text_atomic(staging / "rebuilt.yaml", header + yaml.safe_dump(raw, sort_keys=False))
    launches = []
    for i, launch in enumerate(plan.launches):
        line, pin = launch.flags(plan.trainer)
        write_text_atomic(staging / launch.file, line + "\n")
        write_text_atomic(staging / data_path_file(i, launch.first), launch.data_path + "\n")
        launches.append(
            {
                "file": launch.file,
                "first_iteration": launch.first,
                "last_iteration": launch.last,
                "load_checkpoint": launch.load,
                "flags": line,
                "load_instruction": pin,
                "order_changes": launch.changed,
                "what": launch.describe(plan.trainer),
            }
        )
    files = sorted(p.name for p in staging.iterdir()) + ["rebuild.json", "rebuild.md"]
    summary = {
        "provenance": provenance(raw.get("name")),
        "skip_file": str(skip_file.resolve()),
        "step": plan.skip.step,
        "rollback_iteration": plan.skip.rollback["iteration"],
        "resume_iteration": plan.resume,
        "keep": plan.keep,
        "datasets": counts,
        "emptied": plan.emptied,
        "data_path": [{"from_iteration": s, "flag": line} for s, line in plan.data_path_lines()],
        "launches": launches,
        "restart_flags": flags.strip(),
        "load_rollback_checkpoint": pin_step,
        "config": str(out / "rebuilt.yaml"),
        "notes": order_note(plan, out, counts),
        "files": sorted(set(files)),
        "readme": README,
    }
    write_json_atomic(staging / "rebuild.json", summary)
    write_text_atomic(staging / "rebuild.md", note_markdown(summary))
    return summary


# The keys both kinds of rebuild write, worded once.
SHARED_README = {
    "config": "the rebuilt run's config: forensics replay --config on it gives the new order",
    "notes": "what the restart does differently",
}

README = {
    "datasets": "per blocked dataset: source and rebuilt prefixes, documents and tokens kept and "
    "removed, repeat_factor (how much more often a kept document is drawn at the same weight)",
    "keep": "the weight recipe: share (blend weights kept) or passes (weights lowered with the "
    "tokens removed, so each remaining document is drawn as often)",
    "data_path": "each launch's --data-path from its first iteration, absolute paths",
    "launches": "the restart as the trainer runs it, one launch per data stage from the "
    "rollback on: its flags file, iterations, the checkpoint it loads and how it stops",
    "restart_flags": "what restart-rebuilt.flags (the first launch) holds: the checkpoint pin, "
    "--data-path and, when a later stage follows, --exit-interval",
    "load_rollback_checkpoint": "how to load the rollback checkpoint when it is not a flag",
    **SHARED_README,
    "files": "every file this rebuild wrote into its folder",
}


def _heading(summary: dict[str, Any]) -> list[str]:
    """rebuild.md's title and provenance line, the same for both kinds of rebuild."""
    p = summary["provenance"]
    return [
        f"# Rebuild for the spike at iteration {summary['step']}",
        "",
        f"{p['tool']} {p['version']}, {p['written_at']}: `{p['command']}`",
        "",
    ]


def note_markdown(summary: dict[str, Any]) -> str:
    """rebuild.md: the summary for a person, flags in code blocks (never cut)."""
    lines = _heading(summary) + [
        "| dataset | documents removed | kept | tokens removed | repeat factor |",
        "|---|---|---|---|---|",
    ]
    for name, row in summary["datasets"].items():
        lines.append(
            f"| {name} | {row['documents_removed']:,} | {row['documents_kept']:,} | "
            f"{100 * row['share_of_tokens_removed']:.1f}% | {row['repeat_factor']} |"
        )
    lines += ["", f"Restart from checkpoint iteration {summary['rollback_iteration']}:", ""]
    for i, launch in enumerate(summary["launches"]):
        if len(summary["launches"]) > 1:
            lines += [f"Launch {i + 1}, {launch['what']} (`{launch['file']}`):", ""]
        lines += ["```", launch["flags"], "```", ""]
        if shlex.split(launch["flags"]) != launch["flags"].split():
            lines += [
                f"The file holds quoted paths: {paste_form(launch['file'], launch['flags'])}.",
                "",
            ]
        if launch["load_instruction"]:
            lines += [f"Load the checkpoint first: `{launch['load_instruction']}`", ""]
    lines += [f"- {note}" for note in summary["notes"]]
    return "\n".join(lines) + "\n"


def file_order_note(plan: Any, out: Path) -> list[str]:
    """What changes when a file-based run restarts on the rebuilt file list."""
    rb = plan.skip.rollback["iteration"]
    words = {"resume": plan.resume, "skipped": plan.resume - 1, "rollback": rb}
    before = f"iterations up to {rb} are unchanged" if rb else "it trains from the start"
    notes = [
        f"The data order changes from iteration {plan.resume} on: the restart reads the file "
        f"list without the {len(plan.dropped)} removed file(s), so its batches differ from the "
        f"original run's; {before}. rebuilt.yaml describes the "
        "rebuilt data from iteration 1 (the original's restarts left out): replay the new order "
        f"with forensics replay --config {out / 'rebuilt.yaml'} --step STEP --window W.",
        "Restart: " + get_family(plan.fmt).restart_note.format(**words) + ".",
        "Do not also pass the skip flags of skip.json: they name batches of the old order.",
        "doc_ids of the rebuilt run count the kept files only: they differ from the original "
        "run's for every file after the first removed one.",
    ]
    if plan.emptied:
        notes.append(
            f"Every file of {', '.join(plan.emptied)} is blocked: dropped from the run (the "
            "remaining datasets share its place)."
        )
    return notes


def write_file_texts(
    plan: Any, raw: dict[str, Any], staging: Path, skip_file: Path, out: Path
) -> dict[str, Any]:
    """rebuilt.yaml, the family's restart file, rebuild.json and rebuild.md of a file-based
    rebuild, into `staging`; returns the summary (rebuild.json's content)."""
    import yaml

    header = "# " + " ".join(f"{k}={v}" for k, v in provenance(raw.get("name")).items()) + "\n"
    write_text_atomic(staging / "rebuilt.yaml", header + yaml.safe_dump(raw, sort_keys=False))
    for name, text in plan.restart.items():
        write_text_atomic(staging / name, text)
    files = sorted(p.name for p in staging.iterdir()) + ["rebuild.json", "rebuild.md"]
    summary = {
        "provenance": provenance(raw.get("name")),
        "format": plan.fmt,
        "skip_file": str(skip_file.resolve()),
        "step": plan.skip.step,
        "rollback_iteration": plan.skip.rollback["iteration"],
        "resume_iteration": plan.resume,
        "files_removed": [
            {"dataset": u.dataset, "file": str(u.path), "documents": int(u.doc_ids.size)}
            for u in plan.dropped
        ],
        "datasets": plan.counts(),
        "emptied": plan.emptied,
        "restart": {name: text.strip() for name, text in plan.restart.items()},
        "load_rollback_checkpoint": (
            flag_trainer(plan.skip.chosen).pin(int(plan.skip.rollback["iteration"]))
            if get_family(plan.fmt).pins_rollback
            else None
        ),
        "config": str(out / "rebuilt.yaml"),
        "notes": file_order_note(plan, out),
        "files": sorted(set(files)),
        "readme": FILE_README,
    }
    write_json_atomic(staging / "rebuild.json", summary)
    write_text_atomic(staging / "rebuild.md", file_note_markdown(summary))
    return summary


FILE_README = {
    "files_removed": "every data file (shard) the rebuild left out, and its documents",
    "datasets": "per dataset that lost files: files and documents removed and kept; rebuilt: "
    "a stream's new folder",
    "emptied": "datasets whose every file is blocked: dropped from the run",
    "restart": "the restart's new data lines: a file in this folder -> its content",
    "load_rollback_checkpoint": "how to load the rollback checkpoint (OLMo-core: not a flag)",
    **SHARED_README,
    "files": "every file or folder this rebuild wrote into its folder",
}


def file_note_markdown(summary: dict[str, Any]) -> str:
    """rebuild.md of a file-based rebuild: the files removed, the restart lines, the notes."""
    lines = _heading(summary) + [
        "| dataset | file removed | documents |",
        "|---|---|---|",
    ]
    lines += [
        f"| {row['dataset']} | `{row['file']}` | {row['documents']:,} |"
        for row in summary["files_removed"]
    ]
    lines += ["", f"Restart from checkpoint iteration {summary['rollback_iteration']} with:", ""]
    for name, text in summary["restart"].items():
        lines += [f"{name}:", "", "```", text, "```", ""]
    if summary["load_rollback_checkpoint"]:
        lines += [f"Load the rollback checkpoint: `{summary['load_rollback_checkpoint']}`", ""]
    lines += [f"- {note}" for note in summary["notes"]]
    return "\n".join(lines) + "\n"
