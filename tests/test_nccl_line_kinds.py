"""Independent, lnav-style check of the NCCL_DEBUG parser against the format reference.

Every case is ``(version, line, table, expected)``: ``line`` is a full log line written by
hand from NCCL's printf format strings as the project's format notes list them (summarised in
``docs/formats/nccl.md``: sections 1, 2, 3.1-3.14 with the corrections of 3.14.7, and 4), or a
small :class:`Block` when the line needs its context (a tuning table header, a matrix header, the ``Connected all rings`` marker that
follows connection lines, the empty line NCCL prints before every WARN). The test parses the
line or block, takes the rows of ``table`` whose ``line_no`` is the target line and checks the
fields. The expected values come from the reference, never from what ``parsers/nccl.py``
happens to do: where the two disagreed, the parser was fixed (torn TRACE/WARN lines, cut
``NET/IB`` and ``Trees`` lines, per-HCA GDR lines, ``.cu`` back-traces, stalled-thread phases,
the 2.24+ ``Collective`` TRACE line, ...).

``expected`` keys are column names of ``postmortem.parsers.nccl.SCHEMAS`` (or ``nccl_lines``). Special
keys: ``_where`` (a dict of column -> value that picks the rows to check among the rows of
that line, for tables that explode a line into several rows), ``_nrows`` (the exact number of
rows picked) and ``_unconsumed_ok`` (the line need not be in ``result.consumed``; every other
case also checks that its line was understood). A value can be a plain value (floats compare
approximately), or one of the matchers below.

Besides the cases: every catalogue kind has samples classified as themselves, the cases reach
every kind the reference describes, and multi-line blocks of known versions get version
fingerprints (``nccl.fingerprints`` over the parser's ``nccl_shapes``) that all contain the
true version.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from functools import cache

import polars as pl
import pytest

from postmortem.parsers import nccl
from postmortem.parsers.lines import envelope
from postmortem.parsers.nccl_catalogue import KINDS

# -- matchers ------------------------------------------------------------------------------------


class Matcher:
    def __call__(self, value) -> bool:  # pragma: no cover - interface
        raise NotImplementedError


@dataclass(frozen=True)
class Contains(Matcher):
    text: str

    def __call__(self, value) -> bool:
        return value is not None and self.text in str(value)


@dataclass(frozen=True)
class Lacks(Matcher):
    """Null, or a text that does not contain ``text``."""
    text: str

    def __call__(self, value) -> bool:
        return value is None or self.text not in str(value)


@dataclass(frozen=True)
class OneOf(Matcher):
    values: tuple

    def __call__(self, value) -> bool:
        return value in self.values


class _NotNull(Matcher):
    def __call__(self, value) -> bool:
        return value is not None

    def __repr__(self) -> str:
        return "NOT_NULL"


NOT_NULL = _NotNull()


def _match(actual, expected) -> bool:
    if isinstance(expected, Matcher):
        return expected(actual)
    if isinstance(expected, float) and actual is not None and not isinstance(actual, bool):
        return actual == pytest.approx(expected, rel=1e-6, abs=1e-6)
    return actual == expected


# -- blocks and line builders --------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """Several physical lines; ``at`` is the 0-based index of the line the case is about."""
    lines: tuple[str, ...]
    at: int

    def __repr__(self) -> str:
        return f"Block[{self.at}]({self.lines[self.at]!r})"


def ctx(line: str, before=(), after=()) -> Block:
    return Block(tuple(before) + (line,) + tuple(after), len(before))


def I(msg: str, host: str = "gpu-a07", pid: int = 5120, tid: int = 5187, dev: int = 1) -> str:
    """An INFO line: ``%s:%d:%d [%d] NCCL INFO `` + message (section 1.1)."""
    return f"{host}:{pid}:{tid} [{dev}] NCCL INFO {msg}"


def W(msg: str, src: str = "misc/socket.cc:484", host: str = "gpu-a07", pid: int = 5120, tid: int = 5199,
      dev: int = 1, ts: str | None = None, fn: str | None = None) -> Block:
    """A WARN line with the empty line NCCL prints before it (section 1.1, 6 item 2)."""
    stamp = f"[{ts}] " if ts else ""
    func = f" ({fn})" if fn else ""
    return ctx(f"{stamp}{host}:{pid}:{tid} [{dev}] {src}{func} NCCL WARN {msg}", before=[""])


def conn(channel, conn_index, src, dst, side, transport, net=None, nic=None, gdr=False, shared=False, pxn_via=None,
         **extra) -> dict:
    """The fields section 3.7 says a connection line carries."""
    return {"channel": channel, "conn_index": conn_index, "src": src, "dst": dst, "side": side,
            "transport": transport, "net": net, "nic": nic, "gdr": gdr, "shared": shared, "pxn_via": pxn_via,
            **extra}


# -- tuning tables written from the printf formats of section 3.14.3 ------------------------------

FUNCS = ["Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"]
PROTOS = ["LL", "LL128", "Simple"]


def cell(fi: int, ai: int, pi: int) -> tuple[float, float]:
    """A distinct (latency, bandwidth) per (function, algorithm, protocol), so that a cell mapped
    to the wrong column cannot pass by accident."""
    return (fi * 100 + ai * 10 + pi + 0.5, fi * 50 + ai * 5 + pi + 0.2)


def max_threads(ai: int, pi: int) -> int:
    return 64 * (ai + 1) + 32 * pi


def table_25(host="tune-25", pid=301, tid=301):
    """2.5: ``Latency/AlgBw |`` + `` %4s/%6s |``; rows ``%13s |`` + ``%7.1f/%5.1f|``; Tree cells of
    non-AllReduce rows are ``0.0/  0.0``."""
    algos = ["Tree", "Ring"]
    out = [I("Latency/AlgBw |" + "".join(f" {a:>4}/{p:>6} |" for a in algos for p in PROTOS), host, pid, tid, 0)]
    for fi, f in enumerate(FUNCS):
        cells = []
        for ai, a in enumerate(algos):
            for pi, _ in enumerate(PROTOS):
                lat, bw = (0.0, 0.0) if (a == "Tree" and f != "AllReduce") else cell(fi, ai, pi)
                cells.append(f"{lat:7.1f}/{bw:5.1f}|")
        out.append(I(f"{f:>13} |" + "".join(cells), host, pid, tid, 0))
    return out


def table_26(algos, host="tune-26", pid=302, tid=302):
    """2.6-2.17: ``Latency/AlgBw |`` + `` %7s/%6s |``, `` Max NThreads |`` + `` %14d |``, rows
    ``%13s |`` + ``%8.1f/%6.1f |``."""
    out = [I("Latency/AlgBw |" + "".join(f" {a:>7}/{p:>6} |" for a in algos for p in PROTOS), host, pid, tid, 0),
           I(" Max NThreads |" + "".join(f" {max_threads(ai, pi):14d} |" for ai in range(len(algos))
                                          for pi in range(3)), host, pid, tid, 0)]
    for fi, f in enumerate(FUNCS):
        out.append(I(f"{f:>13} |" + "".join(
            "{:8.1f}/{:6.1f} |".format(*cell(fi, ai, pi)) for ai in range(len(algos)) for pi in range(3)),
            host, pid, tid, 0))
    return out


def table_218(algos, host="tune-218", pid=303, tid=303):
    """2.18+: blocks of three algorithms, each ``  Algorithm   |`` + `` %14s   %14s   %14s |`` per
    algorithm (name in the middle), ``  Protocol    |`` + `` %14s |`` x 9 (always nine),
    `` Max NThreads |`` + `` %14d |`` per cell, and the five rows."""
    out = []
    for b in range(0, len(algos), 3):
        block = list(range(b, min(b + 3, len(algos))))
        out.append(I("  Algorithm   |" + "".join(f" {'':>14}   {algos[ai]:>14}   {'':>14} |" for ai in block),
                     host, pid, tid, 0))
        out.append(I("  Protocol    |" + "".join(f" {p:>14} |" for _ in range(3) for p in PROTOS), host, pid, tid, 0))
        out.append(I(" Max NThreads |" + "".join(f" {max_threads(ai, pi):14d} |" for ai in block for pi in range(3)),
                     host, pid, tid, 0))
        for fi, f in enumerate(FUNCS):
            out.append(I(f"{f:>13} |" + "".join("{:8.1f}/{:6.1f} |".format(*cell(fi, ai, pi))
                                                 for ai in block for pi in range(3)), host, pid, tid, 0))
    return out


ALGOS_26 = ["Tree", "Ring", "CollNet"]
ALGOS_214 = ["Tree", "Ring", "CollNetDirect", "CollNetChain"]
ALGOS_217 = ["Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS"]
ALGOS_218 = ["Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree"]
ALGOS_223 = ALGOS_218 + ["PAT"]

T25 = table_25()
T26 = table_26(ALGOS_26)
T214 = table_26(ALGOS_214, host="tune-214", pid=304, tid=304)
T217 = table_26(ALGOS_217, host="tune-217", pid=305, tid=305)
T218 = table_218(ALGOS_218)
T223 = table_218(ALGOS_223, host="tune-223", pid=306, tid=306)


def row_of(block: int, func: str) -> int:
    """Index of ``func``'s row in block ``block`` (0-based) of a 2.18+ table (8 lines per block)."""
    return block * 8 + 3 + FUNCS.index(func)


def tcell(func: str, algos: list[str], algo: str, proto: str, threads: bool = True) -> dict:
    fi, ai, pi = FUNCS.index(func), algos.index(algo), PROTOS.index(proto)
    lat, bw = cell(fi, ai, pi)
    out = {"_where": {"algo": algo, "proto": proto}, "_nrows": 1, "func": func, "latency_us": lat,
           "bandwidth_gbs": bw}
    if threads:
        out["max_threads"] = max_threads(ai, pi)
    return out


def matrix_block(protos: dict[str, list[int]], algos: dict[str, list[int]], host="mtx-01", pid=401, tid=401):
    """2.24+: ``Enabled NCCL Func/Proto/Algo Matrix:`` then unprefixed lines: header
    ``     Function | `` + ``%8s  `` per protocol + `` | `` + ``%13s  `` per algorithm, rows
    ``%13s | `` + ``%8d  `` ... + `` | `` + ``%13d  ``, then an empty line."""
    lines = [I("Enabled NCCL Func/Proto/Algo Matrix:", host, pid, tid, 0),
             "     Function | " + "".join(f"{p:>8}  " for p in protos) + " | " + "".join(f"{a:>13}  " for a in algos)]
    for fi, f in enumerate(FUNCS):
        lines.append(f"{f:>13} | " + "".join(f"{v[fi]:8d}  " for v in protos.values()) + " | "
                     + "".join(f"{v[fi]:13d}  " for v in algos.values()))
    lines.append("")
    return lines


MATRIX = matrix_block(
    {"LL": [1, 1, 1, 1, 1], "LL128": [2, 2, 2, 2, 2], "Simple": [1, 1, 1, 1, 1]},
    {"Tree": [1, 1, 1, 1, 1], "Ring": [1, 1, 1, 1, 1], "CollNetDirect": [1, 1, 1, 1, 0],
     "CollNetChain": [1, 1, 1, 1, 0], "NVLS": [1, 1, 1, 1, 0], "NVLSTree": [1, 1, 1, 1, 0], "PAT": [1, 1, 1, 1, 0]})
MATRIX_PROTO = matrix_block(
    {"LL": [0, 0, 0, 0, 1], "LL128": [0, 0, 0, 0, 0], "Simple": [1, 1, 1, 1, 1]},
    {"Tree": [1, 1, 1, 1, 1], "Ring": [1, 1, 1, 1, 1], "CollNetDirect": [1, 1, 1, 1, 1],
     "CollNetChain": [1, 1, 1, 1, 1], "NVLS": [1, 1, 1, 1, 1], "NVLSTree": [1, 1, 1, 1, 1], "PAT": [1, 1, 1, 1, 1]},
    host="mtx-02", pid=402, tid=402)


def ring_line_223(nranks: int, channel: int = 0, nchannels: int = 8) -> tuple[str, list[int], bool]:
    """2.23+ ring order: ``Channel %02d/%02d :`` + `` %*d`` (width = digits of nranks-1), in a
    128-byte buffer whose end is replaced by ``...`` when the ranks do not fit (section 3.6)."""
    width = len(str(nranks - 1))
    line = f"Channel {channel:02d}/{nchannels:02d} :"
    shown = []
    for r in range(nranks):
        if len(line) >= 127:
            break
        line += f" {r:{width}d}"
        shown.append(r)
    if len(line) >= 128:
        line = line[:124] + "..."
        kept = line[len(f"Channel {channel:02d}/{nchannels:02d} :"):-3]
        if not kept.endswith(" "):  # the `...` overwrote part of a number: that rank is not shown whole
            kept = kept[:kept.rstrip().rfind(" ")]
        shown = [int(t) for t in kept.split()]
        return line, shown, True
    return line, shown, False


RING_64 = ring_line_223(64)
RING_2048 = ring_line_223(2048, nchannels=32)

NICS_64 = "NET/IB : Using" + "".join(f" [{i}]mlx5_{i}:1/RoCE" for i in range(64)) + " [RO]; OOB eth0:10.0.0.1<0>"
TREES_64 = "Trees" + "".join(f" [{c}] 3/-1/-1->2->1" for c in range(64))

# A connection block with the markers of section 3.7: lines before `Connected all rings` on a
# thread are ring hops, between rings and trees tree hops, connection index 1 is p2p. Two
# threads (two communicators initialising at once) interleave; each follows its own markers.
A = {"host": "dgx-h100-05", "pid": 6100, "tid": 6160, "dev": 0}
B = {"host": "dgx-h100-05", "pid": 6100, "tid": 6175, "dev": 0}
PHASE_BLOCK = [
    I("Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read", **A),                     # 0 A ring
    I("Channel 00/0 : 7[7] -> 0[0] [receive] via NET/IB/0/GDRDMA", **A),          # 1 A ring
    I("Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct", **B),                  # 2 B ring (B's marker is line 6)
    I("Connected all rings, use ring PXN 0 GDR 1", **A),                          # 3
    I("Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA", **A),             # 4 A tree
    I("Channel 00 : 0[0] -> 2[2] via SHM/direct/direct", **A),                    # 5 A tree (SHM: no index)
    I("Connected all rings", **B),                                                # 6
    I("Connected all trees", **A),                                                # 7
    I("Channel 01/0 : 0[0] -> 3[3] via P2P/CUMEM", **B),                          # 8 B tree
    I("Connected all trees", **B),                                                # 9
    I("Channel 02/1 : 0[0] -> 9[1] [send] via NET/IB/1/GDRDMA/Shared", **A),      # 10 A p2p
]


def phase_case(i: int, phase: str):
    return ("2.24", Block(tuple(PHASE_BLOCK), i), "nccl_connections", {"phase": phase})


# -- the cases -----------------------------------------------------------------------------------

HOSTS3 = ["10.100.1.10: worker-0:88:88 [0] NCCL INFO Bootstrap : Using eth0:10.100.1.10<0>",
          "10.100.1.10: worker-0:88:88 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",
          "10.100.1.10: worker-0:88:88 [0] NCCL INFO Using network Socket",
          "10.100.1.10: worker-0:88:120 [0] NCCL INFO Channel 00 : 0[1a000] -> 1[1b000] via P2P/IPC"]

TORN_COLL = ("node02:32619:32711 [2] NCCL INFO node02:28579:28579 [7] NCCL INFO Broadcast: opCount 1 "
             "sendbuff 0x7f3a00000000 recvbuff 0x7f3a00000000 count 1024 datatype 0 op 0 root 0 "
             "comm 0x55e0c0000100 [nranks=8] stream 0x55e0c0000200")

