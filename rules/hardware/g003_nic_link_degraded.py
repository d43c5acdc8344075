"""G003 nic-link-degraded: a NIC port of the job runs below its peers' rate, or is down while NCCL uses it.

What it detects
    ``ibstat`` ports (``Rate``) and ``iblinkinfo`` host links (width x lane speed) that are
    Active but slower than the same kind of port elsewhere in the job: the same adapter
    model (``CA type``) and link layer on the same or the other nodes, at the rate most of
    them run. A 4X link that came up as 1X, or a 400G port at 200G, is a degraded link. A
    port that is ``Down`` (ibstat, or ``PORT_DOWN`` in ``ibv_devinfo``) is reported only when
    NCCL on that node listed it among the NICs it uses (``NET/IB : Using [0]mlx5_0:1/RoCE``).

Why it matters
    NCCL spreads rings over the NICs; one slow port slows every ring through it, so the
    whole job runs at that port's rate. A Down port that NCCL was told to use is a
    connection error or a silent fallback waiting to happen.

What to do
    On the node: ``ibstat DEV`` / ``mlxlink -d DEV -m`` (cable, FEC, the negotiated speed),
    ``ethtool IFACE`` for RoCE; reseat or replace the cable/transceiver; compare with the
    switch port. Until fixed, exclude the node or pin ``NCCL_IB_HCA`` to the healthy NICs.

Known false positives
    Ports of different adapters (a 100G frontend/storage ConnectX-6 Dx next to 400G ConnectX-7
    compute NICs) are not compared with each other. A Down or disabled port that the job
    does not use (a second port of a dual-port card, an unused NIC) is not a fault, and its
    printed rate (often ``10``) means nothing. Switch-internal links and a SHARP aggregation
    node running faster than host links are not host links and are not compared.
"""

from __future__ import annotations

from collections import Counter

import polars as pl

from postmortem.analyzer import commands
from postmortem.parsers.base import groups_of
from postmortem.rules.base import Context, Finding, with_columns
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.hardware.hw_model import job_nodes

RULE = Rule(code="G003", name="nic-link-degraded", severity=Severity.WARNING, category=Category.HARDWARE, since="0.1.0")


def _used_nics(ctx: Context) -> dict[str, set[str]]:
    """node -> {"mlx5_0:1", ...}: the NICs NCCL on that node said it uses."""
    procs = ctx.table("nccl_processes")
    out: dict[str, set[str]] = {}
    if procs.is_empty() or "nics" not in procs.columns:
        return out
    for host, nics in procs.select("host", "nics").iter_rows():
        if not host or not nics:
            continue
        node = host.split(".")[0]
        for nic in nics:
            name = nic.split("/")[0]
            out.setdefault(node, set()).add(name if ":" in name else f"{name}:1")
    return out


def check(ctx: Context) -> list[Finding]:
    findings = _ports(ctx) + _links(ctx)
    return sorted(findings, key=lambda f: (f.nodes, f.title))


def _ports(ctx: Context) -> list[Finding]:
    ports = ctx.table("nic_ports")
    if ports.is_empty() or not {"ca", "state", "rate_gbps", "node"} <= set(ports.columns):
        return []
    # ibstat, ibv_devinfo and sysfs each fill only some of these: read as unknown when absent.
    ports = with_columns(ports, ca_type=pl.String, vendor_part_id=pl.String, link_layer=pl.String, port=pl.Int64,
                         source=pl.String)
    # ibdev2netdev's Up/Down is the IP interface's, not the port's (G005 reads it)
    ports = ports.filter(pl.col("ca").is_not_null() & pl.col("node").is_not_null()
                         & (pl.col("source").fill_null("") != "ibdev2netdev"))
    nodes = job_nodes(ctx)
    if nodes:
        ports = ports.filter(pl.col("node").is_in(sorted(nodes)))
    if ports.is_empty():
        return []
    kind = pl.coalesce(pl.col("ca_type"), pl.col("vendor_part_id").map_elements(
        lambda v: f"MT{v}", return_dtype=pl.String), pl.lit("?"))
    ports = ports.with_columns(_kind=kind, _layer=pl.col("link_layer").fill_null("?"),
                               _port=pl.col("port").fill_null(1))
    # ibstat and ibv_devinfo both list a port: one row per (node, ca, port), ibstat (which has the rate) first
    ports = ports.sort(pl.col("rate_gbps").is_null(), "input_id", "line_no").unique(
        ["node", "ca", "_port"], keep="first", maintain_order=True)
    used = _used_nics(ctx)
    out = []
    active = ports.filter((pl.col("state") == "Active") & pl.col("rate_gbps").is_not_null())
    for (kind_name, layer), group in groups_of(active, "_kind", "_layer"):
        counts = Counter(group["rate_gbps"].to_list())
        ranked = counts.most_common(2)
        usual, n = ranked[0]
        if n < 2 or (len(ranked) > 1 and ranked[1][1] == n):
            continue  # nothing tells which rate is the usual one
        for r in group.filter(pl.col("rate_gbps") < usual).iter_rows(named=True):
            nic = f"{r['ca']}:{r['_port']}"
            nccl = nic in used.get(r["node"], set())
            message = (f"{r['node']} {nic} ({kind_name}, {layer}) is Active at {r['rate_gbps']:g} Gb/s; {n} other "
                       f"{kind_name} {layer} port(s) of the job run at {usual:g} Gb/s."
                       + (" NCCL on this node uses this NIC: every ring through it runs at its rate." if nccl else ""))
            out.append(_finding(ctx, r, f"NIC {nic} on {r['node']} at {r['rate_gbps']:g} of {usual:g} Gb/s", message,
                                0.75 if nccl else 0.6, {"ca": r["ca"], "port": r["_port"], "rate_gbps": r["rate_gbps"],
                                                        "peers_rate_gbps": usual, "peers": n, "used_by_nccl": nccl}))
    down = ports.filter(pl.col("state").is_not_null() & (pl.col("state") != "Active"))
    for r in down.iter_rows(named=True):
        nic = f"{r['ca']}:{r['_port']}"
        if nic not in used.get(r["node"], set()):
            continue  # a port the job does not use: not a fault by itself
        phys = f" ({r['physical_state']})" if r.get("physical_state") else ""
        message = (f"{r['node']} {nic} is {r['state']}{phys}"
                   + ", but NCCL on this node listed it among the NICs it uses: connections over it fail or fall back.")
        out.append(_finding(ctx, r, f"NIC {nic} on {r['node']} is {r['state']} but NCCL uses it", message, 0.7,
                            {"ca": r["ca"], "port": r["_port"], "state": r["state"], "used_by_nccl": True}))
    return out


