"""The training-log formats forensics reads: one module each, listed once here.

Every question whose answer depends on the format (how to recognise it, how to read a whole
log, how to follow it as it grows) is a method or attribute of its `LogFormat`
(`forensics.triage.formats.base`). `forensics triage` (`readers.read_log`), `forensics watch`
(`watch.parse`) and `--format`'s help look the format up here. Adding a format is one module
and its place in `_ALL` (the order `--format` lists) and in `_DETECTION` (the order `auto` tries).
"""

from __future__ import annotations

from pathlib import Path

from dataloaders.regular_files import open_regular
from forensics.errors import ForensicsError
from forensics.triage.formats.base import Head, LineState, LogFormat
from forensics.triage.formats.csv_log import CsvLog, WandbCsvLog
from forensics.triage.formats.jsonl import HFTrainerStateLog, JsonlLog
from forensics.triage.formats.megatron import MegatronLog
from forensics.triage.formats.megatron_bridge import MegatronBridgeLog
from forensics.triage.formats.olmo_core import OlmoCoreLog
from forensics.triage.formats.tensorboard_events import TensorBoardLog
from forensics.triage.formats.torchtitan import TorchtitanLog

_MEGATRON, _OLMO_CORE, _TENSORBOARD = MegatronLog(), OlmoCoreLog(), TensorBoardLog()
_MEGATRON_BRIDGE, _TORCHTITAN = MegatronBridgeLog(), TorchtitanLog()
_WANDB_CSV, _JSONL, _CSV, _HF_STATE = WandbCsvLog(), JsonlLog(), CsvLog(), HFTrainerStateLog()

_ALL: tuple[LogFormat, ...] = (
    _MEGATRON,
    _MEGATRON_BRIDGE,
    _OLMO_CORE,
    _TORCHTITAN,
    _TENSORBOARD,
    _WANDB_CSV,
    _JSONL,
    _CSV,
    _HF_STATE,
)
# What `auto` tries, first by the file name, then by the first bytes: a binary event file before
# any text format, the specific text formats before the catch-alls (a JSON object, any comma).
# A Megatron-Bridge log is read as `megatron` (the same line layout; --format names it).
_DETECTION: tuple[LogFormat, ...] = (
    _TENSORBOARD,
    _HF_STATE,
    _MEGATRON,
    _OLMO_CORE,
    _TORCHTITAN,
    _JSONL,
    _WANDB_CSV,
    _CSV,
)
REGISTRY: dict[str, LogFormat] = {f.name: f for f in _ALL}
AUTO = "auto"
FORMATS: tuple[str, ...] = (AUTO, *REGISTRY)  # every --format value of `forensics triage`
HEAD_BYTES = 4 << 20  # how much of a file detection reads


def get_format(name: str) -> LogFormat:
    """The format called `name` (a one-line error listing them when there is none)."""
    if name not in REGISTRY:
        raise ForensicsError(f"--format {name}: unknown; choose one of {', '.join(FORMATS)}")
    return REGISTRY[name]


def detect_format(path: Path) -> str:
    """Guess the format from the name, then from the first few MB of content."""
    if path.is_dir():
        for fmt in _DETECTION:
            if fmt.reads_directory and fmt.holds_directory(path):
                return fmt.name
        raise ForensicsError(f"{path}: directory without TensorBoard event files (*tfevents*)")
    for fmt in _DETECTION:
        if fmt.named(path.name.lower()):
            return fmt.name

    with open_regular(path) as fh:
        head = Head(path, fh.read(HEAD_BYTES))
    for fmt in _DETECTION:
        if fmt.recognises(head):
            return fmt.name
    raise ForensicsError(
        f"{path}: cannot tell the log format (no Megatron 'iteration N/M' lines, no CSV/JSON "
        "header); pass --format"
    )


def directory_formats() -> str:
    """The formats that read a directory, for the message refusing one."""
    return ", ".join(f.name for f in _ALL if f.reads_directory)


def triage_help() -> str:
    """`forensics triage --format`'s help: every value."""
    return "|".join(FORMATS)


def watch_help() -> str:
    """`forensics watch --format`'s help: the formats followed on their own, line formats
    first, then event formats (a format watched as another one is not listed)."""
    own = [f for f in _ALL if f.grows and f.watched_as() is f]
    return "|".join([AUTO, *(f.name for f in sorted(own, key=LogFormat.help_order))])


__all__ = [
    "AUTO",
    "FORMATS",
    "REGISTRY",
    "Head",
    "LineState",
    "LogFormat",
    "detect_format",
    "directory_formats",
    "get_format",
    "triage_help",
    "watch_help",
]
