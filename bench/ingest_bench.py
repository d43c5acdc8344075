"""Benchmark: ingest speed and memory against a plain scan and a per-line Python parser (issue 11).

    python -m bench.ingest_bench --ranks 8,64 [--coll] [--nsys] [--iterations 40] [--repeats 1]
                                 [--case plain-1024,coll-64-871MB,c10d-535MB,...]
                                 [--json FILE] [--keep DIR] [--compare OLD.json] [--no-baseline]
    python -m bench.ingest_bench --table RESULT.json [--compare OLD.json]    (the README's table)

For each size, generates a deadlock run with ``postmortem.generator`` (8 GPUs per node, watchdog
timeouts, periodic c10d work updates during a 30-minute hang, py-spy dumps; ``--coll`` adds
``COLL`` to ``NCCL_DEBUG_SUBSYS`` and writes the COLL line of every collective of every iteration
(``RunSpec.coll_trace``: ~18 kB per rank per iteration, 1,024 ranks x ~105 iterations is ~2 GB),
``--nsys`` writes an Nsight Systems SQLite export per rank),
``--case`` adds named cases (``CASES``) beside the ``--ranks`` sizes: ``plain-1024`` (1,024
ranks, 40 iterations, no COLL: the many-small-files run), ``coll-64-871MB`` (64 ranks with the
COLL trace of 742 iterations, about 871 MB) and ``c10d-535MB`` (one 535 MB training stderr of
c10d work updates and iteration lines, ``bench.memory_bench.write_plain``: a single large log),
``plain-256``, ``coll-1024-2GB`` (105 iterations) and ``plain-10000`` (1 iteration; these two
without the per-line parser).
Each reads every file once so that the page cache is warm, then measures in the same run:

* the scan floor: ``LC_ALL=C grep -rc "" DIR`` (the best of three);
* our ingest, ``postmortem.analyzer.pipeline.analyze([DIR])`` (in-memory store), and then, separately,
  ``postmortem.rules.report.build_report(run)`` ("time to report"), both in one child Python process
  run under ``/usr/bin/time -v``: its peak RSS is the peak of ingest + report (plus the
  interpreter and imports; the import time is measured and left out of the times);
* ``bench.lineparser_baseline`` (per-line ``re.match`` + row dicts + DuckDB), in its own child
  process, its peak RSS measured the same way;
* lnav as a peer, only when ``lnav`` is on PATH: ``lnav -n -q -r DIR`` (headless, every file
  loaded and indexed, nothing printed), best of ``--repeats``; "-" otherwise. Then how many
  lines and files lnav indexed (its ``lnav_file`` table): lnav 0.11 indexes only part of a folder
  of many files headless, and the ratio to ours is given only where it indexed every line.

Times are the best of ``--repeats`` (each repeat a fresh child process). Prints a table per size
and writes every number, with the machine (cores, memory, Python/Polars/DuckDB versions, the
git commit), to ``--json`` (default ``ingest_bench.json``). ``--compare OLD.json`` prints new/old
per size for the runs both files have; ``--table RESULT.json`` measures nothing and prints a
saved result as the README's Markdown table (``old -> new`` in each cell with ``--compare``).
Runs go into a temporary folder, removed afterwards unless ``--keep DIR``; a run already in
``--keep DIR`` (same spec) is reused rather than generated again.

"lines" is a ``wc -l`` count over the text files (nsys exports and other binary files are left
out of lines and lines/s, but counted in files, MB and MB/s: every reader gets the same folder).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

GPUS_PER_NODE = 8
TIME_BIN = "/usr/bin/time"
SCHEMA = "postmortem-ingest-bench/1"
# Numbers a --compare divides (new / old); lower is better for all of them.
COMPARED = ("ingest_s", "report_s", "grep_s", "baseline_s", "lnav_s", "peak_rss_mib", "peak_rss_all_mib",
            "baseline_peak_rss_mib")


@dataclass(frozen=True)
class Case:
    """One bench input: a generated run (``ranks``, ``iterations``, COLL, nsys), or, with
    ``single_log_bytes``, one training stderr of that size (``bench.memory_bench.write_plain``)."""
    key: str
    ranks: int
    iterations: int = 40
    coll: bool = False
    nsys: bool = False
    single_log_bytes: int = 0
    baseline: bool = True           # also time the per-line parser (off for the largest runs)
    node_files: bool = False        # each node's tool output too: kernel logs, nvidia-smi, topo, ibstat, ...


# The sizes issue 26 measures: many small files, a long COLL trace (18.3 kB per rank per
# iteration: 742 iterations of 64 ranks are about 871 MB), one large log, the 2 GB COLL run and
# the 10,000-rank run of the README's table, and the 256-rank run the per-line parser is timed on.
CASES = {case.key: case for case in (
    Case("plain-256", ranks=256),
    Case("plain-1024", ranks=1024),
    Case("coll-64-871MB", ranks=64, iterations=742, coll=True),
    Case("c10d-535MB", ranks=1, single_log_bytes=535_000_000),
    Case("coll-1024-2GB", ranks=1024, iterations=105, coll=True, baseline=False),
    Case("plain-10000", ranks=10000, iterations=1, baseline=False),
    # a job folder with what each of its 128 nodes' tools printed (7 files a node) beside the ranks' logs
    Case("nodes-1024", ranks=1024, node_files=True),
)}


# -- the run ---------------------------------------------------------------------------------------

def spec_for(ranks: int, iterations: int, coll: bool, nsys: bool, node_files: bool = False):
    from postmortem.generator import RunSpec
    from postmortem.generator.rungen.nccl import NcclVersion

    gpus = GPUS_PER_NODE if ranks >= GPUS_PER_NODE else ranks
    if ranks % gpus:
        raise ValueError(f"--ranks {ranks}: not a multiple of {GPUS_PER_NODE} GPUs per node")
    spec = RunSpec(nodes=ranks // gpus, gpus_per_node=gpus, scenario="deadlock", culprit=ranks // 2 + 1 if ranks > 1 else 0,
                   work_updates=True, hang_duration_s=1800, timeout_s=600, iterations_before_hang=iterations,
                   profile=nsys, node_logs=node_files, config_files=node_files)
    if coll:
        # The release's default mask (INIT,ENV for 2.19-2.22) plus COLL, as a user turning COLL on would write it.
        minor = NcclVersion.parse(spec.nccl_version).minor
        default = "INIT" if minor <= 15 else "INIT,ENV" if minor <= 22 else "INIT,BOOTSTRAP,ENV"
        spec.nccl_subsys = default + ",COLL"
        spec.coll_trace = True       # every collective of every iteration (about 18 kB per rank per iteration)
    return spec


def run_key(ranks: int, coll: bool, nsys: bool) -> str:
    return f"{ranks}r" + ("-coll" if coll else "") + ("-nsys" if nsys else "")


def case_spec(case: Case) -> dict:
    """What ``case`` writes, as the row's ``spec`` and the reuse stamp compare it."""
    from dataclasses import asdict

    if case.single_log_bytes:
        return {"single_log_bytes": case.single_log_bytes, "writer": "bench.memory_bench.write_plain"}
    spec = spec_for(case.ranks, case.iterations, case.coll, case.nsys, case.node_files)
    return {k: v for k, v in asdict(spec).items() if v not in (None, {}, [])}


