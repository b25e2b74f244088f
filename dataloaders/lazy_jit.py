"""numba kernels compiled on first use: importing a module that defines some does not import
numba (a few tenths of a second of every command's start, most of which never runs a kernel);
calling one does.

    @kernel(cache=True, nogil=True)
    def _loop(data, out): ...

`_loop` is a `Kernel` until the first call of any kernel of its module. That call imports numba,
wraps every kernel of the module with `numba.njit(**options)` and puts the dispatchers in the
module's globals in the kernels' place: a kernel calls its module's other kernels by their global
names, and numba, compiling it, must find them compiled. The compiled code is what
`@njit(**options)` on the same function gives (numba's on-disk cache, `cache=True`, is keyed by
that function). A caller that holds the Kernel object (`from module import _loop` before the
first call) goes through it to the same dispatcher.
"""

from __future__ import annotations

import functools
import importlib.util
import threading
from collections.abc import Callable
from typing import Any

_LOCK = threading.Lock()  # one thread compiles a module's kernels; the others wait for them


class Kernel:
    """A function numba compiles on its module's first kernel call (module docstring)."""

    def __init__(self, py_func: Callable[..., Any], options: dict[str, Any]) -> None:
        functools.update_wrapper(self, py_func)
        self.py_func = py_func
        self.options = options
        self.dispatcher: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.compiled()(*args, **kwargs)

    def compiled(self) -> Any:
        """The numba dispatcher (its module's kernels compiled on the first call)."""
        if self.dispatcher is None:
            compile_kernels(self.py_func.__globals__)
        return self.dispatcher


def kernel(**options: Any) -> Callable[[Callable[..., Any]], Kernel]:
    """`numba.njit(**options)`, applied on first use (module docstring)."""

    def wrap(py_func: Callable[..., Any]) -> Kernel:
        return Kernel(py_func, options)

    return wrap


def compile_kernels(namespace: dict[str, Any]) -> None:
    """Every Kernel in a module's globals wrapped by `numba.njit` and put in its place."""
    from numba import njit

    with _LOCK:
        for name, value in list(namespace.items()):
            if isinstance(value, Kernel):
                if value.dispatcher is None:
                    value.dispatcher = njit(**value.options)(value.py_func)
                namespace[name] = value.dispatcher


@functools.cache
def have_numba() -> bool:
    """Whether numba is installed (a declared dependency; the modules with a pure-Python
    fallback ask), without importing it."""
    return importlib.util.find_spec("numba") is not None
