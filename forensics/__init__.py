"""forensics: find the data behind a loss spike, and plan the restart without it.

Done on import, before polars loads: polars' allocator (jemalloc) is asked to hand memory it
has freed back to the system within a second (its default keeps it ten seconds, unreturned
muzzy pages longer). A spike at production scale frees a few hundred MB after each whole-window
step; kept, those look like the process needing them, on a machine shared with the training
job's tooling. A `_RJEM_MALLOC_CONF` already set is left as it is.
"""

import os

os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:1000,muzzy_decay_ms:0")
