"""L005 rdma-below-line-rate: a NIC's perftest bandwidth (ib_send_bw, ib_write_bw, ib_read_bw) is far below its line rate.

What it detects
    perftest bandwidth runs (``perftest_results``), per host, device and run: the best
    ``BW average`` over message sizes of 64 KB and up (all sizes when the run has none), per
    direction (a bidirectional ``-b`` run reports the sum of both), converted to Gb/s (perftest's
    MB/sec is 2^20 bytes), against the port's line rate from ``ibstat`` on the same host (same
    device, else the same device elsewhere in the job, else the job's usual port rate). It fires
    below half the line rate; healthy RDMA reaches 90-97% of it. Without any NIC rate, a run below
    half of the median of the job's other runs of the same test fires instead.

Why it matters
    Data-parallel gradient traffic crosses the NICs; one slow NIC slows every ring through it and
    the whole job runs at its pace. perftest is the check engineers run per NIC before nccl-tests.

What to do
    On RoCE (``Link type : Ethernet``): check PFC and ECN on the NIC and the switch port
    (``mlnx_qos -i <if>``, pause and CNP counters in ``ethtool -S``), the GID index (RoCE v2 is
    usually index 3: ``show_gids``, ``-x``, ``NCCL_IB_GID_INDEX``), the traffic class/priority mapped
    to the lossless queue (``--tclass``/``-T``, ``NCCL_IB_TC``) and the MTU (4096 for RDMA, jumbo
    frames on the interface). On InfiniBand: the port's width and speed (``ibstat``, ``iblinkinfo``:
    a 4X link trained at 1X), symbol errors and congestion at the switch, the MTU. On both: the
    NIC's PCIe link (``lspci -vv`` LnkSta width and speed), running on the NIC's NUMA node
    (``numactl``/``taskset``), and PCIe ACS/IOMMU on the path.

Known false positives
    Small messages cannot reach line rate: only 64 KB and up are judged. A run with several QPs
    or a duration (``-D``) is judged the same way. A NIC whose rate the inputs do not give is
    priced at the job's usual port rate, said in the finding; a job mixing 200G and 400G ports
    with only one ibstat needs that ibstat per host.
"""

from __future__ import annotations

import polars as pl

from postmortem.parsers.base import groups_of
from postmortem.rules.linkbench import linkbench_model as lm
from postmortem.rules.base import Context, Finding, with_columns
from postmortem.rules.declare import Category, Rule, Severity

RULE = Rule(code="L005", name="rdma-below-line-rate", severity=Severity.WARNING, category=Category.NETWORK, since="0.1.0")

SHORT = 0.5
LARGE = 65536


def check(ctx: Context) -> list[Finding]:
    res = ctx.table("perftest_results")
    if res.is_empty() or "kind" not in res.columns:
        return []
    res = with_columns(lm.placed(ctx, res.filter(pl.col("kind") == "bw")), bidirectional=pl.Boolean, device=pl.String,
                       link_type=pl.String, test=pl.String, verb=pl.String, mtu=pl.Int64, gid_index=pl.Int64,
                       side=pl.String)
    res = res.filter(pl.col("bw_avg_gbit").is_not_null())
    if res.is_empty():
        return []
    best = []
    for _key, rows in groups_of(res, "place", "input_id", "run", maintain_order=True):
        large = rows.filter(pl.col("size_bytes") >= LARGE)
        pick = (large if not large.is_empty() else rows).sort("bw_avg_gbit", descending=True).row(0, named=True)
        pick["per_dir"] = pick["bw_avg_gbit"] / (2 if pick["bidirectional"] else 1)
        best.append(pick)
    by_test: dict[str, list[float]] = {}
    for b in best:
        by_test.setdefault(b["verb"] or "", []).append(b["per_dir"])
    out = []
    for b in best:
        rate, basis, port = lm.nic_rate(ctx, b["place"], b["device"])
        if rate is None:
            peers = by_test.get(b["verb"] or "", [])
            if len(peers) < 3:
                continue
            rate = float(pl.Series(peers).median())
            basis = f"the median of the job's {len(peers)} {b['verb']} runs ({rate:g} Gb/s); no NIC rate in the inputs"
        if b["per_dir"] >= SHORT * rate:
            continue
        out.append(_finding(ctx, b, rate, basis, port))
    return out


def _finding(ctx: Context, b: dict, rate: float, basis: str, port: dict | None) -> Finding:
    layer = (b["link_type"] or (port or {}).get("link_layer") or "").lower()
    roce = layer.startswith("eth")
    hints = []
    if roce:
        hints.append("On RoCE this is usually PFC/ECN not configured end to end (pause frames or CNPs missing), the wrong "
                     "GID index (RoCE v1 vs v2) or a traffic class not mapped to the lossless priority")
    else:
        hints.append("On InfiniBand this is usually a port trained at a lower width or speed, switch congestion or "
                     "symbol errors")
    if b["mtu"] and b["mtu"] < 4096:
        hints.append(f"the run used MTU {b['mtu']} (4096 is usual for RDMA)")
    hints.append("on both: the NIC's PCIe width/speed and the NUMA node the test ran on")
    gid = f", GID index {b['gid_index']}" if b["gid_index"] is not None else ""
    per = " per direction (bidirectional run, half the reported sum)" if b["bidirectional"] else ""
    msg = (f"{b['test'] or b['verb']} on {b['device'] or '?'} ({b['place'] or '?'}, {b['side'] or '?'} side"
           f"{gid}, MTU {b['mtu'] or '?'}, link {b['link_type'] or '?'}) averaged {b['per_dir']:.1f} Gb/s{per} at "
           f"{b['size_bytes']} B: {100 * b['per_dir'] / rate:.0f}% of the {rate:g} Gb/s line rate ({basis}); "
           f"healthy RDMA reaches 90-97%. " + "; ".join(hints) + ".")
    node = b.get("node")
    return RULE.finding(confidence=0.75 if port else 0.6,
                   title=f"{b['device'] or 'NIC'} on {b['place'] or '?'} at {b['per_dir']:.0f} Gb/s, "
                   f"{100 * b['per_dir'] / rate:.0f}% of its {rate:g} Gb/s line rate",
                   message=msg, nodes=[node] if node else [], evidence=[ctx.evidence(b["input_id"], b["line_no"], f"{b['bw_avg']:g} {b['unit']} average")],
                   suggestion=("RoCE: check PFC/ECN (mlnx_qos, ethtool -S pause/CNP counters), the GID index (show_gids; "
                               "RoCE v2 is usually 3), the traffic class (NCCL_IB_TC) and MTU 4096; IB: ibstat/iblinkinfo "
                               "width and speed, switch port errors; both: lspci -vv LnkSta of the NIC, numactl to its "
                               "NUMA node. Drain the host until ib_write_bw reaches line rate."),
                   details={"device": b["device"], "place": b["place"], "measured_gbit": round(b["per_dir"], 2),
                            "expected_gbit": rate, "fraction": round(b["per_dir"] / rate, 3), "basis": basis,
                            "link_type": b["link_type"], "mtu": b["mtu"], "gid_index": b["gid_index"],
                            "bidirectional": b["bidirectional"], "size_bytes": b["size_bytes"]})
