"""The trainers whose skip flags forensics writes and reads: one module each, listed once here.

Every question about a trainer (its flag, parser, loop, spelling, checkpoint pin, checkpoint
folders, consequence, tracker file) is a method of its `Trainer` (`dataloaders.trainers.base`).
A name is looked up here once, where it enters: the CLI's --trainer (its parser), the config's
training.trainer (validated, then `TrainingSpec.registered_trainer`), a skip plan read back
(`forensics.skip.flags.flag_trainer`), the replay of applied skips; the Trainer then goes down
as an object. Adding a trainer is one module and one line in `_ALL`.
"""

from __future__ import annotations

from collections.abc import Sequence

from dataloaders.errors import ForensicsError
from dataloaders.trainers.base import Draw, LoopEnd, LoopStart, Trainer
from dataloaders.trainers.megatron_bridge import MegatronBridge
from dataloaders.trainers.megatron_deepspeed import MegatronDeepSpeed
from dataloaders.trainers.megatron_deepspeed_argonne import MegatronDeepSpeedArgonne
from dataloaders.trainers.megatron_lm import MegatronLM, MegatronLMPre017
from dataloaders.trainers.olmo_core import OLMoCore
from dataloaders.trainers.torchtitan import Torchtitan

_ALL: tuple[Trainer, ...] = (
    MegatronLM(),
    MegatronLMPre017(),
    MegatronDeepSpeed(),
    MegatronDeepSpeedArgonne(),
    OLMoCore(),
    MegatronBridge(),
    Torchtitan(),
)
REGISTRY: dict[str, Trainer] = {t.name: t for t in _ALL}
TRAINERS: tuple[str, ...] = tuple(REGISTRY)  # in the order every listing shows them
DEFAULT_TRAINER = TRAINERS[0]

# The names, for code and tests that pick one trainer on purpose.
MEGATRON_LM = MegatronLM.name
MEGATRON_LM_PRE_017 = MegatronLMPre017.name
MEGATRON_DEEPSPEED = MegatronDeepSpeed.name
MEGATRON_DEEPSPEED_ARGONNE = MegatronDeepSpeedArgonne.name
OLMO_CORE = OLMoCore.name
MEGATRON_BRIDGE = MegatronBridge.name
TORCHTITAN = Torchtitan.name
# The log and checkpoint formats the trainers write, for the readers named after them.
MEGATRON_OUTPUT = MegatronLM.output_format
OLMO_CORE_OUTPUT = OLMoCore.output_format
MEGATRON_BRIDGE_OUTPUT = MegatronBridge.output_format
TORCHTITAN_OUTPUT = Torchtitan.output_format


def unknown_trainer(name: str) -> str:
    """The one-line message for a trainer we do not know."""
    return f"unknown trainer {name!r}; known: {', '.join(TRAINERS)}"


def check_trainer(name: str) -> str:
    """`name` if it is a trainer we know; a one-line error listing them otherwise."""
    if name not in REGISTRY:
        raise ForensicsError(unknown_trainer(name))
    return name


def get_trainer(name: str) -> Trainer:
    """The trainer called `name` (a one-line error listing them when there is none)."""
    return REGISTRY[check_trainer(name)]


def writer_of(output_format: str) -> Trainer | None:
    """The first trainer that writes logs and checkpoints in `output_format` (forks share one:
    they name their checkpoints alike), or None when no trainer writes it."""
    return next((t for t in _ALL if t.output_format == output_format), None)


def trainer_help() -> str:
    """--trainer's help: every trainer, with what tells the look-alikes apart."""
    names = ", ".join(t.help_entry() for t in _ALL)
    return (
        f"The training loop that reads the skip flags: {names}. "
        f"Default: the config's training.trainer ({DEFAULT_TRAINER})."
    )


def parse_skip_flag(trainer: str, text: str) -> list:
    """The skip specification `trainer`'s argument parser makes of `text` (the flag as pasted)."""
    return get_trainer(trainer).parse(text)


def run_loop(trainer: str, start: LoopStart, skip: Sequence, until: int | None = None) -> LoopEnd:
    """Run `trainer`'s loop from `start` with the parsed skip specification `skip` until its
    iteration counter reaches `until` (default: train_iters)."""
    return get_trainer(trainer).run(start, skip, until)


__all__ = [
    "DEFAULT_TRAINER",
    "MEGATRON_BRIDGE",
    "MEGATRON_BRIDGE_OUTPUT",
    "MEGATRON_DEEPSPEED",
    "MEGATRON_DEEPSPEED_ARGONNE",
    "MEGATRON_LM",
    "MEGATRON_LM_PRE_017",
    "OLMO_CORE",
    "OLMO_CORE_OUTPUT",
    "MEGATRON_OUTPUT",
    "REGISTRY",
    "TORCHTITAN",
    "TORCHTITAN_OUTPUT",
    "TRAINERS",
    "Draw",
    "LoopEnd",
    "LoopStart",
    "Trainer",
    "check_trainer",
    "get_trainer",
    "parse_skip_flag",
    "run_loop",
    "trainer_help",
    "writer_of",
]
