"""``postmortem transports``: per communicator, which transport each ring hop uses and why.

The view is built from the store's NCCL model tables (``postmortem.analyzer.nccl_model``): members,
ring order per channel, hops with their NICs and tier, processes (network, interfaces,
version) and, where TUNING lines exist, the algorithm/protocol decisions. ``view`` returns a
JSON-ready dict; ``render_text`` prints it for people (80 columns friendly).
"""

from __future__ import annotations

import polars as pl

from postmortem.analyzer import hardware, topology
from postmortem.analyzer.nccl_model import TIER_ORDER
from postmortem.analyzer.transports import accelerator, judge, no_module_hosts


def view(run, comm: str | None = None, gpu: str | None = None, ring_map: bool = False) -> dict:
    """``comm``: only the communicators whose key holds it. ``ring_map``: only what the HTML
    report's ring map draws: the one communicator it draws (``_largest_ringed``), without the
    list of its every hop (``hops`` empty; ``attention`` and the rings as always). A view of
    every communicator costs the 1,024-rank run 0.7 s, this 0.1 s."""
    tables = {name: run.table(name) for name in ("nccl_communicators", "nccl_members", "nccl_hops", "nccl_ring_order",
                                                  "nccl_processes", "nccl_tuning", "nccl_net")}
    tables["events"] = _refusal_events(run)
    tables["nic_rates"] = _nic_rates(run)
    comms = tables["nccl_communicators"]
    hops = tables["nccl_hops"]
    keys = comms["comm_key"].to_list() if not comms.is_empty() else []
    if not hops.is_empty():
        keys += [k for k in hops["comm_key"].unique().sort().to_list() if k not in keys]
    if comm:
        keys = [k for k in keys if comm in k]
    acc, acc_source = accelerator(run, gpu)
    if not hops.is_empty():
        # The same judgement the rules make (N010-N013): which hops are slower than they should be.
        judged = judge(hops, topology.from_run(run), accelerator(run)[0], no_module_hosts(tables["nccl_net"]))
        tables["nccl_hops"] = hops.with_row_index("_hop").join(judged, on="_hop", how="left").drop("_hop")
    # each table cut by communicator once: a filter per communicator and table costs more than
    # the work (the 1,024-rank run has 129 communicators)
    per_comm = {name: _by_comm(tables[name]) for name in ("nccl_communicators", "nccl_members", "nccl_hops",
                                                          "nccl_ring_order")}
    tables["decisions"] = _decisions_by_process(tables["nccl_tuning"])
    if ring_map:
        keys = _largest_ringed(keys, per_comm)
    return {
        "accelerator": {"name": acc["name"] if acc else None, "source": acc_source},
        "communicators": [_communicator(key, tables, per_comm, acc, every_hop=not ring_map) for key in keys],
        "processes": tables["nccl_processes"].to_dicts() if not tables["nccl_processes"].is_empty() else [],
        "p2p_refusals": _refusals(tables["events"]),
    }


def _largest_ringed(keys: list[str], per_comm: dict[str, tuple]) -> list[str]:
    """Of ``keys``, the communicator with the most ranks (then the largest key) among those with
    a ring order: the one the ring map draws, as ``[key]`` (``[]`` when none has a ring)."""
    def nranks(key: str) -> int:
        info = _rows(per_comm["nccl_communicators"], key)
        return (info["nranks"][0] if not info.is_empty() and "nranks" in info.columns else None) or 0
    ringed = [key for key in keys if not _rows(per_comm["nccl_ring_order"], key).is_empty()]
    return [max(ringed, key=lambda key: (nranks(key), key))] if ringed else []


def _nic_rates(run) -> dict[tuple[str, str], float]:
    """(node, NIC name) -> line rate in Gb/s from ibstat output, where the inputs hold it."""
    if not {"node", "ca", "rate_gbps"} <= set(run.columns("nic_ports")):
        return {}
    rows = run.frame("SELECT node, ca, max(rate_gbps) AS rate FROM nic_ports WHERE rate_gbps IS NOT NULL "
                     "AND node IS NOT NULL GROUP BY 1, 2")
    return {(r["node"], r["ca"]): r["rate"] for r in rows.iter_rows(named=True)}


def _refusal_events(run) -> pl.DataFrame:
    """The events ``_refusals`` reads (the store's events are mostly c10d work updates)."""
    if "kind" not in run.columns("events"):
        return pl.DataFrame()
    return run.frame("SELECT * FROM events WHERE kind = 'p2p_unavailable'")


