"""N020 nccl-stated-error: an error NCCL stated (a WARN line, or NCCL's text inside a PyTorch error) that no other rule explains.

What it detects
    Every row of ``nccl_errors`` (``postmortem.analyzer.nccl_errors``): each ``NCCL WARN`` line and each
    NCCL error PyTorch wrapped (``NCCL error in: ..., unhandled system error``,
    ``ncclRemoteError: ...``, the text after ``Last error:``), read with the catalogue of
    ``parsers/nccl_errors.py``: ``Bootstrap Root : rank 1 of 8 ranks has already checked in``
    (two processes with one rank), ``Connect to rank N failed`` and socket errors with their
    errno, ``Cuda failure 'invalid argument'`` in NVLS setup, ``failed to extend /dev/shm``,
    ``Bootstrap : no socket interface found`` (NCCL_SOCKET_IFNAME matching nothing),
    ``Message truncated``, ``ibv_modify_qp failed``, proxy failures, ``remote process exited
    or there was a network error``. One finding per cause, naming the ranks, nodes and GPUs
    that printed it, the peer it names, the decoded errno or NCCL result, NCCL's meaning and
    the fix. Reactions (a peer closed the connection, a proxy operation failed) are listed
    under the cause on the same attempt; without a cause they become a finding of their own
    that says what is missing. A WARN the catalogue does not know is still reported (warning,
    low confidence, its text as evidence). It runs after the other rules and leaves out the
    classes of errors they already explain (a finding citing such a line, or N001 for IB
    completion and queue-pair errors, N002 for interface and bind errors, the memory rules
    for NCCL's out-of-memory, E004 for a refused version mix).

Why it matters
    NCCL often says exactly what went wrong -- but in one line among thousands, on one rank,
    minutes before the other ranks' timeouts that everybody reads. A job whose NCCL printed
    its cause must not be reported as healthy or "cause not determined".

What to do
    Follow the cause's fix (in the finding): a larger /dev/shm for the container, one launch
    per rank and one rendezvous port per job, an NCCL_SOCKET_IFNAME that exists,
    NCCL_NVLS_ENABLE=0 or a working Fabric Manager, the RoCE GID index and routing. For a
    reaction (connection reset, remote process exited) look at the peer it names.

Known false positives
    The same cause printed by every process of the job is a shared cause (configuration, the
    NCCL build), not a faulty rank: the finding then names no culprit. ``Failed to open
    libibverbs`` and CollNet fallbacks appear on healthy hosts: information only. WARN lines
    printed after the job was already aborted repeat the first error: they are counted as
    reactions when a cause came first.
"""

from __future__ import annotations

import polars as pl

from postmortem.analyzer.ranges import hostlist, rank_ranges
from postmortem.parsers import nccl_errors as catalogue
from postmortem.parsers.base import groups_of
from postmortem.rules.base import Context, Evidence, Finding, with_columns
from postmortem.rules.declare import Category, Rule, Severity

RULE = Rule(code="N020", name="nccl-stated-error", severity=Severity.ERROR, category=Category.NETWORK, since="0.1.0")
LATE = True   # after the rules that explain some of these errors better (postmortem.rules.report.run_rules)

# Error classes a more specific rule reads, and the rules that do: when one of them fired in this
# attempt, its class is explained.
EXPLAINED_BY = {
    "ib_completion_error": {"N001"}, "ib_modify_qp": {"N001"}, "fatal_error": {"N001"},
    "no_interface": {"N002"}, "bind_failed": {"N002"},
    "out_of_memory": {"M001", "M002"}, "version_mismatch": {"E004"},
    "libibverbs_missing": {"N012"},
}


