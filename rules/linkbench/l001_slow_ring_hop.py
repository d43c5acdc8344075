"""L001 slow-ring-hop: a communicator's rings are capped by a hop far below what its hardware gives.

What it detects
    Per NCCL communicator, the slowest hop of its rings (a ring runs at its slowest hop),
    priced with the hardware model, compared with what that hop's GPUs could use: NVLink P2P
    between GPUs of a node that has it (topo -m NV#, the GPU model's NVLink, or the job's other
    nodes using P2P), the RDMA NIC's line rate between nodes that have RDMA NICs. It fires when
    the slowest hop runs on SHM, on the network inside one host, on sockets, or on PCIe P2P where
    NVLink exists, and the hardware could give at least twice as much. One finding lists the
    communicators affected, their slowest hop and both prices.

Why it matters
    Ring all-reduce and all-gather move every byte through every hop: the slowest hop sets
    the bus bandwidth of the whole communicator, so one slow hop slows every collective on it.

What to do
    Fix the hop's transport (the N010-N013 finding on the same node says how: NCCL_P2P_LEVEL,
    container IPC, ACS, unset NCCL_IB_DISABLE), then compare nccl-tests busbw with the price
    given here.

Known false positives
    In a multi-node communicator the slowest hop is normally the network hop (RDMA at the NIC's
    rate): that is the expected bottleneck, and the rule stays quiet for it. Hops whose bandwidth
    the inputs cannot price (unknown GPU model, no NIC rate) are compared by tier only, at lower
    confidence. SHM across CPU sockets on PCIe-only systems is not slower than what the hardware
    allows and is not reported.
"""

from __future__ import annotations

import polars as pl

from postmortem.analyzer.nccl_model import TIER_ORDER
from postmortem.rules.network import transport_model as tm
from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity

RULE = Rule(code="L001", name="slow-ring-hop", severity=Severity.WARNING, category=Category.PERF, since="0.1.0")

SLOW_TIERS = {"SHM", "Socket", "NET on one host", "PCIe P2P"}


