"""NCCL_DEBUG output, every line kind of NCCL 2.4 to 2.30.

Reference: ``docs/formats/nccl.md``. The line prefix (section 1, after the launcher prefixes of
section 2 are peeled by ``postmortem.parsers.lines``)::

    host:pid:tid [cudaDev] NCCL INFO <msg>
    host:pid:tid [cudaDev] file:line NCCL WARN <msg>                (2.30: file:line (func))
    [YYYY-MM-DD HH:MM:SS] host:pid:tid [dev] file:line NCCL WARN    (2.26+ WARN timestamps)
    host:pid:tid [dev] 2311.904785 func:line NCCL TRACE <msg>       (TRACE builds)
    host [dev] NCCL INFO <msg>                                      (pid/tid redacted by users)

The message kinds and their tables are in ``postmortem.parsers.nccl_catalogue``; this module takes the
prefix off, classifies every message (first matching kind wins), and shapes the rows:
connections get their transport decoded and their phase (ring, tree, p2p) from the
``Connected all rings/trees`` markers of the same thread; ring order lines become rank lists;
``Trees`` lines are exploded per channel; NIC lists per NIC; the tuning table per cell.
Lines NCCL writes without a prefix are handled too: the bare version line (before 2.22), the
``Func/Proto/Algo`` matrix rows (2.24+), and fragments of torn lines (section 2.1).

Every NCCL line lands in ``nccl_lines`` with its ``kind``; a null kind is a line this parser
did not understand (counted, kept with its text, listed by shape in the report).
"""

from __future__ import annotations

import re

import polars as pl

from postmortem.parsers.ascii_text import rx
from postmortem.parsers.base import ParseResult, among, collect_each, conform, conform_all, consumed_of, to_int
from postmortem.parsers import nccl_errors
from postmortem.parsers.torch_errors import oom_size_columns
from postmortem.parsers.nccl_catalogue import DATATYPE_BYTES, DATATYPES, FINGERPRINTS, KINDS, RED_OPS, RESULT_CODES
from postmortem.parsers.kinds import guard, kind_name, possible_guards, possible_kinds

NAME = "nccl"
# Inputs without this text hold no NCCL line (torn fragments come with whole lines).
BATCH_LITERAL = "CCL"

SAMPLE_LINES = [
    "h20-node-01:2231:2231 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
    "NCCL version 2.18.5+cuda12.0",
    "node1:1234:1290 [3] misc/socket.cc:518 NCCL WARN Net : Call to recv from 10.100.2.247<58355> failed : Broken pipe",
    "[2025-05-10 23:09:41] node01:47286:63478 [2] transport/nvls.cc:254 NCCL WARN Cuda failure 1 'invalid argument'",
    "node01:47286:63478 [2] transport/net_ib.cc:100 (ncclIbConnect) NCCL WARN NET/IB : Got completion from peer 10.1.1.2<4000> with status=12 opcode=0",
    "node02:32619:32711 [2] NCCL INFO node02:28579:28579 [7] NCCL INFO comm 0x7f01 rank 7 nranks 8 cudaDev 7 busId db000 - Init COMPLETE",
    "gpu-server320 [5] NCCL INFO misc/socket.cc:64 -> 6",
    "node01:41877:41877 [0] 2311.904785 topoGetAlgoInfo:1203 NCCL TRACE 1048576 Bytes -> Algo 1 proto 2 time 31.452000",
    "node01:3569861:3571306",
    "CCL INFO Channel 08/0 : 0[0] -> 1[1] via P2P/IPC",
] + [f"node01:41877:41878 [0] NCCL INFO {sample}" for kind in KINDS for sample in kind.samples] + [
    # The matrix block: a prefixed header, then rows NCCL writes without any prefix.
    "node01:41877:41877 [0] NCCL INFO Enabled NCCL Func/Proto/Algo Matrix:",
    "     Function |       LL     LL128    Simple   |          Tree           Ring",
    "    AllReduce |        1         2         1   |             1              1",
]

_PREFIX = (
    r"^(?:\[(?P<nccl_ts>\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?)\] )?"
    r"(?:(?P<host>[^:\s]*):(?P<pid>\d+):(?P<tid>\d+) (?:\[(?P<dev>\d+)\] )?|(?P<host2>[^:\s\[]+) \[(?P<dev2>\d+)\] )"
    r"(?:(?P<trace_ms>\d+\.\d+) (?P<trace_fn>\S+):\d+ )?"
    r"(?:(?P<file>\S+?):(?P<fline>\d+)(?: \((?P<fn>[^)]*)\))? )?"
    r"NCCL (?P<level>INFO|WARN|TRACE|CALL|ABORT) ?(?P<msg>.*)$"
)
_VERSION = r"NCCL version (?P<version>\d+\.\d+\.\d+[^+\s]*)\+cuda(?P<cuda>[\w.]+)"

# Two processes writing to one pipe tear lines: `a:1:1 [2] NCCL INFO b:2:2 [7] NCCL INFO msg`
# (section 2.1). The last header starts the record that survived.
_LEVEL_WORDS = ["NCCL INFO", "NCCL WARN", "NCCL TRACE", "NCCL CALL", "NCCL ABORT"]   # _PREFIX's levels
_HEADER_BODY = r":\d+:\d+ (?:\[\d+\] )?(?:\d+\.\d+ \S+:\d+ )?(?:\S+ (?:\([^)]*\) )?)?NCCL (?:INFO|WARN|TRACE|CALL)\b"
_LAST_HEADER = rf"^(?:.*\s)?([^\s:]*{_HEADER_BODY}.*)$"
# A surviving 2.26+ WARN keeps the timestamp NCCL wrote in front of its header.
_TORN_WARN_TS = rf"(\[\d{{4}}-\d{{2}}-\d{{2}}[ T]\d{{2}}:\d{{2}}:\d{{2}}(?:\.\d+)?\]) [^\s:]*{_HEADER_BODY}"
# What is left of a torn line: a bare header (`node01:3569861:3571306`, `node01:69377:13654 [0] N`)
# or a message whose header went to another line (`CCL INFO Channel 08/0 : ...`).
_FRAGMENT = (r"^(?:[\w.-]+:\d+:\d*(?: \[\d*\]?)?(?: N?C?C?L?)?\s*|N?C?CL (?:INFO|WARN) .*"
             r"|\w+: opCount [0-9a-fA-F]+ sendbuff \S+ recvbuff .*)$")
# Rows of the 2.24+ `Enabled NCCL Func/Proto/Algo Matrix:` block (no NCCL prefix).
_MATRIX_ROW = r"^\s*(?P<func>[A-Za-z]+) \|(?P<protos>(?:\s+[\w.]+)+)\s+\|(?P<algos>(?:\s+[\w.]+)+)\s*$"

LINES_SCHEMA = {"line_no": pl.UInt32, "host": pl.String, "pid": pl.Int64, "tid": pl.Int64,
                "cuda_dev": pl.Int64, "level": pl.String, "kind": pl.String}
