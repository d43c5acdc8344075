"""Benchmark: read a large nsys export (1M kernels by default) into Polars.

    python -m bench.nsys_bench [--kernels 1000000] [--keep PATH]

Generates one rank's export with ``postmortem.generator.rungen.nsys`` (rows made inside SQLite), then runs
``postmortem.parsers.nsys.read`` and, for scale, a plain ``SELECT count(*)`` scan and a straightforward
``fetchall()`` of the kernel table into Python tuples, measured in the same run. Prints
kernels/s and the peak RSS of the process. ``postmortem.parsers.nsys`` holds no row as a Python object:
sqlite3 returns one string per column per chunk (``tests/test_nsys_kineto.py`` checks the code
path at 50k kernels; no test asserts a wall-clock time).
"""

from __future__ import annotations

import argparse
import resource
import sqlite3
import tempfile
import time
from pathlib import Path

from postmortem.generator.rungen.nsys import write_nsys_export
from postmortem.parsers import nsys


def generate(path: str | Path, kernels: int = 1_000_000) -> Path:
    """An export with about ``kernels`` kernels (10 compute + 1 NCCL per step)."""
    steps = max(1, kernels // 11)
    compute = max(1, kernels // steps - 1)
    return write_nsys_export(path, rank=0, world=8, steps=steps, compute_per_step=compute, late_rank=None)


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(kernels: int, keep: str | None = None) -> dict:
    folder = Path(keep).parent if keep else Path(tempfile.mkdtemp(prefix="nsys_bench_"))
    path = Path(keep) if keep else folder / "rank_0.sqlite"
    t = time.perf_counter()
    generate(path, kernels)
    t_gen = time.perf_counter() - t
    con = sqlite3.connect(path)
    t = time.perf_counter()
    n = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    t_count = time.perf_counter() - t
    rss_before = _rss_mib()
    t = time.perf_counter()
    tables, _ = nsys.read(path)
    t_read = time.perf_counter() - t
    rss_read = _rss_mib()
    t = time.perf_counter()
    rows = con.execute('SELECT start, "end", deviceId, streamId, correlationId, globalPid, shortName '
                       "FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
    t_tuples = time.perf_counter() - t
    del rows
    con.close()
    result = {"kernels": n, "generate_s": round(t_gen, 2), "count_scan_s": round(t_count, 3),
              "nsys_read_s": round(t_read, 2), "kernels_per_s": int(n / t_read) if t_read else None,
              "fetchall_tuples_s": round(t_tuples, 2), "peak_rss_mib_after_read": round(rss_read, 1),
              "peak_rss_mib_before_read": round(rss_before, 1),
              "tables": {k: v.height for k, v in tables.items()}, "file_mib": round(path.stat().st_size / 2**20, 1)}
    if not keep:
        path.unlink()
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernels", type=int, default=1_000_000)
    p.add_argument("--keep", help="write the export here and keep it")
    a = p.parse_args()
    r = run(a.kernels, a.keep)
    for key, value in r.items():
        print(f"{key:26} {value}")
    print(f"(nsys.read vs fetchall of 7 columns into tuples: {r['nsys_read_s']} s vs {r['fetchall_tuples_s']} s; "
          f"the read also joins names, launches, NVTX, memcpy and memory)")


if __name__ == "__main__":
    main()
