"""Issue 7 exports: ``postmortem export perfetto`` (Chrome trace JSON) and ``export parquet``.

Perfetto's own trace processor is not run: the ``perfetto`` package downloads its
``trace_processor_shell`` binary at first use, which this offline machine cannot do. The
trace is held to the Chrome Trace Event Format instead (every event has the keys its phase
needs, numbers where numbers go, metadata names every process and thread, slices on one
thread nest as Perfetto's JSON importer requires).
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from pathlib import Path

import duckdb
import pytest

from postmortem.cli import main

ROOT = Path(__file__).resolve().parents[1]
DEADLOCK = ROOT / "sample_logs" / "silent-deadlock-40r"
WINDOW_US = 30 * 60 * 1_000_000


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("export") / "deadlock.duckdb"
    assert main(["ingest", str(DEADLOCK), "--db", str(db), "--quiet"]) == 0
    return db


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    """A small generated hang with watchdog timeouts, an Xid and Flight Recorder dumps."""
    from postmortem.generator import main as generate

    base = tmp_path_factory.mktemp("gen")
    assert generate([str(base / "run"), "--nodes", "2", "--gpus-per-node", "2", "--scenario", "deadlock",
                     "--culprit", "1", "--node-fault", "xid79", "--flight-recorder", "json"]) == 0
    db = base / "gen.duckdb"
    assert main(["ingest", str(base / "run"), "--db", str(db), "--quiet"]) == 0
    return db


def _export(capsys, *args) -> tuple[int, str]:
    rc = main(["export", *args])
    return rc, capsys.readouterr().err


def _trace(capsys, db: Path, out: Path, *extra) -> tuple[dict, str]:
    rc, err = _export(capsys, "perfetto", "--db", str(db), "--out", str(out), *extra)
    assert rc == 0, err
    return json.loads(out.read_text(encoding="utf-8")), err


def check_chrome_trace(doc: dict) -> dict:
    """The Chrome Trace Event Format as Perfetto's JSON importer reads it; returns the thread names."""
    assert set(doc) >= {"traceEvents", "displayTimeUnit"} and doc["displayTimeUnit"] == "ms"
    events = doc["traceEvents"]
    assert isinstance(events, list) and events
    number = (int, float)
    procs, threads, used = {}, {}, set()
    for e in events:
        ph = e["ph"]
        assert isinstance(e["pid"], int) and not isinstance(e["pid"], bool), e
        assert isinstance(e["tid"], int) and not isinstance(e["tid"], bool), e
        assert isinstance(e["name"], str) and e["name"], e
        if ph == "M":
            assert e["name"] in {"process_name", "thread_name", "process_sort_index", "thread_sort_index"}, e
            if e["name"] == "process_name":
                procs[e["pid"]] = e["args"]["name"]
            elif e["name"] == "thread_name":
                threads[(e["pid"], e["tid"])] = e["args"]["name"]
            else:
                assert isinstance(e["args"]["sort_index"], int), e
            continue
        assert ph in {"X", "i"}, e
        assert isinstance(e["ts"], number) and not isinstance(e["ts"], bool) and e["ts"] >= 0, e
        assert isinstance(e.get("cat"), str) and isinstance(e.get("args", {}), dict), e
        if ph == "X":
            assert isinstance(e["dur"], number) and not isinstance(e["dur"], bool) and e["dur"] >= 0, e
        else:
            assert e["s"] in {"t", "p", "g"}, e
        used.add((e["pid"], e["tid"]))
    assert used <= set(threads), f"threads without a name: {sorted(used - set(threads))[:5]}"
    assert {pid for pid, _ in threads} <= set(procs)
    # slices on one thread nest (a partial overlap is what Perfetto's importer rejects)
    by_thread: dict[tuple, list] = {}
    for e in events:
        if e["ph"] == "X":
            by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for key, slices in by_thread.items():
        stack: list[float] = []
        for start, end in sorted(slices, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1] + 1e-6, f"slices overlap on thread {threads[key]}"
            stack.append(end)
    # sorted: metadata first, then by time
    times = [e["ts"] for e in events if e["ph"] != "M"]
    assert times == sorted(times)
    assert all(e["ph"] == "M" for e in events[:len(events) - len(times)])
    return threads


