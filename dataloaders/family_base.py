"""What a loader family is to the rest of the tool: one `Family` object per family, each in its
own package (`dataloaders/<family>/family.py`), listed once in `dataloaders.families`.

The shape is megatron-core's: its `BlendedMegatronDatasetBuilder`
(megatron/core/datasets/blended_megatron_dataset_builder.py) knows no dataset class by name, it
calls the hooks the abstract `MegatronDataset` declares (megatron_dataset.py:
`numel_low_level_dataset`, `build_low_level_dataset`) and each subclass answers for itself; and
OLMo-core's, where a config builds its object (ai2-olmo-core 3.0.0
olmo_core/data/numpy_dataset.py:2677, `NumpyDatasetConfig.build()`). So a family answers every
question that depends on the family, and the code that asks (replay, the skip plan's action,
the rebuild, the spike window) is one builder for all of them:

- its config model (`config_model`, the `data:` section; the discriminator is `format`) and how
  it opens its `Replayer` (`open`, importing its package only when used);
- its data stages (`stage_starts`), and whether a restart takes one launch per stage;
- its file units (`file_units`, `file_refusal`): the files a file-based run reads and the
  documents in each, which decide whether a block list can be dropped as whole files;
- its rebuild: the rebuilt `data:` mapping, the restart's files (`restart_files`, described by
  `restart`), the folders it stages and the note that says how the trainer continues;
- the run read back from its trainers' save folders (`recognises_save`, `saved_run`):
  `--from-checkpoint DIR` asks every family whether the folder is its own and lets that one
  read it, so a family's checkpoint layout is known in its package alone; and the run of its
  trainers' launch arguments (`launch_option`, `launch_run`). Each builds the run's mapping and
  hands it to the run config's validation it is given (`ConfigFromDict`): the whole run config
  sits above the families, its `data:` union being built from their registry.

These are data-level answers (a config, a replayer, a list of files in, plain data out), so
they live here with the family rather than in a forensics-side table keyed by the family's
name: adding a family is its package and one line in the registry, and `forensics/` asks the
family instead of comparing names. `dataloaders/` imports nothing from `forensics/`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from dataloaders.config_base import DataSection
from dataloaders.storage.urls import is_remote

if TYPE_CHECKING:
    from dataloaders.base import Replayer


class ConfigFromDict(Protocol):
    """The run config's reading of a mapping (`dataloaders.run_config.config_from_dict`:
    relative paths resolved against `base_dir`, the whole config validated, a problem one
    ConfigError line), handed by the caller to the hooks that build a run from a trainer's
    files (`Family.saved_run`, `Family.launch_run`): the run config imports the family
    registry, so a family cannot import it."""

    def __call__(self, raw: dict[str, Any], *, base_dir: Path, source: Path | None) -> Any: ...


@dataclass(frozen=True)
class FileUnit:
    """One data file of the run and its documents.

    dataset  the replay table's `dataset` (the HF run's name, the OLMo-core source, the stream)
    key      the file's value of the family's file facet (`file` / `shard`)
    path     the file on disk (absolute)
    doc_ids  1-D int64, the replay's doc_id of every document the file holds, in file order
    """

    dataset: str
    key: str
    path: Path
    doc_ids: np.ndarray


def listed_unit(replayer: Any, dataset: str, facet: str, key: str, path: Path) -> FileUnit:
    """The FileUnit of one file: its documents are the replayer's `documents_by_facet` list
    for the file's facet value (the same lists the spike's blame uses)."""
    docs = replayer.documents_by_facet(facet, key)
    ids = docs.filter(docs["dataset"] == dataset)["doc_id"].to_numpy().astype(np.int64)

    where = path if is_remote(path) else Path(path).resolve()  # a URL stays as it is
    return FileUnit(dataset, key, where, ids)


@dataclass(frozen=True)
class RestartFile:
    """What a restart is given from the rebuild's folder: the file's name, what it holds (for
    the report's words), and whether it is command-line flags (pasted as $(cat FILE))."""

    name: str
    holds: str
    is_flags: bool


@dataclass(frozen=True)
class KeptFiles:
    """A file-based run's files after a block list is dropped as whole files.

    kept     dataset -> its remaining files, in the run's order (a dataset with none is gone)
    emptied  datasets (sources, streams) that lose every file: dropped from the run
    folders  dataset -> its new folder in the rebuild's output (families whose datasets are
             folders, e.g. a MosaicML stream that loses shards); empty for the others
    """

    kept: dict[str, list[FileUnit]]
    emptied: list[str]
    folders: dict[str, Path]


class Family(ABC):
    """A loader family: the config model, the replayer, and the family's answers to the
    questions the skip plan and the rebuild ask (module docstring).

    A family rebuilds in one of two ways: `rebuilds_documents` (a new copy of each dataset
    without the blocked documents: Megatron .bin/.idx, `forensics.rebuild.plan`), or, with a
    `file_facet`, by dropping whole files from the run's file list (the file-based families).
    """

    name: ClassVar[str]  # the `data.format` value
    config_model: ClassVar[type[DataSection]]  # the pydantic model of the `data:` section
    restart: ClassVar[RestartFile]  # what the restart takes from the rebuild's folder
    rebuilds_documents: ClassVar[bool] = False
    file_facet: ClassVar[str | None] = None  # the facet that names a data file ("file", "shard")
    launch_per_stage: ClassVar[bool] = False  # the trainer reads one data stage per launch
    pins_rollback: ClassVar[bool] = False  # the restart loads the rollback by an instruction
    # How the trainer continues on the rebuilt files, a sentence with {resume}, {skipped} and
    # {rollback} to fill (file-based families).
    restart_note: ClassVar[str] = ""
    # What this family's trainers leave in a save folder that `recognises_save` looks for, for
    # the message when no family recognises a folder ("" for a family that reads none).
    save_files: ClassVar[str] = ""
    # The CLI option that hands a training job's launch arguments in place of a config
    # (`--megatron-args`), for the family whose trainers take their data on the launch line;
    # None for the others. `launch_run` reads them.
    launch_option: ClassVar[str | None] = None

    @abstractmethod
    def open(self, config: Any) -> Replayer:
        """The Replayer of a run config of this family (its package imported only now)."""

    def stage_starts(self, data: Any) -> list[int]:
        """First iteration of each data stage of the `data:` section ([1]: one stage)."""
        return [1]

    def flag_paths(self, data: Any) -> list[str]:
        """Data paths the restart's flags spell out (a quoted one needs `eval`, not $(cat))."""
        return []

    # -- the run read back from a save folder (--from-checkpoint) -----------------------------

    def recognises_save(self, folder: Path) -> bool:
        """Whether the existing directory `folder` is a save folder this family's trainers
        write, or one checkpoint of one. Told from names alone, nothing unpickled: a watcher
        asks every family this of a folder the trainer is still writing, and a folder two
        families claim is refused. A family whose trainers save no run description keeps
        False."""
        return False

    def saved_run(
        self,
        folder: Path,
        step: int | None,
        say: Callable[[str], None],
        config_from_dict: ConfigFromDict,
    ) -> Any:
        """The run config the trainer's files under `folder` (one `recognises_save` accepted)
        describe, so a spike can be analysed with no config written by hand. `step` picks
        the checkpoint to read (the first saved at or after it, by the job that trained the
        step; None: the newest); `say` gets one line per thing read, for the user to check;
        `config_from_dict` makes the run config of the mapping read. What cannot be read
        exactly is a one-line ForensicsError naming the file."""
        raise ValueError(f"{self.name}: reads no save folder")

    def launch_run(self, text: str, config_from_dict: ConfigFromDict) -> Any:
        """The run config of the training job's launch arguments `text` (as pasted, or
        `@FILE`), for the family that has a `launch_option`; `config_from_dict` makes the run
        config of the mapping read."""
        raise ValueError(f"{self.name}: reads no launch arguments")

    # -- file-based families ------------------------------------------------------------------

    def file_units(self, config: Any, replayer: Any) -> list[FileUnit]:
        """Every data file of the run, in the run's order, with its documents."""
        raise ValueError(f"{self.name}: not a file-based data family")

    def file_refusal(self, config: Any, replayer: Any) -> str | None:
        """Why this run's block list cannot be dropped as whole files whatever it holds (a
        clause; None when it may be)."""
        return None

    def rebuilt_folders(self, touched: set[str], out: Path) -> dict[str, Path]:
        """dataset -> its new folder in `out`, for the datasets that lose some (not all) of
        their files; {} for a family whose file list lives in the config alone."""
        return {}

    def rebuilt_data(self, config: Any, files: KeptFiles) -> dict[str, Any]:
        """The `data` mapping of the rebuilt config: the original's, without its restarts (the
        rebuilt config describes the new data from iteration 1) and the dropped files."""
        raise ValueError(f"{self.name}: not a file-based data family")

    def restart_files(self, config: Any, files: KeptFiles) -> dict[str, str]:
        """The restart's new data lines: a file name in the rebuild's folder -> its content
        (ends with a newline)."""
        raise ValueError(f"{self.name}: not a file-based data family")

    def stage_folders(self, config: Any, files: KeptFiles, staging: Path) -> None:
        """Write the `rebuilt_folders` into `staging` (nothing for most families)."""
        return None


def data_without_resumes(config: Any) -> dict[str, Any]:
    """The `data:` section as a mapping, without its restarts (a rebuilt config's start)."""
    data = config.data.model_dump(mode="json", exclude_none=True)
    data.pop("resumes", None)
    return data
