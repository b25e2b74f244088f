"""Regressions from the accident battery (scripts/accidents.py), each on the small run: the
right answer or one clear line, quickly, with every pre-existing file unchanged."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from forensics_testing.refusal import one_line_error
from forensics_testing.small_run import SPIKE_ARGS, cli, copy_run, snapshot


def _edit_config(run: Path, edit) -> None:
    cfg = yaml.safe_load((run / "forensics.yaml").read_text())
    edit(cfg)
    (run / "forensics.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))


@pytest.fixture
def run(small_run: Path, tmp_path: Path) -> Path:
    return copy_run(small_run, tmp_path / "run")


def _check_skip(run: Path):
    return cli("check-skip", "spike/skip.json", "--config", "forensics.yaml", cwd=run)


def test_check_skip_accepts_a_moved_run_and_says_so(
    small_run: Path, run: Path, tmp_path: Path
) -> None:
    moved = tmp_path / "elsewhere" / "job"
    moved.parent.mkdir()
    shutil.move(run, moved)
    proc = _check_skip(moved)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert f"the run directory moved from {small_run} to {moved}" in text
    assert "made for another run" not in text


def test_check_skip_names_a_changed_checkpoint_list(run: Path) -> None:
    rollback = json.loads((run / "spike" / "skip.json").read_text())["rollback"]["iteration"]
    _edit_config(run, lambda c: c.__setitem__("checkpoints", [rollback, rollback + 1]))
    proc = _check_skip(run)
    assert proc.returncode == 0, proc.stderr
    assert "the checkpoint list changed" in " ".join(proc.stdout.split())
    # the rollback checkpoint gone: refused, saying exactly that
    _edit_config(run, lambda c: (c.pop("checkpoint_dir", None), c.__setitem__("checkpoints", [1])))
    one_line_error(_check_skip(run), f"the rollback checkpoint {rollback} is no longer available")


def test_check_skip_refuses_a_changed_blend_without_a_bare_hash(run: Path) -> None:
    def heavier(cfg: dict) -> None:
        spec = cfg["data"]["stages"][-1]["blend"][0]
        spec["weight"] = spec.get("weight", 1.0) * 1.5

    _edit_config(run, heavier)
    line = one_line_error(_check_skip(run), "made for another run", "data-order settings changed")
    assert "config_hash" in line


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("seq_length", 10_000_000, "seq_length 10,000,000 is longer than all"),
        ("seed", -1, "seed"),
        ("seed", 2**40, "seed"),
    ],
)
def test_absurd_sizes_are_refused_before_allocation(
    run: Path, key: str, value: int, needle: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """One line from the CLI, nothing written; and, replayed in this process with Megatron's
    index builders spied on, the refusal comes before the first index is built (10,000,000-token
    samples would need billions of epochs of document index), where the run as written builds
    them."""
    from dataloaders.megatron import sources
    from dataloaders.run_config import load_config
    from forensics.errors import ForensicsError
    from forensics.replay import open_replayer

    built: list[str] = []
    refusing = False

    def spy(name: str) -> None:
        real = getattr(sources, name)

        def build(*args, **kwargs):
            built.append(name)
            if refusing:  # fail here, before a regression allocates the absurd index
                raise AssertionError(f"{name} ran before the refusal")
            return real(*args, **kwargs)

        monkeypatch.setattr(sources, name, build)

    spy("build_document_index")
    spy("build_shuffle_index")
    monkeypatch.setenv("FORENSICS_CACHE", str(tmp_path / "cache"))  # no index from a cache
    open_replayer(load_config(run / "forensics.yaml")).replay(170, 170, text=False, progress=False)
    assert "build_document_index" in built  # the spies are on the path a replay takes
    built.clear()
    refusing = True
    _edit_config(run, lambda c: c["data"].__setitem__(key, value))
    before = snapshot(run)
    proc = cli("replay", "--config", "forensics.yaml", "--step", "170", "--out", "w.parquet",
               cwd=run)  # fmt: skip
    one_line_error(proc, needle)
    assert snapshot(run) == before
    with pytest.raises(ForensicsError, match=needle):
        replayer = open_replayer(load_config(run / "forensics.yaml"))
        replayer.replay(170, 170, text=False, progress=False)
    assert built == []


@pytest.mark.parametrize(("key", "value"), [("train_iters", 10**15), ("global_batch_size", 10**12)])
def test_a_run_longer_than_any_is_refused(run: Path, key: str, value: int) -> None:
    _edit_config(run, lambda c: c["training"].__setitem__(key, value))
    proc = cli("replay", "--config", "forensics.yaml", "--step", "170", "--out", "w.parquet",
               cwd=run)  # fmt: skip
    one_line_error(proc, "more than any pretraining run")


def test_curve_names_are_never_markup_emoji_or_mathtext(tmp_path: Path) -> None:
    rows = "step,loss,loss/$x,loss/:book:,loss/[red]x[/red]\n" + "".join(
        f"{i},{3 + 1 / i},{3 + 1 / i},{3 + 1 / i},{3 + 1 / i}\n" for i in range(1, 400)
    )
    (tmp_path / "n.csv").write_text(rows)
    proc = cli("triage", "n.csv", "--out", "t", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for name in ("$x", ":book:", "[red]x[/red]"):
        assert name in proc.stdout, proc.stdout
    assert "\U0001f4d6" not in proc.stdout  # the emoji rich would put for :book:
    assert (tmp_path / "t" / "triage.png").stat().st_size > 10_000


def test_a_refused_watch_leaves_no_directory(tmp_path: Path) -> None:
    (tmp_path / "trainer_state.json").write_text('{"log_history": []}')
    proc = cli("watch", "trainer_state.json", "--max-polls", "1", "--out", "w", cwd=tmp_path)
    one_line_error(proc)
    assert not (tmp_path / "w").exists()


def test_a_refused_spike_leaves_no_directory(run: Path) -> None:
    proc = cli("spike", *SPIKE_ARGS, "--culprit", "s999", "--quiet", "--out", "s", cwd=run)
    one_line_error(proc, "s999")
    assert not (run / "s").exists()


def _full_disk(limit: int):
    """preexec_fn: files cannot grow past `limit` bytes (EFBIG, as a full disk's ENOSPC)."""
    import resource

    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


@pytest.mark.parametrize("command", ["spike", "triage"])
def test_a_full_disk_is_one_line_and_keeps_the_old_output(run: Path, command: str) -> None:
    import os
    import subprocess
    import sys

    from forensics_testing.small_run import REPO

    if command == "spike":
        args, out = [*SPIKE_ARGS, "--threshold", "0.3", "--quiet", "--out", "spike"], "spike"
    else:
        cli("triage", "logs/train.log", "--out", "t", cwd=run)
        args, out = ["logs/train.log", "--out", "t", "--recovery-window", "50"], "t"
    before = {k: v for k, v in snapshot(run / out).items() if not k.startswith(".cache/")}
    env = dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS="400", PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-m", "forensics.cli", command, *args, "--force"],
        cwd=run, env=env, capture_output=True, text=True, preexec_fn=_full_disk(20_000),
    )  # fmt: skip
    one_line_error(proc, "the disk is full")
    after = {k: v for k, v in snapshot(run / out).items() if not k.startswith(".cache/")}
    assert after == before


def test_a_full_disk_under_a_parquet_write_is_one_line(run: Path) -> None:
    """polars hides the errno of a failed Parquet write ("Invalid thrift: transport error");
    the atomic writer puts it back, so the user gets the disk line, not an internal error."""
    import os
    import subprocess
    import sys

    from forensics_testing.small_run import REPO

    env = dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS="400", PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "forensics.cli", "replay", "--config", "forensics.yaml"]
    cmd += ["--step", "170", "--window", "2", "--text", "--out", "w.parquet"]
    proc = subprocess.run(
        cmd, cwd=run, env=env, capture_output=True, text=True, preexec_fn=_full_disk(5_000)
    )
    one_line_error(proc, "File too large", "the disk is full")
    assert not (run / "w.parquet").exists() and not list(run.glob(".w.parquet*"))