def generate(out: Path, case: Case) -> tuple[float, bool]:
    """Write the case's input into ``out`` unless the same spec is there already; (seconds, reused)."""
    stamp = out.parent / (out.name + ".spec.json")   # outside the run: no reader sees it
    wanted = json.dumps(case_spec(case), sort_keys=True, default=str)
    if stamp.is_file() and stamp.read_text() == wanted:
        return 0.0, True
    if out.exists():
        shutil.rmtree(out)
    t = time.perf_counter()
    if case.single_log_bytes:
        from bench.memory_bench import write_plain

        out.mkdir(parents=True)
        write_plain(out / "stderr.log", case.single_log_bytes)
    else:
        from postmortem.generator import generate_run

        generate_run(out, spec_for(case.ranks, case.iterations, case.coll, case.nsys, case.node_files))
    elapsed = time.perf_counter() - t
    stamp.write_text(wanted)
    return elapsed, False


_BINARY_SUFFIXES = {".sqlite", ".pickle", ".pkl", ".nsys-rep", ".qdrep", ".gz", ".zip", ".tar", ".duckdb"}


def run_files(run_dir: Path) -> list[Path]:
    return sorted(p for p in run_dir.rglob("*") if p.is_file())


def is_binary(path: Path) -> bool:
    if path.suffix.lower() in _BINARY_SUFFIXES:
        return True
    with open(path, "rb") as handle:
        return b"\0" in handle.read(8192)