CASES = [
    # ---- section 1.1: the prefix NCCL writes ---------------------------------------------------
    ("2.18", "gpu-a07:5120:5187 [1] NCCL INFO Using network IB", "nccl_lines",
     {"host": "gpu-a07", "pid": 5120, "tid": 5187, "cuda_dev": 1, "level": "INFO", "kind": "network"}),
    ("2.18", "gpu-a07:5120:5120 [0] NCCL INFO Using network IB", "nccl_net",
     {"host": "gpu-a07", "pid": 5120, "tid": 5120, "cuda_dev": 0, "name": "IB"}),
    ("2.18", W("socketStartConnect: Connect to 10.20.0.7<43117> failed : Connection refused"), "events",
     {"kind": "nccl_warn", "level": "WARN", "src_file": "misc/socket.cc", "host": "gpu-a07", "pid": 5120,
      "tid": 5199, "cuda_dev": 1, "error_class": "socket_error", "ts": None}),
    ("2.18", W("socketStartConnect: Connect to 10.20.0.7<43117> failed : Connection refused"), "nccl_lines",
     {"level": "WARN", "host": "gpu-a07", "pid": 5120, "tid": 5199, "cuda_dev": 1}),
    ("2.30", W("NET/IB: Got completion from peer 10.20.0.7<43117> with status=IBV_WC_RETRY_EXC_ERR(12) "
               "opcode=IBV_WC_SEND(0) vendor_err=129  localGid ::ffff:10.20.0.5 remoteGids::ffff:10.20.0.7 hca mlx5_3",
               src="transport/net_ib.cc:2310", fn="ncclIbCompletionEventProcess", ts="2026-01-12 08:01:02"),
     "events", {"src_file": "transport/net_ib.cc", "error_class": "ib_completion_error", "host": "gpu-a07",
                "tid": 5199, "ts": dt.datetime(2026, 1, 12, 8, 1, 2)}),
    ("2.26", W("NET/Socket : peer 10.0.0.12<48213> message truncated : receiving 4194304 bytes instead of 524288. "
               "If you believe your socket network is in healthy state,                 there may be a mismatch in "
               "collective sizes or environment settings (e.g. NCCL_PROTO, NCCL_ALGO) between ranks",
               src="transport/net_socket.cc:562", host="node02", pid=5120, tid=5199, ts="2025-03-14 10:22:07"),
     "events", {"ts": dt.datetime(2025, 3, 14, 10, 22, 7), "host": "node02", "pid": 5120, "cuda_dev": 1,
                "src_file": "transport/net_socket.cc", "error_class": "size_mismatch"}),
    ("2.27", W("Cuda failure 1 'invalid argument'", src="transport/nvls.cc:254", host="node01", pid=47286, tid=63478,
               dev=2, ts="2025-05-10 23:09:41.123456"),
     "events", {"ts": dt.datetime(2025, 5, 10, 23, 9, 41, 123456), "host": "node01", "cuda_dev": 2,
                "error_class": "nvls_failed", "cause": "nvls_cuda_failure"}),   # a CUDA failure in NVLS setup
    ("2.27", "[2025-05-10 23:09:41] node01:47286:47286 [2] NCCL INFO Channel 00/0 : 2[2] -> 3[3] via P2P/CUMEM",
     "nccl_connections", {"host": "node01", "pid": 47286, "tid": 47286, **conn(0, 0, 2, 3, None, "P2P")}),
    ("2.20", "gpu-a07:5120:5120 [1] 2311.904785 topoGetAlgoInfo:1203 NCCL TRACE 1048576 Bytes -> Algo 1 proto 2 time 31.452000",
     "nccl_lines", {"level": "TRACE", "host": "gpu-a07", "pid": 5120, "cuda_dev": 1, "kind": "decision_numeric"}),
    ("2.18", "gpu-a07:5120:5120 [1] 2311.904785 getAlgoInfo:1203 NCCL TRACE 1048576 Bytes -> Algo 1 proto 2 time 31.452000",
     "nccl_tuning", {"bytes": 1048576, "algo": "1", "proto": "2", "time_us": 31.452, "func": None}),
    # CALL (2.14+): the reference gives the prefix only, so the message need not be understood.
    ("2.14", "gpu-a07:5120:5120 NCCL CALL ncclCommInitRank(0x55d1c3a4b6f0, 8, 0x1c3a7d9ee6b8a1f0, 3, 3)", "nccl_lines",
     {"_unconsumed_ok": True, "level": "CALL", "host": "gpu-a07", "pid": 5120, "tid": 5120, "cuda_dev": None}),
    ("2.13", ":5202:5683 [0] NCCL INFO Bootstrap : Using eth0:172.17.0.3<0>", "nccl_lines",
     {"host": OneOf(("", None)), "pid": 5202, "tid": 5683, "cuda_dev": 0, "kind": "bootstrap_if"}),
    ("2.26", "gpu-server320 [5] NCCL INFO misc/socket.cc:64 -> 6", "nccl_lines",
     {"host": "gpu-server320", "pid": None, "tid": None, "cuda_dev": 5, "kind": "error_chain"}),
    ("2.26", ctx("2025-11-24T03:20:21.001125857Z [2025-11-24 11:20:21] gpu-server320 [5] misc/socket.cc:46 NCCL WARN "
                 "socketProgress: Connection closed by remote peer gpu-server321<54321>", before=[""]),
     "events", {"host": "gpu-server320", "pid": None, "cuda_dev": 5, "ts": dt.datetime(2025, 11, 24, 11, 20, 21),
                "error_class": "peer_closed", "src_file": "misc/socket.cc"}),

    # ---- section 2: launcher and collector prefixes in front -----------------------------------
    ("2.20", "12: gpu-b11:40211:40290 [4] NCCL INFO Channel 00/0 : 12[4] -> 13[5] via P2P/CUMEM/read",
     "nccl_connections", {"host": "gpu-b11", "pid": 40211, "tid": 40290, **conn(0, 0, 12, 13, None, "P2P", read=True)}),
    ("2.10", "[1,5]<stdout>:gpu-b11:40211:40290 [5] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.30.1.11<0>",
     "nccl_net", {"_where": {"name": "mlx5_1"}, "_nrows": 1, "host": "gpu-b11", "pid": 40211, "index": 1,
                  "port": 1, "link": "IB"}),
    ("2.18", "Fri Aug 11 12:31:45 2023[1,0]<stdout>:NCCL version 2.18.3+cuda12.2", "nccl_versions",
     {"version": "2.18.3", "cuda": "12.2"}),
    ("2.18", "Fri Aug 11 12:31:45 2023[1,3]<stdout>:gpu-b12:7311:7380 [3] NCCL INFO Channel 02/0 : 3[3] -> 4[0] [send] via NET/IB/1/GDRDMA",
     "nccl_connections", {"host": "gpu-b12", "pid": 7311, **conn(2, 0, 3, 4, "send", "NET", "IB", 1, gdr=True)}),
    ("2.19", "[155] gpu-c02:7001:7050 [3] NCCL INFO Using network IB", "nccl_lines",
          {"host": "gpu-c02", "pid": 7001, "tid": 7050, "cuda_dev": 3, "kind": "network"}),
    ("2.7", Block(tuple(HOSTS3), 3), "nccl_connections",
     {"host": "worker-0", "pid": 88, "tid": 120, **conn(0, None, 0, 1, None, "P2P")}),
    ("2.7", Block(tuple(HOSTS3), 2), "nccl_net", {"host": "worker-0", "name": "Socket"}),
    ("2.21", "(RayTrainWorker pid=615, ip=10.100.2.6) worker-1:615:702 [0] NCCL INFO Channel 02/0 : 0[0] -> 1[1] via P2P/IPC",
     "nccl_connections", {"host": "worker-1", "pid": 615, "tid": 702, **conn(2, 0, 0, 1, None, "P2P")}),
    ("2.21", "(VllmWorkerProcess pid=2231) vllm-node:2231:2231 [1] NCCL INFO NCCL version 2.21.5+cuda12.4",
     "nccl_versions", {"version": "2.21.5", "cuda": "12.4", "host": "vllm-node", "pid": 2231}),
    ("2.21", "[36m(RayTrainWorker pid=615, ip=10.100.2.6)[0m worker-1:615:702 [0] NCCL INFO Using network Socket",
     "nccl_lines", {"host": "worker-1", "pid": 615, "kind": "network"}),
    ("2.21", "[0m worker-1:615:702 [0] NCCL INFO Using network Socket", "nccl_lines",
     {"host": "worker-1", "pid": 615, "kind": "network"}),
    ("2.10", "(pid=21065) ray-w3:21065:21140 [0] NCCL INFO Using network IB", "nccl_lines",
          {"host": "ray-w3", "pid": 21065, "kind": "network"}),
    ("2.10", "2025-11-24T03:20:21.001125857Z trainer-5f7c9-x2lq8:72:91 [0] NCCL INFO Channel 00 : 4[cb000] -> 6[e000] [receive] via NET/IB/0/GDRDMA",
     "nccl_connections", {"host": "trainer-5f7c9-x2lq8", "pid": 72, "tid": 91,
                          **conn(0, None, 4, 6, "receive", "NET", "IB", 0, gdr=True, src_dev="cb000", dst_dev="e000")}),
    ("2.12", "  | 2024-12-04T05:27:44.080Z | algo-1:123:456 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.1.5<0>",
     "nccl_net", {"_where": {"name": "eth0"}, "host": "algo-1", "pid": 123, "index": 0, "address": "10.0.1.5", "port": 0}),
    ("2.19", "│ node07:59194:59194 [0] NCCL INFO Using network IB                                │", "nccl_net",
     {"host": "node07", "pid": 59194, "name": "IB"}),
    ("2.19", "│ node07:59194:59201 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/IPC/read          │",
     "nccl_connections", {"host": "node07", **conn(1, 0, 0, 1, None, "P2P", read=True)}),
    ("2.16", "> node-q:3310:3344 [2] NCCL INFO comm 0x55a1 rank 2 nranks 4 cudaDev 2 busId 3d000 commId 0x9f3e2b7a11c04d55 - Init COMPLETE",
     "nccl_comms", {"host": "node-q", "rank": 2, "nranks": 4, "comm_id": "0x9f3e2b7a11c04d55"}),
    ("2.16", "> > > node-q:3310:3344 [2] NCCL INFO Using network Socket", "nccl_net",
     {"host": "node-q", "pid": 3310, "name": "Socket"}),
    ("2.19", "[default3]:gpu-d01:9001:9001 [3] NCCL INFO Using network IB", "nccl_lines",
     {"host": "gpu-d01", "pid": 9001, "cuda_dev": 3, "kind": "network"}),

    # ---- section 2.1: torn and interleaved lines -----------------------------------------------
    ("2.10", TORN_COLL, "collectives",
     {"host": "node02", "pid": 28579, "tid": 28579, "cuda_dev": 7, "op": "Broadcast", "op_count": 1, "count": 1024,
      "datatype": "int8", "nranks": 8}),
    ("2.10", TORN_COLL, "events", {"kind": "torn_line"}),
    ("2.18", ctx("node02:32619:32711 [2] NCCL INFO node02:28579:28610 [7] misc/socket.cc:503 NCCL WARN socketProgress: "
                 "Connection closed by remote peer node03<41233>", before=[""]),
     "events", {"_where": {"kind": "nccl_warn"}, "pid": 28579, "tid": 28610, "error_class": "peer_closed"}),
    ("2.21", ctx("(WorkerDict pid=3569861) degamts15:3569861:3571306",
                 after=["(WorkerDict pid=3569860) CCL INFO Channel 08/0 : 0[0] -> 1[1] via P2P/IPC"]),
     "events", {"kind": "torn_line"}),
    ("2.21", ctx("(WorkerDict pid=3569860) CCL INFO Channel 08/0 : 0[0] -> 1[1] via P2P/IPC",
                 before=["(WorkerDict pid=3569861) degamts15:3569861:3571306"]),
     "nccl_lines", {"kind": "torn_line"}),
    ("2.20", "node02:32619:32711 [2] NCCL INFO node03:41877:41877 [0] 2311.904785 topoGetAlgoInfo:1203 NCCL TRACE "
                  "1048576 Bytes -> Algo 1 proto 2 time 31.452000",
          "nccl_tuning", {"host": "node03", "pid": 41877, "bytes": 1048576, "algo": "1", "proto": "2"}),
    ("2.20", "node03:41877:41877 [0] 2311.904785 topoGetAlgoInfo:1203 NCCL TRACE node02:28579:28579 [7] NCCL INFO Using network IB",
          "nccl_net", {"host": "node02", "pid": 28579, "name": "IB"}),
    ("2.26", ctx("node02:32619:32711 [2] NCCL INFO [2025-03-14 10:22:07] node03:28579:28610 [7] misc/socket.cc:503 NCCL WARN "
                 "socketProgress: Connection closed by remote peer node04<41233>", before=[""]),
     "events", {"_where": {"kind": "nccl_warn"}, "host": "node03", "pid": 28579, "ts": dt.datetime(2025, 3, 14, 10, 22, 7),
                "error_class": "peer_closed"}),
    ("2.10", ctx("Broadcast: opCount 1 sendbuff 0x7f3a00000000 recvbuff 0x7f3a00000000 count 1024 datatype 0 op 0 "
                      "root 0 comm 0x55e0c0000100 [nranks=8] stream 0x55e0c0000200",
                      before=["node02:32619:32711 [2] NCCL INFO node02:28579:28579 [7] NCCL INFO "]),
          "nccl_lines", {"kind": NOT_NULL}),

    # ---- section 3.1: version and driver -------------------------------------------------------
    ("2.18", "NCCL version 2.18.5+cuda12.0", "nccl_versions", {"version": "2.18.5", "cuda": "12.0", "host": None}),
    ("2.25", "localhost:11326:11326 [0] NCCL INFO NCCL version 2.25.1+cuda12.2", "nccl_versions",
     {"version": "2.25.1", "cuda": "12.2", "host": "localhost", "pid": 11326}),
    ("2.25", "localhost:11326:11326 [0] NCCL INFO NCCL version 2.25.1+cuda12.2", "nccl_lines",
     {"kind": "version", "level": "INFO"}),
    ("2.4", "NCCL version 2.4.7+cudaCUDA_MAJOR.CUDA_MINOR", "nccl_versions", {"version": "2.4.7", "cuda": "CUDA_MAJOR.CUDA_MINOR"}),
    ("2.19", " 0: NCCL version 2.19.3+cuda12.3", "nccl_versions", {"version": "2.19.3", "cuda": "12.3"}),
    ("2.13", I("cudaDriverVersion 12020"), "nccl_info", {"kind": "cuda_driver", "value": "12020"}),
    ("2.23", W("Mismatched NCCL version detected : rank 0 version 22304 rank 8 version 22105", src="init.cc:1120"),
     "events", {"error_class": "version_mismatch"}),

    # ---- section 3.2: bootstrap interface ------------------------------------------------------
    ("2.5", I("Bootstrap : Using [0]eth0:10.100.3.64<0> [1]ib0:10.200.3.64<0> [2]docker0:172.17.0.1<0>"), "nccl_net",
     {"_where": {"name": "ib0"}, "_nrows": 1, "index": 1, "address": "10.200.3.64", "port": 0}),
    ("2.5", I("Bootstrap : Using [0]eth0:10.100.3.64<0> [1]ib0:10.200.3.64<0> [2]docker0:172.17.0.1<0>"), "nccl_net",
     {"_where": {"name": "docker0"}, "_nrows": 1, "index": 2, "address": "172.17.0.1"}),
    ("2.6", I("Bootstrap : Using [0]enp1s0:10.100.3.64<0> [1]veth75fa783:fe80::14ad:64ff:fe64:b31e%veth75fa783<0>"),
     "nccl_net", {"_where": {"index": 1}, "_nrows": 1, "name": "veth75fa783",
                  "address": "fe80::14ad:64ff:fe64:b31e%veth75fa783", "port": 0}),
    ("2.12", I("Bootstrap : Using bond0:10.100.4.184<0>"), "nccl_net",
     {"_nrows": 1, "kind": "bootstrap_if", "name": "bond0", "address": "10.100.4.184", "port": 0, "index": None}),
    ("2.25", I("Bootstrap: Using eno1:10.100.5.89<0>"), "nccl_net",
     {"_nrows": 1, "kind": "bootstrap_if", "name": "eno1", "address": "10.100.5.89"}),
    ("2.22", I("Bootstrap : Using ib0:10.1.1.7<45123>"), "nccl_net", {"name": "ib0", "address": "10.1.1.7", "port": 45123}),
    ("2.16", I("NCCL_SOCKET_IFNAME set by environment to ^docker0,lo"), "nccl_env",
     {"key": "NCCL_SOCKET_IFNAME", "value": "^docker0,lo"}),
    ("2.18", W("Bootstrap : no socket interface found", src="bootstrap.cc:68"), "events", {"error_class": "no_interface"}),
    ("2.10", W("Net : No interface found in the same subnet as remote address 10.0.0.1<29500>", src="misc/socket.cc:412"),
     "events", {"error_class": "no_interface"}),
    ("2.18", W("Bootstrap Root : rank 3 of 8 ranks has already checked in", src="bootstrap.cc:141"), "events",
     {"error_class": "bootstrap_mismatch"}),
    ("2.12", W("Bootstrap Root : mismatch in rank count from procs 8 : 16", src="bootstrap.cc:155"), "events",
     {"error_class": "bootstrap_mismatch"}),
    ("2.14", W("Message truncated : received 2048 bytes instead of 1024", src="bootstrap.cc:264"), "events",
     {"error_class": "size_mismatch"}),

    # ---- section 3.3: plugin wordings and network selection ------------------------------------
    ("2.4", I("NET/Plugin : No plugin found (libnccl-net.so)."), "nccl_lines", {"kind": "plugin"}),
    ("2.8", I("NET/Plugin : No plugin found (libnccl-net.so), using internal implementation"), "nccl_lines", {"kind": "plugin"}),
    ("2.15", I("NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared object file: No such file or directory"),
     "nccl_lines", {"kind": "plugin"}),
    ("2.15", I("NET/Plugin : No plugin found, using internal implementation"), "nccl_lines", {"kind": "plugin"}),
    ("2.15", I("NET/Plugin: Loaded net plugin IBext (v6)"), "nccl_lines", {"kind": "plugin"}),
    ("2.19", I("NET/Plugin : Plugin load returned 2 : libnccl-net.so: cannot open shared object file: No such file or directory."),
     "nccl_lines", {"kind": "plugin"}),
    ("2.19", I("NET/Plugin : dlerror=libnccl-net.so: cannot open shared object file: No such file or directory No plugin found (libnccl-net.so), using internal implementation"),
     "nccl_lines", {"kind": "plugin"}),
    ("2.19", I("Using non-device net plugin version 0"), "nccl_lines", {"kind": "plugin"}),
    ("2.21", I("NET/Plugin: No plugin found (libnccl-net.so)"), "nccl_lines", {"kind": "plugin"}),
    ("2.21", I("NET/Plugin: Using internal network plugin."), "nccl_lines", {"kind": "plugin"}),
    ("2.24", I("NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin."), "nccl_lines", {"kind": "plugin"}),
    ("2.26", I("NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin."), "nccl_lines", {"kind": "plugin"}),
    ("2.27", I("NET/Plugin: Could not find: libnccl-net.so."), "nccl_lines", {"kind": "plugin"}),
    ("2.27", I("PROFILER/Plugin: Could not find: libnccl-profiler.so."), "nccl_lines", {"kind": "plugin"}),
    ("2.27", I("Successfully loaded external plugin libnccl-net-ofi.so"), "nccl_lines", {"kind": "plugin"}),
    ("2.18", I("Plugin Path : /opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so"), "nccl_lines", {"kind": "plugin"}),
    ("2.18", I("NET/OFI Initializing aws-ofi-nccl 1.11.0-aws"), "nccl_lines", {"kind": "ofi"}),
    ("2.10", I("NET/FastSocket : Using [0]ens8:10.100.6.107<0>"), "nccl_lines", {"kind": NOT_NULL}),
    ("2.18", I("Using network AWS Libfabric"), "nccl_net", {"name": "AWS Libfabric"}),
    ("2.18", I("Using network IBext_v8"), "nccl_net", {"name": "IBext_v8"}),
    ("2.6", I("Using network Socket"), "nccl_net", {"name": "Socket"}),

    # ---- section 3.4: NIC lines ----------------------------------------------------------------
    ("2.5", I("NET/IB : Using [0]mlx5_1:1/IB [1]mlx5_3:1/IB [2]mlx5_0:1/IB [3]mlx5_2:1/RoCE [4]mlx5_4:1/IB ; OOB eth0:10.100.3.64<0>"),
     "nccl_net", {"_where": {"name": "mlx5_2"}, "_nrows": 1, "index": 3, "port": 1, "link": "RoCE"}),
    ("2.5", I("NET/IB : Using [0]mlx5_1:1/IB [1]mlx5_3:1/IB [2]mlx5_0:1/IB [3]mlx5_2:1/RoCE [4]mlx5_4:1/IB ; OOB eth0:10.100.3.64<0>"),
     "nccl_net", {"_where": {"link": NOT_NULL}, "_nrows": 5}),
    ("2.19", I("NET/IB : Using [0]mlx5_10:1/RoCE [1]mlx5_11:1/RoCE [RO]; OOB enp220s0np0:10.100.7.136<0>"), "nccl_net",
     {"_where": {"name": "mlx5_11"}, "_nrows": 1, "index": 1, "link": "RoCE", "relaxed_ordering": True}),
    ("2.19", I("NET/IB : Using [0]mlx5_10:1/RoCE [1]mlx5_11:1/RoCE [RO]; OOB enp220s0np0:10.100.7.136<0>"), "nccl_net",
     {"_where": {"name": "enp220s0np0"}, "_nrows": 1, "address": "10.100.7.136", "port": 0}),
    ("2.25", I("NET/IB : Using [RO]; OOB eno1:10.100.5.89<0>"), "nccl_net", {"_where": {"link": NOT_NULL}, "_nrows": 0}),
    ("2.25", I("NET/IB : Using [RO]; OOB eno1:10.100.5.89<0>"), "nccl_net",
     {"_where": {"name": "eno1"}, "_nrows": 1, "address": "10.100.5.89"}),
    ("2.18", I("NET/IB : Using [0]={[0] mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE} [1]={[2] mlx5_0:1/RoCE, [3] mlx5_1:1/RoCE} [RO]; OOB bond0:10.100.9.21<0>"),
     "nccl_net", {"_where": {"name": "mlx5_0"}, "_nrows": 1, "index": 1, "link": "RoCE"}),
    ("2.18", I("NET/IB : Using [0]={[0] mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE} [1]={[2] mlx5_0:1/RoCE, [3] mlx5_1:1/RoCE} [RO]; OOB bond0:10.100.9.21<0>"),
     "nccl_net", {"_where": {"name": "mlx5_3"}, "_nrows": 1, "index": 0}),
    ("2.27", I("NET/IB : Using [0]mlx5_0:1/UNSPECIFIED [1]mlx5_1:1/IB [RO]; OOB eth0:10.1.2.3<0>"), "nccl_net",
     {"_where": {"name": "mlx5_0"}, "_nrows": 1, "index": 0, "link": "UNSPECIFIED"}),
    ("2.10", I("NET/Socket : Using [0]eth0:10.100.8.4<0> [1]br-ce64497c3b44:10.100.9.1<0>"), "nccl_net",
     {"_where": {"name": "br-ce64497c3b44"}, "_nrows": 1, "index": 1, "address": "10.100.9.1", "port": 0}),
    ("2.18", I("NET/Socket: Using 2 threads and 8 sockets per thread"), "nccl_net", {"threads": 2, "sockets": 8}),
    ("2.4", I("NET/IB : GPU Direct RDMA Disabled for GPU 1[1] / HCA 0 (distance 4 >= 4)"), "nccl_net",
     {"gdr": "Disabled", "gpu": "1", "hca": "0", "distance": 4, "threshold": 4}),
    ("2.8", I("GPU Direct RDMA Disabled for GPU 3d000 / HCA 2 (distance 5 > 4)"), "nccl_net",
     {"gdr": "Disabled", "gpu": "3d000", "hca": "2", "distance": 5, "threshold": 4}),
    ("2.12", I("GPU Direct RDMA Enabled for GPU 1b000 / HCA 0 (distance 2 <= 4), read 1"), "nccl_net",
     {"gdr": "Enabled", "gpu": "1b000", "hca": "0", "distance": 2, "threshold": 4, "read": 1}),
    ("2.22", I("GPU Direct RDMA Enabled for GPU 1b000 / HCA 3f00000001 (distance 2 <= 4), read 1"), "nccl_net",
     {"gdr": "Enabled", "gpu": "1b000", "hca": "3f00000001", "read": 1}),
    ("2.24", I("GPU Direct RDMA Enabled for GPU 5 / HCA 3f00000001 (distance 3 <= 4), read 0"), "nccl_net",
     {"gdr": "Enabled", "gpu": "5", "hca": "3f00000001", "distance": 3, "read": 0}),
    ("2.26", I("GPU Direct RDMA Enabled for GPU 5 / HCA 3f00000001 (distance 3 <= 4), read 1 mode PCI"), "nccl_net",
     {"gdr": "Enabled", "gpu": "5", "read": 1, "mode": "PCI"}),
    ("2.14", I("NET/IB : GPU Direct RDMA Enabled for HCA 1 'mlx5_1'"), "nccl_net",
          {"gdr": "Enabled", "hca": "1", "name": "mlx5_1"}),
    ("2.10", I("NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)"), "nccl_net",
          {"gdr": "Disabled", "hca": "0", "name": "mlx5_0"}),
    ("2.10", I("NCCL_NET_GDR_LEVEL set by environment to PHB"), "nccl_env", {"key": "NCCL_NET_GDR_LEVEL", "value": "PHB"}),
    ("2.12", I("NET/IB : No device found."), "nccl_lines", {"kind": "ib_no_device"}),
    ("2.12", I("NET/IB : No device found."), "nccl_net", {"kind": "ib_no_device"}),
    ("2.16", I("Failed to open libibverbs.so[.1]"), "nccl_lines", {"kind": "ibverbs_missing"}),
    ("2.22", I("NET/IB : Made virtual device [4] name=mlx5_0+mlx5_1 speed=400000 ndevs=2"), "nccl_net",
     {"index": 4, "name": "mlx5_0+mlx5_1"}),
    ("2.22", I("NET/IB: [1] mlx5_1:uverbs1:1/RoCE provider=Mlx5 speed=200000 context=0x55d0c0a1b2c0 pciPath=/sys/devices/pci0000:17/0000:17:00.0 ar=0"),
     "nccl_net", {"index": 1, "name": "mlx5_1", "port": 1, "link": "RoCE"}),
    ("2.18", I("NET/IB: NCCL Dev 0 IbDev 0 Port 1 qpn 1234 mtu 5 GID 3 (0/3A00640AFFFF0000)"), "nccl_lines", {"kind": "ib_qp"}),
    ("2.4", I("CUDA Dev 0[0], IB NIC distance :  PIX SYS"), "nccl_lines", {"kind": "nic_distance"}),

    # ---- section 3.5: communicator lifecycle ---------------------------------------------------
    ("2.4", I("comm 0x7f5c4c001d60 rank 3 nranks 8 cudaDev 3 nvmlDev 3 - Init COMPLETE", dev=3), "nccl_comms",
     {"comm": "0x7f5c4c001d60", "rank": 3, "nranks": 8, "cuda_dev": 3, "nvml_dev": 3, "bus_id": None,
      "comm_id": None, "phase": "Init COMPLETE"}),
    ("2.6", I("comm 0x55d0c0a1b2c0 rank 1 nranks 4 cudaDev 1 busId 3e000 - Init COMPLETE"), "nccl_comms",
     {"comm": "0x55d0c0a1b2c0", "rank": 1, "nranks": 4, "cuda_dev": 1, "nvml_dev": None, "bus_id": "3e000",
      "phase": "Init COMPLETE"}),
    ("2.11", I("comm 0x55d0c0a1b2c0 rank 9 nranks 16 cudaDev 1 busId 1b000 - Init COMPLETE"), "nccl_comms",
     {"rank": 9, "nranks": 16, "bus_id": "1b000", "comm_id": None}),
    ("2.16", I("comm 0x557fe785f7a0 rank 36 nranks 64 cudaDev 4 busId 9b000 commId 0x5ae77eb5ea4ec1ee - Init COMPLETE", dev=4),
     "nccl_comms", {"rank": 36, "nranks": 64, "cuda_dev": 4, "bus_id": "9b000", "comm_id": "0x5ae77eb5ea4ec1ee",
                    "phase": "Init COMPLETE"}),
    ("2.19", I("comm 0x55d1c3a4b6f0 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 18000 commId 0x1c3a7d9ee6b8a1f0 - Init START", dev=0),
     "nccl_comms", {"rank": 0, "nranks": 16, "cuda_dev": 0, "nvml_dev": 0, "bus_id": "18000",
                    "comm_id": "0x1c3a7d9ee6b8a1f0", "phase": "Init START", "api": None}),
    ("2.20", I("comm 0x55d1c3a4b6f0 rank 5 nranks 16 cudaDev 5 nvmlDev 6 busId 9a000 commId 0x1c3a7d9ee6b8a1f0 - Init COMPLETE", dev=5),
     "nccl_comms", {"rank": 5, "cuda_dev": 5, "nvml_dev": 6, "bus_id": "9a000", "phase": "Init COMPLETE"}),
    ("2.21", I("ncclCommInitRank comm 0x563f00a1b000 rank 2 nranks 8 cudaDev 2 nvmlDev 2 busId 2a000 commId 0x7e1d44c0aa8b3f12 - Init START", dev=2),
     "nccl_comms", {"api": "ncclCommInitRank", "comm": "0x563f00a1b000", "rank": 2, "nranks": 8, "nvml_dev": 2,
                    "bus_id": "2a000", "comm_id": "0x7e1d44c0aa8b3f12", "phase": "Init START", "parent": None}),
    ("2.22", I("ncclCommSplit comm 0x563f00c2d000 rank 1 nranks 4 cudaDev 2 nvmlDev 2 busId 2a000 parent 0x563f00a1b000 color 1 key 1 commId 0x0b2e6f1d9c3a4455 - Init START", dev=2),
     "nccl_comms", {"api": "ncclCommSplit", "rank": 1, "nranks": 4, "parent": "0x563f00a1b000", "color": 1, "key": 1,
                    "comm_id": "0x0b2e6f1d9c3a4455", "phase": "Init START"}),
    ("2.22", I("ncclCommSplit comm 0x563f00c2d000 rank 1 nranks 4 cudaDev 2 nvmlDev 2 busId 2a000 parent 0x563f00a1b000 color 1 key 1 commId 0x0b2e6f1d9c3a4455 - Init COMPLETE", dev=2),
     "nccl_comms", {"api": "ncclCommSplit", "parent": "0x563f00a1b000", "phase": "Init COMPLETE", "color": 1}),
    ("2.23", I("ncclCommInitRankConfig comm 0x5601 rank 7 nranks 32 cudaDev 7 nvmlDev 7 busId db000 commId 0x44aa9e0c3b7d2f10 - Init START", dev=7),
     "nccl_comms", {"api": "ncclCommInitRankConfig", "rank": 7, "nranks": 32, "bus_id": "db000",
                    "comm_id": "0x44aa9e0c3b7d2f10", "phase": "Init START"}),
    ("2.23", I("ncclCommSplit comm 0x5602 rank 0 nranks 2 cudaDev 4 nvmlDev 4 busId 9b000 parent 0x5601 color 3 key 0- Init START", dev=4),
     "nccl_comms", {"api": "ncclCommSplit", "rank": 0, "nranks": 2, "bus_id": "9b000", "parent": "0x5601", "color": 3,
                    "key": 0, "comm_id": None, "phase": "Init START"}),
    ("2.23", I("ncclCommSplit comm 0x5602 rank 0 nranks 2 cudaDev 4 nvmlDev 4 busId 9b000 parent 0x5601 color 3 key 0 - Init COMPLETE", dev=4),
     "nccl_comms", {"parent": "0x5601", "color": 3, "key": 0, "phase": "Init COMPLETE"}),
    ("2.25", I("ncclCommSplit comm 0x5603 rank 3 nranks 8 cudaDev 3 nvmlDev 3 busId 5d000 parent 0x5601 splitCount 2 color 1 key 5- Init START", dev=3),
     "nccl_comms", {"api": "ncclCommSplit", "rank": 3, "nranks": 8, "parent": "0x5601", "color": 1, "key": 5,
                    "phase": "Init START"}),
    ("2.28", I("ncclCommSplit comm 0x5603 rank 3 nranks 8 cudaDev 3 nvmlDev 3 busId 5d000 parent 0x5601 splitCount 2 color 1 key 5 - Init COMPLETE", dev=3),
     "nccl_comms", {"parent": "0x5601", "color": 1, "key": 5, "phase": "Init COMPLETE"}),
    ("2.29", I("[Rank 3] ncclCommInitRankScalable comm 0x5604 rank 3 nranks 64 cudaDev 3 nvmlDev 3 busId 5d000 commId 0x2f00aa11bb22cc33 - Init START", dev=3),
     "nccl_comms", {"api": "ncclCommInitRankScalable", "rank": 3, "nranks": 64, "comm_id": "0x2f00aa11bb22cc33",
                    "phase": "Init START"}),
    ("2.30", I("[Rank 1] ncclCommSplit comm 0x5605 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 1b000 parent 0x5604 childCount 1 color 0 key 1- Init START"),
     "nccl_comms", {"api": "ncclCommSplit", "rank": 1, "nranks": 2, "parent": "0x5604", "color": 0, "key": 1,
                    "phase": "Init START"}),
    ("2.20", I("comm 0x55a7be569d00 rank 1 nRanks 8 nNodes 1 localRanks 8 localRank 1 MNNVL 0"), "nccl_comms",
     {"comm": "0x55a7be569d00", "rank": 1, "nranks": 8, "nnodes": 1, "local_ranks": 8, "local_rank": 1, "mnnvl": 0}),
    ("2.25", I("comm 0x55a7be569d00 rank 12 nRanks 16 nNodes 2 localRanks 8 localRank 4 MNNVL 1"), "nccl_comms",
     {"rank": 12, "nranks": 16, "nnodes": 2, "local_ranks": 8, "local_rank": 4, "mnnvl": 1}),
    ("2.12", I("comm 0x7f00aa000000 rank 3 nranks 8 cudaDev 3 busId 3d000 - Abort COMPLETE", dev=3), "nccl_comms",
     {"comm": "0x7f00aa000000", "rank": 3, "nranks": 8, "bus_id": "3d000", "phase": "Abort COMPLETE"}),
    ("2.24", I("comm 0x7f00aa000000 rank 3 nranks 8 cudaDev 3 busId 3d000 - Destroy COMPLETE", dev=3), "nccl_comms",
     {"rank": 3, "nranks": 8, "phase": "Destroy COMPLETE"}),
    ("2.28", I("CommRevokeAsync START comm 0x5501 rank 2 nRanks 16 nNodes 2 localRank 2 cudaDev 2", dev=2),
     "nccl_comms", {"comm": "0x5501", "rank": 2, "nranks": 16, "nnodes": 2, "local_rank": 2}),
    ("2.22", I("Init timings: rank 0 nranks 16 total 1.20 (kernels 0.20, bootstrap 0.31, allgathers 0.05, topo 0.28, graphs 0.02, connections 0.12, rest 0.22)"),
     "nccl_info", {"kind": "init_timings", "rank": 0, "nranks": 16, "value": "1.20"}),
    ("2.23", I("Init timings - ncclCommInitRank: rank 3 nranks 16 total 0.92 (kernels 0.15, alloc 0.01, bootstrap 0.20, allgathers 0.03, topo 0.25, graphs 0.01, connections 0.17, rest 0.10)"),
     "nccl_info", {"kind": "init_timings", "rank": 3, "nranks": 16, "value": "0.92"}),
    ("2.23", I("Bootstrap timings total 0.001234 (create 0.000022, send 0.000113, recv 0.000521, ring 0.000381, delay 0.000000)"),
     "nccl_info", {"kind": "bootstrap_timings", "value": "0.001234"}),
    ("2.18", I("bootstrapSplit: rank 1 nranks 8 color 3 key 1 prev 0 next 2 - DONE"), "nccl_info",
     {"kind": "bootstrap_split", "rank": 1, "nranks": 8}),
    ("2.16", I("P2P Chunksize set to 524288"), "nccl_info", {"kind": "p2p_chunksize", "value": "524288"}),
    ("2.25", I("Check P2P Type intraNodeP2pSupport 1 directMode 0"), "nccl_lines", {"kind": "check_p2p"}),
    ("2.28", I("Check P2P Type isAllDirectP2p 1 directMode 0 isAllCudaP2p 1"), "nccl_lines", {"kind": "check_p2p"}),
    ("2.12", I("Setting affinity for GPU 3 to ffff,ffffffff,00000000"), "nccl_info",
     {"kind": "affinity", "value": "ffff,ffffffff,00000000"}),
    ("2.22", I("DMA-BUF is available on GPU device 0"), "nccl_lines", {"kind": "dmabuf"}),
    ("2.23", I("Comm config Blocking set to 0"), "nccl_lines", {"kind": "comm_config"}),
    ("2.23", I("MNNVL busId 0x18000 fabric UUID 0.0 cliqueId 0x0 state 3 healthMask 0x0"), "nccl_lines", {"kind": "mnnvl"}),
    ("2.27", I("rank 3 base stride 16GB total VM 128GB"), "nccl_info", {"kind": "symmetric_vm", "rank": 3}),

    # ---- section 3.6: rings, trees, graph, channel counts, thresholds --------------------------
    ("2.4", I("Channel 00 :    0   1   2   3"), "nccl_rings",
     {"channel": 0, "nchannels": None, "order": [0, 1, 2, 3], "truncated": False}),
    ("2.12", I(f"{'Channel 01/02 :    0   3   2   1   5   6   7   4':<115}"), "nccl_rings",
     {"channel": 1, "nchannels": 2, "order": [0, 3, 2, 1, 5, 6, 7, 4], "truncated": False}),
    ("2.23", I("Channel 20/24 : 0 1 2 3 4 5 6 7"), "nccl_rings",
     {"channel": 20, "nchannels": 24, "order": [0, 1, 2, 3, 4, 5, 6, 7], "truncated": False}),
    ("2.24", I("Channel 03/08 :  0  1  2  3  4  5  6  7 15 14 13 12 11 10  9  8"), "nccl_rings",
     {"channel": 3, "nchannels": 8, "order": [0, 1, 2, 3, 4, 5, 6, 7, 15, 14, 13, 12, 11, 10, 9, 8], "truncated": False}),
    ("2.25", I(RING_64[0]), "nccl_rings", {"channel": 0, "nchannels": 8, "order": RING_64[1], "truncated": True}),
    ("2.25", I(RING_2048[0]), "nccl_rings", {"channel": 0, "nchannels": 32, "order": RING_2048[1], "truncated": True}),
    ("2.12", I("Ring 03 : 7 -> 0 -> 1"), "nccl_rings", {"channel": 3, "prev": 7, "me": 0, "next": 1}),
    ("2.4", I("Trees [0] -1->0->1/-1/-1 [1] -1->0->1/-1/-1"), "nccl_trees",
     {"_where": {"channel": 1}, "_nrows": 1, "up": -1, "me": 0, "down0": 1, "down1": -1, "down2": -1}),
    ("2.6", I("Trees [0] 1/-1/-1->0->-1|-1->0->1/-1/-1 [1] -1/-1/-1->0->1|1->0->-1/-1/-1"), "nccl_trees",
     {"_where": {"channel": 1, "direction": "up"}, "_nrows": 1, "down0": -1, "me": 0, "up": 1}),
    ("2.6", I("Trees [0] 1/-1/-1->0->-1|-1->0->1/-1/-1 [1] -1/-1/-1->0->1|1->0->-1/-1/-1"), "nccl_trees",
     {"_where": {"channel": 1, "direction": "down"}, "_nrows": 1, "up": 1, "me": 0, "down0": -1}),
    ("2.7", I("Trees [0] 5/-1/-1->4->-1|-1->4->5/-1/-1"), "nccl_trees",
     {"_where": {"channel": 0, "direction": "up"}, "_nrows": 1, "down0": 5, "me": 4, "up": -1}),
    ("2.17", I("Trees [0] 3/-1/-1->2->1 [1] 3/-1/-1->2->1 [2] -1/-1/-1->2->6"), "nccl_trees",
     {"_where": {"channel": 2}, "_nrows": 1, "down0": -1, "down1": -1, "down2": -1, "me": 2, "up": 6}),
    ("2.17", I("Trees [0] 3/-1/-1->2->1 [1] 3/-1/-1->2->1 [2] -1/-1/-1->2->6"), "nccl_trees", {"_nrows": 3, "me": 2}),
    ("2.12", I("Tree 1 : 4 -> 5 -> 6/-1/-1"), "nccl_trees", {"channel": 1, "up": 4, "me": 5, "down0": 6, "down1": -1}),
    ("2.22", I("CollNet Channel 0 rank 3 up 8 down -1"), "nccl_trees", {"channel": 0, "me": 3, "up": 8, "down0": -1}),
    ("2.22", I("NVLS Trees : 0/-1/-1->8->16"), "nccl_lines", {"kind": "nvls_tree"}),
    ("2.12", I("Pattern 4, crossNic 0, nChannels 2, speed 20.000000/20.000000, type NVL/PIX, sameChannels 1"), "nccl_graph",
     {"pattern": 4, "cross_nic": 0, "nchannels": 2, "bw_intra": 20.0, "bw_inter": 20.0, "type_intra": "NVL",
      "type_inter": "PIX", "same_channels": 1}),
    ("2.21", I("Pattern 3, crossNic 1, nChannels 4, bw 24.000000/12.000000, type PXN/NET, sameChannels 0"), "nccl_graph",
     {"pattern": 3, "cross_nic": 1, "nchannels": 4, "bw_intra": 24.0, "bw_inter": 12.0, "type_intra": "PXN",
      "type_inter": "NET", "same_channels": 0}),
    ("2.21", I(" 0 : NET/0 GPU/1 GPU/0 NET/0"), "nccl_graph", {"channel": 0, "path": "NET/0 GPU/1 GPU/0 NET/0"}),
    ("2.21", I("10 : GPU/0 GPU/1 GPU/2 GPU/3"), "nccl_graph", {"channel": 10, "path": "GPU/0 GPU/1 GPU/2 GPU/3"}),
    ("2.12", I("=== System : maxBw 12.0 totalBw 12.0 ==="), "nccl_lines", {"kind": "topo_system"}),
    ("2.12", I("+ PCI[12.0] - GPU/1A000 (0)"), "nccl_lines", {"kind": "topo_node"}),
    ("2.22", I("Paths from GPU/1A000-1A000 :"), "nccl_lines", {"kind": "topo_paths"}),
    ("2.7", I("32 coll channels, 32 p2p channels, 2 p2p channels per peer"), "nccl_tuning",
     {"coll_channels": 32, "collnet_channels": None, "nvls_channels": None, "p2p_channels": 32, "p2p_per_peer": 2}),
    ("2.18", I("24 coll channels, 16 nvls channels, 32 p2p channels, 4 p2p channels per peer"), "nccl_tuning",
     {"coll_channels": 24, "collnet_channels": None, "nvls_channels": 16, "p2p_channels": 32, "p2p_per_peer": 4}),
    ("2.21", I("32 coll channels, 32 collnet channels, 0 nvls channels, 32 p2p channels, 32 p2p channels per peer"),
     "nccl_tuning", {"coll_channels": 32, "collnet_channels": 32, "nvls_channels": 0, "p2p_channels": 32,
                     "p2p_per_peer": 32}),
    ("2.5", I("threadThresholds 8/8/64 | 64/8/64"), "nccl_tuning", {"kind": "thread_thresholds", "detail": "8/8/64 | 64/8/64"}),
    ("2.9", I("threadThresholds 8/8/64 | 128/8/64 | 8/8/512"), "nccl_tuning",
     {"kind": "thread_thresholds", "detail": "8/8/64 | 128/8/64 | 8/8/512"}),
    ("2.19", I("threadThresholds 8/8/64 | 128/8/64 | 512 | 512"), "nccl_tuning",
     {"kind": "thread_thresholds", "detail": "8/8/64 | 128/8/64 | 512 | 512"}),
    ("2.5", I("Threads per block : 512/640/512"), "nccl_tuning", {"kind": "threads_per_block", "detail": "512/640/512"}),
    ("2.4", I("Using 256 threads, Min Comp Cap 7, Trees enabled up to size 41943039"), "nccl_tuning",
     {"kind": "using_threads", "nthreads": 256, "min_cc": 7}),
    ("2.4", I("Launch mode Parallel"), "nccl_tuning", {"kind": "launch_mode", "detail": "Parallel"}),

    # ---- section 3.7: connection lines, every shape of the table --------------------------------
    ("2.4", I("Ring 00 : 0[0] -> 1[1] via P2P/IPC"), "nccl_connections",
     conn(0, None, 0, 1, None, "P2P", word="Ring", src_dev="0", dst_dev="1")),
    ("2.4", I("Ring 01 : 1[1] -> 2[2] via P2P/direct pointer"), "nccl_connections", conn(1, None, 1, 2, None, "P2P")),
    ("2.4", I("Ring 02 : 2 -> 3 via P2P/common device"), "nccl_connections",
     conn(2, None, 2, 3, None, "P2P", src_dev=None, dst_dev=None)),
    ("2.4", I("Ring 00 : 3[3] -> 0[0] via direct shared memory"), "nccl_connections", conn(0, None, 3, 0, None, "SHM")),
    ("2.4", I("Ring 00 : 7 -> 0 [receive] via NET/IB/0"), "nccl_connections",
     conn(0, None, 7, 0, "receive", "NET", "IB", 0, src_dev=None)),
    ("2.4", I("Ring 01 : 3 -> 4 [send] via NET/IB/1/GDRDMA"), "nccl_connections",
     conn(1, None, 3, 4, "send", "NET", "IB", 1, gdr=True)),
    ("2.4", I("Ring 00 : 3 -> 4 [send] via NET/Socket/0"), "nccl_connections", conn(0, None, 3, 4, "send", "NET", "Socket", 0)),
    ("2.5", I("Ring 02 : 1[3e000] -> 2[40000] via P2P/IPC"), "nccl_connections",
     conn(2, None, 1, 2, None, "P2P", src_dev="3e000", dst_dev="40000")),
    ("2.6", I("Ring 00 : 0[1b0] -> 1[1c0] via direct shared memory"), "nccl_connections",
     conn(0, None, 0, 1, None, "SHM", src_dev="1b0")),
    ("2.6", I("Ring 00 : 15[db000] -> 0[1b000] [receive] via NET/IB/2/GDRDMA"), "nccl_connections",
     conn(0, None, 15, 0, "receive", "NET", "IB", 2, gdr=True, src_dev="db000")),
    ("2.7", I("Channel 00 : 0[1a000] -> 1[1b000] via P2P/IPC"), "nccl_connections",
     conn(0, None, 0, 1, None, "P2P", word="Channel", src_dev="1a000")),
    ("2.7", I("Channel 01 : 1[1b000] -> 2[3d000] via P2P/direct pointer"), "nccl_connections",
     conn(1, None, 1, 2, None, "P2P")),
    ("2.9", I("Channel 02 : 5[3d000] -> 6[3e000] via P2P/indirect/4[3b000]"), "nccl_connections",
     conn(2, None, 5, 6, None, "P2P", indirect_via=4)),
    ("2.13", I("Channel 03 : 2[3d000] -> 3[3e000] via P2P/IPC/read"), "nccl_connections",
     conn(3, None, 2, 3, None, "P2P", read=True)),
    ("2.7", I("Channel 04 : 4[31000] -> 10[ca000] [send] via NET/Socket/0"), "nccl_connections",
     conn(4, None, 4, 10, "send", "NET", "Socket", 0)),
    ("2.9", I("Channel 00 : 4[cb000] -> 6[e000] [receive] via NET/IB/0/GDRDMA"), "nccl_connections",
     conn(0, None, 4, 6, "receive", "NET", "IB", 0, gdr=True)),
    ("2.10", I("Channel 01 : 3[3e000] -> 4[88000] via direct shared memory"), "nccl_connections",
     conn(1, None, 3, 4, None, "SHM")),
    ("2.12", I("Channel 00/0 : 8[18000] -> 7[b3000] [receive] via NET/IB/3/GDRDMA"), "nccl_connections",
     conn(0, 0, 8, 7, "receive", "NET", "IB", 3, gdr=True)),
    ("2.12", I("Channel 01/0 : 7[b3000] -> 8[18000] [send] via NET/IB/3(4)/GDRDMA"), "nccl_connections",
     conn(1, 0, 7, 8, "send", "NET", "IB", 3, gdr=True, pxn_via=4)),
    ("2.14", I("Channel 02/1 : 7[b3000] -> 9[1a000] [send] via NET/IB/1/GDRDMA/Shared"), "nccl_connections",
     conn(2, 1, 7, 9, "send", "NET", "IB", 1, gdr=True, shared=True, phase="p2p")),
    ("2.15", I("Channel 00/1 : 7[b3000] -> 8[18000] [send] via NET/IB/3(4)/GDRDMA/Shared"), "nccl_connections",
     conn(0, 1, 7, 8, "send", "NET", "IB", 3, gdr=True, shared=True, pxn_via=4, phase="p2p")),
    ("2.13", I("Channel 05 : 6[b3000] -> 7[b4000] via SHM/direct/direct"), "nccl_connections",
     conn(5, None, 6, 7, None, "SHM", src_dev="b3000")),
    ("2.15", I("Channel 03/1 : 2[3d000] -> 3[3e000] via P2P/IPC/read"), "nccl_connections",
     conn(3, 1, 2, 3, None, "P2P", read=True, src_dev="3d000", phase="p2p")),
    ("2.17", I("Channel 06/0 : 1[1b000] -> 2[3d000] via P2P/direct pointer"), "nccl_connections",
     conn(6, 0, 1, 2, None, "P2P", src_dev="1b000")),
    ("2.19", I("Channel 03/0 : 2[2] -> 3[3] via P2P/CUMEM/read"), "nccl_connections",
     conn(3, 0, 2, 3, None, "P2P", read=True, src_dev="2", dst_dev="3")),
    ("2.21", I("Channel 00/0 : 2[2] -> 3[3] via P2P/direct pointer/read"), "nccl_connections",
     conn(0, 0, 2, 3, None, "P2P", read=True)),
    ("2.22", I("Channel 08/1 : 7[7] -> 0[0] via P2P/indirect/4[4]"), "nccl_connections",
     conn(8, 1, 7, 0, None, "P2P", indirect_via=4, phase="p2p")),
    ("2.25", I("Channel 04/0 : 1[1] -> 2[2] via P2P/MNNVL"), "nccl_connections", conn(4, 0, 1, 2, None, "P2P")),
    ("2.25", I("Channel 06/0 : 4[4] -> 5[5] via P2P/CUMEM/CE"), "nccl_connections",
     conn(6, 0, 4, 5, None, "P2P", copy_engine=True)),
    ("2.20", I("Channel 01/0 : 0[0] -> 1[1] via P2P/IPC/CE"), "nccl_connections",
     conn(1, 0, 0, 1, None, "P2P", copy_engine=True, read=False)),
    ("2.22", I("Channel 07 : 2[6] -> 3[7] via SHM/direct/direct"), "nccl_connections",
     conn(7, None, 2, 3, None, "SHM", src_dev="6", dst_dev="7")),
    ("2.30", I("Channel 07 : 2[6] -> 3[7] via SHM/direct"), "nccl_connections", conn(7, None, 2, 3, None, "SHM")),
    ("2.20", I("Channel 00/1 : 1[2] -> 0[2] [send] via NET/AWS Libfabric/1/GDRDMA/Shared"), "nccl_connections",
     conn(0, 1, 1, 0, "send", "NET", "AWS Libfabric", 1, gdr=True, shared=True, phase="p2p")),
    ("2.18", I("Channel 02/0 : 9[1] -> 0[0] [receive] via NET/IBext_v8/1/GDRDMA"), "nccl_connections",
     conn(2, 0, 9, 0, "receive", "NET", "IBext_v8", 1, gdr=True)),
    ("2.26", I("Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA(PCI)"), "nccl_connections",
     conn(0, 0, 0, 8, "send", "NET", "IB", 0, gdr=True, gdr_mode="PCI")),
    ("2.27", I("Channel 05/1 : 0[0] -> 9[1] [send] via NET/IB/2/GDRDMA(PCI)/Shared"), "nccl_connections",
     conn(5, 1, 0, 9, "send", "NET", "IB", 2, gdr=True, shared=True, gdr_mode="PCI")),
    ("2.20", I("Channel 03/0 : 15[7] -> 16[0] [send] via NET/IB/0(6)/GDRDMA"), "nccl_connections",
     conn(3, 0, 15, 16, "send", "NET", "IB", 0, gdr=True, pxn_via=6)),
    ("2.19", I("Channel 01/0 : 3[3] -> 11[3] [send] via NET/Socket/1"), "nccl_connections",
     conn(1, 0, 3, 11, "send", "NET", "Socket", 1)),
    ("2.21", I("Channel 01/1 : 3[3] -> 11[3] [receive] via NET/IB/1/Shared"), "nccl_connections",
     conn(1, 1, 3, 11, "receive", "NET", "IB", 1, shared=True)),
    ("2.22", I("CollNet 00/0 : 3 [send] via COLLNET/SHARP/0/GDRDMA"), "nccl_connections",
     conn(0, 0, 3, None, "send", "COLLNET", "SHARP", 0, gdr=True)),
    ("2.22", I("CollNet 01/1 : 3 [receive] via COLLNET/SHARP/1"), "nccl_connections",
     conn(1, 1, 3, None, "receive", "COLLNET", "SHARP", 1)),
    phase_case(0, "ring"), phase_case(1, "ring"), phase_case(2, "ring"), phase_case(4, "tree"),
    phase_case(5, "tree"), phase_case(8, "tree"), phase_case(10, "p2p"),
    ("2.24", Block(tuple(PHASE_BLOCK), 3), "nccl_info", {"kind": "connected", "key": "Connected all rings"}),
    ("2.10", ctx(I("Channel 00 : 0[1a000] -> 1[1b000] via P2P/IPC"),
                 after=[I("Channel 00 : 1[1b000] -> 0[1a000] via P2P/IPC"), I("Connected all rings"),
                        I("Channel 01 : 0[1a000] -> 2[3d000] via P2P/IPC"), I("Connected all trees")]),
     "nccl_connections", {"phase": "ring"}),
    ("2.10", Block((I("Channel 00 : 0[1a000] -> 1[1b000] via P2P/IPC"), I("Connected all rings"),
                    I("Channel 01 : 0[1a000] -> 2[3d000] via P2P/IPC"), I("Connected all trees")), 2),
     "nccl_connections", {"phase": "tree"}),
    ("2.7", I("Could not enable P2P between dev 1(=1b000) and dev 0(=1a000)"), "events", {"kind": "p2p_unavailable"}),
    ("2.4", I("peer query failed between dev 0(=0) and dev 1(=1)"), "events", {"kind": "p2p_unavailable"}),
    ("2.12", I("P2P is disabled between connected GPUs 1 and 0. You can repress this message with NCCL_IGNORE_DISABLED_P2P=1."),
     "events", {"kind": "p2p_unavailable"}),
    ("2.22", I("P2P not supported between GPU0 and GPU1"), "nccl_lines", {"kind": "p2p_unavailable"}),
    ("2.20", I("NVLS comm 0x55e1 headRank 0 nHeads 4 buffSize 1048576 memSize 2097152 nvlsPerRankSize 201326592 nvlsTotalSize 805306368"),
     "nccl_lines", {"kind": "nvls_other"}),

    # ---- section 3.8: environment --------------------------------------------------------------
    ("2.18", I("NCCL_IB_TIMEOUT set by environment to 18."), "nccl_env", {"key": "NCCL_IB_TIMEOUT", "value": "18"}),
    ("2.8", I("NCCL_BUFFSIZE set by environment to 8388608."), "nccl_env", {"key": "NCCL_BUFFSIZE", "value": "8388608"}),
    ("2.21", I("NCCL_IB_GID_INDEX set by environment to -1."), "nccl_env", {"key": "NCCL_IB_GID_INDEX", "value": "-1"}),
    ("2.18", I("NCCL_SOCKET_IFNAME set by environment to eth0"), "nccl_env", {"key": "NCCL_SOCKET_IFNAME", "value": "eth0"}),
    ("2.18", I("NCCL_P2P_LEVEL set by environment to LOC"), "nccl_env", {"key": "NCCL_P2P_LEVEL", "value": "LOC"}),
    ("2.12", I("NCCL_P2P_DISABLE set by environment to 1"), "nccl_env", {"key": "NCCL_P2P_DISABLE", "value": "1"}),
    ("2.27", I("NCCL_COLLNET_ENABLE set by environment to 1."), "nccl_env", {"key": "NCCL_COLLNET_ENABLE", "value": "1"}),
    ("2.16", I("NCCL_PROTO set by environment to ^LL128"), "nccl_env", {"key": "NCCL_PROTO", "value": "^LL128"}),
    ("2.24", I("NCCL_ALGO set by environment to allreduce:tree,ring"), "nccl_env",
     {"key": "NCCL_ALGO", "value": "allreduce:tree,ring"}),
    ("2.24", I("NCCL_PROTO set by environment to LL,Simple;allreduce:^LL"), "nccl_env",
     {"key": "NCCL_PROTO", "value": "LL,Simple;allreduce:^LL"}),
    ("2.12", I("NCCL_TOPO_FILE set by environment to /opt/microsoft/ndv5-topo.xml"), "nccl_env",
     {"key": "NCCL_TOPO_FILE", "value": "/opt/microsoft/ndv5-topo.xml"}),
    ("2.12", I("NCCL_IB_HCA set to mlx5_0:1,mlx5_1:1"), "nccl_env", {"key": "NCCL_IB_HCA", "value": "mlx5_0:1,mlx5_1:1"}),
    ("2.18", I("NCCL_SOCKET_IFNAME set to =eth0"), "nccl_env", {"key": "NCCL_SOCKET_IFNAME", "value": "=eth0"}),
    ("2.18", I("Invalid value 20x for NCCL_IB_TIMEOUT, using default 18."), "nccl_env",
     {"key": "NCCL_IB_TIMEOUT", "value": "20x", "default": "18"}),

    # ---- section 3.9: COLL trace ---------------------------------------------------------------
    ("2.10", I("AllReduce: opCount 1a sendbuff 0x10048f82700 recvbuff 0x10048f82800 count 64 datatype 7 op 0 root 0 comm 0x7f0c741162f0 [nranks=2] stream 0x7f0c74002f00", "gpu1", 13135, 13922, 0),
     "collectives", {"op": "AllReduce", "op_count": 26, "count": 64, "datatype": "float32", "red_op": "sum", "root": 0,
                     "comm": "0x7f0c741162f0", "nranks": 2, "bytes": 256, "host": "gpu1", "tid": 13922}),
    ("2.18", I("AllReduce: opCount 12c8 sendbuff 0x7f2a10000000 recvbuff 0x7f2a10000000 count 268435456 datatype 9 op 0 root 0 comm 0x55d0c0a1b2c0 [nranks=16] stream 0x55d0c0000a10"),
     "collectives", {"op_count": 4808, "count": 268435456, "datatype": "bfloat16", "bytes": 536870912}),
    ("2.12", I("Send: opCount 3 sendbuff 0x7f2a10000000 recvbuff (nil) count 4096 datatype 9 op 0 root 5 comm 0x55d0c0a1b2c0 [nranks=16] stream 0x55d0c0000a10"),
     "collectives", {"op": "Send", "op_count": 3, "root": 5, "recvbuff": "(nil)", "datatype": "bfloat16", "bytes": 8192}),
    ("2.12", I("Recv: opCount 3 sendbuff (nil) recvbuff 0x7f2a20000000 count 4096 datatype 9 op 0 root 4 comm 0x55d0c0a1b2c0 [nranks=16] stream 0x55d0c0000a10"),
     "collectives", {"op": "Recv", "root": 4, "sendbuff": "(nil)", "recvbuff": "0x7f2a20000000"}),
    ("2.7", I("Broadcast: opCount 0 sendbuff 0x7f00 recvbuff 0x7f00 count 1024 datatype 0 op 0 root 3 comm 0x55e0 [nranks=8] stream 0x55f0"),
     "collectives", {"op": "Broadcast", "op_count": 0, "datatype": "int8", "root": 3, "bytes": 1024}),
    ("2.10", I("ReduceScatter: opCount ff sendbuff 0x7f00 recvbuff 0x7f80 count 2048 datatype 6 op 4 root 0 comm 0x55e0 [nranks=8] stream 0x55f0"),
     "collectives", {"op": "ReduceScatter", "op_count": 255, "datatype": "float16", "red_op": "avg", "bytes": 4096}),
    ("2.8", I("Reduce: opCount 10 sendbuff 0x7f00 recvbuff 0x7f80 count 100 datatype 8 op 2 root 1 comm 0x55e0 [nranks=4] stream 0x55f0"),
     "collectives", {"op": "Reduce", "op_count": 16, "datatype": "float64", "red_op": "max", "root": 1, "bytes": 800}),
    ("2.8", I("AllReduce: opCount 11 sendbuff 0x7f00 recvbuff 0x7f80 count 10 datatype 4 op 3 root 0 comm 0x55e0 [nranks=4] stream 0x55f0"),
     "collectives", {"datatype": "int64", "red_op": "min", "bytes": 80}),
    ("2.8", I("AllReduce: opCount 12 sendbuff 0x7f00 recvbuff 0x7f80 count 10 datatype 3 op 1 root 0 comm 0x55e0 [nranks=4] stream 0x55f0"),
     "collectives", {"datatype": "uint32", "red_op": "prod", "bytes": 40}),
    ("2.24", I("AllGather: opCount 2b sendbuff 0x7f00 recvbuff 0x7f80 count 4096 datatype 10 op 0 root 0 comm 0x55e0 [nranks=8] stream 0x55f0"),
     "collectives", {"op": "AllGather", "op_count": 43, "datatype": "float8e4m3", "bytes": 4096}),
    ("2.25", I("AllGather: opCount 2c sendbuff 0x7f00 recvbuff 0x7f80 count 4096 datatype 11 op 0 root 0 comm 0x55e0 [nranks=8] stream 0x55f0"),
     "collectives", {"datatype": "float8e5m2", "op_count": 44}),
    ("2.28", I("AlltoAll: opCount 5 sendbuff 0x7f00 recvbuff 0x7f80 count 512 datatype 2 op 0 root 0 comm 0x55e0 [nranks=8] stream 0x55f0"),
     "collectives", {"op": "AlltoAll", "datatype": "int32", "bytes": 2048, "nranks": 8}),
    ("2.29", I("PutSignal: opCount 6 sendbuff 0x7f00 recvbuff (nil) count 512 datatype 1 op 0 root 2 comm 0x55e0 [nranks=8] stream 0x55f0"),
     "collectives", {"op": "PutSignal", "datatype": "uint8", "root": 2}),

    # ---- section 3.10: error back-traces -------------------------------------------------------
    ("2.12", I("transport/net_ib.cc:368 -> 2"), "events", {"kind": "nccl_error_chain", "detail": Contains("system error")}),
    ("2.12", I("misc/socket.cc:484 -> 2 (Connection refused)"), "events",
     {"kind": "nccl_error_chain", "detail": Contains("system error")}),
    ("2.12", I("group.cc:64 -> 3 [Async thread]"), "events", {"kind": "nccl_error_chain", "detail": Contains("internal error")}),
    ("2.18", I("proxy.cc:1234 -> 2 [Proxy Thread]"), "events", {"kind": "nccl_error_chain", "detail": Contains("system error")}),
    ("2.19", I("proxy.cc:1523 -> 6 [Progress Thread]"), "events", {"kind": "nccl_error_chain", "detail": Contains("remote error")}),
    ("2.28", I("transport/net_ib.cc:2101 -> 6 [GIN Progress Thread]"), "events",
     {"kind": "nccl_error_chain", "detail": Contains("remote error")}),
    ("2.20", I("misc/socket.cc:64 -> 3 [Service thread]"), "events", {"kind": "nccl_error_chain", "detail": Contains("internal error")}),
    ("2.30", I("init.cc:1800 (ncclCommInitRankFunc) -> 5"), "events",
     {"kind": "nccl_error_chain", "detail": Contains("invalid usage")}),
    ("2.21", I("enqueue.cc:1700 -> 1"), "events", {"kind": "nccl_error_chain", "detail": Contains("unhandled cuda error")}),
    ("2.12", I("include/alloc.h:178 -> 4"), "events", {"kind": "nccl_error_chain", "detail": Contains("invalid argument")}),
    ("2.4", I("init.cu:1032 -> 2"), "events", {"kind": "nccl_error_chain", "detail": Contains("system error")}),

    # ---- section 3.11: WARN catalogue -> events.error_class -----------------------------------
    ("2.8", W("NET/IB : Got completion with error 12, opcode 1, len 0, vendor err 129", src="transport/net_ib.cc:798"),
     "events", {"error_class": "ib_completion_error", "detail": Contains("status 12")}),
    ("2.15", W("NET/IB : Got completion from peer 10.1.1.2<39816> with error 13, opcode 32680, len 0, vendor err 129",
               src="transport/net_ib.cc:1150"), "events", {"error_class": "ib_completion_error", "detail": Contains("status 13")}),
    ("2.21", W("NET/IB : Got completion from peer 10.1.1.2<39816> with status=10 opcode=0 len=0 vendor err 129 (Send) "
               "localGid ::ffff:10.1.1.1 remoteGids::ffff:10.1.1.2", src="transport/net_ib.cc:1697"),
     "events", {"error_class": "ib_completion_error", "detail": Contains("status 10")}),
    ("2.23", W("NET/IB: Got completion from peer 10.1.1.2<39816> with status=5 opcode=129 len=0 vendor err 244 (Recv) "
               "localGid ::ffff:10.1.1.1 remoteGids::ffff:10.1.1.2 hca mlx5_3", src="transport/net_ib.cc:1947"),
     "events", {"error_class": "ib_completion_error", "detail": Contains("status 5")}),
    ("2.30", W("NET/IB: Got completion from peer 10.1.1.2<39816> with status=IBV_WC_RNR_RETRY_EXC_ERR(13) "
               "opcode=IBV_WC_SEND(0) vendor_err=129  localGid ::ffff:10.1.1.1 remoteGids::ffff:10.1.1.2 hca mlx5_3",
               src="transport/net_ib.cc:2310", fn="ncclIbCompletionEventProcess", ts="2026-01-12 08:01:02"),
     "events", {"error_class": "ib_completion_error"}),
    ("2.30", W("NET/IB: Got completion from peer 10.1.1.2<39816> with status=IBV_WC_RNR_RETRY_EXC_ERR(13) "
                    "opcode=IBV_WC_SEND(0) vendor_err=129  localGid ::ffff:10.1.1.1 remoteGids::ffff:10.1.1.2 hca mlx5_3",
                    src="transport/net_ib.cc:2310", fn="ncclIbCompletionEventProcess", ts="2026-01-12 08:01:02"),
          "events", {"detail": Contains("status 13")}),
    ("2.20", W("Call to ibv_modify_qp failed with error Network is unreachable", src="misc/ibvwrap.cc:295"), "events",
     {"error_class": "ib_modify_qp"}),
    ("2.22", W("NET/IB : Attempted to connect incompatible devices: [0]mlx5_0:1/IB and [1]mlx5_2:1/RoCE. Try selecting "
               "NICs of only one link type using NCCL_IB_HCA", src="transport/net_ib.cc:1010"), "events",
     {"error_class": "ib_incompatible"}),
    ("2.14", W("NET/IB : req 3/4 tag 7 peer 10.1.1.2<39816> collective mismatch error, local size 4194304 remote size 524288",
               src="transport/net_ib.cc:1055"), "events", {"error_class": "size_mismatch"}),
    ("2.8", W("NET/Socket : message truncated : receiving 4194304 bytes instead of 524288", src="transport/net_socket.cc:412"),
     "events", {"error_class": "size_mismatch"}),
    ("2.23", W("NET/IB : req 0/1 tag 3 peer 10.1.1.2<39816> posted incorrect receive info: size 4194304 addr 0x7f00 rkey 77",
               src="transport/net_ib.cc:1380"), "events", {"error_class": "size_mismatch"}),
    ("2.18", W("socketProgress: Connection closed by remote peer gpu-a08<50123>", src="misc/socket.cc:47"), "events",
     {"error_class": "peer_closed"}),
    ("2.10", W("Net : Connection closed by remote peer 10.20.0.8<50123>", src="include/socket.h:421"), "events",
     {"error_class": "peer_closed"}),
    ("2.18", W("socketProgressOpt: Call to recv from 10.20.0.8<50123> failed : Connection reset by peer",
               src="misc/socket.cc:588"), "events", {"error_class": "peer_closed"}),
    ("2.12", W("Cuda failure 'out of memory'", src="include/alloc.h:178"), "events", {"error_class": "out_of_memory"}),
    ("2.12", W("Failed to CUDA calloc 1048576 bytes", src="include/alloc.h:120"), "events", {"error_class": "out_of_memory"}),
    ("2.20", W("Error while creating shared memory segment /dev/shm/nccl-Xk2Pq1 (size 9637888)", src="misc/shmutils.cc:67"),
     "events", {"error_class": "shm_failed"}),
    ("2.12", W("Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1b000", src="init.cc:721"), "events",
     {"error_class": "duplicate_gpu"}),
    ("2.18", W("Error : no algorithm/protocol available", src="enqueue.cc:1138"), "events", {"error_class": "no_algorithm"}),
    ("2.26", W("Error : no algorithm/protocol available for function Broadcast with datatype ncclInt8. NCCL_ALGO was set to tree.",
               src="enqueue.cc:1656", ts="2025-06-01 12:00:00"), "events", {"error_class": "no_algorithm"}),
    ("2.30", W("No algorithm/protocol available for function AllGather with datatype ncclBfloat16.", src="enqueue.cc:1701",
               fn="topoGetAlgoInfo", ts="2026-02-02 02:02:02"), "events", {"error_class": "no_algorithm"}),
    ("2.5", W("Mismatched collective detected, please check your collective calls at and around rank 3.",
              src="enqueue.cc:340"), "events", {"error_class": "collective_mismatch"}),
    ("2.12", W("Error : ring 3 does not loop back to start (2 != 0)", src="graph/rings.cc:42"), "events",
     {"error_class": "ring_error"}),
    ("2.30", W("Detected mixed local Net device counts across ranks (min 4, max 8). Set NCCL_IGNORE_NET_MISMATCH=1 to continue.",
               src="init.cc:1402", fn="initTransportsRank", ts="2026-02-02 02:02:02"), "events",
     {"error_class": "net_device_mismatch"}),
    ("2.24", W("All entries except the first must have a prefix: \"ring;allreduce:tree\"", src="graph/tuning.cc:80",
               ), "events", {"error_class": "env_invalid"}),

    # ---- section 3.14.2: per-collective decision lines -----------------------------------------
    ("2.21", I("1048576 Bytes -> Algo 1 proto 2 time 31.452000"), "nccl_tuning",
     {"kind": "decision_numeric", "func": None, "bytes": 1048576, "algo": "1", "proto": "2", "time_us": 31.452}),
    ("2.23", I("AllReduce: 65536 Bytes -> Algo 0 proto 0 time 19.840000"), "nccl_tuning",
     {"func": "AllReduce", "bytes": 65536, "algo": "0", "proto": "0", "time_us": 19.84}),
    ("2.24", I("AllReduce: 67108864 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..31}"), "nccl_tuning",
     {"kind": "decision", "func": "AllReduce", "bytes": 67108864, "algo": "RING", "proto": "SIMPLE", "ch_lo": 0,
      "ch_hi": 31, "time_us": None}),
    ("2.25", I("AllGather: 4194304 Bytes -> Algo NVLS proto SIMPLE channel{Lo..Hi}={0..15}"), "nccl_tuning",
     {"func": "AllGather", "algo": "NVLS", "proto": "SIMPLE", "ch_lo": 0, "ch_hi": 15}),
    ("2.26", I("ReduceScatter: 1024 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}"), "nccl_tuning",
     {"func": "ReduceScatter", "bytes": 1024, "algo": "RING", "proto": "LL", "ch_lo": 0, "ch_hi": 0}),
    ("2.26", I("AllReduce: 2097152 Bytes -> Algo COLLNET_DIRECT proto SIMPLE channel{Lo..Hi}={4..7}"), "nccl_tuning",
     {"algo": "COLLNET_DIRECT", "ch_lo": 4, "ch_hi": 7}),
    ("2.28", I("AllReduce: 524288 Bytes -> Algo NVLS_TREE proto LL128 channel{Lo..Hi}={8..23}"), "nccl_tuning",
     {"algo": "NVLS_TREE", "proto": "LL128", "ch_lo": 8, "ch_hi": 23}),
    ("2.27", I("AllReduce [Symmetric]: 262144 Bytes -> Kernel AllReduce_AGxLLMC_R nchannels 8 nthreads 512", dev=3), "nccl_tuning",
     {"kind": "decision_symmetric", "func": "AllReduce", "bytes": 262144, "kernel": "AllReduce_AGxLLMC_R",
      "nchannels": 8, "nthreads": 512, "nworks": None}),
    ("2.28", I("AllReduce [Symmetric]: 8388608 Bytes -> Kernel AllReduce_RSxLDMC_AGxSTMC nchannels 16 nthreads 512 nWorks 1"),
     "nccl_tuning", {"kernel": "AllReduce_RSxLDMC_AGxSTMC", "nchannels": 16, "nthreads": 512, "nworks": 1}),
    ("2.29", I("AllGather [Copy Engine]: 16777216 Bytes -> cudaMemcpy; CE synchronization with NVLS"), "nccl_tuning",
     {"kind": "decision_ce", "func": "AllGather", "bytes": 16777216, "detail": Contains("cudaMemcpy")}),
    ("2.29", I("AllGather [Copy Engine]: 1048576 Bytes -> cudaMemcpy"), "nccl_tuning",
     {"func": "AllGather", "bytes": 1048576, "detail": "cudaMemcpy"}),
    ("2.30", I("AllReduce [Hierarchical CE]: 33554432 Bytes -> RMA proxy + CE"), "nccl_tuning",
     {"func": "AllReduce", "bytes": 33554432, "detail": Contains("RMA proxy")}),
    ("2.30", I("AllReduce: tuner chunk size 4194304 exceeds buffer max 2097152, clamping"), "nccl_tuning",
     {"kind": "tuner_chunk", "func": "AllReduce"}),

    # ---- section 3.14.3: the tuning tables -----------------------------------------------------
    ("2.5", Block(tuple(T25), 5), "nccl_tuning", tcell("AllReduce", ["Tree", "Ring"], "Ring", "Simple", threads=False)),
    ("2.5", Block(tuple(T25), 5), "nccl_tuning", tcell("AllReduce", ["Tree", "Ring"], "Tree", "LL", threads=False)),
    ("2.5", Block(tuple(T25), 1), "nccl_tuning",
     {"_where": {"algo": "Tree", "proto": "Simple"}, "_nrows": 1, "func": "Broadcast", "latency_us": 0.0, "bandwidth_gbs": 0.0}),
    ("2.5", Block(tuple(T25), 3), "nccl_tuning", tcell("AllGather", ["Tree", "Ring"], "Ring", "LL128", threads=False)),
    ("2.5", Block(tuple(T25), 5), "nccl_tuning", {"_nrows": 6}),
    ("2.9", Block(tuple(T26), 6), "nccl_tuning", tcell("AllReduce", ALGOS_26, "CollNet", "Simple")),
    ("2.9", Block(tuple(T26), 2), "nccl_tuning", tcell("Broadcast", ALGOS_26, "Ring", "LL128")),
    ("2.9", Block(tuple(T26), 6), "nccl_tuning", {"_nrows": 9}),
    ("2.15", Block(tuple(T214), 5), "nccl_tuning", tcell("ReduceScatter", ALGOS_214, "CollNetChain", "LL")),
    ("2.17", Block(tuple(T217), 6), "nccl_tuning", tcell("AllReduce", ALGOS_217, "NVLS", "Simple")),
    ("2.17", Block(tuple(T217), 4), "nccl_tuning", tcell("AllGather", ALGOS_217, "CollNetDirect", "LL128")),
    ("2.17", Block(tuple(T217), 6), "nccl_tuning", {"_nrows": 15}),
    ("2.18", Block(tuple(T218), row_of(0, "AllReduce")), "nccl_tuning", tcell("AllReduce", ALGOS_218, "Ring", "Simple")),
    ("2.18", Block(tuple(T218), row_of(0, "Reduce")), "nccl_tuning", tcell("Reduce", ALGOS_218, "CollNetDirect", "LL")),
    ("2.18", Block(tuple(T218), row_of(1, "AllReduce")), "nccl_tuning", tcell("AllReduce", ALGOS_218, "NVLS", "Simple")),
    ("2.18", Block(tuple(T218), row_of(1, "AllGather")), "nccl_tuning", tcell("AllGather", ALGOS_218, "NVLSTree", "LL128")),
    ("2.18", Block(tuple(T218), row_of(1, "AllReduce")), "nccl_tuning", {"_nrows": 9}),
    ("2.23", Block(tuple(T223), row_of(2, "AllGather")), "nccl_tuning", tcell("AllGather", ALGOS_223, "PAT", "Simple")),
    ("2.23", Block(tuple(T223), row_of(2, "ReduceScatter")), "nccl_tuning", tcell("ReduceScatter", ALGOS_223, "PAT", "LL")),
    ("2.23", Block(tuple(T223), row_of(2, "AllGather")), "nccl_tuning", {"_nrows": 3}),
    ("2.23", Block(tuple(T223), row_of(1, "Broadcast")), "nccl_tuning", tcell("Broadcast", ALGOS_223, "CollNetChain", "Simple")),
    # a line of another thread and another process in the middle of the table (section 3.14.3 "Parsing")
    ("2.18", Block(tuple(T218[:5] + [I("Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM", "tune-218", 303, 355, 0),
                                     I("Latency/AlgBw | Tree/    LL |", "other-host", 999, 999, 0)] + T218[5:]),
                   row_of(1, "AllReduce") + 2), "nccl_tuning", tcell("AllReduce", ALGOS_218, "NVLSTree", "Simple")),
    ("2.18", Block(tuple(T218), 0), "nccl_lines", {"kind": "table_algorithms"}),
    ("2.18", Block(tuple(T218), 1), "nccl_lines", {"kind": "table_protocols"}),
    ("2.18", Block(tuple(T218), 2), "nccl_lines", {"kind": "table_max_threads"}),
    ("2.9", Block(tuple(T26), 0), "nccl_lines", {"kind": "table_header"}),
    ("2.9", Block(tuple(T26), 4), "nccl_lines", {"kind": "table_row"}),

    # ---- section 3.14.4: Func/Proto/Algo matrix and availability lines -------------------------
    ("2.24", Block(tuple(MATRIX), 6), "nccl_tuning",
     {"_where": {"algo": "CollNetDirect"}, "_nrows": 1, "func": "AllReduce", "enabled": 0}),
    ("2.24", Block(tuple(MATRIX), 6), "nccl_tuning", {"_where": {"algo": "Ring"}, "_nrows": 1, "func": "AllReduce", "enabled": 1}),
    ("2.24", Block(tuple(MATRIX), 6), "nccl_tuning", {"_where": {"proto": "LL128"}, "_nrows": 1, "enabled": 2}),
    ("2.24", Block(tuple(MATRIX), 2), "nccl_tuning", {"_where": {"algo": "PAT"}, "_nrows": 1, "func": "Broadcast", "enabled": 1}),
    ("2.25", Block(tuple(MATRIX_PROTO), 3), "nccl_tuning", {"_where": {"proto": "LL"}, "_nrows": 1, "func": "Reduce", "enabled": 0}),
    ("2.25", Block(tuple(MATRIX_PROTO), 6), "nccl_tuning",
     {"_where": {"proto": "LL"}, "_nrows": 1, "func": "AllReduce", "enabled": 1}),
    ("2.25", Block(tuple(MATRIX_PROTO), 4), "nccl_tuning", {"_where": {"proto": "Simple"}, "_nrows": 1, "enabled": 1}),
    ("2.24", Block(tuple(MATRIX), 6), "nccl_lines", {"kind": "matrix"}),
    ("2.24", Block(tuple(MATRIX), 0), "nccl_lines", {"kind": "matrix"}),
    ("2.20", I("NVLS multicast support is available on dev 3", dev=3), "nccl_tuning",
     {"kind": "nvls_support", "dev": 3, "nchannels": None, "detail": Lacks("not")}),
    ("2.26", I("NVLS multicast support is not available on dev 0", dev=0), "nccl_tuning",
     {"kind": "nvls_support", "dev": 0, "detail": Contains("not")}),
    ("2.28", I("NVLS multicast support is available on dev 5 (NVLS_NCHANNELS 24)", dev=5), "nccl_tuning",
     {"dev": 5, "nchannels": 24, "detail": Lacks("not")}),
    ("2.30", I("NVLS tuning: nChannels 16 chunkSize 131072 treeMaxChunkSize 65536"), "nccl_lines", {"kind": "nvls_other"}),
    ("2.12", I("Communicator has 1 nodes which is less than CollNet node threshold 2, disabling CollNet"), "nccl_lines",
     {"kind": "collnet_state"}),
    ("2.12", I("rank 3 Connected CollNet"), "nccl_lines", {"kind": "collnet_state"}),
    ("2.22", I("Connected Collnet Chains 0/1/2/3"), "nccl_lines", {"kind": "collnet_state"}),
    ("2.24", I("CC Off, workFifoBytes 1048576", dev=0), "nccl_info", {"kind": "cc_mode", "value": "1048576", "detail": Contains("Off")}),
    ("2.22", I("CC Off, Multi-GPU CC Off, workFifoBytes 1048576", dev=0), "nccl_info", {"kind": "cc_mode", "value": "1048576"}),
    ("2.25", I("CC On, workFifoBytes 0", dev=0), "nccl_info", {"kind": "cc_mode", "value": "0", "detail": Contains("On")}),
    ("2.22", I("CPUs with mixed vendors were detected."), "nccl_lines", {"kind": "mixed_cpus"}),
    ("2.30", I("Local Net device counts across ranks: min 8 max 8"), "nccl_lines", {"kind": "net_counts"}),
    ("2.27", I("Disabling LL128 over all PxN connections (PXB and C2C). This ensures that no C2C link will be used by LL128."),
     "nccl_lines", {"kind": "ll128_off"}),
    ("2.28", I("TUNER/Plugin: Using internal tuner plugin."), "nccl_lines", {"kind": "plugin"}),

    # ---- other kinds of the reference --------------------------------------------------------
    ("2.18", I("Connected NVLS tree"), "nccl_info", {"kind": "connected", "key": "Connected NVLS tree"}),
    ("2.12", I("Allocated 9637892 bytes of shared memory in /dev/shm/nccl-Xk2Pq1"), "nccl_lines", {"kind": "alloc"}),
    ("2.12", I("channel.cc:40 Cuda Alloc Size 1536 pointer 0x7f1200000000"), "nccl_lines", {"kind": "alloc"}),
    ("2.19", I("[Proxy Service] Device 3 CPU core 21"), "nccl_lines", {"kind": "proxy"}),
    ("2.19", I("[Proxy Progress] Device 3 CPU core 22"), "nccl_lines", {"kind": "proxy"}),
    ("2.19", I("[Service thread] Connection closed by localRank 2"), "nccl_lines", {"kind": "service_thread"}),
    ("2.24", I("RAS client listening socket at ::1<28028>"), "nccl_lines", {"kind": "ras_info"}),
    ("2.10", I("Call to connect returned Connection refused, retrying"), "events", {"kind": "retry"}),
    ("2.24", I("socketStartConnect: connect to 10.1.1.2<4000> returned Connection refused, retrying (3/34) after sleep for 300 msec"),
     "events", {"kind": "retry"}),
    # ---- more probes across sections -----------------------------------------------------------
    ("2.12", "73e9f9f45158:6243:6442 [3] NCCL INFO Channel 00/0 : 3[3d000] -> 4[88000] [send] via NET/IB/0                   [22/1819]",
     "nccl_connections", {"host": "73e9f9f45158", "via": "NET/IB/0", **conn(0, 0, 3, 4, "send", "NET", "IB", 0)}),
    ("2.22", "<cluster_name>:924:924 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC", "nccl_connections",
     {"host": "<cluster_name>", "pid": 924, **conn(0, 0, 0, 1, None, "P2P")}),
    ("2.22", I("Bootstrap : Using eth0:xxx.xxx.xxx.xxx<0>"), "nccl_net", {"name": "eth0", "address": "xxx.xxx.xxx.xxx"}),
    ("2.25", I("Bootstrap: Using eth0:2001:db8::5<0>"), "nccl_net", {"name": "eth0", "address": "2001:db8::5", "port": 0}),
    ("2.10", I("Bootstrap : Using enp1s0f0.100:10.0.0.5<0>"), "nccl_net", {"name": "enp1s0f0.100", "address": "10.0.0.5"}),
    ("2.18", ctx(" 3: node03:38646:35599 [4] misc/socket.cc:538 NCCL WARN socketProgress: Connection closed by remote peer node04<33211>",
                 before=[" 3: "]),
     "events", {"host": "node03", "pid": 38646, "tid": 35599, "cuda_dev": 4, "error_class": "peer_closed"}),
    ("2.27", ctx("[1,3]<stdout>:[2025-03-14 10:22:07] node03:38646:35599 [4] misc/socket.cc:538 NCCL WARN socketProgress: "
                 "Connection closed by remote peer node04<33211>", before=["[1,3]<stdout>:"]),
     "events", {"host": "node03", "ts": dt.datetime(2025, 3, 14, 10, 22, 7), "error_class": "peer_closed"}),
    ("2.18", "NCCL version 2.18.5+cuda12.0", "nccl_lines", {"level": "VERSION", "kind": "version"}),
    ("2.23", W("Bootstrap Root : mismatch in info from procs, nranks 16 vs 8, nroots 1 vs 1, iroot 0 vs 0",
               src="bootstrap.cc:302"), "events", {"error_class": "bootstrap_mismatch"}),
    ("2.18", W("NET/Socket : No usable listening interface found", src="transport/net_socket.cc:80"), "events",
     {"error_class": "no_interface"}),
    ("2.15", I("NET/Plugin: Failed to find ncclNetPlugin_v6 symbol."), "nccl_lines", {"kind": "plugin"}),
    ("2.22", I("NET/Plugin: Plugin load returned 2 : libnccl-net.so: cannot open shared object file: No such file or directory : when loading libnccl-net.so"),
     "nccl_lines", {"kind": "plugin"}),
    ("2.27", I("Initialized NET plugin IB"), "nccl_lines", {"kind": "plugin"}),
    ("2.27", I("Assigned NET plugin IB to comm"), "nccl_lines", {"kind": "plugin"}),
    ("2.18", I("P2P plugin IBext_v8"), "nccl_lines", {"kind": "plugin"}),
    ("2.18", I("NET/OFI Setting provider_filter to efa"), "nccl_lines", {"kind": "ofi"}),
    ("2.19", I("Using tuner plugin: 'libnccl-tuner.so'"), "nccl_lines", {"kind": "plugin"}),
    ("2.20", I("Tuner: no plugin found 'libnccl-tuner.so', using default tuner instead."), "nccl_lines", {"kind": NOT_NULL}),
    ("2.23", I("TUNER/Plugin: Using tuner plugin example"), "nccl_lines", {"kind": "plugin"}),
    ("2.28", I("TUNER/Plugin: Using example (v4)"), "nccl_lines", {"kind": "plugin"}),
    ("2.19", I("NCCL_TUNER_PLUGIN set to libnccl-tuner-example.so"), "nccl_env",
     {"key": "NCCL_TUNER_PLUGIN", "value": "libnccl-tuner-example.so"}),
    ("2.12", I("NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_0:2/IB ; OOB ib0:10.1.1.1<0>"), "nccl_net",
     {"_where": {"index": 1}, "_nrows": 1, "name": "mlx5_0", "port": 2, "link": "IB"}),
    ("2.22", I("NET/IB : Using [0]mlx5_bond_0:1/RoCE [1]rocep1s0f0:1/RoCE [RO]; OOB bond0:10.1.1.1<0>"), "nccl_net",
     {"_where": {"index": 0}, "_nrows": 1, "name": "mlx5_bond_0", "link": "RoCE"}),
    ("2.21", I("ncclCommInitRank comm 0x563f00a1b000 rank 2 nranks 8 cudaDev 2 nvmlDev 2 busId 2a000 commId 0x7e1d44c0aa8b3f12 - Init COMPLETE", dev=2),
     "nccl_comms", {"api": "ncclCommInitRank", "rank": 2, "comm_id": "0x7e1d44c0aa8b3f12", "phase": "Init COMPLETE"}),
    ("2.23", I("ncclCommInitAll comm 0x5611 rank 1 nranks 8 cudaDev 1 nvmlDev 1 busId 1b000 commId 0x44ab - Init COMPLETE"),
     "nccl_comms", {"api": "ncclCommInitAll", "rank": 1, "nranks": 8, "comm_id": "0x44ab"}),
    ("2.6", I("Ring 01 : 1[3e000] -> 2[40000] via P2P/direct pointer"), "nccl_connections", conn(1, None, 1, 2, None, "P2P")),
    ("2.12", I("Channel 00 : 1[1b000] -> 2[3d000] via P2P/IPC"), "nccl_connections", conn(0, None, 1, 2, None, "P2P")),
    ("2.28", I("Channel 12/0 : 4[4] -> 12[4] [receive] via NET/IB/12/GDRDMA"), "nccl_connections",
     conn(12, 0, 4, 12, "receive", "NET", "IB", 12, gdr=True)),
    ("2.22", I("Channel 00/0 : 0[0] -> 8[0] [send] via NET/gIB/0/GDRDMA"), "nccl_connections",
     conn(0, 0, 0, 8, "send", "NET", "gIB", 0, gdr=True)),
    ("2.12", I("Broadcast: opCount 4 sendbuff 0x7f00 recvbuff 0x7f00 count 16 datatype 2 op 0 root 0 comm 0x55e0 [nranks=2] stream (nil)"),
     "collectives", {"op": "Broadcast", "stream": "(nil)", "bytes": 64}),
    ("2.24", W("NET/IB : mlx5_0:1 async fatal event: local catastrophic error", src="transport/net_ib.cc:120"), "events",
     {"error_class": "ib_async_event"}),
    ("2.12", W("NET/IB : Got async error event: port error", src="transport/net_ib.cc:121"), "events",
     {"error_class": "ib_async_event"}),
    ("2.18", W("Failed to open libibverbs.so[.1]", src="misc/ibvwrap.cc:47"), "events", {"error_class": "libibverbs_missing"}),
    ("2.18", W("socketFinalizeAccept: wrong type 3 != 4", src="misc/socket.cc:432"), "events", {"error_class": "socket_error"}),
    ("2.12", W("Call to bind failed : Cannot assign requested address", src="misc/socket.cc:276"), "events",
     {"error_class": "bind_failed"}),
    ("2.25", W("socketStartConnect: connect to 10.1.1.2<4000> returned Connection refused, exceeded error retry count after 35 attempts",
               src="misc/socket.cc:680"), "events", {"error_class": "socket_error"}),
    ("2.20", W("[Proxy Service 3] Failed to execute operation Connect from rank 5, retcode 6", src="proxy.cc:1498"), "events",
     {"error_class": "proxy_error"}),
    ("2.20", W("[Service thread] Error encountered progressing operation=Connect, res=3, closing connection", src="proxy.cc:1631"),
     "events", {"error_class": "proxy_error"}),
    ("2.22", W("Failed to bind NVLink SHARP (NVLS) Multicast memory of size 1073741824 : CUDA error 1 'invalid argument'.",
               src="transport/nvls.cc:132"), "events", {"error_class": "nvls_failed"}),
    ("2.24", W("MNNVL (cliqueSize 4) is available but not working on this system. Check the IMEX channel configuration.",
               src="transport/nvls.cc:70"), "events", {"error_class": "nvls_failed"}),
    ("2.18", W("Error: failed to extend /dev/shm/nccl-Xk2Pq1 to 9637888 bytes", src="misc/shmutils.cc:85"), "events",
     {"error_class": "shm_failed"}),
    ("2.12", W("Invalid rank requested : 9/8", src="init.cc:1302"), "events", {"error_class": "invalid_usage"}),
    ("2.22", W("communicator encountered a fatal error (detected in ncclIbAsyncThreadMain)", src="transport/net_ib.cc:95"),
     "events", {"error_class": "fatal_error"}),
    ("2.5", W("Your program may be hanging, this may be caused by a collective mismatch around rank 3. Please check your "
              "collective calls at and around this rank.", src="enqueue.cc:310"), "events", {"error_class": "collective_mismatch"}),
    ("2.12", W("Error : ring 3 does not contain rank 5", src="graph/rings.cc:52"), "events", {"error_class": "ring_error"}),
    ("2.8", W("NET/IB : collective mismatch error local size 4194304 remote 524288 addr 7f00 rkey 1234 seq 5/6",
              src="transport/net_ib.cc:870"), "events", {"error_class": "size_mismatch"}),
    ("2.11", W("NET/Socket : peer 10.0.0.12<48213> message truncated : receiving 4194304 bytes instead of 524288",
               src="transport/net_socket.cc:424"), "events", {"error_class": "size_mismatch"}),
    ("2.18", W("Failed to CUDA host alloc 1048576 bytes", src="include/alloc.h:40"), "events", {"error_class": "out_of_memory"}),
    ("2.20", W("Cuda failure 2 'out of memory'", src="include/alloc.h:212"), "events", {"error_class": "out_of_memory"}),
    ("2.22", W("NCCL_WORK_FIFO_BYTES=1000 is being ignored because it is not a power of 2.", src="init.cc:400"), "events",
     {"error_class": "env_invalid"}),
    ("2.24", W('Unrecognized element token "rign" when parsing "rign,tree"', src="graph/tuning.cc:95"), "events",
     {"error_class": "env_invalid"}),
    ("2.12", W("CollNet currently only supports up to 8 GPUs per node, disabling CollNet", src="init.cc:1010"), "events",
     {"error_class": "collnet"}),
    ("2.12", W("Cannot initialize CollNet, using point-to-point network instead", src="init.cc:1030"), "events",
     {"error_class": "collnet"}),
    ("2.24", I("RAS declaring peer 10.1.1.2<28028> as DEAD; rasDeadPeersHash 0x9a1c"), "nccl_lines", {"kind": "ras_info"}),
    ("2.19", I("[Proxy Service UDS] Device 3 CPU core 23"), "nccl_lines", {"kind": "proxy"}),
    ("2.22", I("CPUs with mixed architecture were detected."), "nccl_lines", {"kind": "mixed_cpus"}),
    ("2.30", I("Rank 3 has 4 local Net devices (max 8)."), "nccl_lines", {"kind": "net_counts"}),
    ("2.30", I("Rank 3: 8 CollNet devices"), "nccl_lines", {"kind": "net_counts"}),
    ("2.24", Block(tuple(MATRIX), 1), "nccl_lines", {"kind": "matrix"}),
    # lines cut at NCCL's 1024-byte buffer (section 1.1, pitfall 6.4): what was printed must still be read
    ("2.19", I(NICS_64)[:1023], "nccl_net", {"_where": {"name": "mlx5_51"}, "_nrows": 1, "index": 51, "link": "RoCE"}),
    ("2.21", I(TREES_64, "dgx-b200-03")[:1023], "nccl_trees",
          {"_where": {"channel": 51}, "_nrows": 1, "down0": 3, "me": 2, "up": 1}),
    ("2.21", I(TREES_64, "node7")[:1023], "nccl_trees", {"_where": {"channel": 51}, "_nrows": 1, "down0": 3, "me": 2, "up": 1}),
    # init hang (section 3.12): a process that stops in the middle of connecting. Its lines are still ring hops
    # (before `Connected all rings`) or tree hops (after it), even though the closing marker never comes.
    ("2.18", Block((I("Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM", "hung-a", 700, 760, 0),
                         I("Connected all rings", "hung-a", 700, 760, 0),
                         I("Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA", "hung-a", 700, 760, 0),
                         I("Connected all trees", "hung-a", 700, 760, 0),
                         I("Channel 00/0 : 8[0] -> 9[1] via P2P/CUMEM", "hung-b", 800, 860, 0)), 4),
          "nccl_connections", {"host": "hung-b", "phase": "ring"}),
    ("2.18", Block((I("Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM", "hung-a", 700, 760, 0),
                         I("Connected all rings", "hung-a", 700, 760, 0),
                         I("Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA", "hung-a", 700, 760, 0)), 2),
          "nccl_connections", {"host": "hung-a", "phase": "tree"}),
    # two communicators initialised one after the other by the same thread
    ("2.18", Block((I("Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM"), I("Connected all rings"),
                    I("Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM"), I("Connected all trees"),
                    I("Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct"), I("Connected all rings"),
                    I("Connected all trees")), 4),
     "nccl_connections", {"phase": "ring", "transport": "SHM"}),
    # the matrix with `srun --label` on every line, continuation rows included
    ("2.24", Block(tuple(f"0: {x}" for x in MATRIX), 6), "nccl_tuning",
     {"_where": {"algo": "NVLS"}, "_nrows": 1, "func": "AllReduce", "enabled": 0}),
    ("2.24", Block(tuple(f"0: {x}" for x in MATRIX), 2), "nccl_tuning",
     {"_where": {"proto": "LL128"}, "_nrows": 1, "func": "Broadcast", "enabled": 2}),
    ("2.24", I("Bootstrap: Using mlx5_0:1"), "nccl_net", {"kind": "bootstrap_if", "name": "mlx5_0"}),
    ("2.24", I("NCCL_OOB_NET_IFNAME set to mlx5_0"), "nccl_env", {"key": "NCCL_OOB_NET_IFNAME", "value": "mlx5_0"}),
    ("2.19", W("NET/IB : Got completion from peer 10.1.1.2<39816> with error 12, opcode 0, len 0, vendor err 129 (Send)",
               src="ib_plugin.c:1615"), "events", {"src_file": "ib_plugin.c", "error_class": "ib_completion_error"}),
    ("2.27", I("Invalid NCCL_NTHREADS 100 (must be a multiple of 32)"), "nccl_lines", {"kind": NOT_NULL}),
    ("2.27", I("Invalid NCCL_LL128_NTHREADS 2048 (maximum 640)."), "nccl_lines", {"kind": NOT_NULL}),
    ("2.26", "node01:41877:41877 [0] 2311.904785 ncclPrepareTasks:1530 NCCL TRACE Collective AllReduce(Sum, ncclFloat32, "
                  "RING, SIMPLE) count=262144 devFuncId=123 channel{Lo..Hi}={0..31} count{Lo,Mid,Hi}={0,8192,8192} "
                  "chunkBytes{Lo,Mid,Hi}={0,131072,131072}",
          "nccl_tuning", {"func": "AllReduce", "algo": "RING", "proto": "SIMPLE", "ch_lo": 0, "ch_hi": 31}),
]