def _by_comm(frame: pl.DataFrame) -> tuple[pl.DataFrame, dict]:
    """``frame`` with its rows per communicator key, each part in the frame's order."""
    if frame.is_empty() or "comm_key" not in frame.columns:
        return frame, {}
    return frame, {key: part for (key,), part in frame.partition_by("comm_key", as_dict=True).items() if key is not None}


def _rows(cut: tuple[pl.DataFrame, dict], key: str) -> pl.DataFrame:
    """The rows of communicator ``key`` (none for a null key, as ``comm_key == key`` selects)."""
    frame, parts = cut
    return parts.get(key, frame.clear()) if not frame.is_empty() else frame


def _communicator(key: str, tables: dict[str, pl.DataFrame], per_comm: dict[str, tuple], acc: dict | None = None,
                  every_hop: bool = True) -> dict:
    info = _rows(per_comm["nccl_communicators"], key)
    members = _rows(per_comm["nccl_members"], key).sort("rank")
    hops = _rows(per_comm["nccl_hops"], key)
    rings = _rows(per_comm["nccl_ring_order"], key).sort("channel")
    ring_hops = _ring_hops(hops)
    if info.is_empty():
        hosts = sorted({h for c in ("src_host", "dst_host") for h in hops[c].drop_nulls().to_list()}) if not hops.is_empty() else []
        head = {"comm_key": key, "comm_id": None, "identified_by": "no init line names it", "nranks": None,
                "members_seen": None, "init_complete": None, "nnodes": len(hosts) or None, "hosts": hosts, "versions": []}
    else:
        head = info.row(0, named=True)
    member_rows = [{"rank": m["rank"], "host": m["host"], "pid": m["pid"], "cuda_dev": m["cuda_dev"], "pci": m["pci"],
                    "global_rank": m["global_rank"], "init_complete": m["completed"]} for m in members.iter_rows(named=True)]
    return {
        **{k: head.get(k) for k in ("comm_key", "comm_id", "identified_by", "nranks", "members_seen", "init_complete",
                                    "nnodes", "hosts", "versions")},
        "members": member_rows,
        "tiers": [{**t, **_price(t["tier"], acc)} for t in _tier_counts(hops)],
        "rings": [_ring(r, ring_hops.get(r["channel"], {}), acc, tables["nic_rates"]) for r in rings.iter_rows(named=True)],
        "hops": [_hop(h, acc, tables["nic_rates"])
                 for h in hops.sort("channel", "phase", "src_rank", nulls_last=True).iter_rows(named=True)]
        if every_hop else [],
        "attention": [{**_hop(h, acc, tables["nic_rates"]), "reason": h.get("reason"), "covered_by": h.get("code")}
                      for h in hops.filter(pl.col("slow").fill_null(False)).sort("channel", "src_rank").iter_rows(named=True)]
        if "slow" in hops.columns else [],
        "tuning": _tuning(tables["decisions"], member_rows),
    }


def _tier_counts(hops: pl.DataFrame) -> list[dict]:
    """Hops and channels per (phase, tier), by phase and then from the fastest tier (in plain
    Python: five Polars calls per communicator cost more than counting its hundred-odd hops)."""
    counts: dict[tuple, list] = {}
    for phase, tier, channel in hops.select("phase", "tier", "channel").iter_rows() if not hops.is_empty() else []:
        group = counts.setdefault((phase, tier), [0, set()])
        group[0] += 1
        group[1].add(channel)
    order = sorted(counts, key=lambda k: (k[0] is None, k[0] or "", TIER_ORDER.get(k[1], 9)))
    return [{"phase": phase, "tier": tier, "hops": counts[phase, tier][0], "channels": len(counts[phase, tier][1])}
            for phase, tier in order]


def _price(tier_label: str | None, acc: dict | None, nic_gbit: float | None = None) -> dict:
    price = hardware.price_hop(tier_label, acc, nic_gbit)
    return {"gbyte_s": price.gbyte_s, "priced_as": price.link, "price_basis": price.basis}


def _nic_gbit(h: dict, rates: dict | None) -> float | None:
    """The slower of the two NICs a network hop uses, when ibstat gave their rates."""
    if not rates:
        return None
    ends = [rates.get((h.get("src_host"), h.get("send_nic"))), rates.get((h.get("dst_host"), h.get("recv_nic")))]
    known = [r for r in ends if r]
    return min(known) if known else None


