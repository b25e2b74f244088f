"""An OLMo-core data-loader state, from a JSON file or from the trainer's own `train/rankN.pt`.

The trainer saves `Trainer.state_dict()` with `torch.save` (ai2-olmo-core 3.0.0,
olmo_core/train/checkpoint.py:431 `torch.save(train_state, train_dir / f"rank{get_rank()}.pt")`);
that state always holds `"rng": EnvRngStates.current_state().as_dict()` (train/trainer.py:998),
whose numpy entry is `np.random.get_state()`: a tuple with a uint32 ndarray (train/utils.py:75).
`torch.load(weights_only=True)` refuses those numpy globals, so they are allowed here, and only
they (dataloaders.safe_pickle): nothing else in a file is ever unpickled.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dataloaders.errors import ForensicsError
from dataloaders.safe_pickle import load_torch_save, numpy_rng_globals


def load_trainer_state(path: Path) -> Any:
    """`torch.load` of a trainer state with only tensors, plain containers and the numpy RNG
    globals allowed; a file that needs any other global is refused in one line naming it."""
    return load_torch_save(
        path,
        numpy_rng_globals(),
        "an OLMo-core trainer state",
        " (give its data_loader state_dict() as a JSON file instead)",
        mmap=False,
    )


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
