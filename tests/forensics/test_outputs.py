"""The output discipline: staged outputs published as one step, a lock against a second writer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from forensics.errors import ForensicsError
from forensics.outputs import check_output_file, hold_lock, publish


def test_publish_replaces_the_set_and_removes_stale_outputs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("old")
    (out / "report_embedding.png").write_text("old plot")  # not written by the new run
    (out / "notes.txt").write_text("the user's")
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "report.md").write_text("new")
    (staging / "skip.json").write_text("{}")
    publish(staging, out, ("report.md", "report_*.png", "skip.json"))
    assert (out / "report.md").read_text() == "new" and (out / "skip.json").exists()
    assert not (out / "report_embedding.png").exists()
    assert (out / "notes.txt").read_text() == "the user's" and not staging.exists()


def test_publish_replaces_folders_and_removes_only_named_stale_ones(tmp_path: Path) -> None:
    """A rebuilt stream is a folder: a --force rerun replaces the earlier one whole (a rename
    cannot replace a non-empty folder), drops a folder the previous run wrote and this one does
    not, and leaves a folder a glob merely matches alone."""
    out, staging = tmp_path / "out", tmp_path / "out" / ".cache" / "staging"
    (out / "web_rebuilt").mkdir(parents=True)
    (out / "web_rebuilt" / "old-shard.mds").write_text("old")
    (out / "code_rebuilt").mkdir()
    (out / "code_rebuilt" / "index.json").write_text("{}")
    (out / "notes_rebuilt").mkdir()  # the user's, not named by the previous run
    (staging / "web_rebuilt").mkdir(parents=True)
    (staging / "web_rebuilt" / "index.json").write_text('{"shards": []}')
    (staging / "rebuild.json").write_text("{}")
    publish(staging, out, ["rebuild.json", "web_rebuilt", "code_rebuilt", "*_rebuilt"])
    assert sorted(p.name for p in (out / "web_rebuilt").iterdir()) == ["index.json"]
    assert not (out / "code_rebuilt").exists() and (out / "notes_rebuilt").is_dir()
    assert sorted(p.name for p in (out / ".cache").iterdir()) == []  # nothing set aside is left


def test_a_second_writer_is_refused(tmp_path: Path) -> None:
    held = hold_lock(tmp_path / "run" / ".cache", "forensics spike")
    code = (
        "import sys; from pathlib import Path; from forensics.outputs import hold_lock\n"
        "from forensics.errors import ForensicsError\n"
        f"try:\n    hold_lock(Path({str(tmp_path / 'run' / '.cache')!r}), 'forensics spike')\n"
        "except ForensicsError as err:\n    sys.exit(f'error: {err}')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 1 and "another forensics spike is writing into it" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    held.close()
    again = hold_lock(tmp_path / "run" / ".cache", "forensics spike")
    again.close()


def test_signals_wait_for_the_publish(tmp_path: Path) -> None:
    out, staging = tmp_path / "out", tmp_path / "staging"
    out.mkdir()
    staging.mkdir()
    for i in range(200):
        (staging / f"report_{i}.png").write_text("x")
    received = []
    old = signal.signal(signal.SIGTERM, lambda *a: received.append(len(list(out.iterdir()))))
    try:
        os.kill(os.getpid(), signal.SIGTERM)  # delivered now, before the publish
        received.clear()
        original = os.replace

        def replace_and_signal(a, b):  # a SIGTERM in the middle of the moves
            original(a, b)
            if len(list(out.iterdir())) == 100:
                os.kill(os.getpid(), signal.SIGTERM)

        os.replace = replace_and_signal
        try:
            publish(staging, out, ("report_*.png",))
        finally:
            os.replace = original
    finally:
        signal.signal(signal.SIGTERM, old)
    assert received == [200]  # handled only once every file was in place


def test_output_files_never_replace_run_inputs(tmp_path: Path) -> None:
    idx = tmp_path / "web_text_document.idx"
    idx.write_bytes(b"x")
    with pytest.raises(ForensicsError, match="never an output"):
        check_output_file(idx, force=True)
    manifest = tmp_path / "web.manifest.parquet"
    manifest.write_bytes(b"x")
    with pytest.raises(ForensicsError, match="is an input of this run"):
        check_output_file(manifest, force=True, inputs=[manifest])
    with pytest.raises(ForensicsError, match="already exists; pass --force"):
        check_output_file(manifest, force=False)