def _hop(h: dict, acc: dict | None = None, rates: dict | None = None) -> dict:
    return {**_price(h.get("tier"), acc, _nic_gbit(h, rates)), **{k: h.get(k) for k in ("channel", "phase", "conn_index", "src_rank", "dst_rank", "src_host", "dst_host",
                                  "src_gpu", "dst_gpu", "src_pci", "dst_pci", "transport", "detail", "net", "send_nic", "recv_nic", "link",
                                  "gdr", "send_gdr", "recv_gdr", "gdr_sides", "send_flags", "recv_flags",
                                  "pxn_via", "tier", "input_id", "line_no")}}


def _ring_hops(hops: pl.DataFrame) -> dict:
    """channel -> {(src rank, dst rank): hop} of the ring hops, in one pass (a later hop of the
    same pair wins; a hop of no channel is on no ring)."""
    by_channel: dict = {}
    if hops.is_empty():
        return by_channel
    for h in hops.filter(pl.col("phase") == "ring").iter_rows(named=True):
        if h["channel"] is not None:
            by_channel.setdefault(h["channel"], {})[(h["src_rank"], h["dst_rank"])] = h
    return by_channel


def _ring(ring: dict, by_pair: dict, acc: dict | None = None, rates: dict | None = None) -> dict:
    """A ring's links in its order; ``by_pair``: its channel's ring hops (``_ring_hops``)."""
    order = ring["order"] or []
    links = []
    for i, src in enumerate(order):
        dst = order[(i + 1) % len(order)] if ring["complete"] else (order[i + 1] if i + 1 < len(order) else None)
        if dst is None:
            break
        hop = by_pair.get((src, dst))
        links.append({"src_rank": src, "dst_rank": dst, "tier": hop["tier"] if hop else None,
                      "src_host": hop["src_host"] if hop else None, "dst_host": hop["dst_host"] if hop else None,
                      "nic_gbit": _nic_gbit(hop, rates) if hop else None})
    slowest = max((link for link in links if link["tier"]), key=lambda link: TIER_ORDER.get(link["tier"], 9), default=None)
    if slowest is not None:
        slowest = {**slowest, **_price(slowest["tier"], acc, slowest.get("nic_gbit"))}
    return {"channel": ring["channel"], "order": order, "source": ring["source"], "complete": ring["complete"],
            "agrees_with_hops": ring["agrees_with_hops"], "links": links, "slowest": slowest}


_DECISIONS = ["decision", "decision_numeric", "decision_symmetric", "decision_ce"]


def _decisions_by_process(tuning: pl.DataFrame) -> dict[tuple, pl.DataFrame]:
    """(host, pid) -> the tuning decision lines that process printed, in their order."""
    if tuning.is_empty() or "kind" not in tuning.columns:
        return {}
    picked = tuning.filter(pl.col("kind").is_in(_DECISIONS))
    if picked.is_empty():
        return {}
    return {key: part for key, part in picked.partition_by("host", "pid", as_dict=True).items() if None not in key}


def _tuning(decisions: dict[tuple, pl.DataFrame], members: list[dict]) -> list[dict]:
    """Decision lines printed by this communicator's rank 0 process (they name no communicator,
    so with several communicators on that process they are shown for each, marked shared).
    ``members``: the communicator's members by rank."""
    zero = next((m for m in members if m["rank"] == 0), None)
    picked = decisions.get((zero["host"], zero["pid"])) if zero is not None else None
    if picked is None:
        return []
    return picked.select("func", "bytes", "algo", "proto", "ch_lo", "ch_hi", "kernel", "time_us").unique(
        maintain_order=True).head(200).to_dicts()


def _refusals(events: pl.DataFrame) -> list[dict]:
    """Why a hop fell back: NCCL's own "P2P is disabled / Could not enable P2P" lines."""
    if events.is_empty() or "kind" not in events.columns:
        return []
    rows = events.filter(pl.col("kind") == "p2p_unavailable")
    cols = [c for c in ("host", "pid", "detail", "message", "input_id", "line_no") if c in rows.columns]
    return rows.select(cols).to_dicts()


# -- text ---------------------------------------------------------------------------------------------


