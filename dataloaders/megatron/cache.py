"""Index caches: Megatron's own (--data-cache-path) and ours.

Megatron writes, per dataset, `{md5}-GPTDataset-train-{description.txt, document_index.npy,
sample_index.npy, shuffle_index.npy}` and per blend `{md5}-BlendedDataset-train-{description.txt,
dataset_index.npy, dataset_sample_index.npy}`, where md5 hashes the description JSON. That JSON
includes the training tokenizer's identifiers, which a replay cannot know, so the files are found
by reading the descriptions: a GPTDataset entry belongs to us when its dataset_path is our prefix
and its split is train. Among those, an entry that agrees on every field we can compute is used
(memory-mapped, never copied). If none agrees and one differs in a field that describes the run
(random_seed, sequence_length, split), the config and the run disagree: that is an error naming
the field, because silently rebuilding would replay a different order than the run trained on.
Entries differing only in num_samples are other builds (another stage, another run length).

Our own cache stores the same arrays under a key hashed from everything that determines them
plus the `.idx` content hash and the `.bin` size, in $FORENSICS_CACHE (default ~/.cache/forensics).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from dataloaders.cache_dir import forensics_cache
from dataloaders.errors import ForensicsError
from dataloaders.mapped_pages import tracked
from dataloaders.megatron.checked import checked_once, versions, write_stamp

RUN_FIELDS = ("random_seed", "sequence_length", "split_matrix")
GPT_FILES = ("document_index", "sample_index", "shuffle_index")
BLEND_FILES = ("dataset_index", "dataset_sample_index")


def _same_path(recorded: str | None, prefix: Path) -> bool:
    """Megatron records the prefix as the job spelled it (maybe relative to the job's cwd)."""
    if recorded is None:
        return False
    norm = os.path.normpath(recorded)
    if os.path.isabs(norm):
        return Path(norm) == prefix or os.path.realpath(norm) == os.path.realpath(prefix)
    return str(prefix).endswith(os.sep + norm) or str(prefix) == norm


def _field_diff(
    cached: dict[str, Any], expected: dict[str, Any], fields: tuple[str, ...]
) -> list[str]:
    diffs = []
    for name in fields:
        have, want = cached.get(name), expected.get(name)
        if name == "split_matrix":
            same = _same_matrix(have, want)
        else:
            same = have == want
        if not same:
            diffs.append(f"{name}: cache has {have!r}, config gives {want!r}")
    return diffs


def _same_matrix(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if (x is None) != (y is None):
            return False
        if x is not None and not np.allclose(np.asarray(x, float), np.asarray(y, float)):
            return False
    return True


def _read_description(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _load_arrays(description: Path, names: tuple[str, ...]) -> dict[str, np.ndarray] | None:
    base = description.name[: -len("description.txt")]
    paths = {n: description.with_name(f"{base}{n}.npy") for n in names}
    if not all(p.is_file() for p in paths.values()):
        return None
    out = {}
    for name, path in paths.items():
        try:
            out[name] = tracked(np.load(path, mmap_mode="r", allow_pickle=False))
        except (OSError, ValueError) as err:
            raise ForensicsError(f"{path}: unreadable Megatron cache file ({err})") from None
    return out


def find_megatron_gpt(
    cache_dir: Path,
    prefix: Path,
    expected: dict[str, Any],
    split_name: str = "train",
    *,
    strict: bool = True,
) -> dict[str, np.ndarray] | None:
    """Megatron's cached GPTDataset indices for `prefix`, checked against `expected` (our
    computed unique_identifiers: num_samples, random_seed, sequence_length, split_matrix).

    `strict`: a conflicting entry is an error (the run's --data-cache-path). Megatron's default
    location `<prefix>/cache/GPTDataset_indices` is shared by every run over that prefix, so there
    a conflicting entry is just another run's."""
    if not cache_dir.is_dir():
        return None
    conflicts: list[tuple[Path, list[str]]] = []
    for desc_path in sorted(cache_dir.glob(f"*-GPTDataset-{split_name}-description.txt")):
        desc = _read_description(desc_path)
        if desc is None or not _same_path(desc.get("dataset_path"), prefix):
            continue
        run_diff = _field_diff(desc, expected, RUN_FIELDS)
        if run_diff:
            conflicts.append((desc_path, run_diff))
            continue
        if desc.get("num_samples") != expected.get("num_samples"):
            continue
        arrays = _load_arrays(desc_path, GPT_FILES)
        if arrays is not None:
            return arrays
    if conflicts and strict:
        path, diffs = conflicts[0]
        raise ForensicsError(
            f"{path}: Megatron's cached indices for {prefix.name} disagree with the config: "
            f"{diffs[0]}"
        )
    return None


def find_megatron_blend(
    cache_dir: Path, prefixes: list[Path], expected: dict[str, Any]
) -> dict[str, np.ndarray] | None:
    """Megatron's cached BlendedDataset train indices for these prefixes (in order), checked
    against `expected` (weights, size, and each dataset's run fields)."""
    if not cache_dir.is_dir():
        return None
    conflicts: list[tuple[Path, list[str]]] = []
    for desc_path in sorted(cache_dir.glob("*-BlendedDataset-train-description.txt")):
        desc = _read_description(desc_path)
        if desc is None:
            continue
        datasets = desc.get("datasets") or []
        if len(datasets) != len(prefixes) or not all(
            isinstance(d, dict) and _same_path(d.get("dataset_path"), p)
            for d, p in zip(datasets, prefixes, strict=True)
        ):
            continue
        run_diff = []
        for d, want in zip(datasets, expected["datasets"], strict=True):
            run_diff += _field_diff(d, want, RUN_FIELDS)
        if run_diff:
            conflicts.append((desc_path, run_diff))
            continue
        weights = desc.get("weights")
        if (
            desc.get("size") != expected["size"]
            or weights is None
            or len(weights) != len(expected["weights"])
            or not np.allclose(weights, expected["weights"], rtol=0, atol=1e-15)
        ):
            continue
        arrays = _load_arrays(desc_path, BLEND_FILES)
        if arrays is not None:
            return arrays
    if conflicts:
        path, diffs = conflicts[0]
        raise ForensicsError(
            f"{path}: Megatron's cached blend indices disagree with the config: {diffs[0]}"
        )
    return None


def gpt_arrays_problem(arrays: dict[str, np.ndarray], documents: int) -> str | None:
    """Why cached GPTDataset arrays cannot be what Megatron built over `documents` documents,
    or None. Vectorised range checks over the memory maps, so a truncated or hand-made
    `shuffle_index.npy` is refused here rather than indexed out of bounds (or, worse, in
    bounds and wrong) in the middle of a replay."""
    doc, sample, shuffle = (arrays[n] for n in GPT_FILES)
    for name, arr, ndim in (("document_index", doc, 1), ("sample_index", sample, 2)):
        if arr.ndim != ndim or arr.dtype.kind not in "iu":
            return f"{name} has shape {arr.shape} and dtype {arr.dtype}, expected {ndim}-D integers"
    if shuffle.ndim != 1 or shuffle.dtype.kind not in "iu":
        return f"shuffle_index has shape {shuffle.shape} and dtype {shuffle.dtype}"
    if sample.shape[1] != 2 or sample.shape[0] < 1:
        return f"sample_index has shape {sample.shape}, expected (n + 1, 2)"
    rows = sample.shape[0] - 1
    if shuffle.shape[0] != rows:
        return (
            f"shuffle_index has {shuffle.shape[0]} entries, sample_index describes {rows} samples"
        )
    if doc.size and (int(doc.min()) < 0 or int(doc.max()) >= documents):
        return f"document_index points outside the {documents} documents of the dataset"
    starts = np.asarray(sample[:, 0], dtype=np.int64)
    if starts.size and (int(starts.min()) < 0 or int(starts.max()) > doc.shape[0]):
        return "sample_index points outside document_index"
    if starts.size > 1 and bool((np.diff(starts) < 0).any()):
        return "sample_index is not increasing"
    if shuffle.size and (int(shuffle.min()) < 0 or int(shuffle.max()) >= rows):
        return f"shuffle_index points outside the {rows} samples"
    return None


def blend_arrays_problem(arrays: dict[str, np.ndarray], lengths: list[int]) -> str | None:
    """Why cached BlendedDataset arrays cannot be a blend of datasets of these lengths (in
    samples), or None."""
    datasets = len(lengths)
    index, sample = (arrays[n] for n in BLEND_FILES)
    if index.ndim != 1 or sample.ndim != 1 or index.shape != sample.shape:
        return f"dataset_index {index.shape} and dataset_sample_index {sample.shape} differ"
    if index.dtype.kind not in "iu" or sample.dtype.kind not in "iu":
        return f"dtypes {index.dtype} and {sample.dtype} are not integers"
    if index.size and (int(index.min()) < 0 or int(index.max()) >= datasets):
        return f"dataset_index names a dataset outside the {datasets} of the blend"
    if sample.size and int(sample.min()) < 0:
        return "dataset_sample_index is negative"
    if index.size:
        most = np.full(datasets, -1, dtype=np.int64)
        np.maximum.at(most, np.asarray(index, dtype=np.int64), np.asarray(sample, dtype=np.int64))
        for k, (top, length) in enumerate(zip(most.tolist(), lengths, strict=True)):
            if top >= length:
                return f"dataset_sample_index asks dataset {k} for sample {top} of {length}"
    return None


# -- our own cache -------------------------------------------------------------------------


def cache_root() -> Path:
    """$FORENSICS_CACHE, else ~/.cache/forensics."""
    return forensics_cache()


def cache_key(description: dict[str, Any]) -> str:
    text = json.dumps(description, sort_keys=True, default=str)
    return hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()


def load_own(kind: str, key: str, names: tuple[str, ...]) -> dict[str, np.ndarray] | None:
    """Our cached arrays for `key`, memory-mapped, or None."""
    folder = cache_root() / "megatron" / kind
    paths = {n: folder / f"{key}-{n}.npy" for n in names}
    if not all(p.is_file() for p in paths.values()):
        return None
    try:
        return {n: tracked(np.load(p, mmap_mode="r", allow_pickle=False)) for n, p in paths.items()}
    except (OSError, ValueError):
        return None  # a damaged cache entry is rebuilt, never trusted


def save_own(
    kind: str, key: str, arrays: dict[str, np.ndarray], description: dict[str, Any]
) -> Path | None:
    """Store arrays atomically (temp file + rename each); a read-only cache dir is not an error."""
    folder = cache_root() / "megatron" / kind
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, arr in arrays.items():
            fd, tmp = tempfile.mkstemp(prefix=f".{key}-{name}.", suffix=".npy", dir=folder)
            with os.fdopen(fd, "wb") as out:
                np.save(out, np.ascontiguousarray(arr), allow_pickle=False)
            os.replace(tmp, folder / f"{key}-{name}.npy")
        desc = folder / f"{key}-description.json"
        desc.write_text(json.dumps(description, indent=2, default=str), encoding="utf-8")
    except OSError:
        return None
    # Built here, not read: what the range checks would find is known. Stamped so that the
    # next open skips them (checked.py).
    paths = [folder / f"{key}-{name}.npy" for name in arrays]
    write_stamp(f"own-{kind}", paths, {"problem": None}, versions(paths), 0.0, trusted=True)
    return folder


# -- which cache serves ---------------------------------------------------------------------

Arrays = dict[str, np.ndarray]


def find_indices(
    megatron: Iterable[tuple[Path, Arrays | None]],
    problem: Callable[[Arrays], str | None],
    damaged: Callable[[Path, str], str],
    own: tuple[str, str, tuple[str, ...]],
) -> tuple[Arrays | None, str]:
    """Cached indices by the rule GPT datasets and blends share: Megatron's first (`megatron`
    yields each folder with what `find_megatron_*` found there, lazily), where a damaged entry
    (`problem` says how) is an error worded by `damaged(folder, problem)`, since the run reads
    those very files; then ours (`own`: kind, key, file names), where a damaged entry is rebuilt,
    never trusted. Returns (arrays, origin): origin "megatron cache <folder>", "forensics
    cache", or "built" with None."""
    for folder, arrays in megatron:
        if arrays is None:
            continue
        found = checked_problem("megatron", arrays, problem)
        if found is not None:
            raise ForensicsError(damaged(folder, found))
        return arrays, f"megatron cache {folder}"
    arrays = load_own(*own)
    if arrays is None or checked_problem(f"own-{own[0]}", arrays, problem, True) is not None:
        return None, "built"
    return arrays, "forensics cache"


def checked_problem(
    kind: str, arrays: Arrays, problem: Callable[[Arrays], str | None], trusted: bool = False
) -> str | None:
    """`problem(arrays)`, the whole-array range checks, once per version of the files behind
    the memory maps (checked.py); `trusted`: files only this cache writes."""
    paths = [Path(getattr(a, "filename", "") or "") for a in arrays.values()]
    if not all(p.name for p in paths):  # not memory-mapped files: nothing to stamp
        return problem(arrays)
    result = checked_once(kind, paths, lambda: {"problem": problem(arrays)}, trusted=trusted)
    found = result.get("problem")
    return None if found is None else str(found)
