"""N002 bootstrap-interface: NCCL bootstraps on an interface the other hosts cannot reach.

What it detects
    The interface and address each NCCL process bootstraps on (``Bootstrap : Using eth0:10.1.1.2``,
    ``NET/Socket : Using ...``, NCCL_SOCKET_IFNAME) compared across hosts:
    the same address on two hosts (every container on its own docker bridge, 172.17.0.2);
    an address that cannot leave the host (loopback in a multi-node job; an IPv6 link-local
    ``fe80::`` address, e.g. on an ``ip6tnl0`` tunnel or a ``veth`` device); one host on another
    interface kind or address block than the others (``docker0`` / 172.17.x while the rest use
    eth0 / 10.x); NCCL's own ``No interface found in the same subnet as remote address`` with
    a failed bind. For the socket transport, a link-local or loopback interface in the list it
    stripes over.

Why it matters
    Bootstrap is the first thing NCCL does: a wrong interface hangs or fails
    ``ncclCommInitRank`` (bind failed, connection refused, network unreachable) or, for the
    socket transport, stalls traffic sent over an interface the peer cannot reach. It is a
    configuration problem, not a broken node: nothing to drain.

What to do
    Set ``NCCL_SOCKET_IFNAME`` to the interface that carries the hosts' routable addresses
    (``NCCL_SOCKET_IFNAME=eth0``, or exclude with ``^docker0,lo``); run containers with
    ``--network=host`` (or give the pod a routable interface); make ``MASTER_ADDR`` /
    ``NCCL_COMM_ID`` an address that interface can reach.

Known false positives
    docker0 or a pod's eth0 is fine when every host uses a routable address on it. Loopback is
    right for a single-node job, and the socket list is irrelevant when no hop leaves the node.
    Hosts on different subnets of one routed fabric are fine: only a different interface kind
    (a bridge, tunnel or virtual device on one host) or another private address block is flagged.
    When every process completed init, the bootstrap worked: the finding is then a warning.
"""

from __future__ import annotations

import re
from collections import Counter

import polars as pl

from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.network.fabric_model import ip_of, is_link_local, is_loopback, norm_addr, processes

RULE = Rule(code="N002", name="bootstrap-interface", severity=Severity.ERROR, category=Category.CONFIG, since="0.1.0")

# Interfaces that exist on one host only: bridges, tunnels, container and VPN devices.
_VIRTUAL = re.compile(r"^(?:docker\d*|br-|virbr|lxcbr|cni|flannel|cali|veth|tun|tap|ip6tnl|sit|tailscale|wg|zt|"
                      r"CloudflareWARP|vxlan|weave|kube-bridge|lo$)")
_SUGGEST = ("Set NCCL_SOCKET_IFNAME to the interface with the hosts' routable addresses "
            "(e.g. NCCL_SOCKET_IFNAME={good}, or NCCL_SOCKET_IFNAME=^docker0,lo to exclude), run containers "
            "with --network=host, and make MASTER_ADDR / NCCL_COMM_ID an address on that network.")


def check(ctx: Context) -> list[Finding]:
    procs = [p for p in processes(ctx) if p.get("host")]
    if not procs:
        return []
    out = []
    out += _no_subnet(ctx, procs)
    by_host: dict[str, tuple] = {}
    for p in procs:
        addr = norm_addr(p.get("bootstrap_addr"))
        if addr and p.get("bootstrap_if"):
            by_host.setdefault(p["host"], (p["bootstrap_if"], addr))
    multi = _multi_node(ctx, by_host)
    init_ok = _init_completed(ctx)
    out += _duplicates(ctx, by_host, init_ok)
    out += _unroutable(ctx, by_host, multi, init_ok)
    if not any(f.details.get("check") in ("duplicate", "unroutable") for f in out):
        out += _odd_one_out(ctx, by_host, init_ok)
    named = {n for f in out for n in f.nodes}
    out += _virtual_bootstrap(ctx, by_host, multi, init_ok, named)
    if multi is not False:
        out += _socket_list(ctx, procs, by_host, multi)
    return out


