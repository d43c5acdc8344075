"""``truth["nccl"]``: what the NCCL output of a run says, recorded while the story writes it.

Every NCCL message goes through ``NcclTruth.emit``, which remembers the physical line it became;
``finish`` then walks the lines that survived (a process that dies drops what it would have
printed later) and counts them, and collects the records that connection and tuning lines
carry (``nccl.Emitted``). Communicators, rings and per-process network facts are recorded when
they are created. Covers every attempt of the run: ``printed_by``/``pid`` tell them apart.

Counting rule for ``lines``: prefixed INFO/WARN lines and bare ``NCCL version`` lines; not the
empty line before a WARN, nor the prefix-less continuation lines of a multi-line message (the
2.24+ ``Enabled NCCL Func/Proto/Algo Matrix:`` block).
"""

from __future__ import annotations

from .base import Line, Proc
from .nccl import Comm, NcclLog
from .nccl_topology import CHANNELS


class NcclTruth:
    def __init__(self, version: str):
        self.version = version
        self.comms: list[dict] = []
        self.rings: list[dict] = []
        self.net: list[dict] = []
        self._written: dict[int, tuple[Line, str]] = {}      # id(line) -> (line, the message it starts)

    def emit(self, proc: Proc, t: float, text: str) -> None:
        """Print one NCCL message on ``proc`` and remember the line it starts with."""
        before = len(proc.lines)
        proc.out(t, text)
        first = next((line for line in proc.lines[before:] if line.text), None)
        if first is not None:
            self._written[id(first)] = (first, text)

    def process(self, nlog: NcclLog) -> None:
        ifname, addr = nlog.setup.bootstrap(nlog.slot)
        self.net.append({"host": nlog.slot.host, "pid": nlog.pid,
                         "network": nlog.setup.net if nlog.v.at_least(6) else None,
                         "bootstrap_if": ifname, "bootstrap_addr": addr, "nics": nlog.nics()})

    def comm(self, nlog: NcclLog, comm: Comm, pids: dict[int, int]) -> None:
        """One communicator (``comm`` as rank 0 sees it); ``pids``: global rank -> pid."""
        self.comms.append({"key": comm.key, "comm_id": nlog.printed_comm_id(comm), "nranks": comm.nranks,
                           "members": [{"rank": r, "global_rank": s.rank, "host": s.host, "pid": pids[s.rank],
                                        "cuda_dev": s.local_rank, "bus_id": s.bus_id}
                                       for r, s in enumerate(comm.ranks)]})
        if comm.nranks > 1:
            rings = nlog.plan(comm).rings
            self.rings += [{"comm": comm.key, "channel": c, "order": list(rings[c])} for c in range(CHANNELS)]

    def finish(self, procs: list[Proc]) -> dict:
        lines, connections, tuning = 0, [], []
        for proc in procs:
            for line in proc.lines:
                entry = self._written.get(id(line))
                if entry is None or entry[0] is not line:
                    continue
                lines += 1
                text = entry[1]
                by = {"host": proc.slot.host, "pid": proc.pid}
                if getattr(text, "conn", None):
                    connections.append(dict(text.conn, printed_by=by))
                if getattr(text, "tuning", None):
                    tuning.append(dict(text.tuning, printed_by=by))
        return {"version": self.version, "lines": lines, "comms": self.comms, "rings": self.rings,
                "connections": connections, "net": self.net, "tuning": tuning}
