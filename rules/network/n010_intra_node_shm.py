"""N010 intra-node-shm: GPUs of one node talk through host shared memory where they could use P2P.

What it detects
    Ring or tree hops between two GPUs of the same node that NCCL connected ``via SHM``
    (through host memory) instead of P2P, on a node whose hardware could do P2P: nvidia-smi
    topo -m shows NVLink (NV#) between those GPUs, the GPU model has NVLink to every GPU of
    the node (hardware.toml), or the same job's other nodes connect their GPUs with P2P. It
    names the node, the GPU pairs, NCCL's own reason when it printed one ("P2P is disabled
    between connected GPUs", "Could not enable P2P") and the bandwidth each path gives. Where
    the inputs cannot tell (no topology, unknown GPU model, no peer node), the SHM hops are
    still listed, at low confidence, as information.

Why it matters
    A ring runs at the speed of its slowest hop: one node on SHM caps every ring through it
    at host-memory speed (PCIe, device to host and back) where NVLink gives several hundred
    GB/s per direction. The job trains, only slower, so nobody notices without this.

What to do
    On the named node: look for NCCL_P2P_DISABLE / NCCL_P2P_LEVEL in its environment (NCCL's
    "set by environment" lines), run its ranks in one container with a shared IPC namespace
    (docker --ipc=host, Kubernetes shared process namespace), check ACS/IOMMU on its PCIe
    switches (lspci -vvv | grep ACSCtl; ACS off or iommu=pt) and nvidia-smi topo -p2p r; the
    Fabric Manager / NVLink state (nvidia-smi nvlink -s) when NVLink is down.

Known false positives
    SHM is NCCL's right choice on PCIe-only cards without P2P (consumer GPUs) and between GPUs
    on different CPU sockets of a PCIe system (topo -m SYS): this rule stays quiet when the
    topology says SYS between the pair or the GPU model has no NVLink, and reports the hop only
    as information when it cannot tell. A deliberately set NCCL_P2P_DISABLE for debugging is
    still reported (the message names it).
"""

from __future__ import annotations

import polars as pl

from postmortem.rules.network import transport_model as tm
from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity

RULE = Rule(code="N010", name="intra-node-shm", severity=Severity.WARNING, category=Category.PERF, since="0.1.0")


def check(ctx: Context) -> list[Finding]:
    f = tm.fabric(ctx)
    hops = f.hops
    if hops.is_empty():
        return []
    intra = hops.filter(pl.col("same_host").fill_null(False))
    shm = intra.filter(pl.col("transport") == "SHM")
    if shm.is_empty():
        return []
    p2p_hosts = set(intra.filter(pl.col("transport") == "P2P")["src_host"].drop_nulls().to_list())
    findings = []
    for node in sorted(shm["src_host"].drop_nulls().unique().to_list()):
        finding = _node_finding(ctx, f, node, shm.filter(pl.col("src_host") == node), p2p_hosts)
        if finding is not None:
            findings.append(finding)
    return findings


