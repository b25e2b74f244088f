"""Every pickle forensics reads, read without running anything the file names beyond an allow-list.

A checkpoint folder is often written by another job or another team, and a pickle can name any
importable callable and have the unpickler call it (`__reduce__`). So no file is ever unpickled
with the plain `pickle` or `torch.load(weights_only=False)`; each format has its allow-list of
pickled names, the minimum its writer puts there (cited below), and a name outside it is refused,
in one line naming the file and the global, before anything is built:

- `torch.save` files (`load_torch_save`, `check_torch_save`): the archive's `data.pkl` is first
  disassembled without being run and every GLOBAL beyond torch's own defaults is compared with
  the list (torch 2.13 `torch/serialization.py` `get_unsafe_globals_in_checkpoint` reads it the
  same way, but subtracts whatever the process registered with `add_safe_globals`, and
  megatron-core registers its classes at import: megatron/core/__init__.py:49-52); only then is
  it read with `torch.load(weights_only=True)`, torch's own restricted unpickler, with exactly
  the list allowed.
- torch.distributed.checkpoint `.metadata` (`read_dcp_metadata`): written with a plain
  `pickle.dump` (torch 2.13 torch/distributed/checkpoint/filesystem.py:774, FileSystemWriter;
  megatron-core 0.16.1 dist_checkpointing/strategies/filesystem_async.py:496; ai2-olmo-core
  3.0.0 olmo_core/distributed/checkpoint/filesystem.py:309) and read by torch with a plain
  `pickle.load` (filesystem.py:930), so it is read here by an unpickler whose `find_class`
  answers only the names in `DCP_METADATA` (the C unpickler asks it for every GLOBAL,
  STACK_GLOBAL, INST, OBJ and EXT opcode; persistent ids are refused by default). The tensors
  are then read by torch's own reader (filesystem.py:899, `torch.load(weights_only=True)`), and
  `dcp_tensors` never asks for a non-tensor entry, whose loader would be
  `torch.load(weights_only=False)` (default_planner.py:382-392).

- a non-tensor entry of a distributed checkpoint (`dcp_object`): DCP writes it with
  `torch.save` into the rank's `.distcp` shard at the offset its `.metadata` records
  (default_planner.py `_create_write_items` -> `torch.save(obj, bytes)`; filesystem.py
  `_write_item` for WriteItemType.BYTE_IO); those bytes are read as a `torch.save` file above.
- a pickle kept as bytes inside a checkpoint (`load_pickle_bytes`): torchtitan 0.3.0 keeps each
  DP rank's dataloader state as `pickle.dumps(StatefulDataLoader.state_dict())`
  (torchtitan/components/dataloader.py:140-147) and loads it with `pickle.loads` (:167); it is
  read here by the same allow-list unpickler, with the list its format needs
  (`TORCHTITAN_LOADER_STATE`: none).

The checkpoint's own tensors, containers, numbers and strings are what remains: nothing in a
file forensics reads can run code.
"""

from __future__ import annotations

import importlib
import io
import pickle
import warnings
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from dataloaders.errors import ForensicsError

NO_CODE = "refusing to unpickle it (forensics runs no code from a checkpoint)"

# --- torch.save files ------------------------------------------------------------------------

# megatron-core's own list of what Megatron checkpoints pickle beyond torch's defaults
# (megatron/core/safe_globals.py:19-36, SAFE_GLOBALS, megatron-core 0.16.1; registered for
# torch.load's weights-only default at import, __init__.py:49-52, which its common.pt loader
# relies on: dist_checkpointing/strategies/common.py:89). By pickled name; megatron-core's own
# classes are rebuilt as inert stand-ins, so no megatron-core import is needed.
MEGATRON_ENUMS = (
    "megatron.core.transformer.enums.AttnBackend",
    "megatron.core.transformer.enums.CudaGraphScope",
    "megatron.core.enums.ModelType",
    "megatron.core.rerun_state_machine.RerunDiagnostic",
    "megatron.core.rerun_state_machine.RerunMode",
    "megatron.core.rerun_state_machine.RerunState",
)
MEGATRON_OBJECTS = (
    "megatron.core.optimizer.OptimizerConfig",
    "megatron.core.optimizer.optimizer_config.OptimizerConfig",
)


