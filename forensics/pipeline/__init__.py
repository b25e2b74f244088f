"""What every pipeline stage shares: a cache keyed by the stage's inputs, and a clock.

A stage is a function of tables that returns one table. `cached_table` runs it only when no
earlier run wrote its output under the same key; `StageClock` times it and shows it running.
`forensics spike`, `forensics scan` and `forensics rescore` are lists of such stages.
"""

from forensics.pipeline.cache import (
    cache_key,
    cached_bytes,
    cached_file,
    cached_scan,
    cached_table,
    content_digest,
    module_version,
)
from forensics.pipeline.clock import StageClock

__all__ = ["StageClock", "cache_key", "cached_bytes", "cached_file", "cached_scan",
           "cached_table",
           "content_digest", "module_version"]  # fmt: skip
