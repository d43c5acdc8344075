"""L003 collective-busbw: profiled collectives move data far below what their link carries, waiting removed.

What it detects
    NCCL collectives in nsys / Kineto profiles and NCCL Inspector records (``collective_timing``)
    of 8 MB and more, per communicator and operation: the bus bandwidth of each instance's
    *shortest* kernel (``busbw_best_gbyte_s``: the last rank to arrive does not wait, so its
    kernel is the transfer alone) against the link's unidirectional rate: NVLink of the GPU
    model when every rank of the collective is on one node, the NIC line rate per GPU
    (``nic_ports``) across nodes. It fires when the median over at least 5 instances is below
    30% of that rate -- and, whatever the hardware model knows, when one communicator's median
    is below half of its peers' (the same operation, size and number of ranks on other
    communicators: one TP or DP group on a slow link).

Why it matters
    A kernel's duration includes the time its rank waits for late peers, so raw per-rank
    bandwidth blames the link for a straggler (that is P010). With the wait removed, a low
    number is the link itself: a degraded NVLink, a NIC at a lower rate, traffic on sockets or
    SHM instead of P2P/RDMA, or contention with another job.

What to do
    Compare with nccl-tests on the same nodes (``all_reduce_perf -b 8M -e 1G -f 2 -g 1``), check
    the transports NCCL chose (``NCCL_DEBUG=INFO``: P2P/NVLink, NET/IB with GDRDMA; L001 and
    N010-N013 findings) and the links (``nvidia-smi nvlink -s``, ``ibstat``).

Known false positives
    Small messages are latency-bound (below 8 MB they are not judged). Collectives that overlap
    heavy compute on the same GPU run slower by design (their SMs are shared). Without the GPU
    model or the NIC rate in the inputs the rule stays quiet. A communicator matched by kernel
    order across several process groups may mix instances (``collective_timing``'s caveat).
"""

from __future__ import annotations

import polars as pl

from postmortem.analyzer.transports import accelerator
from postmortem.parsers.base import groups_of
from postmortem.rules.perf import skew_model as sm
from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity

RULE = Rule(code="L003", name="collective-busbw", severity=Severity.WARNING, category=Category.PERF, since="0.1.0")

MIN_BYTES = 8 << 20
MIN_INSTANCES = 5
SHORTFALL = 0.3


def check(ctx: Context) -> list[Finding]:
    t = ctx.table("collective_timing")
    if t.is_empty():
        return []
    t = t.filter((pl.col("bytes") >= MIN_BYTES) & pl.col("busbw_best_gbyte_s").is_not_null())
    if t.is_empty():
        return []
    acc, acc_source = accelerator(ctx.run)
    nodes = ctx.ranks.select("rank", "node").unique("rank") if not ctx.ranks.is_empty() else None
    out = []
    for (source, key, op), rows in groups_of(t, "source", "coll_key", "op", maintain_order=True):
        inst = rows.group_by("coll_index").agg(best=pl.col("busbw_best_gbyte_s").first(), bytes=pl.col("bytes").first())
        if inst.height < MIN_INSTANCES:
            continue
        ranks = sorted(set(rows["rank"].drop_nulls().to_list()))
        hosts = sorted(set(nodes.filter(pl.col("rank").is_in(ranks))["node"].drop_nulls().to_list())) \
            if nodes is not None else []
        if not hosts:
            continue
        gpn = max(1, len(ranks) // len(hosts))
        expected, basis = sm.link_rate(ctx, acc, hosts, gpn)
        if not expected:
            continue
        med = float(inst["best"].median())
        if med >= SHORTFALL * expected:
            continue
        size = int(inst["bytes"].median())
        msg = (f"{op} on {key} ({len(ranks)} ranks, {len(hosts)} node(s), {size / 2**20:g} MB, {inst.height} "
               f"instances): median busbw {med:.1f} GB/s with the waiting time removed (each instance's shortest "
               f"kernel), {100 * med / expected:.0f}% of the {expected:g} GB/s the link carries ({basis}; GPU model "
               f"from {acc_source}).")
        out.append(RULE.finding(confidence=0.5, title=f"{op} runs at {med:.1f} GB/s busbw, far below {expected:g} GB/s",
                           message=msg, ranks=ranks, nodes=hosts, suggestion=("Run all_reduce_perf -b 8M -e 1G -f 2 -g 1 on the same nodes and compare; check "
                                       "NCCL_DEBUG=INFO transports (P2P/NVLink, NET/IB GDRDMA), nvidia-smi nvlink -s "
                                       "and ibstat."),
                           details={"source": source, "coll_key": key, "median_busbw_gbs": round(med, 2),
                                    "expected_gbs": expected, "instances": inst.height, "bytes": size}))
    return out + _peers(ctx, t, nodes, {f.details["coll_key"] for f in out})


PEER_SHORTFALL = 0.5


def _peers(ctx: Context, t: pl.DataFrame, nodes: pl.DataFrame | None, done: set) -> list[Finding]:
    """Communicators far below their peers: the same op, message size (within 2x) and rank count."""
    per = t.group_by("source", "coll_key", "op", "group_size").agg(
        med=pl.col("busbw_best_gbyte_s").median(), n=pl.col("coll_index").n_unique(), size=pl.col("bytes").median(),
        ranks=pl.col("rank").unique().sort())
    per = per.filter(pl.col("n") >= MIN_INSTANCES).with_columns(
        size_class=(pl.col("size").cast(pl.Float64).log(2)).floor())
    out = []
    for _, group in groups_of(per, "source", "op", "group_size", "size_class"):
        if group.height < 3:
            continue   # a median of peers needs at least two others
        for r in group.iter_rows(named=True):
            if r["coll_key"] in done:
                continue
            others = group.filter(pl.col("coll_key") != r["coll_key"])["med"]
            peer = float(others.median())
            if not peer or r["med"] >= PEER_SHORTFALL * peer:
                continue
            ranks = r["ranks"]
            hosts = sorted(set(nodes.filter(pl.col("rank").is_in(ranks))["node"].drop_nulls().to_list())) \
                if nodes is not None else []
            msg = (f"{r['op']} on {r['coll_key']} ({len(ranks)} ranks{', ' + ', '.join(hosts[:4]) if hosts else ''}, "
                   f"{r['size'] / 2**20:g} MB, {r['n']} instances): median busbw {r['med']:.1f} GB/s with the waiting "
                   f"removed, {100 * r['med'] / peer:.0f}% of the {peer:.1f} GB/s its {others.len()} peer "
                   f"communicator(s) of the same shape reach: its link is slower than theirs")
            out.append(RULE.finding(confidence=0.55, title=f"{r['op']} on one communicator at {r['med']:.1f} GB/s, "
                               f"its peers at {peer:.1f} GB/s", message=msg, ranks=list(ranks), nodes=hosts, suggestion=("Check that communicator's links: NCCL_DEBUG=INFO transports of its ranks "
                                           "(SHM or sockets instead of P2P/RDMA, GDR off), nvidia-smi nvlink -s, ibstat "
                                           "on its nodes; compare nccl-tests on its GPUs with a peer's."),
                               details={"check": "peers", "source": r["source"], "coll_key": r["coll_key"],
                                        "median_busbw_gbs": round(r["med"], 2), "peers_median_gbs": round(peer, 2),
                                        "instances": r["n"], "bytes": int(r["size"])}))
    return out
