"""The rebuild's words and small files: the rebuilt config, the flag files, rebuild.json and the
note saying what the restart does differently (the data order changes from the restart on)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dataloaders.atomic import write_json_atomic, write_text_atomic
from forensics.provenance import provenance
from forensics.rebuild.plan import RebuildPlan
from forensics.skip.flags import checkpoint_pin


def order_note(plan: RebuildPlan, out: Path, counts: dict[str, dict[str, Any]]) -> list[str]:
    """What changes with the rebuilt data, one sentence each."""
    rb = plan.skip.rollback["iteration"]
    notes = [
        f"The data order changes from iteration {plan.resume} on: Megatron builds new blend and "
        "shuffle indices for the new --data-path, so every batch of the restart differs from "
        f"the original run's (global sample c is the new blend's sample c). Iterations up to "
        f"{rb} are unchanged. Replay the new order: forensics replay --config "
        f"{out / 'rebuilt.yaml'} --step STEP --window W.",
        "Do not also pass the skip flags of skip.json: they name batches of the old order; the "
        "restart loads the rollback checkpoint with the new --data-path instead.",
        *(
            f"Blend weights are kept: {name} keeps its share of samples, so each of its remaining "
            f"documents is drawn {row['repeat_factor']:.2f}x as often; lower its weight to keep "
            "the number of passes instead."
            for name, row in counts.items()
        ),
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
    """(flags-only line, an instruction for a pin that is not a flag or None)."""
    pin = checkpoint_pin(plan.skip.trainer, int(plan.skip.rollback["iteration"]))
    line = plan.data_path_lines()[0][1]
    if pin.startswith("--"):
        return f"{pin} {line}\n", None
    return f"{line}\n", pin


def write_texts(
    plan: RebuildPlan,
    raw: dict[str, Any],
    counts: dict[str, dict[str, Any]],
    staging: Path,
    skip_file: Path,
    out: Path,
) -> dict[str, Any]:
    """Write rebuilt.yaml, data_path.txt, restart-rebuilt.flags, rebuild.json and rebuild.md
    into `staging`; returns the summary (rebuild.json's content)."""
    import yaml

    for row in counts.values():
        total = row["tokens_kept"] + row["tokens_removed"]
        row["repeat_factor"] = round(total / row["tokens_kept"], 4) if row["tokens_kept"] else None
    flags, pin_step = restart_flags(plan)
    header = "# " + " ".join(f"{k}={v}" for k, v in provenance(raw.get("name")).items()) + "\n"
    write_text_atomic(staging / "rebuilt.yaml", header + yaml.safe_dump(raw, sort_keys=False))
    write_text_atomic(staging / "data_path.txt", plan.data_path_lines()[0][1] + "\n")
    write_text_atomic(staging / "restart-rebuilt.flags", flags)
    files = sorted(p.name for p in staging.iterdir()) + ["rebuild.json", "rebuild.md"]
    summary = {
        "provenance": provenance(raw.get("name")),
        "skip_file": str(skip_file.resolve()),
        "step": plan.skip.step,
        "rollback_iteration": plan.skip.rollback["iteration"],
        "resume_iteration": plan.resume,
        "datasets": counts,
        "emptied": plan.emptied,
        "data_path": [{"from_iteration": s, "flag": line} for s, line in plan.data_path_lines()],
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
    "data_path": "the restart's --data-path (and any later mixture switch's), absolute paths",
    "restart_flags": "what restart-rebuilt.flags holds: the checkpoint pin and --data-path",
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
    lines += [
        "",
        f"Restart from checkpoint iteration {summary['rollback_iteration']} with:",
        "",
        "```",
    ]
    lines += [summary["restart_flags"], "```", ""]
    if summary["load_rollback_checkpoint"]:
        lines += [f"Load the rollback checkpoint: `{summary['load_rollback_checkpoint']}`", ""]
    lines += [f"- {note}" for note in summary["notes"]]
    return "\n".join(lines) + "\n"


FAMILY_RESTART = {
    "hf": "give the training script data_files.json's list instead of the old one "
    "(load_dataset(FORMAT, data_files=LIST)). The HF Trainer's resume skips the first {skipped} "
    "batches of the new order, so iteration i >= {resume} is rebuilt.yaml's iteration i; a "
    "datasets state_dict of the old file list does not fit the new one (resume by skipping "
    "batches instead)",
    "olmo-core": "load the rollback checkpoint (load_rollback_checkpoint) with "
    "restart-rebuilt.flags (the "
    "experiment script's overrides: the new dataset.paths, and ignore_fingerprint_mismatch since "
    "the checkpoint's data loader state holds the old dataset's fingerprint). The loader "
    "continues at the state's epoch and batch in the new order: in the first epoch iteration "
    "i >= {resume} is rebuilt.yaml's iteration i; to replay the restart exactly, add {{iteration: "
    "{resume}, state: <checkpoint {rollback}>/train/rank0.pt, sources: rebuilt.yaml's sources}} "
    "to the original config's data.resumes",
    "mosaic-streaming": "point each stream at its local in streams.json (remote none: the new "
    "folders link the kept shards of the original folders, which must stay). StreamingDataset "
    "resumes from the checkpoint's state at its sample_in_epoch of the new epoch order: in epoch "
    "0 iteration i >= {resume} is rebuilt.yaml's iteration i; to replay the restart exactly, add "
    "the checkpoint's state as {{iteration: {resume}, state_file: ...}} to rebuilt.yaml's "
    "data.resumes",
}


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
        "Restart: " + FAMILY_RESTART[plan.fmt].format(**words) + ".",
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
            checkpoint_pin(plan.skip.trainer, int(plan.skip.rollback["iteration"]))
            if plan.fmt == "olmo-core"
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
