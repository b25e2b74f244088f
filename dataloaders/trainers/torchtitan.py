"""torchtitan 0.3.0: no option to skip iterations; the restart pins `--checkpoint.load_step=R`.

Sources read (torchtitan 0.3.0, the PyPI wheel torchtitan-0.3.0-py3-none-any.whl; its files
are those of pytorch/torchtitan 1fdf90d3f9b756ef709ce262bc839f1dab679b5e, "Set version to
0.3.0rc1 (#4216)", so the lines below are that commit's too):
- torchtitan/trainer.py:1012-1076 `train()`: `self.checkpointer.load(step=config.checkpoint.
  load_step)`, then `while self.step < config.training.steps: self.step += 1;
  self.train_step(data_iterator)`; every step draws `gradient_accumulation_steps x
  num_pipeline_parallel_microbatches` local batches (871-891, a global batch) and trains on
  all of them. Nothing in the loop or its config reads a list of steps to skip (the config's
  fields: config/configs.py, components/checkpointer/base.py:222-273).
- components/checkpointer/dcp.py:476-586 `_load`: `load_step == -1` takes the highest valid
  `step-N` under `checkpoint.folder` (`_find_load_step`, 640-684: `re.search(r"step-(\\d+)",
  name)` on each entry, valid when it holds DCP's `.metadata` or `model.safetensors.index.json`);
  any other value loads `{checkpoint.folder}/step-{load_step}` and ignores the latest
  (`FileNotFoundError: --checkpoint.load_step=N not found at ...` when it is missing);
  `checkpoint.folder` is relative to `dump_folder` (dcp.py:147). `initial_load_path` is read
  only when the folder holds no checkpoint (dcp.py:509-554), so it cannot pin a rollback.
- base.py:259-261 `load_step: int = -1`, "Load the checkpoint at the specified step. If -1,
  load the latest checkpoint." On the command line: config/manager.py:34-46 parses
  `--module M --config C` then tyro's `--section.key VALUE` overrides
  (docs/checkpoint.md:14 `--checkpoint.interval 500`;
  tests/unit_tests/test_no_new_cli_options.py:42 lists `checkpoint.load_step`). The pin is
  written `--checkpoint.load_step=R`, as dcp.py:505 and 566 spell it, one shell word; torchtitan's
  own ConfigManager reads it as load_step R (tests/oracles/torchtitan_checkpoint_oracle.py).
- trainer.py:554-556 the lr scheduler is built with `training_steps=config.training.steps`, so
  lowering `--training.steps` to stop early changes the schedule: no exit flag is offered.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dataloaders.errors import ForensicsError
from dataloaders.trainers.base import Batches, Draw, LoopEnd, LoopStart, Range, Trainer

VERSION = "0.3.0"
NO_SKIP = (
    f"torchtitan {VERSION} has no option to skip iterations; restart from the rebuild (the data "
    "without the block list) with --checkpoint.load_step pinned to the rollback checkpoint"
)
# dcp.py:666 `pattern = r"step-(\d+)"`, searched in each entry's name
_STEP_DIR = re.compile(r"step-(\d+)")
# dcp.py:675-681: a step folder is a checkpoint once DCP's metadata (written last) or an HF
# safetensors index is in it
_VALID_MARKERS = (".metadata", "model.safetensors.index.json")


class Torchtitan(Trainer):
    """torchtitan: every step draws and trains one global batch; no skip list exists."""

    name = "torchtitan"
    label = f"({VERSION}, no skip option: rebuild)"
    flag = "--checkpoint.load_step"  # its only restart word (the pin); it skips nothing
    semantics = (
        f"torchtitan {VERSION} (`while self.step < training.steps: self.step += 1; "
        "train_step(...)`): no option to skip iterations; every step draws and trains its "
        "global batch"
    )
    output_format = name
    no_skip = NO_SKIP
    checkpoint_folder = "step-{}"  # dcp.py:686-690 `_create_checkpoint_id`
    checkpoint_pattern = _STEP_DIR

    def parse(self, text: str) -> list:
        """Nothing to skip for an empty text; any skip specification is refused."""
        if text.strip():
            raise ForensicsError(NO_SKIP)
        return []

    def loop(self, start: LoopStart, skip: Sequence, stop: int) -> LoopEnd:
        if skip:
            raise ForensicsError(NO_SKIP)
        step, consumed, draws = start.iteration, start.consumed_samples, []
        position = consumed
        while step < stop:  # trainer.py:1031 should_continue_training
            batch_size = start.batch_size_at(consumed)  # fixed: no batch-size ramp
            step += 1  # trainer.py:1032
            consumed += batch_size  # train_step draws the global batch and trains it
            draws.append(Draw(step, position, batch_size, True, consumed))
            position += batch_size
        return LoopEnd(draws, step, consumed, position)

    def spell(self, ranges: Sequence[Range], schedule: Batches, checkpoint: int) -> str:
        if not ranges:
            return ""
        raise ForensicsError(NO_SKIP)

    def pin(self, checkpoint: int) -> str:
        # dcp.py:555-566: an explicit load_step loads step-R under checkpoint.folder, not the
        # latest. Spelled as torchtitan's own messages spell it (dcp.py:505, 566): one word.
        return f"--checkpoint.load_step={checkpoint}"

    def data_words(self, blend: Sequence[dict[str, Any]]) -> str:
        raise ForensicsError(
            f"torchtitan {VERSION} reads no Megatron blend (--data-path); its data comes from "
            "the dataloader config: give it the rebuild's restart file"
        )

    def exit_words(self, iteration: int) -> str:
        raise ForensicsError(
            f"torchtitan {VERSION} has no option to stop after step {iteration} "
            "(lowering --training.steps also reshapes the lr schedule, trainer.py:554-556)"
        )

    def consequence(self, skipped: int) -> str:
        return NO_SKIP

    def checkpoints(self, folder: Path) -> list[int]:
        """The steps of the `step-N` checkpoints in `folder` (`checkpoint.folder` under the
        dump folder), the ones torchtitan itself counts as valid, sorted ([] when none)."""
        found: set[int] = set()
        if not folder.is_dir():
            return []
        for entry in folder.iterdir():
            match = _STEP_DIR.search(entry.name)
            if match and any((entry / m).is_file() for m in _VALID_MARKERS):
                found.add(int(match.group(1)))
        return sorted(found)
