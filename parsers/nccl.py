"""NCCL_DEBUG output: the line prefix, the version banner, communicator lifecycle, WARN lines.

Reference: ``formats/nccl.md`` sections 1, 3.1, 3.5, 3.10, 3.11. This module covers what
the silent-deadlock slice needs (who is which rank on which GPU, which version); the full
transport/topology/tuning grammar builds on the same prefix parse.

Line prefix (all versions 2.4-2.30, after launcher prefixes are peeled)::

    host:pid:tid [cudaDev] NCCL INFO <msg>
    host:pid:tid [cudaDev] file:line NCCL WARN <msg>            (2.30: file:line (func))
    [YYYY-MM-DD HH:MM:SS] host:pid:tid [dev] file:line NCCL WARN  (2.26+ WARN timestamps)

Understood messages:

* ``NCCL version 2.21.5+cuda12.4`` (bare line before 2.22, INFO line from 2.22)
* ``cudaDriverVersion 12020`` (2.13+)
* communicator lifecycle, every version: ``comm %p rank %d nranks %d cudaDev %d
  [nvmlDev %d] [busId %x] [commId 0x%llx] [parent %p [splitCount|childCount %d] color %d
  key %d]- Init START|Init COMPLETE|Abort COMPLETE|Destroy COMPLETE``, with the API name in
  front from 2.21 and ``[Rank %d]`` from 2.29
* the layout line ``comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d``
* ``NCCL WARN`` lines (any message) and the ``file:line -> N`` error chain

Tables: ``nccl_procs`` (every NCCL-prefixed line: host, pid, tid, device; the identity
resolver uses it to attribute lines of combined logs to processes), ``nccl_comms``,
``nccl_versions``, ``events``.
"""

from __future__ import annotations

import polars as pl

from parsers.base import ParseResult, conform, consumed_of, to_int

NAME = "nccl"

SAMPLE_LINES = [
    "h20-node-01:2231:2231 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
    "NCCL version 2.18.5+cuda12.0",
    "h20-node-01:2231:2231 [0] NCCL INFO cudaDriverVersion 12040",
    "h20-node-01:2231:2301 [0] NCCL INFO comm 0x55d1c3a4b6f0 rank 0 nranks 40 cudaDev 0 nvmlDev 0 busId 18000 commId 0x5ae77eb5ea4ec1ee - Init START",
    "h20-node-01:2231:2301 [0] NCCL INFO ncclCommInitRank comm 0x55d1c3a4b6f0 rank 0 nranks 40 cudaDev 0 nvmlDev 0 busId 18000 commId 0x5ae77eb5ea4ec1ee - Init COMPLETE",
    "h20-node-01:2231:2301 [0] NCCL INFO ncclCommSplit comm 0x55d1c3a4c000 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 18000 parent 0x55d1c3a4b6f0 splitCount 1 color 2 key 0- Init START",
    "h20-node-01:2231:2301 [0] NCCL INFO [Rank 0] ncclCommInitRankConfig comm 0x55d1c3a4b6f0 rank 0 nranks 40 cudaDev 0 nvmlDev 0 busId 18000 commId 0x5ae77eb5ea4ec1ee - Init START",
    "hw14:798:811 [1] NCCL INFO comm 0x55a7be569d00 rank 1 nRanks 8 nNodes 1 localRanks 8 localRank 1 MNNVL 0",
    "node1:1234:1234 [3] NCCL INFO comm 0x7f00 rank 3 nranks 8 cudaDev 3 nvmlDev 3 - Init COMPLETE",
    "node1:1234:1234 [3] NCCL INFO comm 0x7f00 rank 3 nranks 8 cudaDev 3 busId 3d000 - Init COMPLETE",
    "node1:1234:1290 [3] NCCL INFO comm 0x7f00 rank 3 nranks 8 cudaDev 3 busId 3d000 - Abort COMPLETE",
    "node1:1234:1290 [3] misc/socket.cc:518 NCCL WARN Net : Call to recv from 10.100.2.247<58355> failed : Broken pipe",
    "[2025-05-10 23:09:41] node01:47286:63478 [2] transport/nvls.cc:254 NCCL WARN Cuda failure 1 'invalid argument'",
    "node01:47286:63478 [2] transport/net_ib.cc:100 (ncclIbConnect) NCCL WARN NET/IB : Got completion from peer 10.1.1.2<4000> with status=12 opcode=0",
    "node01:630335:630410 [3] NCCL INFO transport/nvls.cc:409 -> 1",
    "node02:32619:32711 [2] NCCL INFO node02:28579:28579 [7] NCCL INFO comm 0x7f01 rank 7 nranks 8 cudaDev 7 busId db000 - Init COMPLETE",
]

