"""One rule for every command's outputs: nothing the user has is replaced without `--force`, and
no input of the run (a `.bin`/`.idx`, a manifest, the tokenizer, the config) is ever an output.

Checked before any work, so a refusal costs nothing and leaves every file as it was. The writes
themselves are atomic (dataloaders.atomic): a killed command leaves the old file or none.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from forensics.errors import ForensicsError
from forensics.file_lock import try_lock
from forensics.publish_set import publish as publish_set

# Lock files this process holds, by folder (see hold_lock / fresh_output).
_HELD: dict[Path, Any] = {}

# Files a training run reads: never an output, whatever --force says.
RUN_INPUT_SUFFIXES = (".bin", ".idx", ".yaml", ".yml", ".npy")


def run_inputs(config: Any) -> list[Path]:
    """Every file a run config points at (its own file, data prefixes' .bin/.idx, manifests,
    the tokenizer, the log), found by walking the config's fields."""
    found: list[Path] = []

    def walk(value: Any, key: str = "") -> None:
        if isinstance(value, Path):
            found.append(value)
            if key == "prefix":
                found.extend([Path(f"{value}.bin"), Path(f"{value}.idx")])
        elif isinstance(value, BaseModel):
            for name in type(value).model_fields:
                if name == "prefix" and getattr(value, "remote", None):
                    continue  # in object storage: its local .idx is a cache, pinned by ETag
                walk(getattr(value, name), name)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item, key)

    walk(config)
    if getattr(config, "source", None) is not None:
        found.append(config.source)
    return found


def check_output_file(
    out: Path, *, force: bool, inputs: Iterable[Path] = (), suffix: str | None = None
) -> None:
    """Refuse `out` when it is an input, a run's data file, a directory, or (without --force) an
    existing file."""
    if suffix is not None and not out.name.endswith(suffix):
        raise ForensicsError(f"--out {out}: must be a {suffix} file")
    if out.name.endswith(RUN_INPUT_SUFFIXES) or out.name == "tokenizer.json":
        raise ForensicsError(f"--out {out}: a training run's data or config file, never an output")
    target = out.resolve()
    for path in inputs:
        if Path(path).resolve() == target:
            raise ForensicsError(f"--out {out}: is an input of this run; choose another path")
    if out.is_dir():
        raise ForensicsError(f"--out {out}: is a directory; give a file path")
    if out.exists() and not force:
        raise ForensicsError(f"--out {out}: already exists; pass --force to replace it")


def check_printable_path(out: Path) -> None:
    """An output folder's path lands in shell lines and in the text files written there (the
    restart lines, `# FIRST: forensics rebuild ...`): a newline or other control character in
    it would break a line in two even when quoted, so it is refused."""
    import unicodedata

    bad = [c for c in str(out) if unicodedata.category(c) in ("Cc", "Zl", "Zp")]
    if bad:
        raise ForensicsError(
            f"--out {str(out)!r}: holds a control character ({bad[0]!r}); choose a printable path"
        )


def check_output_dir(out: Path, names: Iterable[str], *, force: bool) -> None:
    """Refuse a directory `out` that is a file, whose path holds a control character, or
    (without --force) holds any of `names`."""
    check_printable_path(out)
    if out.exists() and not out.is_dir():
        raise ForensicsError(f"--out {out}: exists and is not a directory")
    present = [n for n in names if (out / n).exists()]
    if present and not force:
        raise ForensicsError(
            f"--out {out}: already holds {', '.join(present)}; pass --force to replace them, or "
            "choose another directory"
        )


def hold_lock(folder: Path, what: str) -> Any:
    """An exclusive lock on `folder` for this process's lifetime (the returned file): a second
    command writing into the same folder is refused instead of interleaving its files."""
    folder.mkdir(parents=True, exist_ok=True)
    handle = try_lock(folder / "lock")
    if handle is None:
        raise ForensicsError(
            f"{folder.parent}: another {what} is writing into it right now; wait for it or "
            "choose another --out"
        )
    _HELD[folder.resolve()] = handle
    return handle


@contextmanager
def fresh_output(out: Path, lock: Path) -> Iterator[None]:
    """Leave nothing new when a command writing `out` fails or is interrupted.

    An output directory that did not exist before the command and holds nothing published
    (only `lock`: the run's lock file, or a folder holding its `lock` and cache) is removed
    again, so SIGINT, SIGTERM or an error leaves either the old complete output or nothing.
    Only when this process can take the lock: a directory another run is writing into is never
    touched.
    """
    existed = out.exists()
    try:
        yield
    except BaseException:
        if not existed:
            _remove_unpublished(out, lock)
        raise


def _remove_unpublished(out: Path, lock: Path) -> None:
    """Remove `out` when it holds only `lock` and nobody else holds the lock (looked at under
    the lock: another run may publish and release in between)."""
    if not out.is_dir():
        return
    lock_file = lock / "lock" if lock.is_dir() else lock
    own = _HELD.pop(lock.resolve(), None)
    if own is not None:
        own.close()  # ours: released here, re-taken below like anyone else's
    handle = try_lock(lock_file) if lock_file.exists() else None
    if lock_file.exists() and handle is None:
        return  # another run is writing into it
    try:
        if all(p.name == lock.name for p in out.iterdir()):
            shutil.rmtree(out, ignore_errors=True)
    finally:
        if handle is not None:
            handle.close()


def publish(staging: Path, out: Path, patterns: Iterable[str]) -> list[Path]:
    """Move `staging`'s files into `out` as one set under a journal, so that no kill (SIGKILL
    included) leaves a mix that goes unnoticed (forensics.publish_set)."""
    return publish_set(staging, out, patterns)
