"""Issue 12, hostile and broken inputs: every parser, fed random bytes and mutated real-format
lines (tests/fuzz_corpus.py builds them at test time from ../shared/real-data/logs/), returns
frames and counts and never raises; every input's lines are accounted for.

Parsers are called directly here: analyzer.ingest catches a parser's exception and records a
problem, which would hide the bug. The number of inputs tried is printed at the end of the module.
"""
from __future__ import annotations

import json
import os
import pickle
import random
import time

import polars as pl
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from postmortem import parsers
from postmortem.parsers.lines import envelope, envelope_frame, split_inputs
from tests import fuzz_corpus as fc

pytestmark = pytest.mark.skipif(not fc.real_files(), reason="../shared/real-data/logs is not present")

# Deterministic (derandomize): the same inputs on every run, so CI never flakes; no example
# database. POSTMORTEM_FUZZ_SCALE=N (a longer local hunt) runs N times the examples, random ones.
SCALE = max(1, int(os.environ.get("POSTMORTEM_FUZZ_SCALE", "1") or 1))
_BASE = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
                 database=None, derandomize=SCALE == 1)


def fuzz(examples: int) -> settings:
    return settings(_BASE, max_examples=examples * SCALE)


@pytest.fixture(scope="module", autouse=True)
def _report_count(request):
    started = time.perf_counter()
    yield
    line = (f"fuzz: {sum(fc.TRIED.values())} inputs fed to the parsers in {time.perf_counter() - started:.1f} s "
            f"({', '.join(f'{k} {v}' for k, v in sorted(fc.TRIED.items()))})")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line("")
            reporter.write_line(line)
    else:
        print(line)


