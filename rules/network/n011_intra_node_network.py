"""N011 intra-node-network: GPUs of one node talk to each other through the network stack.

What it detects
    Hops between two ranks on the same host that NCCL connected ``via NET/...`` (sockets or
    IB loopback) instead of P2P or shared memory. The host of a rank comes from the hop lines
    themselves (and the init lines when present), so an excerpt without init lines still
    shows which hops stay on one host.

Why it matters
    It means NCCL could use neither P2P nor SHM between those GPUs: every byte goes through
    the network stack (or the NIC's loopback) of one host, far below SHM, let alone NVLink.
    The ring through that hop runs at that speed.

What to do
    Run the ranks of a node in one container (or with a shared IPC namespace and /dev/shm:
    docker --ipc=host, a large enough --shm-size), make every GPU visible to each process
    (CUDA_VISIBLE_DEVICES listing the node's GPUs), and unset NCCL_P2P_DISABLE and
    NCCL_SHM_DISABLE. Check with NCCL_DEBUG=INFO that the hops show P2P or SHM.

Known false positives
    A deliberately isolated set-up (one container per GPU with NCCL_SHM_DISABLE=1 for a
    test) shows the same hops; the message names the environment settings NCCL echoed.
    When the host of one side is not in the logs the hop is not counted.
"""

from __future__ import annotations

import polars as pl

from postmortem.rules.network import transport_model as tm
from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity

RULE = Rule(code="N011", name="intra-node-network", severity=Severity.WARNING, category=Category.PERF, since="0.1.0")


def check(ctx: Context) -> list[Finding]:
    f = tm.fabric(ctx)
    if f.hops.is_empty():
        return []
    rows = f.hops.filter(pl.col("same_host").fill_null(False) & (pl.col("transport") == "NET"))
    if rows.is_empty():
        return []
    nodes = sorted(rows["src_host"].drop_nulls().unique().to_list())
    pairs = tm.gpu_pairs(rows)
    nets = sorted({n for n in rows["net"].drop_nulls().to_list()}) or ["NET"]
    keys = ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_P2P_LEVEL")
    settings = sorted({f"{k}={s['value'][0]}" for node in nodes for k in keys
                       if not (s := tm.env_settings(ctx, k, node)).is_empty()})
    shm = tm.price("SHM", f.acc)
    nvl = tm.nvlink_price(f.acc)
    better = f"SHM alone would give {tm.gbs(shm)}" if shm.gbyte_s else "SHM or P2P would be several times faster"
    if nvl is not None and nvl.gbyte_s:
        better += f", {f.acc['nvlink']} P2P {tm.gbs(nvl)}"
    ranks = tm.global_ranks(f, rows)
    per_node = ", ".join(f"{n}: {rows.filter(pl.col('src_host') == n).height}" for n in nodes[:6])
    message = (f"{rows.height} hop(s) between GPUs of one host go through the network ({'/'.join(nets)}) instead of "
               f"P2P or SHM ({per_node}{' ...' if len(nodes) > 6 else ''}; {tm.pair_text(pairs)}): "
               f"{tm.price('NET on one host', f.acc).basis}; {better}"
               + (f"; set by environment: {', '.join(settings)}" if settings else ""))
    where = nodes[0] if len(nodes) == 1 else f"{len(nodes)} nodes"
    evidence = []
    for node in nodes[:3]:
        evidence += tm.evidence_of(ctx, rows.filter(pl.col("src_host") == node), "same host, via the network", 1)
    return [RULE.finding(confidence=0.8, title=f"{where}: intra-node hops through the network", message=message,
        ranks=ranks, nodes=nodes, gpus=tm.gpus_of(ctx, ranks), evidence=evidence,
        suggestion=("On these nodes: run each node's ranks in one container or with a shared IPC namespace "
                    "(docker --ipc=host, enough --shm-size), let each process see all the node's GPUs, unset "
                    "NCCL_P2P_DISABLE / NCCL_SHM_DISABLE; confirm with NCCL_DEBUG=INFO that the hops show P2P or SHM."),
        culprit=True,
        details={"nodes": nodes, "hops": rows.height, "gpu_pairs": [list(p) for p in pairs], "net": nets,
                 "settings": settings})]