_BASE = ["line_no", "host", "pid", "tid", "cuda_dev"]
_B = {"line_no": pl.UInt32, "host": pl.String, "pid": pl.Int64, "tid": pl.Int64, "cuda_dev": pl.Int64, "kind": pl.String}
SCHEMAS: dict[str, dict] = {
    "nccl_comms": {**_B, "api": pl.String, "comm": pl.String, "rank": pl.Int64, "nranks": pl.Int64,
                   "nvml_dev": pl.Int64, "bus_id": pl.String, "comm_id": pl.String, "parent": pl.String,
                   "color": pl.Int64, "key": pl.Int64, "phase": pl.String, "nnodes": pl.Int64,
                   "local_ranks": pl.Int64, "local_rank": pl.Int64, "mnnvl": pl.Int64},
    "nccl_connections": {**_B, "word": pl.String, "channel": pl.Int64, "conn_index": pl.Int64, "src": pl.Int64,
                         "src_dev": pl.String, "dst": pl.Int64, "dst_dev": pl.String, "side": pl.String,
                         "via": pl.String, "transport": pl.String, "detail": pl.String, "net": pl.String,
                         "nic": pl.Int64, "pxn_via": pl.Int64, "gdr": pl.Boolean, "gdr_mode": pl.String,
                         "shared": pl.Boolean, "read": pl.Boolean, "copy_engine": pl.Boolean,
                         "indirect_via": pl.Int64, "phase": pl.String},
    "nccl_rings": {**_B, "channel": pl.Int64, "nchannels": pl.Int64, "order": pl.List(pl.Int64),
                   "truncated": pl.Boolean, "prev": pl.Int64, "me": pl.Int64, "next": pl.Int64, "order_text": pl.String},
    "nccl_trees": {**_B, "channel": pl.Int64, "me": pl.Int64, "up": pl.Int64, "down0": pl.Int64,
                   "down1": pl.Int64, "down2": pl.Int64, "direction": pl.String, "text": pl.String},
    "nccl_graph": {**_B, "pattern": pl.Int64, "cross_nic": pl.Int64, "nchannels": pl.Int64, "bw_intra": pl.Float64,
                   "bw_inter": pl.Float64, "type_intra": pl.String, "type_inter": pl.String, "same_channels": pl.Int64,
                   "channel": pl.Int64, "path": pl.String, "link": pl.String, "link_bw": pl.Float64,
                   "node": pl.String, "detail": pl.String},
    "nccl_net": {**_B, "item": pl.Int64, "index": pl.Int64, "name": pl.String, "address": pl.String,
                 "port": pl.Int64, "link": pl.String, "relaxed_ordering": pl.Boolean, "gdr": pl.String,
                 "gpu": pl.String, "hca": pl.String, "distance": pl.Int64, "threshold": pl.Int64,
                 "read": pl.Int64, "mode": pl.String, "threads": pl.Int64, "sockets": pl.Int64,
                 "which": pl.String, "detail": pl.String},
    "nccl_env": {**_B, "key": pl.String, "value": pl.String, "default": pl.String, "comm": pl.String},
    "nccl_tuning": {**_B, "func": pl.String, "bytes": pl.Int64, "algo": pl.String, "proto": pl.String,
                    "time_us": pl.Float64, "ch_lo": pl.Int64, "ch_hi": pl.Int64, "kernel": pl.String,
                    "nchannels": pl.Int64, "nthreads": pl.Int64, "nworks": pl.Int64, "latency_us": pl.Float64,
                    "bandwidth_gbs": pl.Float64, "max_threads": pl.Int64, "enabled": pl.Int64,
                    "coll_channels": pl.Int64, "collnet_channels": pl.Int64, "nvls_channels": pl.Int64,
                    "p2p_channels": pl.Int64, "p2p_per_peer": pl.Int64, "min_cc": pl.Int64, "dev": pl.Int64,
                    "table_line": pl.UInt32, "detail": pl.String, "comm": pl.String},
    "nccl_info": {**_B, "rank": pl.Int64, "nranks": pl.Int64, "key": pl.String, "value": pl.String,
                  "detail": pl.String},
    "nccl_shapes": {"line_no": pl.UInt32, "host": pl.String, "pid": pl.Int64, "level": pl.String,
                    "msg": pl.String, "has_ts": pl.Boolean, "has_fn": pl.Boolean},
    "nccl_versions": {"line_no": pl.UInt32, "host": pl.String, "pid": pl.Int64, "version": pl.String, "cuda": pl.String},
    "events": {"line_no": pl.UInt32, "ts": pl.Datetime("us"), "level": pl.String, "src_file": pl.String,
               "kind": pl.String, "error_class": pl.String, "detail": pl.String, "message": pl.String,
               "host": pl.String, "pid": pl.Int64, "tid": pl.Int64, "cuda_dev": pl.Int64,
               "cause": pl.String, "peer_rank": pl.Int64, "peer": pl.String, "errno_text": pl.String,
               "errno_name": pl.String, "errno": pl.Int64, "result_code": pl.Int64, "result": pl.String,
               "bytes": pl.Int64, "oom_requested_mib": pl.Float64, "oom_capacity_mib": pl.Float64,
               "oom_free_mib": pl.Float64, "oom_allocated_mib": pl.Float64, "oom_unallocated_mib": pl.Float64},
    "collectives": {"line_no": pl.UInt32, "kind": pl.String, "op": pl.String, "op_count": pl.Int64,
                    "comm": pl.String, "nranks": pl.Int64, "count": pl.Int64, "datatype": pl.String,
                    "bytes": pl.Int64, "red_op": pl.String, "root": pl.Int64, "sendbuff": pl.String,
                    "recvbuff": pl.String, "stream": pl.String, "host": pl.String, "pid": pl.Int64,
                    "tid": pl.Int64, "cuda_dev": pl.Int64},
}


def bus_id_to_pci(bus_id: str | None) -> str | None:
    """NCCL's busId hex (``18000``) -> PCI address ``0000:18:00.0`` (nccl.md section 5.2)."""
    if not bus_id:
        return None
    try:
        value = int(bus_id, 16)
    except ValueError:
        return None
    return (f"{value >> 20:04x}:{(value >> 12) & 0xff:02x}:"
            f"{(value >> 4) & 0xff:02x}.{value & 0xf:x}")


# -- the prefix ---------------------------------------------------------------------------------


# The common line, `host:pid:tid [dev] NCCL INFO msg`, once and with no second header in it
# (so not torn): split by position instead of the full prefix pattern, which has fourteen groups.
_PLAIN_INFO = r"^[^:\s\[]*:[0-9]+:[0-9]+ \[[0-9]+\] NCCL INFO "
# Fields of a COLL trace message (``KINDS[0]``) by position: `Op: opCount h sendbuff p recvbuff p
# count n datatype n op n root n comm p [nranks=n] stream p` (docs/formats/nccl.md section 3.9).
_COLL_TOKENS = {"op": 0, "op_count_hex": 2, "sendbuff": 4, "recvbuff": 6, "count": 8, "datatype": 10,
                "red_op": 12, "root": 14, "comm": 16, "nranks": 17, "stream": 19}
_COLL_SHAPE = re.sub(r"\(\?P<\w+>", "(?:", KINDS[0].pattern)   # the catalogue's pattern, groups unnamed
_COLL_LINE = "NCCL INFO " + _COLL_SHAPE.removeprefix("^")


def is_plain_info(text: pl.Expr) -> pl.Expr:
    """A whole, untorn NCCL INFO line (`host:pid:tid [dev] NCCL INFO msg`): NCCL's own, a line
    only this parser reads (``postmortem.analyzer.ingest`` keeps such lines from the other parsers, whose
    literal tests would otherwise match NCCL's words: `GPU 0`, `Name:`)."""
    return (text.str.count_matches("NCCL ", literal=True) == 1) & text.str.contains(rx(_PLAIN_INFO))


def is_plain_coll(text: pl.Expr) -> pl.Expr:
    """A plain INFO line (``is_plain_info``) that is a COLL trace line (`... NCCL INFO
    AllReduce: opCount ...`): the bulk of a COLL-traced log. The message's shape is matched from
    `NCCL INFO `, which a plain line has once, right after its header (cheaper than from the
    line's start). ``plain_marks`` gives both tests of a chunk's lines at less cost."""
    return (is_plain_info(text) & text.str.contains(": opCount ", literal=True)
            & text.str.contains(rx(_COLL_LINE)))


