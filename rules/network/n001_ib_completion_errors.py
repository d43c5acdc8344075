"""N001 ib-completion-errors: IB/RoCE completion errors, voted to the endpoint they share.

What it detects
    NCCL's ``NET/IB : Got completion from peer H<port> with status=12 ...`` WARNs (every wording,
    2.4-2.30, and external plugins that reuse it). Each error is one failing queue pair between
    the node that printed it and its peer (peer address, or the remote GID resolved through the
    GIDs other nodes printed as their own). The endpoint in most failing pairs is the suspect:
    with three or more nodes the node shared by the failing pairs; joined with the node's
    ``mlx5_core ... Link down`` kernel lines during the job and with ibstat/ibv_devinfo port
    states. Status 12 (transport retry exceeded) and 13 (RNR retry exceeded) mean a timeout:
    the peer did not answer (link down, unreachable, a very bad link). Status 5 (flush) and
    errors a process printed after its own timeout/abort are consequences and do not vote.

Why it matters
    A flapping port or a bad cable stalls every collective that crosses it: all ranks hang
    alike, and the hang rules can only say "nobody is behind". The shared endpoint (and the
    kernel's link-down lines) is what says which node's NIC, cable or switch port to pull.

What to do
    On the named node: ``ibstat`` / ``ibv_devinfo`` (port state, rate), ``perfquery -x`` or
    ``ethtool -S <netdev>`` (link_downed, symbol/CRC errors), the kernel log around the hang,
    the cable and the switch port; then nccl-tests (``all_reduce_perf``) between that node and
    each peer it failed with. If status 12 comes right at the first collective, the NICs cannot
    reach each other at all: check ``NCCL_IB_GID_INDEX`` and RoCE routing/VLAN instead.

Known false positives
    One failing pair between two nodes cannot say which side is broken: the finding names both,
    not as culprit, unless a link-down during the job sits on one side only. An excerpt from one
    side (one host's log) is the same case. When the peer's process died first (killed, OOM),
    its peers' queue pairs time out too: the finding is then a symptom. Errors after a
    communicator abort, and status 5 flushes, are teardown noise.
"""

from __future__ import annotations

import polars as pl

from postmortem.analyzer import commands
from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.network.fabric_model import FAULT_STATUSES, STATUS, completion_errors, down_ports, link_flaps, vote

RULE = Rule(code="N001", name="ib-completion-errors", severity=Severity.ERROR, category=Category.NETWORK, since="0.1.0")


def check(ctx: Context) -> list[Finding]:
    return _modify_qp(ctx) + _completions(ctx)


def _modify_qp(ctx: Context) -> list[Finding]:
    """``Call to ibv_modify_qp failed with error Network is unreachable``: the RoCE queue pair
    cannot even be connected (no route between the GIDs): a fabric setup problem, no node to blame."""
    events = ctx.table("events")
    if events.is_empty() or "error_class" not in events.columns:
        return []
    bad = events.filter((pl.col("kind") == "nccl_warn") & (pl.col("error_class") == "ib_modify_qp"))
    if bad.is_empty():
        return []
    nodes = sorted(set(bad["node"].drop_nulls().to_list())) if "node" in bad.columns else []
    reason = bad["message"].drop_nulls().first() or ""
    return [RULE.finding(confidence=0.5, title="RDMA queue pair setup failed" + (f" on {', '.join(nodes)}" if nodes else ""),
        message=f"{bad.height} ibv_modify_qp failure(s): {reason}; the NICs cannot reach each other over RoCE (GID index, "
        "subnet/VLAN, routing) or a port is down: nothing says which side",
        nodes=nodes, culprit=False,
        evidence=[ctx.evidence(i, n, note="queue pair transition failed")
                  for i, n in bad.select("input_id", "line_no").head(2).iter_rows()],
        suggestion="Check the RoCE GIDs on both nodes (`show_gids`, `ibv_devinfo -v`), set NCCL_IB_GID_INDEX to the "
                   "RoCEv2 GID of the routable address (often 3), check the VLAN/routing between the NIC subnets and "
                   "`ibstat` port states; then run nccl-tests between the two nodes.",
        details={"check": "modify_qp", "competing": nodes})]


