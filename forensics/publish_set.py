"""Publishing an output set (a spike's, a rebuild's, a triage's) so that no kill leaves a mix.

The set is staged in full in `<state>/staging/` (`<state>` is the command's state folder inside
the output folder: `.cache`, `.triage`), then moved into place under a journal:

1. `<state>/publish.json` is written: the names staged (`new`) and the earlier outputs this
   publish moves away (`aside`: files it replaces and stale files of an earlier run). Written
   only once the staged set is complete, it is the set's commit record: from here on the new
   set is the one the folder will hold.
2. every `aside` file is moved into `<state>/staging.replaced/`, then every staged file into
   the output folder (renames within one filesystem);
3. the journal is removed, then the replaced files.

SIGINT and SIGTERM wait until step 3 is done. A SIGKILL (an OOM kill, a preemption) cannot be
waited for: it can leave the output folder holding part of each set. The journal then says so,
and every command that writes or reads the folder looks at it first: a writer finishes the
publish (`finish_interrupted_publish`: the moves it did not do, from the journal) and says so in
one line, so the folder holds the killed run's complete set; a reader refuses in one line
(`refuse_if_mid_publish`). No journal means no publish was under way: the set is whole.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from dataloaders.atomic import write_json_atomic
from forensics.errors import ForensicsError
from forensics.fault_points import fault_point
from forensics.file_lock import try_lock

JOURNAL = "publish.json"
# Every state folder a command publishes from (spike and rebuild: .cache; triage: .triage).
STATE_FOLDERS = (".cache", ".triage")


def publish(staging: Path, out: Path, patterns: Iterable[str]) -> list[Path]:
    """Move every file of `staging` into `out` as one set, and remove the outputs of an earlier
    run (files in `out` matching `patterns`) that this run did not write.

    A staged folder (a rebuilt stream) replaces an earlier one of its name; an earlier folder is
    stale only when a pattern names it exactly. A full disk fails while staging, before
    anything is moved.
    """
    new = sorted(p.name for p in staging.iterdir())
    stale = sorted(
        {
            p.name
            for pattern in patterns
            for p in out.glob(pattern)
            if p.name not in new and (p.is_file() or (p.is_dir() and p.name == pattern))
        }
    )
    present = [n for n in new if (out / n).exists() or (out / n).is_symlink()]
    aside = _aside(staging)
    shutil.rmtree(aside, ignore_errors=True)
    journal = staging.parent / JOURNAL
    with _signals_deferred():
        write_json_atomic(journal, {"new": new, "aside": present + stale})
        fault_point("publish-start")
        if present or stale:
            aside.mkdir()
        for name in present + stale:
            os.replace(out / name, aside / name)
        for i, name in enumerate(new):
            os.replace(staging / name, out / name)
            if i == 0:
                fault_point("publish")
        fault_point("publish-end")
        _close(staging, journal, aside)
    return [out / name for name in new]


def _aside(staging: Path) -> Path:
    """Where the replaced files wait until the new set is in place."""
    return staging.with_name(staging.name + ".replaced")


def _close(staging: Path, journal: Path, aside: Path) -> None:
    """The set is in place: the journal goes (the commit), then what it replaced."""
    staging.rmdir()
    journal.unlink()
    shutil.rmtree(aside, ignore_errors=True)


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM held until the block ends, then delivered to the program's handler.
    Python runs signal handlers in the main thread: a thread mask would not do (another thread,
    torch's or rich's, would take the signal instead)."""
    deferred: list[int] = []
    main = threading.current_thread() is threading.main_thread()
    saved = (
        {
            sig: signal.signal(sig, lambda n, _f: deferred.append(n))
            for sig in (signal.SIGINT, signal.SIGTERM)
        }
        if main
        else {}
    )
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        for sig in deferred:
            os.kill(os.getpid(), sig)  # now, to the handler the program had


def interrupted_journal(out: Path) -> Path | None:
    """The journal of a publish into `out` that a kill interrupted, or None."""
    for state in STATE_FOLDERS:
        journal = out / state / JOURNAL
        if journal.is_file():
            return journal
    return None