def plain_marks(text: pl.Series) -> tuple[pl.Series, pl.Series]:
    """``is_plain_info`` and ``is_plain_coll`` of every line, alike. The COLL shape, the costliest
    test (160 ns a line), runs on the INFO lines that hold `: opCount ` alone where they are not
    most lines: in a log without a COLL trace, on none (a fourth less CPU than both expressions
    in one select, on a c10d log; the same on a COLL trace)."""
    tests = text.to_frame("text").select(info=is_plain_info(pl.col("text")),
                                         op=pl.col("text").str.contains(": opCount ", literal=True))
    info = tests["info"]
    coll = (info & tests["op"]).alias("coll")
    candidates = coll.sum()
    if candidates > len(coll) // 2:     # in a select, which Polars spreads over the cores (a Series call: one)
        coll = coll & text.to_frame("text").select(pl.col("text").str.contains(rx(_COLL_LINE))).to_series()
    elif candidates:
        at = coll.arg_true()
        coll = coll.scatter(at, text.gather(at).str.contains(rx(_COLL_LINE)))
    return info, coll.alias("coll")


def _prefix_schema() -> pl.Schema:
    """Columns of a split NCCL prefix (``_prefixed``)."""
    return pl.Schema({**{k: v for k, v in LINES_SCHEMA.items() if k != "kind"}, "src_file": pl.String,
                      "msg": pl.String, "torn": pl.Boolean, "nccl_ts": pl.String, "fn": pl.String})


def _prefixed(lines: pl.DataFrame) -> pl.DataFrame:
    empty = pl.DataFrame(schema=_prefix_schema())
    df = lines.select("line_no", "text").filter(pl.col("text").str.contains(" NCCL ", literal=True))
    if df.is_empty():
        return empty
    df = df.with_columns(_plain=is_plain_info(pl.col("text")))
    parts = [_plain_prefix(df.filter(pl.col("_plain")), empty.schema),
             _full_prefix(df.filter(~pl.col("_plain")), empty.schema)]
    return pl.concat(parts).sort("line_no")


def _plain_prefix(df: pl.DataFrame, schema) -> pl.DataFrame:
    """``_PLAIN_INFO`` lines: header fields by position."""
    fields = pl.col("text").str.splitn(" ", 5).struct
    head = fields.field("field_0").str.split(":")
    return df.select(
        "line_no", host=head.list.get(0), pid=to_int(head.list.get(1)), tid=to_int(head.list.get(2)),
        cuda_dev=to_int(fields.field("field_1").str.strip_chars("[]")), level=pl.lit("INFO"),
        src_file=pl.lit(None, dtype=pl.String), msg=fields.field("field_4").str.strip_chars_end(),
        torn=pl.lit(False), nccl_ts=pl.lit(None, dtype=pl.String), fn=pl.lit(None, dtype=pl.String),
    ).cast(schema)


def _full_prefix(df: pl.DataFrame, schema) -> pl.DataFrame:
    """Every other NCCL line: torn lines cut to their surviving record, then the full pattern."""
    # A record, whole or surviving a tear, holds `NCCL <level>`: the lines without one (c10d's
    # `NCCL Work update ...`, most of a long c10d log) skip the patterns.
    df = df.filter(pl.col("text").str.contains_any(_LEVEL_WORDS))
    if df.is_empty():
        return pl.DataFrame(schema=schema)
    torn = pl.col("text").str.count_matches(rx(_HEADER_BODY)) >= 2
    survivor = pl.col("text").str.extract(rx(_LAST_HEADER), 1)
    stamp = pl.col("text").str.extract_all(rx(_TORN_WARN_TS)).list.last().str.extract(rx(r"^(\[[^\]]*\]) "), 1)
    survivor = pl.when(survivor.str.contains(r"NCCL WARN") & stamp.is_not_null()).then(
        pl.concat_str([stamp, pl.lit(" "), survivor])).otherwise(survivor)
    df = df.with_columns(torn=torn, text=pl.when(torn).then(survivor).otherwise(pl.col("text")))
    df = df.with_columns(_g=pl.col("text").str.extract_groups(rx(_PREFIX))).filter(
        pl.col("_g").struct.field("level").is_not_null())
    f = pl.col("_g").struct.field
    return df.select(
        "line_no",
        host=pl.coalesce(f("host"), f("host2")), pid=to_int(f("pid")), tid=to_int(f("tid")),
        cuda_dev=to_int(pl.coalesce(f("dev"), f("dev2"))), level=f("level"),
        src_file=pl.coalesce(f("file"), f("trace_fn")), msg=f("msg").str.strip_chars_end(), torn="torn",
        nccl_ts=f("nccl_ts"), fn=f("fn"),
    ).cast(schema)


# -- classification -------------------------------------------------------------------------------


_COMPILED = [re.compile(kind.pattern) for kind in KINDS]
# Numbers folded the same way for every line: lines of one shape are one kind (no kind's
# pattern depends on a digit's value, only on where digits are).
_FOLD_HEX = r"0x[0-9a-fA-F]+"


def _kind_of(shape: str) -> int | None:
    return next((i for i, pattern in enumerate(_COMPILED) if pattern.search(shape)), None)


def _classify(info: pl.DataFrame) -> tuple[dict[str, list[pl.DataFrame]], pl.DataFrame]:
    """Run the catalogue over INFO/TRACE messages: rows per table, and (line_no, kind) of all.

    Kinds are decided once per distinct message shape (numbers folded), so a file of a million
    COLL lines costs a handful of pattern tests; each kind's fields are then extracted with one
    vectorised pass over its own lines."""
    rows: dict[str, list[pl.DataFrame]] = {}
    empty = pl.DataFrame(schema={"line_no": pl.UInt32, "kind": pl.String})
    if info.is_empty():
        return rows, empty
    # COLL trace messages, the bulk: known by the catalogue's own pattern (no shape folding),
    # their fields taken by position.
    coll = pl.col("msg").str.contains(": opCount ", literal=True) & pl.col("msg").str.contains(rx(_COLL_SHAPE))
    info = info.with_columns(_coll=coll)
    traced = info.filter(pl.col("_coll"))
    info = info.filter(~pl.col("_coll"))
    kinds = []
    if not traced.is_empty():
        kinds.append(traced.select("line_no", kind=pl.lit(KINDS[0].name)))
        rows[KINDS[0].table] = [_coll_fields(traced)]
    if info.is_empty():
        return rows, (pl.concat(kinds) if kinds else empty)
    shape = pl.col("msg").str.replace_all(rx(_FOLD_HEX), "0x0").str.replace_all(rx(r"\b\d+\b"), "0")
    info = info.with_columns(_shape=shape)
    shapes = info["_shape"].unique()
    index = pl.DataFrame({"_shape": shapes, "_kind": [_kind_of(s) for s in shapes.to_list()]},
                         schema={"_shape": pl.String, "_kind": pl.Int64})
    info = info.join(index, on="_shape", how="left").filter(pl.col("_kind").is_not_null())
    found = sorted(info["_kind"].unique().to_list())
    # every kind's rows in one Polars call (a few eager calls per kind cost more than the work)
    plans = [info.lazy().select("line_no", kind=kind_name(pl.col("_kind"), KINDS))]
    tables = []
    for i in found:
        kind = KINDS[i]
        if kind.table is None:
            continue
        sub = info.lazy().filter(pl.col("_kind") == i)
        columns = [pl.col(c) for c in (*_BASE, "level", "src_file", "msg")] + [pl.lit(kind.name).alias("kind")]
        if "(?P<" in kind.pattern:
            fields = pl.col("msg").str.extract_groups(rx(kind.pattern))
            named = sub.select(fields.struct.unnest()).collect_schema().names()
            # A field the message states (cudaDev) wins over the prefix's guess of it.
            columns = [c for c in columns if c.meta.output_name() not in named or c.meta.output_name() == "line_no"]
            columns.append(fields.struct.unnest())
        plans.append(sub.select(columns))
        tables.append(kind.table)
    every, *frames = collect_each(plans)
    for table, frame in zip(tables, frames):
        rows.setdefault(table, []).append(frame)
    return rows, pl.concat([*kinds, every])