def check_envelope(data: bytes, frame: pl.DataFrame) -> None:
    """One row per physical line, numbered from 1; offset/length point at that line's bytes."""
    n = fc.physical_lines(data)
    assert frame.height == n
    if not n:
        return
    assert frame["line_no"].to_list() == list(range(1, n + 1))
    body = data[:-1] if data.endswith(b"\n") else data
    pieces = body.split(b"\n")
    offsets, lengths = frame["offset"].to_list(), frame["length"].to_list()
    assert lengths == [len(p) for p in pieces]
    starts = [0]
    for p in pieces[:-1]:
        starts.append(starts[-1] + len(p) + 1)
    assert offsets == starts
    # spot-check the bytes themselves: first, last and a middle line
    for i in {0, n // 2, n - 1}:
        assert data[offsets[i]:offsets[i] + lengths[i]] == pieces[i]
    assert frame["text"].null_count() == 0


# -- the envelope ---------------------------------------------------------------------------------

_PIECES = [b"\n", b"\r", b"\r\n", b"\n\n", b"\x00", b"\xff", b"\xc3", b"\xe2\x82", b"\x1b[31m", b"\x1b[",
           b"\x1b", b" ", b"\t", "é".encode(), "│ ".encode(), b"[rank3]:", b" 12: ", b"[1,5]<stdout>:",
           b"host1: ", b"2025-11-24T03:20:21.001Z ", b"[default0]:", b"(pid=12, ip=10.0.0.1) "]
_chunks = st.one_of(st.binary(max_size=24), st.sampled_from(_PIECES),
                    st.sampled_from(fc.real_lines() or (b"x",)).map(lambda b: b[:200]))
hostile_bytes = st.lists(_chunks, max_size=40).map(b"".join)


@fuzz(250)
@given(data=hostile_bytes)
def test_envelope_one_row_per_physical_line_offsets_point_at_the_bytes(data):
    fc.TRIED["envelope"] += 1
    check_envelope(data, envelope(data))


def test_envelope_of_many_inputs_at_once_accounts_for_each():
    """The batched envelope (what ingest uses) over the whole mutated corpus of one mutation."""
    corpus = fc.mutated_corpus("everything", seed=3)
    datas = [d for _, d in corpus]
    for data, frame in zip(datas, split_inputs(envelope_frame(datas), len(datas))):
        check_envelope(data, frame)
    fc.TRIED["envelope"] += len(datas)


# -- every parser on hostile input ----------------------------------------------------------------


@fuzz(40)
@given(data=st.binary(max_size=3000))
def test_parsers_on_random_bytes(data):
    fc.TRIED["random bytes"] += 1
    frame = envelope(data)
    check_envelope(data, frame)
    fc.run_all_parsers(frame)


@fuzz(60)
@given(data=hostile_bytes)
def test_parsers_on_hostile_byte_soup(data):
    fc.TRIED["byte soup"] += 1
    fc.run_all_parsers(envelope(data))


# line edits hypothesis applies to a window of real lines: (name, position 0-1, choice)
_EDITS = ["truncate", "tear", "utf8", "nul", "cr_storm", "crlf", "ansi", "number", "negative", "splice",
          "duplicate", "drop", "blank"]


def _edit(line: bytes, op: str, where: float, choice: int, pick: int, other: bytes) -> list[bytes]:
    at = int(len(line) * where)
    if op == "truncate":
        return [line[:at]]
    if op == "tear":
        return [line[:at], line[at:]]
    if op == "utf8":
        return [line[:at] + fc.INVALID_UTF8[choice % len(fc.INVALID_UTF8)] + line[at:]]
    if op == "nul":
        return [line[:at] + b"\x00" * (1 + choice % 3) + line[at:]]
    if op == "cr_storm":
        return [b"\r".join([line[:at]] * (1 + choice % 5) + [line]) + b"\r" * (choice % 4)]
    if op == "crlf":
        return [line + b"\r"]
    if op == "ansi":
        return [line[:at] + fc.ANSI[choice % len(fc.ANSI)] + line[at:]]
    if op in ("number", "negative"):
        digits = list(fc._DIGITS.finditer(line))
        if not digits:
            return [line]
        m = digits[pick % len(digits)]
        new = fc.NUMBERS[choice % len(fc.NUMBERS)] if op == "number" else b"-" + m.group(0)
        return [line[:m.start()] + new + line[m.end():]]
    if op == "splice":
        return [line[:at] + other[: int(len(other) * where)]]
    if op == "duplicate":
        return [line, line]
    if op == "drop":
        return []
    return [b""]


@st.composite
def mutated_windows(draw):
    """A window of up to 40 consecutive lines of one real file (so tables and blocks keep their
    shape), with up to 12 line edits, then written with one of several line ends."""
    files = fc.real_files()
    _, data = files[draw(st.integers(0, len(files) - 1))]
    lines = data.split(b"\n")
    start = draw(st.integers(0, max(len(lines) - 1, 0)))
    window = lines[start:start + draw(st.integers(1, 40))]
    pool = fc.real_lines()
    for _ in range(draw(st.integers(0, 12))):
        i = draw(st.integers(0, max(len(window) - 1, 0)))
        if not window:
            break
        op = draw(st.sampled_from(_EDITS))
        other = pool[draw(st.integers(0, len(pool) - 1))]
        window[i:i + 1] = _edit(window[i], op, draw(st.floats(0, 1)), draw(st.integers(0, 1000)),
                                draw(st.integers(0, 1000)), other)
    end = draw(st.sampled_from([b"\n", b"\r\n", b"\n\n", b"\r"]))
    return end.join(window) + draw(st.sampled_from([b"", end, b"\x00" * 64]))


@fuzz(150)
@given(data=mutated_windows())
def test_parsers_on_mutated_real_lines(data):
    fc.TRIED["mutated windows"] += 1
    frame = envelope(data)
    check_envelope(data, frame)
    fc.run_all_parsers(frame)


@fuzz(25)
@given(windows=st.lists(mutated_windows(), min_size=2, max_size=4))
def test_batched_parsers_on_several_mutated_inputs_at_once(windows):
    """The batched parsers as ingest calls them: many inputs in one frame, ``input_id`` stamped."""
    fc.TRIED["batched windows"] += len(windows)
    frame = fc.batch_frame([envelope(w) for w in windows])
    fc.run_all_parsers(frame, parsers.BATCHED)


@pytest.mark.parametrize("mutation", list(fc.MUTATIONS))
def test_parsers_on_the_mutated_real_corpus(mutation):
    """Every real excerpt under one mutation. As ingest calls them: envelope of all inputs at once,
    per-file parsers (and the env-dump parser) on each input, batched parsers on all inputs in one
    frame; and every parser once on the whole corpus as if it were a single file."""
    corpus = fc.mutated_corpus(mutation)
    datas = [d for _, d in corpus]
    frames = split_inputs(envelope_frame(datas), len(datas))
    per_file = [m for m in parsers.ALL_PARSERS if m not in parsers.BATCHED]
    for (label, data), frame in zip(corpus, frames):
        check_envelope(data, frame)
        try:
            fc.run_all_parsers(frame, per_file)
        except AssertionError as exc:
            raise AssertionError(f"{label}: {exc}") from exc
    batch = fc.batch_frame(frames)
    fc.run_all_parsers(batch, parsers.BATCHED)
    fc.run_all_parsers(batch.drop("input_id"))
    fc.TRIED["mutated corpus"] += len(datas) + 1


def test_parsers_on_a_ten_megabyte_line():
    """One 10 MB line made of real lines (every parser's literal filter passes), once for all parsers."""
    data = fc.long_line()
    frame = envelope(data)
    check_envelope(data, frame)
    assert frame["length"].to_list()[1] == 10 * 2**20
    fc.run_all_parsers(frame)
    fc.TRIED["10 MB line"] += 1


# -- accounting through ingest --------------------------------------------------------------------


def test_every_fuzzed_input_is_accounted_for(tmp_path):
    """A folder of mutated real files (each under a different mutation) through the pipeline:
    every text input's ``lines`` is its physical line count and ``parsed + unparsed``, and no
    parser failed (ingest would record that as a problem)."""
    from postmortem.analyzer.discover import is_documentation
    from postmortem.analyzer.pipeline import analyze

    names = list(fc.MUTATIONS)
    written = {}
    for i, (path, data) in enumerate(fc.real_files()):
        mutation = names[i % len(names)]
        rng = random.Random(f"fold:{path}")
        other = fc.real_files()[(i + 7) % len(fc.real_files())][1]
        name = f"{i:03d}-{mutation}-{path.replace('/', '_')}"
        if is_documentation(name):
            name += ".txt"    # an INDEX.md in a folder is not evidence (discover): read it as a log
        mutated = fc.MUTATIONS[mutation](rng, data, other)
        if not mutated:
            continue
        (tmp_path / name).write_bytes(mutated)
        written[name] = mutated
    (tmp_path / "long-line.log").write_bytes(fc.long_line(2**20))
    written["long-line.log"] = fc.long_line(2**20)
    run = analyze([tmp_path])
    inputs = run.frame("SELECT path, kind, lines, parsed_lines, unparsed_lines, problem FROM inputs")
    assert inputs.height == len(written)
    failed = inputs.filter(pl.col("problem").str.contains(r"parser \w+ failed|reader failed"))
    assert failed.is_empty(), failed.select("path", "problem").rows()
    text_inputs = 0
    for row in inputs.iter_rows(named=True):
        name = row["path"].rsplit("/", 1)[-1]
        assert row["lines"] == row["parsed_lines"] + row["unparsed_lines"], row
        assert 0 <= row["parsed_lines"] <= row["lines"], row
        if row["kind"] == "skipped":
            assert row["lines"] == 0 and row["problem"], row
            continue
        text_inputs += 1
        assert row["lines"] == fc.physical_lines(written[name]), row
    assert text_inputs >= len(written) * 2 // 3
    stored = run.frame("SELECT count(*) AS n FROM lines")["n"][0]
    assert stored == inputs["lines"].sum()
    fc.TRIED["pipeline folder"] += len(written)


# -- whole-file readers: only their documented refusals ---------------------------------------------


def _fr_dump() -> dict:
    entry = {"record_id": 7, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": 3,
             "p2p_seq_id": 0, "op_id": 3, "profiling_name": "nccl:all_reduce", "time_created_ns": 1784884954249920000,
             "time_discovered_started_ns": 1784884954250920000, "time_discovered_completed_ns": None,
             "input_sizes": [[3, 4]], "input_dtypes": ["Float"], "output_sizes": [[3, 4]], "output_dtypes": ["Float"],
             "state": "started", "retired": False, "timeout_ms": 600000, "is_p2p": False, "duration_ms": None,
             "frames": [{"name": "all_reduce", "filename": "torch/distributed/distributed_c10d.py", "line": 2050}],
             "thread_id": "140", "thread_name": "pt_main_thread"}
    return {"version": "2.10", "comm_lib_version": "2.27.3",
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}},
            "pg_status": {"0": {"last_enqueued_collective": 3, "last_started_collective": 3,
                                "last_completed_collective": 2}},
            "entries": [entry, dict(entry, record_id=8, collective_seq_id=4)] * 4}