def check(ctx: Context) -> list[Finding]:
    rows = with_columns(ctx.table("nccl_errors"), cause=pl.String, role=pl.String, error_class=pl.String,
                        input_id=pl.UInt32, line_no=pl.UInt32, rank=pl.Int64, node=pl.String, host=pl.String,
                        pid=pl.Int64, cuda_dev=pl.Int64, message=pl.String, source=pl.String,
                        first_on_process=pl.Boolean, peer_rank=pl.Int64, peer=pl.String, errno_name=pl.String,
                        errno=pl.Int64, errno_text=pl.String, result=pl.String, bytes=pl.Int64, src_file=pl.String)
    if rows.is_empty():
        return []
    rows = rows.with_columns(where=pl.coalesce("node", "host"), role=pl.col("role").fill_null("unknown"))
    explained = _explained(ctx, rows)
    process = pl.concat_str([pl.col("input_id").cast(pl.String), pl.col("host").fill_null(""),
                             pl.coalesce(pl.col("pid").cast(pl.String), pl.col("rank").cast(pl.String), pl.lit(""))],
                            separator="|")
    rows = rows.with_columns(_process=process).sort("input_id", "line_no")
    has_cause = bool((rows["role"] == "cause").any() | (rows["role"] == "unknown").any())
    printers = rows["_process"].n_unique()
    open_rows = rows.filter(~pl.col("error_class").is_in(list(explained)))
    out: list[Finding] = []
    consequences = rows.filter(pl.col("role") == "consequence")
    # Processes with a stated cause (explained or not): their result codes say nothing more.
    with_cause = set(rows.filter(pl.col("role").is_in(["cause", "unknown"]))["_process"].to_list())
    ranks_with_cause = set(rows.filter(pl.col("role").is_in(["cause", "unknown"]))["rank"].drop_nulls().to_list())
    for (name,), group in groups_of(open_rows.filter(pl.col("cause").is_not_null()), "cause", maintain_order=True):
        role = group["role"][0]
        if role == "consequence" and has_cause:
            continue   # listed under the cause
        if role == "result":
            group = group.filter(~pl.col("_process").is_in(list(with_cause))
                                 & ~pl.col("rank").is_in(list(ranks_with_cause)).fill_null(False))
            if group.is_empty():
                continue
        out.append(_finding(ctx, name, group, consequences if role in ("cause", "unknown") else None, printers))
    unknown = open_rows.filter(pl.col("cause").is_null())
    if not unknown.is_empty():
        out.append(_unknown(ctx, unknown))
    return out


def _explained(ctx: Context, rows: pl.DataFrame) -> set[str]:
    """Error classes another finding of this attempt covers: a class its rule reads
    (``EXPLAINED_BY``), or the class of a line it cites as evidence."""
    others = [f for f in ctx.findings if f.code != RULE.code]
    codes = {f.code for f in others}
    out = {klass for klass, by in EXPLAINED_BY.items() if by & codes}
    cited = {(e.path, e.line) for f in others for e in f.evidence}
    if cited:
        paths = dict(ctx.frame("SELECT input_id, path FROM inputs").iter_rows())
        for klass, input_id, line_no in rows.select("error_class", "input_id", "line_no").iter_rows():
            if (paths.get(input_id), line_no) in cited:
                out.add(klass)
    return out