def test_perfetto_deadlock_structure(store, tmp_path, capsys):
    doc, err = _trace(capsys, store, tmp_path / "trace.json")
    assert "last 30 minutes before the end of the logs" in err and "wrote" in err
    threads = check_chrome_trace(doc)
    events = [e for e in doc["traceEvents"] if e["ph"] != "M"]
    # the window: 30 minutes from trace time 0; wall times within the window's bounds
    meta = doc["otherData"]
    lo, hi = meta["window_start"], meta["window_end"]
    assert (datetime.fromisoformat(hi) - datetime.fromisoformat(lo)).total_seconds() == 1800
    assert all(e["ts"] + e.get("dur", 0) <= WINDOW_US for e in events)
    for e in events:
        if "clipped" not in e["args"]:
            assert lo <= e["args"]["at"][:len(lo)] <= hi, e
    # a process per node (and the job), a thread per rank
    procs = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert {f"h20-node-0{i}" for i in range(1, 6)} <= procs and "job 4242" in procs
    names = set(threads.values())
    assert {f"rank {r}" for r in range(40)} <= names
    # the culprit: rank 17 never entered #7219; the other 39 wait in it
    by_thread = {}
    for e in events:
        by_thread.setdefault(threads[(e["pid"], e["tid"])], []).append(e["name"])
    assert "default_pg: no progress after #7218 (nothing pending)" in by_thread["rank 17 \u00b7 default_pg"]
    waiting = {int(t.split()[1]) for t, evs in by_thread.items()
               if t.endswith("default_pg") and "default_pg: waiting in #7219" in evs}
    assert waiting == set(range(40)) - {17}
    # rank 17's thread sits in its node's process
    pid17 = next(p for (p, _), n in threads.items() if n == "rank 17")
    assert next(e["args"]["name"] for e in doc["traceEvents"]
                if e["name"] == "process_name" and e["pid"] == pid17) == "h20-node-03"


