"""OLMo-core's repeated n-gram finder, executed from the installed ai2-olmo-core wheel's source.

The oracle is `find_periodic_sequences` (ai2-olmo-core 3.0.0; the same code as allenai/OLMo-core
commit fa6c5014c9f6e9ee789da2d9c20d5126fee8df0d, src/olmo_core/data/utils.py:608-720), run from
the wheel's utils.py: importing `olmo_core.data.utils` would pull torch and cached-path's cloud
clients for four numpy functions. Used by the score and scan tests.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np

ORACLE_NAMES = {
    "find_end_first_consecutive_true",
    "find_start_last_consecutive_true",
    "group_consecutive_values",
    "RepetitionTuple",
    "find_periodic_sequences",
}


def load_olmo() -> Callable:
    """OLMo-core's find_periodic_sequences, run from the installed wheel's utils.py."""
    spec = importlib.util.find_spec("olmo_core")
    assert spec is not None, "ai2-olmo-core is not installed (scripts/bootstrap.sh installs it)"
    path = Path(spec.submodule_search_locations[0]) / "data" / "utils.py"
    source = path.read_text()
    tree = ast.parse(source)
    body = [n for n in tree.body if getattr(n, "name", None) in ORACLE_NAMES]
    assert {n.name for n in body} == ORACLE_NAMES, f"{path}: the oracle functions moved"
    namespace = {"np": np, "NamedTuple": NamedTuple, "List": list, "Generator": object}
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), namespace)
    return namespace["find_periodic_sequences"]
