"""What the Transports screen shows, shaped from ``postmortem.views.transports.view`` without Textual.

The view (the model ``postmortem transports`` prints) is taken as it is: this module only
groups, marks and counts its hops. A hop is *off-tier* when the view lists it under
``attention`` (``postmortem.analyzer.transports.judge``: SHM or the network between GPUs of one host where
P2P is possible, sockets between hosts, a side without GDR where it is possible); the *slowest* hops are those on the communicator's worst tier in
``TIER_ORDER`` (the order the view uses for each ring's slowest link).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from postmortem.analyzer.nccl_model import TIER_ORDER
from postmortem.views.transports import channel_ranges, nic_span, refusal_groups, via, view

OFF_TIER, SLOWEST, NORMAL = "off-tier", "slowest", ""
MARK = {OFF_TIER: "✗", SLOWEST: "▼", NORMAL: ""}  # reads without colour
NVLINK_TIERS = {"NVLink", "NVLink via GPU", "NVLS"}


def load(run, gpu: str | None = None) -> dict:
    """The view plus, per communicator, its rank 0's channel counts and thread thresholds (the
    algorithm/protocol setup NCCL prints at init even without TUNING decision lines)."""
    v = view(run, gpu=gpu)
    setup = _init_setup(run)
    for c in v["communicators"]:
        zero = next((m for m in c["members"] if m["rank"] == 0), None)
        c["setup"] = setup.get((c["comm_key"], zero["host"], zero["pid"]), {}) if zero else {}
    return v


def _init_setup(run) -> dict[tuple, dict]:
    """(comm_key, host, pid) -> {kind: row} for the init lines ``channel_counts`` and ``thread_thresholds``."""
    if not {"comm_key", "kind", "host", "pid", "coll_channels", "detail"} <= set(run.columns("nccl_tuning")):
        return {}
    rows = run.frame("SELECT comm_key, host, pid, kind, any_value(coll_channels) AS coll, "
                     "any_value(nvls_channels) AS nvls, any_value(collnet_channels) AS collnet, "
                     "any_value(p2p_channels) AS p2p, any_value(p2p_per_peer) AS per_peer, any_value(detail) AS detail "
                     "FROM nccl_tuning WHERE kind IN ('channel_counts', 'thread_thresholds') GROUP BY ALL")
    out: dict[tuple, dict] = {}
    for r in rows.iter_rows(named=True):
        out.setdefault((r["comm_key"], r["host"], r["pid"]), {})[r["kind"]] = r
    return out


# -- communicators ------------------------------------------------------------------------------------


@dataclass
class CommRow:
    key: str
    nranks: int | None
    nnodes: int | None
    hosts: str
    off_tier: int
    tiers: str  # the tiers its hops used, fastest first


def comm_rows(v: dict) -> list[CommRow]:
    return [CommRow(c["comm_key"], c["nranks"], c["nnodes"] or (len(c["hosts"]) or None), host_span(c["hosts"]),
                    len(c["attention"]), "/".join(tiers_of(c))) for c in v["communicators"]]


def tiers_of(comm: dict) -> list[str]:
    return sorted({h["tier"] for h in comm["hops"] if h["tier"]}, key=lambda t: TIER_ORDER.get(t, 9))


def host_span(hosts: list[str] | None) -> str:
    hosts = list(hosts or [])
    if len(hosts) <= 2:
        return ", ".join(hosts)
    return f"{hosts[0]} … {hosts[-1]}"


def slowest_tier(comm: dict) -> str | None:
    """The communicator's worst tier; None when all its hops share one tier (nothing is slower)."""
    tiers = {h["tier"] for h in comm["hops"] if h["tier"]}
    return max(tiers, key=lambda t: TIER_ORDER.get(t, 9)) if len(tiers) > 1 else None


# -- hops ---------------------------------------------------------------------------------------------


def hop_id(h: dict) -> tuple:
    return (h["channel"], h["phase"], h["conn_index"], h["src_rank"], h["dst_rank"])


