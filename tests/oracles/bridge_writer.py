"""Write a Megatron-Bridge save folder with Bridge's own code (run in .venv-bridge).

    bridge_writer.py SPEC.json

SPEC: a list of save folders, each {"save": DIR, "common": {seq_length, seed, split,
global_batch_size, micro_batch_size, train_iters, tokenizer}, "jobs": [{"blend": [[prefix, ...],
[weight, ...]], "saves": [N, ...], "overrides": ["KEY=VALUE", ...], "resume": {"step": R}}, ...]}
(all in one process: importing Bridge takes most of the time).

Each job's ConfigContainer is Bridge's `vanilla_gpt_pretrain_config` recipe (megatron-bridge
0.6.2, megatron/bridge/recipes/gpt/h100/vanilla_gpt.py: "mirrors Megatron-LM pretrain_gpt.py
defaults") with the job's data set on it as a recipe script sets it, then the job's KEY=VALUE
overrides applied through Bridge's own `process_config_with_overrides` (the Hydra override parser
run_recipe.py uses). Each save writes what `save_checkpoint`'s finalize step writes on rank 0
(megatron/bridge/training/checkpointing.py:1430-1467): `torch.save(train_state.state_dict())` to
iter_N/train_state.pt with floating_point_operations_so_far set, a copy to
latest_train_state.pt, `latest_checkpointed_iteration.txt` holding the step, and
`cfg.to_yaml(iter_N/run_config.yaml)`; file names from Bridge's checkpoint_utils. Each job's
loop counts consumed and skipped samples as train.py does (564-575, and 1564-1575 for a step in
`train.iterations_to_skip`). The weights themselves (the torch_dist shards) are not written: no
reader of forensics opens them.

It also prints, as JSON, what Bridge made of each job's overrides (train.iterations_to_skip,
checkpoint.ckpt_step, dataset.blend), so the test can hold our override strings to Bridge's own
parser.
"""

from __future__ import annotations

import json
import shutil
import sys
import warnings


def _bare_package(name: str) -> None:
    """Register package `name` with its real __path__ but without running its __init__: the
    recipes package's __init__ imports every recipe, the diffusion ones among them (diffusers),
    and none of them plays a part in the GPT recipe or in what a save writes."""
    import importlib.util
    import types

    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.submodule_search_locations is not None
    package = types.ModuleType(name)
    package.__path__ = list(spec.submodule_search_locations)
    package.__spec__ = spec
    sys.modules[name] = package


def _config(common: dict, job: dict):  # noqa: ANN202
    _bare_package("megatron.bridge.recipes")
    from megatron.bridge.recipes.gpt.h100.vanilla_gpt import (
        vanilla_gpt_pretrain_1gpu_h100_bf16_config as vanilla_gpt_pretrain_config,
    )
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    cfg = vanilla_gpt_pretrain_config()
    cfg.dataset.blend = (list(job["blend"][0]), job["blend"][1])
    cfg.dataset.split = common["split"]
    cfg.dataset.seq_length = common["seq_length"]
    cfg.dataset.random_seed = common["seed"]
    cfg.train.train_iters = common["train_iters"]
    cfg.train.global_batch_size = common["global_batch_size"]
    cfg.train.micro_batch_size = common["micro_batch_size"]
    cfg.tokenizer.tokenizer_type = "HuggingFaceTokenizer"
    cfg.tokenizer.tokenizer_model = common["tokenizer"]
    cfg.tokenizer.vocab_size = None
    cfg.checkpoint.save = common["save"]
    cfg.checkpoint.save_interval = common["save_interval"]
    cfg.checkpoint.load = common["save"]
    overrides = list(job.get("overrides", []))
    if overrides:
        cfg = process_config_with_overrides(cfg, cli_overrides=overrides)
    return cfg


def _save(cfg, step: int, consumed: int, skipped: int) -> None:  # noqa: ANN001
    import torch
    from megatron.bridge.training.state import TrainState
    from megatron.bridge.training.utils.checkpoint_utils import (
        TRACKER_PREFIX,
        ensure_directory_exists,
        get_checkpoint_name,
        get_checkpoint_run_config_filename,
        get_checkpoint_tracker_filename,
        get_checkpoint_train_state_filename,
    )

    save_dir = cfg.checkpoint.save
    checkpoint_name = get_checkpoint_name(save_dir, step)
    ensure_directory_exists(checkpoint_name, check_parent=False)
    state = TrainState(step=step, consumed_train_samples=consumed, skipped_train_samples=skipped)
    state.do_train = True
    train_state_dict = state.state_dict()
    local = get_checkpoint_train_state_filename(checkpoint_name)
    latest = get_checkpoint_train_state_filename(save_dir, prefix=TRACKER_PREFIX)
    train_state_dict["floating_point_operations_so_far"] = torch.tensor(
        float(step) * 1e9, dtype=torch.float32
    )
    torch.save(train_state_dict, local)
    shutil.copy(local, latest)
    with open(get_checkpoint_tracker_filename(save_dir), "w") as f:
        f.write(str(step))
    cfg.to_yaml(get_checkpoint_run_config_filename(checkpoint_name))


def _write_folder(spec: dict) -> list[dict]:
    common = {**spec["common"], "save": spec["save"]}
    step = consumed = skipped = 0
    parsed = []
    for job in spec["jobs"]:
        cfg = _config(common, job)
        parsed.append(
            {
                "iterations_to_skip": list(cfg.train.iterations_to_skip),
                "ckpt_step": cfg.checkpoint.ckpt_step,
                "blend": [list(cfg.dataset.blend[0]), list(cfg.dataset.blend[1])],
            }
        )
        gbs = cfg.train.global_batch_size
        if "resume" in job:  # the job loads an earlier checkpoint (its train state)
            step = job["resume"]["step"]
            consumed, skipped = step * gbs, job["resume"].get("skipped", 0)
        for target in job["saves"]:
            while step < target:  # train.py:377, one global batch per step (no ramp here)
                if (step + 1) in cfg.train.iterations_to_skip:  # train.py:1564
                    skipped += gbs  # 1575
                step += 1
                consumed += gbs  # 571 (trained) or 1574 (skipped)
            _save(cfg, step, consumed, skipped)
    return parsed


def main(spec_path: str) -> None:
    warnings.simplefilter("ignore")
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    print(json.dumps([_write_folder(folder) for folder in spec]))


if __name__ == "__main__":
    main(sys.argv[1])