_HOSTILE_VALUES = [None, -1, 0, 2**70, -2**70, 2**63, -2**63 - 1, 1e308, -1e308, 1e20, -1e20, float("nan"),
                   float("inf"), "", "x" * 2000, "-1", "99999999999999999999", [], {}, True, [[-1, 2**70]],
                   {"a": None}, "nccl:all_reduce", "ncclDevKernel_(", 3.5]


def _mangle(value, rng: random.Random, share: float):
    """``value`` (a dump or trace) with some leaves and containers swapped for hostile values."""
    if rng.random() < share:
        return rng.choice(_HOSTILE_VALUES)
    if isinstance(value, dict):
        return {k: _mangle(v, rng, share) for k, v in value.items() if rng.random() > share / 4}
    if isinstance(value, (list, tuple)):
        return type(value)(_mangle(v, rng, share) for v in value)
    return value


def _damage(data: bytes, rng: random.Random) -> bytes:
    kind = rng.randrange(4)
    if kind == 0:
        return data[: rng.randrange(len(data) + 1)]
    buf = bytearray(data)
    for _ in range(rng.randrange(1, 8)):
        pos = rng.randrange(len(buf))
        buf[pos] = rng.randrange(256) if kind != 3 else buf[pos] ^ 1
    if kind == 2:
        digits = list(fc._DIGITS.finditer(bytes(buf)))
        if digits:
            m = rng.choice(digits)
            buf[m.start():m.end()] = rng.choice(fc.NUMBERS)
    return bytes(buf)