def render_text(v: dict, all_hops: bool = False) -> str:
    if not v["communicators"] and not v["processes"]:
        return "No NCCL_DEBUG output found (is NCCL_DEBUG=INFO set?).\n"
    acc = v.get("accelerator") or {}
    source = f" ({acc['source']})" if acc.get("source") else ""
    out = [f"GPU model: {acc.get('name') or 'unknown'}{source}", ""]
    procs = {(p["host"], p["pid"]): p for p in v["processes"]}
    for c in v["communicators"]:
        out += _render_comm(c, procs, all_hops)
    if not v["communicators"]:
        out += ["No communicator or connection lines (init did not get that far, or the excerpt is cut).", ""]
    out += _render_hosts(v["processes"])
    if v["p2p_refusals"]:
        out.append("P2P refused by NCCL (why intra-node hops fell back):")
        out += [f"  {host or '?'}: {message or '?'}" + (f" (x{n})" if n > 1 else "")
                for host, message, n in refusal_groups(v["p2p_refusals"])[:20]]
    return "\n".join(out) + "\n"


def refusal_groups(refusals: list[dict]) -> list[tuple[str | None, str | None, int]]:
    """NCCL's own reasons (``view``'s ``p2p_refusals``) as (host, message, times said), in the
    order first said: every rank of a pair repeats the line."""
    seen: dict[tuple, int] = {}
    for r in refusals:
        key = (r.get("host"), r.get("message"))
        seen[key] = seen.get(key, 0) + 1
    return [(host, message, n) for (host, message), n in seen.items()]


def _render_comm(c: dict, procs: dict, all_hops: bool) -> list[str]:
    size = f"{c['nranks']} ranks" if c["nranks"] else "size unknown"
    complete = f", {c['init_complete']}/{c['nranks']} init complete" if c["nranks"] and c["init_complete"] is not None \
        else ""
    versions = f", NCCL {', '.join(_texts(c['versions']))}" if _texts(c["versions"]) else ""
    identified = f"; identified by {c['identified_by']}" if c["identified_by"] else ""
    lines = [f"Communicator {c['comm_key'] or '(no key)'}",
             f"  {size} on {c['nnodes'] or '?'} node(s){complete}{versions}{identified}"]
    lines += _render_network(c, procs)
    if c["tiers"]:
        by_phase: dict[str, list[str]] = {}
        for t in c["tiers"]:
            price = f" (~{t['gbyte_s']:g} GB/s)" if t.get("gbyte_s") else ""
            by_phase.setdefault(t["phase"] or "unknown phase", []).append(f"{t['tier'] or 'unknown tier'} {t['hops']}{price}")
        lines.append("  hops: " + "; ".join(f"{phase}: {', '.join(items)}" for phase, items in by_phase.items()))
    lines += _render_rings(c["rings"])
    if c["attention"]:
        lines.append("  slower than expected:")
        groups = _group_hops(c["attention"], with_reason=True)
        lines += [f"    {text}" for text in groups[:30]]
        if len(groups) > 30:
            lines.append(f"    ... {len(groups) - 30} more (use --all or --format json)")
    if c["tuning"]:
        lines.append("  algorithm/protocol chosen by rank 0 (TUNING lines):")
        for t in c["tuning"][:12]:
            choice = t["kernel"] or "/".join(str(x or "?") for x in (t["algo"], t["proto"]))
            channels = f" channels {t['ch_lo']}..{t['ch_hi'] if t['ch_hi'] is not None else '?'}" \
                if t["ch_lo"] is not None else ""
            size = f"{t['bytes']} bytes" if t["bytes"] is not None else "size unknown"
            lines.append(f"    {t['func'] or '?'} {size} -> {choice}{channels}")
    if all_hops:
        lines.append("  every hop:")
        lines += [f"    {_hop_text(h)}" for h in c["hops"]]
    lines.append("")
    return lines


def _render_network(c: dict, procs: dict) -> list[str]:
    mine = [procs[(m["host"], m["pid"])] for m in c["members"] if (m["host"], m["pid"]) in procs]
    if not mine:
        return []
    networks = sorted({p["network"] or "not in the log" for p in mine})
    boot = sorted({f"{p['bootstrap_if']} {p['bootstrap_addr'] or ''}".strip() for p in mine if p["bootstrap_if"]})
    nics = sorted({n for p in mine for n in _texts(p["nics"])})
    lines = [f"  network: {', '.join(networks)}" + (f"; NICs {nic_span(nics)}" if nics else "")]
    if boot:
        lines.append(f"  bootstrap: {', '.join(boot[:3])}" + (f" and {len(boot) - 3} more" if len(boot) > 3 else ""))
    return lines