def _node_finding(ctx: Context, f: tm.Fabric, node: str, rows: pl.DataFrame, p2p_hosts: set[str]) -> Finding | None:
    pairs = tm.gpu_pairs(rows)
    links = {p: f.gpu_link(node, *p) for p in pairs}
    nv_pairs = [p for p, link in links.items() if link and link.startswith("NV")]
    sys_pairs = [p for p, link in links.items() if link == "SYS"]
    peers = sorted(p2p_hosts - {node})
    same_node_p2p = node in p2p_hosts
    strong = []
    if nv_pairs:
        strong.append(f"nvidia-smi topo -m on {node} shows {links[nv_pairs[0]]} (NVLink) between GPU{nv_pairs[0][0]} "
                      f"and GPU{nv_pairs[0][1]}")
    if f.acc_nvlink:
        strong.append(f"the {f.acc['name']} has {f.acc['nvlink']} to every GPU of a node ({f.acc_source})")
    if peers:
        strong.append(f"the job's other node(s) {', '.join(peers[:3])}{' ...' if len(peers) > 3 else ''} connect "
                      f"their GPUs with P2P")
    pcie_only = f.acc is not None and not f.acc.get("nvlink")
    expected = not strong and (bool(sys_pairs) and len(sys_pairs) == len(pairs) or pcie_only)
    if expected:
        return None  # PCIe-only cards, or GPUs across CPU sockets: SHM is NCCL's right choice
    refusals = _refusals(ctx, node)
    disabled = tm.env_settings(ctx, "NCCL_P2P_DISABLE", node)
    level = tm.env_settings(ctx, "NCCL_P2P_LEVEL", node)
    shm_price = tm.price("SHM", f.acc)
    could = tm.nvlink_price(f.acc) if (nv_pairs or f.acc_nvlink or peers) else None
    ranks = tm.global_ranks(f, rows)
    cost = f"SHM goes through host memory ({tm.gbs(shm_price)} at best: {shm_price.basis})"
    if could is not None and could.gbyte_s:
        cost += f" where {f.acc['nvlink']} P2P gives {tm.gbs(could)}"
    why = []
    if not disabled.is_empty():
        why.append(f"NCCL_P2P_DISABLE={disabled['value'][0]} is set in its environment")
    if not level.is_empty():
        why.append(f"NCCL_P2P_LEVEL={level['value'][0]} is set in its environment")
    if not refusals.is_empty():
        why.append(f"NCCL says: {refusals['message'][0]}")
    message = (f"{rows.height} intra-node hop(s) on {node} run on SHM ({tm.pair_text(pairs)}); {cost}"
               + (f"; {'; '.join(strong)}" if strong else "")
               + (f"; {'; '.join(why)}" if why else ""))
    evidence = tm.evidence_of(ctx, rows, "hop via SHM", 2)
    evidence += tm.evidence_of(ctx, refusals, "NCCL: why P2P was not used", 1)
    evidence += tm.evidence_of(ctx, disabled, "P2P disabled by environment", 1)
    if nv_pairs and node in f.topo_line:
        evidence.append(ctx.evidence(*f.topo_line[node], note="nvidia-smi topo -m of this node"))
    if strong:
        severity, culprit = Severity.WARNING, True
        confidence = min(0.9, 0.55 + 0.15 * len(strong))
        title = f"{node}: GPUs lost P2P, intra-node hops run on SHM"
    else:
        severity, culprit, confidence = Severity.INFO, False, 0.35
        title = f"{node}: intra-node hops on SHM"
        message += ("; the inputs do not say whether these GPUs can use P2P (no topo -m for the pair, GPU model "
                    "unknown, no other node to compare): SHM is right between CPU sockets on a PCIe system or on "
                    "cards without P2P, and slow if P2P is blocked (ACS/IOMMU, NCCL_P2P_DISABLE, separate containers)")
        if same_node_p2p:
            message += ("; other GPU pairs of this node do use P2P, so these pairs likely cross a CPU socket or "
                        "PCIe root")
        halves = _bus_halves(ctx, node)
        if halves:
            message += (f"; this node's GPUs sit in two PCI bus ranges ({halves}), as on a two-socket system: "
                        "a hop between them crosses the CPU interconnect, where NCCL picks SHM by design on PCIe GPUs")
    suggestion = (f"On {node}: unset NCCL_P2P_DISABLE / NCCL_P2P_LEVEL if set; run its ranks in one container with "
                  "--ipc=host (shared IPC namespace); check ACS/IOMMU on its PCIe switches (lspci -vvv | grep ACSCtl; "
                  "disable ACS or boot with iommu=pt) and nvidia-smi topo -p2p r / nvidia-smi nvlink -s. "
                  "Then confirm with NCCL_DEBUG=INFO that the hops show P2P.")
    return RULE.finding(severity=severity, confidence=confidence, title=title, message=message, ranks=ranks, nodes=[node],
                   gpus=tm.gpus_of(ctx, ranks), evidence=evidence, suggestion=suggestion, culprit=culprit,
                   details={"node": node, "hops": rows.height, "gpu_pairs": [list(p) for p in pairs],
                            "topo_links": {f"GPU{a}-GPU{b}": v for (a, b), v in links.items() if v},
                            "shm_gbyte_s": shm_price.gbyte_s, "p2p_gbyte_s": could.gbyte_s if could else None,
                            "p2p_evidence": strong, "nccl_reason": why})


def _refusals(ctx: Context, node: str) -> pl.DataFrame:
    events = ctx.table("events")
    if events.is_empty() or "kind" not in events.columns:
        return pl.DataFrame()
    host = pl.col("host") if "host" in events.columns else pl.col("node")
    return events.filter((pl.col("kind") == "p2p_unavailable") & (host == node))


def _bus_halves(ctx: Context, node: str) -> str | None:
    """``4f-56 and ce-d5`` when the node's GPUs (NCCL's init lines) lie on both sides of bus 0x80."""
    members = ctx.table("nccl_members")
    if members.is_empty():
        return None
    pcis = members.filter(pl.col("host") == node)["pci"].drop_nulls().to_list()
    buses = sorted({int(p.split(":")[1], 16) for p in pcis if p.count(":") == 2})
    low, high = [b for b in buses if b < 0x80], [b for b in buses if b >= 0x80]
    if not low or not high:
        return None
    return f"buses {low[0]:02x}-{low[-1]:02x} and {high[0]:02x}-{high[-1]:02x}"