class SavedEnum:
    """A megatron-core enum member from a checkpoint (pickled as `Class(value)`), kept as its
    value."""

    def __init__(self, value: Any = None) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"SavedEnum({self.value!r})"


class SavedObject:
    """A saved megatron-core config object, kept as its attributes."""

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, dict):
            self.__dict__.update(state)


def _reconstruct() -> Any:
    """numpy's ndarray reconstructor (`numpy._core` in numpy 2, `numpy.core` in numpy 1)."""
    try:
        return importlib.import_module("numpy._core.multiarray")._reconstruct
    except ImportError:  # numpy 1.x
        return importlib.import_module("numpy.core.multiarray")._reconstruct


def numpy_rng_globals() -> list[tuple[Any, str]]:
    """What a pickled `np.random.get_state()` needs: ndarray, its reconstructor under numpy 2's
    and numpy 1's names (states written by either), the dtype, and the uint32 dtype class
    numpy >= 1.25 may pickle. Megatron's rng_state (megatron/training/checkpointing.py
    get_rng_state) and OLMo-core's trainer state (olmo_core/train/utils.py:75) both hold one."""
    import numpy as np

    reconstruct = _reconstruct()
    return [
        (np.ndarray, "numpy.ndarray"),
        (np.dtype, "numpy.dtype"),
        (type(np.dtype(np.uint32)), "numpy.dtypes.UInt32DType"),
        (reconstruct, "numpy._core.multiarray._reconstruct"),
        (reconstruct, "numpy.core.multiarray._reconstruct"),
    ]


def megatron_globals() -> list[tuple[Any, str]]:
    """The globals a Megatron-LM checkpoint (`model_optim_rng.pt`, torch_dist `common.pt`) may
    pickle: SAFE_GLOBALS (see above) by pickled name."""
    import argparse
    import pathlib
    import signal
    import types

    table: list[tuple[Any, str]] = [
        (argparse.Namespace, "argparse.Namespace"),
        (types.SimpleNamespace, "types.SimpleNamespace"),
        (pathlib.PosixPath, "pathlib.PosixPath"),
        (io.BytesIO, "_io.BytesIO"),
        (io.BytesIO, "io.BytesIO"),
        (signal.Signals, "signal.Signals"),
        *numpy_rng_globals(),
    ]
    table += [(SavedEnum, name) for name in MEGATRON_ENUMS]
    table += [(SavedObject, name) for name in MEGATRON_OBJECTS]
    return table


