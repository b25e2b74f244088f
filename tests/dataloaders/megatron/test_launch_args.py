"""The example config, and run configs made from a training job's Megatron arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

from dataloaders.megatron.launch_args import config_from_megatron_args, split_megatron_args
from dataloaders.run_config import config_from_dict, load_config
from forensics.errors import ForensicsError
from forensics_testing.repo_paths import REPO_ROOT

ROOT = REPO_ROOT


def test_example_config_is_valid() -> None:
    config = load_config(ROOT / "configs" / "example-megatron.yaml")
    stages = config.data.data_stages
    assert [s.start_iteration for s in stages] == [1, 80001]
    assert [d.display_name for d in stages[1].blend] == ["web", "code", "math"]
    assert config.training.rampup_batch_size == (32, 32, 2_000_000)
    assert config.tokenizer == ROOT / "configs" / "data" / "tokenizer.json"


def test_unknown_key_in_a_config_is_an_error(tmp_path: Path) -> None:
    text = (ROOT / "configs" / "example-megatron.yaml").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("seed: 1234", "sead: 1234"))
    with pytest.raises(ForensicsError, match="sead"):
        load_config(bad)


def test_weighted_data_path_and_ignored_flags(tmp_path: Path) -> None:
    (tmp_path / "web.manifest.parquet").write_bytes(b"")
    argv = split_megatron_args(
        "--num-layers 32 --data-path 0.7 web 0.3 /abs/code --seq-length 4096 "
        "--global-batch-size 1024 --micro-batch-size 2 --train-iters 5000 --seed 7 "
        "--split 99,1,0 --data-cache-path cache --tokenizer-model tok.json --save ckpt "
        "--lr 3e-4 --bf16 --rampup-batch-size 64 64 100000 --train-samples 5120000"
    )
    config = config_from_megatron_args(argv, config_from_dict=config_from_dict, cwd=tmp_path)
    blend = config.data.data_stages[0].blend
    assert [(d.prefix, d.weight) for d in blend] == [
        (tmp_path / "web", 0.7),
        (Path("/abs/code"), 0.3),
    ]
    assert blend[0].manifest == tmp_path / "web.manifest.parquet" and blend[1].manifest is None
    assert all("weight" in d.model_fields_set for d in blend)
    assert config.data.seed == 7 and config.data.split == "99,1,0"
    assert config.data.cache_path == tmp_path / "cache"
    assert config.training.rampup_batch_size == (64, 64, 100_000)
    assert config.training.micro_batch_size == 2
    assert config.tokenizer == tmp_path / "tok.json"
    assert config.checkpoint_dir == tmp_path / "ckpt"


def test_unweighted_prefixes_and_defaults(tmp_path: Path) -> None:
    config = config_from_megatron_args(
        [
            "--data-path",
            "a",
            "b",
            "c",
            "--seq-length",
            "128",
            "--global-batch-size",
            "8",
            "--train-iters",
            "10",
        ],
        config_from_dict=config_from_dict,
        cwd=tmp_path,
    )
    blend = config.data.data_stages[0].blend
    assert [d.display_name for d in blend] == ["a", "b", "c"]
    assert not any("weight" in d.model_fields_set for d in blend)
    assert config.data.seed == 1234 and config.data.split == "969, 30, 1"


def test_args_file_and_data_args_path(tmp_path: Path) -> None:
    (tmp_path / "blend.txt").write_text("0.5 x\n0.5 y\n")
    args = tmp_path / "args.sh"
    args.write_text(
        "--data-args-path blend.txt \\\n  --seq-length 64 --global-batch-size 4  # comment\n"
        "--train-iters 3\n"
    )
    config = config_from_megatron_args(
        split_megatron_args(f"@{args}"), config_from_dict=config_from_dict, cwd=tmp_path
    )
    assert [d.prefix.name for d in config.data.data_stages[0].blend] == ["x", "y"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("--seq-length 64 --global-batch-size 4 --train-iters 3", "no --data-path"),
        ("--data-path a --global-batch-size 4 --train-iters 3", "--seq-length is required"),
        ("--data-path a --seq-length 64 --global-batch-size 4", "train_iters or"),
        ("--train-data-path a --seq-length 8", "not supported"),
        ("--data-path a --seq-length x --global-batch-size 4", "invalid int"),
    ],
)
def test_bad_arguments(tmp_path: Path, args: str, message: str) -> None:
    with pytest.raises(ForensicsError, match=message):
        config_from_megatron_args(
            split_megatron_args(args), config_from_dict=config_from_dict, cwd=tmp_path
        )


def test_missing_args_file() -> None:
    with pytest.raises(ForensicsError, match="arguments file not found"):
        split_megatron_args("@/nonexistent/args.txt")