def _as_param(case):
    values, marks = (case.values, case.marks) if hasattr(case, "values") else (case, ())
    version, line, table, _ = values
    target = line.lines[line.at] if isinstance(line, Block) else line
    return pytest.param(*values, marks=marks, id=f"v{version}-{table}-{target.strip()[:60]}")


PARAMS = [_as_param(c) for c in CASES]


# -- parsing -------------------------------------------------------------------------------------


@cache
def parse_lines(lines: tuple[str, ...]):
    return nccl.parse(envelope("\n".join(lines).encode()))


def _lines_of(line) -> tuple[tuple[str, ...], int]:
    if isinstance(line, Block):
        return line.lines, line.at + 1
    return (line,), 1


# -- the tests -----------------------------------------------------------------------------------


def test_enough_cases():
    assert len(CASES) >= 150


@pytest.mark.parametrize(("version", "line", "table", "expected"), PARAMS)
def test_line_kind(version: str, line, table: str, expected: dict):
    lines, line_no = _lines_of(line)
    result = parse_lines(lines)
    expected = dict(expected)
    if not expected.pop("_unconsumed_ok", False):
        assert line_no in set(result.consumed.to_list()), f"line {line_no} not consumed: {lines[line_no - 1]!r}"
    frame = result.tables.get(table)
    assert frame is not None, f"no table {table}"
    where = expected.pop("_where", {})
    nrows = expected.pop("_nrows", None)
    for column in [*where, *expected]:
        assert column in frame.columns, f"{table} has no column {column}"
    rows = [r for r in frame.filter(pl.col("line_no") == line_no).iter_rows(named=True)
            if all(_match(r[k], v) for k, v in where.items())]
    shown = "\n".join(map(str, frame.filter(pl.col("line_no") == line_no).iter_rows(named=True)))
    if nrows is not None:
        assert len(rows) == nrows, f"{len(rows)} rows in {table} for {where}, expected {nrows}:\n{shown}"
    else:
        assert rows, f"no row in {table} for line {line_no} ({where}):\n{lines[line_no - 1]!r}\nrows of the line:\n{shown}"
    for row in rows:
        wrong = {k: (row[k], v) for k, v in expected.items() if not _match(row[k], v)}
        assert not wrong, f"{table} line {line_no}: (actual, expected) {wrong}\nrow: {row}"


