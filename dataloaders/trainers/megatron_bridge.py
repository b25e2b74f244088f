"""NVIDIA Megatron-Bridge's `train.iterations_to_skip`, set as a Hydra-style override.

Sources read (megatron-bridge 0.6.2, the PyPI wheel, version string 0.6.2+09e2aea; the same lines
at NVIDIA-NeMo/Megatron-Bridge 6124fbe38a68eea9c4f4be3aa5e084bd5d461d98, branch r0.6.0, 0.6.1):
- megatron/bridge/training/train.py:377 `while global_state.train_state.step <
  train_config.train_iters:`, 404/423 `update_num_microbatches(consumed_train_samples, ...)`,
  426 `if _should_skip_and_handle_iteration(...): continue`; 1564 `if
  (global_state.train_state.step + 1) not in cfg.train.iterations_to_skip: return False`, then
  `_dummy_train_step` draws `get_num_microbatches()` micro-batches (1599-1610), `step += 1`,
  `consumed_train_samples += batch_size` and `skipped_train_samples += batch_size` (1571-1575).
  A trained step: `step += 1` (564), `consumed_train_samples += batch_size` (571).
- megatron-core 0.19.2 megatron/training/config/training_config.py:107 `iterations_to_skip:
  list[int] = field(default_factory=list)` (Bridge's TrainingConfig, config.py:442, under
  `train`); :471 `ckpt_step: int | None = None` (CheckpointConfig, under `checkpoint`).
- Overrides: scripts/training/run_recipe.py:21-28 (r0.6.0) takes trailing `KEY=VALUE`
  ConfigContainer overrides, "the trailing KEY=VALUE override takes precedence"; they go
  through Hydra's override parser (megatron/bridge/training/utils/omegaconf_utils.py:163-182,
  `parse_hydra_overrides`), so a list is `[a,b,...]`.
- A rebuilt restart: `dataset.blend` is GPTDatasetConfig's (prefixes, weights) pair
  (megatron-core blended_megatron_dataset_config.py, `blend`), set as a Hydra list of two lists;
  `train.exit_interval=N` stops after step N, saving first (train.py:1483-1498, as Megatron-LM).
- The pin: checkpointing.py:3336-3346 `ckpt_step` loads `iter_{ckpt_step:07d}` under
  `checkpoint.load` instead of the tracker's latest; config.py:617-623 refuses `ckpt_step`
  without `checkpoint.load`.
- Checkpoints: `iter_{N:07d}` under `checkpoint.save` (training/utils/checkpoint_utils.py:91-110,
  as Megatron-LM). Rank 0 writes `iter_N/train_state.pt`, the trackers at the top
  (`latest_train_state.pt`, `latest_checkpointed_iteration.txt`) and `iter_N/run_config.yaml`
  in the save's finalize step, after the weights (checkpointing.py:1430-1496; with
  `async_save`, when the async request finalizes), so a folder without train_state.pt is a
  save that has not finished.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dataloaders.errors import ForensicsError
from dataloaders.trainers.base import Batches, Range, iterations_of
from dataloaders.trainers.megatron_lm import MegatronLM

_OVERRIDE = re.compile(r"^\+{0,2}train\.iterations_to_skip=(.*)$", re.DOTALL)


class MegatronBridge(MegatronLM):
    """Megatron-Bridge: value k skips the batch logged as iteration k (its loop is Megatron-LM's
    >= 0.17 loop: the skipped step draws its global batch and advances both counters)."""

    name = "megatron-bridge"
    label = "(NeMo Megatron-Bridge)"
    flag = "train.iterations_to_skip="
    semantics = (
        "NVIDIA Megatron-Bridge, the recipe's KEY=VALUE override of TrainingConfig."
        "iterations_to_skip (`(train_state.step + 1) not in cfg.train.iterations_to_skip`): "
        "value k skips the batch logged as iteration k; it is drawn and counted in consumed "
        "and skipped samples"
    )
    reads_tracker = False
    output_format = name
    offset = 0

    def parse(self, text: str) -> list[int]:
        """The list Hydra's override parser makes of `train.iterations_to_skip=[a,b,...]`
        (one shell word; a leading `+`/`++` as Hydra allows)."""
        text = text.strip()
        if not text:
            return []
        match = _OVERRIDE.match(text)
        if match is None:
            raise ForensicsError(
                f"expected the override train.iterations_to_skip=[...], got {text[:60]!r}"
            )
        body = re.sub(r"\s+", "", match.group(1))
        if not re.fullmatch(r"\[(\d+(,\d+)*)?\]", body):
            raise ForensicsError(
                f"train.iterations_to_skip: not a list of non-negative integers: {body[:60]!r}"
            )
        return [int(v) for v in body[1:-1].split(",") if v]

    def is_checkpoint(self, path: Path) -> bool:
        # written in the save's finalize step, beside the trackers (see the module docstring)
        return (path / "train_state.pt").is_file()

    def tracker_values(self, ranges: Sequence[Range]) -> None:
        return None  # Bridge reads no file of skips

    def spell(self, ranges: Sequence[Range], schedule: Batches, checkpoint: int) -> str:
        if not ranges:
            return ""
        # one shell word, so $(cat restart-megatron-bridge.flags) passes it whole
        return self.flag + "[" + ",".join(str(v) for v in iterations_of(ranges)) + "]"

    def pin(self, checkpoint: int) -> str:
        # an override, first in the restart file; checkpoint.load must already name the save
        # folder (Bridge refuses ckpt_step without it)
        return f"checkpoint.ckpt_step={checkpoint}"

    def data_words(self, blend: Sequence[dict[str, Any]]) -> str:
        # one shell word: Hydra reads the double-quoted prefixes, the shell the single quotes
        prefixes = ",".join(json.dumps(str(spec.get("remote") or spec["prefix"])) for spec in blend)
        weights = ",".join(f"{float(spec['weight']):g}" for spec in blend)
        return shlex.quote(f"dataset.blend=[[{prefixes}],[{weights}]]")

    def exit_words(self, iteration: int) -> str:
        return f"train.exit_interval={iteration}"

    def pin_leads_flags(self, pin: str) -> bool:
        return pin.startswith("checkpoint.ckpt_step=")
