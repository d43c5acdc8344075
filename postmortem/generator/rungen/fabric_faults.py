"""A flapping NIC port (``RunSpec.node_fault="link-flap"``): the fabric side of the all-stuck story.

One node's NIC (``mlx5_<flap_nic>``, the NIC of local GPU ``flap_nic``) loses its link just before
the hung collective and comes back a few seconds later, twice. Every queue pair on that port
runs out of transport retries (RoCE/IB completion status 12, section 3.11 of docs/formats/nccl.md):

* the flapping node's rank on that NIC reports both of its ring neighbours (the next node, on
  the send side, and the previous node, on the receive side) as peers;
* the neighbours' ranks on the same NIC index report the flapping node as their peer.

So with three or more nodes the flapping node is the one endpoint shared by every failing pair;
with two nodes there is one pair and only the kernel log says which side flapped. The kernel
lines (``mlx5_core <pci> <netdev>: Link down`` / ``Link up``) go into that node's dmesg and
journal (``node_logs.write_node_logs``). Variation comes from its own random stream, so the
other scenarios' bytes do not change.
"""

from __future__ import annotations

import random

from .base import jitter

FLAP_DOWN = (-0.6, 31.0)        # seconds after the hang starts
FLAP_UP = (2.4, 33.7)


def flap_node(spec, cluster) -> int:
    node = getattr(spec, "flap_node", None)
    return cluster.nodes // 2 if node is None else node


def flap_nic(spec) -> int:
    nic = getattr(spec, "flap_nic", None)
    return 1 if nic is None else nic


def nic_device(nic: int) -> tuple[str, str]:
    """(PCI address, netdev) of ``mlx5_<nic>`` as node_logs writes them at boot."""
    return f"0000:{0x1f + 0x20 * nic:02x}:00.0", f"ens{12 + nic}f0np0"


def gid(nic: int, node: int) -> str:
    return f"10.30.{nic}.{11 + node}"


def kernel_events(spec, cluster, t_hang: float) -> tuple[int, list[tuple[float, str]], dict]:
    """The flapping node, its kernel lines (job time, text) and the ground truth."""
    node, nic = flap_node(spec, cluster), flap_nic(spec)
    pci, netdev = nic_device(nic)
    events = []
    for down, up in zip(FLAP_DOWN, FLAP_UP):
        events += [(t_hang + down, f"mlx5_core {pci} {netdev}: Link down"),
                   (t_hang + up, f"mlx5_core {pci} {netdev}: Link up")]
    truth = {"kind": "link-flap", "host": cluster.hosts[node], "node": node, "nic": f"mlx5_{nic}", "pci": pci,
             "netdev": netdev, "flaps": len(FLAP_DOWN)}
    return node, events, truth


def link_flap_warns(story, attempt, t_hang: float) -> None:
    """Completion errors (status 12) on the flapping NIC's ranks and on their peers' (see above)."""
    spec, cluster = story.spec, story.cluster
    if not spec.nccl_debug:
        return
    rng = random.Random(f"link-flap-{spec.seed}")
    node, nic = flap_node(spec, cluster), flap_nic(spec)
    gpn = cluster.gpus_per_node
    after, before = (node + 1) % cluster.nodes, (node - 1) % cluster.nodes
    story.truth["fault_host"] = cluster.hosts[node]
    # (reporting node, peer node, direction): each side of each failing queue pair
    sides = [(node, after, "Send"), (after, node, "Recv")]
    if before != after:
        sides += [(node, before, "Recv"), (before, node, "Send")]
    for reporter, peer, direction in sides:
        proc = attempt.procs[reporter * gpn + nic]
        nlog = story.nlog(proc)
        t = t_hang + jitter(rng, 8, 25)
        warn = nlog.ib_completion_error(proc.tids["proxy"], cluster.slots[peer * gpn].ip, rng.randrange(32768, 61000),
                                        gid(nic, reporter), gid(nic, peer), story.clock.megatron(t),
                                        direction=direction) if nlog.setup.net == "IB" else None
        if warn:
            story._nccl_out(proc, t, [warn])
