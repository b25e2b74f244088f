"""Whole-file checks done once per file version, not on every open.

Opening a dataset or a cached index checks whole arrays (an `.idx`'s pointers against its
lengths, a cached shuffle index's range) and hashes the `.idx`: work proportional to the
files, not to the window a replay reads. A stamp in our cache records that a check passed
(and its result, such as the digest) for one version of the files, named by their inode, size,
mtime and ctime; a file rewritten in place, copied or touched gets another version and is
checked again. ctime cannot be set back by a user (`os.utime` sets it to now), so restoring an
mtime after a rewrite does not fool it.

A file changed twice within one tick of the filesystem's clock keeps its version (the
"racily clean" case git's index handles the same way, Documentation/technical/racy-git.txt):
a stamp is written only for files last changed at least `SETTLE_SECONDS` before the check
started, except for the files we wrote ourselves (our cache's arrays: `trusted`).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from dataloaders.cache_dir import forensics_cache

SETTLE_SECONDS = 2.0
clock = time.time  # when a check starts (a test moves it past SETTLE_SECONDS)


def versions(paths: list[Path]) -> list[list[int]] | None:
    """(inode, size, mtime_ns, ctime_ns) of each file, or None when one cannot be read."""
    try:
        stats = [os.stat(p) for p in paths]
    except OSError:
        return None
    return [[s.st_ino, s.st_size, s.st_mtime_ns, s.st_ctime_ns] for s in stats]


def _stamp_file(kind: str, paths: list[Path]) -> Path:
    names = json.dumps([os.path.realpath(p) for p in paths])
    digest = hashlib.md5(names.encode(), usedforsecurity=False).hexdigest()
    return forensics_cache("megatron", "checked") / f"{kind}-{digest}.json"


def read_stamp(kind: str, paths: list[Path]) -> dict[str, Any] | None:
    """What the last passing check of these files recorded, if they have not changed since."""
    now = versions(paths)
    if now is None:
        return None
    try:
        stamp = json.loads(_stamp_file(kind, paths).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(stamp, dict) or stamp.get("versions") != now:
        return None
    result = stamp.get("result")
    return result if isinstance(result, dict) else None


def write_stamp(
    kind: str,
    paths: list[Path],
    result: dict[str, Any],
    seen: list[list[int]] | None,
    started: float,
    *,
    trusted: bool = False,
) -> None:
    """Record that the check of `paths` passed with `result`. `seen`: the files' versions
    when the check started (a file changed during the check gets no stamp); `started`:
    clock() then. A read-only cache is not an error: the next open checks again."""
    now = versions(paths)
    if seen is None or now != seen:
        return
    settled = started * 1e9 - SETTLE_SECONDS * 1e9
    if not trusted and any(max(v[2], v[3]) > settled for v in now):
        return  # changed moments ago: a second change in the same clock tick would not show
    target = _stamp_file(kind, paths)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.stem}.", dir=target.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump({"paths": [str(p) for p in paths], "versions": now, "result": result}, out)
        os.replace(tmp, target)
    except OSError:
        return


def checked_once(
    kind: str, paths: list[Path], check: Any, *, trusted: bool = False
) -> dict[str, Any]:
    """`check()` (a dict of results; it raises or returns {"problem": ...} when the files are
    bad) unless a stamp says it passed on these very file versions; passing results are
    stamped."""
    cached = read_stamp(kind, paths)
    if cached is not None:
        return cached
    started, seen = clock(), versions(paths)
    result = check()
    if result.get("problem") is None:
        write_stamp(kind, paths, result, seen, started, trusted=trusted)
    return result
