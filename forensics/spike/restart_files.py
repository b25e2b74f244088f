"""The restart files a user pastes from: `restart-<trainer>.flags` and `megatron_args.txt`."""

from __future__ import annotations

from dataloaders.trainers import get_trainer
from forensics.provenance import provenance_line
from forensics.skip import expand
from forensics.skip.flags import flag_trainer, restart_line, restart_words
from forensics.skip.plan import SkipPlan
from forensics.skip.tracker import how_to_pass

PASTE_AT_END = (
    "# restart-<trainer>.flags holds the line below each trainer, flags only: add it as it is at "
    "the END of the launch line (after the training script's own arguments, so its values win "
    "over any earlier ones): ... $(cat restart-<trainer>.flags)"
)


def restart_flag_files(skip: SkipPlan) -> dict[str, str]:
    """restart-<trainer>.flags: only flags, no comments, the checkpoint pin first where it is a
    flag, so `$(cat restart-megatron-lm.flags)` goes as it is at the end of the launch line."""
    out = {}
    for name, flag in skip.flags.items():
        line = restart_line(flag)
        if skip.iterations and line:
            out[f"restart-{name}.flags"] = line + "\n"
    return out


def megatron_args_text(skip: SkipPlan) -> str:
    """megatron_args.txt: each trainer's flag, ready to paste, the chosen trainer first, with
    what its numbers mean and what the restart then does differently."""
    rb = skip.rollback
    lines = [
        f"# forensics spike at iteration {skip.step}: restart from checkpoint iteration "
        f"{rb['iteration']} (the job runs {rb['resume_iteration']} first).",
        "# Valid only for the run fingerprinted in skip.json (check: forensics check-skip).",
    ]
    if skip.provenance:
        lines.insert(0, "# " + provenance_line(skip.provenance))
    if skip.iterations:
        lines.append(PASTE_AT_END)
    if skip.action.get("kind") in ("rebuild", "remove"):
        stopgap = "; these flags are the stopgap" if skip.action.get("stopgap") else ""
        lines.append(f"# FIRST: {skip.action['command']} ({skip.action['why']}){stopgap}.")
    for name, flag in skip.flags.items():
        chosen = " (this run's trainer)" if name == skip.trainer else ""
        lines += ["", f"# {flag.semantics}{chosen}"]
        if not skip.iterations:
            lines.append("# (nothing to skip)")
        elif get_trainer(name).no_skip:  # its restart is the rebuild, pinned to the rollback
            trainer = get_trainer(name)
            lines.append(f"# {trainer.no_skip}: {trainer.pin(int(rb['iteration']))}")
        elif flag.flag is None:
            lines.append(f"# NO EXACT FLAG: {flag.refusal}.")
            lines.append("# Remove the block list's documents (skip.json: documents) instead.")
        else:
            trainer = flag_trainer(flag)
            explained = trainer.explain(flag.flag, len(expand(skip.ranges)))
            if explained:
                lines.append(f"# {explained}")
            line, beside = restart_words(trainer, flag.pin, flag.flag)
            if beside:  # before the launch, so it comes first
                kept = "the checkpoint folder stays as it is"
                lines.append(f"# first load the rollback checkpoint ({kept}): {beside}")
            lines.append(line)
            lines.append(f"# then: {flag.consequence}")
        if name == skip.trainer and skip.tracker_file and flag.flag:
            lines.append(
                f"# or, instead of the list: {how_to_pass(skip.tracker_file)} (pass a copy: "
                "the job appends to it)"
            )
    return "\n".join(lines) + "\n"