# Kinds of the catalogue that the reference does not describe (not written from it here).
NOT_IN_REFERENCE = {"shared_mem_limit"}


def test_every_kind_has_a_sample_classified_as_itself():
    prefix = "node01:41877:41878 [0] NCCL INFO "
    samples = [(kind.name, s) for kind in KINDS for s in kind.samples]
    assert not [k.name for k in KINDS if not k.samples], "kinds without samples"
    result = parse_lines(tuple(prefix + s for _, s in samples))
    kinds = dict(result.tables["nccl_lines"].select("line_no", "kind").iter_rows())
    wrong = [(name, sample, kinds.get(i + 1)) for i, (name, sample) in enumerate(samples) if kinds.get(i + 1) != name]
    assert not wrong, "samples classified as another kind (kind, sample, got):\n" + "\n".join(map(str, wrong))


def test_cases_cover_every_kind():
    """The hand-written lines above reach every kind of the catalogue the reference describes."""
    seen = set()
    for case in CASES:
        values = case.values if hasattr(case, "values") else case
        lines, _ = _lines_of(values[1])
        frame = parse_lines(lines).tables.get("nccl_lines")
        if frame is not None:
            seen.update(frame["kind"].drop_nulls().to_list())
    missing = {k.name for k in KINDS} - seen - NOT_IN_REFERENCE
    assert not missing, f"kinds no case line reaches: {sorted(missing)}"


