"""Benchmark: the terminal UI on a generated 1,024-rank run.

    python -m bench.tui_bench [--ranks 1024] [--iterations 10] [--repeats 10] [--keep DIR] [--json FILE]
    python -m bench.tui_bench --db STORE      (the UI part alone, on a store kept with --keep)

Generates a deadlock run with ``postmortem.generator`` (``--ranks`` / 8 nodes x 8 GPUs, periodic
c10d work updates during a 30-minute hang, fewer training iterations than the samples so that
the 2-core CI machine writes it in reasonable time), ingests it into a store (``analyze`` +
``build_report``, as ``postmortem ingest`` does), then opens ``PostmortemApp`` headless at
120x40 and measures:

* the time to the first painted screen (the verdict), from opening the store;
* the time to open the timeline (key ``2`` until its lanes are drawn: the store is read in a
  worker thread);
* per timeline key press (zoom in/out, pan, cursor, next/previous mark, next error, collapse
  and expand, lane and page moves): the median and the max over ``--repeats`` presses, each
  measured from the key to the end of the repaint that follows it (``pilot.press`` then
  ``pilot.pause``).

Prints a table (and writes the numbers as JSON with ``--json``). The run goes into a temporary folder that is
removed afterwards unless ``--keep DIR`` (then DIR/run and DIR/run.duckdb stay).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

GPUS_PER_NODE = 8

KEYS = [  # (what, key); the first is bound to nothing: the cost of a press and a repaint alone
    ("unbound key (baseline)", "x"),
    ("zoom in", "plus"), ("zoom out", "minus"), ("pan right", "right_square_bracket"),
    ("pan left", "left_square_bracket"), ("cursor right", "right"), ("cursor left", "left"),
    ("next mark", "n"), ("previous mark", "p"), ("next error/timeout", "e"), ("lane down", "down"),
    ("page down", "pagedown"), ("page up", "pageup"), ("collapse/expand all", "c"), ("fit all", "0"),
]


def generate(out: Path, ranks: int, iterations: int) -> dict:
    from postmortem.generator import RunSpec, generate_run

    nodes = max(1, ranks // GPUS_PER_NODE)
    spec = RunSpec(nodes=nodes, gpus_per_node=GPUS_PER_NODE, scenario="deadlock", culprit=ranks // 2 + 1,
                   work_updates=True, hang_duration_s=1800, timeout_s=36000,
                   iterations_before_hang=iterations, pyspy=False)
    generate_run(out, spec)
    return {"nodes": nodes, "gpus_per_node": GPUS_PER_NODE, "culprit": spec.culprit,
            "iterations_before_hang": iterations, "hang_duration_s": spec.hang_duration_s}


def ingest(run_dir: Path, db: Path) -> None:
    from postmortem.analyzer.pipeline import analyze
    from postmortem.rules.report import build_report

    run = analyze([run_dir], db_path=db)
    build_report(run)
    run.con.close()


def _stats(samples: list[float]) -> dict:
    return {"median_ms": round(statistics.median(samples) * 1000, 2), "max_ms": round(max(samples) * 1000, 2),
            "n": len(samples)}


async def _drive(db: Path, repeats: int) -> dict:
    from postmortem.tui.app import PostmortemApp
    from postmortem.tui.session import open_store

    out: dict = {}
    t = time.perf_counter()
    app = PostmortemApp(session=open_store(db), start="verdict")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        out["first_screen_s"] = round(time.perf_counter() - t, 3)
        out["first_screen"] = type(app.screen).__name__
        t = time.perf_counter()
        await pilot.press("2")
        for _ in range(6000):
            if getattr(app.screen, "loaded", False):
                break
            await pilot.pause(0.01)
        await pilot.pause()
        out["open_timeline_s"] = round(time.perf_counter() - t, 3)
        lanes = app.screen.lanes
        out["rows"] = len(lanes.rows)
        out["marks"] = lanes.data.n_marks
        out["culprit_on_screen"] = any(r.culprit and r.kind == "rank" for r in lanes.visible_rows())
        keys = {}
        for what, key in KEYS:
            samples = []
            for _ in range(repeats):
                t = time.perf_counter()
                await pilot.press(key)
                await pilot.pause()
                samples.append(time.perf_counter() - t)
            keys[what] = {"key": key} | _stats(samples)
        # one full repaint of the visible lanes, without Textual's event loop around it
        samples = []
        for _ in range(repeats):
            lanes._cells.clear()
            t = time.perf_counter()
            for y in range(lanes.size.height):
                lanes.render_line(y)
            samples.append(time.perf_counter() - t)
        keys["repaint visible lanes (render_line only)"] = {"key": "-"} | _stats(samples)
        out["keys"] = keys
    return out


def run(ranks: int, iterations: int, repeats: int, keep: str | None) -> dict:
    folder = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="tui_bench_"))
    folder.mkdir(parents=True, exist_ok=True)
    run_dir, db = folder / "run", folder / "run.duckdb"
    result: dict = {"ranks": ranks}
    try:
        if run_dir.exists():
            shutil.rmtree(run_dir)
        if db.exists():
            db.unlink()
        t = time.perf_counter()
        result["spec"] = generate(run_dir, ranks, iterations)
        result["generate_s"] = round(time.perf_counter() - t, 2)
        result["run_mb"] = round(sum(p.stat().st_size for p in run_dir.rglob("*") if p.is_file()) / 1e6, 1)
        t = time.perf_counter()
        ingest(run_dir, db)
        result["ingest_s"] = round(time.perf_counter() - t, 2)
        result["store_mb"] = round(db.stat().st_size / 1e6, 1)
        result |= asyncio.run(_drive(db, repeats))
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
    return result


def table(result: dict) -> str:
    if "spec" in result:
        lines = [f"ranks {result['ranks']} ({result['spec']['nodes']} nodes x {result['spec']['gpus_per_node']}), "
                 f"run {result['run_mb']} MB, store {result['store_mb']} MB, {result['marks']} marks on "
                 f"{result['rows']} rows",
                 f"generate            {result['generate_s']:>8.2f} s",
                 f"ingest + rules      {result['ingest_s']:>8.2f} s"]
    else:
        lines = [f"store {result['store']} ({result['store_mb']} MB), {result['marks']} marks on {result['rows']} rows"]
    lines += [f"first screen        {result['first_screen_s']:>8.3f} s  ({result['first_screen']})",
             f"open the timeline   {result['open_timeline_s']:>8.3f} s  (culprit on screen: "
             f"{result['culprit_on_screen']})",
             "", f"{'timeline key':<42}{'key':<22}{'median ms':>10}{'max ms':>10}"]
    for what, s in result["keys"].items():
        lines.append(f"{what:<42}{s['key']:<22}{s['median_ms']:>10.2f}{s['max_ms']:>10.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.tui_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--iterations", type=int, default=10, help="training iterations before the hang")
    ap.add_argument("--repeats", type=int, default=10, help="presses per key")
    ap.add_argument("--keep", metavar="DIR", help="write the run and its store here and keep them")
    ap.add_argument("--db", metavar="FILE", help="measure the UI on this existing store (no generation, no ingest)")
    ap.add_argument("--json", metavar="FILE", help="also write the numbers here as JSON")
    args = ap.parse_args(argv)
    if args.db:
        result = {"store": args.db, "store_mb": round(Path(args.db).stat().st_size / 1e6, 1)}
        result |= asyncio.run(_drive(Path(args.db), args.repeats))
    else:
        result = run(args.ranks, args.iterations, args.repeats, args.keep)
    print(table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        print(f"\nwritten: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