def _finding(ctx: Context, r: dict, title: str, message: str, confidence: float, details: dict) -> Finding:
    dev = commands.shown(r["ca"], commands.device)
    host = commands.shown(r["node"], commands.host)
    return RULE.finding(confidence=confidence, title=title, message=message, nodes=[r["node"]],
                   evidence=[ctx.evidence(r["input_id"], r["line_no"],
                                          note=f"{r.get('source') or 'ibstat'} port block")],
                   suggestion=(f"On {r['node']}: `{commands.sh('ibstat', dev)}` and `{commands.sh('mlxlink', '-d', dev, '-m')}` "
                               f"(negotiated speed, FEC, cable); reseat or replace the cable/transceiver; until then "
                               f"exclude the node (`{commands.sh('--exclude=' + host)}`) or leave {r['ca']} out of "
                               "NCCL_IB_HCA."),
                   culprit=False, details=details)


def _links(ctx: Context) -> list[Finding]:
    """iblinkinfo host links (the CA side, which prints its GUID): width and lane speed vs the other hosts'."""
    links = ctx.table("ib_links")
    if links.is_empty() or not {"guid", "width", "lane_gbps", "state"} <= set(links.columns):
        return []
    host = links.filter(pl.col("guid").is_not_null() & (pl.col("state") == "Active")
                        & ~pl.col("device").fill_null("").str.contains("(?i)aggregation|switch"))
    if host.height < 3:
        return []
    out = []
    width_n = host["width"].str.extract(r"(\d+)", 1).cast(pl.Int64)
    host = host.with_columns(_w=width_n)
    usual_w, n_w = Counter(host["_w"].to_list()).most_common(1)[0]
    usual_l, n_l = Counter(host["lane_gbps"].to_list()).most_common(1)[0]
    for r in host.iter_rows(named=True):
        bad = []
        if n_w >= 2 and r["_w"] is not None and r["_w"] < usual_w:
            bad.append(f"{r['width']} wide (the other host links: {usual_w}X)")
        if n_l >= 2 and r["lane_gbps"] is not None and r["lane_gbps"] < usual_l:
            bad.append(f"{r['lane_gbps']:g} Gb/s per lane (the other host links: {usual_l:g})")
        if not bad:
            continue
        node = (r.get("device") or "?").split(" ")[0]
        message = f"iblinkinfo: {r.get('device')} port {r.get('port')} is Active but {' and '.join(bad)}."
        title = f"IB link of {r.get('device')} degraded: {', '.join(bad)}"
        out.append(RULE.finding(confidence=0.65, title=title, message=message, nodes=[node],
                           evidence=[ctx.evidence(r["input_id"], r["line_no"], note="iblinkinfo link line")],
                           suggestion=(f"On {node}: `mlxlink -d <dev> -m` and the switch port's counters "
                                       "(`perfquery`); reseat or replace the cable."),
                           culprit=False,
                           details={"width": r["width"], "lane_gbps": r["lane_gbps"], "usual_width": usual_w,
                                    "usual_lane_gbps": usual_l}))
    return out