def test_perfetto_is_deterministic(store, tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _trace(capsys, store, a, "--last", "400")
    _trace(capsys, store, b, "--last", "400")
    assert a.read_bytes() == b.read_bytes()


def test_perfetto_window_and_ranks(store, tmp_path, capsys):
    doc, err = _trace(capsys, store, tmp_path / "t.json", "--from", "2026-07-24T09:00", "--to", "09:30",
                      "--ranks", "17,38-39")
    threads = check_chrome_trace(doc)
    ranks = {int(n.split()[1]) for n in threads.values() if n.startswith("rank ")}
    assert ranks == {17, 38, 39}
    events = [e for e in doc["traceEvents"] if e["ph"] != "M"]
    assert all(e["ts"] + e.get("dur", 0) <= WINDOW_US for e in events)
    steps = [e for e in events if e["cat"] == "step"]
    assert steps and all(threads[(e["pid"], e["tid"])] == "rank 39" for e in steps)
    assert all(e["ph"] == "X" and e["name"].startswith("iteration ") for e in steps)
    assert "2026-07-24T09:00:00 to 2026-07-24T09:30:00" in err


def test_perfetto_cap(store, tmp_path, capsys):
    doc, err = _trace(capsys, store, tmp_path / "t.json", "--last", "400", "--max-events", "25")
    check_chrome_trace(doc)
    assert sum(1 for e in doc["traceEvents"] if e["ph"] != "M") == 25
    assert "capped at 25 events" in err and doc["otherData"]["events_left_out"] > 0
    # errors and exits are kept before steps
    cats = {e["cat"] for e in doc["traceEvents"] if e["ph"] != "M"}
    assert "step" not in cats


def test_export_bad_usage(store, tmp_path, capsys):
    out = str(tmp_path / "t.json")
    assert _export(capsys, "perfetto", "--db", str(store), "--out", out, "--last", "5", "--from", "10:00")[0] == 2
    rc, err = _export(capsys, "perfetto", "--db", str(store), "--out", out, "--ranks", "3-a")
    assert rc == 2 and "--ranks" in err
    rc, err = _export(capsys, "perfetto", "--db", str(tmp_path / "none.duckdb"), "--out", out)
    assert rc == 2 and "no such database" in err
    assert _export(capsys, "perfetto", "--db", str(store), "--out", out, "--from", "10:00", "--to", "09:00")[0] == 2
    assert main(["export"]) == 2
    with pytest.raises(SystemExit) as exc:
        main(["export", "parquet", "--db", str(store)])
    assert exc.value.code == 2


def test_perfetto_generated_timeouts_xid_and_flight_recorder(generated, tmp_path, capsys):
    doc, _ = _trace(capsys, generated, tmp_path / "g.json", "--last", "120")
    threads = check_chrome_trace(doc)
    events = [e for e in doc["traceEvents"] if e["ph"] != "M"]
    timeouts = [e for e in events if e["cat"] == "timeout"]
    # every rank but the culprit times out in the collective: a slice from enqueue to timeout
    assert {int(threads[(e["pid"], e["tid"])].split()[1]) for e in timeouts} == {0, 2, 3}
    for e in timeouts:
        assert e["ph"] == "X" and e["dur"] >= 590e6 and "timed out" in e["name"]
    xids = [e for e in events if e["cat"] == "node" and "Xid" in e["name"]]
    assert xids and all(threads[(e["pid"], e["tid"])].startswith("node") for e in xids)
    assert any(e["name"].startswith("FR ") for e in events)


def test_perfetto_profiler_kernels(tmp_path, capsys):
    from postmortem.generator.rungen.nsys import write_profiled_run

    write_profiled_run(tmp_path / "run", world=2, steps=2, late_rank=1)
    db = tmp_path / "prof.duckdb"
    assert main(["ingest", str(tmp_path / "run"), "--db", str(db), "--quiet"]) == 0
    doc, _ = _trace(capsys, db, tmp_path / "p.json")
    threads = check_chrome_trace(doc)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    assert kernels and all(e["ph"] == "X" for e in kernels)
    assert any("GPU stream" in threads[(e["pid"], e["tid"])] for e in kernels)
    assert any(e["name"] == "allreduce" for e in kernels)


# --- parquet ---------------------------------------------------------------------------------

def _store_counts(db: Path) -> dict[str, int]:
    from postmortem.analyzer.store import INTERNAL, tables

    con = duckdb.connect(str(db), read_only=True)
    try:
        names = tables(con)
        return {n: con.execute(f'SELECT count(*) FROM "{n}"').fetchall()[0][0] for n in names if n not in INTERNAL}
    finally:
        con.close()


def test_parquet_round_trip_and_two_jobs(store, tmp_path, capsys):
    out = tmp_path / "pm"
    rc, err = _export(capsys, "parquet", "--db", str(store), "--out", str(out))
    assert rc == 0 and "job 4242" in err
    counts = _store_counts(store)
    assert (out / "job=4242" / "table=findings" / "part-0.parquet").exists()
    con = duckdb.connect()
    glob = str(out / "*" / "table=*" / "*.parquet")
    got = dict(con.execute(f"SELECT \"table\", count(*) FROM read_parquet('{glob}', hive_partitioning=true, "
                           f"union_by_name=true) GROUP BY ALL").fetchall())
    assert {t: n for t, n in counts.items() if n} == got
    assert set((out / "job=4242").glob("table=*")) == {out / "job=4242" / f"table={t}" for t in counts}
    # a second job side by side; both query together
    assert _export(capsys, "parquet", "--db", str(store), "--out", str(out), "--job", "4243")[0] == 0
    findings = str(out / "*" / "table=findings" / "*.parquet")
    rows = con.execute(f"SELECT job::VARCHAR, count(*) FROM read_parquet('{findings}', hive_partitioning=true) "
                       f"GROUP BY ALL ORDER BY 1").fetchall()
    assert rows == [("4242", counts["findings"]), ("4243", counts["findings"])]
    ranks = con.execute(f"SELECT count(DISTINCT job) FROM read_parquet('{out}/*/table=ranks/*.parquet', "
                        f"hive_partitioning=true) WHERE rank = 17").fetchall()
    assert ranks == [(2,)]


def test_parquet_never_overwrites_another_job(store, tmp_path, capsys):
    out = tmp_path / "pm"
    assert _export(capsys, "parquet", "--db", str(store), "--out", str(out))[0] == 0
    before = (out / "job=4242" / "_postmortem.json").read_text()
    # the same store again: replaces its own partition
    rc, err = _export(capsys, "parquet", "--db", str(store), "--out", str(out))
    assert rc == 0 and "replacing" in err
    # another store with the same job id: refused, the partition untouched
    other = tmp_path / "other.duckdb"
    shutil.copy(store, other)
    rc, err = _export(capsys, "parquet", "--db", str(other), "--out", str(out))
    assert rc == 2 and "--replace" in err
    assert (out / "job=4242" / "_postmortem.json").read_text() == before
    assert _export(capsys, "parquet", "--db", str(other), "--out", str(out), "--replace")[0] == 0
    assert str(other.resolve()) in (out / "job=4242" / "_postmortem.json").read_text()
    assert not list(out.glob(".job=*"))
