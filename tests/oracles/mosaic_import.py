"""Import streaming.base (StreamingDataset, MDSWriter) in the oracle venv without streaming's
top-level __init__, which also imports streaming.vision -> torchvision. The PyPI torchvision wheel
is a CUDA build whose operators fail to load against the CPU torch 2.13.0, and the vision datasets
play no part in StreamingDataset's sample order, so the oracle venv has no torchvision and we
register the bare `streaming` package (its real __path__, no __init__ code) before importing
streaming.base, whose own __init__ runs as released."""

from __future__ import annotations

import importlib.util
import sys
import types


def import_streaming_base() -> types.ModuleType:
    """The real `streaming.base` module of the installed mosaicml-streaming."""
    if "streaming" not in sys.modules:
        spec = importlib.util.find_spec("streaming")
        assert spec is not None and spec.submodule_search_locations is not None
        package = types.ModuleType("streaming")
        package.__path__ = list(spec.submodule_search_locations)
        package.__spec__ = spec
        sys.modules["streaming"] = package
    import streaming.base as base
    from streaming._version import __version__

    sys.modules["streaming"].__version__ = __version__
    return base
