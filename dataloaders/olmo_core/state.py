"""An OLMo-core data-loader state, from a JSON file or from the trainer's own `train/rankN.pt`.

The trainer saves `Trainer.state_dict()` with `torch.save` (ai2-olmo-core 3.0.0,
olmo_core/train/checkpoint.py:431 `torch.save(train_state, train_dir / f"rank{get_rank()}.pt")`);
that state always holds `"rng": EnvRngStates.current_state().as_dict()` (train/trainer.py:998),
whose numpy entry is `np.random.get_state()`: a tuple with a uint32 ndarray (train/utils.py:75).
`torch.load(weights_only=True)` refuses those numpy globals, so they are allowed here, and only
they: nothing else in a file is ever unpickled.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

from dataloaders.errors import ForensicsError
from dataloaders.torch_globals import globals_beyond_torch_defaults


def _numpy_rng_globals() -> list[Any]:
    """The globals a pickled `np.random.get_state()` needs: ndarray, its reconstructor (under
    numpy 2's `numpy._core` name and numpy 1's `numpy.core` name, for states written by either),
    the dtype and the uint32 dtype class numpy >= 1.25 pickles."""
    import numpy as np

    try:
        multiarray = importlib.import_module("numpy._core.multiarray")
    except ImportError:  # numpy 1.x
        multiarray = importlib.import_module("numpy.core.multiarray")
    reconstruct = multiarray._reconstruct
    allowed: list[Any] = [np.ndarray, np.dtype, type(np.dtype(np.uint32))]
    for name in ("numpy._core.multiarray._reconstruct", "numpy.core.multiarray._reconstruct"):
        allowed.append((reconstruct, name))
    return allowed


def _allowed_names(allowed: list[Any]) -> set[str]:
    names = set()
    for item in allowed:
        if isinstance(item, tuple):
            names.add(item[1])
        else:
            names.add(f"{item.__module__}.{item.__qualname__}")
    return names


def load_trainer_state(path: Path) -> Any:
    """`torch.load` of a trainer state with only tensors, plain containers and the numpy RNG
    globals allowed; a file that needs any other global is refused in one line naming it."""
    import torch

    allowed = _numpy_rng_globals()
    try:
        unsafe = globals_beyond_torch_defaults(path)
    except Exception as err:  # noqa: BLE001 - not a torch file: one line
        raise ForensicsError(f"{path}: unreadable trainer state ({err})") from None
    extra = sorted(set(unsafe) - _allowed_names(allowed))
    if extra:
        raise ForensicsError(
            f"{path}: the trainer state holds {', '.join(extra)}, which an OLMo-core trainer "
            "state never needs; refusing to unpickle it (give its data_loader state_dict() "
            "as a JSON file instead)"
        )
    try:
        with torch.serialization.safe_globals(allowed):
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unreadable checkpoint is bad input
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ForensicsError(f"{path}: unreadable trainer state ({first})") from None


def load_state(path: Path) -> dict[str, Any]:
    """A data-loader state: JSON of `state_dict()`, or the trainer's `train/rankN.pt` (its
    "data_loader" entry). Anything else is a one-line error."""
    path = Path(path)
    if not path.is_file():
        raise ForensicsError(f"{path}: data-loader state not found")
    if path.suffix == ".json":
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as err:
            raise ForensicsError(f"{path}: not valid JSON ({err})") from None
    else:
        state = load_trainer_state(path)
    if isinstance(state, dict) and isinstance(state.get("data_loader"), dict):
        state = state["data_loader"]
    if not isinstance(state, dict):
        raise ForensicsError(f"{path}: expected a data-loader state mapping")
    return state