@fuzz(120)
@given(seed=st.integers(0, 2**32), fmt=st.sampled_from(["pickle2", "pickle4", "json"]))
def test_flight_recorder_reader_on_damaged_dumps(seed, fmt):
    from postmortem.parsers import flight_recorder

    rng = random.Random(seed)
    dump = _mangle(_fr_dump(), rng, rng.choice([0.0, 0.05, 0.2]))
    data = json.dumps(dump).encode() if fmt == "json" else pickle.dumps(dump, protocol=int(fmt[-1]))
    if rng.random() < 0.5:
        data = _damage(data, rng)
    fc.TRIED["flight recorder"] += 1
    try:
        result, problems = flight_recorder.parse_dump(data, "nccl_trace_rank_0")
    except flight_recorder.NotFlightRecorder:
        return
    assert all(isinstance(f, pl.DataFrame) for f in result.tables.values())
    assert isinstance(problems, list)


def _kineto_trace() -> dict:
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}],
            "baseTimeNanoseconds": 1700000000000000000,
            "traceEvents": [
                {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)",
                 "pid": 0, "tid": 7, "ts": 1000.5, "dur": 20.25,
                 "args": {"device": 0, "stream": 7, "Collective name": "allreduce", "In msg nelems": 1024,
                          "Group size": 8, "Process Group Name": "0", "Rank": 3}},
                {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 12, "tid": 12, "ts": 990, "dur": 5},
                {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 12, "tid": 12, "ts": 995,
                 "args": {"Total Allocated": 123456, "Device Id": 0, "Bytes": 512}},
                {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}}]}


# parsers.kineto on damaged traces (reproducers of the defects found: KINETO_HOSTILE below).
@settings(fuzz(80), phases=[Phase.generate])
@given(seed=st.integers(0, 2**32))
def test_kineto_reader_on_damaged_traces(seed):
    from postmortem.parsers import kineto

    rng = random.Random(seed)
    data = json.dumps(_mangle(_kineto_trace(), rng, rng.choice([0.0, 0.05, 0.2]))).encode()
    if rng.random() < 0.5:
        data = _damage(data, rng)
    fc.TRIED["kineto"] += 1
    try:
        tables, problems = kineto.read(data, "trace.json")
    except kineto.KinetoError:
        return
    assert all(isinstance(f, pl.DataFrame) for f in tables.values())


@pytest.mark.parametrize("seed", range(6))
def test_nsys_reader_on_damaged_exports(tmp_path, seed):
    from postmortem.generator.rungen.nsys import write_nsys_export
    from postmortem.parsers import nsys

    source = tmp_path / "good.sqlite"
    write_nsys_export(source, rank=0)
    rng = random.Random(seed)
    data = source.read_bytes()
    damaged = tmp_path / "damaged.sqlite"
    tried = 0
    for _ in range(5):
        mutated = _damage(data, rng)
        damaged.write_bytes(mutated if mutated[:16] == data[:16] or rng.random() < 0.5 else data[:16] + mutated[16:])
        tried += 1
        try:
            tables, problems = nsys.read(damaged, "damaged.sqlite")
        except nsys.NsysError:
            continue
        assert all(isinstance(f, pl.DataFrame) for f in tables.values())
    fc.TRIED["nsys"] += tried


