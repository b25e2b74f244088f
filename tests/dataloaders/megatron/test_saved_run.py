"""`--from-checkpoint DIR` on a Megatron-LM save folder (dataloaders/megatron/saved_run.py, reached
through the family hook): the run's description read from the checkpoints, no config.

The checkpoints hold the Namespace Megatron-LM's own argument parser made
(forensics_testing/megatron_checkpoints.py), saved in the legacy `torch` layout and through
megatron-core's `torch_dist` common-state writer. The run is the small generated run
(forensics_testing/small_run.py), whose blend changes at iteration 151: a first job (fresh start)
saved iterations 50-150 and a second job, restarted from 150 with the new `--data-path`, saved 200
and 250. Read from the checkpoints, the replay must equal the replay of the hand-written config.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import polars as pl
import pytest
import yaml

from forensics.errors import ForensicsError
from forensics_testing.small_run import SMALL, cli

pytest.importorskip("megatron.core")


def _data_path(cfg: dict, stage: int) -> list[str]:
    out: list[str] = []
    for d in cfg["data"]["stages"][stage]["blend"]:
        out += [str(d["weight"]), d["prefix"]]
    return out


def _save(run: Path, save: Path, writer, **changes) -> None:  # noqa: ANN001
    """Both jobs' checkpoints, the way Megatron-LM saves them."""
    from forensics_testing.megatron_checkpoints import megatron_args

    cfg = yaml.safe_load((run / "forensics.yaml").read_text(encoding="utf-8"))
    common = {
        "seq_length": SMALL.seq_length,
        "global_batch_size": SMALL.global_batch_size,
        "micro_batch_size": 1,
        "train_iters": SMALL.train_iters,
        "seed": SMALL.seed,
        "split": SMALL.split,
        "tokenizer_type": "HuggingFaceTokenizer",
        "tokenizer_model": str(run / "tokenizer.json"),
        "data_cache_path": None,
        "save": str(save),
        **changes,
    }
    for start, stage, iters in ((0, 0, (50, 100, 150)), (150, 1, (200, 250))):
        for it in iters:
            args = megatron_args(
                **common,
                data_path=[
                    str(run / p) if not p[0].isdigit() else p for p in _data_path(cfg, stage)
                ],
                iteration=start,
                consumed_train_samples=it * SMALL.global_batch_size,
                load=str(save) if start else None,
            )
            writer(save, it, args)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    from forensics_testing.demo.build import build_run
    from forensics_testing.megatron_checkpoints import write_legacy, write_torch_dist

    root = tmp_path_factory.mktemp("fromckpt")
    run = root / "run"
    build_run(run, SMALL, progress=False)
    _save(run, root / "legacy", write_legacy)
    _save(run, root / "dist", write_torch_dist)
    return run


def _replay(out: Path) -> pl.DataFrame:
    table = pl.read_parquet(out)
    return table.select("iteration", "sample_index", "doc_id", "token_start", "token_end")


@pytest.mark.parametrize("layout", ["legacy", "dist"])
def test_replay_from_checkpoint_equals_the_config(run: Path, layout: str, tmp_path: Path) -> None:
    save = run.parent / layout
    step = SMALL.spike_iteration
    common = ["replay", "--step", str(step), "--window", "40"]
    ours = cli(*common, "--from-checkpoint", str(save), "--out", str(tmp_path / "a.parquet"))
    assert ours.returncode == 0, ours.stderr[-3000:]
    ref = cli(
        *common, "--config", str(run / "forensics.yaml"), "--out", str(tmp_path / "b.parquet")
    )
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert _replay(tmp_path / "a.parquet").equals(_replay(tmp_path / "b.parquet"))
    said = ours.stderr
    name = "common.pt" if layout == "dist" else "mp_rank_00/model_optim_rng.pt"
    assert f"iter_0000200/{name} (the first checkpoint at or after step {step})" in said
    assert "an earlier job (resumed from iteration 0) saved" in said
    for line in ("  seed: 7", f"  global_batch_size: {SMALL.global_batch_size}",
                 "(HuggingFaceTokenizer)", "web_v2_text_document weight"):  # fmt: skip
        assert line in said, said


