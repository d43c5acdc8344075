"""NCCL_DEBUG=INFO output of one process, per NCCL version (2.4 to 2.30).

Formats: ``docs/formats/nccl.md``; each method names the section it follows. Where §3.14.7 corrects
§3.5-3.11, the correction is what is written. Version families that change a line kind are
spelled out in the method's docstring; ``self.v.at_least(m)`` reads "2.m or later".

Which rings, trees and transports a communicator uses is decided in ``nccl_topology`` (one
plan per communicator, shared by its ranks) and printed by ``nccl_channels``; the tuning table,
env echo and decision lines come from ``nccl_tuning``. Lines that are connections or tuning output are ``Emitted`` strings that
carry their ground-truth record, so the story can record exactly the lines that get written.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import Slot
from .nccl_channels import ChannelLines, Emitted, tagged
from .nccl_topology import CHANNELS, CommPlan, NcclSetup, plan
from .nccl_tuning import Tuning

__all__ = ["Comm", "Emitted", "NcclLog", "NcclVersion", "tagged"]

# CUDA each NCCL release was most often built against (the "+cudaX.Y" of the version line).
_CUDA_BUILD = {4: "10.1", 5: "10.2", 6: "10.2", 7: "11.0", 8: "11.1", 9: "11.3", 10: "11.4", 11: "11.4",
               12: "11.6", 13: "11.7", 14: "11.8", 15: "11.8", 16: "12.0", 17: "12.0", 18: "12.1", 19: "12.3",
               20: "12.4", 21: "12.4", 22: "12.6", 23: "12.6", 24: "12.6", 25: "12.8", 26: "12.8", 27: "12.9",
               28: "12.9", 29: "13.0", 30: "13.0"}
# Net plugin API version a release asks for (the "(v%d)" of the plugin-loaded line).
_NET_API = {4: 2, 5: 2, 6: 3, 7: 3, 8: 3, 9: 4, 10: 4, 11: 4, 12: 5, 13: 6, 14: 6, 15: 6, 16: 6, 17: 6, 18: 7,
            19: 8, 20: 8, 21: 8, 22: 8, 23: 9, 24: 9, 25: 9, 26: 10}
P2P_CHUNK = 131072
NVLS_CHANNELS = 16
_MISSING = "libnccl-net.so: cannot open shared object file: No such file or directory"


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
        if minor < 4:
            raise ValueError(f"NCCL {text}: the generator writes NCCL 2.4 and later")
        return cls(text, minor, int(parts[2]))

    def at_least(self, minor: int, patch: int = 0) -> bool:
        return (self.minor, self.patch) >= (minor, patch)

    @property
    def cuda(self) -> str:
        return _CUDA_BUILD.get(self.minor, "13.0")

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
    comm_id: str | None    # the id NCCL hashes from the unique id (printed 2.16+, not by 2.23+ split comms)
    ranks: list[Slot]      # members, in communicator-rank order
    parent: str | None = None   # ncclCommSplit (2.18+): the parent's pointer on this rank
    color: int = 0
    key: str = ""          # the ground truth's name of this communicator

    @property
    def per_node(self) -> int:
        """Members per node (the same on every node of our communicators)."""
        return sum(1 for slot in self.ranks if slot.node == self.ranks[0].node)


class NcclLog(ChannelLines):
    """The NCCL lines one process prints; ``tid`` says which thread prints them. The ring, tree
    and connection lines are in ``ChannelLines`` (``nccl_channels``)."""

    def __init__(self, version: NcclVersion, slot: Slot, pid: int, setup: NcclSetup | None = None):
        self.v, self.slot, self.pid = version, slot, pid
        self.setup = setup or NcclSetup()
        self.mask = self.setup.mask(version.minor)
        self.env = dict(self.setup.env)

    # -- prefix, subsystems, env lines (sections 1.1-1.3, 3.8) -------------------------------

    def info(self, tid: int, message: str) -> str:
        line = f"{self.slot.host}:{self.pid}:{tid} [{self.slot.local_rank}] NCCL INFO {message}"
        return tagged(line, message.conn, message.tuning) if isinstance(message, Emitted) else line

    def warn(self, tid: int, where: str, message: str, stamp: str, func: str = "") -> str:
        """WARN lines start with a newline (an empty line before each); 2.26+ prefix NCCL's own
        time, 2.30 adds ``(function)`` after ``file:line``."""
        timestamp = f"[{stamp}] " if self.v.at_least(26) else ""
        where = f"{where} ({func})" if self.v.at_least(30) and func else where
        return f"\n{timestamp}{self.slot.host}:{self.pid}:{tid} [{self.slot.local_rank}] {where} NCCL WARN {message}"

    def shows(self, *subsystems: str) -> bool:
        return any(name in self.mask for name in subsystems)

    def _env_shown(self) -> bool:
        """Parameter echo lines are subsystem ALL before 2.18 (always shown), ENV from 2.18."""
        return not self.v.at_least(18) or self.shows("ENV")

    @staticmethod
    def env_line(name: str, value: str) -> str:
        """``%s set by environment to %lu.`` (integers, 2.4-2.11; ``%lld.`` 2.12+: the same text)
        and ``%s set by environment to %s`` (strings, no period)."""
        return f"{name} set by environment to {value}." if value.lstrip("-").isdigit() else \
            f"{name} set by environment to {value}"

    # -- process start (main thread) ------------------------------------------------------

    def process_start(self, is_global_rank0: bool) -> list[str]:
        main, v = self.pid, self.v
        lines = [self.info(main, f"cudaDriverVersion {v.driver}")] if v.at_least(13) else []
        version = f"NCCL version {v.text}+cuda{v.cuda}"
        if v.at_least(22):
            lines.append(self.info(main, version))          # every process, as an INFO line (3.1)
        elif is_global_rank0:
            lines.append(version)                           # bare printf, rank 0 of the first comm only
        ifname, addr = self.setup.bootstrap(self.slot)
        env = [("NCCL_SOCKET_IFNAME", ifname)] + [(k, val) for k, val in self.setup.env
                                                  if k not in ("NCCL_ALGO", "NCCL_PROTO")]
        if v.at_least(18) and not self.setup.cumem:
            env.append(("NCCL_CUMEM_ENABLE", "0"))
        if self._env_shown():
            lines += [self.info(main, self.env_line(k, val)) for k, val in env]
        lines.append(self.info(main, self._bootstrap_line(ifname, addr)))
        lines += [self.info(main, text) for text in self._plugin_lines()]
        return lines

    def _bootstrap_line(self, ifname: str, addr: str) -> str:
        """3.2: ``[i]name:addr<port>`` list in 2.4-2.7, the chosen interface from 2.8, no space
        before the colon from 2.24."""
        if not self.v.at_least(8):
            return f"Bootstrap : Using [0]{ifname}:{addr}<0>"
        colon = "Bootstrap:" if self.v.at_least(24) else "Bootstrap :"
        return f"{colon} Using {ifname}:{addr}<0>"

    def _plugin_lines(self) -> list[str]:
        """3.3: the net plugin loader's wording, per range (no plugin installed)."""
        minor = self.v.minor
        if self.setup.net == "AWS Libfabric":
            if minor >= 27:
                return ["Successfully loaded external plugin libnccl-net.so"]
            return [f"NET/Plugin: Loaded net plugin AWS Libfabric (v{_NET_API.get(minor, 10)})"]
        if minor == 4:
            return ["NET/Plugin : No plugin found (libnccl-net.so)."]
        if minor <= 11:
            return ["NET/Plugin : No plugin found (libnccl-net.so), using internal implementation"]
        if minor <= 18:
            return [f"NET/Plugin : Plugin load (libnccl-net.so) returned 2 : {_MISSING}",
                    "NET/Plugin : No plugin found, using internal implementation"]
        if minor <= 20:
            return [f"NET/Plugin : dlerror={_MISSING} No plugin found (libnccl-net.so), using internal implementation"]
        if minor <= 22:
            return ["NET/Plugin: No plugin found (libnccl-net.so)",
                    f"NET/Plugin: Plugin load returned 2 : {_MISSING} : when loading libnccl-net.so",
                    "NET/Plugin: Using internal network plugin."]
        if minor <= 25:
            return ["NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin."]
        if minor == 26:
            return ["NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin."]
        return ["NET/Plugin: Could not find: libnccl-net.so."]

    # -- network selection (first communicator, init thread) ------------------------------

    def _net_init_lines(self) -> list[str]:
        """3.3-3.4: the NIC list of the chosen transport, then ``Using network`` (2.6+)."""
        setup, out = self.setup, []
        ifname, addr = setup.bootstrap(self.slot)
        if setup.net == "IB":
            if self.shows("NET", "ENV"):
                out.append("NCCL_IB_HCA set to mlx5")
            link = "RoCE" if setup.fabric == "roce" else "IB"
            devices = "".join(f" [{i}]mlx5_{i}:1/{link}" for i in range(setup.nics))
            relaxed = "[RO]" if self.v.at_least(12) else ""
            out.append(f"NET/IB : Using{devices} {relaxed}; OOB {ifname}:{addr}<0>")
        elif setup.net == "Socket":
            if setup.fabric == "socket":
                if self._env_shown():
                    out.append(self.env_line("NCCL_IB_DISABLE", "1"))
            else:
                out.append("NET/IB : No device found.")
            out.append(f"NET/Socket : Using [0]{ifname}:{addr}<0>")
        else:
            out += ["NET/OFI Initializing aws-ofi-nccl 1.11.0-aws", "NET/OFI Setting provider_filter to efa",
                    f"NET/OFI Selected Provider is efa (found {setup.nics} nics)"]
            if self.v.at_least(27):
                out.append("Initialized NET plugin AWS Libfabric")
        if self.v.at_least(19):
            out.append("Using non-device net plugin version 0")
        if self.v.at_least(6):
            out.append(f"Using network {setup.net}")
        return out

    def nics(self) -> list[dict]:
        """The NIC list this process printed, for the ground truth."""
        if self.setup.net == "IB":
            link = "RoCE" if self.setup.fabric == "roce" else "IB"
            return [{"index": i, "name": f"mlx5_{i}", "port": 1, "link": link} for i in range(self.setup.nics)]
        if self.setup.net == "Socket":
            return [{"index": 0, "name": self.setup.bootstrap(self.slot)[0], "port": None, "link": None}]
        return []

    # -- communicator init (3.5) -------------------------------------------------------------

    def init_start(self, comm: Comm) -> str | None:
        """``Init START`` (2.18.3+; 2.29+ lead with ``[Rank %d]``); split comms name their parent
        (3.14.7 item 4)."""
        if not self.v.at_least(18, 3):
            return None
        identity = (f"[Rank {comm.rank}] " if self.v.at_least(29) else "") + self._api(comm) + self._identity(comm)
        if comm.parent is None:
            return f"{identity} commId {comm.comm_id} - Init START"
        if self.v.at_least(23):
            # Note the missing space before "-" on the split START line in these releases.
            return f"{identity}{self._split_fields(comm)}- Init START"
        if self.v.at_least(21):
            return f"{identity} parent {comm.parent} color {comm.color} key {comm.rank} commId {comm.comm_id} - Init START"
        return f"{identity} commId {comm.comm_id} - Init START"

    def init_complete(self, comm: Comm) -> str:
        """2.4 ``nvmlDev`` without busId; 2.5-2.15 ``busId``; commId from 2.16; API name 2.21+."""
        identity = self._api(comm) + self._identity(comm)
        if comm.parent is not None and self.v.at_least(23):
            return f"{identity}{self._split_fields(comm)} - Init COMPLETE"
        if not self.v.at_least(16):
            return f"{identity} - Init COMPLETE"
        return f"{identity} commId {comm.comm_id} - Init COMPLETE"

    def printed_comm_id(self, comm: Comm) -> str | None:
        if not self.v.at_least(16) or (comm.parent is not None and self.v.at_least(23)):
            return None
        return comm.comm_id

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
        head = f"comm {comm.ptr} rank {comm.rank} nranks {comm.nranks} cudaDev {dev}"
        if not self.v.at_least(5):
            return f"{head} nvmlDev {dev}"
        return f"{head} nvmlDev {dev} busId {bus}" if self.v.at_least(18) else f"{head} busId {bus}"

    def plan(self, comm: Comm) -> CommPlan:
        return plan(tuple(comm.ranks), self.setup, self.v.minor)

    def tuning(self, comm: Comm) -> Tuning:
        p = self.plan(comm)
        return Tuning(self.v.minor, self.setup, p.nranks, p.nodes, p.per_node, self.env, self._nvls_active(comm))

    def comm_init(self, tid: int, comm: Comm, total: float, first: bool) -> list[str]:
        """Everything from NIC selection to Init COMPLETE, in the order a rank prints it."""
        v, p, out = self.v, self.plan(comm), []
        if first:
            out += self._net_init_lines()
        if self.setup.net == "AWS Libfabric" and v.at_least(27):
            out.append("Assigned NET plugin AWS Libfabric to comm")
        start = self.init_start(comm)
        if start:
            out.append(start)
        if comm.parent is not None and v.at_least(18):
            prev, nxt = (comm.rank - 1) % comm.nranks, (comm.rank + 1) % comm.nranks
            out.append(f"bootstrapSplit: rank {comm.rank} nranks {comm.nranks} color {comm.color} "
                       f"key {comm.rank} prev {prev} next {nxt} - DONE")
        elif v.at_least(23) and self.shows("BOOTSTRAP"):
            out.append("Bootstrap timings total 0.004120 (create 0.000031, send 0.000214, recv 0.002915, "
                       "ring 0.000688, delay 0.000000)")
        if first and self.setup.fabric == "roce" and self._env_shown():
            out.append(self.env_line("NCCL_IB_GID_INDEX", "3"))
        if first and self.setup.intra == "shm" and self._env_shown():
            out.append("NCCL_P2P_DISABLE set by environment to 1")
        out.append(f"Setting affinity for GPU {self.slot.local_rank} to {self._cpu_mask()}")
        out += self._p2p_disabled_lines(comm, p)
        out += self._nvls_lines(comm)
        if self.shows("GRAPH"):
            out += self._pattern_lines(comm, p)
        if v.at_least(20):
            out.append(f"comm {comm.ptr} rank {comm.rank} nRanks {comm.nranks} nNodes {p.nodes} "
                       f"localRanks {p.per_node} localRank {self.slot.local_rank} MNNVL 0")
        if comm.rank == 0:
            out += self._ring_order_lines(p)
        if self.shows("GRAPH"):
            out += self._graph_neighbour_lines(comm.rank, p)
        if v.at_least(5) or p.nodes > 1:
            out.append(self._trees_line(comm.rank, p))
        if v.at_least(16):
            out.append(f"P2P Chunksize set to {P2P_CHUNK}")
        out += self._check_p2p_line(comm, p)
        if not v.at_least(22):
            out += self.connect(comm)
        out += self._tuning_lines(comm)
        out += self._channel_counts(comm)
        if v.at_least(22) and comm.rank == 0:
            out.append("CC Off, workFifoBytes 1048576" if v.at_least(24) else "CC Off, Multi-GPU CC Off, workFifoBytes 1048576")
        if v.at_least(22):
            out.append(self._init_timings(comm, total))
        out.append(self.init_complete(comm))
        return [self.info(tid, text) for text in out]

    def _cpu_mask(self) -> str:
        return "00000000,0000ffff,ffffffff" if self.slot.local_rank < 4 else "ffffffff,ffff0000,00000000"

    def _nvls_active(self, comm: Comm) -> bool:
        """NVLS (2.17+): single-node comms of more than two GPUs; multi-node from 2.18 except 2.20."""
        p = self.plan(comm)
        if not (self.setup.nvls and self.v.at_least(17) and p.per_node > 2):
            return False
        return p.nodes == 1 or (self.v.at_least(18) and self.v.minor != 20)

    def _nvls_lines(self, comm: Comm) -> list[str]:
        """3.14.4: ``(NVLS_NCHANNELS %d)`` in 2.27-2.29 only; 2.30 adds the tuning line (3.14.7 item 5)."""
        if not self._nvls_active(comm):
            return []
        line = f"NVLS multicast support is available on dev {self.slot.local_rank}"
        if 27 <= self.v.minor <= 29:
            return [f"{line} (NVLS_NCHANNELS {NVLS_CHANNELS})"]
        if self.v.at_least(30):
            return [line, f"NVLS tuning: nChannels {NVLS_CHANNELS} chunkSize {P2P_CHUNK} treeMaxChunkSize 65536"]
        return [line]

    # -- tuning, thresholds, channel counts (3.6, 3.14) ---------------------------------------

    def _tuning_lines(self, comm: Comm) -> list[str]:
        """ENV echo of NCCL_ALGO/PROTO (every rank), the 2.24+ matrix and the TUNING table (rank 0),
        then the thread thresholds. A one-rank comm returns before all of it (2.5 still prints its
        ``Threads per block``; 3.14)."""
        if comm.nranks < 2:
            return ["Threads per block : 512/640/512"] if self.v.minor == 5 else []
        tuning, out = self.tuning(comm), []
        if self.shows("ENV"):
            out += tuning.env_lines()
            matrix = tuning.matrix() if comm.rank == 0 else None
            if matrix:
                out.append(matrix)
        if self.shows("TUNING") and comm.rank == 0:
            table = tuning.table()
            record = {"kind": "table", "comm": comm.key, "algorithms": list(tuning.algos),
                      "enabled": tuning.enabled_cells()}
            out += [tagged(line, tuning=record) if i == 0 else line for i, line in enumerate(table)]
        n = comm.nranks
        if not self.setup.full:
            # Compatibility: the bundled samples were written when every communicator printed the
            # world's ring-LL threshold; "rings" mode keeps those bytes, "full" prints 8 x nRanks.
            n = max(n, self.setup.world)
        if not self.v.at_least(5):
            if comm.rank == 0:
                trees = "enabled for all sizes" if self.plan(comm).nodes > 1 else "disabled"
                out.append(f"Using 256 threads, Min Comp Cap 9, Trees {trees}")
        elif self.v.minor == 5:
            out += [f"threadThresholds 8/8/64 | {8 * n}/8/64", "Threads per block : 512/640/512"]
        elif not self.v.at_least(14):
            out.append(f"threadThresholds 8/8/64 | {8 * n}/8/64 | 8/8/512")
        else:
            out.append(f"threadThresholds 8/8/64 | {8 * n}/8/64 | 512 | 512")
        return out

    def _channel_counts(self, comm: Comm) -> list[str]:
        """2.7-2.16 / 2.17-2.19 (+nvls) / 2.20+ (+collnet: the real count in 2.20, the coll count
        again from 2.21; 3.14.4 and 3.14.7 item 8)."""
        if not self.v.at_least(7):
            return []
        nvls = NVLS_CHANNELS if self._nvls_active(comm) else 0
        tail = f"{CHANNELS} p2p channels, 2 p2p channels per peer"
        if self.v.at_least(20):
            collnet = 0 if self.v.minor == 20 else CHANNELS
            return [f"{CHANNELS} coll channels, {collnet} collnet channels, {nvls} nvls channels, {tail}"]
        if self.v.at_least(17):
            return [f"{CHANNELS} coll channels, {nvls} nvls channels, {tail}"]
        return [f"{CHANNELS} coll channels, {tail}"]

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

    # -- runtime: collectives, lazy connections, teardown -----------------------------------

    def coll_line(self, comm: Comm, op: str, op_count: int, send: str, recv: str, count: int, dtype: int,
                  stream: str) -> str:
        """3.9 (COLL): one line per call, at enqueue time."""
        return (f"{op}: opCount {op_count:x} sendbuff {send} recvbuff {recv} count {count} datatype {dtype} op 0 "
                f"root 0 comm {comm.ptr} [nranks={comm.nranks}] stream {stream}")

    def decision_line(self, comm: Comm, op: str, nbytes: int) -> Emitted | None:
        """3.14.2: rank 0's per-collective choice (INFO from 2.20)."""
        text, record = self.tuning(comm).decision(op, nbytes)
        return tagged(text, tuning=dict(record, comm=comm.key)) if text else None

    def service_thread_closed(self, tid: int, local_rank: int) -> str | None:
        """The proxy service thread (2.12+) notices a local peer's death."""
        if not self.v.at_least(12):
            return None
        return self.info(tid, f"[Service thread] Connection closed by localRank {local_rank}")

    def destroy_complete(self, tid: int, comm: Comm) -> str | None:
        """``- Destroy COMPLETE`` (2.12+, 3.5)."""
        if not self.v.at_least(12):
            return None
        return self.info(tid, f"comm {comm.ptr} rank {comm.rank} nranks {comm.nranks} cudaDev "
                              f"{self.slot.local_rank} busId {self.slot.bus_id} - Destroy COMPLETE")

    def network_error(self, tid: int, peer_ip: str, port: int, local_gid: str, remote_gid: str,
                      stamp: str) -> str | None:
        """The WARN a broken link produces on this fabric (3.11); None where we know no wording."""
        if self.setup.net == "IB":
            return self.ib_completion_error(tid, peer_ip, port, local_gid, remote_gid, stamp)
        if self.setup.net == "Socket":
            return self.warn(tid, "misc/socket.cc:63", f"socketProgressOpt: Call to recv from {peer_ip}<{port}> "
                             "failed : Connection timed out", stamp, "socketProgressOpt")
        return None

    def ib_completion_error(self, tid: int, peer_ip: str, port: int, local_gid: str, remote_gid: str,
                            stamp: str, direction: str = "Send") -> str:
        """A RoCE transport-retry timeout (status 12) in the wording of this release (section 3.11)."""
        v = self.v
        if v.at_least(30):
            # 2.30's symbolic form (status=%s(%d) opcode=%s(%d) vendor_err=%u); names per ibverbs.
            message = (f"NET/IB: Got completion from peer {peer_ip}<{port}> with status=IBV_WC_RETRY_EXC_ERR(12) "
                       f"opcode=IBV_WC_SEND(0) vendor_err=129 ({direction}) localGid ::ffff:{local_gid} "
                       f"remoteGids::ffff:{remote_gid} hca mlx5_{self.slot.local_rank}")
        elif v.at_least(20):
            colon = "NET/IB:" if v.at_least(22) else "NET/IB :"
            hca = f" hca mlx5_{self.slot.local_rank}" if v.at_least(22) else ""
            message = (f"{colon} Got completion from peer {peer_ip}<{port}> with status=12 opcode=0 len=0 "
                       f"vendor err 129 ({direction}) localGid ::ffff:{local_gid} remoteGids::ffff:{remote_gid}{hca}")
        elif v.at_least(18):
            message = (f"NET/IB : Got completion from peer {peer_ip}<{port}> with error 12, opcode 0, len 0, "
                       f"vendor err 129 ({direction}) localGid ::ffff:{local_gid} remoteGid ::ffff:{remote_gid}")
        elif v.at_least(12):
            message = f"NET/IB : Got completion from peer {peer_ip}<{port}> with error 12, opcode 0, len 0, vendor err 129"
        else:
            message = "NET/IB : Got completion with error 12, opcode 0, len 0, vendor err 129"
        return self.warn(tid, "transport/net_ib.cc:1696", message, stamp, "ncclIbTest")
