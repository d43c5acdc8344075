"""Issue 11: how a run is parsed must not change what the store holds.

The same inputs give the same store, row for row, and the same findings, whether they are
parsed in one chunk or many, here or in worker processes, with the COLL trace bulk kept out of
the models (``postmortem.analyzer.bulk``) or not, with large logs cut into segments or read whole, and with
the cache on or off. A large single log is parsed in bounded memory."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
import threading

import pytest

from postmortem.analyzer import bulk, ingest, store
from postmortem.analyzer.pipeline import analyze
from postmortem.rules.report import build_report
from postmortem.generator import RunSpec, generate_run
from tests.conftest import REAL, ROOT

DEADLOCK = ROOT / "sample_logs" / "silent-deadlock-40r"


@pytest.fixture(scope="module")
def coll_run(tmp_path_factory):
    """A small generated hang with a COLL line for every collective (8 ranks, 3 iterations)."""
    out = tmp_path_factory.mktemp("coll") / "run"
    generate_run(out, RunSpec(nodes=2, gpus_per_node=4, culprit=5, iterations_before_hang=3,
                              nccl_subsys="INIT,ENV,COLL", coll_trace=True, work_updates=True))
    return out


def store_of(paths, **options) -> tuple[dict, list, dict]:
    """Every table as (rows, hash of its sorted rows), the findings, and the report's verdict."""
    run = analyze(paths, **options)
    tables = {}
    for table in store.tables(run.con):
        row = " || '|' || ".join(f'coalesce("{c}"::VARCHAR, \'∅\')' for c in sorted(run.columns(table)))
        rows = [r[0] for r in run.con.execute(f'SELECT {row} FROM "{table}"').fetchall()]
        tables[table] = (len(rows), hashlib.sha256("\n".join(sorted(rows)).encode()).hexdigest())
    report = build_report(run)
    findings = [(f["code"], f["severity"], f["ranks"], f["nodes"], f["title"]) for f in report["findings"]]
    assert list_order_is_file_order(run)
    return tables, findings, report["verdict"]


def list_order_is_file_order(run) -> bool:
    """``lines`` is stored in input and line order (its own rows, ``_lines``, where a COLL bulk
    makes it a view: postmortem.analyzer.bulk; a view over a cache entry's file keeps the order
    it was written in). ``row_number() OVER ()``: the stored order, of a table or a view."""
    own = "_lines" if run.columns("_lines") else "lines"
    wrong = run.con.execute(
        "SELECT count(*) FROM (SELECT stored, row_number() OVER (ORDER BY input_id, line_no, stored) AS sorted "
        f"FROM (SELECT row_number() OVER () AS stored, input_id, line_no FROM {own})) WHERE stored <> sorted").fetchone()[0]
    return wrong == 0


def differing(a: dict, b: dict) -> dict:
    return {t: (a.get(t), b.get(t)) for t in a.keys() | b.keys() if a.get(t) != b.get(t)}


def test_the_coll_bulk_is_merged_back_row_for_row(coll_run, monkeypatch):
    merged = []
    real_merge = bulk.merge
    monkeypatch.setattr(bulk, "merge", lambda con, *more: merged.append(
        con.execute(f"SELECT count(*) FROM {bulk.TABLE}").fetchone()[0]) or real_merge(con, *more))
    with_bulk = store_of([coll_run])
    assert merged and merged[0] > 1000, "the run's COLL lines should have gone through the bulk"
    whole_parse = ingest.parse_chunks     # every line through the parsers and the models
    monkeypatch.setattr(ingest, "parse_chunks", lambda chunks, spool=None, batch_bytes=None: whole_parse(chunks))
    without = store_of([coll_run])
    assert len(merged) == 1, "the second store had no bulk"
    assert not differing(with_bulk[0], without[0])
    assert with_bulk[1] == without[1] and with_bulk[2] == without[2]
    assert any(code == "H001" for code, *_ in with_bulk[1]), "the planted culprit is still found"


