"""Train a tiny model with ai2-olmo-core's own Trainer on CPU, as an OLMo-core script does (runs
in .venv-olmo, not ours), and record what each step trained.

Usage: python olmo_core_trainer.py JOBS.json OUT.json
  JOBS: {"runs": [spec, ...], "vocab_sizes": [...], "globs": [pattern, ...]}

The script follows the library's example (allenai/OLMo-core src/examples/llm/train.py): the
dataset from NumpyFSLDatasetConfig (paths or mix, globs, source permutation, dtype left to the
library when the spec has none), the loader from NumpyDataLoaderConfig, a TrainerConfig with the
CheckpointerCallback (save_interval) and the ConfigSaverCallback given the experiment's
`as_config_dict()`, then `trainer.fit()`. The save folder it leaves is the library's own:
step{N}/train/rank0.pt, config.json, data_paths.txt. A callback records `batch["index"]` of every
step (pre_step); with "stop_after": k the job stops after k steps and a second Trainer is built
over the same save folder, resuming from its newest checkpoint (`maybe_load_checkpoint`) as a
restarted job does, on "restart_paths" when given (with `ignore_fingerprint_mismatch`).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from olmo_core.config import Config
from olmo_core.data import NumpyDataLoaderConfig, NumpyFSLDatasetConfig, TokenizerConfig
from olmo_core.data.numpy_dataset import InstanceFilterConfig
from olmo_core.nn.transformer import TransformerConfig
from olmo_core.optim import AdamWConfig
from olmo_core.train import Duration, TrainerConfig
from olmo_core.train.callbacks import (
    Callback,
    CheckpointerCallback,
    ConfigSaverCallback,
    StabilityMonitorCallback,
)
from olmo_core.train.train_module import TransformerTrainModuleConfig


@dataclass
class ExperimentConfig(Config):
    """The experiment config of the library's scripts (src/examples/llm/train.py)."""

    dataset: NumpyFSLDatasetConfig
    data_loader: NumpyDataLoaderConfig
    trainer: TrainerConfig
    train_module: TransformerTrainModuleConfig
    run_name: str = "tiny"


@dataclass
class RecordIndices(Callback):
    """Every step's global instance indices (the trainer's batch, before the model)."""

    steps: Any = None

    def pre_step(self, batch: dict[str, Any]) -> None:
        self.steps[str(self.step)] = {
            "index": batch["index"].tolist(),
            "input_ids": batch["input_ids"].tolist(),
        }


def experiment(spec: dict[str, Any]) -> ExperimentConfig:
    tok = spec["tokenizer"]
    dataset = NumpyFSLDatasetConfig(
        paths=spec.get("paths"),
        mix=spec.get("mix"),
        mix_base_dir=spec.get("mix_base_dir"),
        expand_glob=spec.get("expand_glob", False),
        source_permutation_seed=spec.get("source_permutation_seed"),
        dtype=spec.get("dtype"),
        sequence_length=spec["sequence_length"],
        tokenizer=TokenizerConfig(**tok),
        work_dir=spec["work_dir"],
        instance_filter_config=InstanceFilterConfig(**spec["instance_filter"])
        if spec.get("instance_filter")
        else None,
    )
    loader = NumpyDataLoaderConfig(
        global_batch_size=spec["global_batch_size"],
        seed=spec["seed"],
        num_workers=0,
        ignore_fingerprint_mismatch=spec.get("ignore_fingerprint_mismatch", False),
    )
    trainer = (
        TrainerConfig(
            save_folder=spec["save_folder"],
            max_duration=Duration.steps(spec["max_steps"]),
            device="cpu",
            metrics_collect_interval=2,
        )
        .with_callback(
            "checkpointer",
            CheckpointerCallback(save_interval=spec["save_interval"], save_async=False),
        )
        .with_callback("config_saver", ConfigSaverCallback())
        # a callback with state of its own: the trainer state's "callbacks" entry is not empty
        .with_callback("stability", StabilityMonitorCallback(window_size=2, rolling_window=4))
    )
    seq = spec["sequence_length"]
    module = TransformerTrainModuleConfig(
        rank_microbatch_size=spec["global_batch_size"],
        max_sequence_length=seq,
        optim=AdamWConfig(lr=1e-3),
    )
    return ExperimentConfig(
        dataset=dataset, data_loader=loader, trainer=trainer, train_module=module
    )