def _finding(ctx: Context, name: str, group: pl.DataFrame, consequences: pl.DataFrame | None, printers: int) -> Finding:
    cause = catalogue.BY_NAME[name]
    role = cause.role
    firsts = group.sort("input_id", "line_no").unique("_process", keep="first", maintain_order=True)
    nodes = sorted(set(firsts["where"].drop_nulls().to_list()))
    ranks = sorted(set(firsts["rank"].drop_nulls().to_list()))
    procs = firsts.height
    # A cause printed by some processes only, on the host that printed it, names those processes;
    # one that every process printed is shared (the build, the configuration), not a faulty rank.
    shared = procs >= max(2, printers) and printers > 1
    culprit = role == "cause" and cause.where == "printer" and not shared and bool(nodes or ranks)
    severity = Severity.INFO if role == "harmless" else Severity(cause.severity)
    if role == "consequence":
        severity = Severity.WARNING
    text = firsts["message"][0]
    who = _who(firsts)
    facts = _facts(firsts)
    then = ""
    if consequences is not None and not consequences.is_empty():
        kinds = sorted({catalogue.BY_NAME[c].title for c in consequences["cause"].drop_nulls().to_list()})
        then = (f"; then {consequences.height} reaction line(s) ({', '.join(kinds[:4])})"
                f"{' on ' + hostlist(sorted(set(consequences['where'].drop_nulls().to_list()))) if consequences['where'].drop_nulls().len() else ''}")
    extra = _context(ctx, name, firsts)
    if role == "consequence":
        message = (f"NCCL said '{_clip(text)}' ({who}): {cause.meaning}{facts}; the inputs hold no NCCL error that "
                   "came before it, so the cause is on the peer or outside these logs (its own traceback, an OOM "
                   "kill, a signal, or NCCL_DEBUG=INFO output of the other ranks)")
    elif role == "result":
        message = (f"{_source(firsts)} '{_clip(text)}' ({who}): {cause.meaning}{facts}; NCCL's own WARN line for it "
                   "is not in the inputs (NCCL_DEBUG=WARN or INFO prints it)")
    else:
        message = (f"NCCL said '{_clip(text)}' ({who}): {cause.meaning}{facts}{extra}"
                   + (f"; printed by all {procs} processes that logged NCCL errors: a shared cause" if shared else "")
                   + then)
    evidence = [_ev(ctx, r, "NCCL's own words" if r["source"] == "NCCL WARN" else "NCCL's error inside PyTorch's")
                for r in firsts.head(3).iter_rows(named=True)]
    if consequences is not None and not consequences.is_empty():
        evidence.append(_ev(ctx, consequences.row(0, named=True), "a reaction that followed"))
    gpus = [ctx.gpu_of(r) for r in ranks[:4]] if ranks else [
        {"node": r["where"], "cuda_dev": r["cuda_dev"], "pid": r["pid"]} for r in firsts.head(4).iter_rows(named=True)]
    confidence = {"cause": 0.8, "result": 0.6, "consequence": 0.4, "harmless": 0.5}.get(role, 0.3)
    if shared and role == "cause":
        confidence = 0.7
    category = Category.SYMPTOM if role == "consequence" else (Category.INFO if role == "harmless" else Category(cause.category))
    return RULE.finding(severity=severity, confidence=confidence, title=f"NCCL: {cause.title}" + (f" on {hostlist(nodes)}" if nodes else ""),
                   message=message, ranks=ranks, nodes=nodes, gpus=gpus, evidence=evidence,
                   suggestion=cause.action + _fix_extra(ctx, name, firsts), category=category, culprit=culprit,
                   details={"cause": name, "error_class": cause.error_class, "role": role, "where": cause.where,
                            "processes": procs, "lines": group.height, "shared": shared, "drain": False,
                            "printed_by": _printed_by(firsts), "peer_ranks": _distinct(firsts, "peer_rank"),
                            "peers": _distinct(firsts, "peer"), "errno": _distinct(firsts, "errno_name"),
                            "result": _distinct(firsts, "result"), "versions": cause.versions,
                            "reactions": consequences.height if consequences is not None else 0})


def _unknown(ctx: Context, rows: pl.DataFrame) -> Finding:
    firsts = rows.unique("message", keep="first", maintain_order=True)
    nodes = sorted(set(rows["where"].drop_nulls().to_list()))
    ranks = sorted(set(rows["rank"].drop_nulls().to_list()))
    shown = "; ".join(f"'{_clip(m, 120)}'" for m in firsts["message"].head(3).to_list())
    message = (f"{rows.height} NCCL WARN line(s) of a kind the catalogue does not know ({_who(rows)}): {shown}"
               f"{' ...' if firsts.height > 3 else ''}; read them: NCCL prints WARN for real failures")
    return RULE.finding(severity=Severity.WARNING, confidence=0.3, title=f"NCCL WARN not in the catalogue{' on ' + hostlist(nodes) if nodes else ''}",
                   message=message, ranks=ranks, nodes=nodes,
                   evidence=[_ev(ctx, r, "NCCL WARN") for r in firsts.head(3).iter_rows(named=True)],
                   suggestion="Read the WARN text and the lines before it on the same process; search NVIDIA/nccl "
                              "issues for the text.",
                   category=Category.INFO, culprit=False,
                   details={"cause": "unknown", "role": "unknown", "lines": rows.height, "drain": False,
                            "texts": firsts["message"].head(10).to_list(), "printed_by": _printed_by(firsts)})


# -- wording ------------------------------------------------------------------------------------


def _clip(text: str | None, n: int = 160) -> str:
    text = (text or "").strip()
    return text if len(text) <= n else text[: n - 3] + "..."


