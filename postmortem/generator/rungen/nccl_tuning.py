"""Algorithm and protocol selection lines (TUNING, ENV): the model table, the env echo of
NCCL_ALGO/NCCL_PROTO, the 2.24+ Func/Proto/Algo matrix and the per-collective decisions.

Formats: ``docs/formats/nccl.md`` section 3.14 (3.14.1 names and numbers, 3.14.2 decision lines,
3.14.3 table shapes, 3.14.4 env syntax and matrix). The numbers come from a small invented
cost model (latency in microseconds, bandwidth in GB/s); what matters is that the disabled
combinations are the ones NCCL would disable (unsupported algorithm: ``0.0/0.0``; filtered by
the env or LL128 not allowed: latency kept, bandwidth ``0.0``) and that a decision picks the
fastest enabled combination of the same model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .nccl_topology import CHANNELS, NcclSetup

FUNCS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
PROTOS = ("LL", "LL128", "Simple")
DECISION_NAMES = {"Tree": "TREE", "Ring": "RING", "CollNetDirect": "COLLNET_DIRECT", "CollNetChain": "COLLNET_CHAIN",
                  "NVLS": "NVLS", "NVLSTree": "NVLS_TREE", "PAT": "PAT", "LL": "LL", "LL128": "LL128",
                  "Simple": "SIMPLE"}
_INTRA_BW = {"nvlink": 133.0, "indirect": 88.0, "pcie": 21.0, "direct": 21.0, "shm": 9.4}
_NET_BW = {"IB": 46.0, "Socket": 2.3, "AWS Libfabric": 37.0}


def algorithms(minor: int) -> tuple[str, ...]:
    """The algorithms of a release, in id order (section 3.14.1)."""
    if minor <= 5:
        return ("Tree", "Ring")
    if minor <= 13:
        return ("Tree", "Ring", "CollNet")
    names = ("Tree", "Ring", "CollNetDirect", "CollNetChain")
    if minor >= 17:
        names += ("NVLS",)
    if minor >= 18:
        names += ("NVLSTree",)
    if minor >= 23:
        names += ("PAT",)
    return names


def _parse_filter(value: str | None, names: tuple[str, ...], minor: int) -> dict[str, set[str]]:
    """The names a NCCL_ALGO / NCCL_PROTO value leaves enabled, per function (section 3.14.4)."""
    everything = {f: set(names) for f in FUNCS}
    if not value:
        return everything
    lower = {n.lower(): n for n in names}

    def pick(text: str) -> set[str]:
        invert = text.startswith("^")
        chosen = {lower[t.strip().lower()] for t in text.lstrip("^").split(",") if t.strip().lower() in lower}
        return set(names) - chosen if invert else chosen

    if minor < 24:
        chosen = pick(value)
        return {f: set(chosen) for f in FUNCS}
    result = everything
    for i, entry in enumerate(value.split(";")):
        func, sep, body = entry.rpartition(":")
        targets = [f for f in FUNCS if f.lower() == func.strip().lower()] if sep else list(FUNCS)
        for f in targets:
            result[f] = pick(body)
    return result


@dataclass
class Tuning:
    """The cost model one rank-0 process computes for one communicator."""

    minor: int
    setup: NcclSetup
    nranks: int
    nodes: int
    per_node: int
    env: dict[str, str]
    nvls: bool = False        # NVLS usable on this communicator (see NcclLog._nvls_active)

    def __post_init__(self) -> None:
        self.algos = algorithms(self.minor)
        self.algo_filter = _parse_filter(self.env.get("NCCL_ALGO") if self.minor >= 5 else None, self.algos, self.minor)
        self.proto_filter = _parse_filter(self.env.get("NCCL_PROTO") if self.minor >= 5 else None, PROTOS, self.minor)

    # -- the model ---------------------------------------------------------------------------

    def supported(self, func: str, algo: str, proto: str) -> bool:
        """Whether the release and the hardware have this combination at all."""
        nvls = self.nvls
        if algo == "Tree":
            return func == "AllReduce"
        if algo == "Ring":
            return True
        if algo == "NVLS":
            return nvls and proto == "Simple" and (func == "AllReduce" or (self.minor >= 19 and func in FUNCS[2:4]))
        if algo == "NVLSTree":
            return nvls and self.nodes > 1 and proto == "Simple" and func == "AllReduce"
        if algo == "PAT":
            return self.per_node == 1 and self.nodes > 1 and proto == "Simple" and func in FUNCS[2:4]
        return False          # CollNet: no CollNet plugin on this cluster

    def enabled(self, func: str, algo: str, proto: str) -> bool:
        if not self.supported(func, algo, proto) or proto not in self.proto_filter[func]:
            return False
        if proto == "LL128" and not self._ll128():
            return False
        if algo not in self.algo_filter[func]:
            # 2.7-2.17 filter the algorithm of AllReduce only; 2.18-2.23 never drop Ring elsewhere.
            if 7 <= self.minor <= 17 and func != "AllReduce":
                return True
            return 18 <= self.minor <= 23 and algo == "Ring" and func != "AllReduce"
        return True

    def _ll128(self) -> bool:
        """LL128 on this H20 (sm90) cluster: 2.15+, NVLink inside the node, an RDMA network."""
        intra_ok = self.setup.intra in ("nvlink", "indirect") and self.setup.shm_node is None
        return self.minor >= 15 and intra_ok and (self.nodes == 1 or self.setup.net != "Socket")

    def cell(self, func: str, algo: str, proto: str) -> tuple[float, float]:
        """(latency us, bandwidth GB/s) as the table prints it."""
        if not self.supported(func, algo, proto):
            return 0.0, 0.0
        p = PROTOS.index(proto)
        hops = max(0, self.nranks - self.nodes)
        if algo == "Tree":
            depth = 2 * math.ceil(math.log2(self.nodes + 1))
            latency = (6.8, 14.0, 28.4)[p] + depth * (2.7, 4.3, 7.6)[p] + 2 * (self.per_node - 1) * (0.6, 1.1, 2.2)[p]
        else:
            latency = (6.6, 14.0, 15.4)[p] + (self.nodes - 1) * (2.7, 4.3, 7.6)[p] + hops * (0.6, 1.1, 2.2)[p]
        if not self.enabled(func, algo, proto):
            return round(latency, 1), 0.0
        intra = _INTRA_BW[self.setup.intra]
        if self.setup.shm_node is not None:
            intra = min(intra, _INTRA_BW["shm"])
        bus = intra if self.nodes == 1 else min(intra, _NET_BW[self.setup.net] * (1.0 if self.setup.gdr_on else 0.62))
        factor = {"AllReduce": 0.5, "AllGather": 0.9, "ReduceScatter": 0.9}.get(func, 1.0)
        bw = bus * factor * (0.28, 0.92, 1.0)[p]
        if algo == "Tree":
            bw *= 1.05 if self.nodes > 1 else 0.9
        elif algo in ("NVLS", "NVLSTree"):
            bw *= 1.4
        return round(latency, 1), round(bw, 1)

    def threads(self, algo: str, proto: str) -> int:
        if algo in ("Tree", "Ring", "CollNet") or self.minor < 18:
            return (512, 640, 512 if algo == "Tree" and self.minor >= 18 else 256)[PROTOS.index(proto)]
        return 0 if proto != "Simple" else (640 if algo in ("CollNetDirect", "NVLS") else 512)

    def choose(self, func: str, nbytes: int) -> tuple[str, str, float]:
        """The fastest enabled (algorithm, protocol) and its estimated time in microseconds."""
        best = ("Ring", "Simple", math.inf)
        for algo in self.algos:
            for proto in PROTOS:
                latency, bw = self.cell(func, algo, proto)
                if bw > 0:
                    time = latency + nbytes / (bw * 1e3)
                    if time < best[2]:
                        best = (algo, proto, time)
        return best

    # -- the lines ----------------------------------------------------------------------------

    def env_lines(self) -> list[str]:
        """``NCCL_ALGO``/``NCCL_PROTO set by environment to %s`` (2.7+, ENV, every comm init)."""
        if self.minor < 7:
            return []
        return [f"{name} set by environment to {self.env[name]}" for name in ("NCCL_PROTO", "NCCL_ALGO")
                if name in self.env]

    def matrix(self) -> str | None:
        """``Enabled NCCL Func/Proto/Algo Matrix:`` block (2.24+, rank 0, when either variable is set)."""
        if self.minor < 24 or not ({"NCCL_ALGO", "NCCL_PROTO"} & set(self.env)):
            return None
        head = "     Function | " + "".join(f"{p:>8s}  " for p in PROTOS) + " | " + "".join(f"{a:>13s}  " for a in self.algos)
        rows = [head]
        for func in FUNCS:
            protos = [(2 if p == "LL128" else 1) if p in self.proto_filter[func] else 0 for p in PROTOS]
            algos = [1 if a in self.algo_filter[func] else 0 for a in self.algos]
            rows.append(f"{func:>13s} | " + "".join(f"{v:8d}  " for v in protos) + " | "
                        + "".join(f"{v:13d}  " for v in algos))
        return "Enabled NCCL Func/Proto/Algo Matrix:\n" + "\n".join(rows) + "\n"

    def table(self) -> list[str]:
        """The Latency/AlgBw table in the shape of the release (section 3.14.3)."""
        if self.minor < 5:
            return []
        cells = [(a, p) for a in self.algos for p in PROTOS]
        if self.minor == 5:
            lines = ["Latency/AlgBw |" + "".join(f" {a:>4s}/{p:>6s} |" for a, p in cells)]
            return lines + [f"{f:>13s} |" + "".join("{:7.1f}/{:5.1f}|".format(*self.cell(f, a, p)) for a, p in cells) for f in FUNCS]
        if self.minor <= 17:
            lines = ["Latency/AlgBw |" + "".join(f" {a:>7s}/{p:>6s} |" for a, p in cells),
                     " Max NThreads |" + "".join(f" {self.threads(a, p):14d} |" for a, p in cells)]
            return lines + [f"{f:>13s} |" + "".join("{:8.1f}/{:6.1f} |".format(*self.cell(f, a, p)) for a, p in cells) for f in FUNCS]
        lines = []
        for start in range(0, len(self.algos), 3):
            block = self.algos[start:start + 3]
            bcells = [(a, p) for a in block for p in PROTOS]
            lines.append("  Algorithm   |" + "".join(f" {'':>14s}   {a:>14s}   {'':>14s} |" for a in block))
            lines.append("  Protocol    |" + "".join(f" {p:>14s} |" for p in PROTOS * 3))
            lines.append(" Max NThreads |" + "".join(f" {self.threads(a, p):14d} |" for a, p in bcells))
            lines += [f"{f:>13s} |" + "".join("{:8.1f}/{:6.1f} |".format(*self.cell(f, a, p)) for a, p in bcells) for f in FUNCS]
        return lines

    def enabled_cells(self) -> dict[str, list[str]]:
        return {f: [f"{a}/{p}" for a in self.algos for p in PROTOS if self.cell(f, a, p)[1] > 0] for f in FUNCS}

    def decision(self, func: str, nbytes: int) -> tuple[str | None, dict]:
        """The per-collective line of the release (section 3.14.2) and its truth record.

        ``nbytes`` is the user buffer of the call (the per-rank part for AllGather/ReduceScatter)."""
        algo, proto, time = self.choose(func, nbytes * (self.nranks if func in ("AllGather", "ReduceScatter") else 1))
        record = {"kind": "decision", "func": func, "algo": algo, "proto": proto}
        if self.minor < 20:
            return None, record       # TRACE only before 2.20
        if self.minor <= 23:
            printed = nbytes * self.nranks if func in ("AllGather", "ReduceScatter") else nbytes
            numbers = f"{printed} Bytes -> Algo {self.algos.index(algo)} proto {PROTOS.index(proto)} time {time:f}"
            record["bytes"] = printed
            return (numbers if self.minor <= 22 else f"{func}: {numbers}"), record
        record["bytes"] = nbytes
        channels = max(1, min(CHANNELS, nbytes // (1 << 17) or 1))
        return (f"{func}: {nbytes} Bytes -> Algo {DECISION_NAMES[algo]} proto {DECISION_NAMES[proto]} "
                f"channel{{Lo..Hi}}={{0..{channels - 1}}}"), record
