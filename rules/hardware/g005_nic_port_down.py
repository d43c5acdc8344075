"""G005 nic-port-down: NIC ports that are down, disabled or still training, and RDMA devices the tools could not open.

What it detects
    The state of every RDMA port the hardware tools printed: ``ibstat`` (``State: Down``,
    ``Physical state: Disabled`` / ``Polling``), ``ibv_devinfo`` (``PORT_DOWN``), ``iblinkinfo``
    (a link not ``Active/LinkUp``) and ``ibdev2netdev`` (``mlx5_3 port 1 ==> ibp3s0 (Down)``:
    the port's network interface), and infiniband-diags' own ``ibpanic:`` lines (a device that
    vanished: ``stat of IB device 'mlx5_3' failed``). Per node, how many of its ports are not up
    and which. Ports G003 already reports (down while NCCL uses them, or slower than their
    peers) are left to it.

Why it matters
    A port that is down is a NIC the job cannot use: NCCL spreads its rings over fewer NICs
    (less bandwidth), fails to connect where it was told to use it, or falls back to sockets. A
    node with most of its ports down (7 of 8 in ``ibdev2netdev``) is not fit for a multi-node
    job; an ``ibpanic`` means the device itself is gone.

What to do
    On the node: ``ibstat`` / ``mlxlink -d DEV -m`` (cable, transceiver, the switch port), the
    kernel log (``mlx5_core`` messages), and for ``ibdev2netdev`` ``ip link`` of the interface;
    exclude the node until its ports are up, or pin ``NCCL_IB_HCA`` to the healthy NICs.

Known false positives
    The second port of a dual-port card, or a NIC the job never meant to use (a storage or
    management port), is often down by design: a node with one such port among several that
    are up is reported as information only. ``ibdev2netdev``'s Up/Down is the IP interface's
    state, not the IB port's (an IB port can be Active with its IPoIB interface down); the
    message says so.
"""

from __future__ import annotations

import polars as pl

from postmortem.analyzer.ranges import hostlist
from postmortem.rules.base import Context, Finding, with_columns
from postmortem.rules.declare import Category, Rule, Severity

RULE = Rule(code="G005", name="nic-port-down", severity=Severity.WARNING, category=Category.HARDWARE, since="0.1.0")

_DOWN_STATES = {"Down", "Init", "Armed", "Disabled", "Polling"}


def check(ctx: Context) -> list[Finding]:
    out = []
    ports = with_columns(ctx.table("nic_ports"), ca=pl.String, port=pl.Int64, state=pl.String, physical_state=pl.String,
                         source=pl.String, node=pl.String, netdev=pl.String, input_id=pl.UInt32, line_no=pl.UInt32)
    reported = {(n, d.get("ca")) for f in ctx.findings if f.code == "G003" for n in f.nodes for d in [f.details]}
    if not ports.is_empty():
        ports = ports.filter(pl.col("ca").is_not_null()).with_columns(
            node=pl.col("node").fill_null("an unknown node"), port=pl.col("port").fill_null(1))
        down = (pl.col("state").is_in(list(_DOWN_STATES)) | pl.col("physical_state").is_in(["Disabled", "Polling"]))
        # (node, ca) pairs G003 reported already, as one text key each
        in_g003 = pl.concat_str([pl.col("node"), pl.lit("\x00"), pl.col("ca")]).is_in(
            [f"{n}\x00{c}" for n, c in reported if n is not None and c is not None])
        # one verdict per port of each node (nodes in the order first seen): ibstat/ibv_devinfo
        # before ibdev2netdev (the interface's state); every node's at once, not a query per node
        ports = ports.with_columns(_down=down.fill_null(False), _first=pl.int_range(pl.len()).first().over("node")).sort(
            "_first", pl.col("source") == "ibdev2netdev", "input_id", "line_no").unique(
            ["node", "ca", "port"], keep="first", maintain_order=True).with_columns(_bad=pl.col("_down") & ~in_g003)
        for rows in ports.partition_by("node", maintain_order=True):
            if rows["_bad"].any():
                out.append(_node_finding(ctx, rows["node"][0], rows, rows.filter(pl.col("_bad"))))
    links = with_columns(ctx.table("ib_links"), device=pl.String, port=pl.Int64, state=pl.String,
                         physical_state=pl.String, input_id=pl.UInt32, line_no=pl.UInt32, node=pl.String)
    if not links.is_empty():
        off = links.filter((pl.col("state").fill_null("Active") != "Active")
                           | (pl.col("physical_state").fill_null("LinkUp") != "LinkUp"))
        if not off.is_empty():
            items = sorted({f"{r['device']} port {r['port']} ({r['state']}/{r['physical_state']})"
                            for r in off.iter_rows(named=True)})
            out.append(RULE.finding(confidence=0.6, title=f"iblinkinfo: {off.height} link(s) not Active/LinkUp",
                               message=f"iblinkinfo shows {off.height} link(s) not up: {', '.join(items[:8])}",
                               evidence=[ctx.evidence(i, n, note="iblinkinfo link") for i, n in
                                         off.select("input_id", "line_no").head(2).iter_rows()],
                               suggestion=_SUGGEST, culprit=False,
                               details={"check": "iblinkinfo", "links": items, "drain": False}))
    out += _panics(ctx)
    return out