def test_each_coll_row_is_stored_once_and_shown_by_views(coll_run):
    """The COLL bulk is kept once, as ``_coll_rows``: a view over the chunks' Parquet files (no
    copy into the store); ``lines``, ``nccl_lines`` and ``collectives`` are views over their own
    rows and it. What users list (exports, the TUI's SQL screen) names the views with their
    rows, never what is behind them."""
    from postmortem.tui.screens.sql import table_catalogue

    run = analyze([coll_run])
    con = run.con
    stored = con.execute(f"SELECT count(*) FROM {bulk.ROWS}").fetchone()[0]
    assert stored > 1000
    views = {name for (name,) in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    assert views == {"lines", "nccl_lines", "collectives", bulk.ROWS}
    store.lock_down(con)    # the files stay readable by the views, and only they
    assert con.execute("SELECT count(*) FROM collectives").fetchone()[0] > stored
    traced = con.execute("SELECT count(*) FROM collectives WHERE kind = 'nccl_coll'").fetchone()[0]
    own = con.execute("SELECT count(*) FROM _collectives WHERE kind = 'nccl_coll'").fetchone()[0]
    assert traced == own + stored       # each bulk row once in the view, with its run's first line's row
    shown, kept = (con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in ("lines", "_lines"))
    assert shown == kept + stored
    listed = store.tables(con)
    assert {"lines", "nccl_lines", "collectives"} <= set(listed) and not [t for t in listed if t.startswith("_")]
    catalogue = {info.name: info.rows for info in table_catalogue(con)}
    assert set(catalogue) == set(listed)
    assert catalogue["collectives"] == con.execute("SELECT count(*) FROM collectives").fetchone()[0]


_WHOLE: dict[tuple, tuple] = {}   # paths -> store_of them parsed one chunk at a time, in one go


def whole_store(paths, monkeypatch) -> tuple[dict, list, dict]:
    """``store_of(paths)`` in one chunk, by this process: the reference the ways of cutting and
    sharing the work are held to, parsed once per module."""
    key = tuple(map(str, paths))
    if key not in _WHOLE:
        with monkeypatch.context() as patch:
            patch.setenv("POSTMORTEM_WORKERS", "1")
            _WHOLE[key] = store_of(paths)
    return _WHOLE[key]


@pytest.mark.parametrize("processes", [True, False], ids=["processes", "threads"])
@pytest.mark.parametrize("paths, segment", [([DEADLOCK], 60_000), ([REAL], None)], ids=["deadlock", "real-data-logs"])
def test_chunks_workers_and_segments_change_nothing(paths, segment, processes, coll_run, monkeypatch):
    """Small chunks parsed two at a time, by two worker processes or two threads; on the
    deadlock sample and the COLL run also every log of more than 60 kB cut into segments. (The
    real excerpts are pastes that keep NCCL's connection lines and their ``Connected all rings``
    marker close: cut at 60 kB, a marker lands in the next segment, which is what a cut every
    32 MB does only to logs that large.)"""
    if not paths[0].exists():
        pytest.skip(f"{paths[0]} is not present")
    paths = paths + [coll_run]
    whole = whole_store(paths, monkeypatch)
    cuts = []
    real_segments = ingest.segments
    monkeypatch.setattr(ingest, "segments", lambda *a: cuts.append(len(out := real_segments(*a))) or out)
    monkeypatch.setattr(ingest, "CHUNK_BYTES", 60_000)
    if segment:
        monkeypatch.setattr(ingest, "SEGMENT_BYTES", segment)
    if processes:
        monkeypatch.setenv("POSTMORTEM_WORKERS", "2")
    else:   # as many threads as the budget allows: two, whatever this machine's cores
        monkeypatch.delenv("POSTMORTEM_WORKERS", raising=False)
        monkeypatch.setattr(ingest.budget, "workers", lambda cores: 2)
        threads = []
        real_in_threads = ingest._in_threads
        monkeypatch.setattr(ingest, "_in_threads", lambda jobs, count: threads.append(count) or real_in_threads(jobs, count))
    parallel = store_of(paths)
    assert processes or threads == [2]
    assert (max(cuts) > 1) == bool(segment), "the deadlock's large logs are cut into segments, nothing else"
    assert not differing(whole[0], parallel[0])
    assert whole[1] == parallel[1] and whole[2] == parallel[2]


def test_whole_file_inputs_read_side_by_side_change_nothing(monkeypatch):
    """A chunk's nsys exports (the straggler sample's 16, and the two real ones) are read in
    threads, each into its own result; one at a time (``$POSTMORTEM_WORKERS``) the store, the
    findings and the verdict are the same."""
    real_nsys = ROOT.parent / "shared" / "real-data" / "nsys"
    paths = [ROOT / "sample_logs" / "straggler", *([real_nsys] if real_nsys.is_dir() else [])]
    monkeypatch.setenv("POSTMORTEM_WORKERS", "1")
    alone = store_of(paths)
    monkeypatch.delenv("POSTMORTEM_WORKERS")
    monkeypatch.setattr(ingest.budget, "workers", lambda cores: 2)
    threads, real_read = set(), ingest._read_whole
    monkeypatch.setattr(ingest, "_read_whole", lambda *a: threads.add(threading.current_thread().name) or real_read(*a))
    side_by_side = store_of(paths)
    assert len({name for name in threads if name.startswith("postmortem-whole")}) == 2, threads
    assert not differing(alone[0], side_by_side[0])
    assert alone[1] == side_by_side[1] and alone[2] == side_by_side[2]


def test_parsing_chunks_together_changes_nothing(coll_run, monkeypatch):
    """The batched parsers over the lines of five small chunks at once (``parse_chunks``: a
    job's chunks share them) give what one whole chunk gives. (Small chunks one at a time are
    held to the whole chunk by test_chunks_workers_and_segments_change_nothing.)"""
    paths = [DEADLOCK, coll_run]
    alone = whole_store(paths, monkeypatch)
    monkeypatch.setattr(ingest, "CHUNK_BYTES", 60_000)
    monkeypatch.setattr(ingest, "JOB_CHUNKS", 5)
    monkeypatch.setattr(ingest, "mostly_coll", lambda chunk: True)   # the deadlock's chunks too
    real, sizes = ingest.parse_chunks, []
    monkeypatch.setattr(ingest, "parse_chunks", lambda chunks, spool=None, batch_bytes=None:
                        sizes.append(len(chunks)) or real(chunks, spool, 10**9))
    together = store_of(paths)
    assert max(sizes) == 5 and len(sizes) > 3
    assert not differing(alone[0], together[0])
    assert alone[1] == together[1] and alone[2] == together[2]


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_jobs_hold_every_chunk_once_in_order(workers):
    for n in range(14):
        chunks = [[ingest.Piece(i, None)] for i in range(n)]
        jobs = ingest.plan_jobs(chunks, workers, groupable=lambda chunk: chunk[0].input_id % 7 != 3)
        assert [c for job in jobs for c in job] == chunks
        assert all(1 <= len(job) <= ingest.JOB_CHUNKS for job in jobs)
        assert all(len(job) == 1 for job in jobs if job[0][0].input_id % 7 == 3 or job[-1][0].input_id % 7 == 3)
        if workers > 1:   # the last chunks alone, so that the workers finish together
            assert all(len(job) == 1 for job in jobs[-2 * workers:])
        if n == 13 and workers == 1:
            assert [len(job) for job in jobs] == [3, 1, 4, 2, 1, 2]


def test_a_few_chunks_are_evened_out_over_the_workers():
    """7 chunks' worth of files on 2 workers: 8 chunks of even size (one worker would parse 4
    chunks while the other waits); 2 chunks of uneven size: 2 of the same; with many chunks, or
    one worker, the plan is unchanged; a run of one chunk's worth is cut in two from
    ``SPLIT_FROM`` on."""
    from pathlib import Path

    from postmortem.analyzer.discover import InputFile

    def files(count: int) -> list[InputFile]:
        return [InputFile(Path(f"/nonexistent/{i}.log"), f"{i}.log", 1 << 20, 0.0) for i in range(count)]

    seven = files(7 * 32 - 3)
    assert len(ingest.plan_chunks(seven)) == 7
    even = ingest.plan_chunks(seven, workers=2)
    assert len(even) == 8
    assert [p.input_id for chunk in even for p in chunk] == list(range(len(seven)))
    sizes = [sum(p.size for p in chunk) for chunk in even]
    assert max(sizes) <= ingest.CHUNK_BYTES and max(sizes) - min(sizes) <= 1 << 20
    uneven = files(52)      # 32 MB and 20 MB: one of two parses 12 MB more than the other
    assert [sum(p.size for p in chunk) >> 20 for chunk in ingest.plan_chunks(uneven)] == [32, 20]
    assert [sum(p.size for p in chunk) >> 20 for chunk in ingest.plan_chunks(uneven, workers=2)] == [26, 26]
    many = files(ingest.EVEN_CHUNKS_BELOW * 2 * 32 + 5)
    assert ingest.plan_chunks(many, workers=2) == ingest.plan_chunks(many)
    # a run of one chunk: one a worker from SPLIT_FROM on, whole files each; one chunk below it
    one = files(ingest.SPLIT_FROM >> 20)
    assert len(ingest.plan_chunks(one)) == 1
    assert [sum(p.size for p in chunk) >> 20 for chunk in ingest.plan_chunks(one, workers=2)] == \
        [ingest.SPLIT_FROM >> 21] * 2
    assert len(ingest.plan_chunks(files((ingest.SPLIT_FROM >> 20) - 1), workers=2)) == 1


def test_chunks_are_evened_out_by_work_not_bytes_alone():
    """Many small files cost more than their bytes (each is opened, sniffed, enveloped): 20 logs
    of 1 MiB and 6,000 py-spy dumps of 1 KiB on 2 workers are cut where the work, bytes plus
    ``FILE_COST_BYTES`` a file, is halved, not the bytes (the dumps were one chunk that one
    worker parsed alone while the other waited)."""
    from pathlib import Path

    from postmortem.analyzer.discover import InputFile

    sizes = [1 << 20] * 20 + [1 << 10] * 6000
    items = [InputFile(Path(f"/nonexistent/{i}.log"), f"{i}.log", size, 0.0) for i, size in enumerate(sizes)]
    chunks = ingest.plan_chunks(items, workers=2)
    assert len(chunks) == 2 and [p.input_id for chunk in chunks for p in chunk] == list(range(len(items)))
    work = [sum(p.size + ingest.FILE_COST_BYTES for p in chunk) for chunk in chunks]
    assert abs(work[0] - work[1]) <= (1 << 20) + ingest.FILE_COST_BYTES
    assert sum(p.size for p in chunks[0]) > 3 * sum(p.size for p in chunks[1])    # not an even split of bytes


def test_only_chunks_mostly_of_coll_lines_are_grouped(tmp_path):
    """A chunk whose lines go mostly to the bulk keeps a twentieth of them: four such chunks
    share a job. Any other chunk keeps all of its lines, and is a job of its own."""
    from postmortem.analyzer.discover import discover

    coll = "h:1:2 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x2 count 8 datatype 7 op 0 " \
           "root 0 comm 0x3 [nranks=8] stream 0x4\n"
    plain = "[rank0]: iteration 1 | lm loss 2.0\n"
    for name, text in [("a.log", coll), ("b.log", coll), ("c.log", plain), ("d.log", coll), ("e.log", coll)]:
        (tmp_path / name).write_text("h:1:2 [0] NCCL INFO Bootstrap\n" * 50 + text * 3000)
    items, _ = discover([tmp_path])
    chunks = ingest.plan_chunks(items, chunk_bytes=1)    # a chunk per file
    assert [ingest.mostly_coll(c) for c in chunks] == [True, True, False, True, True]
    assert [len(job) for job in ingest.plan_jobs(chunks, 1)] == [2, 1, 2]


def test_the_order_the_paths_are_given_in_changes_nothing(coll_run, monkeypatch):
    one = whole_store([DEADLOCK, coll_run], monkeypatch)
    other = store_of([coll_run, DEADLOCK])
    assert not differing(one[0], other[0])
    assert one[1] == other[1] and one[2] == other[2]


def test_a_store_file_holds_the_coll_rows_as_a_table(coll_run, tmp_path):
    """With ``--db`` the bulk rows are a table of the file (users open it after the process,
    whose files are gone), and the store is the same as in memory."""
    in_memory = store_of([coll_run], use_cache=False)
    in_file = store_of([coll_run], use_cache=False, db_path=tmp_path / "kept.duckdb")
    assert not differing(in_memory[0], in_file[0]) and in_memory[1:] == in_file[1:]
    import duckdb

    with duckdb.connect(str(tmp_path / "kept.duckdb"), read_only=True) as con:
        kinds = dict(con.execute("SELECT table_name, table_type FROM information_schema.tables").fetchall())
    assert kinds[bulk.ROWS] == "BASE TABLE" and kinds["collectives"] == "VIEW"


def test_a_hit_into_a_store_file_writes_the_coll_rows_as_a_table(coll_run, tmp_path, monkeypatch):
    """A Parquet entry of a COLL run read into ``--db``: the bulk rows become a table of that
    file and the views are made again over the tables; the store is the one a fresh run gives."""
    import duckdb

    from postmortem.analyzer import cache

    monkeypatch.setenv("POSTMORTEM_CACHE_DIR", str(tmp_path / "cache"))
    fresh = store_of([coll_run], use_cache=True)      # parses and fills the cache
    assert [entry.suffix for entry in cache.entries(tmp_path / "cache")] == [".store"]
    hit = analyze([coll_run], use_cache=True, db_path=tmp_path / "kept.duckdb")
    assert hit.timings.get("cache") == "hit"
    hit.con.close()
    again = store_of([coll_run], use_cache=True, db_path=tmp_path / "kept.duckdb")
    assert not differing(fresh[0], again[0]) and fresh[1:] == again[1:]
    with duckdb.connect(str(tmp_path / "kept.duckdb"), read_only=True) as con:
        kinds = dict(con.execute("SELECT table_name, table_type FROM information_schema.tables").fetchall())
    assert kinds[bulk.ROWS] == "BASE TABLE" and kinds["_lines"] == "BASE TABLE" and kinds["lines"] == "VIEW"


@pytest.mark.parametrize("large", [False, True], ids=["in-memory", "parquet-tables"])
def test_findings_are_the_same_with_and_without_the_cache(coll_run, tmp_path, monkeypatch, large):
    """A COLL-traced run's cache entry holds the bulk rows' files and makes the views again on a
    hit (its tables in memory, or Parquet files as a large run's are: ``store.SPILL_BYTES``)."""
    from postmortem.analyzer import cache

    monkeypatch.setenv("POSTMORTEM_CACHE_DIR", str(tmp_path / "cache"))
    if large:
        monkeypatch.setattr(store, "SPILL_BYTES", 0)
    off = store_of([coll_run], use_cache=False)
    first = store_of([coll_run], use_cache=True)       # parses and fills the cache
    (entry,) = cache.entries(tmp_path / "cache")
    assert entry.suffix == ".store"
    hit = analyze([coll_run], use_cache=True)
    assert hit.timings.get("cache") == "hit"
    assert hit.con.execute(f"SELECT count(*) FROM {bulk.ROWS}").fetchone()[0] > 1000
    again = store_of([coll_run], use_cache=True)
    assert not differing(off[0], first[0]) and not differing(off[0], again[0])
    assert off[1] == first[1] == again[1] and off[2] == first[2] == again[2]
    monkeypatch.setenv("POSTMORTEM_WORKERS", "2")
    monkeypatch.setattr(ingest, "CHUNK_BYTES", 100_000)
    parallel_off = store_of([coll_run], use_cache=False)
    assert parallel_off[1] == off[1] and not differing(parallel_off[0], off[0])


def test_a_segment_ends_at_a_line_start_and_counts_the_lines_before_it(tmp_path):
    from postmortem.analyzer.discover import discover

    text = "".join(f"line {i}\n" + ("  indented continuation\n" if i % 3 == 0 else "") for i in range(5000))
    path = tmp_path / "big.log"
    path.write_text(text)
    (item,), _ = discover([path])
    pieces = ingest.segments(0, item, 4096)
    assert len(pieces) > 10
    data = path.read_bytes()
    assert pieces[0].start == 0 and pieces[-1].end == len(data)
    for before, after in zip(pieces, pieces[1:]):
        assert before.end == after.start
        assert data[after.start - 1:after.start] == b"\n" and not data[after.start:after.start + 1].isspace()
        assert after.line_base == data[:after.start].count(b"\n")


def test_a_large_single_log_is_parsed_in_bounded_memory(tmp_path):
    """A 600 MB log (a COLL trace with a c10d line every 4,000 lines) is read a segment at a
    time: peak RSS stays far below the file's size (a whole-file read alone would be 600 MB,
    its lines several times that)."""
    script = textwrap.dedent(f"""
        import json, resource, sys
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from postmortem.analyzer.pipeline import analyze
        block = "".join(
            f"h20-node-01:2231:2231 [0] NCCL INFO AllReduce: opCount {{i:x}} sendbuff 0x7f2a10000000 "
            f"recvbuff 0x7f2a10000000 count 262144 datatype 7 op 0 root 0 comm 0x55d0c0a1b2c0 [nranks=16] "
            f"stream 0x55d0c0000a10\\n" for i in range(4000))
        block += "[rank0]:[E1124 03:20:21.001 ProcessGroupNCCL.cpp:1] [Rank 0] Watchdog caught collective operation timeout\\n"
        path = Path({str(tmp_path)!r}) / "rank0.log"
        written = 0
        with open(path, "w") as handle:
            while handle.tell() < 600_000_000:
                handle.write(block)
                written += block.count("\\n")
        run = analyze([path], use_cache=False)
        lines = run.con.execute("SELECT sum(lines), sum(parsed_lines) FROM inputs").fetchone()
        print(json.dumps({{"rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
                           "children_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024,
                           "lines": lines[0], "parsed": lines[1], "bytes": path.stat().st_size,
                           "physical": written}}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                         env={"POSTMORTEM_CACHE": "off", "POSTMORTEM_WORKERS": "1", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["lines"] == got["physical"] > 3_000_000 and got["parsed"] >= 0.99 * got["lines"], got
    assert got["rss_mib"] < 1024, got


def test_workers_never_run_the_callers_script_again(tmp_path):
    """A script without an ``if __name__ == "__main__"`` guard that analyses with workers: the
    spawned workers must not run it again (they would print twice, or analyse again)."""
    script = tmp_path / "unguarded.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        print("script body ran")
        from postmortem.analyzer import ingest
        from postmortem.analyzer.discover import discover
        items, _ = discover([{str(DEADLOCK)!r}])
        parsed = ingest.parse_all(items, workers=2, chunk_bytes=2_000_000)
        print("lines", parsed.lines.height)
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                         env={"POSTMORTEM_CACHE": "off", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("script body ran") == 1, out.stdout
    assert "lines " in out.stdout and "RuntimeError" not in out.stderr


def test_the_bulk_reads_coll_lines_as_the_nccl_parser_does():
    """``postmortem.parsers.nccl.coll_rows`` (the bulk path) gives, column for column, what the whole NCCL
    parser gives for the same COLL lines: catalogue samples, odd headers, trailing blanks."""
    import polars as pl

    import postmortem.parsers.nccl as nccl
    from postmortem.parsers.nccl_catalogue import KINDS

    messages = list(KINDS[0].samples) + [
        "Broadcast: opCount ff sendbuff 0x1 recvbuff 0x1 count 0 datatype 2 op 0 root -1 comm (nil) "
        "[nranks=1] stream 0x2 \t",
        "ReduceScatter: opCount 0 sendbuff 0xa recvbuff 0xb count 17 datatype 99 op 7 root 0 comm 0x3 "
        "[nranks=4096] stream 0x4"]
    headers = ["node03:38646:35596 [4]", "h-1.example.org:1:2 [0]", "x:0099:7 [15]"]
    text = [f"{h} NCCL INFO {m}" for h in headers for m in messages]
    lines = pl.DataFrame({"line_no": pl.Series(range(1, len(text) + 1), dtype=pl.UInt32), "text": text})
    assert lines.select(nccl.is_plain_coll(pl.col("text")).all()).item()
    whole = nccl.parse(lines).tables["collectives"]
    bulk_rows = nccl.coll_rows(lines)
    assert bulk_rows.height == len(text)
    assert bulk_rows.equals(whole.select(bulk_rows.columns))


@pytest.mark.parametrize("coll_lines", [1, 40], ids=["few-coll-lines", "mostly-coll-lines"])
def test_plain_marks_are_the_two_tests(coll_lines):
    """``plain_marks`` (what a chunk's lines are marked with) gives what ``is_plain_info`` and
    ``is_plain_coll`` give, line for line, where COLL lines are few (the shape tested on them
    alone) or most, with torn, foreign and missing lines among them."""
    import polars as pl

    import postmortem.parsers.nccl as nccl

    coll = ("node03:38646:35596 [4] NCCL INFO AllReduce: opCount 1a sendbuff 0x1 recvbuff 0x2 count 8 "
            "datatype 7 op 0 root 0 comm 0x5 [nranks=8] stream 0x6")
    others = ["node03:38646:35596 [4] NCCL INFO Channel 00/02 : 0 1", "[rank3]: RuntimeError: boom",
              coll[:60], "[default0]:" + coll, coll.replace("opCount 1a", "opCount zz"),
              coll.replace(" NCCL INFO", " NCCL INFO NCCL INFO"), None, ""]
    text = pl.Series("text", [coll] * coll_lines + others, dtype=pl.String)
    want = text.to_frame().select(info=nccl.is_plain_info(pl.col("text")), coll=nccl.is_plain_coll(pl.col("text")))
    info, marked = nccl.plain_marks(text)
    assert info.to_list() == want["info"].to_list() and marked.to_list() == want["coll"].to_list()
    assert marked.sum() == coll_lines


def test_a_parser_failing_on_one_input_of_a_batch_costs_that_input_only(tmp_path, monkeypatch):
    """The env dumps of a chunk are parsed in one call: when it raises, each dump is parsed
    alone, so only the one that breaks the parser loses its rows (with a message saying so)."""
    from postmortem.analyzer.pipeline import analyze
    from postmortem.parsers import envdump

    for node in ("node01", "node02", "node03"):
        poison = "POISON=1\n" if node == "node02" else ""
        (tmp_path / f"{node}.env").write_text(f"NCCL_DEBUG=INFO\nNCCL_IB_HCA=mlx5_0\n{poison}HOSTNAME={node}\n")
    parse = envdump.parse

    def breaks_on_poison(lines):
        if lines["text"].str.contains("POISON").any():
            raise RuntimeError("a parser bug")
        return parse(lines)
    monkeypatch.setattr(envdump, "parse", breaks_on_poison)
    run = analyze([tmp_path])
    nodes = run.frame("SELECT DISTINCT node FROM env_nodes ORDER BY node")["node"].to_list()
    problems = run.frame("SELECT path, problem FROM inputs WHERE problem IS NOT NULL")
    run.con.close()
    assert nodes == ["node01", "node03"]
    assert problems["path"].to_list() == ["node02.env"]
    assert "parser envdump failed (RuntimeError: a parser bug)" in problems["problem"][0]


def test_tables_are_put_in_line_order_as_a_stable_sort_would():
    """``pipeline._sorted``: a table out of (input, line, parser) order comes back as a stable
    sort gives it; one in order, an empty one and a table left out are the same objects."""
    import polars as pl

    from postmortem.analyzer.pipeline import _sorted

    shuffled = pl.DataFrame({"input_id": [1, 0, 1, 0], "line_no": [2, 5, 2, 1], "parser": ["b", "a", "a", "a"],
                             "row": [0, 1, 2, 3]})
    ordered = shuffled.sort("input_id", "line_no", maintain_order=True)
    empty, other = ordered.clear(), pl.DataFrame({"x": [3, 1]})
    tables = {"events": shuffled, "ordered": ordered, "empty": empty, "other": other}
    keys = ["input_id", "line_no"]
    out = _sorted(tables, {"events": [*keys, "parser"], "ordered": keys, "empty": keys})
    assert out["events"]["row"].to_list() == [3, 1, 2, 0]
    assert out["ordered"] is ordered and out["empty"] is empty and out["other"] is other
    assert list(out) == list(tables)


def test_a_chunks_tables_of_several_parsers_come_out_in_line_order(tmp_path):
    """A chunk's thread puts each table several parsers wrote into its final order (``row_order``),
    so that the analysis finds it in order and gathers none of its columns again; the first input's
    rows stay before the second's."""
    from postmortem.analyzer.discover import discover

    warn = "h1:100:100 [0] NCCL WARN NET/IB : Got completion from peer with error 12"
    watchdog = ("[rank0]:[E1021 10:00:0{i}.1 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation "
                "timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
                "600001 milliseconds before timing out.")
    for name in ("a.log", "b.log"):
        (tmp_path / name).write_text("\n".join(line for i in range(4) for line in (warn, watchdog.format(i=i))) + "\n")
    items, _ = discover([tmp_path])
    chunk = ingest.parse_chunk([ingest.Piece(i, item) for i, item in enumerate(items)])
    events = chunk.tables["events"]
    assert set(events["parser"]) >= {"nccl", "c10d"}
    assert events.select("input_id", "line_no", "parser").rows() == sorted(
        events.select("input_id", "line_no", "parser").rows())
    assert ingest.row_order(events.columns) == ["input_id", "line_no", "parser"]
