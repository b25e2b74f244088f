"""Running one accident on a fresh copy of a run, and judging what the command did."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from forensics_testing.accidents.case import Accident, Verdict, stage0
from forensics_testing.demo.build import DemoSpec, build_run

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 90  # generous for a loaded 2-core machine; the commands answer in seconds
MEMORY_LIMIT = 8 << 30  # address space per command (torch alone maps ~3 GB)
KINDS = (
    "traceback",
    "hang",
    "silent wrong",
    "half-written",
    "not one line",
    "refused wrongly",
    "unclear",
)


# -- running and judging --------------------------------------------------------------------


def snapshot(folder: Path) -> dict[str, str]:
    """relative path -> sha1 of every file (symlinks and unreadable files by their target)."""
    out = {}
    for path in folder.rglob("*"):
        try:
            if path.is_file():
                out[str(path.relative_to(folder))] = hashlib.sha1(path.read_bytes()).hexdigest()
        except OSError:
            continue
    return out


def _limits(file_limit: int | None) -> Callable[[], None]:
    """Bounded memory; with `file_limit`, writes past it fail with EFBIG as on a full disk
    (Python ignores SIGXFSZ, so the write raises instead of killing the process)."""

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
        if file_limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))

    return apply


def run_one(acc: Accident, base: Path, work: Path, cache: Path) -> Verdict:
    slug = re.sub(r"[^a-z0-9]+", "-", acc.name.lower()).strip("-")[:60]
    run = work / slug
    shutil.copytree(base, run, symlinks=True)
    crashes = work / f"{slug}.tmp"
    crashes.mkdir()
    try:
        if acc.setup is not None:
            acc.setup(run)
        before = snapshot(run)
        env = dict(
            os.environ,
            HF_HUB_OFFLINE="1",
            COLUMNS="400",
            PYTHONPATH=str(REPO),
            FORENSICS_CACHE=str(cache),
            TMPDIR=str(crashes),
        )
        start = time.monotonic()
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "forensics.cli", *acc.argv],
                cwd=run,
                env=env,
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                preexec_fn=_limits(acc.file_limit),
            )
        except subprocess.TimeoutExpired:
            return Verdict(acc, None, TIMEOUT_S, {"hang": f"no answer in {TIMEOUT_S} s"})
        verdict = Verdict(acc, proc.returncode, time.monotonic() - start)
        judge(acc, run, proc, before, verdict)
        return verdict
    finally:
        for path in run.rglob("*"):  # read-only folders made by the accident
            if path.is_dir():
                os.chmod(path, 0o755)
        shutil.rmtree(run, ignore_errors=True)
        shutil.rmtree(crashes, ignore_errors=True)


def judge(
    acc: Accident,
    run: Path,
    proc: subprocess.CompletedProcess,
    before: dict[str, str],
    verdict: Verdict,
) -> None:
    """Fill verdict.problems; see the module docstring for the kinds."""
    p = verdict.problems
    err = proc.stderr.strip()
    lines = err.splitlines()
    if (
        proc.returncode == 3
        or "Traceback (most recent call last)" in err
        or (proc.returncode not in (0, 2))
    ):
        p["traceback"] = f"exit {proc.returncode}: {(lines or [''])[-1][:200]}"
        return
    if proc.returncode == 2:
        if len(lines) != 1 or not lines[0].startswith("error: "):
            p["not one line"] = f"{len(lines)} lines: {err[:200]!r}"
        if acc.expect == "ok":
            p["refused wrongly"] = (lines or [""])[0][:200]
        said = " ".join(err.split())
        missing = [x for x in (acc.needle, acc.names) if x and x not in said]
        if missing:
            p["unclear"] = f"does not say {missing[0]!r}: {(lines or [''])[0][:200]}"
    if proc.returncode == 0:
        if acc.expect == "refuse":
            p["silent wrong"] = f"exit 0: {(proc.stdout + err).strip()[-200:]!r}"
        elif acc.check is not None:
            problem = acc.check(run, proc)
            if problem:
                p["silent wrong"] = problem
    after = snapshot(run)
    may_write = acc.outputs if proc.returncode == 0 else acc.kept

    def allowed(path: str) -> bool:
        # a spike output's .cache/ is its cache (replay, scores, the run marker): a rerun may
        # add to it or refresh it whatever its outcome
        return "/.cache/" in f"/{path}" or any(fnmatch.fnmatch(path, g) for g in may_write)

    changed = [k for k, v in before.items() if after.get(k) != v and not allowed(k)]
    new = [k for k in after if k not in before and not allowed(k)]
    if changed:
        p["half-written"] = f"changed or removed: {changed[:5]}"
    elif new:
        p["half-written"] = f"left new files: {new[:5]}"


def base_info(base: Path) -> dict[str, Any]:
    """Facts of the base run the battery needs (names, step, checkpoints)."""
    import polars as pl

    cfg = yaml.safe_load((base / "forensics.yaml").read_text())
    blend = stage0(cfg)["blend"]
    skip = json.loads((base / "spike" / "skip.json").read_text())
    first = blend[0]["prefix"]
    web = next((b["prefix"] for b in blend if "web" in b.get("name", "")), blend[-1]["prefix"])
    manifest = blend[0].get("manifest")
    ckpts = sorted(int(p.name[5:]) for p in (base / "checkpoints").glob("iter_*"))
    return {
        "step": skip["step"],
        "train_iters": cfg["training"]["train_iters"],
        "first_prefix": first,
        "web_prefix": web,
        "manifest": manifest,
        "first_docs": pl.read_parquet(base / manifest).height,
        "stages": "stages" in cfg["data"],
        "checkpoints": ckpts,
        "rollback": skip["rollback"]["iteration"],
    }


def prepare_base(source: Path | DemoSpec, work: Path, cache: Path) -> Path:
    """A private copy of the run `source` (or a run generated from the spec `source`) with a
    complete `spike/` output and `triage/` beside it."""
    base = work / "base"
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO), FORENSICS_CACHE=str(cache))
    if isinstance(source, DemoSpec):
        build_run(base, source, progress=False)
    else:
        shutil.copytree(
            source, base, symlinks=True, ignore=shutil.ignore_patterns("spike-*", "*.watch")
        )
    cfg = yaml.safe_load((base / "forensics.yaml").read_text())
    log = base / cfg.get("log", "logs/train.log")
    events = base / "triage" / "events.json"
    if not events.exists():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "forensics.cli",
                "triage",
                str(log),
                "--out",
                str(base / "triage"),
                "--force",
            ],
            env=env,
            check=True,
            capture_output=True,
        )
    spikes = [e for e in json.loads(events.read_text()) if e.get("kind") == "spike"]
    spikes.sort(key=lambda e: e.get("verdict") != "malignant")  # malignant first
    step = spikes[0]["step"] if spikes else None
    truth = base / "truth.json"  # a generated run says where its spike is
    if truth.exists():
        step = json.loads(truth.read_text()).get("spike_iteration", step)
    if step is None:
        raise SystemExit(f"{source}: its triage finds no malignant spike to run spike on")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "forensics.cli",
            "spike",
            "--step",
            str(step),
            "--window",
            "20",
            "--embed-cap",
            "0",
            "--quiet",
            "--out",
            "spike",
        ],
        cwd=base,
        env=env,
        check=True,
    )
    return base
