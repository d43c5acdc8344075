"""Benchmark: what a small run's analysis costs in Polars calls, and what one call costs here.

    python -m bench.polars_calls [--sample silent-deadlock-40r] [--top 15] [--json FILE]

A sample's analysis and report are a few thousand eager Polars calls on small frames, and their
count, not the data, sets the time of a small run (and of the test suite, which analyses
hundreds). This prints, measured in the same run:

* the hand-over probe: a filter on a frame of one row (Polars runs it on the calling thread)
  and on 200 rows (Polars hands it to its thread pool and waits), each timed over a few
  thousand calls with the calling thread's voluntary context switches per call, and the ratio;
* the sample's analysis and report (``postmortem.analyzer.pipeline.analyze``, then
  ``build_report``, after one warm-up run), with every Polars query counted and timed where
  the project called it: the total, and the ``--top`` places (file, function) by time.

Queries are counted at Polars' in-memory engine (``DataFrame`` methods and ``LazyFrame.collect``
both end there); a Polars without that engine class says so and counts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _switches() -> int | None:
    """The calling thread's voluntary context switches (Linux); None elsewhere."""
    try:
        status = Path(f"/proc/self/task/{threading.get_native_id()}/status").read_text()
    except OSError:
        return None
    return int(status.split("voluntary_ctxt_switches:")[1].split()[0])


def hand_over_probe(calls: int = 3000) -> dict:
    import polars as pl

    out = {}
    for rows in (1, 200):
        frame = pl.DataFrame({"a": list(range(rows)), "b": list(range(rows))})
        keep = pl.col("a") >= 0
        frame.filter(keep)
        before, started = _switches(), time.perf_counter()
        for _ in range(calls):
            frame.filter(keep)
        per_call = (time.perf_counter() - started) / calls
        after = _switches()
        out[f"filter_{rows}_rows_us"] = round(per_call * 1e6, 1)
        out[f"filter_{rows}_rows_switches"] = None if before is None else round((after - before) / calls, 2)
    out["ratio"] = round(out["filter_200_rows_us"] / out["filter_1_rows_us"], 2)
    return out


class CallCounter:
    """Every query of Polars' in-memory engine, counted and timed by the project's function
    that made it (the first frame outside Polars)."""

    def __init__(self):
        self.calls: Counter = Counter()
        self.seconds: Counter = Counter()
        self.engine = None
        try:
            from polars.lazyframe import engine_config
            self.engine = type(engine_config._eager_engine())
        except (ImportError, AttributeError):
            return
        self._real = self.engine.collect

    def __enter__(self):
        if self.engine is None:
            return self
        real, calls, seconds, lock = self._real, self.calls, self.seconds, threading.Lock()

        def collect(engine, frame, **options):
            caller = sys._getframe(1)
            while caller is not None and f"{os.sep}polars{os.sep}" in caller.f_code.co_filename:
                caller = caller.f_back
            place = ("?", "?") if caller is None else (_short(caller.f_code.co_filename), caller.f_code.co_name)
            started = time.perf_counter()
            try:
                return real(engine, frame, **options)
            finally:
                with lock:    # the parse threads query too
                    seconds[place] += time.perf_counter() - started
                    calls[place] += 1

        self.engine.collect = collect
        return self

    def __exit__(self, *exc):
        if self.engine is not None:
            self.engine.collect = self._real


def _short(filename: str) -> str:
    path = Path(filename)
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def count_calls(folder: Path, top: int) -> dict:
    os.environ["POSTMORTEM_CACHE"] = "off"
    from postmortem.analyzer.pipeline import analyze
    from postmortem.rules.report import build_report

    build_report(analyze([folder]))     # imports, rule modules and the regex caches warm
    with CallCounter() as counter:
        started = time.perf_counter()
        run = analyze([folder])
        analysed = time.perf_counter()
        build_report(run)
        finished = time.perf_counter()
    if counter.engine is None:
        return {"counted": False}
    places = sorted(counter.seconds, key=counter.seconds.get, reverse=True)[:top]
    return {"counted": True, "analyze_s": round(analysed - started, 3), "report_s": round(finished - analysed, 3),
            "calls": sum(counter.calls.values()), "seconds_in_calls": round(sum(counter.seconds.values()), 3),
            "top": [{"place": f"{file}:{name}", "calls": counter.calls[(file, name)],
                     "ms": round(counter.seconds[(file, name)] * 1000, 1)} for file, name in places]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.polars_calls", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sample", default="silent-deadlock-40r",
                        help="a folder of sample_logs/ or any job folder (default: silent-deadlock-40r)")
    parser.add_argument("--top", type=int, default=15, help="how many places to list (default 15)")
    parser.add_argument("--json", type=Path, help="also write the numbers to this file")
    args = parser.parse_args(argv)
    folder = Path(args.sample)
    if not folder.is_dir():
        folder = ROOT / "sample_logs" / args.sample
    if not folder.is_dir():
        parser.error(f"no such folder: {args.sample}")
    result = {"probe": hand_over_probe(), "sample": folder.name, **count_calls(folder, args.top)}
    probe = result["probe"]
    print(f"filter, 1 row (in place): {probe['filter_1_rows_us']} us, {probe['filter_1_rows_switches']} switches a call")
    print(f"filter, 200 rows (pool):  {probe['filter_200_rows_us']} us, {probe['filter_200_rows_switches']} switches a call"
          f"  ({probe['ratio']}x)")
    if not result["counted"]:
        print("this Polars has no in-memory engine class to count at: calls not counted")
    else:
        print(f"{folder.name}: analyze {result['analyze_s']} s, report {result['report_s']} s, "
              f"{result['calls']:,} Polars calls, {result['seconds_in_calls']} s in them")
        for row in result["top"]:
            print(f"  {row['calls']:6,} calls {row['ms']:8.1f} ms  {row['place']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
