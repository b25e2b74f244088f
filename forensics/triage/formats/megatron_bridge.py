"""NVIDIA Megatron-Bridge stdout: Megatron's `iteration N/M | key: value | ...` line, printed by
Bridge's own `training_log` (megatron-bridge 0.6.2,
megatron/bridge/training/utils/train_utils.py:1173-1225, `print_rank_last(log_string)`, a plain
`print` on the last rank, megatron/bridge/utils/common_utils.py:124-134):

    log_string = f" [{datetime.now().strftime('%Y-%m-%d %H:%M:%S')}]"
    log_string += " iteration {:8d}/{:8d} |".format(iteration, train_config.train_iters)
    log_string += " consumed samples: {:12d} |".format(...consumed_train_samples)
    if global_state.train_state.skipped_train_samples > 0:
        log_string += " skipped samples: {:12d} |".format(...skipped_train_samples)
    log_string += " elapsed time per iteration (ms): {:.1f} |".format(...)
    ... " learning rate: {:.6E} |", " global batch size: {:5d} |", " {loss}: {:.6E} |" per loss,
    " loss scale: {:.1f} |", " grad norm: {:.3f} |", ... " number of nan iterations: {:3d} |"

The layout is Megatron-LM's (the fields are split generically, so `skipped samples`, which a
run with `train.iterations_to_skip` adds once a step was skipped, is read like any other field),
so `auto` reads a Bridge log as `megatron`; this name is what `--format` accepts for it.
"""

from __future__ import annotations

from typing import ClassVar

from dataloaders.trainers import MEGATRON_BRIDGE_OUTPUT
from forensics.triage.formats.base import Head
from forensics.triage.formats.megatron import MegatronLog


class MegatronBridgeLog(MegatronLog):
    """The training loop's stdout of Megatron-Bridge (Megatron's line layout)."""

    name: ClassVar[str] = MEGATRON_BRIDGE_OUTPUT  # the trainer's own name for what it writes

    def recognises(self, head: Head) -> bool:
        return False  # `auto` reads these lines as the `megatron` format, field for field
