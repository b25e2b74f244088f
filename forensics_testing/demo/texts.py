"""Real text found on this machine, for a demo run that needs no download.

Three kinds, all from the installed Python packages (the virtualenv the tool runs in):

- prose: the long descriptions in `*.dist-info/METADATA` (READMEs as uploaded to PyPI) and the
  docstrings of modules, classes and functions;
- code: top-level functions and classes of `.py` files, as source;
- both are cut into documents of a bounded size, so a document is a page, not a whole README.

The harvest is deterministic for a given seed and the installed versions of HARVESTED, the
packages the project itself installs: files are listed in sorted order and then shuffled with the
seed. scripts/bootstrap.sh installs the versions scripts/harvest-pins.txt names, so the data is
the same on every machine (a new release of any of them would change the runs the tests build).
Other packages in the environment (benchmark anchors, a developer's tools) are left out, so
installing one does not change the demo's data or the tests built on it.
"""

from __future__ import annotations

import ast
import os
import random
import sysconfig
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

MIN_CHARS = 300
MAX_CHARS = 3000
MAX_FILE_BYTES = 60_000  # generated giants (vendored tables, stubs) parse slowly and read badly
# Top-level packages (and their distributions) the runtime and test installs always bring, at the
# same version with the benchmark extra installed or not. Never our own (forensics, dataloaders,
# forensics_testing): they change with every commit, and the demo data and the tests built on it
# must not. Not xxhash (datatrove, in `bench`, pins it below 4) nor pytz (only `bench` brings it):
# with them the harvest, and the scan test's planted run, differed between the two venvs.
HARVESTED = frozenset(
    {
        "numpy", "pyarrow", "polars", "pydantic", "pydantic_core", "yaml", "pyyaml", "typer",
        "click", "rich", "tokenizers", "ftfy", "datasketch", "sklearn", "scikit_learn", "scipy",
        "matplotlib", "datasets", "tbparse", "tensorboard", "numba", "pandas", "fsspec",
        "huggingface_hub", "transformers", "sentence_transformers", "torch", "pytest", "megatron",
        "megatron_core", "joblib", "packaging", "requests", "urllib3", "jinja2", "markupsafe",
        "pygments", "markdown_it", "mdurl", "wcwidth", "dill", "multiprocess", "tqdm",
        "aiohttp", "idna", "certifi", "charset_normalizer", "attrs", "dateutil",
        "python_dateutil", "filelock", "networkx", "sympy", "mpmath", "setuptools",
    }
)  # fmt: skip


def _harvested(name: str) -> bool:
    return name.lower().replace("-", "_").replace(".", "_") in HARVESTED


@dataclass(frozen=True)
class Text:
    """One harvested document: its text and where it came from (package, file)."""

    text: str
    package: str
    origin: str  # "readme", "docstring" or "code"
    file: str


def site_packages() -> Path:
    """The directory the running interpreter installs pure-Python packages into."""
    return Path(sysconfig.get_paths()["purelib"])


def _chunks(text: str, max_chars: int = MAX_CHARS) -> Iterator[str]:
    """Paragraph-aligned chunks of at most max_chars (a longer paragraph is cut)."""
    buf: list[str] = []
    size = 0
    for para in text.split("\n\n"):
        para = para.strip("\n")
        if not para.strip():
            continue
        if size + len(para) > max_chars and buf:
            yield "\n\n".join(buf)
            buf, size = [], 0
        buf.append(para[:max_chars])
        size += len(para) + 2
    if buf:
        yield "\n\n".join(buf)


def readmes(root: Path) -> Iterator[Text]:
    """Long descriptions of installed distributions, in paragraph-aligned chunks."""
    for meta in sorted(root.glob("*.dist-info/METADATA")):
        if not _harvested(meta.parent.name.split("-")[0]):
            continue  # our own README changes with every commit; other packages vary by machine
        try:
            msg = Parser().parsestr(meta.read_text(encoding="utf-8", errors="replace"))
        except Exception:  # a malformed METADATA is simply not harvested
            continue
        body = msg.get_payload()
        if not isinstance(body, str):
            continue
        package = msg.get("Name") or meta.parent.name.split("-")[0]
        for chunk in _chunks(body):
            if len(chunk) >= MIN_CHARS:
                yield Text(chunk, package, "readme", str(meta.relative_to(root)))


def python_files(root: Path, seed: int) -> list[Path]:
    """All .py files under root, sorted, then shuffled with `seed` (deterministic)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in {"__pycache__", "tests", "test"})
        if Path(dirpath) == root:
            dirnames[:] = [d for d in dirnames if _harvested(d)]
            filenames = [f for f in filenames if _harvested(f.removesuffix(".py"))]
        found.extend(Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py"))
    found = [f for f in found if f.stat().st_size <= MAX_FILE_BYTES]
    random.Random(seed).shuffle(found)
    return found


def from_python(path: Path, root: Path) -> tuple[list[Text], list[Text]]:
    """(docstrings, code segments) of one .py file; ([], []) when it does not parse."""
    try:
        source = path.read_text(encoding="utf-8")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
    except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
        return [], []
    rel = str(path.relative_to(root))
    package = rel.split(os.sep)[0].removesuffix(".py")
    docs: list[Text] = []
    code: list[Text] = []
    nodes = [tree, *[n for n in ast.walk(tree) if isinstance(n, ast.ClassDef | ast.FunctionDef)]]
    for node in nodes:
        doc = ast.get_docstring(node)
        if doc and len(doc) >= MIN_CHARS:
            docs.append(Text(doc[:MAX_CHARS], package, "docstring", rel))
    lines = source.splitlines(keepends=True)  # once: ast.get_source_segment re-splits per call
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            seg = "".join(lines[first - 1 : node.end_lineno]).strip("\n")
            if MIN_CHARS <= len(seg) <= MAX_CHARS:
                code.append(Text(seg, package, "code", rel))
    return docs, code


def harvest(
    n_prose: int, n_code: int, *, seed: int, root: Path | None = None
) -> dict[str, list[Text]]:
    """At least n_prose prose and n_code code documents (fewer only if the machine lacks them).

    Prose mixes README chunks and docstrings; both lists are shuffled with `seed`.
    """
    root = root or site_packages()
    rng = random.Random(seed)
    prose = list(readmes(root))
    code: list[Text] = []
    for path in python_files(root, seed):
        if len(prose) >= 2 * n_prose and len(code) >= n_code:
            break
        d, c = from_python(path, root)
        prose.extend(d)
        code.extend(c)
    rng.shuffle(prose)
    rng.shuffle(code)
    return {"prose": prose, "code": code[:n_code]}