_PREFIX = (
    r"^(?:\[(?P<nccl_ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?)\] )?"
    r"(?P<host>[^:\s]*):(?P<pid>\d+):(?P<tid>\d+) (?:\[(?P<dev>\d+)\] )?"
    r"(?:(?P<file>\S+?):(?P<fline>\d+)(?: \((?P<fn>[^)]*)\))? )?"
    r"NCCL (?P<level>INFO|WARN|TRACE|CALL) ?(?P<msg>.*)$"
)
_VERSION = r"NCCL version (?P<version>\d+\.\d+\.\d+)(?P<suffix>[^+\s]*)\+cuda(?P<cuda>[\w.]+)"
_COMM = (
    r"^(?:\[Rank \d+\] )?(?:(?P<api>nccl\w+) )?comm (?P<comm>0x[0-9a-fA-F]+|\(nil\)) rank (?P<rank>\d+) "
    r"nranks (?P<nranks>\d+) cudaDev (?P<cuda_dev>\d+)(?: nvmlDev (?P<nvml_dev>\d+))?"
    r"(?: busId (?P<bus_id>[0-9a-fA-F]+))?(?: commId (?P<comm_id>0x[0-9a-fA-F]+))?"
    r"(?: parent (?P<parent>0x[0-9a-fA-F]+|\(nil\))(?: (?:splitCount|childCount) \d+)?"
    r" color (?P<color>-?\d+) key (?P<key>-?\d+))? ?- (?P<phase>Init START|Init COMPLETE|Abort COMPLETE|Destroy COMPLETE|Revoke COMPLETE)"
)
_LAYOUT = (
    r"^comm (?P<comm>0x[0-9a-fA-F]+) rank (?P<rank>\d+) nRanks (?P<nranks>\d+) nNodes (?P<nnodes>\d+) "
    r"localRanks (?P<local_ranks>\d+) localRank (?P<local_rank>\d+) MNNVL (?P<mnnvl>\d+)"
)

PROCS_SCHEMA = {"line_no": pl.UInt32, "host": pl.String, "pid": pl.Int64, "tid": pl.Int64,
                "cuda_dev": pl.Int64, "level": pl.String}
COMMS_SCHEMA = {
    "line_no": pl.UInt32, "host": pl.String, "pid": pl.Int64, "tid": pl.Int64, "api": pl.String,
    "comm": pl.String, "rank": pl.Int64, "nranks": pl.Int64, "cuda_dev": pl.Int64,
    "nvml_dev": pl.Int64, "bus_id": pl.String, "comm_id": pl.String, "parent": pl.String,
    "color": pl.Int64, "key": pl.Int64, "phase": pl.String, "nnodes": pl.Int64,
    "local_ranks": pl.Int64, "local_rank": pl.Int64,
}
VERSIONS_SCHEMA = {"line_no": pl.UInt32, "host": pl.String, "pid": pl.Int64, "version": pl.String,
                   "cuda": pl.String}
EVENTS_SCHEMA = {"line_no": pl.UInt32, "level": pl.String, "src_file": pl.String, "kind": pl.String,
                 "detail": pl.String, "message": pl.String}


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


# Two processes writing to one pipe can tear a line: `a:1:1 [2] NCCL INFO b:2:2 [7] NCCL INFO msg`
# (nccl.md section 2.1). The last header starts the record that survived; the fragment before
# it is truncated and only counted.
_HEADER_MARK = r":\d+:\d+ (?:\[\d+\] )?(?:\S+ (?:\([^)]*\) )?)?NCCL (?:INFO|WARN|TRACE|CALL)\b"
_LAST_HEADER = r"^(?:.*\s)?([^\s:]*:\d+:\d+ (?:\[\d+\] )?(?:\S+ (?:\([^)]*\) )?)?NCCL (?:INFO|WARN|TRACE|CALL)\b.*)$"


