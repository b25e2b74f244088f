"""Run megatron-bridge 0.6.2 (Requires-Python >=3.12) on the project's Python 3.11.

The only 3.12 feature its config and checkpoint code reach is `typing.override` (PEP 698,
megatron-core 0.19.2 megatron/training/models/hybrid.py:5), a decorator that only marks a method;
typing_extensions ships the same function for 3.11. Imported from a .pth file of the oracle venv.
"""

import typing

import typing_extensions

if not hasattr(typing, "override"):
    typing.override = typing_extensions.override
