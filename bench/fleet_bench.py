"""The fleet view's bench: time to build the Parquet store from N report.json files, to query
it (the whole ``postmortem fleet`` view: ranking, tests, evidence, categories, codes, same
cause), and to add a day of 1,000 more reports to it (only those read).

    python -m bench.fleet_bench [--jobs 5000,50000] [--add 1000] [--dir /tmp/fleet-bench] [--keep]

Targets (issue 27): the query over 50,000 jobs under 5 s, adding 1,000 jobs under 10 s. The
reports are written by bench.fleet_generator (not timed); the OS file cache is warm from
writing them, as it is for a cron job that runs after the jobs' epilogs wrote their reports.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from postmortem import fleet
from bench.fleet_generator import FleetSpec, generate_fleet


def bench(n_jobs: int, add: int, root: Path) -> dict:
    nodes = max(100, n_jobs // 10)
    reports, store_dir = root / f"reports-{n_jobs}", root / f"store-{n_jobs}"
    t = time.perf_counter()
    truth = generate_fleet(reports / "base", FleetSpec(jobs=n_jobs, nodes=nodes, lemons=3, seed=1, busy=[7]))
    gen_s = time.perf_counter() - t
    store = fleet.FleetStore(store_dir)
    t = time.perf_counter()
    first = fleet.ingest(store, [reports])
    build_s = time.perf_counter() - t
    t = time.perf_counter()
    view = fleet.fleet_view(store)
    query_s = time.perf_counter() - t
    generate_fleet(reports / "day2", FleetSpec(jobs=add, nodes=nodes, lemons=3, seed=2, busy=[7],
                                               first_id=10_000_000))
    t = time.perf_counter()
    second = fleet.ingest(store, [reports])
    add_s = time.perf_counter() - t
    t = time.perf_counter()
    view2 = fleet.fleet_view(store)
    query2_s = time.perf_counter() - t
    found = sorted(view["drain"]["nodes"]) == truth["lemons"]
    return {"jobs": n_jobs, "nodes": nodes, "generate_s": gen_s, "build_s": build_s, "build": first.timings,
            "query_s": query_s, "add": add, "add_s": add_s, "add_read": second.new_files, "add_detail": second.timings,
            "query_after_add_s": query2_s, "jobs_after_add": view2["summary"]["jobs"], "lemons_found": found,
            "store_mb": sum(p.stat().st_size for p in store_dir.rglob("*.parquet")) / 2**20}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.fleet_bench", description=__doc__.splitlines()[0])
    p.add_argument("--jobs", default="5000,50000", help="comma list of fleet sizes (default 5000,50000)")
    p.add_argument("--add", type=int, default=1000, help="reports added incrementally (default 1000)")
    p.add_argument("--dir", help="work folder (default: a temporary one, removed after)")
    p.add_argument("--keep", action="store_true", help="keep the work folder")
    a = p.parse_args(argv)
    root = Path(a.dir) if a.dir else Path(tempfile.mkdtemp(prefix="fleet-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        print(f"{'jobs':>7} {'nodes':>6} {'build s':>8} {'(scan/read/write)':>20} {'query s':>8} "
              f"{'add ' + str(a.add) + ' s':>10} {'read':>5} {'query after s':>13} {'store MB':>8}  lemons")
        for n in [int(x) for x in a.jobs.split(",") if x.strip()]:
            r = bench(n, a.add, root)
            b = r["build"]
            print(f"{r['jobs']:>7} {r['nodes']:>6} {r['build_s']:>8.2f} "
                  f"{b['scan_s']:>6.2f}/{b['read_s']:>6.2f}/{b['write_s']:>5.2f} {r['query_s']:>8.2f} "
                  f"{r['add_s']:>10.2f} {r['add_read']:>5} {r['query_after_add_s']:>13.2f} {r['store_mb']:>8.1f}  "
                  f"{'found' if r['lemons_found'] else 'NOT FOUND'}", flush=True)
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