def train(spec: dict[str, Any], steps: dict[str, Any], max_steps: int) -> None:
    config = experiment({**spec, "max_steps": max_steps})
    tok = spec["tokenizer"]
    padded = 128 * ((tok["vocab_size"] + 127) // 128)
    model = TransformerConfig.olmo2_1M(vocab_size=padded).build(init_device="cpu")
    module = config.train_module.build(model, device=torch.device("cpu"))
    dataset = config.dataset.build()
    loader = config.data_loader.build(dataset, dp_process_group=module.dp_process_group)
    trainer = config.trainer.build(module, loader)
    trainer.callbacks["record"] = RecordIndices(steps=steps)
    trainer.callbacks["record"].trainer = trainer
    saver = trainer.callbacks["config_saver"]
    assert isinstance(saver, ConfigSaverCallback)
    saver.config = config.as_config_dict()
    trainer.maybe_load_checkpoint()
    trainer.fit()


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """One training job (and its restart when "stop_after" is given): the steps it trained."""
    steps: dict[str, Any] = {}
    first = spec.get("stop_after", spec["max_steps"])
    train(spec, steps, first)
    if first < spec["max_steps"]:  # the job restarts and resumes from its newest checkpoint
        again = spec
        if spec.get("restart_paths"):  # on other data, as the library allows it
            again = {**spec, "paths": spec["restart_paths"], "ignore_fingerprint_mismatch": True}
        train(again, steps, spec["max_steps"])
    out: dict[str, Any] = {"steps": steps}
    if spec.get("mix"):
        from olmo_core.data import DataMix

        paths, labels = DataMix(spec["mix"]).build(
            spec["mix_base_dir"], spec["tokenizer"]["identifier"]
        )
        out["mix"] = {"paths": paths, "labels": labels}
    return out


def dtypes(vocab_sizes: list[int]) -> dict[str, str | None]:
    """NumpyDatasetConfig.get_dtype with dtype unset, per vocabulary size (None: it refuses)."""
    out: dict[str, str | None] = {}
    for vocab in vocab_sizes:
        config = NumpyFSLDatasetConfig(
            paths=["unused.npy"],
            sequence_length=8,
            tokenizer=TokenizerConfig(vocab_size=vocab, eos_token_id=0, pad_token_id=1),
        )
        try:
            out[str(vocab)] = config.get_dtype().__name__
        except ValueError:
            out[str(vocab)] = None
    return out


def defaults() -> dict[str, Any]:
    """The defaults of the library's dataset, tokenizer, filter and loader configs ("<required>"
    for a field without one) and wrap_numpy_dataset's shuffle default."""
    import dataclasses
    import inspect

    from olmo_core.data import NumpyDataLoaderBase

    def of(cls: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = "<factory>"
            else:
                out[f.name] = "<required>"
        return out

    wrap = inspect.signature(NumpyDataLoaderBase.wrap_numpy_dataset)
    return {
        "dataset": of(NumpyFSLDatasetConfig),
        "tokenizer": of(TokenizerConfig),
        "filter": of(InstanceFilterConfig),
        "loader": of(NumpyDataLoaderConfig),
        "shuffle": wrap.parameters["shuffle"].default,
    }


def main() -> None:
    from olmo_core.io import deterministic_glob_directory

    jobs = json.loads(open(sys.argv[1]).read())
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(jobs.get("port", 29571)))
    dist.init_process_group("gloo", rank=0, world_size=1)
    result = {
        "runs": [run(spec) for spec in jobs.get("runs", [])],
        "dtypes": dtypes(jobs.get("vocab_sizes", [])),
        "globs": {p: deterministic_glob_directory(p) for p in jobs.get("globs", [])},
        "defaults": defaults(),
    }
    dist.destroy_process_group()
    with open(sys.argv[2], "w") as handle:
        json.dump(result, handle)


if __name__ == "__main__":
    main()
