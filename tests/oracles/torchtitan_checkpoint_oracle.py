"""What torchtitan 0.3.0 itself makes of a restart's pin and of a checkpoint folder (run in
.venv-titan): prints JSON {"load_step": ..., "latest": ...}.

- `load_step`: torchtitan's `ConfigManager.parse_args` (config/manager.py:34-46: `--module M
  --config C`, then tyro with torchtitan's registry) on the pin's words, over a config whose
  `checkpoint` field is the trainer's (trainer.py:105-107: `checkpoint: BaseCheckpointManager.
  Config = field(default_factory=CheckpointManager.Config)`); `--module` names this file, whose
  `pin_config` is the config function. The full Trainer.Config imports GPU-only kernels
  (triton), so only its checkpoint section is built here.
- `latest`: `CheckpointManager._find_load_step(folder)` (components/checkpointer/dcp.py:640-684),
  the step `load_step = -1` would load, -1 when the folder holds none.

    python torchtitan_checkpoint_oracle.py FOLDER 'PIN WORDS'
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass, field
from types import SimpleNamespace

from torchtitan.components.checkpoint import CheckpointManager


@dataclass(kw_only=True, slots=True)
class PinConfig:
    hf_assets_path: str = "."  # ConfigManager._validate_config reads it
    checkpoint: CheckpointManager.Config = field(default_factory=CheckpointManager.Config)


def pin_config() -> PinConfig:
    return PinConfig()


def main(folder: str, pin: str) -> None:
    from torchtitan.config import ConfigManager

    module = "torchtitan_checkpoint_oracle"
    config = ConfigManager().parse_args(
        ["--module", module, "--config", "pin_config", *shlex.split(pin)]
    )
    latest = CheckpointManager._find_load_step(SimpleNamespace(folder=folder), folder)
    print(json.dumps({"load_step": config.checkpoint.load_step, "latest": latest}))


if __name__ == "__main__":
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    main(sys.argv[1], sys.argv[2])