def on_nvlink(h: dict) -> bool:
    """NVLink family, or a P2P hop the hardware model priced as NVLink."""
    return h["tier"] in NVLINK_TIERS or (h["tier"] == "P2P" and str(h.get("priced_as") or "").startswith("NVLink"))


@dataclass
class HopRow:
    mark: str  # OFF_TIER, SLOWEST or NORMAL
    channels: str
    phase: str
    ranks: str
    tier: str
    bandwidth: str
    transport: str
    hosts: str
    gpus: str
    nic: str
    hop: dict = field(repr=False)  # the first of the grouped hops (the detail line shows it)
    count: int = 1  # how many hops (channels) the row stands for
    why: str = ""


def hop_rows(comm: dict, off_nvlink_only: bool = False, grouped: bool = True) -> list[HopRow]:
    """One row per hop, or (``grouped``) per hop that is the same on several channels."""
    off = {hop_id(h) for h in comm["attention"]}
    worst = slowest_tier(comm)
    groups: dict[tuple, list[dict]] = {}
    for h in comm["hops"]:
        if off_nvlink_only and on_nvlink(h):
            continue
        same = tuple(v for k, v in h.items() if k not in ("channel", "conn_index", "input_id", "line_no"))
        groups.setdefault(same if grouped else hop_id(h), []).append(h)
    rows = []
    for hops in groups.values():
        h = hops[0]
        mark = OFF_TIER if any(hop_id(x) in off for x in hops) else SLOWEST if h["tier"] == worst else NORMAL
        rows.append(HopRow(mark, channel_ranges([x["channel"] for x in hops if x["channel"] is not None]) or "?",
                           h["phase"] or "?", f"{_v(h['src_rank'])}→{_v(h['dst_rank'])}", h["tier"] or "?",
                           bandwidth(h), via(h), _hosts(h), _gpus(h), _nics(h), h, len(hops),
                           why_off_tier(h) if mark == OFF_TIER else ""))
    return rows


def _v(value) -> str:
    return "?" if value is None else str(value)


def bandwidth(h: dict) -> str:
    """GB/s per direction as the hardware model prices the hop; ``TCP`` etc. when it has no number."""
    if h.get("gbyte_s"):
        return f"~{h['gbyte_s']:g}"
    return h.get("priced_as") or "?"


def _hosts(h: dict) -> str:
    if h["src_host"] and h["src_host"] == h["dst_host"]:
        return h["src_host"]
    return f"{h['src_host'] or '?'}→{h['dst_host'] or '?'}"


def _gpus(h: dict) -> str:
    return f"{_v(h['src_gpu'])}→{_v(h['dst_gpu'])}" if h["src_gpu"] is not None or h["dst_gpu"] is not None else ""


def _nics(h: dict) -> str:
    """Each side of a network hop: its NIC and whether that side uses GPUDirect RDMA."""
    if not (h["send_nic"] or h["recv_nic"] or h.get("send_gdr") is not None or h.get("recv_gdr") is not None):
        return ""
    return f"{_side(h['send_nic'], h.get('send_gdr'))}→{_side(h['recv_nic'], h.get('recv_gdr'))}"


def _side(nic: str | None, gdr: bool | None) -> str:
    return (nic or "?") + (" GDR" if gdr else " noGDR" if gdr is False else "")


def why_off_tier(h: dict) -> str:
    """Why the view lists the hop under attention (``postmortem.analyzer.transports.judge``)."""
    if h.get("reason"):
        return h["reason"]
    if h["tier"] == "Socket":
        return "TCP sockets where RDMA NICs would carry it"
    if h["src_host"] and h["src_host"] == h["dst_host"]:
        return f"{h['tier']} between GPUs of one host where P2P (NVLink) is expected"
    return "network without GPUDirect RDMA where it is possible"


def nccl_reasons(h: dict, v: dict) -> list[str]:
    """What NCCL itself said about this hop (``view``'s ``p2p_refusals``: "P2P is disabled between
    connected GPUs 0 and 1", on the hop's host, naming its two GPUs), each said once."""
    pair = {f"{h['src_gpu']}-{h['dst_gpu']}", f"{h['dst_gpu']}-{h['src_gpu']}"}
    mine = [r for r in v.get("p2p_refusals") or [] if r.get("host") == h["src_host"] == h["dst_host"]
            and r.get("detail") in pair]
    return [message for _, message, _ in refusal_groups(mine) if message]