def nic_span(nics: list[str]) -> str:
    """``mlx5_0:1/RoCE .. mlx5_7:1/RoCE`` -> ``mlx5_0..7:1/RoCE`` when they differ only in the number."""
    import re

    parts = [re.fullmatch(r"(.*?)(\d+)(:\d+/\w+)", n) for n in nics]
    if len(nics) > 2 and all(parts) and len({(p[1], p[3]) for p in parts}) == 1:
        numbers = sorted(int(p[2]) for p in parts)
        if numbers == list(range(numbers[0], numbers[-1] + 1)):
            return f"{parts[0][1]}{numbers[0]}..{numbers[-1]}{parts[0][3]}"
    return ", ".join(nics[:6]) + (f" and {len(nics) - 6} more" if len(nics) > 6 else "")


def _render_hosts(processes: list[dict]) -> list[str]:
    """Per host, what its NCCL processes chose: version, network, bootstrap interface, NICs."""
    if not processes:
        return []
    groups: dict[tuple, list] = {}
    for p in processes:
        version = p["version"] or "?"
        if p["version"] and "a different build" in (p.get("version_source") or ""):
            # the printed version stands; the process's own line shapes disagree with it
            span = p["version_min"] if p["version_min"] == p["version_max"] else f"{p['version_min']}-{p['version_max']}"
            version = f"{p['version']} (printed by rank 0; this host's line shapes say {span})"
        if not p["version"] and p["version_min"]:
            span = p["version_min"] if p["version_min"] == p["version_max"] else f"{p['version_min']}-{p['version_max']}"
            version = f"{span} (by line shapes)"
        key = (p["host"], version, p["network"] or "-", f"{p['bootstrap_if'] or '-'} {p['bootstrap_addr'] or ''}".strip(),
               ", ".join(_texts(p["nics"])) or ", ".join(_texts(p["socket_ifs"])) or "-")
        groups.setdefault(key, []).append(p["pid"])
    lines = ["Per host (NCCL version, network, bootstrap interface, NICs or socket interfaces):"]
    for (host, version, network, boot, nics), pids in sorted(groups.items(), key=lambda kv: str(kv[0])):
        lines.append(f"  {host or '?'} ({len(pids)} process{'es' if len(pids) > 1 else ''}): NCCL {version}; "
                     f"network {network}; bootstrap {boot}; {nics}")
    return lines + [""]


def _texts(items) -> list[str]:
    """The known entries of a list column: NCCL lines the model could not split leave None in
    ``nics``/``socket_ifs`` (``NET/Socket : Using [0]enp41s0f1:<0>``), and the column itself may be null."""
    return [str(x) for x in items or [] if x]


def _render_rings(rings: list[dict]) -> list[str]:
    """Channels with the same ring order are shown once; then the slowest ring hops."""
    lines = []
    by_order: dict[tuple, list[int]] = {}
    for ring in rings:
        by_order.setdefault((tuple(ring["order"]), ring["complete"]), []).append(ring["channel"])
    for (order, complete), channels in by_order.items():
        shown = " ".join(_rank(r) for r in order[:16]) + (" ..." if len(order) > 16 else "")
        lines.append(f"  ring {channel_ranges(channels)}: {shown}{'' if complete else ' (partial)'}")
    slowest = [r["slowest"] for r in rings if r["slowest"]]
    tiers = {link["tier"] for r in rings for link in r["links"] if link["tier"]}
    if len(tiers) == 1 and all(link["tier"] for r in rings for link in r["links"]):
        lines.append(f"  every ring hop: {tiers.pop()}")
    elif slowest:
        worst = max(TIER_ORDER.get(s["tier"], 9) for s in slowest)
        pairs: dict[tuple, list[int]] = {}
        for ring in rings:
            s = ring["slowest"]
            if s and TIER_ORDER.get(s["tier"], 9) == worst:
                pairs.setdefault((s["src_rank"], s["dst_rank"], s["tier"], s["src_host"], s["dst_host"]), []).append(ring["channel"])
        shown = [f"{_rank(src)}->{_rank(dst)} {tier}" + (f" ({sh} -> {dh})" if sh and dh else "")
                 + f" on ring {channel_ranges(chs)}"
                 for (src, dst, tier, sh, dh), chs in list(pairs.items())[:3]]
        lines.append("  slowest ring hop: " + "; ".join(shown) + (" ..." if len(pairs) > 3 else ""))
        worst_hop = next(s for s in slowest if TIER_ORDER.get(s["tier"], 9) == worst)
        if worst_hop.get("gbyte_s"):
            basis = f" ({worst_hop['price_basis']})" if worst_hop.get("price_basis") else ""
            lines.append(f"    it caps each ring at ~{worst_hop['gbyte_s']:g} GB/s per direction{basis}")
        else:
            lines.append(f"    its bandwidth: {worst_hop.get('price_basis') or 'unknown'}")
    return lines