def test_spike_from_checkpoint(run: Path, tmp_path: Path) -> None:
    from forensics_testing.small_run import SPIKE_ARGS

    proc = cli("spike", *SPIKE_ARGS, "--from-checkpoint", str(run.parent / "legacy"),
               "--out", str(tmp_path / "spike"), "--quiet", timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    skip = tmp_path / "spike" / "skip.json"
    command = json.loads(skip.read_text(encoding="utf-8"))["action"]["command"]
    assert command is None or f"--from-checkpoint {run.parent / 'legacy'}" in command
    check = cli("check-skip", str(skip), "--from-checkpoint", str(run.parent / "legacy"))
    assert check.returncode == 0, check.stderr[-3000:]
    assert "the run read by --from-checkpoint" in check.stdout, check.stdout


def test_without_a_step_the_tracker_file_picks_the_checkpoint(run: Path) -> None:
    from forensics.from_checkpoint import config_from_checkpoint

    lines: list[str] = []
    config = config_from_checkpoint(run.parent / "dist", None, lines.append)
    assert "latest_checkpointed_iteration.txt says 250" in lines[0]
    starts = [s.start_iteration for s in config.data.data_stages]
    assert starts == [1, 151]
    one = config_from_checkpoint(run.parent / "dist" / "iter_0000100", None, lines.append)
    assert [s.start_iteration for s in one.data.data_stages] == [1]


def test_explicit_config_wins(run: Path, tmp_path: Path) -> None:
    config = str(run / "forensics.yaml")
    out = str(tmp_path / "r.parquet")
    proc = cli("replay", "--step", "60", "--window", "5", "--config", config,
               "--from-checkpoint", str(tmp_path), "--out", out)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"--config given: --from-checkpoint {tmp_path} is not read" in proc.stderr


def test_refusals(run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from forensics.from_checkpoint import config_from_checkpoint
    from forensics_testing.megatron_checkpoints import megatron_args, write_legacy

    def refused(folder: Path, *needles: str) -> None:
        with pytest.raises(ForensicsError) as err:
            config_from_checkpoint(folder, None, lambda _line: None)
        assert "\n" not in str(err.value)
        for needle in needles:
            assert needle in str(err.value), str(err.value)

    refused(tmp_path / "nowhere", "--from-checkpoint directory not found")
    refused(tmp_path, "no checkpoint forensics can read in it", "iter_NNNNNNN/")
    write_legacy(tmp_path / "nodata", 10, megatron_args(data_path=None, save=None))
    refused(tmp_path / "nodata", "model_optim_rng.pt: no --data-path")
    bad = megatron_args(data_path=["/d_text_document"], consumed_train_samples=7)
    write_legacy(tmp_path / "drained", 10, bad)
    refused(tmp_path / "drained", "iteration 10 consumed 7 samples, not 80")
    evil = tmp_path / "evil" / "iter_0000010" / "mp_rank_00"
    evil.mkdir(parents=True)
    torch.save({"args": megatron_args(), "x": pickle.Pickler}, evil / "model_optim_rng.pt")
    refused(tmp_path / "evil", "holds a pickled pickle.Pickler", "give --config")
    for layout in ("other_seed",):
        save = tmp_path / layout
        args = megatron_args(data_path=["/d_text_document"], iteration=0, seed=1)
        write_legacy(save, 50, args)
        args = megatron_args(data_path=["/d_text_document"], iteration=50, seed=2)
        write_legacy(save, 100, args)
        refused(save, "the jobs differ in data.seed, not only in their data blend")


def _watch(run: Path, saved: Path, out: Path, whole_log: bool) -> tuple[list[dict], list]:
    """Feed the run's log to a watcher reading the run from `saved`, 20 lines a poll, until it
    starts the spike analysis (or to the end of the log): its messages and the command lines
    of the spike runs it started (stopped at once: what they find is
    test_spike_from_checkpoint's)."""
    from forensics.triage.config import TriageConfig
    from forensics.watch.loop import Watcher, WatchOptions

    lines = (run / "logs" / "train.log").read_text().splitlines()
    log = out.parent / "live.log"
    log.write_text("")
    w = Watcher(
        WatchOptions(
            log=log,
            out=out,
            interval=0.01,
            cfg=TriageConfig(recovery_window=20),
            from_checkpoint=str(saved),
            spike_args=("--embed-cap", "0"),
        )
    )
    msgs: list[dict] = []
    for at in range(0, len(lines), 20):
        with open(log, "a") as fh:
            fh.write("\n".join(lines[at : at + 20]) + "\n")
        msgs += w.poll()
        if w.jobs and not whole_log:
            break
    commands = []
    for job in w.jobs.values():
        assert job.proc is not None
        commands.append(list(job.proc.args))
        job.proc.kill()
        job.proc.wait()
    w.close()
    return msgs, commands


def test_watch_starts_the_spike_from_the_trainers_checkpoints(run: Path, tmp_path: Path) -> None:
    """`watch --from-checkpoint SAVE`: no config; the spike run reads the save folder."""
    saved = run.parent / "legacy"
    msgs, commands = _watch(run, saved, tmp_path / "w", whole_log=False)
    started = [m for m in msgs if m["message"] == "forensics_started"]
    assert len(started) == 1 and len(commands) == 1, [m.get("summary") for m in msgs]
    (command,) = commands
    at = command.index("--from-checkpoint")
    assert command[at + 1] == str(saved) and "--config" not in command, command
    assert command[command.index("--step") + 1] == str(started[0]["step"])


def test_watch_before_the_first_save_says_so(run: Path, tmp_path: Path) -> None:
    """A save folder the trainer has not written to yet: the analysis is not started, and the
    watcher says so once for the spike (raised, then judged)."""
    empty = tmp_path / "save"
    empty.mkdir()
    msgs, commands = _watch(run, empty, tmp_path / "w", whole_log=True)
    said = [m for m in msgs if m["message"] == "forensics_not_started"]
    assert len(said) == 1 and not commands, [m.get("summary") for m in msgs]
    assert not any(m["message"] == "forensics_started" for m in msgs)
    assert f"no checkpoint under {empty} yet" in said[0]["summary"], said


def test_watch_refuses_a_mistyped_save_folder(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("")
    proc = cli("watch", str(log), "--from-checkpoint", str(tmp_path / "no" / "such"),
               "--max-polls", "1")  # fmt: skip
    assert proc.returncode != 0
    assert "neither it nor its parent exists" in proc.stderr, proc.stderr
    both = cli("watch", str(log), "--from-checkpoint", str(tmp_path), "--config", str(log),
               "--max-polls", "1")  # fmt: skip
    assert both.returncode != 0 and "not both" in both.stderr, both.stderr