def _coll_fields(traced: pl.DataFrame) -> pl.DataFrame:
    """COLL trace messages (``KINDS[0]``, prefix already split off) -> their fields, by position."""
    traced = traced.with_columns(_tokens=pl.col("msg").str.split(" "))   # split once, not per field
    return traced.select(*_BASE, "level", "src_file", "msg", kind=pl.lit(KINDS[0].name),
                         **_coll_tokens(pl.col("_tokens")))


def coll_rows(lines: pl.DataFrame) -> pl.DataFrame:
    """Lines that ``is_plain_coll`` holds (``line_no``, ``text``) -> their ``collectives`` rows,
    in the same order, exactly as ``parse`` makes them (``postmortem.analyzer.bulk`` reads the COLL trace
    bulk with this, without the rest of the parser).

    The shape is known, so the whole line is split once: the plain header's four tokens
    (`host:pid:tid`, `[dev]`, `NCCL`, `INFO`), then the message's (``_COLL_TOKENS``). Its end is
    stripped first, as ``_plain_prefix`` strips the message."""
    tokens = lines.select("line_no", _t=pl.col("text").str.strip_chars_end().str.split(" ")).with_columns(
        _h=pl.col("_t").list.get(0).str.split(":"))   # a column: eager selects repeat a shared expression
    head = pl.col("_h").list.get
    rows = tokens.select(
        "line_no", host=head(0), pid=to_int(head(1)), tid=to_int(head(2)),
        cuda_dev=to_int(pl.col("_t").list.get(1).str.strip_chars("[]")), kind=pl.lit(KINDS[0].name),
        **_coll_tokens(pl.col("_t"), skip=4))
    return conform(_collectives(_merge("collectives", [rows])), SCHEMAS["collectives"])


def _coll_tokens(tokens: pl.Expr, skip: int = 0) -> dict[str, pl.Expr]:
    """The COLL fields as captured, from a list of a message's tokens (``_COLL_TOKENS``) after
    ``skip`` others: the op without its colon, nranks without its brackets."""
    fields = {name: tokens.list.get(i + skip) for name, i in _COLL_TOKENS.items()}
    return {**fields, "op": fields["op"].str.strip_suffix(":"),
            "nranks": fields["nranks"].str.strip_prefix("[nranks=").str.strip_suffix("]")}


def _merge(table: str, frames: list[pl.DataFrame] | None) -> pl.DataFrame | None:
    """One frame per table, with the captured strings of the table's typed columns converted
    (garbage becomes null) so the shaping code works on numbers."""
    if not frames:
        return None
    frame = pl.concat(frames, how="diagonal_relaxed")
    schema = SCHEMAS[table]
    numeric = [c for c in frame.columns
               if c in schema and c != "line_no" and frame.schema[c] == pl.String and schema[c] in (pl.Int64, pl.Float64)]
    if not numeric:
        return frame
    # cast as Series (``to_int``'s lenient cast): a query costs more than the casts of a parser's frame
    return pl.DataFrame([frame[c].cast(schema[c], strict=False) if c in numeric else frame[c] for c in frame.columns])


# -- per-table shaping ---------------------------------------------------------------------------


def _connections(df: pl.DataFrame | None, markers: pl.DataFrame, sources: pl.DataFrame | None = None) -> pl.DataFrame:
    """Decode ``via`` (section 3.7) and the phase each connection was made in. ``sources``:
    (line_no, input_id) when several inputs are parsed at once."""
    if df is None:
        return pl.DataFrame(schema=SCHEMAS["nccl_connections"])
    via = pl.col("via")
    net = via.str.extract_groups(
        rx(r"^(?:NET|COLLNET)/(?P<net>.+?)/(?P<nic>\d+)(?:\((?P<pxn>\d+)\))?(?P<flags>(?:/\w+(?:\(\w+\))?)*)$"))
    df = df.with_columns(_n=net)
    n = pl.col("_n").struct.field
    transport = (pl.when(via.str.starts_with("P2P/")).then(pl.lit("P2P"))
                 .when(via.str.starts_with("SHM/") | via.str.contains("shared memory", literal=True)).then(pl.lit("SHM"))
                 .when(via.str.starts_with("NET/")).then(pl.lit("NET"))
                 .when(via.str.starts_with("COLLNET/")).then(pl.lit("COLLNET"))
                 .when(via.str.starts_with("NVLS")).then(pl.lit("NVLS"))
                 .otherwise(pl.lit("OTHER")))
    flags = n("flags").fill_null("")
    detail = (pl.when(via.str.starts_with("P2P/") | via.str.starts_with("SHM/")).then(via.str.replace(rx(r"^\w+/"), ""))
              .when(via.str.contains("shared memory", literal=True)).then(via)
              .otherwise(flags.str.strip_prefix("/")))
    df = df.with_columns(
        transport=transport, detail=detail, net=n("net"), nic=to_int(n("nic")), pxn_via=to_int(n("pxn")),
        gdr=flags.str.contains("/GDRDMA", literal=True) & transport.is_in(["NET", "COLLNET"]),
        gdr_mode=flags.str.extract(rx(r"GDRDMA\((\w+)\)"), 1),
        shared=flags.str.contains("/Shared", literal=True) | via.str.ends_with("/Shared"),
        read=via.str.contains(rx(r"/read\b")), copy_engine=via.str.contains(rx(r"/CE\b")),
        indirect_via=to_int(via.str.extract(rx(r"^P2P/indirect/(\d+)"), 1)),
    ).drop("_n")
    return _phase(df, markers, sources)