def channel_ranges(channels: list[int]) -> str:
    """[0, 1, 2, 5] -> ``00-02,05``; a channel the line did not give is ``??``."""
    unknown = any(ch is None for ch in channels)
    channels = sorted({ch for ch in channels if ch is not None})
    parts, start = ["??"] if unknown else [], None
    for i, ch in enumerate(channels):
        if start is None:
            start = ch
        if i + 1 == len(channels) or channels[i + 1] != ch + 1:
            parts.append(f"{start:02d}" if start == ch else f"{start:02d}-{ch:02d}")
            start = None
    return ",".join(parts)


def _group_hops(hops: list[dict], with_reason: bool = False) -> list[str]:
    """The same hop on several channels is one line naming its channels (and, for the hops
    slower than expected, why and which rule's finding covers it)."""
    groups: dict[str, list[int]] = {}
    for h in hops:
        why = f"  ({h['reason']}; {h['covered_by']})" if with_reason and h.get("reason") else ""
        groups.setdefault(_hop_text(h, with_channel=False) + why, []).append(h["channel"])
    return [f"ch {channel_ranges(chs)}  {text}" for text, chs in groups.items()]


def _side_text(nic: str | None, gdr: bool | None) -> str:
    return (nic or "?") + (" GDR" if gdr else " no GDR" if gdr is False else " (not logged)")


def _hop_text(h: dict, with_channel: bool = True) -> str:
    nic = ""
    if h["transport"] in ("NET", "COLLNET") and h.get("transport") and (
            h["send_nic"] or h["recv_nic"] or h.get("send_gdr") is not None or h.get("recv_gdr") is not None):
        # both sides of a network hop: each has its own NIC and its own GPUDirect RDMA
        nic = (f" [send {_side_text(h['send_nic'], h.get('send_gdr'))} -> "
               f"receive {_side_text(h['recv_nic'], h.get('recv_gdr'))}]")
    elif h["send_nic"] or h["recv_nic"]:
        nic = f" [{h['send_nic'] or '?'} -> {h['recv_nic'] or '?'}]"
    gpu = lambda g: f" GPU{g}" if g is not None else ""  # noqa: E731
    src = f"{h['src_host'] or '?'}{gpu(h['src_gpu'])}"
    dst = gpu(h["dst_gpu"]).strip() if h["src_host"] and h["src_host"] == h["dst_host"] else \
        f"{h['dst_host'] or '?'}{gpu(h['dst_gpu'])}"
    channel = f"ch {channel_ranges([h['channel']])} " if with_channel else ""
    return (f"{channel}{h['phase'] or '?':5s} {_rank(h['src_rank'])}->{_rank(h['dst_rank'])}  {src} -> {dst or '?'}  "
            f"{via(h) or '?'}{nic}  {h['tier'] or 'unknown tier'}")


def _rank(rank) -> str:
    return "?" if rank is None else str(rank)


def via(h: dict) -> str:
    """The hop's transport the way NCCL writes it after ``via``."""
    if h["transport"] in ("NET", "COLLNET"):
        return "/".join(str(p) for p in (h["transport"], h["net"], h["detail"]) if p)
    return "/".join(str(p) for p in (h["transport"], h["detail"]) if p)


# -- postmortem hw with a run: the run's bandwidth map ------------------------------------------------


