"""Train the byte-level model of the real-spike recipe with ai2-olmo-core's own Trainer on CPU
(gloo), as an OLMo-core training script does: run in .venv-olmo, not the project's venv.

    python olmo_loop_train.py SPEC.json [OVERRIDE ...]      # train; the log goes to stdout
    python olmo_loop_train.py SPEC.json --plan STEP...      # instance indices of those steps

SPEC (JSON): paths, work_dir, save_folder, seed, lr, steps, save_interval, sequence_length,
batch (instances per step), and optionally load_path (a `stepN` folder to start from).
OVERRIDES are dotlist words such as `--trainer.steps_to_skip=[{"start":301,"stop":321}]`,
merged into the experiment config the way the library's scripts merge theirs
(allenai/OLMo-core fa6c5014c9 src/olmo_core/internal/experiment.py:415
`config.merge(cli_context.overrides)`; ai2-olmo-core 3.0.0 olmo_core/config.py:197 `merge`).

The set-up follows the library's example (src/examples/llm/train.py): NumpyFSLDatasetConfig,
NumpyDataLoaderConfig, TransformerTrainModuleConfig with AdamW, a TrainerConfig with the
CheckpointerCallback and the ConfigSaverCallback, `prepare_training_environment` (which sets up
the library's logging: olmo_core/utils.py setup_logging), `maybe_load_checkpoint`, `fit`. The model
is the library's `TransformerConfig.olmo2_14M` cut to 2 blocks of 4 heads (width 128, OLMo 2
blocks: reordered norm, QK-norm, SwiGLU, RoPE) over the 256 byte values plus EOS and PAD.
`--plan` builds the same dataset and loader and prints, per step, the global instance indices
the trainer will draw (the loader's own `get_global_indices`, batch by batch).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from olmo_core.config import Config
from olmo_core.data import NumpyDataLoaderConfig, NumpyFSLDatasetConfig, TokenizerConfig
from olmo_core.nn.transformer import TransformerConfig
from olmo_core.optim import AdamWConfig
from olmo_core.train import (
    Duration,
    TrainerConfig,
    prepare_training_environment,
    teardown_training_environment,
)
from olmo_core.train.callbacks import CheckpointerCallback, ConfigSaverCallback
from olmo_core.train.train_module import TransformerTrainModuleConfig

EOS, PAD, VOCAB = 256, 257, 258


@dataclass
class ExperimentConfig(Config):
    """The experiment config of the library's scripts (src/examples/llm/train.py)."""

    model: TransformerConfig
    dataset: NumpyFSLDatasetConfig
    data_loader: NumpyDataLoaderConfig
    trainer: TrainerConfig
    train_module: TransformerTrainModuleConfig
    init_seed: int = 0
    run_name: str = "real-loop"


def experiment(spec: dict[str, Any]) -> ExperimentConfig:
    seq = spec["sequence_length"]
    model = TransformerConfig.olmo2_14M(
        vocab_size=128 * ((VOCAB + 127) // 128), n_layers=2, n_heads=4
    )
    dataset = NumpyFSLDatasetConfig(
        paths=spec["paths"],
        sequence_length=seq,
        tokenizer=TokenizerConfig(vocab_size=VOCAB, eos_token_id=EOS, pad_token_id=PAD),
        work_dir=spec["work_dir"],
        dtype="uint16",
    )
    loader = NumpyDataLoaderConfig(
        global_batch_size=spec["batch"] * seq, seed=spec["seed"], num_workers=0
    )
    trainer = (
        TrainerConfig(
            save_folder=spec["save_folder"],
            load_path=spec.get("load_path"),
            max_duration=Duration.steps(spec["steps"]),
            device="cpu",
            metrics_collect_interval=1,
        )
        .with_callback(
            "checkpointer",
            CheckpointerCallback(save_interval=spec["save_interval"], save_async=False),
        )
        .with_callback("config_saver", ConfigSaverCallback())
    )
    module = TransformerTrainModuleConfig(
        rank_microbatch_size=spec["batch"] * seq,
        max_sequence_length=seq,
        optim=AdamWConfig(lr=spec["lr"], betas=(0.9, 0.95), weight_decay=0.1),
        # the recipe does not clip; a bound no norm reaches makes the library log the norm
        max_grad_norm=1e9,
    )
    return ExperimentConfig(
        model=model,
        dataset=dataset,
        data_loader=loader,
        trainer=trainer,
        train_module=module,
        init_seed=spec["seed"],
    )


def plan(config: ExperimentConfig, steps: list[int]) -> dict[str, list[int]]:
    """The global instance indices the loader hands out at each of these (1-indexed) steps."""
    dataset = config.dataset.build()
    loader = config.data_loader.build(dataset)
    loader.reshuffle(epoch=1)
    indices = np.asarray(loader.get_global_indices())
    per = config.data_loader.global_batch_size // config.dataset.sequence_length
    return {str(s): indices[(s - 1) * per : s * per].tolist() for s in steps}


def train(config: ExperimentConfig) -> None:
    torch.manual_seed(config.init_seed)
    model = config.model.build(init_device="cpu")
    module = config.train_module.build(model, device=torch.device("cpu"))
    dataset = config.dataset.build()
    loader = config.data_loader.build(dataset, dp_process_group=module.dp_process_group)
    trainer = config.trainer.build(module, loader)
    saver = trainer.callbacks["config_saver"]
    assert isinstance(saver, ConfigSaverCallback)
    saver.config = config.as_config_dict()
    trainer.fit()  # loads the save folder's newest checkpoint, else load_path (trainer.py:689-720)


def main() -> None:
    spec = json.loads(open(sys.argv[1]).read())
    args = sys.argv[2:]
    config = experiment(spec)
    if args[:1] == ["--plan"]:
        print(json.dumps(plan(config, [int(a) for a in args[1:]])))
        return
    config = config.merge(args)
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("LOCAL_WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(spec.get("port", 29581)))
    prepare_training_environment(seed=config.init_seed, backend="gloo")
    try:
        train(config)
    finally:
        teardown_training_environment()


if __name__ == "__main__":
    main()
