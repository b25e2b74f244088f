"""Where the shards run: `forensics.pipeline.engines` (a process pool here, or Ray Data), with a
shard of iterations as the part: each task runs `shard.scan_shard`, which writes the shard's
Parquet parts itself; a few numbers per shard come back (never text). Returns the shards that
failed for good, so the caller can say exactly what is missing.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from forensics.pipeline.engines import map_parts
from forensics.scan.shard import FAULT_ENV, ShardSummary, scan_shard


def _shard_task(config: Any, parts: str, item: dict[str, Any]) -> dict[str, Any]:
    summary = scan_shard(config, int(item["first"]), int(item["last"]), parts)
    return {"part": item["part"], **summary.to_dict()}


def run_engine(
    engine: str,
    config: Any,
    shards: Sequence[tuple[int, int]],
    parts: Path,
    workers: int,
    on_done: Callable[[ShardSummary], None],
    ray_address: str | None = None,
) -> list[tuple[int, int]]:
    """Scan `shards` on `engine`; `on_done(summary)` as each finishes. `on_done.note`, when
    set, hears why Ray gave up on a shard."""
    items = [{"part": i, "first": a, "last": b} for i, (a, b) in enumerate(shards)]
    env = {FAULT_ENV: os.environ[FAULT_ENV]} if os.environ.get(FAULT_ENV) else {}

    def done(row: dict[str, Any]) -> None:
        on_done(ShardSummary(**{k: row[k] for k in ShardSummary.__dataclass_fields__}))

    failed = map_parts(
        engine,
        functools.partial(_shard_task, config, str(parts)),
        items,
        workers,
        done,
        ray_address,
        env=env,
        on_error=getattr(on_done, "note", None),
    )
    return [(int(i["first"]), int(i["last"])) for i in failed]