_K = {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)", "pid": 0,
      "tid": 7, "ts": 1000.5, "dur": 20.25, "args": {}}
_BASE_NS = 1700000000000000000
KINETO_HOSTILE = {
    "ts -1e20": {"traceEvents": [dict(_K, ts=-1e20)], "baseTimeNanoseconds": _BASE_NS},
    "dur Infinity": {"traceEvents": [dict(_K, dur=float("inf"))], "baseTimeNanoseconds": _BASE_NS},
    "baseTimeNanoseconds 2**70": {"traceEvents": [_K], "baseTimeNanoseconds": 2**70},
    "baseTimeNanoseconds a string": {"traceEvents": [_K], "baseTimeNanoseconds": "17e17"},
    "baseTimeNanoseconds an object": {"traceEvents": [_K], "baseTimeNanoseconds": {"a": None}},
    "baseTimeNanoseconds Infinity": {"traceEvents": [_K], "baseTimeNanoseconds": float("inf")},
    "distributedInfo.rank 2**63": {"traceEvents": [_K], "distributedInfo": {"rank": 2**63}},
    "host_name a number": {"traceEvents": [_K], "host_name": 2**63},
    "pid 2**70": {"traceEvents": [dict(_K, pid=2**70)]},
}


@pytest.mark.parametrize("case", list(KINETO_HOSTILE))
def test_kineto_reader_refuses_or_reads_hostile_values(case):
    from postmortem.parsers import kineto

    fc.TRIED["kineto"] += 1
    try:
        kineto.read(json.dumps(KINETO_HOSTILE[case]).encode(), "trace.json")
    except kineto.KinetoError:
        pass


# -- the defects the fuzzing found, as plain regression tests -------------------------------------

HWTOOLS_HOSTILE = {
    # a topo matrix row torn before its last cells: explode() of names vs cells raised ShapeError
    "topo row torn": b"        GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity\n"
                     b"GPU0     X      NV18    PIX     0-55    0\nGPU1    NV18     X\n",
    # digit runs past Int64 in a strict cast raised InvalidOperationError
    "topo GPU index huge": b"        GPU0    GPU1    CPU Affinity    NUMA Affinity\nGPU0     X      NV18    0-55    0\n"
                           b"GPU99999999999999999999    NV18     X      0-55    0\n",
    "ibstat port huge": b"CA 'mlx5_0'\n\tCA type: MT4123\n\tPort 99999999999999999999:\n\t\tState: Active\n\t\tRate: 200\n",
    "memory list MiB huge": b"- H100: 99999999999999999999MiB (85.52 GB)\n",
    # `[\d.]+ Gbps` matched a torn `25.78.125`, and the strict float cast raised
    "iblinkinfo lane speed torn": b"CA: mlx5_0:\n      0x0002c90300a1b2c3      3    1[  ] ==( 4X          25.78.125 Gbps "
                                  b"Active/  LinkUp)==>       1    3[  ] \"switch\" ( )\n",
}


@pytest.mark.parametrize("case", list(HWTOOLS_HOSTILE))
def test_hwtools_survives_torn_rows_and_huge_numbers(case):
    from postmortem.parsers import hwtools

    fc.TRIED["regressions"] += 1
    result = hwtools.parse(envelope(HWTOOLS_HOSTILE[case]))
    assert len(result.consumed) > 0


def test_hwtools_torn_topo_row_keeps_the_cells_it_has():
    from postmortem.parsers import hwtools

    topo = hwtools.parse(envelope(HWTOOLS_HOSTILE["topo row torn"])).tables["topology"]
    assert sorted(topo.filter(pl.col("from") == "GPU1").select("to", "link").rows()) == [("GPU0", "NV18")]


def test_nccl_ring_order_with_a_huge_rank_number():
    fc.TRIED["regressions"] += 1
    line = b"node1:1:1 [0] NCCL INFO Channel 00/02 :    0   1   2 99999999999999999999999\n"
    assert parsers.nccl.parse(envelope(line)).tables["nccl_rings"].height == 1