# -- version fingerprints (section 4 and 3.14.6) ---------------------------------------------------


def _fp_block(lines: list[str], host: str, pid: int) -> tuple[str, ...]:
    return tuple(line if not line.startswith("@") else I(line[1:], host, pid, pid + 7, 0) for line in lines)


FINGERPRINT_BLOCKS = [
    # (true minor, a minor the block must exclude, lines; "@" = an INFO message of this process)
    (4, 5, ["NCCL version 2.4.8+cuda10.1", "@Bootstrap : Using [0]eth0:10.1.0.4<0> [1]ib0:10.2.0.4<0>",
            "@NET/Plugin : No plugin found (libnccl-net.so).", "@Channel 00 :    0   1   2   3",
            "@Ring 00 : 0[0] -> 1[1] via P2P/IPC", "@Ring 00 : 3 -> 0 [receive] via NET/IB/0",
            "@Trees [0] -1->0->1/-1/-1", "@Using 256 threads, Min Comp Cap 7, Trees enabled up to size 41943039",
            "@comm 0x7f5c4c001d60 rank 0 nranks 4 cudaDev 0 nvmlDev 0 - Init COMPLETE"]),
    (5, 6, ["@Bootstrap : Using [0]eth0:10.1.0.5<0>", "@NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",
            f"@{'Channel 00/02 :    0   1   2   3':<115}", "@Ring 00 : 0[1a000] -> 1[1b000] via P2P/IPC",
            "@Trees [0] 1/-1/-1->0->-1|-1->0->1/-1/-1", "@threadThresholds 8/8/64 | 32/8/64",
            "@Threads per block : 512/640/512", "@Latency/AlgBw | Tree/    LL | Tree/ LL128 | Tree/Simple |",
            "@comm 0x55d0c0a1b2c0 rank 0 nranks 4 cudaDev 0 busId 1a000 - Init COMPLETE"]),
    (7, 12, ["@Bootstrap : Using [0]eth0:10.1.0.7<0>", "@NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",
             "@Using network IB", "@Channel 00 : 0[1a000] -> 1[1b000] via P2P/IPC",
             "@Channel 00 : 7[db000] -> 0[1a000] [receive] via NET/IB/0/GDRDMA",
             "@Trees [0] 1/-1/-1->0->-1|-1->0->1/-1/-1", "@threadThresholds 8/8/64 | 64/8/64 | 8/8/64",
             "@32 coll channels, 32 p2p channels, 2 p2p channels per peer",
             "@comm 0x55d0c0a1b2c0 rank 0 nranks 8 cudaDev 0 busId 1a000 - Init COMPLETE"]),
    (10, 12, ["@Bootstrap : Using eth0:10.1.0.10<0>", "@NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",
              "@Channel 00 : 0[1a000] -> 1[1b000] via P2P/IPC", "@Channel 01 : 7[db000] -> 0[1a000] [receive] via NET/IB/1",
              "@Trees [0] 1/-1/-1->0->-1 [1] 1/-1/-1->0->-1", "@Connected all rings",
              "@threadThresholds 8/8/64 | 64/8/64 | 8/8/512",
              "@comm 0x55d0c0a1b2c0 rank 0 nranks 8 cudaDev 0 busId 1a000 - Init COMPLETE"]),
    (13, 14, ["@Bootstrap : Using eth0:10.1.0.13<0>",
              "@NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open shared object file",
              "@Channel 00 : 0[1a000] -> 1[1b000] via P2P/IPC/read", "@Channel 01 : 2[3d000] -> 3[3e000] via SHM/direct/direct",
              "@Channel 00/0 : 7[db000] -> 0[1a000] [receive] via NET/IB/0/GDRDMA",
              "@threadThresholds 8/8/64 | 64/8/64 | 8/8/512", "@cudaDriverVersion 11080",
              "@comm 0x55d0c0a1b2c0 rank 0 nranks 8 cudaDev 0 busId 1a000 - Init COMPLETE"]),
    (12, 13, ["@NET/Plugin : No plugin found, using internal implementation",
              "@Channel 00 : 0[1a000] -> 1[1b000] via P2P/IPC", "@Channel 01 : 1[1b000] -> 2[3d000] via direct shared memory",
              "@Channel 00/0 : 7[db000] -> 0[1a000] [receive] via NET/IB/0/GDRDMA"]),
    (14, 16, ["@Channel 00/0 : 0[1a000] -> 1[1b000] via P2P/IPC/read", "@Channel 01 : 2[3d000] -> 3[3e000] via SHM/direct/direct",
              "@threadThresholds 8/8/64 | 64/8/64 | 512 | 512", "@32 coll channels, 32 p2p channels, 4 p2p channels per peer",
              "@comm 0x55d0c0a1b2c0 rank 0 nranks 8 cudaDev 0 busId 1a000 - Init COMPLETE"]),
    (16, 17, ["@Bootstrap : Using eth0:10.1.0.16<0>", "@NET/Plugin : No plugin found, using internal implementation",
              "@Channel 00/0 : 0[1a000] -> 1[1b000] via P2P/IPC", "@P2P Chunksize set to 524288",
              "@threadThresholds 8/8/64 | 64/8/64 | 512 | 512",
              "@32 coll channels, 32 p2p channels, 4 p2p channels per peer",
              "@comm 0x55d0c0a1b2c0 rank 0 nranks 8 cudaDev 0 busId 1a000 commId 0x5ae77eb5ea4ec1ee - Init COMPLETE"]),
    (17, 18, ["@Channel 00/0 : 0[1a000] -> 1[1b000] via P2P/IPC", "@24 coll channels, 16 nvls channels, 32 p2p channels, 4 p2p channels per peer",
              "@Latency/AlgBw |    Tree/    LL |", "@P2P Chunksize set to 524288",
              "@comm 0x55d0c0a1b2c0 rank 0 nranks 8 cudaDev 0 busId 1a000 commId 0x5ae77eb5ea4ec1ee - Init COMPLETE"]),
    (19, 20, ["NCCL version 2.19.3+cuda12.3", "@Bootstrap : Using bond0:10.1.0.19<0>",
              "@NET/Plugin : Plugin load returned 2 : libnccl-net.so: cannot open shared object file: No such file or directory.",
              "@Using non-device net plugin version 0",
              "@comm 0x55d1c3a4b6f0 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 18000 commId 0x1c3a7d9ee6b8a1f0 - Init START",
              "@Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read", "@Channel 00 : 0[0] -> 2[2] via SHM/direct/direct",
              "@24 coll channels, 16 nvls channels, 32 p2p channels, 32 p2p channels per peer"]),
    (18, 17, ["@comm 0x55d1 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 18000 commId 0x1c3a - Init START",
              "@Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM", "@P2P Chunksize set to 524288",
              "fp-18:18:18 [0] 2311.904785 getAlgoInfo:1203 NCCL TRACE 1048576 Bytes -> Algo 1 proto 2 time 31.452000"]),
    (21, 23, ["@Bootstrap : Using bond0:10.1.0.21<0>", "@NET/Plugin: Using internal network plugin.",
              "@ncclCommInitRank comm 0x5601 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 18000 commId 0x44aa - Init COMPLETE",
              "@comm 0x5601 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0",
              "@32 coll channels, 32 collnet channels, 16 nvls channels, 32 p2p channels, 32 p2p channels per peer",
              "@1048576 Bytes -> Algo 1 proto 2 time 31.452000"]),
    (20, 23, ["@comm 0x55d1 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 18000 commId 0x1c3a - Init START",
              "@comm 0x55d1 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0",
              "@1048576 Bytes -> Algo 1 proto 2 time 31.452000",
              "@32 coll channels, 4 collnet channels, 16 nvls channels, 32 p2p channels, 32 p2p channels per peer",
              "", ("fp-20:20:27 [0] transport/net_ib.cc:1697 NCCL WARN NET/IB : Got completion from peer 10.1.1.2<39816> "
                   "with status=12 opcode=0 len=0 vendor err 129 (Send)")]),
    (22, 23, ["@NET/Plugin: No plugin found (libnccl-net.so)", "@CC Off, Multi-GPU CC Off, workFifoBytes 1048576",
              "@ncclCommInitRank comm 0x5601 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 18000 commId 0x44aa - Init COMPLETE",
              ("@Init timings: rank 0 nranks 8 total 1.20 (kernels 0.20, bootstrap 0.31, allgathers 0.05, topo 0.28, "
               "graphs 0.02, connections 0.12, rest 0.22)"),
              "", ("fp-22:22:29 [0] transport/net_ib.cc:1947 NCCL WARN NET/IB: Got completion from peer 10.1.1.2<39816> "
                   "with status=12 opcode=0 len=0 vendor err 129 (Send) hca mlx5_3")]),
    (23, 24, ["@Bootstrap : Using bond0:10.1.0.23<0>", "@NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.",
              "@Channel 00/02 : 0 1 2 3 4 5 6 7", "@CC Off, Multi-GPU CC Off, workFifoBytes 1048576",
              "@AllReduce: 65536 Bytes -> Algo 0 proto 0 time 19.840000",
              ("@Init timings - ncclCommInitRank: rank 0 nranks 8 total 0.92 (kernels 0.15, alloc 0.01, bootstrap 0.20, "
               "allgathers 0.03, topo 0.25, graphs 0.01, connections 0.17, rest 0.10)")]),
    (24, 26, ["@Bootstrap: Using bond0:10.1.0.24<0>", "@NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.",
              "@Connected all rings, use ring PXN 0 GDR 1", "@Check P2P Type intraNodeP2pSupport 1 directMode 0",
              "@ReduceScatter: 1024 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}"]),
    (25, 22, ["@Bootstrap: Using bond0:10.1.0.25<0>", "@" + RING_2048[0],
              "@AllReduce: 67108864 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..31}"]),
    (26, 27, ["@Bootstrap: Using eno1:10.1.0.26<0>", "@NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin.",
              "@Check P2P Type intraNodeP2pSupport 1 directMode 0", "@CC Off, workFifoBytes 1048576",
              "@Connected all rings, use ring PXN 0 GDR 1",
              "", "[2025-03-14 10:22:07] fp-26:26:33 [0] misc/socket.cc:46 NCCL WARN socketProgress: Connection closed by remote peer x<1>"]),
    (27, 28, ["@NET/Plugin: Could not find: libnccl-net.so.", "@Check P2P Type isAllDirectP2p 1 directMode 0",
              "@NVLS multicast support is available on dev 0 (NVLS_NCHANNELS 16)", "@CC Off, workFifoBytes 1048576"]),
    (28, 30, ["@Bootstrap: Using eno1:10.1.0.28<0>", "@NET/Plugin: Could not find: libnccl-net.so.",
              "@Check P2P Type isAllDirectP2p 1 directMode 0 isAllCudaP2p 1",
              "@NVLS multicast support is available on dev 0 (NVLS_NCHANNELS 16)",
              "@AllReduce [Symmetric]: 8388608 Bytes -> Kernel AllReduce_RSxLDMC_AGxSTMC nchannels 16 nthreads 512 nWorks 1"]),
    (29, 30, ["@[Rank 0] ncclCommInitRank comm 0x5604 rank 0 nranks 64 cudaDev 0 nvmlDev 0 busId 18000 commId 0x2f00 - Init START",
              "@NVLS multicast support is available on dev 0 (NVLS_NCHANNELS 16)",
              "@Check P2P Type isAllDirectP2p 1 directMode 0 isAllCudaP2p 1"]),
    (30, 29, ["@Bootstrap: Using eno1:10.1.0.30<0>", "@NVLS tuning: nChannels 16 chunkSize 131072 treeMaxChunkSize 65536",
              "@Channel 07 : 2[6] -> 3[7] via SHM/direct",
              "", "[2026-01-12 08:01:02] fp-30:30:37 [0] transport/net_ib.cc:2310 (ncclIbTest) NCCL WARN NET/IB: x"]),
]


