"""Does a skip file's recorded run match the run at hand, and if not, what changed?

A skip list is only valid for the batches it was computed on. The fingerprint a skip file
records (dataloaders' `Replayer.fingerprint`) has three kinds of entries, and a difference in each
means something else to the person about to restart a run:

- content (file sizes, `.idx` hashes, document counts, the last iteration): the data changed,
  the skip list means other batches: refuse, naming the file;
- paths (a prefix, a shard file): when every one of them moved by the same directory and the
  content is unchanged, the run directory moved: the skip list still fits;
- config_hash: also changes with paths and the checkpoint list, neither of which moves a batch.
  `order_hash` (recorded since it was introduced) hashes only what decides the batches, so
  "the checkpoint list changed" is told apart from "the blend changed". For skip files written
  before it, the current config is re-hashed with the old paths put back.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from dataloaders.run_config import RunConfig, payload_hash
from forensics.skip.fingerprint import describe, diff_items

HASHES = ("config_hash", "order_hash")


@dataclass
class RunMatch:
    """The outcome: `refusal` (one line, None when the skip file fits) and notes to print."""

    refusal: str | None = None
    notes: list[str] = field(default_factory=list)
    data_same: bool = True  # the data files are the same (a refusal is about the config only)


def relocation(items: list[tuple[str, Any, Any]]) -> tuple[str, str] | None:
    """(old root, new root) when every differing path is the same relative path under another
    directory, else None."""
    roots = set()
    for _, old, new in items:
        a, b = PurePath(old).parts, PurePath(new).parts
        common = 0
        while common < min(len(a), len(b)) and a[-1 - common] == b[-1 - common]:
            common += 1
        if common == 0:
            return None
        roots.add((str(PurePath(*a[: len(a) - common])), str(PurePath(*b[: len(b) - common]))))
    return roots.pop() if len(roots) == 1 else None


def _moved_back(value: Any, new_root: str, old_root: str) -> Any:
    """`value` (a JSON payload) with every path under new_root put back under old_root."""
    if isinstance(value, dict):
        return {k: _moved_back(v, new_root, old_root) for k, v in value.items()}
    if isinstance(value, list):
        return [_moved_back(v, new_root, old_root) for v in value]
    if isinstance(value, str) and (value == new_root or value.startswith(new_root + os.sep)):
        return old_root + value[len(new_root) :]
    return value


def match_run(recorded: dict[str, Any], now: dict[str, Any], config: RunConfig) -> RunMatch:
    """Compare a skip file's fingerprint with the run's; see the module docstring."""
    items = diff_items(recorded, now)
    # A skip file older than order_hash simply lacks it.
    items = [i for i in items if not (i[0] == "order_hash" and i[1] is ...)]
    if not items:
        return RunMatch()
    hashes = [i for i in items if i[0] in HASHES]
    paths = [
        i
        for i in items
        if isinstance(i[1], str) and isinstance(i[2], str) and os.path.isabs(i[1])
        if os.path.isabs(i[2])
    ]
    content = [i for i in items if i not in hashes and i not in paths]
    if content:
        shown = "; ".join(describe(i) for i in content[:3])
        more = f" (and {len(content) - 3} more)" if len(content) > 3 else ""
        return RunMatch(f"made for another run: the data changed: {shown}{more}", data_same=False)
    moved = relocation(paths) if paths else None
    if paths and moved is None:
        shown = "; ".join(describe(i) for i in paths[:3])
        return RunMatch(
            f"made for another run: its data files are other files: {shown}", data_same=False
        )
    notes = []
    if moved is not None:
        notes.append(
            f"the run directory moved from {moved[0]} to {moved[1]}; the data files are "
            "byte-identical, so the skip list still names the same batches"
        )
    by_name = {i[0]: i for i in hashes}
    if "order_hash" in by_name:
        return RunMatch(_order_refusal(by_name), notes)
    if "config_hash" in by_name and "order_hash" not in recorded:
        payload = config.hash_payload()
        if moved is not None:
            payload = _moved_back(payload, moved[1], moved[0])
        if payload_hash(payload) == recorded.get("config_hash"):
            return RunMatch(None, notes)
        note = _outside_order_note(config, payload, recorded.get("config_hash"))
        if note.startswith("the checkpoint list changed"):
            notes.append(note)
        else:
            return RunMatch(
                "made for another run: the config changed (config_hash: skip file has "
                f"{recorded.get('config_hash')!r}, now {now.get('config_hash')!r}); this skip "
                "file predates the record that tells a changed checkpoint list from a changed "
                "blend, so rerun forensics spike to write it anew",
                notes,
            )
    elif "config_hash" in by_name:
        payload = config.hash_payload()
        if moved is not None:
            payload = _moved_back(payload, moved[1], moved[0])
        if payload_hash(payload) != recorded.get("config_hash"):
            notes.append(_outside_order_note(config, payload, recorded.get("config_hash")))
    return RunMatch(None, notes)


def _outside_order_note(config: RunConfig, payload: dict[str, Any], recorded: Any) -> str:
    """What changed when the data order did not: the checkpoint list when putting an earlier
    one back explains the hash, else the tokenizer or a path."""
    if any(payload_hash(p) == recorded for p in _checkpoint_variants(config, payload)):
        return "the checkpoint list changed since the skip file was made; the batches are the same"
    return (
        "the config changed outside the data order (the checkpoint list, the tokenizer or a "
        "path); the batches are the same"
    )


def _checkpoint_variants(config: RunConfig, payload: dict[str, Any]) -> list[dict[str, Any]]:
    """`payload` with the checkpoint settings a skip file made before order_hash may have been
    written with: no list, the iter_N directories found now, with or without checkpoint_dir."""
    found = config.available_checkpoints()
    lists = [[], found, sorted(set(found) - set(config.checkpoints))]
    dirs = [payload.get("checkpoint_dir"), None]
    return [{**payload, "checkpoints": c, "checkpoint_dir": d} for c in lists for d in dirs]


def _order_refusal(by_name: dict[str, tuple[str, Any, Any]]) -> str:
    """The refusal when the settings that decide the batches changed."""
    shown = describe(by_name.get("config_hash", by_name["order_hash"]))
    return (
        "made for another run: its data-order settings changed (blend, weights, seed, split, "
        f"sequence length or batch schedule; {shown})"
    )


def rollback_refusal(config: RunConfig, iteration: int | None) -> str | None:
    """A refusal when the rollback checkpoint is no longer among the run's checkpoints (only
    when the run lists any: a config without them cannot say)."""
    available = config.available_checkpoints()
    if iteration is None or iteration <= 0 or not available or iteration in available:
        return None
    near = ", ".join(str(c) for c in available[-5:])
    return (
        f"the checkpoint list changed: the rollback checkpoint {iteration} is no longer "
        f"available (now: {near}); rerun forensics spike to choose the rollback again"
    )
