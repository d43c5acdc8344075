"""What the fabric rules (N001-N009) share: IB/RoCE completion errors read into pairs of
endpoints, addresses resolved to hosts, NIC link flaps from kernel logs, bootstrap interfaces.

Not a rule (no code in its name). Everything is read from the store through ``Context``, once
per context (``@memoised``).

Completion errors (docs/formats/nccl.md section 3.11), every wording::

    NET/IB : Got completion with error 12, opcode 0, len 0, vendor err 129                       (2.4-2.11)
    NET/IB : Got completion from peer H<p> with error 12, opcode 0, len 0, vendor err 129 [(Send) localGid G ...]
    NET/IB : Got completion from peer H<p> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid G remoteGidsG
    NET/IB: Got completion from peer H<p> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) ... hca mlx5_3
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import polars as pl

from postmortem.parsers.base import groups_of
from postmortem.rules.base import Context, memoised, with_columns

# ibv_wc_status values NCCL prints (docs/formats/nccl.md 3.11).
STATUS = {
    1: ("IBV_WC_LOC_LEN_ERR", "local length error"),
    2: ("IBV_WC_LOC_QP_OP_ERR", "local QP operation error"),
    4: ("IBV_WC_LOC_PROT_ERR", "local protection error (memory registration)"),
    5: ("IBV_WC_WR_FLUSH_ERR", "work request flushed: the queue pair was already in error (a consequence of an "
                               "earlier error)"),
    9: ("IBV_WC_REM_INV_REQ_ERR", "remote invalid request"),
    10: ("IBV_WC_REM_ACCESS_ERR", "remote access error"),
    11: ("IBV_WC_REM_OP_ERR", "remote operation error"),
    12: ("IBV_WC_RETRY_EXC_ERR", "transport retry counter exceeded: the peer did not acknowledge in time "
                                "(a timeout: link down, unreachable, or a very bad link)"),
    13: ("IBV_WC_RNR_RETRY_EXC_ERR", "receiver-not-ready retry counter exceeded (peer stopped posting receives: "
                                    "timeout or unreachable)"),
}
FAULT_STATUSES = {12, 13}     # the link or the peer's NIC did not answer
SYMPTOM_STATUSES = {5}        # flushed after an earlier error on the same queue pair

_PEER = r"from peer (\S+?)<(\d+)>"
_STATUS = r"(?:with status=(?:\w+\()?|with error )(\d+)"
_OPCODE = r"opcode[= ](?:\w+\()?(\d+)"
_VENDOR = r"vendor[ _]err[= ]?(\d+)"
_DIRECTION = r"vendor[ _]err[= ]?\d+ \((\w+)\)"
_LOCAL_GID = r"localGid (\S+)"
_REMOTE_GID = r"remoteGids? ?(\S+)"
_HCA = r" hca (\S+)"
# Lines after which a process's own completion errors are teardown noise.
ABORT_KINDS = ("watchdog_timeout", "teardown", "terminate", "abort", "nccl_abort", "comm_abort")


def norm_addr(addr: str | None) -> str | None:
    """``::ffff:10.1.2.3`` -> ``10.1.2.3``; ``fe80::1%eth0`` keeps its scope; lower case."""
    if not addr:
        return None
    addr = addr.strip().strip("[]").lower()
    if addr.startswith("::ffff:") and "." in addr:
        addr = addr[7:]
    return addr


def is_loopback(addr: str | None) -> bool:
    a = (addr or "").split("%")[0]
    return a.startswith("127.") or a == "::1"


def is_link_local(addr: str | None) -> bool:
    a = (addr or "").split("%")[0]
    return a.startswith("fe80:") or a.startswith("169.254.")


def ip_of(addr: str | None):
    try:
        return ipaddress.ip_address((addr or "").split("%")[0])
    except ValueError:
        return None


def _events(ctx: Context) -> pl.DataFrame:
    events = ctx.table("events")
    if events.is_empty() or "kind" not in events.columns:
        return pl.DataFrame()
    return events


@memoised
def completion_errors(ctx: Context) -> pl.DataFrame:
    """One row per IB/RoCE completion-error WARN, with its fields parsed, the local endpoint (the
    node that printed it), the remote one resolved to a node where the inputs allow, and
    ``noise`` (after the process's own abort, or a flush) with the reason."""
    events = _events(ctx)
    if events.is_empty() or "error_class" not in events.columns:
        out = pl.DataFrame()
    else:
        warns = events.filter((pl.col("kind") == "nccl_warn") & (pl.col("error_class") == "ib_completion_error"))
        out = _parse(ctx, warns, events) if not warns.is_empty() else pl.DataFrame()
    return out


def _parse(ctx: Context, warns: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    msg = pl.col("message").fill_null("")
    local = pl.coalesce([c for c in (pl.col("node") if "node" in warns.columns else None,
                                     pl.col("host") if "host" in warns.columns else None) if c is not None])
    df = warns.select(
        "input_id", "line_no",
        rank=pl.col("rank") if "rank" in warns.columns else pl.lit(None, pl.Int64),
        local=local, message=msg,
        status=msg.str.extract(_STATUS, 1).cast(pl.Int64, strict=False),
        opcode=msg.str.extract(_OPCODE, 1).cast(pl.Int64, strict=False),
        vendor_err=msg.str.extract(_VENDOR, 1).cast(pl.Int64, strict=False),
        direction=msg.str.extract(_DIRECTION, 1),
        peer_addr=msg.str.extract(_PEER, 1),
        local_gid=msg.str.extract(_LOCAL_GID, 1),
        remote_gid=msg.str.extract(_REMOTE_GID, 1),
        hca=msg.str.extract(_HCA, 1),
        ts=pl.col("ts") if "ts" in warns.columns else pl.lit(None, pl.Datetime("us")),
    )
    rows = df.to_dicts()
    hosts = addr_hosts(ctx)
    gid_hosts: dict[str, set] = {}
    for r in rows:
        r["peer_addr"], r["local_gid"], r["remote_gid"] = (norm_addr(r["peer_addr"]), norm_addr(r["local_gid"]),
                                                           norm_addr(r["remote_gid"]))
        if r["local_gid"] and r["local"]:
            gid_hosts.setdefault(r["local_gid"], set()).add(r["local"])
    aborted = _abort_lines(events)
    for r in rows:
        remote = hosts.get(r["peer_addr"]) if r["peer_addr"] else None
        if remote is None and r["remote_gid"] and len(gid_hosts.get(r["remote_gid"], ())) == 1:
            remote = next(iter(gid_hosts[r["remote_gid"]]))
        r["remote_node"] = remote
        r["remote"] = remote or r["peer_addr"] or (f"GID {r['remote_gid']}" if r["remote_gid"] else None)
        first_abort = aborted.get(r["input_id"])
        if r["status"] in SYMPTOM_STATUSES:
            r["noise"] = "status 5 (flush) is a consequence of an earlier error on the same queue pair"
        elif first_abort is not None and r["line_no"] > first_abort:
            r["noise"] = "printed after this process's own timeout/abort: teardown of its connections"
        else:
            r["noise"] = None
    schema = {**df.schema, "remote_node": pl.String, "remote": pl.String, "noise": pl.String}
    return pl.DataFrame(rows, schema=schema).sort("input_id", "line_no")


def _abort_lines(events: pl.DataFrame) -> dict[int, int]:
    kinds = events.filter(pl.col("kind").is_in(ABORT_KINDS)
                          | (pl.col("kind") == "nccl_warn") & (pl.col("error_class").fill_null("") == "fatal_error")
                          | pl.col("message").fill_null("").str.contains(r"Abort COMPLETE|ncclCommAbort"))
    if kinds.is_empty():
        return {}
    return dict(kinds.group_by("input_id").agg(pl.col("line_no").min()).iter_rows())


@memoised
def addr_hosts(ctx: Context) -> dict[str, str]:
    """Address -> the one host that uses it (bootstrap and socket interfaces of NCCL processes);
    loopback and addresses seen on two hosts resolve to nothing."""
    seen: dict[str, set] = {}
    for p in processes(ctx):
        for _, addr in [(p["bootstrap_if"], p["bootstrap_addr"]), *p["socket"]]:
            a = norm_addr(addr)
            if a and not is_loopback(a) and p["host"]:
                seen.setdefault(a, set()).add(p["host"])
    out = {a: next(iter(h)) for a, h in seen.items() if len(h) == 1}
    return out


@memoised
def processes(ctx: Context) -> list[dict]:
    """NCCL processes with their bootstrap interface and the socket interfaces as (if, addr)."""
    table = ctx.table("nccl_processes")
    out = []
    if not table.is_empty() and "host" in table.columns:
        for r in table.to_dicts():
            socket = []
            for item in r.get("socket_ifs") or []:
                if not item:  # nccl_model keeps None for `NET/Socket : Using [0]enp41s0f1:<0>` (no address)
                    continue
                name, _, addr = item.partition(":")
                socket.append((name, addr.split("<")[0] if addr else None))
            r["socket"] = socket
            out.append(r)
    return out


@dataclass
class Flap:
    node: str
    device: str
    downs: int                      # link-down events during the window (duplicates across dmesg/journal merged)
    timed: bool                     # placed in time (ts_utc known)
    refs: list = field(default_factory=list)    # (input_id, line_no) of link-down lines


def job_window(ctx: Context):
    """(start, end) of the analysed job as UTC timestamps where the inputs say (scheduler record,
    else the first and last timed event); None where unknown."""
    job = ctx.table("job")
    start = end = None
    if not job.is_empty() and "start" in job.columns:
        start, end = job["start"].min(), job["end"].max() if "end" in job.columns else None
    events = _events(ctx)
    if (start is None or end is None) and not events.is_empty() and "ts" in events.columns:
        ts = events["ts"].drop_nulls()
        if len(ts):
            start = start if start is not None else ts.min()
            end = end if end is not None else ts.max()
    return start, end


@memoised
def link_flaps(ctx: Context) -> dict[str, list[Flap]]:
    """Node -> NIC ports whose link went down during the job (or at an unknown time)."""
    events = ctx.table("node_events")
    out: dict[str, list[Flap]] = {}
    if not events.is_empty() and "kind" in events.columns:
        # A kernel log whose link lines name no device (or no host) has no such column.
        downs = with_columns(events, node=pl.String, device=pl.String, flaps=pl.Int64).filter(
            pl.col("kind") == "link_down")
        start, end = job_window(ctx)
        for (node, device), group in groups_of(downs, ["node", "device"], maintain_order=True):
            node = node or (group["host"].drop_nulls().first() if "host" in group.columns else None)
            if node is None:
                continue
            timed = group.filter(pl.col("ts_utc").is_not_null()) if "ts_utc" in group.columns else group.clear()
            if not timed.is_empty() and start is not None:
                margin = pl.duration(minutes=10)
                timed = timed.filter((pl.col("ts_utc") >= pl.lit(start) - margin)
                                     & ((pl.col("ts_utc") <= pl.lit(end) + margin) if end is not None else True))
                if timed.is_empty():
                    continue            # a flap outside the job: not this job's problem
                times = sorted(timed["ts_utc"].to_list())
                count = 1 + sum(1 for a, b in zip(times, times[1:]) if (b - a).total_seconds() > 3.0)
                refs = timed.sort("ts_utc").select("input_id", "line_no").rows()
                out.setdefault(node, []).append(Flap(node, device, count, True, refs))
            elif timed.is_empty():
                refs = group.select("input_id", "line_no").rows()
                downs = int(group["flaps"].max() or len(group))
                out.setdefault(node, []).append(Flap(node, device, downs, False, refs))
    return out


def down_ports(ctx: Context) -> dict[str, list[str]]:
    """Node -> NIC ports ibstat / ibv_devinfo show not Active (``mlx5_2/1 Down``)."""
    ports = ctx.table("nic_ports")
    out: dict[str, list[str]] = {}
    if ports.is_empty() or "state" not in ports.columns:
        return out
    # sysfs and ibv_devinfo rows may lack the port number (or the device): said as "?", not None
    ports = with_columns(ports, ca=pl.String, port=pl.Int64)
    bad = ports.filter(pl.col("state").is_not_null() & ~pl.col("state").str.to_lowercase().str.contains("active"))
    for r in bad.select("node", "ca", "port", "state").unique().sort("node", "ca").iter_rows():
        if r[0]:
            out.setdefault(r[0], []).append(f"{r[1] or '?'}/{r[2] if r[2] is not None else '?'} {r[3]}")
    return out


def vote(pairs: set[frozenset]) -> tuple[list[str], dict[str, int]]:
    """Endpoints in the most failing pairs (the leaders) and every endpoint's count."""
    counts: dict[str, int] = {}
    for pair in pairs:
        for end in pair:
            counts[end] = counts.get(end, 0) + 1
    if not counts:
        return [], counts
    best = max(counts.values())
    return sorted(e for e, c in counts.items() if c == best), counts