def comm_reasons(comm: dict, v: dict) -> list[tuple[str, str, int]]:
    """NCCL's reasons said on the communicator's hosts about a pair of GPUs one of its hops
    joins: (host, message, times said)."""
    pairs = {(h["src_host"], f"{a}-{b}") for h in comm["hops"] if h["src_host"] == h["dst_host"]
             for a, b in ((h["src_gpu"], h["dst_gpu"]), (h["dst_gpu"], h["src_gpu"]))}
    mine = [r for r in v.get("p2p_refusals") or [] if (r.get("host"), r.get("detail")) in pairs]
    return [(host or "?", message, n) for host, message, n in refusal_groups(mine) if message]


def hop_detail(h: dict) -> str:
    """Everything known about one hop, for the line under the table."""
    def end(host, gpu, pci):
        bits = [host or "?"] + ([f"GPU{gpu}"] if gpu is not None else []) + ([f"({pci})"] if pci else [])
        return " ".join(bits)
    pxn = f"; PXN via {h['pxn_via']}" if h.get("pxn_via") else ""
    nic, gdr = "", ""
    if h["transport"] in ("NET", "COLLNET"):
        # each side said for itself whether it uses GPUDirect RDMA
        nic = (f"; send side {h['send_nic'] or '?'} ({_gdr_state(h.get('send_gdr'))}), receive side "
               f"{h['recv_nic'] or '?'} ({_gdr_state(h.get('recv_gdr'))})")
    elif _nics(h):
        nic = f"; NIC {_nics(h)}"
    price = f"~{h['gbyte_s']:g} GB/s per direction" if h.get("gbyte_s") else "bandwidth unknown"
    return (f"rank {_v(h['src_rank'])} {end(h['src_host'], h['src_gpu'], h['src_pci'])} → rank {_v(h['dst_rank'])} "
            f"{end(h['dst_host'], h['dst_gpu'], h['dst_pci'])} via {via(h)}{nic}{gdr}{pxn}; "
            f"{h['tier'] or '?'}: {price} ({h.get('price_basis') or 'no basis'})")


def _gdr_state(gdr: bool | None) -> str:
    return "GPUDirect RDMA" if gdr else "no GPUDirect RDMA" if gdr is False else "its line is not in the logs"


# -- node-by-node matrix ------------------------------------------------------------------------------


@dataclass
class MatrixCell:
    tiers: list[str]
    hops: int
    off_tier: int

    @property
    def text(self) -> str:
        return "/".join(self.tiers) if self.tiers else "·"


def node_matrix(comm: dict) -> tuple[list[str], dict[tuple[str, str], MatrixCell]]:
    """Nodes (the communicator's hosts, then any other host its hops name) and, per (src, dst)
    node pair, the tiers its hops used (fastest first), their number and how many are off-tier."""
    off = {hop_id(h) for h in comm["attention"]}
    nodes = list(comm["hosts"] or [])
    cells: dict[tuple[str, str], MatrixCell] = {}
    for h in comm["hops"]:
        src, dst = h["src_host"] or "?", h["dst_host"] or "?"
        nodes += [n for n in (src, dst) if n not in nodes]
        c = cells.setdefault((src, dst), MatrixCell([], 0, 0))
        c.hops += 1
        c.off_tier += hop_id(h) in off
        if h["tier"] and h["tier"] not in c.tiers:
            c.tiers = sorted(c.tiers + [h["tier"]], key=lambda t: TIER_ORDER.get(t, 9))
    return nodes, cells


def cell_detail(src: str, dst: str, cell: MatrixCell | None) -> str:
    where = f"{src} (intra-node)" if src == dst else f"{src} → {dst}"
    if cell is None:
        return f"{where}: no hop"
    off = f"; ✗ {cell.off_tier} off their expected tier" if cell.off_tier else ""
    return f"{where}: {cell.hops} hop{'s' if cell.hops != 1 else ''} on {', '.join(cell.tiers) or 'unknown tier'}{off}"