def refuse_if_mid_publish(folder: Path, name: str | None = None) -> None:
    """A reader's check: `folder` (holding the file the reader was given, `name`) must not be a
    set whose publish was interrupted, since its files may come from two runs. With `name`,
    only when the interrupted set holds that file (a run config beside a spike's outputs is
    not one of them)."""
    journal = interrupted_journal(folder)
    if journal is not None and name is not None:
        try:
            entry = json.loads(journal.read_text(encoding="utf-8"))
            listed = {str(n) for k in ("new", "aside") for n in entry.get(k, [])}
        except (OSError, ValueError, AttributeError, TypeError):
            listed = {name}  # unreadable: assume the worst
        if name not in listed:
            journal = None
    if journal is not None:
        raise ForensicsError(
            f"{folder}: a forensics command was killed while publishing into it ({journal} "
            f"remains), so its files may mix two runs; run the command that writes there again "
            "with the same --out: it finishes the publish first"
        )


def finish_interrupted_publish(out: Path, state: Path, *, force: bool = False) -> bool:
    """A writer's first step (under the folder's lock): finish a publish into `out` that a kill
    interrupted, from `state`'s journal, so the folder holds the killed run's complete set.

    True when there was one (and one line on stderr says so). When its staged files are gone
    the set cannot be finished: refused in one line unless `force` (the run about to publish
    replaces every output of the set anyway)."""
    journal = state / JOURNAL
    if not journal.is_file():
        return False
    staging = state / "staging"
    entry = _read_journal(journal)
    lost = [n for n in entry["new"] if not _exists(staging / n) and not _exists(out / n)]
    if lost and not force:
        raise ForensicsError(
            f"{out}: a forensics command was killed while publishing into it and its staged "
            f"files are gone ({lost[0]}); the folder may mix two runs: pass --force to replace "
            "the whole set"
        )
    if not lost:
        _roll_forward(out, staging, entry)
    _close_leftovers(staging, journal, _aside(staging))
    if not lost:
        print(
            f"note: {out}: the previous command was killed while publishing; its complete "
            "output set was moved into place from its staging folder",
            file=sys.stderr,
        )
    return True


def _read_journal(journal: Path) -> dict[str, list[str]]:
    """The journal's two name lists; anything else is refused (it is ours, never edited)."""
    try:
        data = json.loads(journal.read_text(encoding="utf-8"))
        entry = {k: [str(n) for n in data[k]] for k in ("new", "aside")}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ForensicsError(
            f"{journal}: an interrupted publish's journal that cannot be read ({err}); remove it "
            "and rerun with --force"
        ) from None
    if any("/" in n or n in ("", ".", "..") for names in entry.values() for n in names):
        raise ForensicsError(f"{journal}: names a path outside its folder; not ours")
    return entry


def _exists(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def _roll_forward(out: Path, staging: Path, entry: dict[str, list[str]]) -> None:
    """Do the moves the killed publish did not: every replaced file aside (a name the set also
    stages is still the old file while its new one waits in staging), then every staged file
    into place."""
    aside = _aside(staging)
    for name in entry["aside"]:
        old_in_place = name not in entry["new"] or _exists(staging / name)
        if old_in_place and _exists(out / name) and not _exists(aside / name):
            aside.mkdir(exist_ok=True)
            os.replace(out / name, aside / name)
    for name in entry["new"]:
        if _exists(staging / name):
            os.replace(staging / name, out / name)


def _close_leftovers(staging: Path, journal: Path, aside: Path) -> None:
    shutil.rmtree(staging, ignore_errors=True)
    journal.unlink()
    shutil.rmtree(aside, ignore_errors=True)


def finish_before_writing(out: Path, state: Path, what: str, *, force: bool = False) -> None:
    """`finish_interrupted_publish` under the folder's lock, taken for the moment it needs: a
    journal beside a live lock is a publish under way, and that command's to finish."""
    if not (state / JOURNAL).is_file():
        return
    handle = try_lock(state / "lock")
    if handle is None:
        raise ForensicsError(
            f"{out}: another {what} is writing into it right now; wait for it or choose another "
            "--out"
        )
    try:
        finish_interrupted_publish(out, state, force=force)
    finally:
        handle.close()