def _source(rows: pl.DataFrame) -> str:
    return "NCCL said" if rows["source"][0] == "NCCL WARN" else "PyTorch reported NCCL's error"


def _who(rows: pl.DataFrame) -> str:
    parts = []
    ranks = sorted(set(rows["rank"].drop_nulls().to_list()))
    if ranks:
        parts.append(f"rank {rank_ranges(ranks)}")
    nodes = sorted(set(rows["where"].drop_nulls().to_list()))
    if nodes:
        parts.append(f"on {hostlist(nodes)}")
    devs = sorted(set(rows["cuda_dev"].drop_nulls().to_list()))
    if devs and len(nodes) <= 1:
        parts.append(f"GPU {', '.join(map(str, devs[:8]))}")
    pids = sorted(set(rows["pid"].drop_nulls().to_list()))
    if pids:
        parts.append(f"pid {', '.join(map(str, pids[:4]))}{' ...' if len(pids) > 4 else ''}")
    return " ".join(parts) or "printer unknown"


def _facts(rows: pl.DataFrame) -> str:
    out = []
    peer_ranks = _distinct(rows, "peer_rank")
    if peer_ranks:
        out.append(f"it names rank {', '.join(map(str, peer_ranks[:6]))}")
    peers = _distinct(rows, "peer")
    if peers:
        out.append(f"peer {', '.join(peers[:3])}")
    for r in rows.select("errno_name", "errno", "errno_text").unique().drop_nulls("errno_name").iter_rows(named=True):
        meaning = catalogue.ERRNO_MEANING.get(r["errno_name"])
        out.append(f"errno {r['errno_name']} ({r['errno']}, '{r['errno_text']}')" + (f": {meaning}" if meaning else ""))
    results = _distinct(rows, "result")
    if results:
        out.append(f"NCCL result '{', '.join(results)}'")
    return ("; " + "; ".join(out)) if out else ""


def _distinct(rows: pl.DataFrame, column: str) -> list:
    if column not in rows.columns:
        return []
    return sorted(set(rows[column].drop_nulls().to_list()))


def _printed_by(rows: pl.DataFrame) -> list[dict]:
    return [{"rank": r["rank"], "node": r["where"], "pid": r["pid"], "cuda_dev": r["cuda_dev"]}
            for r in rows.head(16).iter_rows(named=True)]


def _ev(ctx: Context, r: dict, note: str) -> Evidence:
    return ctx.evidence(r["input_id"], r["line_no"], note=note)


def _context(ctx: Context, name: str, rows: pl.DataFrame) -> str:
    """What else the inputs say about this cause: the NCCL_SOCKET_IFNAME that matched nothing,
    the interfaces the other hosts used."""
    if name != "no_socket_interface":
        return ""
    values = _ifname(ctx, rows)
    return f"; NCCL_SOCKET_IFNAME is {', '.join(sorted(values))} there" if values else ""


def _fix_extra(ctx: Context, name: str, rows: pl.DataFrame) -> str:
    if name == "no_socket_interface":
        values = _ifname(ctx, rows)
        if values:
            return f" (here NCCL_SOCKET_IFNAME={sorted(values)[0]} matched no interface.)"
    return ""


def _ifname(ctx: Context, rows: pl.DataFrame) -> set[str]:
    hosts = set(rows["where"].drop_nulls().to_list()) | set(rows["host"].drop_nulls().to_list())
    values = set()
    env = with_columns(ctx.table("nccl_env"), key=pl.String, value=pl.String, host=pl.String)
    if not env.is_empty():
        hit = env.filter((pl.col("key") == "NCCL_SOCKET_IFNAME") & (pl.col("host").is_in(list(hosts)) | (len(hosts) == 0)))
        values |= set(hit["value"].drop_nulls().to_list())
    dumps = with_columns(ctx.table("env_nodes"), key=pl.String, value=pl.String, node=pl.String)
    if not dumps.is_empty():
        hit = dumps.filter((pl.col("key") == "NCCL_SOCKET_IFNAME") & pl.col("node").is_in(list(hosts)))
        values |= set(hit["value"].drop_nulls().to_list())
    return values
