"""One rule for every command's outputs: nothing the user has is replaced without `--force`, and
no input of the run (a `.bin`/`.idx`, a manifest, the tokenizer, the config) is ever an output.

Checked before any work, so a refusal costs nothing and leaves every file as it was. The writes
themselves are atomic (dataloaders.atomic): a killed command leaves the old file or none.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from forensics.errors import ForensicsError

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


def check_output_dir(out: Path, names: Iterable[str], *, force: bool) -> None:
    """Refuse a directory `out` that is a file, or (without --force) holds any of `names`."""
    if out.exists() and not out.is_dir():
        raise ForensicsError(f"--out {out}: exists and is not a directory")
    present = [n for n in names if (out / n).exists()]
    if present and not force:
        raise ForensicsError(
            f"--out {out}: already holds {', '.join(present)}; pass --force to replace them, or "
            "choose another directory"
        )