def census(run_dir: Path) -> dict:
    """Files, bytes and ``wc -l`` lines; reading everything once also warms the page cache."""
    files = run_files(run_dir)
    total = text_bytes = lines = binary = 0
    for path in files:
        data = path.read_bytes()
        total += len(data)
        if is_binary(path):
            binary += 1
            continue
        text_bytes += len(data)
        lines += data.count(b"\n")
    return {"files": len(files), "binary_files": binary, "bytes": total, "text_bytes": text_bytes,
            "mb": round(total / 1e6, 3), "lines": lines}


# -- measurements ----------------------------------------------------------------------------------

def measure_grep(run_dir: Path, repeats: int = 3) -> tuple[float, int]:
    """Best-of-``repeats`` seconds of ``grep -rc "" DIR`` (C locale) and the lines it counted in text files."""
    env = dict(os.environ, LC_ALL="C")
    best, out = float("inf"), ""
    for _ in range(max(1, repeats)):
        t = time.perf_counter()
        proc = subprocess.run(["grep", "-rc", "", str(run_dir)], capture_output=True, text=True, env=env,
                              errors="replace")
        best = min(best, time.perf_counter() - t)
        if proc.returncode not in (0, 1):
            raise RuntimeError(f"grep failed: {proc.stderr.strip()}")
        out = proc.stdout
    counted = 0
    for row in out.splitlines():
        name, _, count = row.rpartition(":")
        path = Path(name)
        if count.isdigit() and not is_binary(path):
            counted += int(count)
    return best, counted


def measure_lnav(run_dir: Path, repeats: int = 1) -> float | None:
    """Best-of-``repeats`` seconds of lnav loading and indexing every file of ``run_dir``
    headless (``lnav -n -q -r DIR``); None when no ``lnav`` is on PATH."""
    lnav = shutil.which("lnav")
    if lnav is None:
        return None
    best = float("inf")
    for _ in range(max(1, repeats)):
        t = time.perf_counter()
        proc = subprocess.run([lnav, "-n", "-q", "-r", str(run_dir)], capture_output=True, text=True,
                              errors="replace")
        best = min(best, time.perf_counter() - t)
        if proc.returncode != 0:
            raise RuntimeError(f"lnav failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return best


def lnav_coverage(run_dir: Path) -> tuple[int, int] | None:
    """(lines, files) that lnav indexed of ``run_dir`` headless (its ``lnav_file`` table), or None
    when it cannot say. lnav 0.11 in headless mode stops taking a large folder's files after a
    few hundred ("too many new files") and never indexes the rest: its time is then no peer's
    time (``bench_one`` gives no ratio)."""
    lnav = shutil.which("lnav")
    if lnav is None:
        return None
    proc = subprocess.run([lnav, "-n", "-c", ";SELECT sum(lines) AS lines, count(*) AS files FROM lnav_file",
                           "-r", str(run_dir)], capture_output=True, text=True, errors="replace")
    last = proc.stdout.strip().splitlines()[-1:] if proc.returncode == 0 else []
    numbers = re.findall(r"\d+", last[0]) if last else []
    return (int(numbers[0]), int(numbers[1])) if len(numbers) == 2 else None


def _child(mode: str, run_dir: Path) -> dict:
    """Run ``mode`` ("ingest" or "baseline") on ``run_dir`` in a fresh Python under /usr/bin/time -v."""
    with tempfile.TemporaryDirectory(prefix="ingest_bench_") as tmp:
        result_file = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "bench.ingest_bench", "--child", mode, str(run_dir), str(result_file)]
        timed = os.access(TIME_BIN, os.X_OK)
        if timed:
            cmd = [TIME_BIN, "-v", *cmd]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent)
        if proc.returncode != 0 or not result_file.is_file():
            raise RuntimeError(f"{mode} child failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
        result = json.loads(result_file.read_text())
    match = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr) if timed else None
    if match:
        result["peak_rss_mib"] = round(int(match.group(1)) / 1024, 1)
        result["peak_rss_source"] = "/usr/bin/time -v"
    else:
        result["peak_rss_mib"] = result["self_maxrss_mib"]
        result["peak_rss_source"] = "getrusage(RUSAGE_SELF) in the child"
    return result