_SUGGEST = ("On the node: ibstat / mlxlink -d DEV -m (cable, transceiver, switch port), the kernel log (mlx5_core); "
            "exclude the node until its ports are up, or pin NCCL_IB_HCA to the healthy NICs.")


def _node_finding(ctx: Context, node: str, rows: pl.DataFrame, bad: pl.DataFrame) -> Finding:
    total = rows.height
    items = []
    for r in bad.iter_rows(named=True):
        state = r["state"] or "?"
        if r["physical_state"] and r["physical_state"] != state:
            state += f"/{r['physical_state']}"
        via = f" (interface {r['netdev']})" if r["source"] == "ibdev2netdev" and r["netdev"] else ""
        items.append(f"{r['ca']}:{r['port']} {state}{via}")
    only_netdev = set(bad["source"].drop_nulls().to_list()) == {"ibdev2netdev"}
    most = bad.height >= 2 and bad.height * 2 >= total
    severity = RULE.severity if most else Severity.INFO
    message = (f"{bad.height} of {total} NIC port(s) on {node} are not up: {', '.join(items[:8])}"
               + (" ..." if len(items) > 8 else "")
               + ("; ibdev2netdev's state is the IP interface's, not the IB port's" if only_netdev else "")
               + ("; most of the node's ports: it cannot carry a multi-node job at full bandwidth" if most else
                  "; the others are up (a spare or second port is often down by design)"))
    return RULE.finding(severity=severity, confidence=0.7 if most else 0.4,
                   title=f"{bad.height} of {total} NIC port(s) down on {node}", message=message,
                   nodes=[node] if node != "an unknown node" else [],
                   evidence=[ctx.evidence(i, n, note=f"{s or 'tool'}: port not up") for i, n, s in
                             bad.select("input_id", "line_no", "source").head(3).iter_rows()],
                   suggestion=_SUGGEST, culprit=False,
                   details={"check": "ports", "node": node, "down": items, "ports": total, "drain": False})


def _panics(ctx: Context) -> list[Finding]:
    events = with_columns(ctx.table("events"), kind=pl.String, detail=pl.String, device=pl.String, node=pl.String,
                          input_id=pl.UInt32, line_no=pl.UInt32)
    if events.is_empty():
        return []
    panics = events.filter(pl.col("kind") == "ibpanic")
    if panics.is_empty():
        return []
    # the tool's own line has no host: the node of the ports the same output listed
    ports = with_columns(ctx.table("nic_ports"), input_id=pl.UInt32, node=pl.String)
    if not ports.is_empty():
        of_input = ports.drop_nulls(["input_id", "node"]).group_by("input_id").agg(_n=pl.col("node").first())
        panics = panics.join(of_input, on="input_id", how="left").with_columns(node=pl.coalesce("node", "_n")).drop("_n")
    nodes = sorted(set(panics["node"].drop_nulls().to_list()))
    devices = sorted(set(panics["device"].drop_nulls().to_list()))
    return [RULE.finding(confidence=0.6, title=f"ibpanic: {'device ' + ', '.join(devices) if devices else 'an IB tool failed'}"
                    + (f" on {hostlist(nodes)}" if nodes else ""),
                    message=f"infiniband-diags gave up: {'; '.join(panics['detail'].drop_nulls().unique(maintain_order=True).head(3).to_list())}"
                    + ("; a device that cannot be opened is gone (driver, firmware, or the card)" if devices else ""),
                    nodes=nodes, evidence=[ctx.evidence(i, n, note="ibpanic") for i, n in
                                           panics.select("input_id", "line_no").head(2).iter_rows()],
                    suggestion=("Check the device on the node: ibv_devinfo, the kernel log (mlx5_core), lspci for the "
                                "card; reload the driver or replace the card; exclude the node meanwhile."),
                    culprit=False, details={"check": "ibpanic", "devices": devices, "drain": False})]