def _prefixed(lines: pl.DataFrame) -> pl.DataFrame:
    df = lines.select("line_no", "text").filter(pl.col("text").str.contains(" NCCL ", literal=True))
    if df.is_empty():
        return pl.DataFrame(schema={**PROCS_SCHEMA, "src_file": pl.String, "msg": pl.String, "torn": pl.Boolean})
    torn = pl.col("text").str.count_matches(_HEADER_MARK) >= 2
    df = df.with_columns(torn=torn, text=pl.when(torn).then(pl.col("text").str.extract(_LAST_HEADER, 1))
                         .otherwise(pl.col("text")))
    g = pl.col("text").str.extract_groups(_PREFIX)
    df = df.with_columns(_g=g).filter(pl.col("_g").struct.field("pid").is_not_null())
    f = pl.col("_g").struct.field
    return df.select(
        "line_no",
        host=f("host"), pid=to_int(f("pid")), tid=to_int(f("tid")), cuda_dev=to_int(f("dev")),
        level=f("level"), src_file=f("file"), msg=f("msg"), torn="torn",
    )


def _versions(lines: pl.DataFrame, prefixed: pl.DataFrame) -> pl.DataFrame:
    bare = lines.filter(pl.col("text").str.starts_with("NCCL version ")).select(
        "line_no", host=pl.lit(None, dtype=pl.String), pid=pl.lit(None, dtype=pl.Int64),
        msg=pl.col("text"))
    info = prefixed.filter(pl.col("msg").str.starts_with("NCCL version ")).select("line_no", "host", "pid", "msg")
    both = pl.concat([bare, info]).with_columns(_v=pl.col("msg").str.extract_groups(_VERSION))
    return both.filter(pl.col("_v").struct.field("version").is_not_null()).select(
        "line_no", "host", "pid",
        version=pl.concat_str([pl.col("_v").struct.field("version"), pl.col("_v").struct.field("suffix")]),
        cuda=pl.col("_v").struct.field("cuda"),
    ).cast(VERSIONS_SCHEMA)


def _comms(prefixed: pl.DataFrame) -> pl.DataFrame:
    def extract(pattern: str) -> pl.DataFrame:
        sub = prefixed.filter(pl.col("msg").str.contains(pattern))
        if sub.is_empty():
            return pl.DataFrame(schema=COMMS_SCHEMA)
        groups = sub.select(pl.col("msg").str.extract_groups(pattern)).to_series().struct.unnest()
        sub = pl.concat([sub.select("line_no", "host", "pid", "tid"), groups], how="horizontal")
        if "phase" not in sub.columns:
            sub = sub.with_columns(phase=pl.lit("layout"))
        return conform(sub, COMMS_SCHEMA)
    return pl.concat([extract(_COMM), extract(_LAYOUT)]).sort("line_no")


def _events(prefixed: pl.DataFrame) -> pl.DataFrame:
    warn = prefixed.filter(pl.col("level") == "WARN").select(
        "line_no", "level", "src_file", kind=pl.lit("nccl_warn"), detail=pl.lit(None, dtype=pl.String),
        message=pl.col("msg"))
    chain = prefixed.filter(pl.col("msg").str.contains(r"^\S+:\d+ -> \d+")).select(
        "line_no", "level", "src_file", kind=pl.lit("nccl_error_chain"),
        detail=pl.col("msg").str.extract(r"-> (\d+)", 1), message=pl.col("msg"))
    driver = prefixed.filter(pl.col("msg").str.starts_with("cudaDriverVersion ")).select(
        "line_no", "level", "src_file", kind=pl.lit("cuda_driver"),
        detail=pl.col("msg").str.extract(r"(\d+)", 1), message=pl.col("msg"))
    torn = prefixed.filter(pl.col("torn")).select(
        "line_no", "level", "src_file", kind=pl.lit("torn_line"),
        detail=pl.lit("another process's line was cut off before this record"), message=pl.col("msg"))
    return pl.concat([warn, chain, driver, torn]).cast(EVENTS_SCHEMA).unique("line_no", keep="first").sort("line_no")


def parse(lines: pl.DataFrame) -> ParseResult:
    prefixed = _prefixed(lines)
    versions = _versions(lines, prefixed)
    if prefixed.is_empty() and versions.is_empty():
        return ParseResult()
    comms = _comms(prefixed)
    events = _events(prefixed)
    procs = prefixed.select(list(PROCS_SCHEMA)).cast(PROCS_SCHEMA)
    return ParseResult(
        tables={"nccl_procs": procs, "nccl_comms": comms, "nccl_versions": versions,
                "events": events},
        consumed=consumed_of(versions, comms, events),
    )