def child_main(mode: str, run_dir: str, result_file: str) -> int:
    """Inside the child: import, then time the work alone; write the numbers as JSON."""
    import resource

    t = time.perf_counter()
    if mode == "ingest":
        os.environ["POSTMORTEM_CACHE"] = "on"
        os.environ["POSTMORTEM_CACHE_DIR"] = tempfile.mkdtemp(prefix="ingest_bench_cache_")
        from postmortem.analyzer.pipeline import analyze
        from postmortem.rules.report import build_report
    else:
        from bench.lineparser_baseline import parse
    import_s = time.perf_counter() - t
    out: dict = {"import_s": round(import_s, 4)}
    if mode == "ingest":
        from postmortem.analyzer import ingest
        from postmortem.analyzer.discover import discover

        count, processes = ingest.worker_count(discover([run_dir])[0])
        out["workers"], out["threads"] = (count, 0) if processes else (0, count)
        t = time.perf_counter()
        run = analyze([run_dir])
        out["ingest_s"] = time.perf_counter() - t
        # Worker processes (postmortem.analyzer.ingest) run beside this one: the largest one's peak.
        out["worker_maxrss_mib"] = round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)
        t = time.perf_counter()
        report = build_report(run)
        out["report_s"] = time.perf_counter() - t
        out["store_lines"] = run.con.execute("SELECT count(*) FROM lines").fetchone()[0]
        verdict = report.get("verdict") or {}
        out["verdict"] = {"status": verdict.get("status"), "category": verdict.get("category"),
                          "culprit_ranks": (verdict.get("culprit") or {}).get("ranks")}
        out["findings"] = len(report.get("findings", []))
        out["stage_timings"] = {k: v for k, v in (run.timings or {}).items() if isinstance(v, (int, float))}
        run.con.close()
        # The same report again with the cache the first one left (postmortem.analyzer.cache), in a
        # private cache folder: the time a user waits the second time (TUI after the report).
        t = time.perf_counter()
        again = analyze([run_dir])
        build_report(again)
        out["second_report_s"] = time.perf_counter() - t
        out["second_was_cache_hit"] = again.timings.get("cache") == "hit"
        again.con.close()
        shutil.rmtree(os.environ["POSTMORTEM_CACHE_DIR"], ignore_errors=True)   # a GB for a large run
    else:
        t = time.perf_counter()
        con, rows = parse([run_dir])
        out["baseline_s"] = time.perf_counter() - t
        out["baseline_rows"] = rows
        con.close()
    out["self_maxrss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    Path(result_file).write_text(json.dumps(out, default=str))
    return 0


def _best(results: list[dict], key: str) -> dict:
    return min(results, key=lambda r: r[key])


def bench_one(run_dir: Path, case: Case, repeats: int, baseline: bool = True, log=print) -> dict:
    log(f"[{case.key}] generating {run_dir} ...")
    gen_s, reused = generate(run_dir, case)
    row: dict = {"key": case.key, "ranks": case.ranks, "coll": case.coll, "nsys": case.nsys,
                 "iterations": None if case.single_log_bytes else case.iterations,
                 "single_log_bytes": case.single_log_bytes or None,
                 "generate_s": round(gen_s, 2), "generated_reused": reused, "spec": case_spec(case)}
    row.update(census(run_dir))           # also reads every file once: the page cache is warm from here on
    row["grep_s"], row["grep_lines"] = measure_grep(run_dir)
    row["lnav_s"] = measure_lnav(run_dir, repeats)
    row["lnav_lines"], row["lnav_files"] = (lnav_coverage(run_dir) if row["lnav_s"] else None) or (None, None)
    log(f"[{row['key']}] {row['files']} files, {row['mb']} MB, {row['lines']} lines; ingest ...")
    runs = [_child("ingest", run_dir) for _ in range(max(1, repeats))]
    best = _best(runs, "ingest_s")
    row["ingest_s"] = best["ingest_s"]
    row["report_s"] = min(r["report_s"] for r in runs)
    row["ingest_report_s"] = min(r["ingest_s"] + r["report_s"] for r in runs)
    row["second_report_s"] = min(r["second_report_s"] for r in runs)
    row["second_was_cache_hit"] = all(r["second_was_cache_hit"] for r in runs)
    row["ratio_second_first"] = row["second_report_s"] / row["ingest_report_s"]
    row["peak_rss_mib"] = max(r["peak_rss_mib"] for r in runs)
    row["peak_rss_source"] = best["peak_rss_source"]
    row["workers"] = best.get("workers")
    row["threads"] = best.get("threads")
    row["worker_peak_rss_mib"] = max(r.get("worker_maxrss_mib") or 0 for r in runs)
    # Upper bound of the memory taken at once: this process at its peak plus every worker at
    # the largest worker's peak (their peaks need not coincide).
    workers = row["workers"] if row["workers"] and row["workers"] > 1 else 0
    row["peak_rss_all_mib"] = row["peak_rss_mib"] + workers * row["worker_peak_rss_mib"]
    row["import_s"] = best["import_s"]
    for key in ("store_lines", "verdict", "findings", "stage_timings"):
        row[key] = best.get(key)
    row["mb_per_s"] = row["bytes"] / 1e6 / row["ingest_s"]
    row["lines_per_s"] = row["lines"] / row["ingest_s"]
    row["ratio_ingest_grep"] = row["ingest_s"] / row["grep_s"]
    # lnav's time is a peer's only where it indexed every line (a last line without a newline counts)
    whole = row["lnav_lines"] is not None and row["lnav_lines"] >= row["lines"]
    row["ratio_lnav_ingest"] = row["lnav_s"] / row["ingest_s"] if row["lnav_s"] and whole else None
    if baseline:
        log(f"[{row['key']}] per-line baseline ...")
        bruns = [_child("baseline", run_dir) for _ in range(max(1, repeats))]
        bbest = _best(bruns, "baseline_s")
        row["baseline_s"] = bbest["baseline_s"]
        row["baseline_rows"] = bbest["baseline_rows"]
        row["baseline_peak_rss_mib"] = max(r["peak_rss_mib"] for r in bruns)
        row["ratio_baseline_ingest"] = row["baseline_s"] / row["ingest_s"]
    else:
        row.update(baseline_s=None, baseline_rows=None, baseline_peak_rss_mib=None, ratio_baseline_ingest=None)
    row["repeats"] = max(1, repeats)
    return row


# -- machine, table, comparison --------------------------------------------------------------------

def machine_info() -> dict:
    import duckdb
    import polars

    info = {"cpu_count": os.cpu_count(), "python": platform.python_version(), "polars": polars.__version__,
            "duckdb": duckdb.__version__, "platform": platform.platform(), "machine": platform.machine()}
    if hasattr(os, "sched_getaffinity"):
        info["cpus_usable"] = len(os.sched_getaffinity(0))
    try:
        import pyarrow
        info["pyarrow"] = pyarrow.__version__
    except ImportError:
        pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
        mem = re.search(r"MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text())
        if mem:
            info["mem_total_gib"] = round(int(mem.group(1)) / 2**20, 1)
    except OSError:
        pass
    try:
        repo = Path(__file__).resolve().parent.parent
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                               capture_output=True, text=True, timeout=30)
        if commit.returncode == 0:
            info["git_commit"] = commit.stdout.strip()
            info["git_dirty"] = bool(dirty.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        info["loadavg_1m"] = os.getloadavg()[0]
    except OSError:
        pass
    info["speed_probe_s"] = round(speed_probe(), 4)   # again at the end: speed_probe_end_s
    return info


def speed_probe(repeats: int = 3) -> float:
    """Seconds (best of ``repeats``) for a fixed piece of single-threaded work: a Python loop
    and a Polars regex over 500,000 generated lines (about 0.3 s). This machine's speed drifts by a third
    over an hour (other tenants); runs are comparable by their ratio to it (``--compare``)."""
    import polars as pl

    lines = pl.Series([f"host-{i % 97}:{i}:{i * 7} [{i % 8}] NCCL INFO AllReduce: opCount {i:x}" for i in range(500_000)])
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        total = 0
        for i in range(3_000_000):
            total += i * i % 7
        lines.str.contains(r"opCount [0-9a-f]+$").sum()
        best = min(best, time.perf_counter() - t)
    return best


def _fmt(value, digits=3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}" if abs(value) < 1000 else f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


TABLE = [("files", "files", 0), ("MB", "mb", 2), ("lines", "lines", 0), ("grep -c s", "grep_s", 4),
         ("ingest s", "ingest_s", 3), ("MB/s", "mb_per_s", 2), ("lines/s", "lines_per_s", 0),
         ("ingest/grep", "ratio_ingest_grep", 1), ("baseline s", "baseline_s", 3),
         ("baseline/ingest", "ratio_baseline_ingest", 2), ("lnav s", "lnav_s", 3),
         ("lnav indexed lines", "lnav_lines", 0), ("lnav indexed files", "lnav_files", 0),
         ("lnav/ingest", "ratio_lnav_ingest", 2), ("report s", "report_s", 3),
         ("ingest+report s", "ingest_report_s", 3), ("2nd report s (cache)", "second_report_s", 3),
         ("2nd / 1st", "ratio_second_first", 3), ("workers", "workers", 0), ("parse threads", "threads", 0),
         ("peak RSS MiB", "peak_rss_mib", 1),
         ("worker peak RSS MiB", "worker_peak_rss_mib", 1), ("RSS all at once ≤ MiB", "peak_rss_all_mib", 1),
         ("baseline RSS MiB", "baseline_peak_rss_mib", 1)]


def format_row(row: dict) -> str:
    what = f"one {row['mb']:,.0f} MB training log" if row.get("single_log_bytes") else \
        f"{row['ranks']} ranks, {row['iterations']} iterations"
    head = f"== {row['key']}: {what}" + (", COLL" if row["coll"] else "") + \
           (", nsys exports" if row["nsys"] else "") + f" (best of {row['repeats']}; grep best of 3)"
    width = max(len(label) for label, _, _ in TABLE)
    body = [f"  {label:<{width}}  {_fmt(row.get(key), digits)}" for label, key, digits in TABLE]
    if row.get("binary_files"):
        body.append(f"  ({row['binary_files']} binary files: in files, MB and MB/s, not in lines)")
    return "\n".join([head, *body])


def _probe(result: dict) -> float | None:
    """The mean of a result's speed probes (start and end), if it has them."""
    m = result.get("machine", {})
    found = [m[k] for k in ("speed_probe_s", "speed_probe_end_s") if m.get(k)]
    return sum(found) / len(found) if found else None


def compare(new: dict, old: dict) -> str:
    old_rows = {r["key"]: r for r in old.get("runs", [])}
    out = ["== new / old (below 1: faster or smaller now)"]
    probes = _probe(new), _probe(old)
    if all(probes):
        out.append(f"  the machine's speed probe: new/old {probes[0] / probes[1]:.2f} (above 1: the machine was slower "
                   "for the new run; times scale about with it)")
    for row in new.get("runs", []):
        prev = old_rows.get(row["key"])
        if prev is None:
            out.append(f"  {row['key']}: not in the old file")
            continue
        parts = []
        for key in COMPARED:
            a, b = row.get(key), prev.get(key)
            parts.append(f"{key} {a / b:.2f}" if a and b else f"{key} -")
        same = "" if row.get("lines") == prev.get("lines") else f"  (lines differ: {row.get('lines')} vs {prev.get('lines')})"
        out.append(f"  {row['key']}: " + ", ".join(parts) + same)
    return "\n".join(out)


# The README's table (one row per run): label, key, digits. With ``--compare`` every cell but the
# run's size (``_SIZES``, the same on both sides) reads old -> new.
MARKDOWN = [("MB", "mb", 1), ("lines", "lines", 0), ("files", "files", 0), ("ingest", "ingest_s", 2),
            ("MB/s", "mb_per_s", 1), ("report", "report_s", 2), ("2nd report", "second_report_s", 2),
            ("ingest / `grep -c`", "ratio_ingest_grep", 0), ("per-line parser / ours", "ratio_baseline_ingest", 2),
            ("RSS all at once, MiB", "peak_rss_all_mib", 0)]
_SECONDS = {"ingest_s", "report_s", "second_report_s"}
_SIZES = {"mb", "lines", "files"}


def markdown(new: dict, old: dict | None = None) -> str:
    """A result's runs as a Markdown table, with lnav's time and how much of the run it indexed
    (its headless mode skips files of large folders). With ``old`` (an earlier result), each
    measured cell of a run both have reads ``old -> new``, and the speed probes head the table:
    times scale with them."""
    old_rows = {r["key"]: r for r in (old or {}).get("runs", [])}
    labels = ["run", *[label for label, _, _ in MARKDOWN], "lnav (share of lines indexed)"]
    lines = [_probes_line(new, old), "", "| " + " | ".join(labels) + " |", "|" + "---|" * len(labels)]
    for row in new.get("runs", []):
        prev = old_rows.get(row["key"])
        cells = [row["key"]]
        for _, key, digits in MARKDOWN:
            cell = _cell(row.get(key), key, digits)
            if prev is not None and key not in _SIZES:
                cell = f"{_cell(prev.get(key), key, digits)} -> {cell}"
            cells.append(cell)
        cells.append(_lnav_cell(row))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(value, key: str, digits: int) -> str:
    text = _fmt(float(value) if isinstance(value, int) and digits else value, digits)
    if text == "-":
        return text
    return f"{text} s" if key in _SECONDS else f"{text}x" if key.startswith("ratio_") else text


def _lnav_cell(row: dict) -> str:
    if not row.get("lnav_s"):
        return "-"
    share = f"{row['lnav_lines'] / row['lines']:.0%}" if row.get("lnav_lines") is not None and row.get("lines") else "?"
    return f"{row['lnav_s']:.2f} s ({share})"


def _probes_line(new: dict, old: dict | None) -> str:
    def said(result: dict) -> str:
        m = result.get("machine", {})
        return (f"{m.get('cpu_count', '?')} cores, speed probe {_fmt(m.get('speed_probe_s'), 3)}-"
                f"{_fmt(m.get('speed_probe_end_s'), 3)} s, commit {str(m.get('git_commit', '?'))[:7]}")
    return f"Old: {said(old)}; new: {said(new)}." if old else f"Measured: {said(new)}."


def parse_ranks(text: str) -> list[int]:
    try:
        ranks = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--ranks takes comma-separated integers, got {text!r}") from None
    if not ranks or any(r < 1 for r in ranks):
        raise argparse.ArgumentTypeError("--ranks needs positive integers")
    return ranks


def parse_cases(text: str) -> list[Case]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"--case takes a comma list of {', '.join(CASES)}; got {text!r}")
    return [CASES[n] for n in names]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child_main(*argv[1:4])
    p = argparse.ArgumentParser(prog="python -m bench.ingest_bench", description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=parse_ranks, help="comma-separated world sizes (default 8,64 without --case)")
    p.add_argument("--case", type=parse_cases, default=[], help=f"comma list of named cases: {', '.join(CASES)}")
    p.add_argument("--iterations", type=int, default=40, help="training iterations before the hang (default 40)")
    p.add_argument("--coll", action="store_true", help="NCCL_DEBUG_SUBSYS with COLL and a COLL line for every collective (RunSpec.coll_trace)")
    p.add_argument("--nsys", action="store_true", help="an nsys SQLite export of every rank")
    p.add_argument("--repeats", type=int, default=1, help="child processes per measurement; the best counts")
    p.add_argument("--no-baseline", action="store_true", help="skip the per-line Python parser (large runs)")
    p.add_argument("--json", type=Path, default=Path("ingest_bench.json"), help="where the numbers go")
    p.add_argument("--keep", type=Path, help="generate runs into DIR/<key> and keep them (reused when the spec matches)")
    p.add_argument("--compare", type=Path, metavar="OLD.json", help="print new/old per size against an earlier --json")
    p.add_argument("--table", type=Path, metavar="RESULT.json", help="measure nothing: print a saved result as the "
                   "README's Markdown table (with --compare: old -> new)")
    a = p.parse_args(argv)
    if a.table is not None:
        old = json.loads(a.compare.read_text()) if a.compare else None
        print(markdown(json.loads(a.table.read_text()), old))
        return 0
    if a.ranks is None:
        a.ranks = [] if a.case else [8, 64]
    cases = [Case(run_key(r, a.coll, a.nsys), r, a.iterations, a.coll, a.nsys) for r in a.ranks] + a.case
    old = json.loads(a.compare.read_text()) if a.compare else None
    root = a.keep or Path(tempfile.mkdtemp(prefix="ingest_bench_runs_"))
    root.mkdir(parents=True, exist_ok=True)
    result = {"schema": SCHEMA, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine_info(),
              "args": {"ranks": a.ranks, "cases": [c.key for c in a.case], "iterations": a.iterations,
                       "coll": a.coll, "nsys": a.nsys, "repeats": a.repeats, "baseline": not a.no_baseline,
                       "lnav": shutil.which("lnav")}, "runs": []}
    log = lambda msg: print(msg, file=sys.stderr, flush=True)   # noqa: E731
    try:
        for case in cases:
            row = bench_one(root / case.key, case, a.repeats, case.baseline and not a.no_baseline, log)
            result["runs"].append(row)
            a.json.write_text(json.dumps(result, indent=2, sort_keys=True, default=str) + "\n")
            print(format_row(row), flush=True)
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    m = result["machine"]
    m["speed_probe_end_s"] = round(speed_probe(), 4)
    a.json.write_text(json.dumps(result, indent=2, sort_keys=True, default=str) + "\n")
    print(f"machine: {m.get('cpu_count')} cpus, {m.get('mem_total_gib')} GiB, python {m['python']}, "
          f"polars {m['polars']}, duckdb {m['duckdb']}, load {m.get('loadavg_1m')}, speed probe "
          f"{m.get('speed_probe_s')} s at the start, {m['speed_probe_end_s']} s at the end; numbers in {a.json}")
    if old is not None:
        print(compare(result, old))
    return 0


if __name__ == "__main__":
    sys.exit(main())
