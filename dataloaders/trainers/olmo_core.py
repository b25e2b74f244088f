"""OLMo-core's `TrainerConfig.steps_to_skip`: StepSkipRange(start, stop), steps start..stop-1
(1-indexed, stop exclusive); the batch is drawn and its tokens counted, only the
forward/backward/optimizer step is skipped.

Sources read (repository, commit, file:line): allenai/OLMo-core fa6c5014c9,
src/olmo_core/train/trainer.py:1477-1498 (`global_step += 1` for every batch, then
`start <= global_step < stop` skips train_batch and optim_step; the batch was drawn and its
tokens counted), src/olmo_core/train/common.py:275-283 (start 1-indexed, stop exclusive). The
experiment scripts take dotlist overrides: src/olmo_core/internal/experiment.py:415
`config.merge(cli_context.overrides)`, each value read by yaml.safe_load
(src/olmo_core/config.py:361); TrainerConfig sits under `trainer`.
Checkpoints (ai2-olmo-core 3.0.0, olmo_core/train/checkpoint.py): the folder `step{step}` of
the save folder (:85 `CHECKPOINT_DIR`, :335-336 `checkpoint_dirname`), listed by
`find_checkpoints` (:357-383: a name matching `^step(DIGITS)$` whose folder passes
`dir_is_checkpoint`, :339-354).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from dataloaders.errors import ForensicsError
from dataloaders.trainers.base import Batches, Draw, LoopEnd, LoopStart, Range, Trainer


class OLMoCore(Trainer):
    """OLMo-core: StepSkipRange(start, stop) through the experiment script's override."""

    name = "olmo-core"
    output_format = name
    flag = "--trainer.steps_to_skip="
    semantics = (
        "OLMo-core TrainerConfig.steps_to_skip: StepSkipRange(start, stop), steps "
        "start..stop-1 (1-indexed, stop exclusive); the batch is drawn, "
        "no forward/backward/optimizer"
    )

    checkpoint_folder = "step{}"
    checkpoint_pattern = re.compile(r"step(\d+)")

    def is_checkpoint(self, path: Path) -> bool:
        # checkpoint.py:339-354 `dir_is_checkpoint`: a `.metadata` (model and maybe optimizer
        # only), else the trainer state, the model-and-optimizer metadata and the checkpoint's
        # own metadata file, all three
        if (path / ".metadata").is_file():
            return True
        needed = ("train/rank0.pt", "model_and_optim/.metadata", ".metadata.json")
        return all((path / name).is_file() for name in needed)

    def parse(self, text: str) -> list[tuple[int, int]]:
        """(start, stop) pairs from `--trainer.steps_to_skip=[{"start":A,"stop":B},...]` (or
        `steps_to_skip=` with that JSON, or the Python form `[StepSkipRange(start=A, stop=B)]`)."""
        body = re.sub(r"^(--)?(trainer\.)?steps_to_skip=", "", text.strip()).strip()
        if not body:
            return []
        if body.startswith("[{") or body == "[]":
            try:
                items = json.loads(body)
                return [(int(d["start"]), int(d["stop"])) for d in items]
            except (ValueError, KeyError, TypeError) as err:
                raise ForensicsError(
                    f"steps_to_skip: not a JSON list of start/stop ({err})"
                ) from None
        found = re.findall(r"StepSkipRange\(\s*start\s*=\s*(\d+)\s*,\s*stop\s*=\s*(\d+)\s*\)", body)
        rest = re.sub(r"StepSkipRange\([^)]*\)|[\[\],\s]", "", body)
        if rest:
            raise ForensicsError(f"steps_to_skip: cannot read {body[:60]!r}")
        return [(int(a), int(b)) for a, b in found]

    def loop(self, start: LoopStart, skip: Sequence, stop: int) -> LoopEnd:
        ranges = list(skip)
        step, consumed, draws = start.iteration, start.consumed_samples, []
        position = consumed
        while step < stop:
            batch_size = start.batch_size_at(consumed)
            step += 1  # trainer.py:1479
            skipped = any(a <= step < b for a, b in ranges)  # 1488-1492
            consumed += batch_size
            draws.append(Draw(step, position, batch_size, not skipped, consumed))
            position += batch_size
        return LoopEnd(draws, step, consumed, position)

    def spell(self, ranges: Sequence[Range], schedule: Batches, checkpoint: int) -> str:
        if not ranges:
            return ""
        # one shell word (no spaces), so $(cat restart-olmo-core.flags) passes it whole; YAML
        # reads the JSON, and TrainerConfig.from_dict makes each item a StepSkipRange
        items = [{"start": a, "stop": b + 1} for a, b in ranges]
        return self.flag + json.dumps(items, separators=(",", ":"))

    def pin(self, checkpoint: int) -> str:
        # trainer.py:684-697: fit() loads the save folder's LATEST checkpoint first and ignores
        # load_path when it finds one, so restarting in the old save folder resumes after the
        # spike. Not a flag (the new folder is the user's to name): shown beside the flags,
        # never in them.
        return (
            f"restart in a NEW save folder: --trainer.save_folder=NEW "
            f"--trainer.load_path=<old save_folder>/{self.checkpoint_name(checkpoint)} (OLMo-core "
            "resumes the save folder's latest checkpoint and ignores load_path when the folder "
            "holds one)"
        )

    def consequence(self, skipped: int) -> str:
        return "step numbers stay absolute; global_step and tokens seen still advance"
