"""N014 mixed-nic-sets: the nodes of one job have different RDMA NIC sets.

What it detects
    Nodes of the same job whose NCCL processes listed a different set of RDMA NICs
    (``NET/IB : Using [0]mlx5_0:1/RoCE ...``: another count, other names, another link layer),
    or whose ibstat / ibv_devinfo show a different number of active ports or different port
    rates. Each group of nodes is named with its set.

Why it matters
    NCCL builds its rings and channels from the NICs each node reports; nodes with fewer NICs
    (or slower ones) cap every ring through them, and different HCA sets across nodes have
    led to hangs at init or in the first collective (NVIDIA/nccl#1277, #2428; NCCL 2.30 refuses
    mixed NIC counts unless NCCL_IGNORE_NET_MISMATCH=1).

What to do
    Bring the odd nodes to the same NIC set: check their ports (ibstat: State Active,
    Rate), cables and firmware; make NCCL_IB_HCA select the same set on every node; or
    exclude the odd nodes from the job (the hostlist is in the message).

Known false positives
    Different NIC names that point at the same fabric (mlx5_0..7 on one node, mlx5_2..9 on
    another, or a bonded device) are harmless: when only the names differ the finding is
    information, not a warning. A port that went down during the job is also reported by the
    link-flap rules.
"""

from __future__ import annotations

import polars as pl

from postmortem.parsers.base import groups_of
from postmortem.rules.network import transport_model as tm
from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity

RULE = Rule(code="N014", name="mixed-nic-sets", severity=Severity.WARNING, category=Category.NETWORK, since="0.1.0")


def check(ctx: Context) -> list[Finding]:
    findings = []
    nccl = _nccl_sets(ctx)
    if nccl is not None:
        findings.append(nccl)
    ports = _port_sets(ctx, tm.fabric(ctx))
    if ports is not None:
        findings.append(ports)
    return findings


def _groups(sets: dict[str, tuple]) -> dict[tuple, list[str]]:
    groups: dict[tuple, list[str]] = {}
    for node, key in sorted(sets.items()):
        groups.setdefault(key, []).append(node)
    return groups


def _describe(groups: dict[tuple, list[str]], show) -> str:
    parts = sorted(groups.items(), key=lambda kv: -len(kv[1]))
    return "; ".join(f"{', '.join(nodes[:4])}{' ...' if len(nodes) > 4 else ''} ({len(nodes)} node(s)): {show(key)}"
                     for key, nodes in parts)


def _minority(groups: dict[tuple, list[str]]) -> list[str]:
    biggest = max(len(n) for n in groups.values())
    majority = [k for k, n in groups.items() if len(n) == biggest]
    if len(majority) > 1:
        return sorted(n for ns in groups.values() for n in ns)
    return sorted(n for k, ns in groups.items() if k != majority[0] for n in ns)


def _nccl_sets(ctx: Context) -> Finding | None:
    procs = ctx.table("nccl_processes")
    if procs.is_empty():
        return None
    rdma = procs.filter((pl.col("network").fill_null("") != "Socket") & (pl.col("nics").list.len() > 0))
    sets = {host: tuple(sorted(set(n for row in rows["nics"].to_list() for n in row)))
            for (host,), rows in groups_of(rdma, "host")}
    if len(sets) < 2:
        return None
    groups = _groups(sets)
    if len(groups) < 2:
        return None
    shapes = {(len(k), tuple(sorted({n.rsplit("/", 1)[-1] for n in k}))) for k in groups}
    names_only = len(shapes) == 1
    odd = _minority(groups)
    net = ctx.table("nccl_net")
    lists = net.filter(pl.col("kind") == "ib_nics") if not net.is_empty() else None
    lines = lists.filter(pl.col("host").is_in(odd)) if lists is not None else pl.DataFrame()
    others = lists.filter(~pl.col("host").is_in(odd)) if lists is not None else pl.DataFrame()
    message = ("NCCL listed different RDMA NIC sets per node: "
               + _describe(groups, lambda k: f"{len(k)} NIC(s) {', '.join(k[:4])}{' ...' if len(k) > 4 else ''}")
               + ("; only the names differ (same count and link layer): likely the same fabric under other names"
                  if names_only else "; rings through the nodes with fewer or other NICs are capped by them"))
    return RULE.finding(severity=Severity.INFO if names_only else Severity.WARNING, confidence=0.4 if names_only else 0.7,
                   title="nodes with different NIC sets (NCCL's NIC list)", message=message, nodes=odd,
                   evidence=tm.evidence_of(ctx, lines, "NIC list of an odd node", 2)
                   + tm.evidence_of(ctx, others, "NIC list of the other nodes", 1),
                   suggestion=_SUGGESTION, culprit=False,
                   details={"sets": {", ".join(k): v for k, v in groups.items()}, "names_only": names_only})


def _port_sets(ctx: Context, f: tm.Fabric) -> Finding | None:
    ports = f.ports
    if ports.is_empty() or "state" not in ports.columns:
        return None
    active = ports.filter(pl.col("state").fill_null("").str.to_lowercase().str.contains("active"))
    if active.is_empty():
        return None
    per = active.unique(["node", "ca", "port"]).group_by("node").agg(
        n=pl.len(), rates=pl.col("rate_gbps").drop_nulls().sort())
    sets = {r["node"]: (r["n"], tuple(r["rates"])) for r in per.iter_rows(named=True)}
    nodes_with_ports = set(ports["node"].unique().to_list())
    for node in nodes_with_ports - set(sets):
        sets[node] = (0, ())
    if len(sets) < 2:
        return None
    groups = _groups(sets)
    if len(groups) < 2:
        return None
    odd = _minority(groups)
    def show(k: tuple) -> str:
        return f"{k[0]} active port(s)" + (f" at {'/'.join(f'{r:g}' for r in sorted(set(k[1])))} Gb/s" if k[1] else "")

    message = ("ibstat/ibv_devinfo show different active RDMA ports per node: " + _describe(groups, show)
               + "; NCCL uses the ports each node has, and the slowest node caps every ring through it")
    rows = active.filter(pl.col("node").is_in(odd))
    return RULE.finding(confidence=0.6, title="nodes with different active RDMA ports (ibstat)", message=message, nodes=odd,
                   evidence=tm.evidence_of(
                       ctx, rows if not rows.is_empty() else ports.filter(pl.col("node").is_in(odd)),
                       "ports of an odd node", 2),
                   suggestion=_SUGGESTION, culprit=False,
                   details={"sets": {f"{k[0]} ports {list(k[1])}": v for k, v in groups.items()}})


_SUGGESTION = ("Give every node the same NIC set: check the odd nodes' ports (ibstat: State Active, Rate), cables and "
               "firmware, make NCCL_IB_HCA select the same devices everywhere, or exclude the odd nodes from the job.")
