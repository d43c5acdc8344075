"""NCCL_DEBUG=INFO output of one process, per NCCL version.

Formats: ``formats/nccl.md`` sections 1 (prefix), 3.1 (version line), 3.2 (bootstrap), 3.3
(plugin wording), 3.4 (NIC list), 3.5 (Init START / COMPLETE, layout line; corrections in
3.14.7), 3.6-3.7 (trees, channel lines) and 3.11 (IB completion WARN). Supported versions:
2.14 and later (older releases printed channel lines and init lines in shapes we do not need).
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import Slot

# CUDA each NCCL release was most often built against (the "+cudaX.Y" of the version line).
_CUDA_BUILD = {14: "11.8", 15: "11.8", 16: "12.0", 17: "12.0", 18: "12.1", 19: "12.3", 20: "12.4",
               21: "12.4", 22: "12.6", 23: "12.6", 24: "12.6", 25: "12.8", 26: "12.8", 27: "12.9"}
CHANNELS = 8                  # rings per communicator we print connection lines for
P2P_CHUNK = 131072


@dataclass(frozen=True)
class NcclVersion:
    text: str
    minor: int
    patch: int

    @classmethod
    def parse(cls, text: str) -> NcclVersion:
        parts = text.split(".")
        if len(parts) != 3 or parts[0] != "2" or not all(p.isdigit() for p in parts):
            raise ValueError(f"NCCL version must look like 2.21.5, got {text!r}")
        minor = int(parts[1])
        if minor < 14:
            raise ValueError(f"NCCL {text}: the generator writes NCCL 2.14 and later")
        return cls(text, minor, int(parts[2]))

    def at_least(self, minor: int) -> bool:
        return self.minor >= minor

    @property
    def cuda(self) -> str:
        return _CUDA_BUILD.get(self.minor, "12.9")

    @property
    def driver(self) -> int:
        major, minor = self.cuda.split(".")
        return max(12040, int(major) * 1000 + int(minor) * 10)


@dataclass
class Comm:
    """One communicator as seen from one rank."""

    ptr: str
    rank: int              # communicator rank
    nranks: int
    comm_id: str | None    # None for split comms from 2.23 on
    ranks: list[Slot]      # members, in communicator-rank order
    parent: str | None = None
    color: int = 0

    @property
    def per_node(self) -> int:
        """Members per node (the same on every node of our communicators)."""
        first = self.ranks[0].node
        count = 0
        for slot in self.ranks:
            if slot.node != first:
                break
            count += 1
        return count


class NcclLog:
    """The NCCL lines one process prints; ``tid`` says which thread prints them."""

    def __init__(self, version: NcclVersion, slot: Slot, pid: int):
        self.v, self.slot, self.pid = version, slot, pid

    def info(self, tid: int, message: str) -> str:
        return f"{self.slot.host}:{self.pid}:{tid} [{self.slot.local_rank}] NCCL INFO {message}"

    def warn(self, tid: int, where: str, message: str, stamp: str) -> str:
        """WARN lines start with a newline (an empty line before each); 2.26+ prefixes NCCL's own time."""
        timestamp = f"[{stamp}] " if self.v.at_least(26) else ""
        return f"\n{timestamp}{self.slot.host}:{self.pid}:{tid} [{self.slot.local_rank}] {where} NCCL WARN {message}"

    # -- process start (main thread) ------------------------------------------------------

    def process_start(self, is_global_rank0: bool) -> list[str]:
        main = self.pid
        lines = [self.info(main, f"cudaDriverVersion {self.v.driver}")]
        version = f"NCCL version {self.v.text}+cuda{self.v.cuda}"
        if self.v.at_least(22):
            lines.append(self.info(main, version))          # every process, as an INFO line
        elif is_global_rank0:
            lines.append(version)                           # bare printf, rank 0 of the first comm only
        lines.append(self.info(main, "NCCL_SOCKET_IFNAME set by environment to eth0"))
        colon = "Bootstrap:" if self.v.at_least(24) else "Bootstrap :"
        lines.append(self.info(main, f"{colon} Using eth0:{self.slot.ip}<0>"))
        lines += [self.info(main, text) for text in self._plugin_lines()]
        return lines

    def _plugin_lines(self) -> list[str]:
        missing = "libnccl-net.so: cannot open shared object file: No such file or directory"
        if self.v.minor <= 18:
            return [f"NET/Plugin : Plugin load (libnccl-net.so) returned 2 : {missing}",
                    "NET/Plugin : No plugin found, using internal implementation"]
        if self.v.minor <= 20:
            return [f"NET/Plugin : dlerror={missing} No plugin found (libnccl-net.so), using internal implementation"]
        if self.v.minor <= 22:
            return ["NET/Plugin: No plugin found (libnccl-net.so)",
                    f"NET/Plugin: Plugin load returned 2 : {missing} : when loading libnccl-net.so",
                    "NET/Plugin: Using internal network plugin."]
        if self.v.minor <= 25:
            return ["NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin."]
        if self.v.minor == 26:
            return ["NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin."]
        return ["NET/Plugin: Could not find: libnccl-net.so."]

    # -- communicator init (init thread) ---------------------------------------------------

    def nic_list(self, nics: int) -> str:
        devices = " ".join(f"[{i}]mlx5_{i}:1/RoCE" for i in range(nics))
        return f"NET/IB : Using {devices} [RO]; OOB eth0:{self.slot.ip}<0>"

    def init_start(self, comm: Comm) -> str | None:
        """``Init START`` (2.18+); split comms name their parent (section 3.14.7 item 4)."""
        if not self.v.at_least(18):
            return None
        identity = self._api(comm) + self._identity(comm)
        if comm.parent is None:
            return f"{identity} commId {comm.comm_id} - Init START"
        if self.v.at_least(23):
            # Note the missing space before "-" on the split START line in these releases.
            return f"{identity}{self._split_fields(comm)}- Init START"
        if self.v.at_least(21):
            return f"{identity} parent {comm.parent} color {comm.color} key {comm.rank} commId {comm.comm_id} - Init START"
        return f"{identity} commId {comm.comm_id} - Init START"

    def init_complete(self, comm: Comm) -> str:
        identity = self._api(comm) + self._identity(comm)
        if comm.parent is not None and self.v.at_least(23):
            return f"{identity}{self._split_fields(comm)} - Init COMPLETE"
        if not self.v.at_least(16):
            return f"{identity} - Init COMPLETE"
        return f"{identity} commId {comm.comm_id} - Init COMPLETE"

    def _split_fields(self, comm: Comm) -> str:
        count = "" if self.v.minor == 23 else (" childCount 1" if self.v.at_least(29) else " splitCount 1")
        return f" parent {comm.parent}{count} color {comm.color} key {comm.rank}"

    def _api(self, comm: Comm) -> str:
        """The API name in front of the init lines (2.21+)."""
        if not self.v.at_least(21):
            return ""
        if comm.parent is not None:
            return "ncclCommSplit "
        # PyTorch calls the Config API; 2.21-2.22 print ncclCommInitRank whatever the entry point.
        return "ncclCommInitRankConfig " if self.v.at_least(23) else "ncclCommInitRank "

    def _identity(self, comm: Comm) -> str:
        dev, bus = self.slot.local_rank, self.slot.bus_id
        if self.v.at_least(18):
            return f"comm {comm.ptr} rank {comm.rank} nranks {comm.nranks} cudaDev {dev} nvmlDev {dev} busId {bus}"
        return f"comm {comm.ptr} rank {comm.rank} nranks {comm.nranks} cudaDev {dev} busId {bus}"

    def comm_init(self, tid: int, comm: Comm, nics: int, nodes_in_comm: int, total: float) -> list[str]:
        """Everything from NIC selection to Init COMPLETE, in the order a 2.2x rank prints it."""
        out: list[str] = []
        first_comm = comm.parent is None
        if first_comm:
            if self.v.at_least(16):
                out.append("NCCL_IB_HCA set to mlx5")
            out.append(self.nic_list(nics))
            if self.v.at_least(19):
                out.append("Using non-device net plugin version 0")
            out.append("Using network IB")
        start = self.init_start(comm)
        if start:
            out.append(start)
        if comm.parent and self.v.at_least(18):
            prev, nxt = (comm.rank - 1) % comm.nranks, (comm.rank + 1) % comm.nranks
            out.append(f"bootstrapSplit: rank {comm.rank} nranks {comm.nranks} color {comm.color} "
                       f"key {comm.rank} prev {prev} next {nxt} - DONE")
        if first_comm and self.v.at_least(16):
            out.append("NCCL_IB_GID_INDEX set by environment to 3.")
        out.append(f"Setting affinity for GPU {self.slot.local_rank} to {self._cpu_mask()}")
        if self.v.at_least(20):
            local = comm.per_node
            out.append(f"comm {comm.ptr} rank {comm.rank} nRanks {comm.nranks} nNodes {nodes_in_comm} "
                       f"localRanks {local} localRank {self.slot.local_rank} MNNVL 0")
        if comm.rank == 0:
            out += self._ring_order_lines(comm)
        out.append(self._trees(comm))
        if self.v.at_least(16):
            out.append(f"P2P Chunksize set to {P2P_CHUNK}")
        if not self.v.at_least(22):
            out += self.connection_lines(comm)
        out += self._connected_lines()
        out.append("threadThresholds 8/8/64 | 320/8/64 | 512 | 512")
        out.append(self._channel_counts())
        if self.v.at_least(22):
            out.append(self._init_timings(comm, total))
        out.append(self.init_complete(comm))
        return [self.info(tid, text) for text in out]

    def _cpu_mask(self) -> str:
        return "00000000,0000ffff,ffffffff" if self.slot.local_rank < 4 else "ffffffff,ffff0000,00000000"

    def _ring_order_lines(self, comm: Comm) -> list[str]:
        """Rank 0 lists each ring (2.5-2.22: ``%3d`` per rank, at most 20; 2.23+: one space, 128 chars)."""
        lines = []
        for channel in range(CHANNELS):
            head = f"Channel {channel:02d}/{CHANNELS:02d} :"
            if self.v.at_least(23):
                width = len(str(comm.nranks - 1))
                body = " ".join(f"{r:{width}d}" for r in range(comm.nranks))
                text = f"{head} {body}"
                lines.append(text if len(text) <= 128 else text[:124] + " ...")
            else:
                lines.append(head + " " + "".join(f" {r:3d}" for r in range(min(comm.nranks, 20))))
        return lines

    def _trees(self, comm: Comm) -> str:
        """``Trees [c] d0/d1/d2->me->up``: a chain inside each node, node heads in a binary tree."""
        me = comm.rank
        per_node = comm.per_node
        node, local = divmod(me, per_node)
        nodes = comm.nranks // per_node
        if local > 0:
            up = me - 1
            downs = [me + 1] if local < per_node - 1 else []
        else:
            up = ((node - 1) // 2) * per_node if node > 0 else -1
            downs = [me + 1] if per_node > 1 else []
            downs += [child * per_node for child in (2 * node + 1, 2 * node + 2) if child < nodes]
        downs = (downs + [-1, -1, -1])[:3]
        tree = f"{downs[0]}/{downs[1]}/{downs[2]}->{me}->{up}"
        return "Trees " + " ".join(f"[{c}] {tree}" for c in range(CHANNELS))

    def _dev_tag(self, slot: Slot) -> str:
        """``rank[dev]``: the CUDA device index from 2.18, the bus id (hex) before."""
        return str(slot.local_rank) if self.v.at_least(18) else slot.bus_id

    def connection_lines(self, comm: Comm) -> list[str]:
        """Ring hops of this rank: P2P over NVLink inside the node, NET/IB with GPUDirect across nodes."""
        me = comm.ranks[comm.rank]
        nxt = comm.ranks[(comm.rank + 1) % comm.nranks]
        prv = comm.ranks[(comm.rank - 1) % comm.nranks]
        p2p = "P2P/CUMEM/read" if self.v.at_least(18) else "P2P/IPC/read"
        lines = []
        for channel in range(CHANNELS):
            tag = f"Channel {channel:02d}/0 :"
            src = f"{comm.rank}[{self._dev_tag(me)}]"
            if prv.node != me.node:
                lines.append(f"{tag} {(comm.rank - 1) % comm.nranks}[{self._dev_tag(prv)}] -> {src} "
                             f"[receive] via NET/IB/{me.local_rank}/GDRDMA")
            dst = f"{(comm.rank + 1) % comm.nranks}[{self._dev_tag(nxt)}]"
            if nxt.node == me.node:
                lines.append(f"{tag} {src} -> {dst} via {p2p}")
            else:
                lines.append(f"{tag} {src} -> {dst} [send] via NET/IB/{me.local_rank}/GDRDMA")
        return lines

    def _connected_lines(self) -> list[str]:
        rings = "Connected all rings, use ring PXN 0 GDR 1" if self.v.at_least(24) else "Connected all rings"
        return [rings, "Connected all trees"]

    def _channel_counts(self) -> str:
        if self.v.at_least(20):
            return (f"{CHANNELS} coll channels, {CHANNELS} collnet channels, 0 nvls channels, "
                    f"{CHANNELS} p2p channels, 2 p2p channels per peer")
        if self.v.at_least(17):
            return f"{CHANNELS} coll channels, 0 nvls channels, {CHANNELS} p2p channels, 2 p2p channels per peer"
        return f"{CHANNELS} coll channels, {CHANNELS} p2p channels, 2 p2p channels per peer"

    def _init_timings(self, comm: Comm, total: float) -> str:
        parts = [0.12, 0.08, 0.21, 0.05, 0.34, 0.11]
        scale = total / 2.0
        kernels, bootstrap, allgathers, topo, graphs, connections = (round(p * scale, 2) for p in parts)
        rest = round(max(total - kernels - bootstrap - allgathers - topo - graphs - connections, 0.01), 2)
        if self.v.at_least(23):
            api = "ncclCommSplit" if comm.parent else "ncclCommInitRankConfig"
            return (f"Init timings - {api}: rank {comm.rank} nranks {comm.nranks} total {total:.2f} "
                    f"(kernels {kernels:.2f}, alloc 0.01, bootstrap {bootstrap:.2f}, allgathers {allgathers:.2f}, "
                    f"topo {topo:.2f}, graphs {graphs:.2f}, connections {connections:.2f}, rest {rest:.2f})")
        return (f"Init timings: rank {comm.rank} nranks {comm.nranks} total {total:.2f} (kernels {kernels:.2f}, "
                f"bootstrap {bootstrap:.2f}, allgathers {allgathers:.2f}, topo {topo:.2f}, graphs {graphs:.2f}, "
                f"connections {connections:.2f}, rest {rest:.2f})")

    # -- runtime and teardown ---------------------------------------------------------------

    def service_thread_closed(self, tid: int, local_rank: int) -> str:
        return self.info(tid, f"[Service thread] Connection closed by localRank {local_rank}")

    def destroy_complete(self, tid: int, comm: Comm) -> str:
        return self.info(tid, f"comm {comm.ptr} rank {comm.rank} nranks {comm.nranks} cudaDev "
                              f"{self.slot.local_rank} busId {self.slot.bus_id} - Destroy COMPLETE")

    def ib_completion_error(self, tid: int, peer_ip: str, port: int, local_gid: str, remote_gid: str,
                            stamp: str) -> str:
        """A RoCE transport-retry timeout (status 12) in the wording of this release (section 3.11)."""
        if self.v.at_least(20):
            colon = "NET/IB:" if self.v.at_least(22) else "NET/IB :"
            hca = f" hca mlx5_{self.slot.local_rank}" if self.v.at_least(22) else ""
            message = (f"{colon} Got completion from peer {peer_ip}<{port}> with status=12 opcode=0 len=0 "
                       f"vendor err 129 (Send) localGid ::ffff:{local_gid} remoteGids::ffff:{remote_gid}{hca}")
        elif self.v.at_least(18):
            message = (f"NET/IB : Got completion from peer {peer_ip}<{port}> with error 12, opcode 0, len 0, "
                       f"vendor err 129 (Send) localGid ::ffff:{local_gid} remoteGid ::ffff:{remote_gid}")
        else:
            message = f"NET/IB : Got completion from peer {peer_ip}<{port}> with error 12, opcode 0, len 0, vendor err 129"
        return self.warn(tid, "transport/net_ib.cc:1696", message, stamp)
