"""The topology and connection lines of one process (``docs/formats/nccl.md`` sections 3.6-3.7).

``ChannelLines`` is the part of ``nccl.NcclLog`` that prints what a communicator's plan
(``nccl_topology``) says: ring order, trees, GRAPH search results, P2P capability lines and
the per-channel ``Ring``/``Channel ... via ...`` connection lines in every release's shape.
It expects ``self.v`` (NcclVersion), ``self.setup``, ``self.slot``, ``self.plan(comm)`` and
``self._nvls_active(comm)`` from ``NcclLog``.

``Emitted`` strings carry the ground-truth record of the line they are (a connection or a
tuning line) through to ``nccl_truth``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Slot
from .nccl_topology import CHANNELS, CommPlan, Hop

if TYPE_CHECKING:
    from .nccl import Comm


class Emitted(str):
    """A message NCCL prints, with the ground-truth record of a connection or tuning line."""

    conn: dict | None = None
    tuning: dict | None = None


def tagged(text: str, conn: dict | None = None, tuning: dict | None = None) -> Emitted:
    out = Emitted(text)
    out.conn, out.tuning = conn, tuning
    return out


class ChannelLines:
    """Ring, tree, GRAPH and connection lines; mixed into ``NcclLog``."""

    # -- P2P capability (3.7) -----------------------------------------------------------------

    def _p2p_disabled_lines(self, comm: Comm, p: CommPlan) -> list[str]:
        """3.7 capability lines (2.12+, topology time) for the GPUs this rank could not P2P with."""
        if not self.v.at_least(12):
            return []
        peers = sorted({h.dst for h in p.hops if h.src == comm.rank and h.refused})
        return [f"P2P is disabled between connected GPUs {self.slot.local_rank} and {comm.ranks[peer].local_rank}. "
                "You can repress this message with NCCL_IGNORE_DISABLED_P2P=1." for peer in peers]

    def _p2p_refused_line(self, comm: Comm, hop: Hop) -> str:
        """3.7: before 2.12 the P2P transport says why at each connection it refuses."""
        a, b = comm.ranks[hop.src], comm.ranks[hop.dst]
        if not self.v.at_least(7):
            return f"peer query failed between dev {a.local_rank}(={a.local_rank}) and dev {b.local_rank}(={b.local_rank})"
        return f"Could not enable P2P between dev {a.local_rank}(={a.bus_id}) and dev {b.local_rank}(={b.bus_id})"

    # -- topology lines (3.6) ---------------------------------------------------------------

    def _pattern_lines(self, comm: Comm, p: CommPlan) -> list[str]:
        """GRAPH (2.5+): the ring and tree search results, one ``%2d :`` path per channel."""
        if not self.v.at_least(5):
            return []
        setup, node = self.setup, self.slot.node
        if not setup.p2p_capable(node):
            intra, bw = "SYS", 5.0
        else:
            intra, bw = {"pcie": ("PXB", 12.0), "direct": ("PXB", 12.0)}.get(setup.intra, ("NVL", 40.0))
        inter = "PXN" if setup.pxn else "SYS" if setup.net == "Socket" else "PIX"
        if p.nodes > 1:
            bw = min(bw, 1.2 if setup.net == "Socket" else 24.0)
        speed = "bw" if self.v.at_least(18) else "speed"
        lines = []
        for pattern, graph in ((4, "ring"), (1, "tree")):
            same = 0 if graph == "ring" and setup.full else 1
            lines.append(f"Pattern {pattern}, crossNic 0, nChannels {CHANNELS}, {speed} {bw:f}/{bw:f}, "
                         f"type {intra}/{inter}, sameChannels {same}")
            for channel in range(CHANNELS):
                order = p.node_order(channel, node) if graph == "ring" else \
                    tuple(r for r, s in enumerate(p.slots) if s.node == node)
                gpus = "".join(f" GPU/{rank}" for rank in order)
                if p.nodes > 1:
                    nic_in = setup.nic_of(p.slots[order[0]].local_rank)
                    nic_out = nic_in if setup.pxn else setup.nic_of(p.slots[order[-1]].local_rank)
                    gpus = f" NET/{nic_in}{gpus} NET/{nic_out}"
                lines.append(f"{channel:2d} :{gpus}")
        return lines

    def _ring_order_lines(self, p: CommPlan) -> list[str]:
        """Rank 0 lists each ring: 2.4 ``Channel %02d :``; 2.5-2.22 ``Channel %02d/%02d :`` with
        ``%3d`` per rank, at most 20; 2.23+ one space, width of nranks-1, cut at 128 chars."""
        lines = []
        for channel, ring in enumerate(p.rings):
            if not self.v.at_least(5):
                lines.append(f"Channel {channel:02d} : " + "".join(f" {r:3d}" for r in ring[:20]))
                continue
            head = f"Channel {channel:02d}/{CHANNELS:02d} :"
            if self.v.at_least(23):
                width = len(str(p.nranks - 1))
                text = f"{head} " + " ".join(f"{r:{width}d}" for r in ring)
                lines.append(text if len(text) <= 128 else text[:124] + " ...")
            else:
                lines.append(head + " " + "".join(f" {r:3d}" for r in ring[:20]))
        return lines

    def _graph_neighbour_lines(self, rank: int, p: CommPlan) -> list[str]:
        """GRAPH: ``Ring %02d : prev -> me -> next`` (2.10+), ``Tree %d : up -> me -> downs`` (2.8+)."""
        lines = []
        if self.v.at_least(10):
            lines += [f"Ring {c:02d} : {prev} -> {rank} -> {nxt}"
                      for c in range(CHANNELS) for prev, nxt in [p.neighbours(c, rank)]]
        if self.v.at_least(8):
            up, downs = p.trees[rank]
            d = (list(downs) + [-1, -1, -1])[:3]
            lines += [f"Tree {c} : {up} -> {rank} -> {d[0]}/{d[1]}/{d[2]}" for c in range(CHANNELS)]
        return lines

    def _trees_line(self, rank: int, p: CommPlan) -> str:
        """``Trees [c] ...``: 2.4 up->me->downs; 2.5-2.7 treeUp|treeDn; 2.8+ downs->me->up."""
        up, downs = p.trees[rank]
        d = "/".join(str(x) for x in (list(downs) + [-1, -1, -1])[:3])
        if not self.v.at_least(5):
            body = f"{up}->{rank}->{d}"
        elif not self.v.at_least(8):
            body = f"{d}->{rank}->{up}|{up}->{rank}->{d}"
        else:
            body = f"{d}->{rank}->{up}"
        return "Trees" + "".join(f" [{c}] {body}" for c in range(CHANNELS))

    def _check_p2p_line(self, comm: Comm, p: CommPlan) -> list[str]:
        """3.14.7 item 3: 2.24-2.26 / 2.27 rank 0 only; 2.28+ every rank with isAllCudaP2p."""
        if not self.v.at_least(24) or (comm.rank != 0 and not self.v.at_least(28)):
            return []
        direct = int(all(self.setup.p2p_capable(s.node) for s in p.slots))
        if self.v.minor <= 26:
            return [f"Check P2P Type intraNodeP2pSupport {direct} directMode 0"]
        if self.v.minor == 27:
            return [f"Check P2P Type isAllDirectP2p {direct} directMode 0"]
        return [f"Check P2P Type isAllDirectP2p {direct} directMode 0 isAllCudaP2p {direct}"]

    # -- connections (3.7) ------------------------------------------------------------------

    def connect(self, comm: Comm) -> list[str]:
        """Ring hops, ``Connected all rings``, tree hops, ``Connected all trees`` (markers 2.8+).
        Part of init before 2.22; from 2.22 made at the first collective (``NCCL_RUNTIME_CONNECT``)."""
        if comm.nranks < 2:
            return []
        out = self.connection_lines(comm, "ring")
        if self.v.at_least(8):
            rings = self.plan(comm).of("ring")
            pxn = int(any(h.pxn is not None for h in rings))
            gdr = int(all(h.gdr for h in rings if h.transport == "NET"))
            out.append(f"Connected all rings, use ring PXN {pxn} GDR {gdr}"
                       if self.v.at_least(24) else "Connected all rings")
        out += self.connection_lines(comm, "tree")
        if self.v.at_least(8):
            out.append("Connected all trees")
        if self._nvls_active(comm) and self.v.at_least(18) and self.plan(comm).nodes > 1:
            out.append("Connected NVLS tree")
        return out

    def connection_lines(self, comm: Comm, kind: str) -> list[str]:
        """This rank's lines for one kind of hop: per channel its NET receives, then its sends.
        P2P/SHM are printed by the sender only; NET by both sides, same orientation."""
        me, out = comm.rank, []
        hops = self.plan(comm).of(kind)
        for channel in sorted({h.channel for h in hops}):
            here = [h for h in hops if h.channel == channel]
            out += [self._conn(comm, h, "receive") for h in here if h.dst == me and h.transport == "NET"]
            for h in (h for h in here if h.src == me):
                if h.refused and not self.v.at_least(12):
                    out.append(self._p2p_refused_line(comm, h))
                out.append(self._conn(comm, h, "send" if h.transport == "NET" else None))
        return out

    def _conn(self, comm: Comm, hop: Hop, side: str | None) -> Emitted:
        """One ``Ring``/``Channel`` line in the shape of the release (the 3.7 table)."""
        v, a, b = self.v, comm.ranks[hop.src], comm.ranks[hop.dst]
        index = None
        if not v.at_least(7):
            tag = f"Ring {hop.channel:02d}"
        elif (hop.transport == "NET" and v.at_least(12)) or (hop.transport == "P2P" and v.at_least(14)):
            tag, index = f"Channel {hop.channel:02d}/{hop.conn}", hop.conn
        else:
            tag = f"Channel {hop.channel:02d}"
        if hop.transport == "NET" and not v.at_least(5):
            ranks = f"{hop.src} -> {hop.dst}"          # 2.4 NET lines carry no device field
        else:
            ranks = f"{hop.src}[{self._dev(a)}] -> {hop.dst}[{self._dev(b)}]"
        detail = net = nic = pxn = None
        if hop.transport == "NET":
            nic = hop.send_nic if side == "send" else hop.recv_nic
            pxn = hop.pxn if side == "send" else None
            net = self.setup.net
            via = f"[{side}] via NET/{net}/{nic}" + (f"({pxn})" if pxn is not None else "") + \
                ("/GDRDMA" if hop.gdr else "") + ("/Shared" if hop.shared else "")
        elif hop.transport == "P2P":
            detail = f"indirect/{hop.via}" if hop.p2p == "indirect" else hop.p2p
            target = f"{hop.via}[{self._dev(comm.ranks[hop.via])}]" if hop.p2p == "indirect" else ""
            via = f"via P2P/{detail}" if not target else f"via P2P/indirect/{target}"
        elif not v.at_least(13):
            via = "via direct shared memory"
        else:
            detail = "direct/direct" if not v.at_least(30) else "direct"
            via = f"via SHM/{detail}"
        record = {"comm": comm.key, "channel": hop.channel, "conn_index": index, "kind": hop.kind,
                  "src_rank": hop.src, "dst_rank": hop.dst, "src_host": a.host, "dst_host": b.host, "side": side,
                  "transport": hop.transport, "detail": detail, "net": net, "nic": nic, "pxn_via": pxn,
                  "gdr": hop.gdr, "shared": hop.shared}
        return tagged(f"{tag} : {ranks} {via}", conn=record)

    def _dev(self, slot: Slot) -> str:
        """``rank[dev]``: the device index in 2.4 and from 2.18, the bus id (hex) in 2.5-2.17."""
        return str(slot.local_rank) if not self.v.at_least(5) or self.v.at_least(18) else slot.bus_id
