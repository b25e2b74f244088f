"""An output set published under a journal (forensics.publish_set): a kill at any point of the
publish, SIGKILL included, leaves a folder that is wholly old, or one the journal marks as
mid-publish, which the next writer finishes (wholly new) and every reader refuses in one line.

In process, the kill is a BaseException raised from the k-th rename, for every k: no cleanup of
publish runs after it, as none runs after a SIGKILL. In a subprocess, the kill is a real SIGKILL
at the project's own fault points (FORENSICS_FAULT_AT, forensics.fault_points.fault_point), for
`spike` and `rebuild`, into a fresh folder and with --force over an earlier set.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from forensics.errors import ForensicsError
from forensics.publish_set import (
    finish_interrupted_publish,
    interrupted_journal,
    publish,
    refuse_if_mid_publish,
)
from forensics_testing.small_run import SPIKE_ARGS, cli, copy_run, snapshot

OLD = {"a.txt": "old a", "b.txt": "old b", "stale.flags": "old", "web_rebuilt/index.json": "old"}
NEW = {"a.txt": "new a", "c.txt": "new c", "web_rebuilt/index.json": "new"}
PATTERNS = ("a.txt", "b.txt", "c.txt", "stale.flags", "web_rebuilt")
USER = {"notes.md": "the user's"}


class Killed(BaseException):
    """Stands for SIGKILL: nothing of the publish runs after it."""


def _lay(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def _published(out: Path) -> dict[str, str]:
    """The folder's files, the state folder left out."""
    return {
        str(p.relative_to(out)): p.read_text()
        for p in sorted(out.rglob("*"))
        if p.is_file() and not p.relative_to(out).parts[0].startswith(".")
    }


def _stage(tmp: Path) -> tuple[Path, Path]:
    out = tmp / "out"
    shutil.rmtree(out, ignore_errors=True)
    _lay(out, {**OLD, **USER})
    staging = out / ".cache" / "staging"
    _lay(staging, NEW)
    return out, staging


def _renames_in_a_whole_publish(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    out, staging = _stage(tmp)
    calls = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (calls.append(a), real(a, b)))
    publish(staging, out, PATTERNS)
    monkeypatch.setattr(os, "replace", real)
    assert _published(out) == {**NEW, **USER}
    return len(calls)


def test_a_kill_after_any_rename_leaves_old_or_a_marked_set_the_next_writer_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    total = _renames_in_a_whole_publish(tmp_path, monkeypatch)
    assert total == 1 + 4 + 3  # the journal, four earlier outputs aside, three new in place
    real = os.replace
    for k in range(total):
        out, staging = _stage(tmp_path)
        done = []

        def rename_or_die(a, b, done=done, k=k):
            if len(done) == k:
                raise Killed
            done.append(a)
            real(a, b)

        monkeypatch.setattr(os, "replace", rename_or_die)
        with pytest.raises(Killed):
            publish(staging, out, PATTERNS)
        monkeypatch.setattr(os, "replace", real)
        if k == 0:  # killed writing the journal: nothing was moved, the old set is whole
            assert interrupted_journal(out) is None and _published(out) == {**OLD, **USER}
            continue
        assert interrupted_journal(out) == out / ".cache" / "publish.json", k
        with pytest.raises(ForensicsError, match="killed while publishing into it"):
            refuse_if_mid_publish(out, "a.txt")
        refuse_if_mid_publish(out, "notes.md")  # the user's file beside the set: not in it
        assert finish_interrupted_publish(out, out / ".cache") is True
        assert _published(out) == {**NEW, **USER}, k
        assert sorted(p.name for p in (out / ".cache").iterdir()) == [], k
        refuse_if_mid_publish(out)  # whole again: readers go on


def test_a_journal_whose_staged_files_are_gone_is_refused_unless_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, staging = _stage(tmp_path)
    real = os.replace
    done = []

    def die_on_the_sixth(a, b):
        if len(done) == 6:
            raise Killed
        done.append(a)
        real(a, b)

    monkeypatch.setattr(os, "replace", die_on_the_sixth)
    with pytest.raises(Killed):
        publish(staging, out, PATTERNS)
    monkeypatch.setattr(os, "replace", real)
    shutil.rmtree(staging)  # someone cleaned up .cache by hand
    with pytest.raises(ForensicsError, match="staged files are gone .* pass --force"):
        finish_interrupted_publish(out, out / ".cache")
    assert interrupted_journal(out) is not None
    finish_interrupted_publish(out, out / ".cache", force=True)
    assert interrupted_journal(out) is None


