"""Restart plans that hold across data stages (the accident battery's rebuild cases).

A rebuild whose rollback lies in the stage before the culprit's is a sequence of launches (one
--data-path per Megatron launch). The launches are replayed here with megatron-core itself: each
flags file split as the shell splits `$(cat FILE)`, its --data-path built into a BlendedDataset
by megatron-core's builder, the consumed-samples count carried from one launch to the next as a
relaunch from the saved checkpoint does.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from stage_runs import (
    GBS,
    ITERS,
    ROLLBACK,
    SEED,
    SEQ,
    SPLIT,
    build_staged_run,
    cli,
    edit_skip,
)

from dataloaders.run_config import load_config
from dataloaders.trainers import get_trainer
from forensics.errors import ForensicsError
from forensics.rebuild import run_rebuild
from forensics.replay import open_replayer
from forensics_testing.refusal import one_line_error


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("staged")
    run = build_staged_run(root)
    result = run_rebuild(run["skip"], load_config(run["config"]), root / "rebuild")
    return run | {"result": result, "out": root / "rebuild"}


def parse_launch(path: Path) -> dict:
    """A flags file as Megatron's argparse would see it after `$(cat FILE)`: the blend, the
    checkpoint it loads (--ckpt-step) and the iteration it exits at (--exit-interval)."""
    argv = shlex.split(path.read_text())
    at = argv.index("--data-path")
    values = []
    for word in argv[at + 1 :]:
        if word.startswith("--"):
            break
        values.append(word)
    flag = {
        argv[i]: argv[i + 1] for i, w in enumerate(argv) if w in ("--ckpt-step", "--exit-interval")
    }
    return {
        "weights": [float(w) for w in values[0::2]],
        "prefixes": values[1::2],
        "load": int(flag["--ckpt-step"]),
        "exit": int(flag["--exit-interval"]) if "--exit-interval" in flag else None,
    }


def original_doc(prefix: str, doc: int, sources: dict[str, str]) -> tuple[str, int]:
    """(original dataset prefix, its doc_id) of document `doc` of `prefix` (a rebuilt copy maps
    back through its manifest)."""
    manifest = Path(f"{prefix}.manifest.parquet")
    if prefix in sources:
        ids = pl.read_parquet(manifest)["original_doc_id"].cast(pl.Int64).to_list()
        return sources[prefix], ids[doc]
    return prefix, doc


def test_rebuild_plan_is_every_launch_and_megatron_core_replays_it(
    staged: dict, megatron_build
) -> None:
    out, summary = staged["out"], json.loads((staged["out"] / "rebuild.json").read_text())
    files = [launch["file"] for launch in summary["launches"]]
    assert files == ["restart-rebuilt.flags", "restart-rebuilt-from-31.flags"], files
    sources = {row["rebuilt"]: row["source"] for row in summary["datasets"].values()}
    blocked = {
        str(staged["root"] / "data" / name / "web_text_document"): set(ids)
        for name, ids in staged["blocked"].items()
    }
    original = open_replayer(load_config(staged["config"]))
    planned = open_replayer(load_config(out / "rebuilt.yaml"))
    consumed, iteration, checked = ROLLBACK * GBS, ROLLBACK + 1, 0
    for file in files:
        launch = parse_launch(out / file)
        assert launch["load"] == iteration - 1  # the checkpoint the launch before it saved
        (blend, _, _) = megatron_build(
            launch["prefixes"], launch["weights"], [ITERS * GBS, 0, 0],
            seed=SEED, seq_length=SEQ, split=SPLIT,
        )  # fmt: skip
        last = launch["exit"] or ITERS
        table = planned.replay(iteration, last, text=False, progress=False)
        before = original.replay(iteration, last, text=False, progress=False)
        for it in range(iteration, last + 1):
            for pos in range(GBS):
                k, m = int(blend.dataset_index[consumed]), int(blend.dataset_sample_index[consumed])
                tokens, docs = blend.datasets[k]._query_document_sample_shuffle_indices(m)
                prefix = launch["prefixes"][k]
                for doc in docs:
                    source, old = original_doc(prefix, int(doc), sources)
                    assert old not in blocked.get(source, set()), (it, pos, source, old)
                for reference, name in ((table, "planned"), (before, "original")):
                    if name == "original" and file != files[0]:
                        continue  # the first launch's blend is unchanged: the original order
                    rows = reference.filter(
                        (pl.col("iteration") == it) & (pl.col("position") == pos)
                    )
                    replayer = planned if name == "planned" else original
                    mine = np.concatenate([
                        np.asarray(replayer._doc_tokens(n, d, a, b), dtype=np.int64)
                        for n, d, a, b in rows.select(
                            "dataset", "doc_id", "token_start", "token_end"
                        ).rows()
                    ])  # fmt: skip
                    np.testing.assert_array_equal(mine, tokens, err_msg=f"{name} {it}/{pos}")
                consumed += 1
                checked += 1
        iteration = last + 1
    assert iteration == ITERS + 1 and checked == (ITERS - ROLLBACK) * GBS


def test_rebuild_says_which_iterations_keep_their_order(staged: dict) -> None:
    summary = json.loads((staged["out"] / "rebuild.json").read_text())
    md = (staged["out"] / "rebuild.md").read_text()
    assert summary["notes"][0].startswith("The data order changes from iteration 31 on")
    assert "Iterations up to 30 are unchanged" in summary["notes"][0]
    assert "Iterations 21-30 keep the original run's batches" in summary["notes"][1]
    assert "every batch of the restart differs" not in md
    first, second = summary["launches"]
    assert (first["last_iteration"], first["order_changes"]) == (30, False)
    assert (second["first_iteration"], second["order_changes"]) == (31, True)
    assert "--exit-interval 30" in md and "restart-rebuilt-from-31.flags" in md
    assert (staged["out"] / "data_path-from-31.txt").read_text() in (
        staged["out"] / "restart-rebuilt-from-31.flags"
    ).read_text()


def test_rebuild_terminal_shows_every_launch(staged: dict, tmp_path: Path) -> None:
    proc = cli(
        "rebuild", str(staged["skip"]), "--config", str(staged["config"]), "--out",
        str(tmp_path / "o"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "launch 2, iterations 31 to the end: loads checkpoint 30" in proc.stdout, proc.stdout
    assert "--exit-interval 30" in proc.stdout and "restart-rebuilt-from-31.flags" in proc.stdout


def test_two_datasets_with_one_file_name_are_rebuilt_apart(tmp_path: Path) -> None:
    run = build_staged_run(tmp_path / "run", crawl_dirs=("a", "b"))
    result = run_rebuild(run["skip"], load_config(run["config"]), tmp_path / "o")
    rebuilt = [row["rebuilt"] for row in result.counts.values()]
    assert len(set(rebuilt)) == 2, rebuilt
    launch = parse_launch(tmp_path / "o" / "restart-rebuilt-from-31.flags")
    assert len(set(launch["prefixes"])) == len(launch["prefixes"]) == 3, launch
    for name, ids in run["blocked"].items():  # each copy is its own dataset without its list
        row = result.counts[name]
        manifest = pl.read_parquet(f"{row['rebuilt']}.manifest.parquet")
        assert row["source"].endswith(f"/{name}/web_text_document")
        assert not set(manifest["original_doc_id"].cast(pl.Int64).to_list()) & set(ids)


@pytest.mark.parametrize(
    ("rollback", "needle"),
    [
        ({"iteration": 40, "resume_iteration": 41}, "not before the spike at iteration 36"),
        ({"iteration": 0, "resume_iteration": 1}, "iteration 0 is marked as a checkpoint"),
        ({"iteration": 25, "resume_iteration": 26}, "rollback checkpoint 25 is no longer"),
        ({"iteration": 20, "resume_iteration": 30}, "is not rollback.iteration + 1"),
    ],
)
def test_rebuild_and_check_skip_refuse_the_same_edited_rollback(
    staged: dict, tmp_path: Path, rollback: dict, needle: str
) -> None:
    skip = edit_skip(staged["skip"], tmp_path / "spike", rollback=rollback)
    for command in (("rebuild", "--out", str(tmp_path / "o")), ("check-skip",)):
        proc = cli(command[0], str(skip), "--config", str(staged["config"]), *command[1:])
        one_line_error(proc, needle, str(skip))
    assert not (tmp_path / "o").exists()


def test_moved_run_is_rebuilt_with_the_same_note_as_check_skip(
    staged: dict, tmp_path: Path
) -> None:
    import shutil

    moved = tmp_path / "moved"
    shutil.copytree(staged["root"], moved, ignore=shutil.ignore_patterns("rebuild"))
    skip, config = moved / "spike-36" / "skip.json", moved / "forensics.yaml"
    check = cli("check-skip", str(skip), "--config", str(config))
    assert check.returncode == 0, check.stderr
    proc = cli("rebuild", str(skip), "--config", str(config), "--out", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    note = f"the run directory moved from {staged['root']} to {moved}"
    assert note in check.stdout.replace("\n", " ") and note in proc.stdout.replace("\n", " ")


ODD = "run dir $(touch pwned) 'x'"  # a space, a command substitution and quotes


def cat_argument(line: str) -> list[str]:
    """The words the shell gives `cat` in the `$(cat ...)` of `line`."""
    inner = line[line.index("$(cat ") + len("$(cat ") :]
    return shlex.split(inner[: inner.rindex(")")])


def test_paste_and_watcher_lines_quote_the_path(tmp_path: Path) -> None:
    from forensics.report.first_screen import restart_command
    from forensics.report.skip_view import ReportSkip
    from forensics.skip.action import rebuild_restart
    from forensics.watch.spikejob import action_words

    out = tmp_path / ODD
    out.mkdir()
    flag = "--iterations-to-skip " + " ".join(str(i) for i in range(100, 160))
    skip = {
        "trainer": "megatron-lm",
        "iterations": [[100, 159]],
        "flags": {"megatron-lm": {"flag": flag, "pin": "--ckpt-step 50", "consequence": "c"}},
        "action": {"flags_dir": str(out)},
    }
    paste = restart_command(ReportSkip.from_dict(skip), 50)[-1].text
    assert cat_argument(paste) == [f"{out}/restart-megatron-lm.flags"], paste
    (out / "restart-megatron-lm.flags").write_text(flag + "\n")
    words = action_words(out, {"trainer": "megatron-lm", "action": {"kind": "skip"}}, 50)
    assert cat_argument(words["action_text"]) == [str(out / "restart-megatron-lm.flags")]
    restart = rebuild_restart({"rebuild_out": str(out)}, say_what=False)
    assert cat_argument(restart) == [f"{out}/restart-rebuilt.flags"], restart


def test_rebuild_into_an_odd_folder_writes_flags_that_split_right(
    staged: dict, tmp_path: Path
) -> None:
    out = tmp_path / ODD
    proc = cli("rebuild", str(staged["skip"]), "--config", str(staged["config"]), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    launch = parse_launch(out / "restart-rebuilt-from-31.flags")
    assert str(out / "web_text_document") in launch["prefixes"], launch
    assert all(Path(f"{p}.idx").is_file() for p in launch["prefixes"])
    assert "eval" in proc.stdout and "(the file holds quoted paths)" in proc.stdout
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()


@pytest.mark.parametrize("accident", ["rewritten", "interrupted"])
def test_a_rebuild_that_fails_midway_leaves_nothing(
    staged: dict, tmp_path: Path, monkeypatch, accident: str
) -> None:
    import shutil

    import forensics.rebuild.run as rebuild_run

    root = tmp_path / "run"
    shutil.copytree(staged["root"], root, ignore=shutil.ignore_patterns("rebuild"))
    real = rebuild_run.write_datasets

    def midway(*args, **kwargs):
        done = real(*args, **kwargs)
        if accident == "interrupted":
            raise KeyboardInterrupt
        code = root / "data" / "code.bin"
        code.write_bytes(code.read_bytes()[::-1])  # same size, other bytes
        return done

    monkeypatch.setattr(rebuild_run, "write_datasets", midway)
    skip, config = root / "spike-36" / "skip.json", load_config(root / "forensics.yaml")
    if accident == "interrupted":
        with pytest.raises(KeyboardInterrupt):
            run_rebuild(skip, config, tmp_path / "o")
    else:
        with pytest.raises(ForensicsError, match="code.bin: changed while forensics rebuild ran"):
            run_rebuild(skip, config, tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_keep_passes_draws_each_remaining_document_as_often(
    staged: dict, tmp_path: Path, megatron_build
) -> None:
    proc = cli("rebuild", str(staged["skip"]), "--config", str(staged["config"]), "--out",
               str(tmp_path / "o"), "--keep", "passes")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stdout.split())
    assert "Chosen: --keep passes" in said and "The alternative, --keep share" in said
    row = json.loads((tmp_path / "o" / "rebuild.json").read_text())["datasets"]["crawl"]
    kept = row["tokens_kept"] / (row["tokens_kept"] + row["tokens_removed"])
    new, old = (parse_launch(tmp_path / "o" / "restart-rebuilt-from-31.flags"),
                parse_launch(staged["out"] / "restart-rebuilt-from-31.flags"))  # fmt: skip
    assert sum(new["weights"]) == pytest.approx(sum(old["weights"]), rel=1e-5)
    first = "restart-rebuilt.flags"  # the stage without a rebuilt dataset keeps its blend
    assert (tmp_path / "o" / first).read_text() == (staged["out"] / first).read_text()
    shares = []
    for launch in (old, new):  # share of the stage's samples drawn from crawl, by megatron-core
        (blend, _, _) = megatron_build(
            launch["prefixes"], launch["weights"], [ITERS * GBS, 0, 0],
            seed=SEED, seq_length=SEQ, split=SPLIT,
        )  # fmt: skip
        k = next(i for i, p in enumerate(launch["prefixes"]) if "web_text_document" in p)
        shares.append(float(np.mean(np.asarray(blend.dataset_index) == k)))
    # samples per token of the dataset: the same before and after (passes kept)
    assert shares[1] / kept == pytest.approx(shares[0], rel=0.02), (shares, kept)
    default = json.loads((staged["out"] / "rebuild.json").read_text())
    assert default["keep"] == "share" and "Chosen: --keep share" in " ".join(default["notes"])


def test_an_unknown_recipe_is_refused(staged: dict, tmp_path: Path) -> None:
    proc = cli("rebuild", str(staged["skip"]), "--config", str(staged["config"]), "--out",
               str(tmp_path / "o"), "--keep", "tokens")  # fmt: skip
    one_line_error(proc, "--keep 'tokens': give one of share, passes")
    assert not (tmp_path / "o").exists()


def test_the_spikes_action_says_the_restart_is_several_launches(staged: dict) -> None:
    from forensics.skip.action import action_for_plan, rebuild_restart
    from forensics.skip.plan import SkipPlan

    skip = SkipPlan.read(staged["skip"])
    skip.ahead = {"share_of_remaining_samples": 0.3, "iterations_holding_it": 20, "iterations": 30}
    action = action_for_plan(
        skip, load_config(staged["config"]), staged["skip"].parent, get_trainer(skip.trainer)
    )
    assert action["kind"] == "rebuild", action
    said = rebuild_restart(action)
    assert "for launch 1 of 2" in said and "from iteration 31" in said, said


def test_the_spikes_action_uses_eval_where_the_flags_will_hold_quotes(
    staged: dict, tmp_path: Path
) -> None:
    from forensics.skip.action import action_for_plan, rebuild_restart
    from forensics.skip.plan import SkipPlan

    skip = SkipPlan.read(staged["skip"])
    skip.ahead = {"share_of_remaining_samples": 0.3, "iterations_holding_it": 20, "iterations": 30}
    config = load_config(staged["config"])
    trainer = get_trainer(skip.trainer)
    plain = action_for_plan(skip, config, tmp_path / "runs" / "spike-36", trainer)
    assert rebuild_restart(plain, say_what=False).startswith("with $(cat ")
    spaced = action_for_plan(skip, config, tmp_path / "my runs" / "spike-36", trainer)
    said = rebuild_restart(spaced, say_what=False)
    assert said.startswith('with eval "<your launch command> $(cat ') and "'" in said, said