def globals_beyond_torch_defaults(path: Path | str) -> set[str]:
    """The pickled GLOBAL names in a `torch.save` zip archive that torch does not allow by
    default, read without unpickling; raises (ValueError, zipfile.BadZipFile, OSError, KeyError,
    pickle.UnpicklingError) on a foreign file."""
    from torch import _weights_only_unpickler as unpickler

    with zipfile.ZipFile(path) as archive:
        names = [n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
        if len(names) != 1:
            raise ValueError("not a checkpoint written by torch.save (no single data.pkl)")
        data = io.BytesIO(archive.read(names[0]))
    found = unpickler.get_globals_in_pkl(data)
    return set(found) - set(unpickler._get_allowed_globals().keys())


def _need_torch(path: Path) -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise ForensicsError(f"{path}: reading it needs torch (pip install torch)") from None


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def check_torch_save(
    path: Path, allowed: Iterable[tuple[Any, str]], what: str, hint: str = ""
) -> None:
    """Refuse, in one line, a `torch.save` file that pickles a global outside `allowed` (or that
    is not a torch.save archive), without unpickling anything. `what` names the kind of file
    ("a Megatron checkpoint"), `hint` what to do instead."""
    _need_torch(path)
    try:
        found = globals_beyond_torch_defaults(path)
    except Exception as err:  # noqa: BLE001 - a truncated or foreign file: torch raises several
        raise ForensicsError(f"{path}: not a torch.save checkpoint ({_first_line(err)})") from None
    refused = sorted(found - {name for _built, name in allowed})
    if refused:
        more = f" (and {', '.join(refused[1:])})" if len(refused) > 1 else ""
        raise ForensicsError(
            f"{path}: holds a pickled {refused[0]}{more}, which {what} never holds; {NO_CODE}{hint}"
        )


def load_torch_save(
    path: Path, allowed: list[tuple[Any, str]], what: str, hint: str = "", mmap: bool = True
) -> Any:
    """The object a `torch.save` file holds, after `check_torch_save`, read with
    `torch.load(weights_only=True)` allowing exactly `allowed` (a damaged file is one line)."""
    import torch

    check_torch_save(path, allowed, what, hint)
    try:
        with torch.serialization.safe_globals(allowed):
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as err:  # noqa: BLE001 - weights-only refusals and damaged archives alike
        raise ForensicsError(
            f"{path}: not a readable torch checkpoint ({_first_line(err)})"
        ) from None


# --- torch.distributed.checkpoint .metadata --------------------------------------------------


def dcp_metadata_globals() -> dict[str, Any]:
    """Pickled name -> object for every global a `.metadata` holds, as its writers pickle it:
    - the Metadata tree (torch 2.13 torch/distributed/checkpoint/metadata.py:23-185: Metadata,
      StorageMeta, TensorStorageMetadata, BytesStorageMetadata, ChunkStorageMetadata,
      TensorProperties with its _MEM_FORMAT_ENCODING (its __getstate__, :57-75), MetadataIndex),
      torch.Size, the dtypes, and the layout (torch.layout pickles as
      torch.serialization._get_layout, which torch's own weights-only list allows);
    - `storage_data`: filesystem.py:75 _StorageInfo per item (FileSystemWriter.finish :774),
      and the plans' _StoragePrefix (:88, set by prepare_global_plan :666-673);
    - `storage_meta.checkpoint_id`: the writer's path, a pathlib.PosixPath (:793, :528-531);
    - megatron-core's saver keeps the gathered local save plans on the metadata
      (dist_checkpointing/strategies/state_dict_saver.py:144 `all_local_plans`): SavePlan,
      WriteItem, WriteItemType and TensorWriteData (torch/distributed/checkpoint/planner.py:
      34-111);
    - ai2-olmo-core 3.0.0 writes its own _StorageInfo (olmo_core/distributed/checkpoint/
      filesystem.py:56-62: relative_path, offset, length, the fields torch's reader uses), read
      as torch's."""
    import pathlib

    import torch
    from torch import _weights_only_unpickler as unpickler
    from torch.distributed.checkpoint import filesystem, metadata, planner

    allowed: dict[str, Any] = {
        f"torch.distributed.checkpoint.metadata.{name}": getattr(metadata, name)
        for name in ("Metadata", "StorageMeta", "TensorStorageMetadata", "BytesStorageMetadata",
                     "ChunkStorageMetadata", "TensorProperties", "_MEM_FORMAT_ENCODING",
                     "MetadataIndex")
    }  # fmt: skip
    for name in ("SavePlan", "WriteItem", "WriteItemType", "TensorWriteData"):
        allowed[f"torch.distributed.checkpoint.planner.{name}"] = getattr(planner, name)
    for name in ("_StorageInfo", "_StoragePrefix"):
        allowed[f"torch.distributed.checkpoint.filesystem.{name}"] = getattr(filesystem, name)
    allowed["olmo_core.distributed.checkpoint.filesystem._StorageInfo"] = filesystem._StorageInfo
    allowed["pathlib.PosixPath"] = pathlib.PosixPath
    allowed["torch.Size"] = torch.Size
    allowed["torch.serialization._get_layout"] = torch.serialization._get_layout
    for name, value in unpickler._get_allowed_globals().items():
        if isinstance(value, torch.dtype):
            allowed[name] = value
    return allowed


class RefusedGlobal(pickle.UnpicklingError):
    """A pickled name outside the allow-list, raised before the unpickler builds it."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class _AllowListUnpickler(pickle.Unpickler):
    def __init__(self, stream: Any, allowed: dict[str, Any]) -> None:
        super().__init__(stream)
        self.allowed = allowed

    def find_class(self, module: str, name: str) -> Any:
        key = f"{module}.{name}"
        if key not in self.allowed:
            raise RefusedGlobal(key)
        return self.allowed[key]


def read_dcp_metadata(path: Path) -> Any:
    """The torch.distributed.checkpoint Metadata in `path` (a `.metadata` file), unpickled with
    only `dcp_metadata_globals` allowed; one line for a refused global, a damaged file, or a
    pickle that is not a Metadata."""
    _need_torch(path)
    from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

    try:
        with open(path, "rb") as stream:
            metadata = _AllowListUnpickler(stream, dcp_metadata_globals()).load()
    except RefusedGlobal as err:
        raise ForensicsError(
            f"{path}: holds a pickled {err.name}, which a torch.distributed.checkpoint "
            f".metadata never holds; {NO_CODE}"
        ) from None
    except Exception as err:  # noqa: BLE001 - a torn or foreign file: pickle raises many types
        raise ForensicsError(f"{path}: not readable ({_first_line(err)})") from None
    if not isinstance(metadata, Metadata) or not isinstance(metadata.state_dict_metadata, dict):
        raise ForensicsError(
            f"{path}: holds a {type(metadata).__name__}, not a torch.distributed.checkpoint "
            "Metadata: not a distributed checkpoint's .metadata"
        )
    if not isinstance(metadata.storage_data, dict):
        raise ForensicsError(f"{path}: its Metadata has no storage_data: an incomplete .metadata")
    if not isinstance(metadata.storage_meta, StorageMeta):
        metadata.storage_meta = StorageMeta()  # as FileSystemReader.read_metadata (:932-933)
    return metadata


def _tensor_entries(metadata: Any, keep: Callable[[str], bool], where: Path) -> dict[str, Any]:
    """Empty tensors for the kept tensor entries, shaped and typed as the metadata says."""
    import torch
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    wanted = {}
    for key, meta in metadata.state_dict_metadata.items():
        if not isinstance(meta, TensorStorageMetadata) or not keep(key):
            continue
        dtype = getattr(getattr(meta, "properties", None), "dtype", None)
        size = getattr(meta, "size", None)
        if not isinstance(dtype, torch.dtype) or not isinstance(size, torch.Size):
            raise ForensicsError(f"{where}: the entry for {key!r} has no tensor size and dtype")
        wanted[key] = torch.empty(size, dtype=dtype)
    return wanted


def dcp_tensors(directory: Path, keep: Callable[[str], bool]) -> dict[str, Any]:
    """{key: tensor} for the tensor entries of the distributed checkpoint in `directory` whose
    key `keep` accepts, read on CPU without a process group. The `.metadata` goes through
    `read_dcp_metadata`; the reader hands torch that object instead of unpickling the file
    again, and the planner refuses non-tensor entries (never requested here)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    metadata = read_dcp_metadata(directory / ".metadata")
    wanted = _tensor_entries(metadata, keep, directory / ".metadata")

    class Reader(dcp.FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            metadata.storage_meta.load_id = self.load_id
            return metadata

    class Planner(dcp.DefaultLoadPlanner):
        def load_bytes(self, read_item: Any, value: Any) -> None:
            raise ForensicsError(f"{directory}: a non-tensor entry was asked for; not read")

    try:
        with warnings.catch_warnings():  # 'assuming ... a single process': intended
            warnings.simplefilter("ignore")
            dcp.load(wanted, storage_reader=Reader(str(directory)), planner=Planner(),
                     no_dist=True)  # fmt: skip
    except CheckpointException as err:  # a BaseException: each rank's failure, wrapped
        causes = [f[0] if isinstance(f, tuple) else f for f in err.failures.values()] or [err]
        raise ForensicsError(
            f"{directory}: the shards do not load ({_first_line(causes[0])})"
        ) from None
    except Exception as err:  # noqa: BLE001 - missing or damaged .distcp shards
        raise ForensicsError(f"{directory}: the shards do not load ({_first_line(err)})") from None
    return wanted


# --- objects inside a distributed checkpoint, and pickles kept as bytes ---------------------

# What torchtitan 0.3.0's pickled dataloader state holds beyond containers, numbers, strings and
# bytes: nothing. It is torchdata's StatefulDataLoader state (torchdata 0.11
# stateful_dataloader.py:496-520, counters and dicts) around the dataset's own state_dict:
# HuggingFaceTextDataset's buffers (lists of ints), sample_idx and epoch, or the HF
# IterableDataset's state_dict (nested dicts of ints and strings) (torchtitan
# hf_datasets/text_datasets.py:220-235), and InterleavedDataset's `random.Random.getstate()`
# (a tuple of ints) with the sources' states (hf_datasets/interleaved.py:136-141).
TORCHTITAN_LOADER_STATE: dict[str, Any] = {}


def load_pickle_bytes(data: bytes, allowed: dict[str, Any], where: str, what: str) -> Any:
    """A pickle held as bytes, unpickled allowing only the globals `allowed` names; one line
    naming `where` for a refused global or a damaged pickle. `what` names the state ("a
    torchtitan dataloader state") for the refusal."""
    try:
        return _AllowListUnpickler(io.BytesIO(data), allowed).load()
    except RefusedGlobal as err:
        raise ForensicsError(
            f"{where}: holds a pickled {err.name}, which {what} never holds; {NO_CODE}"
        ) from None
    except Exception as err:  # noqa: BLE001 - a torn pickle: pickle raises many types
        raise ForensicsError(f"{where}: not a readable pickle ({_first_line(err)})") from None


def dcp_object(directory: Path, metadata: Any, key: str, allowed: list[tuple[Any, str]]) -> Any:
    """The non-tensor entry `key` of the distributed checkpoint in `directory` (whose
    `read_dcp_metadata` is `metadata`): its bytes are cut from the shard the metadata names and
    read as a `torch.save` file allowing `allowed` beyond torch's defaults."""
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    where = f"{directory}: entry {key!r}"
    if not isinstance(metadata.state_dict_metadata.get(key), BytesStorageMetadata):
        raise ForensicsError(f"{where} is not in the checkpoint (or is a tensor)")
    infos = [v for k, v in metadata.storage_data.items() if getattr(k, "fqn", None) == key]
    if len(infos) != 1:
        raise ForensicsError(f"{where}: the .metadata locates it {len(infos)} times, not once")
    info = infos[0]
    if getattr(info, "transform_descriptors", None):
        raise ForensicsError(
            f"{where} is stored transformed ({info.transform_descriptors}); not read"
        )
    shard = directory / str(info.relative_path)
    try:
        with open(shard, "rb") as stream:
            stream.seek(int(info.offset))
            data = stream.read(int(info.length))
    except OSError as err:
        raise ForensicsError(f"{shard}: not readable ({_first_line(err)})") from None
    if len(data) != int(info.length):
        raise ForensicsError(f"{shard}: shorter than the .metadata says (a torn checkpoint)")
    return _load_torch_save_bytes(data, allowed, where)


def _load_torch_save_bytes(data: bytes, allowed: list[tuple[Any, str]], where: str) -> Any:
    import torch
    from torch import _weights_only_unpickler as unpickler

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = [n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
            if len(names) != 1:
                raise ValueError("no single data.pkl")
            found = set(unpickler.get_globals_in_pkl(io.BytesIO(archive.read(names[0]))))
    except Exception as err:  # noqa: BLE001 - a foreign or torn entry
        raise ForensicsError(f"{where}: not a torch.save entry ({_first_line(err)})") from None
    found -= set(unpickler._get_allowed_globals().keys())
    refused = sorted(found - {name for _built, name in allowed})
    if refused:
        raise ForensicsError(f"{where}: holds a pickled {refused[0]}; {NO_CODE}")
    try:
        with torch.serialization.safe_globals(allowed):
            return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - weights-only refusals and damaged entries alike
        raise ForensicsError(f"{where}: not readable ({_first_line(err)})") from None
