"""The memory budget: what one analysis may hold, all its processes together.

``POSTMORTEM_MEMORY`` (default 4 GiB: a quarter of a 16 GB laptop, leaving the rest to the
desktop, a browser and the page cache) sizes every bound that memory depends on, so that peak
memory is set by the budget and not by the size of the inputs (docs/security.md):

* ``full_parse_bytes``: how many bytes of large logs are parsed line by line into the in-memory
  models; past it, the middle of large logs is *skimmed* (``postmortem.analyzer.ingest.plan_skim``): every
  line is kept in the store, but only the lines that look like failures go through the parsers;
* ``whole_file_bytes``: the largest input read whole (a Kineto trace, a Flight Recorder dump);
* ``db_memory``: DuckDB's own cap (``POSTMORTEM_DB_MEMORY`` overrides it);
* ``workers``: worker processes, each about ``WORKER_BYTES`` at its peak.

Line length (``POSTMORTEM_MAX_LINE_BYTES``, 1 MiB) and decompression (streamed into a scratch
folder capped per run) do not depend on it. The numbers were measured (README, bench/memory_bench.py).
"""

from __future__ import annotations

import os
import re

DEFAULT = 4 << 30
MINIMUM = 512 << 20
WORKER_BYTES = 512 << 20
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 1000 ** 2, "mib": 1 << 20,
          "g": 1 << 30, "gb": 1000 ** 3, "gib": 1 << 30, "t": 1 << 40, "tb": 1000 ** 4, "tib": 1 << 40}


def parse_size(text: str) -> int | None:
    """``4GiB``, ``4G``, ``4096MB``, ``512m``, ``4294967296`` -> bytes; None when unreadable."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text or "")
    if not match or match.group(2).lower() not in _UNITS:
        return None
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def memory() -> int:
    """The budget in bytes (``POSTMORTEM_MEMORY``; at least 512 MiB)."""
    value = parse_size(os.environ.get("POSTMORTEM_MEMORY", ""))
    return max(MINIMUM, value) if value else DEFAULT


def full_parse_bytes() -> int:
    """Bytes of large logs parsed line by line (a twentieth of the budget: parsed lines and their
    rows take 10-12 times their size at the peak, measured)."""
    return memory() // 20


def whole_file_bytes() -> int:
    """The largest input read whole (JSON traces and dumps take about 10 times their size)."""
    return memory() // 16


def kept_tables_bytes() -> int:
    """The analysis's frames kept after it wrote them, for the report to read without a query of
    the store (``postmortem.analyzer.pipeline.Run.written``): a quarter of the budget.

    A table the report reads and that was not kept is read back whole, a second copy beside
    DuckDB's result: with a sixteenth, the 10,000-rank run read back its events, stacks,
    settings and progress (600 MB, 1.8 s) and peaked at 4,200 MiB in the rules, against 3,677
    MiB and 0.7 s less with a quarter (the 535 MB log: 3,010 -> 2,636 MiB)."""
    return memory() // 4


def held_tables_bytes() -> int:
    """What a run held open after its report (the terminal UI) keeps of those frames: a
    sixteenth of the budget. With a quarter, the 10,000-rank run's UI held 2,161 MiB at its
    verdict instead of 1,222."""
    return memory() // 16


def db_memory() -> str:
    """DuckDB's memory cap: ``POSTMORTEM_DB_MEMORY``, else an eighth of the budget."""
    return os.environ.get("POSTMORTEM_DB_MEMORY") or f"{max(128, memory() // 8 >> 20)}MB"


def workers(cores: int) -> int:
    """Parsing jobs (threads, or worker processes) the budget allows beside this process, which
    keeps half of it."""
    return max(1, min(cores, (memory() // 2) // WORKER_BYTES))