def _phase(conns: pl.DataFrame, markers: pl.DataFrame, sources: pl.DataFrame | None = None) -> pl.DataFrame:
    """ring / tree / p2p per connection (section 3.7 "Which side prints what").

    Connection index 1 is always point-to-point. Otherwise the next ``Connected all rings``
    or ``Connected all trees`` marker printed by the same thread says which phase the line
    belonged to. A thread that stopped before its marker (an init hang) still followed the
    order: no rings marker yet -> ring hop; rings marker but no trees marker -> tree hop.
    Releases before 2.8 print no markers at all: the phase stays null here and the analyzer
    decides it from the ring order (``postmortem.analyzer.nccl_model``)."""
    key = ["host", "pid", "tid"]
    if sources is not None and not markers.is_empty():
        # A marker counts only in its own input: two files may hold threads with the same
        # host:pid:tid (restarts reusing a pid, pastes with rewritten names).
        key = ["_src", *key]
        src = sources.select("line_no", _src="input_id")
        conns = conns.join(src, on="line_no", how="left", maintain_order="left")
        markers = markers.join(src, on="line_no", how="left", maintain_order="left")
    if markers.is_empty():
        return conns.with_columns(phase=pl.when(pl.col("conn_index") == 1).then(pl.lit("p2p"))
                                  .when(pl.col("kind") == "collnet_connection").then(pl.lit("collnet"))
                                  .otherwise(pl.lit(None, dtype=pl.String))).sort("line_no")
    # the steps as one plan (a Polars call each cost more than their work)
    m = markers.lazy().select(*key, pl.col("line_no").alias("_mline"), pl.col("key").alias("_marker")).sort("_mline")
    c = conns.lazy().with_columns(_mline=pl.col("line_no")).sort("_mline")
    nxt = c.join_asof(m, on="_mline", by=key, strategy="forward", check_sortedness=False)
    prev = m.rename({"_marker": "_before"})
    nxt = nxt.drop("_mline").with_columns(_mline=pl.col("line_no")).sort("_mline").join_asof(
        prev, on="_mline", by=key, strategy="backward", check_sortedness=False).drop("_mline")
    # Markers exist (2.8+): a thread without one after its lines stopped before it. Parsing
    # several inputs at once, that holds only in an input that has markers: one without any
    # is read as it would be alone, however the inputs are batched.
    stalled = pl.col("_marker").is_null()
    if "_src" in key:
        stalled = stalled & pl.col("_src").is_in(among(markers["_src"]))
    phase = (pl.when(pl.col("conn_index") == 1).then(pl.lit("p2p"))
             .when(pl.col("kind") == "collnet_connection").then(pl.lit("collnet"))
             .when(pl.col("_marker") == "Connected all rings").then(pl.lit("ring"))
             .when(pl.col("_marker") == "Connected all trees").then(pl.lit("tree"))
             .when(pl.col("_marker") == "Connected NVLS tree").then(pl.lit("nvls"))
             .when(stalled & pl.col("_before").is_null()).then(pl.lit("ring"))
             .when(stalled & (pl.col("_before") == "Connected all rings")).then(pl.lit("tree"))
             .otherwise(pl.lit(None, dtype=pl.String)))
    return nxt.with_columns(phase=phase).drop("_marker", "_before", "_src", strict=False).sort("line_no") \
        .collect(engine="in-memory")


def _rings(df: pl.DataFrame | None) -> pl.DataFrame:
    if df is None:
        return pl.DataFrame(schema=SCHEMAS["nccl_rings"])
    if "order" not in df.columns:
        df = df.with_columns(order=pl.lit(None, dtype=pl.String))
    if "cut" not in df.columns:
        df = df.with_columns(cut=pl.lit(None, dtype=pl.String))
    numbers = pl.col("order").str.extract_all(rx(r"\d+")).list.eval(pl.element().cast(pl.Int64, strict=False))
    # `...` glued to a number (2.23+ overwrites the last three characters): that number is partial.
    partial = pl.col("cut").fill_null("").str.starts_with(".")
    return df.with_columns(
        order_text=pl.col("order").str.strip_chars(),
        order=pl.when(partial).then(numbers.list.slice(0, numbers.list.len() - 1)).otherwise(numbers),
        truncated=pl.col("cut").is_not_null(),
    )


def _trees(df: pl.DataFrame | None) -> pl.DataFrame:
    """``Trees [c] d0/d1/d2->me->up`` (2.8+), ``[c] up->me->d0/d1/d2`` (2.4), and the 2.5-2.7
    ``[c] up-tree|down-tree`` pair, one row per channel and direction."""
    if df is None:
        return pl.DataFrame(schema=SCHEMAS["nccl_trees"])
    graph = df.filter(pl.col("kind") != "trees")
    lines = df.filter(pl.col("kind") == "trees")
    if lines.is_empty():
        return graph
    items = lines.with_columns(_item=pl.col("body").str.extract_all(rx(r"\[\d+\] \S+"))).explode("_item")
    items = items.with_columns(channel=pl.col("_item").str.extract(rx(r"^\[(\d+)\]"), 1),
                               _tree=pl.col("_item").str.extract(rx(r"\] (\S+)$"), 1))
    items = items.with_columns(_parts=pl.col("_tree").str.split("|")).with_columns(
        _n=pl.col("_parts").list.len()).explode("_parts").with_columns(
        direction=pl.when(pl.col("_n") == 2).then(
            pl.when(pl.int_range(pl.len()).over("line_no", "channel") % 2 == 0).then(pl.lit("up")).otherwise(pl.lit("down"))))
    down_first = r"^(?P<down0>-?\d+)/(?P<down1>-?\d+)/(?P<down2>-?\d+)->(?P<me>-?\d+)->(?P<up>-?\d+)$"
    up_first = r"^(?P<up>-?\d+)->(?P<me>-?\d+)->(?P<down0>-?\d+)/(?P<down1>-?\d+)/(?P<down2>-?\d+)$"
    a = pl.col("_parts").str.extract_groups(rx(down_first))
    b = pl.col("_parts").str.extract_groups(rx(up_first))
    items = items.with_columns(_a=a, _b=b)
    fields = {}
    for name in ("me", "up", "down0", "down1", "down2"):
        fields[name] = to_int(pl.coalesce(pl.col("_a").struct.field(name), pl.col("_b").struct.field(name)))
    items = items.with_columns(text=pl.col("_parts"), **fields)
    return pl.concat([items, graph], how="diagonal_relaxed")


# `[i]name:addr<port>`, or (2.24+, bootstrap over a net plugin) `name:port`.
_ITEM = r"(?:\[(?P<index>\d+)\])?(?P<name>[^\s:\[\]]+):(?:(?P<address>\S*?)<(?P<port>\d+)>|(?P<port2>\d+)$)"
_NIC = r"\[(?P<index>\d+)\](?P<name>[\w.+-]+):(?P<port>\d+)/(?P<link>\w+)"


def _net(df: pl.DataFrame | None) -> pl.DataFrame:
    """One row per listed interface or NIC; the other net kinds keep one row per line."""
    if df is None:
        return pl.DataFrame(schema=SCHEMAS["nccl_net"])
    lists, nics, rest = collect_each([df.lazy().filter(pl.col("kind").is_in(["bootstrap_if", "socket_ifs"])),
                                      df.lazy().filter(pl.col("kind") == "ib_nics"),
                                      df.lazy().filter(~pl.col("kind").is_in(["bootstrap_if", "socket_ifs", "ib_nics"]))])
    # Per-HCA GDR lines name the HCA by index and name; the reason in parentheses is detail.
    have = rest.columns     # (each column from the others as they were: one call)
    rest = rest.with_columns(
        *[pl.coalesce(column, fallback).alias(column) if column in have else pl.col(fallback).alias(column)
          for column, fallback in (("hca", "hca_index"), ("name", "hca_name"), ("detail", "why")) if fallback in have],
        index=to_int(pl.col("index")) if "index" in have else pl.lit(None, dtype=pl.Int64))
    parts = [rest]
    if not lists.is_empty():
        items = lists.lazy().with_columns(_i=pl.col("items").str.extract_all(rx(r"\S+"))).explode("_i").with_columns(
            item=pl.int_range(pl.len()).over("line_no"), _g=pl.col("_i").str.extract_groups(rx(_ITEM)))
        g = pl.col("_g").struct.field
        parts.append(items.with_columns(
            index=to_int(g("index")), name=g("name"), address=g("address"),
            port=to_int(pl.coalesce(g("port"), g("port2")))).collect(engine="in-memory"))
    if not nics.is_empty():
        parts += _nic_rows(nics)
    return pl.concat(parts, how="diagonal_relaxed")