# -- the communicator's summary -----------------------------------------------------------------------


def summary_lines(comm: dict, v: dict) -> list[tuple[str, str]]:
    """(text, kind) lines; kind is ``off-tier``, ``slowest`` or ``""`` (the screen styles them)."""
    size = f"{comm['nranks']} ranks" if comm["nranks"] else "size unknown"
    init = f", {comm['init_complete']}/{comm['nranks']} init" if comm["nranks"] and comm["init_complete"] is not None else ""
    versions = f" · NCCL {', '.join(comm['versions'])}" if comm["versions"] else ""
    acc = v.get("accelerator") or {}
    # most telling first: a short terminal shows the first lines only
    lines = [(f"{comm['comm_key']} · {size} on {comm['nnodes'] or '?'} node(s){init}{versions} · "
              f"GPU {acc.get('name') or 'unknown'}", "")]
    if comm["attention"]:
        whys = sorted({why_off_tier(h) for h in comm["attention"]})
        lines.append((f"{MARK[OFF_TIER]} {len(comm['attention'])} hops off their expected tier: {'; '.join(whys)}",
                      OFF_TIER))
    lines += _reason_lines(comm_reasons(comm, v))
    lines += _slowest_line(comm)
    if comm["tiers"]:
        lines.append(("tiers: " + " · ".join(_tier_text(t) for t in comm["tiers"]), ""))
    network = _network(comm, v)
    if network:
        lines.append((network, ""))
    lines.append((f"hosts: {', '.join(comm['hosts']) if comm['hosts'] else 'unknown'}", ""))
    lines += [(text, "") for text in algo_lines(comm)]
    return lines


def _reason_lines(reasons: list[tuple[str, str, int]], most: int = 1) -> list[tuple[str, str]]:
    """'NCCL said on HOST: MESSAGE (xN)', the first ``most``, then how many more."""
    lines = [(f"NCCL said on {host}: {message}" + (f" (x{n})" if n > 1 else ""), OFF_TIER)
             for host, message, n in reasons[:most]]
    if len(reasons) > most:
        lines.append((f"NCCL said {len(reasons) - most} more like it (each hop's own: the line under the hops)", OFF_TIER))
    return lines


def _network(comm: dict, v: dict) -> str:
    procs = {(p["host"], p["pid"]): p for p in v["processes"]}
    mine = [procs[(m["host"], m["pid"])] for m in comm["members"] if (m["host"], m["pid"]) in procs]
    if not mine:
        return ""
    networks = sorted({p["network"] or "not in the log" for p in mine})
    nics = sorted({n for p in mine for n in (p["nics"] or [])})
    sockets = sorted({n for p in mine for n in (p["socket_ifs"] or [])})
    ends = f"; NICs {nic_span(nics)}" if nics else f"; socket interfaces {', '.join(sockets[:4])}" if sockets else ""
    return f"network: {', '.join(networks)}{ends}"


def _tier_text(t: dict) -> str:
    price = f" ~{t['gbyte_s']:g} GB/s" if t.get("gbyte_s") else ""
    phase = f" {t['phase']}" if t.get("phase") and t["phase"] != "ring" else ""
    return f"{t['tier'] or '?'}{phase} {t['hops']}{price}"


def _slowest_line(comm: dict) -> list[tuple[str, str]]:
    worst = slowest_tier(comm)
    if worst is None:
        tiers = {h["tier"] for h in comm["hops"] if h["tier"]}
        return [(f"every hop: {tiers.pop()}", "")] if tiers else []
    hops = [h for h in comm["hops"] if h["tier"] == worst]
    h = hops[0]
    price = f"~{h['gbyte_s']:g} GB/s per direction" if h.get("gbyte_s") else h.get("price_basis") or "bandwidth unknown"
    caps = " caps each ring" if any(r["slowest"] and r["slowest"]["tier"] == worst for r in comm["rings"]) else ""
    return [(f"{MARK[SLOWEST]} slowest: {worst} ({len(hops)} hops, e.g. {_v(h['src_rank'])}→{_v(h['dst_rank'])} "
             f"on {_hosts(h)}){caps}: {price}", SLOWEST)]