def bandwidth_map(run, gpu: str | None = None) -> dict:
    """The GPU model the run used (or ``gpu``), its machine balance, its NVLink domain and, per tier
    the run's NCCL hops ran on, how many hops and what the hardware model says one carries."""
    acc, source = accelerator(run, gpu)
    hops = run.frame("SELECT * FROM nccl_hops") if run.columns("nccl_hops") else pl.DataFrame()
    rates = _nic_rates(run)
    nodes = set()
    if not hops.is_empty():
        nodes = set(hops["src_host"].drop_nulls().to_list()) | set(hops["dst_host"].drop_nulls().to_list())
    # every source that names hosts: NCCL's processes and the ranks' nodes, not only the hops'
    for table, column in (("nccl_processes", "host"), ("ranks", "node")):
        if column in run.columns(table):
            nodes |= set(run.frame(f'SELECT DISTINCT "{column}" AS h FROM "{table}" WHERE "{column}" IS NOT NULL')["h"].to_list())
    gpus_per_node = None
    if run.columns("nccl_members"):
        m = run.frame("SELECT host, count(DISTINCT cuda_dev) AS n FROM nccl_members WHERE host IS NOT NULL GROUP BY 1")
        gpus_per_node = int(m["n"].max()) if not m.is_empty() else None
    tiers = []
    if not hops.is_empty():
        ends = pl.concat_list("src_host", "dst_host").explode().drop_nulls().n_unique()
        counts = hops.group_by("tier").agg(hops=pl.len(), intra=pl.col("same_host").fill_null(False).sum(), nodes=ends)
        order = pl.col("tier").replace_strict(TIER_ORDER, default=9, return_dtype=pl.Int64)
        counts = counts.with_columns(_o=order).sort("_o")
        best_rate = max(rates.values()) if rates else None
        for t in counts.iter_rows(named=True):
            p = hardware.price_hop(t["tier"], acc, best_rate if t["tier"] and t["tier"] not in ("Socket",) else None)
            tiers.append({"tier": t["tier"], "hops": t["hops"], "intra_node_hops": int(t["intra"]), "nodes": t["nodes"],
                          "gbyte_s": p.gbyte_s, "priced_as": p.link, "price_basis": p.basis})
    domain = None
    if acc:
        domain = acc.get("nvlink_domain") or (
            f"the node ({gpus_per_node} GPUs seen per node)" if acc.get("nvlink") and gpus_per_node
            else "the node" if acc.get("nvlink") else "none (PCIe only)")
    return {"accelerator": acc, "source": source,
            "machine_balance_flop_per_byte": hardware.machine_balance(acc) if acc else None,
            "nvlink_tier": hardware.tier(acc.get("nvlink")) if acc else None,
            "pcie_tier": hardware.tier(acc.get("pcie")) if acc else None,
            "nvlink_domain": domain, "nodes": len(nodes), "nic_gbit": sorted(set(rates.values())),
            "bandwidth_map": tiers}


def render_bandwidth_map(v: dict) -> str:
    acc = v["accelerator"]
    out = []
    if acc:
        balance = v["machine_balance_flop_per_byte"]
        out.append(f"GPU model: {acc['name']} ({v['source']})")
        out.append(f"  BF16 dense {acc.get('bf16_dense_tflops', '?')} TFLOP/s, HBM {acc.get('hbm_tbps', '?')} TB/s, "
                   f"{acc.get('memory_gb', '?')} GB"
                   + (f"; machine balance {balance:.0f} FLOP/byte" if balance else ""))
        link = (f"{acc['nvlink']} {acc.get('nvlink_unidir_gbs', '?')} GB/s per direction" if acc.get("nvlink")
                else "no NVLink")
        out.append(f"  GPU-GPU: {link}; host: {acc.get('pcie', '?')}; NVLink domain: {v['nvlink_domain']}")
        out.append(f"  source: {acc['source']} (confidence: {acc['confidence']})")
    else:
        out.append(f"GPU model: unknown ({v['source']}); hops are listed without bandwidth")
    out.append("")
    if not v["bandwidth_map"]:
        out.append("No NCCL hops in the inputs (NCCL_DEBUG=INFO shows which transport each hop used).")
        return "\n".join(out) + "\n"
    nics = f"; NIC line rate {'/'.join(f'{r:g}' for r in v['nic_gbit'])} Gb/s (ibstat)" if v["nic_gbit"] else ""
    out.append(f"Bandwidth map of the run ({v['nodes']} node(s){nics}):")
    out.append(f"  {'tier':18s} {'hops':>6s} {'intra':>6s}  {'GB/s per dir.':>13s}  basis")
    for t in v["bandwidth_map"]:
        bw = f"~{t['gbyte_s']:g}" if t["gbyte_s"] else "?"
        out.append(f"  {t['tier'] or '?':18s} {t['hops']:>6d} {t['intra_node_hops']:>6d}  {bw:>13s}  "
                   f"{t['price_basis'] or '?'}")
    return "\n".join(out) + "\n"