def _nic_rows(nics: pl.DataFrame) -> list[pl.DataFrame]:
    """``NET/IB : Using [0]mlx5_0:1/IB [1]... [RO]; OOB if:addr<port>``: a row per NIC (members of
    a plugin's merged ``[v]={[0] a:1/RoCE, [1] b:1/RoCE}`` device get the virtual index) and one
    ``oob`` row for the handshake interface."""
    # as plans, collected together (a Polars call per step cost more than the steps)
    base = nics.lazy().with_columns(relaxed_ordering=pl.col("items").str.contains("[RO]", literal=True))
    merged = base.with_columns(_v=pl.col("items").str.extract_all(rx(r"\[\d+\]=\{[^}]*\}"))).explode("_v").filter(
        pl.col("_v").is_not_null())
    merged = merged.with_columns(index=to_int(pl.col("_v").str.extract(rx(r"^\[(\d+)\]"), 1)),
                                 _m=pl.col("_v").str.extract_all(rx(r"[\w.+-]+:\d+/\w+"))).explode("_m")
    merged = merged.with_columns(_m=pl.concat_str([pl.lit("[0]"), pl.col("_m")]))
    plain = base.with_columns(_m=pl.col("items").str.replace_all(rx(r"\[\d+\]=\{[^}]*\}"), "").str.extract_all(rx(_NIC))
                              ).explode("_m").with_columns(index=to_int(pl.col("_m").str.extract(rx(r"^\[(\d+)\]"), 1)))
    rows = pl.concat([plain, merged], how="diagonal_relaxed").filter(pl.col("_m").is_not_null())
    rows = rows.with_columns(_g=pl.col("_m").str.extract_groups(rx(_NIC))).with_columns(
        name=pl.col("_g").struct.field("name"), port=to_int(pl.col("_g").struct.field("port")),
        link=pl.col("_g").struct.field("link"), item=pl.int_range(pl.len()).over("line_no"))
    oob = base.with_columns(kind=pl.lit("oob"), _g=pl.col("oob").str.extract_groups(rx(_ITEM))).with_columns(
        name=pl.col("_g").struct.field("name"), address=pl.col("_g").struct.field("address"),
        port=to_int(pl.col("_g").struct.field("port")))
    no_nic = base.join(rows.select("line_no").unique(), on="line_no", how="anti").with_columns(
        detail=pl.lit("no devices listed"))
    return collect_each([rows, oob, no_nic])


def _tuning(df: pl.DataFrame | None) -> pl.DataFrame:
    """Decision lines as they are; the model table exploded to one row per (function, algorithm,
    protocol) cell, each mapped through the header of its own block (section 3.14.3)."""
    if df is None:
        return pl.DataFrame(schema=SCHEMAS["nccl_tuning"])
    table_kinds = ["table_header", "table_algorithms", "table_protocols", "table_max_threads", "table_row"]
    table = df.filter(pl.col("kind").is_in(table_kinds))
    rest = df.filter(~pl.col("kind").is_in(table_kinds))
    rest = rest.with_columns(**({"time_us": pl.col("time_us").cast(pl.Float64, strict=False)} if "time_us" in rest.columns else {}))
    if table.is_empty():
        return rest
    return pl.concat([rest, _table_cells(table)], how="diagonal_relaxed")


def _table_cells(table: pl.DataFrame) -> pl.DataFrame:
    key = ["host", "pid", "tid"]
    table = table.sort("line_no").with_columns(
        _cells=pl.col("cells").str.strip_chars().str.strip_suffix("|").str.split("|").list.eval(pl.element().str.strip_chars()))
    # Column labels per block: 2.5-2.17 `Algo/Proto` pairs on one header; 2.18+ an Algorithm line
    # (each name spans three protocol columns) followed by a Protocol line.
    old = pl.col("kind") == "table_header"
    algos = (pl.when(old).then(pl.col("_cells").list.eval(pl.element().str.split("/").list.first().str.strip_chars()))
             .when(pl.col("kind") == "table_algorithms").then(
                 pl.col("_cells").list.eval(pl.element().repeat_by(3).list.explode(keep_nulls=False, empty_as_null=False))))
    protos = (pl.when(old).then(pl.col("_cells").list.eval(pl.element().str.split("/").list.last().str.strip_chars()))
              .when(pl.col("kind") == "table_protocols").then(pl.col("_cells")))
    table = table.with_columns(_algos=algos, _protos=protos, _hdr=pl.when(pl.col("kind").is_in(["table_header", "table_algorithms"]))
                               .then(pl.col("line_no")))
    table = table.with_columns(pl.col("_algos", "_protos", "_hdr").forward_fill().over(key))
    threads = table.filter(pl.col("kind") == "table_max_threads").select(*key, "_hdr", _threads=pl.col("_cells"))
    rows = table.filter(pl.col("kind") == "table_row").join(threads, on=[*key, "_hdr"], how="left")
    rows = rows.with_columns(_i=pl.int_ranges(pl.col("_cells").list.len())).explode("_cells", "_i").rename({"_cells": "_cell"})
    rows = rows.with_columns(
        algo=pl.col("_algos").list.get(pl.col("_i"), null_on_oob=True),
        proto=pl.col("_protos").list.get(pl.col("_i"), null_on_oob=True),
        max_threads=to_int(pl.col("_threads").list.get(pl.col("_i"), null_on_oob=True)),
        latency_us=pl.col("_cell").str.extract(rx(r"^\s*(-?[\d.]+)/"), 1).cast(pl.Float64, strict=False),
        bandwidth_gbs=pl.col("_cell").str.extract(rx(r"/\s*(-?[\d.]+)\s*$"), 1).cast(pl.Float64, strict=False),
        table_line=pl.col("_hdr").cast(pl.UInt32), kind=pl.lit("table_cell"))
    headers = table.filter(pl.col("kind") != "table_row")
    return pl.concat([_no_helpers(headers), _no_helpers(rows)], how="diagonal_relaxed")


def _no_helpers(frame: pl.DataFrame) -> pl.DataFrame:
    """Drop the ``_``-named working columns (their types differ between the frames we concat)."""
    return frame.drop([c for c in frame.columns if c.startswith("_")])


def _matrix(lines: pl.DataFrame, tuning: pl.DataFrame) -> pl.DataFrame:
    """The unprefixed rows under ``Enabled NCCL Func/Proto/Algo Matrix:`` (2.24+): one row per
    (function, protocol or algorithm) with its 0/1/2 value, tied to the header line above."""
    heads = tuning.filter(pl.col("kind") == "matrix") if "kind" in tuning.columns else tuning.head(0)
    if heads.is_empty():
        return pl.DataFrame(schema=SCHEMAS["nccl_tuning"])
    cand = lines.select("line_no", "text").filter(pl.col("text").str.contains(rx(_MATRIX_ROW)))
    if cand.is_empty():
        return pl.DataFrame(schema=SCHEMAS["nccl_tuning"])
    cand = cand.with_columns(_g=pl.col("text").str.extract_groups(rx(_MATRIX_ROW))).sort("line_no")
    h = heads.select(*_BASE, table_line=pl.col("line_no")).sort("table_line")
    cand = cand.with_columns(_l=pl.col("line_no")).join_asof(h.rename({"line_no": "_hl"}), left_on="_l",
                                                            right_on="table_line", strategy="backward")
    # Only rows within a few lines of their header belong to it (the block is 6 lines long).
    cand = cand.filter((pl.col("line_no") - pl.col("table_line")).is_between(1, 8))
    g = pl.col("_g").struct.field
    cand = cand.with_columns(func=g("func"), _p=g("protos").str.extract_all(rx(r"\S+")), _a=g("algos").str.extract_all(rx(r"\S+")))
    header = cand.filter(pl.col("func") == "Function").select("table_line", _pn=pl.col("_p"), _an=pl.col("_a"))
    body = cand.filter(pl.col("func") != "Function").join(header, on="table_line", how="left")
    protos = body.with_columns(_i=pl.int_ranges(pl.col("_p").list.len())).explode("_p", "_i").with_columns(
        proto=pl.col("_pn").list.get(pl.col("_i"), null_on_oob=True), enabled=to_int(pl.col("_p")))
    algos = body.with_columns(_i=pl.int_ranges(pl.col("_a").list.len())).explode("_a", "_i").with_columns(
        algo=pl.col("_an").list.get(pl.col("_i"), null_on_oob=True), enabled=to_int(pl.col("_a")))
    rows = pl.concat([_no_helpers(protos), _no_helpers(algos)], how="diagonal_relaxed").with_columns(
        kind=pl.lit("matrix_cell"), line_no=pl.col("line_no").cast(pl.UInt32), table_line=pl.col("table_line").cast(pl.UInt32))
    header_rows = cand.filter(pl.col("func") == "Function").with_columns(kind=pl.lit("matrix_header"))
    return pl.concat([rows, _no_helpers(header_rows)], how="diagonal_relaxed")


