"""What a `torch.save` file pickles beyond the plain tensors and containers torch always allows.

`torch.serialization.get_unsafe_globals_in_checkpoint` answers relative to torch's defaults *plus*
whatever the process has registered with `add_safe_globals`, and libraries register their own
classes at import time (megatron-core's `safe_globals.py` adds `argparse.Namespace`, ...). A gate
that must refuse a file holding anything but an exact list cannot depend on what else was
imported, so this reads the file's globals the same way (torch 2.13,
`torch/serialization.py` `get_unsafe_globals_in_checkpoint`: the archive's `data.pkl`,
disassembled statically) and subtracts torch's own defaults only.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path


def globals_beyond_torch_defaults(path: Path | str) -> set[str]:
    """The pickled GLOBAL names in a `torch.save` zip archive that torch does not allow by
    default; raises (ValueError, zipfile.BadZipFile, OSError, KeyError) on a foreign file."""
    from torch import _weights_only_unpickler as unpickler

    with zipfile.ZipFile(path) as archive:
        names = [n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
        if len(names) != 1:
            raise ValueError("not a checkpoint written by torch.save (no single data.pkl)")
        data = io.BytesIO(archive.read(names[0]))
    found = unpickler.get_globals_in_pkl(data)
    return set(found) - set(unpickler._get_allowed_globals().keys())
