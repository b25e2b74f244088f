"""Import-only stand-in for Transformer Engine in the Megatron-Bridge oracle venv.

Transformer Engine is a CUDA-only library; no CPU build exists. megatron-bridge 0.6.2's
`megatron/bridge/peft/lora_layers.py:20` imports `transformer_engine.pytorch` unconditionally and
names it only in annotations and in LoRA code paths, and Bridge's config module imports it through
`megatron.bridge.peft.base` (training/config.py:70). For that one importer this module is
importable; for every other importer (megatron-core's own `try: import transformer_engine`
guards, e.g. megatron/core/tensor_parallel/random.py:84-90) it is absent, exactly as on a CPU
machine. Anything used from it raises.
"""

import sys
import types

_ALLOWED_IMPORTER = "megatron.bridge.peft.lora_layers"
_frame = sys._getframe(1)
while _frame is not None and _frame.f_globals.get("__name__", "").startswith(
    ("importlib", "_frozen_importlib", "transformer_engine")
):
    _frame = _frame.f_back
if _frame is None or _frame.f_globals.get("__name__") != _ALLOWED_IMPORTER:
    raise ModuleNotFoundError(
        "No module named 'transformer_engine' (CUDA only)", name="transformer_engine"
    )


class _Absent:
    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> "_Absent":
        return _Absent(f"{self._name}.{attr}")

    def __call__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError(f"{self._name}: Transformer Engine is not installed (CUDA only)")


class _Module(types.ModuleType):
    def __getattr__(self, attr: str) -> _Absent:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Absent(f"{self.__name__}.{attr}")


pytorch = _Module("transformer_engine.pytorch")
sys.modules["transformer_engine.pytorch"] = pytorch
