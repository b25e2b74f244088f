"""Which tests need a real library beside the tool: read from the code a test runs, not declared.

tests/conftest.py marks a test `oracle` when this module finds, in the test function, the
fixtures it uses (their whole closure) or any helper either of them reaches through the checkout's
support code (tests/, forensics_testing/; followed by name, function to function, across imports),
one of:
- an import of megatron-core, ai2-olmo-core, mosaicml-streaming or datatrove, or a look-up of
  their installed source (`find_spec("olmo_core")`);
- a run of a script of tests/oracles/ or of an oracle venv (`.venv-olmo`, `.venv-mosaic`, the
  scripts that build them), or an import of tests/oracles/ (the trainers' vendored source); a
  file the library wrote, read back (tests/oracles/megatron_lm_args.pt), needs no library;
- a torch model trained for the test (`.backward()`, `torch.optim`);
- headless Chromium.
Our own runtime packages (forensics/, dataloaders/) are not followed: they import none of these.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from forensics_testing.repo_paths import REPO_ROOT

LIBRARIES = ("megatron", "olmo_core", "streaming", "datatrove")
# Searched in the code's text with its multi-line strings (docstrings, code samples) blanked;
# imports are read from the syntax tree.
INDICATORS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("reads a real library's source", re.compile(rf"find_spec\(\s*[\"'](?:{'|'.join(LIBRARIES)})")),
    (  # a script of tests/oracles/ (ORACLES / "x.py"), or an oracle venv
        "runs an oracle",
        re.compile(
            r"(?i)\boracles\b\W.*\w\.py[\"']|\.venv-(?:olmo|mosaic|bridge|titan)"
            r"|(?:olmo|mosaic|bridge|torchtitan)_oracle_env"
        ),
    ),
    ("trains a torch model", re.compile(r"\.backward\(\)|\btorch\.optim\b")),
    ("renders in Chromium", re.compile(r"which\(\s*[\"']chromium")),
)
NOT_FOLLOWED = ("forensics", "dataloaders")  # our runtime packages


@dataclass
class _Module:
    """A parsed module: its top-level definitions and what its imported names point at."""

    path: Path
    lines: list[str]
    defs: dict[str, list[ast.AST]] = field(default_factory=dict)
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # local -> (mod, name)
    functions: dict[int, ast.AST] = field(default_factory=dict)  # by first line (decorator or def)

    def code(self, node: ast.AST) -> str:
        """The node's lines with its multi-line strings blanked (what the indicators are
        searched in): a docstring or a sample of code in a string runs nothing."""
        lines = self.lines[node.lineno - 1 : node.end_lineno]
        for sub in ast.walk(node):
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                if sub.end_lineno > sub.lineno:
                    for k in range(sub.lineno, sub.end_lineno + 1):
                        lines[k - node.lineno] = "\n"
        return "".join(lines)


def _parse(path: Path) -> _Module:
    source = path.read_text()
    tree = ast.parse(source)
    module = _Module(path, source.splitlines(keepends=True))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            module.defs.setdefault(node.name, []).append(node)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        module.defs.setdefault(name.id, []).append(node)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                module.imports[alias.asname or alias.name] = (node.module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                module.imports[local] = (alias.name if alias.asname else local, None)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            # a function's code object starts at its first decorator (or at `def`)
            for line in {node.lineno, *(d.lineno for d in node.decorator_list)}:
                module.functions.setdefault(line, node)
    return module


class OracleUse:
    """Memoised: the reason a piece of test code needs a real library, or None."""

    def __init__(self, root: Path = REPO_ROOT) -> None:
        self.root = root.resolve()
        self._modules: dict[Path, _Module | None] = {}
        self._memo: dict[tuple[Path, str], str | None] = {}
        self._nodes: dict[tuple[Path, int], str | None] = {}
        self._resolved: dict[str, Path] = {}

    def _resolve(self, path: Path) -> Path:
        key = str(path)
        if key not in self._resolved:
            self._resolved[key] = path.resolve()
        return self._resolved[key]

    def _module(self, path: Path) -> _Module | None:
        path = self._resolve(path)
        if path not in self._modules:
            inside = path.is_relative_to(self.root) and ".venv" not in path.parts
            followed = inside and path.relative_to(self.root).parts[0] not in NOT_FOLLOWED
            followed = followed and path != Path(__file__).resolve()  # it names them all
            self._modules[path] = _parse(path) if followed and path.suffix == ".py" else None
        return self._modules[path]

    def _file_of(self, module: str) -> Path | None:
        loaded = sys.modules.get(module)
        if loaded is not None and getattr(loaded, "__file__", None):
            return Path(loaded.__file__)
        if module.split(".")[0] in LIBRARIES:
            return None
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            return None
        return Path(spec.origin) if spec and spec.origin else None

    def of_name(self, path: Path, name: str) -> str | None:
        """Why module `path`'s top-level `name` (a function, class or constant) needs one."""
        key = (self._resolve(path), name)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = None  # a cycle adds nothing
        module = self._module(path)
        reason = None
        if module is not None:
            if name in module.defs:
                for node in module.defs[name]:
                    reason = reason or self._of_node(module, node)
            elif name in module.imports:
                reason = self._of_import(*module.imports[name], attribute=None)
        self._memo[key] = reason
        return reason

    def _of_import(self, target: str, name: str | None, attribute: str | None) -> str | None:
        """A name imported as `from target import name` (or `import target`, then .attribute)."""
        if target.split(".")[0] in LIBRARIES:
            return f"imports {target}"
        if target.split(".")[0] == "oracles":
            return f"imports tests/{target.replace('.', '/')}"
        if name is not None:
            file = self._file_of(f"{target}.{name}") if self._is_package(target) else None
            if file is not None:  # a submodule imported by name
                return self._of_module_attribute(file, attribute)
            file = self._file_of(target)
            return self.of_name(file, name) if file else None
        file = self._file_of(target)
        return self._of_module_attribute(file, attribute) if file else None

    def _is_package(self, module: str) -> bool:
        file = self._file_of(module)
        return file is not None and file.name == "__init__.py"

    def _of_module_attribute(self, file: Path, attribute: str | None) -> str | None:
        if attribute is None:
            return None
        return self.of_name(file, attribute)

    def _of_node(self, module: _Module, node: ast.AST) -> str | None:
        key = (module.path, node.lineno)
        if key not in self._nodes:
            self._nodes[key] = None  # a cycle adds nothing
            self._nodes[key] = self._search(module, node)
        return self._nodes[key]

    def _search(self, module: _Module, node: ast.AST) -> str | None:
        where = f"({module.path.name}:{node.lineno})"
        for sub in ast.walk(node):
            names = []
            if isinstance(sub, ast.Import):
                names = [alias.name for alias in sub.names]
            elif isinstance(sub, ast.ImportFrom) and sub.module and not sub.level:
                names = [sub.module]
            for root in (name.split(".")[0] for name in names):
                if root in LIBRARIES:
                    return f"imports a real library {where}"
                if root == "oracles":
                    return f"imports tests/oracles {where}"
        code = module.code(node)
        for reason, pattern in INDICATORS:
            if pattern.search(code):
                return f"{reason} {where}"
        for sub in ast.walk(node):
            found = None
            if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name):
                bound = module.imports.get(sub.value.id)
                if bound is not None:
                    found = self._of_import(bound[0], bound[1], attribute=sub.attr)
            elif isinstance(sub, ast.Name) and sub.id != getattr(node, "name", None):
                if sub.id in module.defs or sub.id in module.imports:
                    found = self.of_name(module.path, sub.id)
            if found:
                return found
        return None

    def of_function(self, function: Callable) -> str | None:
        """Why the function (a test or a fixture) needs a real library, or None."""
        code = getattr(function, "__code__", None)
        if code is None:
            return None
        module = self._module(Path(code.co_filename))
        node = module.functions.get(code.co_firstlineno) if module else None
        return self._of_node(module, node) if node is not None else None