def _completions(ctx: Context) -> list[Finding]:
    errors = completion_errors(ctx)
    if errors.is_empty():
        return []
    real = errors.filter(pl.col("noise").is_null())
    if real.is_empty():
        return [_noise_only(ctx, errors)]
    flaps = {node: [f for f in found if f.timed] for node, found in link_flaps(ctx).items()}
    flapped = {node for node, found in flaps.items() if found}
    rows = real.to_dicts()
    pairs = {frozenset((r["local"], r["remote"])) for r in rows
             if r["local"] and r["remote"] and r["local"] != r["remote"]}
    leaders, counts = vote(pairs)
    reporters = sorted({r["local"] for r in rows if r["local"]})
    known = _known_nodes(ctx) | set(reporters)
    culprit, why, confidence = None, "", 0.0
    if len(pairs) >= 2 and len(leaders) == 1 and counts[leaders[0]] >= 2 \
            and counts[leaders[0]] * 3 >= 2 * len(pairs) and leaders[0] in known:
        culprit = leaders[0]
        why = f"it is an endpoint of {counts[culprit]} of the {len(pairs)} failing pairs"
        confidence = 0.75
        if culprit in flapped:
            confidence += 0.1
        if culprit in reporters and any(r["remote"] == culprit for r in rows):
            confidence += 0.05         # both sides of its pairs saw the errors
        rivals = flapped - {culprit}
        if rivals:
            confidence, why = 0.45, why + f", but the link went down on {', '.join(sorted(rivals))}"
    else:
        # One pair, a tie, or no peer in the wording: only a link flap on one side decides.
        candidates = set(leaders) if pairs else set(reporters)
        on_flap = candidates & flapped
        if len(on_flap) == 1 and next(iter(on_flap)) in known:
            culprit = next(iter(on_flap))
            others = ", ".join(sorted(candidates - on_flap)) or "-"
            why = f"its NIC link went down during the job; the other side ({others}) shows no flap"
            confidence = 0.7
    if culprit is not None and confidence < 0.6:
        culprit = None
    if culprit is not None and _peer_died(ctx, culprit) and culprit not in flapped:
        return [_peer_died_finding(ctx, errors, rows, culprit)]
    return [_finding(ctx, errors, rows, pairs, counts, reporters, culprit, why, confidence, flaps)]


def _known_nodes(ctx: Context) -> set:
    ranks = ctx.table("ranks")
    return set(ranks["node"].drop_nulls().to_list()) if not ranks.is_empty() and "node" in ranks.columns else set()


def _status_text(rows: list[dict]) -> str:
    by: dict = {}
    for r in rows:
        by[r["status"]] = by.get(r["status"], 0) + 1
    parts = []
    for status, n in sorted(by.items(), key=lambda kv: (-kv[1], kv[0] if kv[0] is not None else -1)):
        name = STATUS.get(status, (None, "unknown status"))[0] if status is not None else None
        parts.append(f"{n} x status {status if status is not None else '?'}" + (f" ({name})" if name else ""))
    return ", ".join(parts)


