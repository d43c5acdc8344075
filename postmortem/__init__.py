"""postmortem: the front ends (command line, reports, exports, the generator); the layers below are
subpackages mapped from the top-level folders (docs/architecture.md)."""

import os as _os

# Polars' allocator (its own jemalloc) hands freed pages back to the system within moments, and
# parsing allocates about the same again for every chunk: faulting them in anew was a fifth of
# the time of a COLL-traced run (system time 6.1 s of 30 CPU-seconds on 871 MB). Kept 5 s, the
# 64-rank COLL run's ingest took 15.4 s instead of 17.8, for 210 MB more at the peak (30 s kept
# them all: 13.8 s, 580 MB more). jemalloc reads this once, when Polars loads: it is set here,
# before any module of the package imports Polars. A value in the environment wins.
MALLOC_CONF = "dirty_decay_ms:5000,muzzy_decay_ms:5000"
_os.environ.setdefault("_RJEM_MALLOC_CONF", MALLOC_CONF)
