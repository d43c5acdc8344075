"""Issue 8: Nsight Systems SQLite exports and PyTorch profiler (Kineto) traces.

Real exports are read from ``../shared/real-data/nsys/`` (never copied into the repo); those
tests skip when the folder is absent.
"""

from __future__ import annotations

import gzip
import json
import shutil
from datetime import datetime
from pathlib import Path

import duckdb
import polars as pl
import pytest

from postmortem.cli import main
from postmortem.generator.rungen.nsys import write_kineto_trace, write_nsys_export, write_profiled_run
from postmortem.parsers import kineto, nsys

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "real-data" / "nsys"
H100 = REAL / "h100x2-torchrun-nccl-2.25.sqlite"
SINGLE = REAL / "single-gpu-2026.1.sqlite"
needs_real = pytest.mark.skipif(not H100.exists(), reason="real nsys exports not present in ../shared")


def _query(db: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.sql(sql).fetchall()
    finally:
        con.close()


# --- kernel names: all four families of docs/formats/nsys-and-traces.md 4.1/4.2 -------------------

def test_nccl_kernel_name_families():
    names = pl.Series([
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
        "ncclKernel_AllReduce_COLLNET_DIRECT_LL_Sum___nv_bfloat16",
        "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)",
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)",
        "ncclDevKernel_ReduceScatter_Sum_f32_TREE_LL",
        "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)",
        "ncclSymkDevKernel_AllReduce_RSxLD_AGxST_sum_bf16",
        "ncclSymDevKernel_AllGather_LL",
        "ncclSomethingNew",
        "sm90_xmma_gemm_bf16bf16_bf16f32",
    ])
    f = {r["name"]: r for r in nsys.kernel_fields(names).to_dicts()}
    legacy = f["ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"]
    assert (legacy["nccl_family"], legacy["op"], legacy["dtype"], legacy["algo"], legacy["proto"]) == \
        ("legacy", "allreduce", "f32", "RING", "LL")
    assert legacy["algo_reliable"] is True
    collnet = f["ncclKernel_AllReduce_COLLNET_DIRECT_LL_Sum___nv_bfloat16"]
    assert (collnet["algo"], collnet["dtype"]) == ("COLLNET_DIRECT", "bf16")
    assert f["ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)"]["proto"] == "SIMPLE"
    dev = f["ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)"]
    assert (dev["nccl_family"], dev["op"], dev["dtype"], dev["algo"], dev["algo_reliable"]) == \
        ("dev_red", "allreduce", "bf16", "RING", False)
    assert f["ncclDevKernel_ReduceScatter_Sum_f32_TREE_LL"]["algo"] == "TREE"
    assert f["ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"]["op"] == "allgather"
    assert f["ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)"]["op"] == "sendrecv"
    symm = f["ncclSymkDevKernel_AllReduce_RSxLD_AGxST_sum_bf16"]
    assert (symm["nccl_family"], symm["algo"], symm["dtype"]) == ("symmetric", "RSxLD_AGxST", "bf16")
    assert f["ncclSymDevKernel_AllGather_LL"]["algo"] == "LL"
    assert f["ncclSomethingNew"]["nccl_family"] == "nccl-other" and f["ncclSomethingNew"]["is_nccl"]
    assert not f["sm90_xmma_gemm_bf16bf16_bf16f32"]["is_nccl"]


# --- real exports -----------------------------------------------------------------------------