def _env(df: pl.DataFrame | None) -> pl.DataFrame:
    if df is None:
        return pl.DataFrame(schema=SCHEMAS["nccl_env"])
    # Integer parameters are printed `%lld.` (trailing period); strings are not.
    value = pl.col("value").str.replace(rx(r"^(-?\d+)\.$"), "$1")
    key = pl.when(pl.col("kind") == "comm_config").then(pl.concat_str([pl.lit("config:"), pl.col("key")])).otherwise(pl.col("key"))
    return df.with_columns(value=value, key=key)


_RUNTIME_TUNING = ["decision_numeric", "decision", "decision_symmetric", "decision_ce", "decision_trace", "tuner_chunk"]


def _with_comm(df: pl.DataFrame, comms: pl.DataFrame) -> pl.DataFrame:
    """Init-time lines (env echoes, the tuning table, thresholds, channel counts) -> the
    communicator whose ``Init COMPLETE`` the same thread prints next: NCCL_ALGO/NCCL_PROTO and
    the tuning step repeat at every communicator init (nccl.md 3.14.4)."""
    key = ["host", "pid", "tid"]
    # each step chain as one plan, one Polars call (a call per step cost more than the steps here)
    done = (comms.lazy().filter(pl.col("phase") == "Init COMPLETE").select(*key, _c_line="line_no", _comm="comm")
            .sort("_c_line").collect(engine="in-memory"))
    if df.is_empty() or done.is_empty():
        return df.with_columns(comm=pl.lit(None, dtype=pl.String))
    runtime = pl.col("kind").is_in(_RUNTIME_TUNING)
    out = df.lazy().with_columns(_c_line=pl.col("line_no")).sort("_c_line").join_asof(
        done.lazy(), on="_c_line", by=key, strategy="forward", check_sortedness=False)
    return (out.with_columns(comm=pl.when(runtime).then(None).otherwise(pl.col("_comm"))).drop("_c_line", "_comm")
            .sort("line_no").collect(engine="in-memory"))


def _comms(df: pl.DataFrame | None) -> pl.DataFrame:
    if df is None:
        return pl.DataFrame(schema=SCHEMAS["nccl_comms"])
    if "comm_id2" in df.columns:
        df = df.with_columns(comm_id=pl.coalesce("comm_id", "comm_id2"))
    if "phase" not in df.columns:
        df = df.with_columns(phase=pl.lit(None, dtype=pl.String))
    return df.with_columns(phase=pl.coalesce(pl.col("phase"), pl.col("kind").str.replace("comm_", "")))


# The ``kind`` of a COLL trace row in ``collectives``: one per collective per rank, millions in a
# traced run (analyzer.bulk stores most of them; rules and timelines leave them out by this kind).
COLL_KIND = "nccl_coll"


def _collectives(df: pl.DataFrame | None) -> pl.DataFrame:
    if df is None:
        return pl.DataFrame(schema=SCHEMAS["collectives"])
    dtype = to_int(pl.col("datatype"))
    red = to_int(pl.col("red_op"))
    return df.with_columns(
        kind=pl.lit(COLL_KIND), op_count=pl.col("op_count_hex").str.to_integer(base=16, strict=False),
        datatype=dtype.replace_strict(DATATYPES, default=None, return_dtype=pl.String).fill_null(dtype.cast(pl.String)),
        bytes=to_int(pl.col("count")) * dtype.replace_strict(DATATYPE_BYTES, default=None, return_dtype=pl.Int64),
        red_op=red.replace_strict(RED_OPS, default=None, return_dtype=pl.String).fill_null(
            pl.concat_str([pl.lit("user"), red.cast(pl.String)])),
    )


def _info(df: pl.DataFrame | None) -> pl.DataFrame:
    if df is None:
        return pl.DataFrame(schema=SCHEMAS["nccl_info"])
    extra = [c for c in ("value2", "value3") if c in df.columns]
    if extra and "value" in df.columns:
        df = df.with_columns(value=pl.coalesce("value", *extra))
    return df


def _info_events(df: pl.DataFrame | None) -> pl.DataFrame:
    """INFO lines that are events: error back-traces, P2P refusals, retries, proxy service."""
    if df is None:
        return pl.DataFrame(schema=SCHEMAS["events"])
    code = to_int(pl.col("code")) if "code" in df.columns else pl.lit(None, dtype=pl.Int64)
    names = code.replace_strict(RESULT_CODES, default=None, return_dtype=pl.String)
    detail = pl.when(pl.col("kind") == "error_chain").then(pl.concat_str([code.cast(pl.String), pl.lit(" "), names], ignore_nulls=True))
    if "dev_a" in df.columns:
        pairs = [(f"dev_a{s}", f"dev_b{s}") for s in ("", "2", "3", "4") if f"dev_a{s}" in df.columns]
        dev_a = pl.coalesce(*[pl.col(a) for a, _ in pairs])
        dev_b = pl.coalesce(*[pl.col(b) for _, b in pairs])
        detail = detail.when(pl.col("kind") == "p2p_unavailable").then(pl.concat_str([dev_a, pl.lit("-"), dev_b]))
    if "detail" in df.columns:
        detail = detail.otherwise(pl.col("detail"))
    kind = pl.when(pl.col("kind") == "error_chain").then(pl.lit("nccl_error_chain")).otherwise(pl.col("kind"))
    return df.with_columns(detail=detail, kind=kind, message=pl.col("msg"))


def _warn_events(prefixed: pl.DataFrame) -> pl.DataFrame:
    """Every WARN line is an event: ``error_class`` (coarse) and ``cause`` (``postmortem.parsers.nccl_errors``)
    from its text and NCCL's ``file:line``, with the peer rank, peer address, errno and NCCL
    result code the text states."""
    warns = prefixed.filter(pl.col("level") == "WARN")
    if warns.is_empty():
        return pl.DataFrame(schema=SCHEMAS["events"])
    cause, klass = nccl_errors.classify(pl.col("msg"), pl.col("src_file"), possible_kinds(warns, "msg", nccl_errors.CAUSES))
    meaning = pl.col("cause").replace_strict({c.name: c.meaning for c in nccl_errors.CAUSES}, default=None,
                                             return_dtype=pl.String)
    ts = pl.col("nccl_ts").str.strptime(pl.Datetime("us"), "%Y-%m-%d %H:%M:%S%.f", strict=False)
    status = pl.col("msg").str.extract(rx(r"(?:with status=|with error |status=\w+\()(\d+)"), 1)
    warns = warns.with_columns(cause=cause, error_class=klass.fill_null("other"), **nccl_errors.fields(pl.col("msg")))
    oom = pl.col("error_class") == "out_of_memory"   # its sizes as columns, as torch_errors gives a cuda_oom's
    warns = warns.with_columns(**{k: pl.when(oom).then(v) for k, v in oom_size_columns(pl.col("msg")).items()})
    detail = pl.when(status.is_not_null()).then(pl.concat_str([pl.lit("status "), status, pl.lit(": "), meaning])).otherwise(meaning)
    return warns.with_columns(kind=pl.lit("nccl_warn"), detail=detail, message=pl.col("msg"), ts=ts)