def algo_lines(comm: dict) -> list[str]:
    """The algorithm/protocol choices: rank 0's TUNING decisions, else its init setup."""
    out = []
    for t in comm["tuning"][:6]:
        choice = t["kernel"] or f"{t['algo']}/{t['proto']}"
        channels = f" ch {t['ch_lo']}..{t['ch_hi']}" if t["ch_lo"] is not None else ""
        out.append(f"algo: {t['func'] or '?'} {t['bytes']} B → {choice}{channels}")
    if len(comm["tuning"]) > 6:
        out.append(f"algo: … {len(comm['tuning']) - 6} more decision lines")
    setup = comm.get("setup") or {}
    counts, threads = setup.get("channel_counts"), setup.get("thread_thresholds")
    if counts or threads:
        bits = []
        if counts:
            bits.append(f"channels {_v(counts['coll'])} coll, {_v(counts['nvls'])} NVLS, "
                        f"{_v(counts['p2p'])} p2p ({_v(counts['per_peer'])} per peer)")
        if threads:
            bits.append(f"threadThresholds {threads['detail']}")
        out.append("init: " + "; ".join(bits))
    if not comm["tuning"]:
        out.append("algo/proto: no TUNING decision lines (NCCL_DEBUG_SUBSYS=INIT,TUNING prints them)")
    return out


# -- measured links: the tools engineers run rung by rung (issue 28) ------------------------------


@dataclass
class MeasuredRow:
    node: str
    tool: str           # p2pBandwidthLatencyTest | perftest ib_send_bw | bandwidthTest
    what: str           # the matrix, the NIC and side, the device and direction
    measured: str
    finding: str = ""   # the title of the finding that judges it slow, if any


def _num(value) -> str:
    return "?" if value is None else f"{value:,.1f}" if isinstance(value, float) else str(value)


def measured_rows(run, report: dict | None) -> list[MeasuredRow]:
    """What ``postmortem hw`` prints of p2pBandwidthLatencyTest, bandwidthTest and perftest, one
    row per node and measurement, each marked with the L004-L006 finding on its node."""
    from postmortem.views import hw_view

    v = hw_view.view(run)
    judged: dict[tuple[str, str], str] = {}
    for f in (report or {}).get("findings", []):
        for node in f.get("nodes") or []:
            judged.setdefault((f["code"], node), f"{f['code']} {f['title']}")
    rows = []
    for p in v["p2p"]:
        for m in p["matrices"]:
            rows.append(MeasuredRow(p["node"] or "?", "p2pBandwidthLatencyTest", m["matrix"],
                                    f"{_num(m['min'])} / {_num(m['median'])} / {_num(m['max'])} (min/median/max; "
                                    f"slowest {m['worst_pair']})", judged.get(("L004", p["node"]), "")))
        if p["no_p2p"]:
            rows.append(MeasuredRow(p["node"] or "?", "p2pBandwidthLatencyTest", "pairs without P2P",
                                    ", ".join(p["no_p2p"][:8]), judged.get(("L004", p["node"]), "")))
    for t in v["perftest"]:
        side = f" ({t['side']})" if t.get("side") else ""
        what = f"{t.get('device') or '?'}{side}, {t.get('link_type') or 'link ?'}"
        value = (f"{_num(t['best_avg_gbit'])} Gb/s best average" if t.get("best_avg_gbit") is not None
                 else f"{_num(t.get('t_typical_us'))} us typical")
        rows.append(MeasuredRow(t["node"] or "?", f"perftest {t.get('test') or ''}".strip(), what, value,
                                judged.get(("L005", t["node"]), "")))
    for b in v["host_device"]:
        what = f"GPU {_num(b.get('device'))} {b.get('direction') or ''} {b.get('memory') or ''}".strip()
        rows.append(MeasuredRow(b["node"] or "?", "bandwidthTest", what, f"{_num(b['best_gbyte_s'])} GB/s best",
                                judged.get(("L006", b["node"]), "")))
    return rows