@needs_real
def test_real_h100_export_kernels_ranks_nvtx_and_time():
    tables, _ = nsys.read(H100)
    k = tables["kernels"]
    assert len(k) == 4010
    nccl = k.filter(pl.col("is_nccl"))
    # both ranks' NCCL kernels, collective decoded (SendRecv carries no element type in >= 2.19 names)
    assert nccl.group_by("rank").len().sort("rank")["len"].to_list() == [33, 33]
    assert set(nccl["collective"]) == {"SendRecv"} and set(nccl["op"]) == {"sendrecv"}
    assert set(nccl["nccl_family"]) == {"dev_other"}
    # NCCL >= 2.19 SendRecv kernels carry no element type in their name (reference 4.1/4.3), and this
    # export has no payload blobs and no Kineto args: the type is honestly unknown, not guessed.
    assert nccl["dtype"].null_count() == 66
    # the two python processes are ranks 0 and 1 (torchrun --nnodes=1 --nproc_per_node=2, device = local rank)
    procs = tables["profile_processes"].sort("pid")
    assert procs.select("pid", "device", "rank").rows() == [(144, 0, 0), (145, 1, 1)]
    assert set(procs["rank_confidence"]) == {"derived"} and "torchrun" in procs["rank_source"][0]
    # UTC = TARGET_INFO_SESSION_START_TIME.utcEpochNs + session-relative ns (reference 2.2/2.8):
    # the reference's row start=60120634200 (pid 144, correlation 2610820) is 07:59:50.297386635,
    # not ANALYSIS_DETAILS.startTime-based; the 300 ms window lies before the export (08:01:27).
    hit = nccl.filter((pl.col("pid") == 144) & (pl.col("correlation") == 2610820))
    assert hit["start"].cast(pl.Int64).to_list() == [1779782330176752435 + 60120634200]
    row = hit.row(0, named=True)
    assert row["start"] == datetime(2026, 5, 26, 7, 59, 50, 297386)  # python datetime keeps us
    assert k["start"].min() >= datetime(2026, 5, 26, 7, 59, 50) and k["end"].max() < datetime(2026, 5, 26, 8, 1, 27)
    row = nccl.filter(pl.col("correlation") == 2610820).row(0, named=True)
    assert row["dur_ns"] == 60120734008 - 60120634200 and row["device"] == 0 and row["stream"] == 7
    assert row["grid_x"] == 32 and row["block_x"] == 640
    # launch joined on (pid, correlationId): the launching thread is the main thread
    assert k.filter(pl.col("tid").is_not_null()).height > 3900
    # NVTX: PyTorch ranges (domain 0, inline text) and NCCL's own (registered strings, domain 1)
    nvtx = tables["nvtx"]
    assert len(nvtx) == 19118
    nccl_api = nvtx.filter(pl.col("is_nccl_api"))
    assert {"ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd"} <= set(nccl_api["text"])
    assert set(nccl_api["domain_id"]) == {1}
    assert nvtx.filter(pl.col("text").str.starts_with("nccl:all_to_all")).height > 0
    assert set(nvtx["rank"].drop_nulls()) == {0, 1}
    assert tables["memcpy"].height == 1020 and "Device-to-Device" in set(tables["memcpy"]["copy_kind"])


@needs_real
def test_real_single_gpu_export():
    tables, _ = nsys.read(SINGLE)
    k = tables["kernels"]
    assert len(k) == 2 and not k["is_nccl"].any()
    # ANALYSIS_DETAILS.startTime is a raw clock (~6 days); events are session-relative: wall time
    # must be utcEpochNs + ts, i.e. on the capture day, not days later.
    info = tables["profile_info"].row(0, named=True)
    assert info["schema_version"] == "3.24.14"
    assert all(ts.date() == info["session_start"].date() for ts in k["start"])
    gpu = tables["gpus"].row(0, named=True)
    assert gpu["name"] == "NVIDIA GeForce RTX 3080" and gpu["bus_id"] == "0000:01:00.0"
    assert tables["profile_processes"]["rank_confidence"].to_list() == ["guessed"]
    streams = tables["process_streams"].sort("stream")
    assert streams["stream"].to_list() == ["stderr", "stdout"] and "UserWarning" in streams["text"][0]


