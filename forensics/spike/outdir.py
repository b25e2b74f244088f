"""The spike output directory: refused when it holds something else, written as one step.

The directory carries a marker (`.cache/run.json`: config hash, step). A directory that holds
another run (other config or step), or files that are not a spike run, is refused unless
`--force`; nothing of the user's is ever deleted. An existing `skip.json` is never overwritten
without `--force`, and that is checked before any work is done. Every output is written into
`.cache/staging/` first and published together (forensics.outputs.publish), so a killed run
leaves the old complete set or the new complete set.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from dataloaders.atomic import write_json_atomic, write_text_atomic
from forensics.errors import ForensicsError
from forensics.outputs import check_printable_path, publish
from forensics.report import write_report
from forensics.skip.plan import SkipPlan
from forensics.skip.tracker import TRACKER_FILE, tracker_text
from forensics.spike.restart_files import megatron_args_text, restart_flag_files

MARKER = "run.json"
# What a spike run publishes into --out (an earlier run's extra files are removed on --force).
OUTPUT_PATTERNS = ("report.json", "report.md", "report.html", "report_*.png", "skip.json",
                   "megatron_args.txt", "iterations_to_skip.tracker",
                   "restart-*.flags", "documents.parquet")  # fmt: skip
SKIP_FILE = "skip.json"
ARGS_FILE = "megatron_args.txt"


def check_output_dir(out: Path, config_hash: str, step: int, force: bool) -> None:
    """Refuse a directory holding another run or foreign files (unless force), and an existing
    skip.json (unless force). Called before any work, so a refusal costs nothing."""
    check_printable_path(out)
    if out.exists() and not out.is_dir():
        raise ForensicsError(f"{out}: exists and is not a directory")
    if not out.is_dir() or force:
        return
    marker = out / ".cache" / MARKER
    if marker.is_file():
        try:
            prior = json.loads(marker.read_text())
        except (OSError, json.JSONDecodeError):
            prior = {}
        if prior.get("config_hash") != config_hash or prior.get("step") != step:
            raise ForensicsError(
                f"{out}: holds an older run (step {prior.get('step')}, config "
                f"{prior.get('config_hash')}), not step {step} of config {config_hash}; choose "
                "another --out, or pass --force to write over its reports (other files are kept)"
            )
    elif any(p.name != ".cache" for p in out.iterdir()):  # .cache alone: an interrupted start
        raise ForensicsError(
            f"{out}: exists and holds files that are not a forensics spike run; choose another "
            "--out, or pass --force to write into it (nothing is deleted)"
        )
    if (out / SKIP_FILE).exists():
        raise ForensicsError(
            f"{out / SKIP_FILE}: already exists; pass --force to overwrite it (the replay, "
            "scores and embeddings are cached, so the rerun is fast)"
        )


def write_marker(cache: Path, config_hash: str, step: int, origin: str) -> None:
    """`.cache/run.json`: which run and step this directory holds."""
    write_json_atomic(cache / MARKER, {"config_hash": config_hash, "step": step, "config": origin})


def publish_outputs(report: object, skip: SkipPlan, cache: Path, out: Path) -> list:
    """Write the report, skip.json, the flag files and the tracker into a staging folder, then
    publish them into `out` as one step. Returns the report's sections (the terminal summary
    lays out the same ones)."""
    staging = cache / "staging"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    sections = write_report(report, staging, cache=cache / "report")
    write_json_atomic(staging / SKIP_FILE, skip.to_dict())
    write_text_atomic(staging / ARGS_FILE, megatron_args_text(skip))
    for name, text in restart_flag_files(skip).items():
        write_text_atomic(staging / name, text)
    tracker = skip.flags[skip.trainer].values if skip.tracker_file else None
    if tracker:
        when = time.strftime("%Y-%m-%d %H:%M:%S")
        write_text_atomic(staging / TRACKER_FILE, tracker_text(tracker, when))
    publish(staging, out, OUTPUT_PATTERNS)
    return sections
