"""`--from-checkpoint DIR` on a Megatron-Bridge run, with save folders Bridge's own code wrote.

tests/oracles/bridge_writer.py runs megatron-bridge 0.6.2 (.venv-bridge, scripts/
bridge_oracle_env.sh): its `vanilla_gpt_pretrain_config` recipe with the small run's data
(forensics_testing/small_run.py, whose blend changes at iteration 151), its Hydra override parser
for each job's KEY=VALUE overrides, and its checkpoint helpers and `ConfigContainer.to_yaml` /
`TrainState.state_dict` for iter_N/run_config.yaml, train_state.pt, latest_train_state.pt and
the tracker. Two folders:
- plain: a first job saved 50-150 on the first blend, a second job (no ckpt_step) 200 and 250
  on the second;
- rolled back: as plain up to a second job that saved 200; a third job restarted with OUR restart
  line (checkpoint.ckpt_step=150, train.iterations_to_skip=[171,172], and the second blend set
  through our `dataset.blend=` words) and saved 200 (over the second job's) and 250.
Read from them, the replay must equal megatron-core's dataset, built from the dataset fields of
Bridge's run_config.yaml the way Bridge builds it (BlendedMegatronDatasetBuilder, train samples =
train_iters x global_batch_size, megatron/bridge/data/loaders.py:122-127).
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
import yaml

from dataloaders.trainers import MEGATRON_BRIDGE, get_trainer
from forensics.errors import ForensicsError
from forensics.from_checkpoint import config_from_checkpoint
from forensics_testing.bridge_support import bridge_common, run_bridge_writer, small_run_blends
from forensics_testing.small_run import SMALL, SPIKE_ARGS, cli

pytest.importorskip("megatron.core")
TRAINER = get_trainer(MEGATRON_BRIDGE)
SKIPPED = [(171, 172)]


@pytest.fixture(scope="module")
def saves(small_run: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("bridge")
    blends = small_run_blends(small_run)
    common = bridge_common(small_run)
    first = {"blend": blends[0], "saves": [50, 100, 150]}
    stage = [{"prefix": p, "weight": w} for p, w in zip(*blends[1], strict=True)]
    ours = [
        TRAINER.pin(150),
        TRAINER.spell(SKIPPED, None, 150),  # type: ignore[arg-type]
        *shlex.split(TRAINER.data_words(stage)),  # as the shell hands it to the script
    ]
    folders = [
        {"save": str(root / "plain"), "common": common,
         "jobs": [first, {"blend": blends[1], "saves": [200, 250]}]},
        {"save": str(root / "rolled"), "common": common,
         "jobs": [first, {"blend": blends[1], "saves": [200]},
                  {"blend": blends[0], "saves": [200, 250], "overrides": ours,
                   "resume": {"step": 150}}]},
    ]  # fmt: skip
    parsed = run_bridge_writer(folders, root)
    return {"root": root, "parsed": parsed, "blends": blends, "run": small_run}


def test_bridge_wrote_the_folder_and_read_our_overrides(saves: dict) -> None:
    plain = saves["root"] / "plain"
    names = sorted(p.name for p in plain.iterdir())
    assert names == [
        "iter_0000050", "iter_0000100", "iter_0000150", "iter_0000200", "iter_0000250",
        "latest_checkpointed_iteration.txt", "latest_train_state.pt",
    ]  # fmt: skip
    assert sorted(p.name for p in (plain / "iter_0000250").iterdir()) == [
        "run_config.yaml",
        "train_state.pt",
    ]
    # the trainer lists the checkpoints Bridge saved, not its tracker files
    assert TRAINER.checkpoints(plain) == [50, 100, 150, 200, 250]
    # Bridge's Hydra parser made our restart line into the skip list, the pin and the blend
    third = saves["parsed"][1][2]
    assert third["iterations_to_skip"] == [171, 172] and third["ckpt_step"] == 150
    assert third["blend"] == saves["blends"][1]


def _replay(out: Path) -> pl.DataFrame:
    return pl.read_parquet(out)


def test_replay_from_a_bridge_save_equals_megatron_core(
    saves: dict, megatron_build, tmp_path: Path
) -> None:
    plain = saves["root"] / "plain"
    step = SMALL.spike_iteration
    got = cli("replay", "--step", str(step), "--window", "40", "--from-checkpoint", str(plain),
              "--out", str(tmp_path / "a.parquet"), cwd=tmp_path)  # fmt: skip
    assert got.returncode == 0, got.stderr[-3000:]
    said = got.stderr
    assert f"iter_0000200/run_config.yaml (the first checkpoint at or after step {step})" in said
    assert "taken to have resumed from iteration 150" in said
    assert "an earlier job saved" in said and "iter_0000150/run_config.yaml" in said
    table = _replay(tmp_path / "a.parquet")
    assert table["iteration"].min() == step - 39 and table["iteration"].max() == step
    # megatron-core's datasets, built from the fields Bridge saved (each job's run_config.yaml)
    for it, since in ((150, 1), (250, 151)):
        run = yaml.safe_load((plain / f"iter_{it:07d}" / "run_config.yaml").read_text())
        ds, train = run["dataset"], run["train"]
        samples = train["train_iters"] * train["global_batch_size"]
        (theirs, _, _) = megatron_build(
            ds["blend"][0], ds["blend"][1], [samples, 0, 0],
            seed=ds["random_seed"], seq_length=ds["seq_length"], split=ds["split"],
            extra=ds["add_extra_token_to_sequence"], surplus=ds["mid_level_dataset_surplus"],
        )  # fmt: skip
        rows = table.filter(pl.col("iteration") >= since)
        if it == 150:
            rows = table.filter(pl.col("iteration") < 151)
        names = [Path(p).name for p in ds["blend"][0]]
        for (sample,), group in rows.group_by(["sample_index"], maintain_order=True):
            k = int(theirs.dataset_index[sample])
            m = int(theirs.dataset_sample_index[sample])
            tokens, ids = theirs.datasets[k]._query_document_sample_shuffle_indices(m)
            assert group["dataset"].unique().to_list() == [names[k]], sample
            np.testing.assert_array_equal(group["doc_id"].to_numpy(), ids, err_msg=str(sample))
            spans = (group["token_end"] - group["token_start"]).sum()
            assert spans == len(tokens) == ds["seq_length"] + 1


def test_a_rollback_with_applied_skips_is_followed(saves: dict, tmp_path: Path) -> None:
    rolled, plain = saves["root"] / "rolled", saves["root"] / "plain"
    args = ["replay", "--step", "175", "--window", "40"]
    a = cli(*args, "--from-checkpoint", str(rolled), "--out", str(tmp_path / "a.parquet"))
    assert a.returncode == 0, a.stderr[-3000:]
    b = cli(*args, "--from-checkpoint", str(plain), "--out", str(tmp_path / "b.parquet"))
    assert b.returncode == 0, b.stderr[-3000:]
    assert "applied: train.iterations_to_skip=[171,172] (resumed from iteration 150)" in a.stderr
    assert "taken to have resumed" not in a.stderr  # ckpt_step says where the job resumed
    ra, rb = _replay(tmp_path / "a.parquet"), _replay(tmp_path / "b.parquet")
    cols = ["iteration", "sample_index", "dataset", "doc_id", "token_start", "token_end"]
    assert ra.select(cols).equals(rb.select(cols))  # a Bridge skip still draws its batch
    skipped = ra.filter(pl.col("skipped"))["iteration"].unique().sort().to_list()
    assert skipped == [171, 172]


def _copy(saves: dict, name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(saves["root"] / "plain", tmp_path / name))


def test_refusals_name_the_field(saves: dict, tmp_path: Path) -> None:
    def edit(name: str, section: str, key: str, value: object) -> Path:
        save = _copy(saves, name, tmp_path)
        path = save / "iter_0000250" / "run_config.yaml"
        run = yaml.safe_load(path.read_text())
        run[section][key] = value
        path.write_text(yaml.safe_dump(run))
        return save

    cases = [
        (edit("mock", "dataset", "mock", True), r"dataset\.mock = True \(mock data\)"),
        (edit("new", "dataset", "shuffle_each_epoch", True), r"dataset\.shuffle_each_epoch is a"),
        (edit("epochs", "train", "num_epochs", 2.0), r"train\.num_epochs \(the iteration count"),
        (edit("cyclic", "dataset", "dataloader_type", "cyclic"), r"dataset\.dataloader_type"),
        (edit("ramp", "train", "rampup_batch_size", [4, 4, 800]), r"train\.rampup_batch_size: "),
    ]
    for save, message in cases:
        with pytest.raises(ForensicsError, match=message):
            config_from_checkpoint(save, 240, say=lambda _s: None)
    # the first checkpoints gone: what is assumed is said
    save = _copy(saves, "pruned", tmp_path)
    for it in (50, 100, 150):
        shutil.rmtree(save / f"iter_{it:07d}")
    said: list[str] = []
    config_from_checkpoint(save / "iter_0000250", None, say=said.append)
    assert "  no checkpoint before iteration 200 (save_interval 50): the job" in "\n".join(said)
    # a train state holding any pickled object beyond tensors is refused before unpickling
    save = _copy(saves, "pickle", tmp_path)
    torch.save(
        {"step": torch.tensor(250), "x": pl.Series([1])}, save / "iter_0000250" / "train_state.pt"
    )
    with pytest.raises(ForensicsError, match=r"train_state\.pt: holds a pickled polars"):
        config_from_checkpoint(save, 240, say=lambda _s: None)


def test_spike_and_rebuild_on_a_bridge_run(saves: dict, tmp_path: Path) -> None:
    plain = str(saves["root"] / "plain")
    spike = tmp_path / "spike"
    proc = cli("spike", *SPIKE_ARGS, "--from-checkpoint", plain, "--out", str(spike), "--quiet",
               timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    plan = json.loads((spike / "skip.json").read_text(encoding="utf-8"))
    assert plan["trainer"] == MEGATRON_BRIDGE  # the run's trainer, read from the save folder
    line = (spike / f"restart-{MEGATRON_BRIDGE}.flags").read_text(encoding="utf-8").strip()
    pin, flag = line.split(" ")
    assert pin == f"checkpoint.ckpt_step={plan['rollback']['iteration']}"
    assert TRAINER.parse(flag) == sorted(
        {i for a, b in plan["iterations"] for i in range(a, b + 1)}
    )
    check = cli("check-skip", str(spike / "skip.json"), "--from-checkpoint", plain)
    assert check.returncode == 0, check.stderr[-3000:]
    out = tmp_path / "rebuilt"
    rebuild = cli("rebuild", str(spike / "skip.json"), "--from-checkpoint", plain, "--out",
                  str(out), timeout=600)  # fmt: skip
    assert rebuild.returncode == 0, rebuild.stderr[-3000:]
    words = shlex.split((out / "restart-rebuilt.flags").read_text(encoding="utf-8"))
    assert words[0] == pin and words[1].startswith("dataset.blend=[[")