# ------------------------------------------------------------------ real SIGKILL, real commands


def _one_line_error(proc, *needles: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    for needle in needles:
        assert needle in lines[0], lines[0]


def _note_then(proc, last: str) -> None:
    """The next run's first line names the interrupted publish it finished."""
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("note: ") and "killed while publishing" in lines[0], proc.stderr
    assert last in lines[-1], proc.stderr[-2000:]


def _spike(run: Path, out: Path, *extra: str, fault: str | None = None):
    env = {"FORENSICS_FAULT_AT": fault} if fault else None
    args = ["spike", "--config", str(run / "forensics.yaml"), *SPIKE_ARGS, "--quiet"]
    return cli(*args, *extra, "--out", str(out), env=env)


@pytest.mark.parametrize("fresh", [True, False], ids=["fresh", "force"])
def test_spike_sigkilled_while_publishing(small_run: Path, tmp_path: Path, fresh: bool) -> None:
    """Killed between documents.parquet and the rest: the folder is marked, `rebuild` refuses
    it, the next `spike` finishes the set, and the set is the killed run's own (its skip.json
    says its threshold; its report agrees)."""
    run = copy_run(small_run, tmp_path / "run")
    out = run / "spike"
    if fresh:  # a folder with no published set (the cache kept, so the run is quick)
        out = tmp_path / "fresh"
        out.mkdir()
        shutil.copytree(run / "spike" / ".cache", out / ".cache")
        (out / ".cache" / "run.json").unlink()
    killed = _spike(run, out, "--threshold", "0.3", "--force", fault="publish:SIGKILL")
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert (out / ".cache" / "publish.json").is_file()
    reader = cli("rebuild", str(out), "--config", str(run / "forensics.yaml"))
    _one_line_error(reader, str(out), "killed while publishing", "run the command")
    again = _spike(run, out)
    _note_then(again, "skip.json: already exists")
    assert again.returncode == 2
    assert not (out / ".cache" / "publish.json").exists()
    skip = json.loads((out / "skip.json").read_text())
    report = json.loads((out / "report.json").read_text())
    assert skip["threshold"] == 0.3 and report["skip"]["iterations"] == skip["iterations"]
    names = {p.name for p in out.iterdir() if not p.name.startswith(".")}
    assert names >= {"documents.parquet", "skip.json", "report.json", "megatron_args.txt"}
    flag = skip["flags"]["megatron-lm"]["flag"]
    args = (out / "megatron_args.txt").read_text()
    assert (flag in args) if flag else "--iterations-to-skip" not in args
    if not flag:  # the earlier run's flag files were stale: gone with its set
        assert not any(n.startswith("restart-") for n in names), names


@pytest.mark.parametrize(
    ("fresh", "fault"), [(True, "publish"), (False, "publish-end")], ids=["fresh", "force"]
)
def test_rebuild_sigkilled_while_publishing(
    small_run: Path, tmp_path: Path, fresh: bool, fault: str
) -> None:
    """data_path.txt must never name a file the folder lacks: the killed folder is refused by
    `replay`, the next `rebuild` finishes it, and every file it names exists."""
    config = small_run / "forensics.yaml"
    out = tmp_path / "rebuilt"
    base = ["rebuild", str(small_run / "spike"), "--config", str(config), "--out", str(out)]
    if not fresh:
        assert cli(*base, "--keep", "passes").returncode == 0
        before = snapshot(out)
    killed = cli(*base, "--force", env={"FORENSICS_FAULT_AT": f"{fault}:SIGKILL"})
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert (out / ".cache" / "publish.json").is_file()
    if not fresh:
        assert snapshot(out) != before
    replay = ["replay", "--config", str(out / "rebuilt.yaml"), "--step", "160", "--window", "2"]
    reader = cli(*replay, "--out", str(tmp_path / "order.parquet"))
    _one_line_error(reader, str(out), "killed while publishing")
    again = cli(*base)
    _note_then(again, "pass --force to replace them")
    summary = json.loads((out / "rebuild.json").read_text())
    assert summary["keep"] == "share"
    for name in summary["files"]:
        assert (out / name).exists(), name
    for word in (out / "data_path.txt").read_text().split():
        if "/" in word:
            assert Path(f"{word}.bin").is_file() and Path(f"{word}.idx").is_file(), word
    ok = cli(*replay, "--out", str(tmp_path / "order.parquet"))
    assert ok.returncode == 0, ok.stderr[-2000:]