def _virtual_bootstrap(ctx: Context, by_host: dict, multi: bool | None, init_ok: bool, named: set) -> list[Finding]:
    """Hosts that bootstrap on a container bridge or virtual device (docker0, virbr0, lxcbr0, veth,
    a tunnel) that no other check named: reachable from its own host only unless the network is
    routed to it. A warning in a multi-node job that did not finish init, information otherwise."""
    if multi is False:
        return []
    hosts = sorted(h for h, (ifname, addr) in by_host.items()
                   if _VIRTUAL.match(ifname) and ifname != "lo" and h not in named)
    if not hosts:
        return []
    items = sorted({f"{by_host[h][0]}:{by_host[h][1]}" for h in hosts})
    severity = Severity.WARNING if multi is True and not init_ok else Severity.INFO
    good = _good_interface(by_host, exclude=set(hosts))
    return [RULE.finding(severity=severity, confidence=0.5 if severity == "warning" else 0.4,
        title=f"NCCL bootstraps on a container bridge or virtual interface ({', '.join(sorted({by_host[h][0] for h in hosts}))})",
        message=f"{', '.join(hosts)} bootstrap on {', '.join(items)}: a bridge, tunnel or virtual device whose address is, "
        "as a rule, reachable from its own host only (a container's own network)"
        + ("; every communicator completed init, so the hosts did reach each other" if init_ok else "")
        + ("" if multi else "; the inputs do not show whether the job spans hosts"),
        nodes=hosts, culprit=False,
        evidence=_evidence_lines(ctx, set(hosts), r"Bootstrap ?: Using ", "bootstrap interface"),
        suggestion=_SUGGEST.format(good=good),
        details={"check": "virtual", "interfaces": items, "drain": False})]


def _multi_node(ctx: Context, by_host: dict) -> bool | None:
    """True: traffic leaves a host (NET hops, or one communicator spans hosts); False: proven one
    host (only intra-node hops); None: the inputs do not say."""
    hops = ctx.table("nccl_hops")
    if not hops.is_empty() and "transport" in hops.columns:
        if not hops.filter(pl.col("transport") == "NET").is_empty():
            return True
        if not hops.filter(pl.col("same_host").fill_null(True).not_()).is_empty():
            return True
    members = ctx.table("nccl_members")
    if not members.is_empty() and "host" in members.columns:
        spans = members.group_by("comm_key").agg(pl.col("host").n_unique().alias("hosts"), pl.col("nranks").max(),
                                                 pl.len().alias("seen"))
        if not spans.filter(pl.col("hosts") >= 2).is_empty():
            return True
        if not spans.filter(pl.col("seen") >= pl.col("nranks")).is_empty():
            return False
    if len(by_host) >= 2:
        return True
    if not hops.is_empty() and "transport" in hops.columns:
        return False
    return None


def _init_completed(ctx: Context) -> bool:
    members = ctx.table("nccl_members")
    if members.is_empty() or "completed" not in members.columns:
        return False
    return bool(members["completed"].fill_null(False).all())


def _evidence_lines(ctx: Context, hosts: set, pattern: str, note: str, limit: int = 2) -> list:
    lines = ctx.frame("SELECT input_id, line_no, node FROM lines WHERE regexp_matches(text, ?) "
                      "ORDER BY input_id, line_no LIMIT 200", [pattern])
    rows = sorted(lines.iter_rows(), key=lambda r: (r[2] not in hosts, r[0], r[1]))
    seen, out = set(), []
    for input_id, line_no, _ in rows:
        if input_id in seen:
            continue
        seen.add(input_id)
        out.append(ctx.evidence(input_id, line_no, note=note))
        if len(out) >= limit:
            break
    return out


def _no_subnet(ctx: Context, procs: list[dict]) -> list[Finding]:
    events = ctx.table("events")
    if events.is_empty() or "error_class" not in events.columns:
        return []
    warns = events.filter(pl.col("kind") == "nccl_warn")
    subnet = warns.filter(pl.col("message").fill_null("").str.contains("No interface found in the same subnet"))
    if subnet.is_empty():
        return []
    bind = warns.filter(pl.col("error_class").is_in(["bind_failed", "socket_error", "no_interface"])
                        & ~pl.col("message").fill_null("").str.contains("same subnet"))
    remote = norm_addr(subnet["message"].str.extract(r"remote address (\S+?)<", 1).drop_nulls().first())
    host_col = "node" if "node" in subnet.columns else "host"
    hosts = sorted(set(subnet[host_col].drop_nulls().to_list()))
    used = sorted({f"{p['bootstrap_if']}:{norm_addr(p['bootstrap_addr'])}" for p in procs
                   if p["host"] in hosts and p.get("bootstrap_addr")})
    failed = not bind.is_empty()
    rows = subnet.head(1).vstack(bind.head(1).select(subnet.columns)) if failed else subnet.head(1)
    evidence = [ctx.evidence(i, n, note="NCCL found no interface toward the remote address" if k == 0
                             else "and could not use the one it fell back to")
                for k, (i, n) in enumerate(rows.select("input_id", "line_no").iter_rows())]
    return [RULE.finding(severity=Severity.ERROR if failed else Severity.WARNING, confidence=0.75 if failed else 0.5,
        title=f"no interface on {', '.join(hosts)} reaches the bootstrap address {remote}",
        message=f"NCCL on {', '.join(hosts)} found no interface in the subnet of {remote} and fell back to "
        f"{', '.join(used) or 'another interface'}" + (f" ({_block(used[0].split(':', 1)[1])})" if used else "")
        + ("; then " + bind["message"].first() if failed else ""),
        nodes=hosts, evidence=evidence, culprit=failed,
        suggestion=_SUGGEST.format(good="<the interface on the same network as " + (remote or "the root") + ">"),
        details={"check": "no_subnet", "remote": remote, "used": used, "drain": False})]


