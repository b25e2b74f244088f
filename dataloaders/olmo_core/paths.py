"""The token files of an OLMo-core dataset in the library's order: globs, data mixes and the source
permutation, resolved the way `NumpyDatasetConfig._resolve_paths_metadata` resolves them.

Cited from the ai2-olmo-core 3.0.0 wheel (the release the oracle tests run; files under
olmo_core/):
- data/numpy_dataset.py:2701-2721 `_expand_globs`: each pattern in order, through
  `deterministic_glob_directory`; a pattern without a match is an error;
- io.py:465-505 `glob_directory` / `deterministic_glob_directory`: the directory
  before the first `*` component is listed (recursively only when the pattern has `**`), entries
  (files and directories) are kept when the whole path matches the pattern's regex, sorted as
  strings;
- data/mixes/__init__.py:82-128 `DataMix.build`: the mix file's `label,path` lines
  (blank and `#` lines skipped), `{TOKENIZER}` replaced by the tokenizer id the mix uses, each
  path prefixed by `mix_base_dir` + "/";
- data/numpy_dataset.py:2770-2778: with `source_permutation_seed`, the resolved
  paths are reordered by `random.Random(seed).shuffle(range(n))`.

The mix listings ship inside ai2-olmo-core's package (olmo_core/data/mixes/NAME.txt), which this
tool does not import: the config names that file (`data.mix_file`).
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

from dataloaders.errors import ForensicsError

# DataMix's names and aliases (data/mixes/__init__.py:33-80).
MIX_ALIASES = {
    "dolma3-0625-6T-mix": "OLMo-mix-0625",
    "dolma3-0925-6T-mix": "OLMo-mix-0925",
    "dolma3-0925-150B-mix": "OLMo-mix-0625-150Bsample",
}
MIXES = (
    "OLMoE-mix-0824",
    "OLMoE-mix-0824-dev",
    "dolma17",
    "OLMo-mix-0625",
    "OLMo-mix-0625-150Bsample",
    "OLMo-mix-0625-700Bsample",
    "OLMo-mix-0625-official",
    "OLMo-mix-0925",
    "OLMo-mix-0925-official",
    "OLMo-midtraining-mix-0625-100B",
    "OLMo-midtraining-mix-0925-ingredient1-100B",
    "OLMo-midtraining-mix-0925-ingredient2-100B",
    "OLMo-longmino-mix-0625",
    "OLMo-longmino-mix-0925",
    "v3-small-ppl-validation",
    "c4-ppl-validation",
    "code-fresh-ppl-validation",
)
_DOLMA3_MIXES = {
    "OLMo-mix-0625-official",
    "OLMo-mix-0925-official",
    "OLMo-midtraining-mix-0625-100B",
    "OLMo-midtraining-mix-0925-ingredient1-100B",
    "OLMo-midtraining-mix-0925-ingredient2-100B",
    "OLMo-longmino-mix-0625",
    "OLMo-longmino-mix-0925",
}
# TokenizerName values (data/tokenizer.py:25-35).
DOLMA2 = "allenai/dolma2-tokenizer"
DOLMA2_SIGDIG = "allenai/dolma2-tokenizer-sigdig"
NEOX = "allenai/gpt-neox-olmo-dolma-v1_5"


def mix_name(name: str) -> str | None:
    """The DataMix a name or alias stands for; None for a name DataMix does not know."""
    name = MIX_ALIASES.get(name, name)
    return name if name in MIXES else None


def mix_tokenizer_id(mix: str, tokenizer: str) -> str:
    """The `{TOKENIZER}` replacement of DataMix.build (mixes/__init__.py:85-112)."""
    if mix in ("v3-small-ppl-validation", "c4-ppl-validation"):
        return {NEOX: "gptneox20b", DOLMA2: "dolma2-tokenizer"}.get(tokenizer, tokenizer)
    if mix == "code-fresh-ppl-validation":
        return "dolma2-tokenizer" if tokenizer == DOLMA2 else tokenizer
    if mix == "OLMo-mix-0625":
        return "dolma2-tokenizer-sigdig" if tokenizer == DOLMA2_SIGDIG else tokenizer
    if mix in _DOLMA3_MIXES:
        return "allenai/dolma3-tokenizer" if tokenizer == DOLMA2 else tokenizer
    return "gpt-neox-olmo-dolma-v1_5" if tokenizer == NEOX else tokenizer


def mix_paths(data: Any) -> list[tuple[str, Path]]:
    """(label, path) of every file of the run's data mix, in the mix file's order."""
    name = mix_name(data.mix)
    if name is None:
        raise ForensicsError(
            f"data.mix {data.mix!r} is not one of OLMo-core's DataMix names; give the run's "
            "token files in data.sources (the save folder's data_paths.txt lists them)"
        )
    listing = Path(data.mix_file)
    if not listing.is_file():
        raise ForensicsError(f"{listing}: data.mix_file not found")
    tokenizer_id = mix_tokenizer_id(name, data.tokenizer_identifier)
    base = str(data.mix_base_dir)
    base = base if base.endswith("/") else base + "/"
    out: list[tuple[str, Path]] = []
    lines = listing.read_text(encoding="utf-8").splitlines()
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split(",")
        if len(fields) != 2 or "{TOKENIZER}" not in fields[1]:
            raise ForensicsError(
                f"{listing}:{number}: not a mix line 'label,path-with-{{TOKENIZER}}' "
                "(OLMo-core refuses it too)"
            )
        label, path = fields
        out.append((label, Path(base + path.replace("{TOKENIZER}", tokenizer_id))))
    if not out:
        raise ForensicsError(f"{listing}: the mix file lists no token files")
    return out


def _glob_directory(pattern: str) -> list[str]:
    """olmo_core.io.deterministic_glob_directory for a local pattern (io.py:465-505)."""
    parts = pattern.split("/")
    base_parts = []
    for part in parts:
        if "*" in part:
            break
        base_parts.append(part)
    folder = "/".join(base_parts) if base_parts else "."
    regex = re.compile(
        "^"
        + re.escape(pattern).replace(r"\*\*/", ".*").replace(r"\*\*", ".*").replace(r"\*", "[^/]*")
        + "$"
    )
    found: list[str] = []

    def walk(where: Path, recurse: bool) -> None:
        for p in where.iterdir():
            if p.is_file() or p.is_dir():
                found.append(str(p))
            if recurse and p.is_dir():
                walk(p, recurse)

    root = Path(folder.rstrip("/").replace("file://", ""))
    if root.is_dir():
        walk(root, "**" in pattern)
    return sorted(p for p in found if regex.match(p))


def expand_globs(name: str, patterns: list[Path]) -> list[tuple[str, Path]]:
    """(source, path) of every file each pattern matches, pattern by pattern, sorted within."""
    out: list[tuple[str, Path]] = []
    for pattern in patterns:
        text = str(pattern)
        if "://" in text:
            raise ForensicsError(
                f"{text}: a remote glob (data.sources.{name}); copy the files locally and give "
                "the local pattern"
            )
        matches = _glob_directory(text)
        if not matches:
            raise ForensicsError(f"{text}: the pattern matches no file (data.sources.{name})")
        out.extend((name, Path(m)) for m in matches)
    return out


def permutation(count: int, seed: int | None) -> list[int]:
    """The dataset's file order as positions in the resolved list (numpy_dataset.py:2770-2778)."""
    order = list(range(count))
    if seed is not None:
        random.Random(seed).shuffle(order)
    return order


def resolved_paths(data: Any, sources: list[Any] | None) -> list[tuple[str, Path]]:
    """(source, path) of a data stage's files before the source permutation: the mix's files
    when `sources` is None (the first stage of a mix run), else the sources' paths (globs
    expanded when data.expand_glob)."""
    if sources is None:
        return mix_paths(data)
    out: list[tuple[str, Path]] = []
    for source in sources:
        if data.expand_glob:
            out.extend(expand_globs(source.name, list(source.paths)))
        else:
            out.extend((source.name, p if isinstance(p, str) else Path(p)) for p in source.paths)
    return out