@needs_real
def test_real_exports_through_ingest(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    for f in (H100, SINGLE):
        (folder / f.name).symlink_to(f)
    db = tmp_path / "real.duckdb"
    # links out of the job folder are read only when asked (docs/security.md)
    assert main(["ingest", str(folder), "--db", str(db), "--quiet", "--follow-symlinks"]) == 0
    kinds = dict(_query(db, "SELECT path, kind FROM inputs"))
    assert set(kinds.values()) == {"nsys"}
    rows = _query(db, "SELECT rank, count(*) FROM collectives WHERE kind = 'nsys_kernel' GROUP BY rank ORDER BY rank")
    assert rows == [(0, 33), (1, 33)]
    assert _query(db, "SELECT count(*) FROM collectives WHERE kind LIKE '%watchdog%'") == [(0,)]
    ranks = _query(db, "SELECT rank, pid, confidence FROM ranks ORDER BY rank")
    assert (0, 144, "derived") in ranks and (1, 145, "derived") in ranks


# --- generated 8-rank profiled run ------------------------------------------------------------

def test_generated_straggler_is_late_arriver(tmp_path, capsys):
    write_profiled_run(tmp_path / "run", world=8, steps=12, late_rank=5)
    db = tmp_path / "gen.duckdb"
    assert main(["ingest", str(tmp_path / "run"), "--db", str(db), "--quiet"]) == 0
    capsys.readouterr()
    sql = ("SELECT rank, count(*) AS times_last FROM collective_timing WHERE last_arrival AND op = 'allreduce' "
           "GROUP BY rank ORDER BY times_last DESC")
    assert main(["query", "--db", str(db), sql, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows == [{"rank": 5, "times_last": 12}]
    # its own kernel is the shortest; the others' kernels include the wait for it
    durations = dict(_query(db, "SELECT rank, median(dur_ns) FROM collective_timing GROUP BY rank"))
    assert durations[5] == min(durations.values()) and max(durations.values()) > 5 * durations[5]
    skew = dict(_query(db, "SELECT rank, min(skew_ns) FROM collective_timing GROUP BY rank"))
    assert skew[5] >= 2_900_000 and all(skew[r] < 100_000 for r in skew if r != 5)
    assert _query(db, "SELECT count(DISTINCT rank), min(rank_confidence) FROM collectives "
                      "WHERE kind = 'nsys_kernel'") == [(8, "certain")]
    # different session start per rank: matching by index works on UTC, not on session-relative times
    assert _query(db, "SELECT count(DISTINCT coll_index) FROM collective_timing") == [(12,)]
    mem = _query(db, "SELECT max(in_use_bytes), min(in_use_bytes) FROM gpu_memory")
    assert mem == [(2147483648, 0)]
    assert _query(db, "SELECT count(*) FROM gpus") == [(8,)]
    assert _query(db, "SELECT count(*) FROM nvtx WHERE is_nccl_api AND text = 'ncclAllReduce'") == [(96,)]
    # NCCL NVTX payloads (exported with blobs): message size and communicator attach to the kernels
    assert _query(db, "SELECT DISTINCT coll_key, group_size, bytes FROM collective_timing") == \
        [("0x9f3c1a2b4d5e6f70/allreduce/bf16", 8, 64 << 20)]
    late_bw, others_bw = _query(db, "SELECT median(busbw_gbyte_s) FILTER (rank = 5), "
                                    "median(busbw_gbyte_s) FILTER (rank <> 5) FROM collective_timing")[0]
    assert late_bw > 5 * others_bw   # the waiting ranks' kernels understate the link


def test_rank_from_nccl_comm_init_payload(tmp_path):
    path = write_nsys_export(tmp_path / "profile_a.sqlite", 6, steps=2, record_env=False)
    tables, _ = nsys.read(path)
    proc = tables["profile_processes"].row(0, named=True)
    assert proc["rank"] == 6 and proc["rank_confidence"] == "derived" and "CommInit" in proc["rank_source"]
    nameless = write_nsys_export(tmp_path / "profile_b.sqlite", 6, steps=2, record_env=False, payloads=False)
    proc = nsys.read(nameless)[0]["profile_processes"].row(0, named=True)
    assert proc["rank_confidence"] == "guessed"


def test_generated_export_matches_real_column_types(tmp_path):
    if not H100.exists():
        pytest.skip("real nsys exports not present")
    import sqlite3
    path = write_nsys_export(tmp_path / "rank_0.sqlite", 0, steps=2)
    gen = sqlite3.connect(path)
    real = sqlite3.connect(f"file:{H100}?mode=ro", uri=True)
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "StringIds",
                  "TARGET_INFO_SESSION_START_TIME", "PROCESSES", "CUPTI_ACTIVITY_KIND_MEMCPY"):
        g = {r[1]: (r[2], r[3]) for r in gen.execute(f"PRAGMA table_info({table})")}
        r = {r[1]: (r[2], r[3]) for r in real.execute(f"PRAGMA table_info({table})")}
        assert g == r, table


# --- Kineto ----------------------------------------------------------------------------------

@pytest.mark.parametrize("convention", ["relative", "epoch"])
def test_kineto_both_time_conventions(tmp_path, convention):
    path = write_kineto_trace(tmp_path / "rank_2.pt.trace.json.gz", 2, world=8, steps=3, late_rank=2,
                              convention=convention)
    data = gzip.decompress(path.read_bytes())
    tables, _ = kineto.read(data, path.name)
    k = tables["kernels"].filter(pl.col("is_nccl"))
    assert len(k) == 3 and set(k["rank"]) == {2}
    # both conventions land on the same UTC instant as the nsys export of the same schedule
    expected = datetime(2026, 5, 26, 7, 58, 52, 189805)   # step 0 arrival of rank 2 (10 ms compute, 3 ms delay)
    assert abs((k["start"][0] - expected).total_seconds()) < 2e-6, k["start"][0]
    assert set(k["op"]) == {"allreduce"} and set(k["dtype"]) == {"bf16"}
    assert k["bytes"][0] == 64 << 20 and k["group_size"][0] == 8
    if convention == "relative":
        assert k["seq"].to_list() == [1, 2, 3] and k["pg"][0] == "0"
        assert "baseTimeNanoseconds" in tables["profile_info"]["time_base"][0]
    else:
        assert k["seq"].null_count() == 3
        assert tables["profile_info"]["time_base"][0].startswith("epoch us")
    assert tables["cpu_ops"].filter(pl.col("name").str.starts_with("ProfilerStep#")).height == 3
    assert k["launch_api"].to_list() == ["cudaLaunchKernelExC"] * 3 and set(k["pid"]) == {4002}
    mem = tables["gpu_memory"]
    assert mem["operation"].to_list() == ["alloc", "free"] * 3 and mem["in_use_bytes"].max() == 41 << 30
    assert set(mem["reserved_bytes"]) == {60 << 30} and set(mem["rank"]) == {2}
    assert (k["start"] - k["launch_start"]).dt.total_nanoseconds().to_list() == [6000] * 3


def test_kineto_real_example_event():
    """The real event quoted in the reference (HTA nccl_data.json.gz), with its base time."""
    trace = {"schemaVersion": 1, "baseTimeNanoseconds": 1711964646000000000,
             "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2},
             "traceEvents": [{"ph": "X", "cat": "kernel",
                              "name": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
                              "pid": 0, "tid": 40, "ts": 4458677009853.422, "dur": 2636.669,
                              "args": {"External id": 12945, "device": 0, "stream": 40, "correlation": 60047,
                                       "Collective name": "allreduce", "In msg nelems": 6637568,
                                       "Out msg nelems": 6637568, "Group size": 2, "dtype": "Float",
                                       "Process Group Name": "0", "Process Group Description": "default_pg",
                                       "Process Group Ranks": "[0, 1]"}}]}
    tables, _ = kineto.read(json.dumps(trace).encode(), "nccl_data.json")
    row = tables["kernels"].row(0, named=True)
    assert row["start"].strftime("%Y-%m-%d %H:%M:%S") == "2024-05-23 00:15:23"
    assert row["bytes"] == 26_550_272 and row["algo"] == "RING" and row["dtype"] == "f32"
    assert row["dur_ns"] == 2_636_669


def test_kineto_routed_by_content_and_collective_timing(tmp_path):
    write_profiled_run(tmp_path / "run", world=4, steps=5, late_rank=1, kineto="epoch")
    shutil.rmtree(tmp_path / "run" / "nsys")
    # one rank gzipped (discovery decompresses, then sniffs the content), plus a truncated trace
    plain = tmp_path / "run" / "kineto" / "rank_0.pt.trace.json"
    (plain.parent / "rank_0.pt.trace.json.gz").write_bytes(gzip.compress(plain.read_bytes()))
    plain.unlink()
    data = (plain.parent / "rank_2.pt.trace.json").read_bytes()
    (plain.parent / "broken.pt.trace.json").write_bytes(data[: len(data) // 2])
    db = tmp_path / "k.duckdb"
    assert main(["ingest", str(tmp_path / "run"), "--db", str(db), "--quiet"]) == 0
    kinds = dict(_query(db, "SELECT path, kind FROM inputs"))
    assert kinds["kineto/rank_0.pt.trace.json.gz"] == "kineto" and kinds["kineto/broken.pt.trace.json"] == "skipped"
    problem = _query(db, "SELECT problem FROM inputs WHERE path = 'kineto/broken.pt.trace.json'")[0][0]
    assert "not valid JSON" in problem
    assert _query(db, "SELECT count(DISTINCT rank) FROM kernels") == [(4,)]
    rows = _query(db, "SELECT rank, count(*) FROM collective_timing WHERE last_arrival GROUP BY rank")
    assert rows == [(1, 5)]
    bw = _query(db, "SELECT min(busbw_gbyte_s), max(busbw_best_gbyte_s) FROM collective_timing")[0]
    # allreduce of 64 MiB on 4 ranks: busbw = algbw * 2 * 3 / 4; the late rank's kernel (transfer
    # 400 us + 3 us until the last on-time rank's data) is the best estimate of the link
    assert bw[1] == pytest.approx((64 << 20) / 403_000 * 1.5, rel=1e-6)
    assert bw[0] < bw[1] / 5
    assert _query(db, "SELECT DISTINCT kind FROM collectives") == [("kineto_kernel",)]


# --- bad inputs ------------------------------------------------------------------------------

def test_corrupt_and_foreign_sqlite_give_a_message_and_the_rest_is_analysed(tmp_path, capsys):
    run = tmp_path / "run"
    write_profiled_run(run, world=2, steps=3, late_rank=1)
    good = run / "nsys" / "rank_0.sqlite"
    data = good.read_bytes()
    (run / "nsys" / "truncated.sqlite").write_bytes(data[: len(data) // 3])
    (run / "nsys" / "garbage.sqlite").write_bytes(b"SQLite format 3\x00" + b"\xff" * 5000)
    import sqlite3
    other = sqlite3.connect(run / "other.sqlite")
    other.execute("CREATE TABLE t (x INTEGER)")
    other.commit()
    other.close()
    (run / "train.log").write_text("step 1 loss 2.0\n")
    (run / "profile.nsys-rep").write_bytes(b"\x00\x01NSYS" * 100)
    db = tmp_path / "bad.duckdb"
    assert main(["ingest", str(run), "--db", str(db)]) == 0
    err = capsys.readouterr().err
    problems = dict(_query(db, "SELECT path, problem FROM inputs WHERE kind = 'skipped'"))
    assert "corrupt or truncated" in problems["nsys/truncated.sqlite"]
    assert "corrupt or truncated" in problems["nsys/garbage.sqlite"]
    assert "without Nsight Systems tables" in problems["other.sqlite"]
    assert "nsys export --type sqlite" in problems["profile.nsys-rep"]
    assert "truncated.sqlite" in err
    # the readable exports and the log are still analysed
    assert _query(db, "SELECT count(DISTINCT rank) FROM collectives WHERE kind = 'nsys_kernel'") == [(2,)]
    assert _query(db, "SELECT count(*) FROM lines") == [(1,)]


def test_bulk_read_path_has_no_per_row_python(monkeypatch, tmp_path):
    """The bench's code path at 50k kernels: reads go through ``read_columns`` (one string
    per column per chunk); sqlite3 never hands back more than one row per query."""
    from bench import nsys_bench

    path = nsys_bench.generate(tmp_path / "bench.sqlite", kernels=50_000)
    import sqlite3

    fetched = []
    real_connect = sqlite3.connect

    class Spy:
        def __init__(self, con):
            self._con = con

        def execute(self, sql, *args):
            cur = self._con.execute(sql, *args)
            return SpyCursor(cur)

        def close(self):
            self._con.close()

    class SpyCursor:
        def __init__(self, cur):
            self._cur = cur

        def fetchone(self):
            fetched.append(1)
            return self._cur.fetchone()

        def fetchall(self):
            rows = self._cur.fetchall()
            fetched.append(len(rows))
            return rows

    monkeypatch.setattr(nsys.sqlite3, "connect", lambda *a, **k: Spy(real_connect(*a, **k)))
    tables, _ = nsys.read(path)
    expected = real_connect(path).execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    assert tables["kernels"].height == expected and expected > 49_000
    assert max(fetched) < 100          # only schema/metadata lists ever come back as rows


def test_kineto_2022_epoch_us_integers():
    """Shape of HTA's 2022 test trace (tests/data/call_stack): integer epoch-us ``ts``, no
    baseTimeNanoseconds, ``distributedInfo`` with only ``rank``, a launch on the autograd thread."""
    trace = {"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#552", "pid": 3914, "tid": 3914,
         "ts": 1666149715033200, "dur": 413451, "args": {"External id": 49220}},
        {"ph": "X", "cat": "cpu_op", "name": "AddmmBackward0", "pid": 3914, "tid": 24922, "ts": 1666149715364324,
         "dur": 102, "args": {"External id": 67243, "Sequence number": 714649}},
        {"ph": "X", "cat": "kernel", "name": "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>",
         "pid": 0, "tid": 7, "ts": 1666149715428509, "dur": 45,
         "args": {"External id": 2131433, "device": 0, "stream": 7, "correlation": 2131433}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 3914, "tid": 24922,
         "ts": 1666149715364374, "dur": 10, "args": {"External id": 2131433, "cbid": 211, "correlation": 2131433}}],
        "distributedInfo": {"rank": 0}}
    tables, problems = kineto.read(json.dumps(trace).encode(), "backward_thread.json")
    assert problems == []
    k = tables["kernels"]
    assert k["start"].cast(pl.Int64).to_list() == [1666149715428509000]
    assert k.select("rank", "device", "stream", "tid", "pid", "is_nccl").row(0) == (0, 0, 7, 24922, 3914, False)
    assert tables["profile_info"]["time_base"][0].startswith("epoch us")
    cpu = tables["cpu_ops"].filter(pl.col("name") == "AddmmBackward0").row(0, named=True)
    assert cpu["seq_nr"] == 714649 and cpu["dur_ns"] == 102_000


@pytest.mark.parametrize("where", ["", "kind IN (1, 3)"])
def test_small_tables_read_as_rows_give_the_aggregates_frame(tmp_path, where):
    """``read_columns`` reads a table under ``SMALL_ROWS`` rows as rows in one query; the frame
    is the one the aggregate reading gives: NULLs, empty text, the record separators in a value,
    bytes that are not UTF-8, blobs as hex, numbers stored as text or real, and no rows at all."""
    import sqlite3

    path = tmp_path / "small.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (kind INTEGER, n, name TEXT, blob BLOB)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", [
        (1, 5, "plain", b"\x01\xab"), (3, None, None, None), (1, "12", "", b""), (2, 7.9, "a\x1eb\x1fc", b"\x00"),
        (3, -4, "caf\u00e9 \u2713", b"\xff"), (1, 2**62, "x", None)])
    con.execute("UPDATE t SET name = CAST(X'66ff6f' AS TEXT) WHERE kind = 2")   # not UTF-8
    con.execute("CREATE TABLE empty (kind INTEGER, name TEXT)")
    con.commit()
    con.close()
    con = nsys._open(path)
    try:
        for table in ("t", "empty"):
            args = dict(ints=["kind", "n", "missing"], texts=["name"], hexes=["blob"], where=where)
            rows = nsys.read_columns(con, table, **args)
            aggregates = nsys.read_columns(con, table, small=0, **args)
            assert rows.equals(aggregates, null_equal=True), (table, rows, aggregates)
            assert rows.schema == aggregates.schema
        assert nsys.read_columns(con, "t", ints=["kind"], texts=["name"], small=0).height == 6
    finally:
        con.close()