def _block(addr: str | None) -> str:
    ip = ip_of(addr)
    if ip is None:
        return "unknown"
    if ip.version == 6:
        return "IPv6 link-local" if ip.is_link_local else ("IPv6 loopback" if ip.is_loopback else "IPv6")
    a = ip.packed
    if a[0] == 10:
        return "10.0.0.0/8"
    if a[0] == 172 and 16 <= a[1] < 32:
        return "172.16.0.0/12 (docker default 172.17.0.0/16)" if a[1] == 17 else "172.16.0.0/12"
    if a[0] == 192 and a[1] == 168:
        return "192.168.0.0/16"
    if a[0] == 127:
        return "loopback"
    if a[0] == 169 and a[1] == 254:
        return "IPv4 link-local"
    return "public"


def _duplicates(ctx: Context, by_host: dict, init_ok: bool) -> list[Finding]:
    seen: dict[str, list[str]] = {}
    for host, (ifname, addr) in by_host.items():
        if not is_loopback(addr):
            seen.setdefault(addr, []).append(host)
    out = []
    for addr, hosts in sorted(seen.items()):
        if len(hosts) < 2:
            continue
        ifname = by_host[hosts[0]][0]
        good = _good_interface(by_host, exclude=set(hosts))
        out.append(RULE.finding(severity=Severity.WARNING if init_ok else Severity.ERROR, confidence=0.8,
            title=f"{len(hosts)} hosts bootstrap on the same address {addr}",
            message=f"{', '.join(sorted(hosts))} all use {ifname}:{addr} ({_block(addr)}): a per-host address "
            "(a container's own bridge) that the other hosts cannot tell apart or reach",
            nodes=sorted(hosts), culprit=not init_ok,
            evidence=_evidence_lines(ctx, set(hosts), rf"(?:Bootstrap|NET/Socket) : Using .*{re.escape(addr)}",
                                     "bootstrap address"),
            suggestion=_SUGGEST.format(good=good),
            details={"check": "duplicate", "address": addr, "interface": ifname, "drain": False}))
    return out


def _unroutable(ctx: Context, by_host: dict, multi: bool | None, init_ok: bool) -> list[Finding]:
    bad: dict[str, list[str]] = {}
    for host, (ifname, addr) in by_host.items():
        if is_link_local(addr) and multi is not False:
            bad.setdefault("link-local", []).append(host)
        elif is_loopback(addr) and multi is True:
            bad.setdefault("loopback", []).append(host)
    out = []
    for what, hosts in sorted(bad.items()):
        ifname, addr = by_host[hosts[0]]
        alternatives = _alternatives(ctx, hosts[0], ifname)
        why = ("an IPv6 link-local address is only valid on its own link (and a tunnel or veth device has no peer on "
               "the other hosts)" if what == "link-local" else "127.0.0.1 cannot be reached from another host")
        out.append(RULE.finding(severity=Severity.WARNING if init_ok else Severity.ERROR, confidence=0.6 if what == "link-local" else 0.75,
            title=f"NCCL bootstraps on {what} {ifname} ({', '.join(sorted(hosts))})",
            message=f"{', '.join(sorted(hosts))} bootstrap on {ifname}:{addr}: {why}"
            + (f"; other interfaces NCCL listed: {', '.join(alternatives)}" if alternatives else "")
            + ("" if multi else "; the job spans several hosts as far as the inputs show"),
            nodes=sorted(hosts), culprit=not init_ok,
            evidence=_evidence_lines(ctx, set(hosts), rf"(?:Bootstrap|NET/Socket) : Using .*{re.escape(ifname)}",
                                     "bootstrap interface"),
            suggestion=_SUGGEST.format(good=alternatives[0].split(":")[0] if alternatives else "<routable interface>"),
            details={"check": "unroutable", "what": what, "interface": ifname, "address": addr, "drain": False}))
    return out


def _alternatives(ctx: Context, host: str, ifname: str) -> list[str]:
    for p in processes(ctx):
        if p["host"] == host:
            return [f"{n}:{a}" for n, a in p["socket"] if n != ifname and a and not is_link_local(a)
                    and not is_loopback(a)]
    return []