def _finding(ctx, errors, rows, pairs, counts, reporters, culprit, why, confidence, flaps) -> Finding:
    statuses = {r["status"] for r in rows}
    timeout = bool(statuses & FAULT_STATUSES)
    noise = errors.height - len(rows)
    pair_text = "; ".join(sorted(" <-> ".join(sorted(p)) for p in pairs)) or "no peer in the wording"
    meaning = STATUS[12][1] if 12 in statuses else (STATUS[13][1] if 13 in statuses else
                                                    STATUS.get(next(iter(statuses)), (None, "see ibv_wc_status"))[1])
    msg = (f"{len(rows)} completion error(s) ({_status_text(rows)}: {meaning}) from {len(reporters)} node(s) "
           f"({', '.join(reporters)}); failing pairs: {pair_text}")
    if noise:
        msg += f"; {noise} more after an abort or flushed (not counted)"
    details = {"pairs": sorted(sorted(p) for p in pairs), "votes": dict(sorted(counts.items())),
               "statuses": sorted(s for s in statuses if s is not None), "reporting_nodes": reporters}
    nodes: list[str]
    if culprit is not None:
        own = [f for f in flaps.get(culprit, [])]
        nics = sorted({r["hca"] for r in rows if r["local"] == culprit and r["hca"]})
        ports = down_ports(ctx).get(culprit, [])
        where = ", ".join(nics + [f"{f.device} ({f.downs} link down)" for f in own]) or "its NIC"
        msg += f". {culprit} is the suspect: {why}"
        if own:
            msg += f"; kernel log: {', '.join(f'{f.device} link down {f.downs}x' for f in own)} during the job"
        if ports:
            msg += f"; ibstat/ibv_devinfo: {', '.join(ports)}"
        peers = sorted({e for p in pairs if culprit in p for e in p} - {culprit})
        details.update(culprit_node=culprit, nics=nics, flapped_ports=[f.device for f in own], down_ports=ports,
                       peers=peers, drain=True)
        nodes = [culprit]
        title = f"IB/RoCE completion errors point at {culprit}" + (f" ({where})" if where != "its NIC" else "")
        netdev = own[0].device if own else "<netdev>"
        ca = nics[0] if nics else "<mlx5_N>"
        ca_arg, dev_arg = commands.shown(ca, commands.device), commands.shown(netdev, commands.device)
        suggestion = (f"Drain {culprit} and check its NIC port: `{commands.sh('ibstat', ca_arg)}` / "
                      f"`{commands.sh('ibv_devinfo', '-d', ca_arg)}` (state, rate), "
                      f"`perfquery -x` or `{commands.sh('ethtool', '-S', dev_arg)}` (link_downed, symbol and CRC error counters), "
                      f"`dmesg | grep mlx5`, the cable and the switch port; then run nccl-tests all_reduce_perf "
                      f"between {culprit} and {', '.join(peers) or 'its peers'} before putting it back.")
        severity, category = Severity.ERROR, Category.NETWORK
    else:
        ends = sorted(e for e in counts if counts[e] == max(counts.values())) if counts else reporters
        nodes = sorted(e for e in ends if e in _known_nodes(ctx) or e in reporters)
        one_side = len(reporters) == 1
        msg += (". Not enough to choose a side: " + (
            "the errors come from one host's log only" if one_side else
            f"{' and '.join(ends)} are in as many failing pairs each") + " and no link went down on one side only")
        details.update(competing=ends)
        title = "IB/RoCE completion errors between " + (" and ".join(ends) if ends else "nodes")
        suggestion = ("Find the side that is broken: run nccl-tests all_reduce_perf between the nodes of each failing "
                      "pair and against a third node; check `ibstat`, `perfquery -x` / `ethtool -S` and the kernel log "
                      "(mlx5 Link down) on both sides. If the errors come at the first collective, check "
                      "NCCL_IB_GID_INDEX and RoCE routing.")
        severity = Severity.ERROR if timeout else Severity.WARNING
        category, confidence = Category.NETWORK, (0.4 if timeout else 0.3)
    evidence = _evidence(ctx, rows, culprit, flaps)
    return RULE.finding(severity=severity, confidence=confidence, title=title, message=msg, ranks=[], nodes=nodes, evidence=evidence,
                   suggestion=suggestion, category=category, culprit=culprit is not None, details=details)


def _evidence(ctx, rows, culprit, flaps) -> list:
    picked = []
    if culprit is not None:
        own = [r for r in rows if r["local"] == culprit][:2]
        seen = [r for r in rows if r["remote"] == culprit][:2]
        picked = [(r, "printed on the suspect node") for r in own] + [(r, "a peer names the suspect") for r in seen]
    else:
        picked = [(r, "completion error") for r in rows[:3]]
    out = [ctx.evidence(r["input_id"], r["line_no"], note=note) for r, note in picked]
    for flap in (flaps.get(culprit, []) if culprit else [])[:1]:
        out += [ctx.evidence(i, n, note="NIC link down during the job") for i, n in flap.refs[:1]]
    return out


def _noise_only(ctx, errors) -> Finding:
    rows = errors.to_dicts()
    return RULE.finding(severity=Severity.INFO, confidence=0.6, title="IB/RoCE completion errors after the abort only",
        message=f"{len(rows)} completion error(s) ({_status_text(rows)}), all flushed or printed after the process's own "
        "timeout/abort: teardown of connections, not the cause",
        evidence=[ctx.evidence(rows[0]["input_id"], rows[0]["line_no"], note=rows[0]["noise"])],
        suggestion="Look for the first error before the abort (other findings).", category=Category.SYMPTOM,
        details={"noise": [r["noise"] for r in rows[:5]]})


def _peer_died(ctx: Context, node: str) -> bool:
    """The suspect node's kernel killed a process (OOM): its peers' queue pairs time out after."""
    events = ctx.table("node_events")
    if events.is_empty() or "kind" not in events.columns:
        return False
    return not events.filter((pl.col("node") == node) & pl.col("kind").str.starts_with("oom")).is_empty()


def _peer_died_finding(ctx, errors, rows, node) -> Finding:
    return RULE.finding(severity=Severity.WARNING, confidence=0.5, title=f"IB/RoCE completion errors toward {node}, whose process was killed",
        message=f"{len(rows)} completion error(s) ({_status_text(rows)}) name {node}, where the kernel killed a process: "
        "a dead peer stops answering, so its queue pairs time out. A consequence, not a network fault",
        nodes=[node], evidence=[ctx.evidence(rows[0]["input_id"], rows[0]["line_no"], note="completion error")],
        suggestion=f"Look at why the process on {node} died (OOM killer, crash) before suspecting the network.",
        category=Category.SYMPTOM, details={"node": node})