def check(ctx: Context) -> list[Finding]:
    f = tm.fabric(ctx)
    hops = f.hops
    if hops.is_empty():
        return []
    # P2P/SHM hops are printed once, at ring setup: without phase markers (old releases, an excerpt
    # without rank 0's ring line) an unmarked hop is taken as a ring hop.
    ring = hops.filter((pl.col("phase") == "ring") | pl.col("phase").is_null())
    if ring.is_empty():
        return []
    p2p_hosts = set(hops.filter(pl.col("same_host").fill_null(False) & (pl.col("transport") == "P2P"))["src_host"]
                    .drop_nulls().to_list())
    rdma = _rdma_rate(ctx, f)
    capped = []
    # Each ring's slowest hop, all rings at once; only rings capped by a slow tier are looked at
    # one by one (NVLink, or the network hop: the expected bottleneck of a multi-node ring).
    worst_of = (ring.lazy().sort("tier_order", descending=True, maintain_order=True)
                .group_by("comm_key", maintain_order=True).first()
                .filter(pl.col("tier").is_in(list(SLOW_TIERS))).collect(engine="in-memory"))
    by_key = ring.partition_by("comm_key", as_dict=True, maintain_order=True)   # a null key too
    for worst in worst_of.iter_rows(named=True):
        key, tier = worst["comm_key"], worst["tier"]
        rows = by_key[(key,)]
        could = _could(f, worst, p2p_hosts, rdma)
        if could is None:
            continue
        could_label, could_price = could
        actual = tm.price(tier, f.acc)
        if actual.gbyte_s and could_price.gbyte_s and could_price.gbyte_s < 2 * actual.gbyte_s:
            continue
        slow = rows.filter(pl.col("tier") == tier)
        capped.append({"comm_key": key, "tier": tier, "hop": worst, "hops": slow, "actual": actual,
                       "could": could_label, "could_price": could_price,
                       "channels": slow["channel"].n_unique(),
                       "nodes": sorted(set(slow["src_host"].drop_nulls().to_list()))})
    if not capped:
        return []
    capped.sort(key=lambda c: (-TIER_ORDER.get(c["tier"], 9), c["comm_key"]))
    top = capped[0]
    h = top["hop"]
    nodes = sorted({n for c in capped for n in c["nodes"]})
    where = (f"{h['src_host']} GPU{h['src_gpu']} -> GPU{h['dst_gpu']}" if h["same_host"]
             else f"{h['src_host']} -> {h['dst_host']}")
    actual_text = tm.gbs(top["actual"]) if top["actual"].gbyte_s else top["actual"].basis
    message = (f"{len(capped)} communicator(s) have rings capped by a {top['tier']} hop (e.g. {top['comm_key']}: "
               f"ring hop {h['src_rank']}->{h['dst_rank']}, {where}, on {top['channels']} channel(s)): it runs at "
               f"{actual_text} where {top['could']} gives {tm.gbs(top['could_price'])}; every collective on these "
               f"rings moves at that hop's speed")
    priced = bool(top["actual"].gbyte_s or top["could_price"].gbyte_s)
    ranks = sorted({r for c in capped for r in tm.global_ranks(f, c["hops"])})
    return [RULE.finding(confidence=0.75 if priced else 0.5, title=f"rings capped by a {top['tier']} hop", message=message,
                    ranks=ranks, nodes=nodes,
                    evidence=tm.evidence_of(ctx, top["hops"], f"slowest ring hop ({top['tier']})", 2),
                    suggestion=("Fix that hop's transport (see the N010-N013 finding on the same node: unset "
                                "NCCL_P2P_DISABLE/NCCL_P2P_LEVEL, --ipc=host, ACS off, unset NCCL_IB_DISABLE), then "
                                "compare nccl-tests busbw with the bandwidth above."),
                    culprit=False,
                    details={"communicators": [{"comm_key": c["comm_key"], "tier": c["tier"], "channels": c["channels"],
                                                "nodes": c["nodes"], "gbyte_s": c["actual"].gbyte_s,
                                                "could": c["could"], "could_gbyte_s": c["could_price"].gbyte_s}
                                               for c in capped]})]


def _could(f: tm.Fabric, hop: dict, p2p_hosts: set[str], rdma: float | None):
    """(what the hop's hardware offers, its price), or None when the hardware offers nothing better."""
    if hop["same_host"]:
        link = f.gpu_link(hop["src_host"], hop["src_gpu"], hop["dst_gpu"])
        peers = hop["tier"] != "PCIe P2P" and bool(p2p_hosts - {hop["src_host"]})
        nvlink = (link or "").startswith("NV") or f.acc_nvlink or peers
        if link == "SYS" and not f.acc_nvlink:
            return None
        if nvlink:
            p = tm.nvlink_price(f.acc)
            return (f"{f.acc['nvlink']} P2P" if f.acc else "NVLink/P2P (as on the job's other nodes)",
                    p if p is not None else tm.price("NVLink", None))
        if hop["tier"] in ("SHM", "NET on one host") and link in ("PIX", "PXB", "PHB", "NODE"):
            return "PCIe P2P", tm.price("PCIe P2P", f.acc)
        return None
    if hop["tier"] == "Socket" and rdma:
        return f"the {rdma:g} Gb/s RDMA NIC", tm.price("RoCE GDR", f.acc, rdma)
    return None


def _rdma_rate(ctx: Context, f: tm.Fabric) -> float | None:
    if not f.ports.is_empty() and "rate_gbps" in f.ports.columns:
        active = f.ports.filter(pl.col("state").fill_null("").str.to_lowercase().str.contains("active"))
        rates = active["rate_gbps"].drop_nulls()
        if not rates.is_empty():
            return float(rates.max())
    return None