def _good_interface(by_host: dict, exclude: set) -> str:
    names = [ifname for host, (ifname, _) in by_host.items() if host not in exclude and not _VIRTUAL.match(ifname)]
    # the commonest; of equally common ones the first host's (a set's order changes from run to run)
    return Counter(names).most_common(1)[0][0] if names else "<routable interface>"


def _odd_one_out(ctx: Context, by_host: dict, init_ok: bool) -> list[Finding]:
    """Hosts whose bootstrap interface is of another kind or address block than the rest."""
    if len(by_host) < 2:
        return []
    key = {h: (bool(_VIRTUAL.match(i)), _block(a).split(" ")[0]) for h, (i, a) in by_host.items()}
    kinds: dict[tuple, list[str]] = {}
    for host, k in key.items():
        kinds.setdefault(k, []).append(host)
    if len(kinds) < 2:
        return []
    ranked = sorted(kinds.items(), key=lambda kv: -len(kv[1]))
    majority = ranked[0][1]
    strict = len(ranked[0][1]) > len(ranked[1][1])
    odd = sorted(h for k, hosts in ranked[1:] for h in hosts)
    virtual = sorted(h for h in by_host if key[h][0])
    if not strict:
        # Two sides of equal size: a virtual device on one side only is the suspect, else nobody.
        odd = virtual if virtual and len(virtual) < len(by_host) else []
    if not odd:
        return [RULE.finding(severity=Severity.WARNING, confidence=0.4, title="hosts bootstrap on different networks",
            message="; ".join(f"{h}: {by_host[h][0]}:{by_host[h][1]} ({_block(by_host[h][1])})" for h in sorted(by_host))
            + ": the hosts disagree and the inputs do not say which side is wrong",
            nodes=sorted(by_host), culprit=False,
            suggestion=_SUGGEST.format(good="<common interface>"),
            details={"check": "subnets", "drain": False})]
    rest = sorted(set(by_host) - set(odd))
    good = _good_interface(by_host, exclude=set(odd))
    return [RULE.finding(severity=Severity.WARNING if init_ok else Severity.ERROR, confidence=0.7 if strict and len(majority) >= 2 else 0.6,
        title=f"{', '.join(odd)} bootstrap{'s' if len(odd) == 1 else ''} on another network than the other hosts",
        message="; ".join(f"{h}: {by_host[h][0]}:{by_host[h][1]} ({_block(by_host[h][1])})" for h in odd)
        + f", while {', '.join(rest)} use "
        + ", ".join(sorted({f'{by_host[h][0]} ({_block(by_host[h][1])})' for h in rest})),
        nodes=odd, culprit=not init_ok,
        evidence=_evidence_lines(ctx, set(odd), r"(?:Bootstrap|NET/Socket) : Using ", "bootstrap interface"),
        suggestion=_SUGGEST.format(good=good),
        details={"check": "subnets", "odd": odd, "drain": False})]


def _socket_list(ctx: Context, procs: list[dict], by_host: dict, multi: bool | None = True) -> list[Finding]:
    """Socket transport between hosts striping over a link-local, loopback, container-bridge or
    virtual interface (docker0, virbr0, lxcbr0, veth, tailscale0: nccl.md 3.4, the socket
    transport stripes over every listed interface). A warning in a multi-node job, information
    where the inputs do not say whether the job spans hosts."""
    bad: dict[str, list[str]] = {}
    for p in procs:
        if (p.get("network") or "Socket") != "Socket":
            continue
        for name, addr in p["socket"]:
            a = norm_addr(addr)
            risky = is_link_local(a) or is_loopback(a) or bool(_VIRTUAL.match(name or ""))
            if risky and by_host.get(p["host"], ("", ""))[0] != name:
                bad.setdefault(p["host"], []).append(f"{name}:{a}")
    if not bad:
        return []
    hosts = sorted(bad)
    items = sorted({i for v in bad.values() for i in v})
    return [RULE.finding(severity=Severity.WARNING if multi else Severity.INFO, confidence=0.5 if multi else 0.35,
        title=f"the socket transport stripes over {', '.join(sorted({i.split(':')[0] for i in items}))}",
        message=f"NET/Socket on {', '.join(hosts)} uses {', '.join(items)} besides the bootstrap interface: a link-local, "
        "loopback, container-bridge or virtual address the other host cannot reach (Network is unreachable, stalls)"
        + ("" if multi else "; harmless if the job never leaves one host (the inputs do not say)"),
        nodes=hosts, culprit=False,
        evidence=_evidence_lines(ctx, set(hosts), r"NET/Socket : Using ", "socket interfaces"),
        suggestion=_SUGGEST.format(good=_good_interface(by_host, set())),
        details={"check": "socket_list", "interfaces": items, "drain": False})]
