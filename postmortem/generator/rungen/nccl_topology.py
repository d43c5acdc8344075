"""Rings, trees and transports of one communicator: who connects to whom, over what.

``NcclSetup`` holds the job's hardware and NCCL settings (the ``nccl_*`` fields of the RunSpec);
``plan`` turns a communicator's members into per-channel rings, trees and the connections
(``Hop``) NCCL sets up for them (``docs/formats/nccl.md`` sections 3.6-3.7 and 5.3). A plan is the
same on every rank of the communicator, so it is computed once (cached) and each rank prints
its own share of it (``NcclLog``).

Model of the hardware:

* Inside a node the GPUs talk over NVLink P2P (``nvlink``; ``P2P/CUMEM`` from 2.18 unless cuMem is
  off, ``P2P/IPC`` before; ``/read`` from 2.7), PCIe P2P (``pcie``: no ``/read``; ``direct``:
  ``P2P/direct pointer``), shared memory (``shm``: NCCL_P2P_DISABLE=1), or a two-island NVLink
  mesh (``indirect``: GPUs in different halves that are not each other's partner go through the
  partner, ``P2P/indirect/k``). ``shm_node`` is a node whose GPUs cannot P2P at all.
* Across nodes: NET over ``roce``/``ib`` (one mlx5 NIC per GPU, ``NET/IB``), sockets (``socket``:
  IB disabled by NCCL_IB_DISABLE=1; ``socket-nodev``: hosts without IB devices), or the AWS OFI
  plugin (``ofi``: one EFA NIC per two GPUs, ``NET/AWS Libfabric``). PXN sends a ring's
  outgoing data through the NIC of the GPU the ring entered the node at (rail-optimised).
* Rings: ``rings`` mode (the default) runs every channel through the ranks in rank order;
  ``full`` mode makes channel ``c`` enter each node at local GPU ``c % g`` and traverse the
  node upwards on even channels and downwards on odd ones, connects trees (the hops rings do
  not already have) and, from 2.12, a few lazy point-to-point connections (connection index 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise

from .base import Slot

CHANNELS = 8                       # coll channels per communicator
P2P_CHANNELS = (0, 1)              # the channels a lazy point-to-point connection is made on
FABRICS = ("roce", "ib", "socket", "socket-nodev", "ofi")
INTRA = ("nvlink", "pcie", "direct", "shm", "indirect")
CONNECTIONS = ("rings", "full")
SUBSYSTEMS = ("INIT", "COLL", "P2P", "SHM", "NET", "GRAPH", "TUNING", "ENV", "ALLOC", "CALL", "PROXY", "NVLS",
              "BOOTSTRAP", "REG", "PROFILE", "RAS")
NET_NAMES = {"roce": "IB", "ib": "IB", "socket": "Socket", "socket-nodev": "Socket", "ofi": "AWS Libfabric"}
_DEFAULT_ADDR = {"lo": "127.0.0.1", "docker0": "172.17.0.1"}


@dataclass(frozen=True)
class NcclSetup:
    """The hardware and NCCL settings every process of the job shares (hashable, for the cache)."""

    gpus_per_node: int = 8
    fabric: str = "roce"
    gdr: bool = True
    pxn: bool = False
    intra: str = "nvlink"
    cumem: bool = True
    shm_node: int | None = None
    bootstrap_if: tuple[tuple[int, str], ...] = ()     # (node, "ifname" or "ifname:addr")
    nvls: bool = False
    connections: str = "rings"
    subsys: str | None = None                          # None: the version's default mask
    env: tuple[tuple[str, str], ...] = ()
    world: int = 0                                     # ranks in the job (see NcclLog._tuning_lines)

    @property
    def net(self) -> str:
        return NET_NAMES[self.fabric]

    @property
    def gdr_on(self) -> bool:
        return self.gdr and self.net != "Socket"

    @property
    def full(self) -> bool:
        return self.connections == "full"

    @property
    def nics(self) -> int:
        if self.net == "IB":
            return self.gpus_per_node
        return 1 if self.net == "Socket" else max(1, self.gpus_per_node // 2)

    def nic_of(self, local_rank: int) -> int:
        return local_rank * self.nics // self.gpus_per_node

    def bootstrap(self, slot: Slot) -> tuple[str, str]:
        """(interface, address) this node bootstraps on (and uses for OOB and sockets)."""
        for node, value in self.bootstrap_if:
            if node == slot.node:
                name, _, addr = value.partition(":")
                if name == "eth0" and not addr:
                    addr = slot.ip
                return name, addr or _DEFAULT_ADDR.get(name, f"192.168.{1 + slot.node % 250}.11")
        return "eth0", slot.ip

    def p2p_capable(self, node: int) -> bool:
        return self.intra != "shm" and node != self.shm_node

    def mask(self, minor: int) -> frozenset[str]:
        """NCCL_DEBUG_SUBSYS as NCCL reads it; the default depends on the release (section 1.3)."""
        default = "INIT" if minor <= 15 else "INIT,ENV" if minor <= 22 else "INIT,BOOTSTRAP,ENV"
        invert, names = subsys_names(self.subsys or default)
        if "ALL" in names:
            names = set(SUBSYSTEMS)
        return frozenset(set(SUBSYSTEMS) - names if invert else names)


def subsys_names(text: str) -> tuple[bool, set[str]]:
    """(inverted, names) of an NCCL_DEBUG_SUBSYS value: a comma list, ``^`` inverts it."""
    text = text.replace(" ", "")
    return text.startswith("^"), {name.upper() for name in text.lstrip("^").split(",") if name}


@dataclass(frozen=True)
class Hop:
    """One connection NCCL sets up: ``src`` sends to ``dst`` (communicator ranks) on ``channel``."""

    kind: str                  # "ring" | "tree" | "p2p"
    channel: int
    conn: int                  # connection index: 0 rings/trees, 1 point-to-point
    src: int
    dst: int
    transport: str             # "P2P" | "SHM" | "NET"
    p2p: str | None = None     # P2P flavour: "CUMEM/read", "IPC/read", "IPC", "direct pointer", "indirect"
    via: int | None = None     # P2P/indirect: the intermediate GPU's rank
    refused: bool = False      # SHM because these GPUs could not P2P (the shm node)
    send_nic: int | None = None
    recv_nic: int | None = None
    pxn: int | None = None     # PXN: the rank whose GPU's NIC carries the data
    gdr: bool = False
    shared: bool = False


@dataclass(frozen=True)
class CommPlan:
    slots: tuple[Slot, ...]
    rings: tuple[tuple[int, ...], ...]             # per channel: ring order, starting at rank 0
    node_orders: tuple[tuple[tuple[int, ...], ...], ...]   # per channel, per node: ranks in ring order
    trees: tuple[tuple[int, tuple[int, ...]], ...]  # per rank: (up, downs); -1 = none
    hops: tuple[Hop, ...]                          # ring hops, then tree hops, then p2p hops

    @property
    def nranks(self) -> int:
        return len(self.slots)

    @property
    def nodes(self) -> int:
        return len({s.node for s in self.slots})

    @property
    def per_node(self) -> int:
        return sum(1 for s in self.slots if s.node == self.slots[0].node)

    def neighbours(self, channel: int, rank: int) -> tuple[int, int]:
        ring = self.rings[channel]
        i = ring.index(rank)
        return ring[i - 1], ring[(i + 1) % len(ring)]

    def node_order(self, channel: int, node: int) -> tuple[int, ...]:
        return next(order for order in self.node_orders[channel] if self.slots[order[0]].node == node)

    def of(self, kind: str) -> list[Hop]:
        return [h for h in self.hops if h.kind == kind]


def tree(rank: int, nranks: int, per_node: int) -> tuple[int, tuple[int, ...]]:
    """(up, downs): a chain inside each node, the node heads in a binary tree (``Trees`` line)."""
    node, local = divmod(rank, per_node)
    nodes = nranks // per_node
    if local > 0:
        return rank - 1, ((rank + 1,) if local < per_node - 1 else ())
    up = ((node - 1) // 2) * per_node if node > 0 else -1
    downs = [rank + 1] if per_node > 1 else []
    downs += [child * per_node for child in (2 * node + 1, 2 * node + 2) if child < nodes]
    return up, tuple(downs)


def _local_order(g: int, channel: int, full: bool) -> list[int]:
    if not full or g == 1:
        return list(range(g))
    entry, step = channel % g, (1 if channel % 2 == 0 else -1)
    return [(entry + step * i) % g for i in range(g)]


def _nvlinked(a: int, b: int, g: int) -> bool:
    """Two NVLink islands of g/2 GPUs; GPU i of one island is wired to GPU i of the other."""
    half = g // 2
    return g < 4 or a // half == b // half or abs(a - b) == half


@lru_cache(maxsize=64)
def plan(slots: tuple[Slot, ...], setup: NcclSetup, minor: int) -> CommPlan:
    nranks = len(slots)
    groups: list[list[int]] = []
    for rank, slot in enumerate(slots):
        if not groups or slots[groups[-1][0]].node != slot.node:
            groups.append([])
        groups[-1].append(rank)
    rings, node_orders = [], []
    for channel in range(CHANNELS):
        orders = tuple(tuple(group[i] for i in _local_order(len(group), channel, setup.full)) for group in groups)
        cycle = [rank for order in orders for rank in order]
        start = cycle.index(0)
        rings.append(tuple(cycle[start:] + cycle[:start]))
        node_orders.append(orders)
    per_node = len(groups[0])
    trees = tuple(tree(rank, nranks, per_node) for rank in range(nranks))
    links = _Links(slots, setup, minor)
    hops: list[Hop] = []
    if nranks > 1:
        for channel, ring in enumerate(rings):
            for i, src in enumerate(ring):
                hops.append(links.hop("ring", channel, src, ring[(i + 1) % nranks], node_orders[channel]))
        if setup.full:
            hops += _tree_hops(trees, hops, links, node_orders)
            if minor >= 12:
                hops += _p2p_hops(groups, links, node_orders)
    return CommPlan(slots, tuple(rings), tuple(node_orders), trees, tuple(hops))


def _tree_hops(trees, ring_hops: list[Hop], links: _Links, node_orders) -> list[Hop]:
    """Both directions of every tree edge, minus the hops the rings already connected (section 3.7)."""
    done = {(h.channel, h.src, h.dst) for h in ring_hops}
    hops = []
    for channel in range(CHANNELS):
        for rank, (up, downs) in enumerate(trees):
            for peer in ([up] if up >= 0 else []) + list(downs):
                if (channel, rank, peer) not in done:
                    done.add((channel, rank, peer))
                    hops.append(links.hop("tree", channel, rank, peer, node_orders[channel]))
    return hops


def _p2p_hops(groups: list[list[int]], links: _Links, node_orders) -> list[Hop]:
    """Lazy send/recv connections: a pipeline to the next node, or (one node) to the next GPU."""
    pairs = []
    if len(groups) > 1:
        for here, there in pairwise(groups):
            pairs += list(zip(here, there))
    else:
        group = groups[0]
        pairs = [(rank, group[(i + 1) % len(group)]) for i, rank in enumerate(group) if len(group) > 1]
    return [links.hop("p2p", channel, src, dst, node_orders[channel]) for src, dst in pairs for channel in P2P_CHANNELS]


class _Links:
    """Which transport a hop uses, and through which NICs."""

    def __init__(self, slots: tuple[Slot, ...], setup: NcclSetup, minor: int):
        self.slots, self.setup, self.minor = slots, setup, minor
        self.by_local = {(s.node, s.local_rank): rank for rank, s in enumerate(slots)}

    def hop(self, kind: str, channel: int, src: int, dst: int, orders) -> Hop:
        conn = 1 if kind == "p2p" else 0
        a, b = self.slots[src], self.slots[dst]
        if a.node != b.node:
            return self._net(kind, channel, conn, src, dst, orders)
        setup = self.setup
        if not setup.p2p_capable(a.node):
            return Hop(kind, channel, conn, src, dst, "SHM", refused=a.node == setup.shm_node)
        g = setup.gpus_per_node
        if setup.intra == "indirect" and not _nvlinked(a.local_rank, b.local_rank, g):
            partner = self.by_local.get((a.node, (a.local_rank + g // 2) % g))
            if partner is not None:
                return Hop(kind, channel, conn, src, dst, "P2P", p2p="indirect", via=partner)
        return Hop(kind, channel, conn, src, dst, "P2P", p2p=self._flavour())

    def _flavour(self) -> str:
        """The text after ``P2P/`` (section 3.7: ``/read`` from 2.7, ``CUMEM`` from 2.18)."""
        if self.setup.intra == "direct":
            return "direct pointer"
        memory = "CUMEM" if self.minor >= 18 and self.setup.cumem else "IPC"
        nvlink = self.setup.intra in ("nvlink", "indirect")
        return f"{memory}/read" if nvlink and self.minor >= 7 else memory

    def _net(self, kind: str, channel: int, conn: int, src: int, dst: int, orders) -> Hop:
        setup = self.setup
        a, b = self.slots[src], self.slots[dst]
        send_nic, pxn = setup.nic_of(a.local_rank), None
        if kind == "ring" and setup.pxn and setup.p2p_capable(a.node):
            entry = next(order for order in orders if self.slots[order[0]].node == a.node)[0]
            if entry != src:
                pxn, send_nic = entry, setup.nic_of(self.slots[entry].local_rank)
        return Hop(kind, channel, conn, src, dst, "NET", send_nic=send_nic, recv_nic=setup.nic_of(b.local_rank),
                   pxn=pxn, gdr=setup.gdr_on, shared=kind == "p2p")