def _fp_param(minor, exclude, lines):
    # 2.18: its TRACE decision copy must not count as the 2.20-2.22 INFO form (section 3.14.2);
    # 2.25: a ring line of >= 1001 ranks has width-4 columns, cut with `...` (section 3.6).
    return pytest.param(minor, exclude, lines, id=f"2.{minor}")


@pytest.mark.parametrize(("minor", "exclude", "lines"), [_fp_param(*b) for b in FINGERPRINT_BLOCKS])
def test_fingerprints(minor: int, exclude: int, lines: list[str]):
    host, pid = f"fp-{minor}", minor
    block = _fp_block(lines, host, pid)
    tables = parse_lines(block).tables
    if "nccl_fingerprints" in tables:
        fp = tables["nccl_fingerprints"]
    else:  # the parser keeps per-process message shapes; the evidence is computed from them
        fp = nccl.fingerprints(tables["nccl_shapes"])
    fp = fp.filter(pl.col("host") == host)
    assert fp.height >= 2, f"too little evidence for 2.{minor}: {fp}"
    wrong = fp.filter((pl.col("min_minor") > minor) | (pl.col("max_minor") < minor))
    assert wrong.is_empty(), f"evidence that excludes the true version 2.{minor}:\n{wrong}"
    lo, hi = fp["min_minor"].max(), fp["max_minor"].min()
    assert lo <= minor <= hi, (lo, hi)
    assert not (lo <= exclude <= hi), f"2.{minor} block still allows 2.{exclude}: [{lo}, {hi}]"