def _versions(lines: pl.DataFrame, prefixed: pl.DataFrame) -> pl.DataFrame:
    bare = lines.filter(pl.col("text").str.starts_with("NCCL version ")).select(
        "line_no", host=pl.lit(None, dtype=pl.String), pid=pl.lit(None, dtype=pl.Int64), msg=pl.col("text"))
    info = prefixed.filter(pl.col("msg").str.starts_with("NCCL version ")).select("line_no", "host", "pid", "msg")
    both = pl.concat([bare, info]).with_columns(_v=pl.col("msg").str.extract_groups(rx(_VERSION)))
    return both.filter(pl.col("_v").struct.field("version").is_not_null()).select(
        "line_no", "host", "pid", version=pl.col("_v").struct.field("version"), cuda=pl.col("_v").struct.field("cuda"),
    ).cast(SCHEMAS["nccl_versions"])


def _fragments(lines: pl.DataFrame, prefixed: pl.DataFrame) -> pl.DataFrame:
    """Pieces of torn lines without a whole prefix (section 2.1): counted and kept, not parsed."""
    rest = lines.lazy().select("line_no", "text").join(prefixed.lazy().select("line_no"), on="line_no", how="anti")
    return rest.filter(pl.col("text").str.contains(rx(_FRAGMENT))).select(
        "line_no", kind=pl.lit("torn_line"), detail=pl.lit("fragment of a line torn by another process's output"),
        message=pl.col("text"), level=pl.lit(None, dtype=pl.String)).collect(engine="in-memory")


def _shapes(prefixed: pl.DataFrame, kinds: pl.DataFrame) -> pl.DataFrame:
    """Each process's distinct message shapes (numbers folded, lengths kept), first line of
    each, for version fingerprinting over all inputs at once (``postmortem.analyzer.nccl_model``). COLL
    trace lines are left out: they are the bulk and fingerprint nothing."""
    df = prefixed.lazy().join(kinds.lazy(), on="line_no", how="left").filter(pl.col("kind").fill_null("") != "coll")
    shape = pl.col("msg").str.replace_all(r"0x[0-9a-fA-F]+", "0x0").str.replace_all(rx(r"\d"), "0")
    df = df.with_columns(shape=shape).sort("line_no").unique(["host", "pid", "shape"], keep="first", maintain_order=True)
    return df.select("line_no", "host", "pid", "level", "msg", has_ts=pl.col("nccl_ts").is_not_null(),
                     has_fn=pl.col("fn").is_not_null()).collect(engine="in-memory")


def fingerprints(shapes: pl.DataFrame) -> pl.DataFrame:
    """Per process, the first line of each version-specific shape it printed (section 4), from
    ``nccl_shapes`` rows (of one input or of all): ``evidence``, ``min_minor``, ``max_minor``."""
    schema = {"line_no": pl.UInt32, "host": pl.String, "pid": pl.Int64, "evidence": pl.String,
              "min_minor": pl.Int64, "max_minor": pl.Int64}
    extra = [c for c in ("input_id",) if c in shapes.columns]
    info = pl.col("level") == "INFO"
    possible = possible_guards(shapes, "msg", [guard(pattern) for _evidence, pattern, _first, _last in FINGERPRINTS])
    checks = [(evidence, pl.col("msg").str.contains(rx(pattern)) & (info if evidence.endswith("(INFO)") else True), first, last)
              for i, (evidence, pattern, first, last) in enumerate(FINGERPRINTS) if i in possible]
    warn = pl.col("level") == "WARN"
    checks += [("NCCL timestamp on WARN lines", warn & pl.col("has_ts"), 26, 30),
               ("`(function)` after file:line on WARN lines", warn & pl.col("has_fn"), 30, 30)]
    # One query with a branch per check: a filter and a select per check were 130 Polars calls.
    source = shapes.lazy()
    hits = pl.concat([source.filter(hit).select(*extra, "line_no", "host", "pid", evidence=pl.lit(evidence),
                                                min_minor=pl.lit(first, dtype=pl.Int64),
                                                max_minor=pl.lit(last, dtype=pl.Int64))
                      for evidence, hit, first, last in checks]).collect(engine="in-memory")
    if hits.is_empty():
        return pl.DataFrame(schema=schema)
    return hits.sort(*extra, "line_no").unique(["host", "pid", "evidence"], keep="first", maintain_order=True)


def parse(lines: pl.DataFrame) -> ParseResult:
    prefixed = _prefixed(lines)
    versions = _versions(lines, prefixed)
    fragments = _fragments(lines, prefixed)
    if prefixed.is_empty() and versions.is_empty() and fragments.is_empty():
        return ParseResult()
    info = prefixed.filter(pl.col("level") != "WARN")
    rows, kinds = _classify(info)
    merged = {name: _merge(name, frames) for name, frames in rows.items()}
    info_table = _info(merged.get("nccl_info"))
    markers = info_table.filter(pl.col("kind") == "connected") if not info_table.is_empty() else info_table
    tuning = _tuning(merged.get("nccl_tuning"))
    matrix = _matrix(lines, tuning)
    torn = prefixed.filter(pl.col("torn")).select("line_no", "host", "pid", "tid", "cuda_dev", kind=pl.lit("torn_line"),
                                                  detail=pl.lit("another process's line was cut off before this record"),
                                                  message=pl.col("msg"))
    events = pl.concat([_warn_events(prefixed), _info_events(merged.get("events")), torn, fragments], how="diagonal_relaxed")
    comms = _comms(merged.get("nccl_comms"))
    tables = {
        "nccl_comms": comms,
        "nccl_connections": _connections(merged.get("nccl_connections"), markers,
                                         lines.select("line_no", "input_id") if "input_id" in lines.columns else None),
        "nccl_rings": _rings(merged.get("nccl_rings")),
        "nccl_trees": _trees(merged.get("nccl_trees")),
        "nccl_graph": merged.get("nccl_graph"),
        "nccl_net": _net(merged.get("nccl_net")),
        "nccl_env": _with_comm(_env(merged.get("nccl_env")), comms),
        "nccl_tuning": _with_comm(pl.concat([tuning, matrix], how="diagonal_relaxed"), comms),
        "nccl_info": info_table,
        "nccl_versions": versions,
        "nccl_shapes": _shapes(prefixed, kinds),
        "events": events.unique("line_no", keep="first").sort("line_no"),
        "collectives": _collectives(merged.get("collectives")),
    }
    tables = conform_all({name: frame for name, frame in tables.items() if frame is not None}, SCHEMAS)
    typed_kinds = pl.concat([
        kinds,
        prefixed.filter(pl.col("level") == "WARN").select("line_no", kind=pl.lit("warn")),
        versions.select("line_no", kind=pl.lit("version")),
        fragments.select("line_no", kind=pl.lit("torn_line")),
        matrix.select("line_no", kind=pl.lit("matrix")),
    ]).unique("line_no", keep="first")
    nccl_lines = pl.concat([
        prefixed.select(*_BASE, "level"),
        versions.select("line_no", level=pl.lit("VERSION")),
        fragments.select("line_no", level=pl.lit("FRAGMENT")),
        matrix.select("line_no", level=pl.lit("CONTINUATION")),
    ], how="diagonal_relaxed").unique("line_no", keep="first").join(typed_kinds, on="line_no", how="left")
    tables["nccl_lines"] = conform(nccl_lines.sort("line_no"), LINES_SCHEMA)
    return ParseResult(tables=tables, consumed=consumed_of(typed_kinds))
