"""G001 gpu-fault: a GPU of the job failed (Xid) at or before the job's first error.

What it detects
    NVIDIA driver Xid events in the nodes' kernel logs (``NVRM: Xid (PCI:...): N``) that mean
    a hardware or firmware fault: 79 (fell off the bus), 48 (double-bit ECC), 64 (row remap
    failure), 74 (NVLink), 94/95 (contained / uncontained ECC), 119/120 (GSP), 62, 121, 140,
    144-150 (NVLink / NVSwitch), 154 (recovery action). The Xid's PCI address is joined to
    the GPU (index, serial, uuid from nvidia-smi or the kernel) and to the rank that ran on it
    (NCCL busId, the rank map, or the Xid's pid). It is the cause when it comes at or before
    the job's first error (first watchdog timeout, exception or failed exit), compared on one
    clock: every node's offset from ``node_clocks`` is removed and the event's
    ``order_confidence`` sets the tolerance. Xid 13/31 (usually the program's own illegal
    address) count only when they repeat on one GPU and nowhere else. Xid 63/92 alone
    (a row remap recorded, a high single-bit rate) are warnings. Xid 43/45 (the channel reset
    and cleanup after processes were killed) are ignored.

Why it matters
    A GPU that falls off the bus stops its rank in the middle of a step: the rank never enters
    the next collective and every other rank times out about the collective timeout later.
    The hang analysis then correctly finds that rank, but the fix is not in the code: the
    GPU must be drained and replaced, or the job fails again on the same node.

What to do
    Drain the node (``scontrol update NodeName=NODE State=DRAIN Reason="Xid N GPU i BUS"``),
    run ``nvidia-smi -q -i BUS`` and ``dcgmi diag -r 3`` on it, and open an RMA with the GPU's
    serial for 79/48/64/95 and recurring 94; resubmit with ``--exclude=NODE``. ECC 94/63:
    the GPU needs a reset (``nvidia-smi -r -i BUS``) to apply the row remap; a remap failure
    or a repeat means replacement.

Known false positives
    An Xid that comes after the first error (a consequence of the kill, or unrelated) is not
    blamed: it is reported as a warning that names the GPU. When the clocks cannot order the
    Xid against the first error (no clock offset, a zone assumed, no boot time for plain
    dmesg), the finding says so and does not claim the cause. An Xid on a GPU that no rank of
    the job used is information only. A single Xid 13/31 is usually the application
    (an illegal address), not the GPU.
"""

from __future__ import annotations

import polars as pl

from postmortem.analyzer import commands
from postmortem.parsers.base import groups_of
from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.hang.hang_model import analyse_hang
from postmortem.rules.hardware.hw_model import (attempt_start, first_error, fmt_s, gpu_descriptor, gpu_label, job_nodes, occurrences,
                            offsets, order_against)

RULE = Rule(code="G001", name="gpu-fault", severity=Severity.ERROR, category=Category.HARDWARE, since="0.1.0")

FATAL = {48, 62, 64, 74, 79, 94, 95, 119, 120, 121, 140, 144, 145, 146, 147, 148, 149, 150, 154}
APPLICATION = {13, 31}    # usually the program (illegal instruction / address)
AFTERMATH = {43, 45}      # channel reset and cleanup after processes were killed: ignored

ADVICE = {
    79: "the GPU dropped off the PCIe bus: reseat/replace (RMA); check the node's PCIe AER lines and power",
    48: "uncorrectable (double-bit) memory error: reset the GPU to retire/remap the row; repeated DBEs mean RMA",
    94: "contained ECC error: reset the GPU (`nvidia-smi -r`) so the pending row remap is applied; repeats mean RMA",
    95: "uncontained ECC error: the GPU needs a reset before any further use; repeats mean RMA",
    64: "row remapping failed: the GPU has run out of spare rows and must be replaced (RMA)",
    74: "NVLink error: run `nvidia-smi nvlink -e -i IDX` and a field diagnostic; reseat or replace the baseboard",
    119: "GSP firmware timeout: reset the GPU; if it recurs, update the driver/firmware or RMA",
    120: "GSP firmware error: reset the GPU; if it recurs, update the driver/firmware or RMA",
}
_PRIORITY = [79, 95, 64, 48, 94, 74, 154, 140, 119, 120, 121, 62, 144, 145, 146, 147, 148, 149, 150, 63, 92, 13, 31]


def _events(ctx: Context) -> pl.DataFrame:
    ev = ctx.table("node_events")
    if ev.is_empty() or "kind" not in ev.columns:
        return pl.DataFrame()
    rows = ev.filter(pl.col("kind").is_in(["xid", "gpu_off_bus"]) & pl.col("pci").is_not_null()
                     & pl.col("node").is_not_null())
    if rows.is_empty():
        return rows
    code = (pl.when(pl.col("kind") == "gpu_off_bus").then(pl.lit(79))
            .otherwise(pl.col("code").cast(pl.Int64, strict=False)))
    for c, t in (("ts_utc", pl.Datetime("us")), ("order_confidence", pl.String), ("global_rank", pl.Int64),
                 ("gpu_index", pl.Int64), ("meaning", pl.String)):
        if c not in rows.columns:
            rows = rows.with_columns(pl.lit(None, dtype=t).alias(c))
    return rows.with_columns(xid=code).filter(pl.col("xid").is_not_null() & ~pl.col("xid").is_in(list(AFTERMATH)))


def _rank_of(ctx: Context, node: str, pci: str, rows: pl.DataFrame) -> tuple[int | None, str]:
    """(rank, how): the rank that ran on the GPU, or None with 'not-job' / 'node-only' / 'unknown'."""
    ranks = rows["global_rank"].drop_nulls()
    if len(ranks):
        return int(ranks[0]), "bus id"
    table = ctx.ranks
    here = table.filter(pl.col("node") == node) if not table.is_empty() else table
    if here.is_empty():
        return None, "unknown"
    pids = set(rows["pid"].drop_nulls().to_list()) if "pid" in rows.columns else set()
    by_pid = here.filter(pl.col("pid").is_in(sorted(pids))) if pids else here.clear()
    if not by_pid.is_empty():
        return int(by_pid["rank"][0]), "pid"
    if here["bus_id"].drop_nulls().len() == here.height:
        return None, "not-job"          # every rank's GPU on this node is known, and this is none of them
    health = ctx.table("gpu_health")
    gpus_on_node = (health.filter((pl.col("node") == node) & (pl.col("state") == "ok"))["bus_id"].n_unique()
                    if not health.is_empty() and "node" in health.columns else 0)
    if gpus_on_node and here.height >= gpus_on_node:
        return None, "node-only"        # the job used every GPU of the node: one of its ranks ran here
    return None, "unknown"


def check(ctx: Context) -> list[Finding]:
    events = _events(ctx)
    if events.is_empty():
        return []
    nodes = job_nodes(ctx)
    if nodes:
        events = events.filter(pl.col("node").is_in(sorted(nodes)))
    if events.is_empty():
        return []
    first = first_error(ctx)
    start = attempt_start(ctx)
    app_gpus = {(n, p) for n, p in events.filter(pl.col("xid").is_in(list(APPLICATION))).select("node", "pci").unique()
                .iter_rows()}
    findings = []
    for (node, pci), rows in sorted(groups_of(events, "node", "pci"), key=lambda g: g[0]):
        finding = _gpu_finding(ctx, node, pci, rows, first, start, app_gpus)
        if finding is not None:
            findings.append(finding)
    return findings


def _gpu_finding(ctx: Context, node: str, pci: str, rows: pl.DataFrame, first, start, app_gpus) -> Finding | None:
    codes = sorted(set(rows["xid"].to_list()), key=lambda c: _PRIORITY.index(c) if c in _PRIORITY else 99)
    fatal = [c for c in codes if c in FATAL]
    app_repeat = False
    if not fatal:
        app = [c for c in codes if c in APPLICATION]
        if app:
            n = len(occurrences(rows.filter(pl.col("xid").is_in(list(APPLICATION)) & (pl.col("kind") == "xid"))))
            app_repeat = n >= 2 and len(app_gpus) == 1
    main = fatal[0] if fatal else codes[0]
    main_rows = rows.filter(pl.col("xid").is_in(fatal) if fatal else pl.col("xid") == main)
    occ = occurrences(main_rows.filter(pl.col("kind") == "xid") if (main_rows["kind"] == "xid").any() else main_rows)
    first_occ = occ[0]
    rank, how = _rank_of(ctx, node, pci, rows)
    gpu = gpu_descriptor(ctx, node, pci, rank)
    gpu["xid"] = main
    label = gpu_label(gpu) + (f", rank {rank}" if rank is not None else "")
    meaning = (main_rows["meaning"].drop_nulls()[0] if main_rows["meaning"].drop_nulls().len()
               else "GPU has fallen off the bus")
    same_node = first is not None and first.node == node
    order, lead = order_against(first_occ["ts_utc"], first_occ["order_confidence"], first, same_node)
    before_start = _before_start(ctx, first_occ["ts_utc"], start, node)
    n_occ = len(occ)
    what = f"Xid {main} ({meaning})" + (f", {n_occ} times" if n_occ > 1 else "")
    others = [c for c in codes if c != main]
    if others:
        what += f"; also Xid {', '.join(str(c) for c in others)}"

    # -- how sure: the fault's kind, whether the job used the GPU, and the order against the first error
    hang = analyse_hang(ctx)
    agrees = rank is not None and rank in hang.culprits
    culprit, confidence, severity = False, 0.0, Severity.WARNING
    if how == "not-job":
        severity, confidence = Severity.INFO, 0.8
        claim = "no rank of this job ran on that GPU (the ranks on the node used other bus ids): not this job's cause"
    elif not fatal and not app_repeat:
        if main in APPLICATION:
            severity, confidence = Severity.INFO, 0.6
            claim = ("Xid 13/31 once, or on several GPUs, is usually the program's own illegal address or instruction, "
                     "not the GPU: read the rank's CUDA error")
        else:
            confidence = 0.7
            claim = "recorded on the GPU; on its own it does not stop a job, but the GPU needs a reset to apply it"
    elif before_start:
        confidence = 0.4
        claim = ("logged before this attempt started: an older fault, or the node's kernel times and the job's "
                 "logs disagree (zone or clock); not claimed as this attempt's cause")
    elif order == "before" or order == "no-error" or (order == "unknown" and agrees):
        culprit, severity = True, Severity.ERROR
        conf_order = first_occ["order_confidence"] or "low"
        if order == "before":
            confidence = {"high": 0.9, "medium": 0.75}.get(conf_order if not same_node else "high", 0.6)
            claim = (f"{fmt_s(lead)} before the job's first error ({first.kind}"
                     + (f" on rank {first.rank}" if first.rank is not None else "")
                     + f"; order {conf_order if not same_node else 'on one clock'})")
        elif order == "no-error":
            confidence = 0.6
            claim = "the logs show no failure to order it against (no timeout, exception or failed exit)"
        else:
            confidence = 0.6
            claim = ("its time cannot be placed on the job's clock (no boot time for the dmesg lines), but its rank is "
                     "the one the hang analysis found missing")
        if app_repeat:
            confidence = min(confidence, 0.55)
            claim += f"; Xid {main} repeated {n_occ} times on this GPU and on no other, which points at the GPU"
        if rank is None:
            confidence -= 0.15
            claim += "; the rank on that GPU is not known (the job used every GPU of the node)"
        if how == "unknown":
            culprit, severity, confidence = False, Severity.WARNING, min(confidence, 0.45)
            claim += "; whether the job used this GPU is unknown (no bus id for its ranks)"
    elif order == "after":
        confidence = 0.3
        claim = (f"{fmt_s(lead)} after the job's first error ({first.kind}"
                 + (f" on rank {first.rank}" if first.rank is not None else "")
                 + "): a consequence of the failure or unrelated, not its cause; the GPU still needs attention")
    else:
        confidence = 0.4
        why = ("no time on the job's clock (plain dmesg without a boot time)" if order == "unknown" else
               f"{fmt_s(lead)} {'before' if lead >= 0 else 'after'} the first error, within what the clocks can tell "
               f"apart (order confidence {first_occ['order_confidence'] or 'none'})")
        claim = f"cannot be ordered against the job's first error: {why}; not claimed as the cause"

    evidence = _evidence(ctx, rows, first_occ, first if culprit or order == "after" else None, lead)
    title = f"Xid {main} ({meaning}) on {label}"
    message = f"{what} on {label}" + (f" (serial {gpu['serial']})" if gpu.get("serial") else "") + f": {claim}."
    if main in ADVICE and severity != "info":
        message += f" {ADVICE[main][0].upper()}{ADVICE[main][1:]}."
    suggestion = _suggestion(node, gpu, main, severity)
    return RULE.finding(severity=severity, confidence=max(0.05, min(confidence, 0.95)), title=title, message=message,
                   ranks=[rank] if rank is not None else [], nodes=[node], gpus=[gpu], evidence=evidence,
                   suggestion=suggestion, category=Category.HARDWARE if severity != Category.INFO else Category.INFO, culprit=culprit,
                   details={"xid": main, "xids": codes, "occurrences": n_occ, "pci": pci, "rank_join": how,
                            "order": order, "seconds_before_first_error": round(lead, 3) if lead is not None else None,
                            "order_confidence": first_occ["order_confidence"],
                            "first_error": ({"kind": first.kind, "rank": first.rank, "node": first.node,
                                             "ts": first.ts.isoformat()} if first else None),
                            "hang_culprits": hang.culprits})


def _before_start(ctx: Context, ts_utc, start, node: str) -> bool:
    if ts_utc is None or start is None:
        return False
    off = offsets(ctx)
    # the attempt's start is on some node's clock: allow the largest offset and a minute
    slack = max([abs(o) for o in off.values() if o is not None] + [0.0]) + 60.0
    return (start - ts_utc).total_seconds() > slack


def _evidence(ctx: Context, rows: pl.DataFrame, occ: dict, first, lead) -> list:
    out = []
    shown = sorted(occ["rows"], key=lambda r: (r["ts_utc"] is None, r["input_id"], r["line_no"]))[:1]
    for r in shown:
        out.append(ctx.evidence(r["input_id"], r["line_no"], note=f"Xid {r['xid']} in the kernel log"
                                + (f" ({r['ts_basis']})" if r.get("ts_basis") else "")))
    off = rows.filter(pl.col("kind") == "gpu_off_bus").sort("input_id", "line_no")
    if not off.is_empty() and shown and shown[0]["kind"] != "gpu_off_bus":
        r = off.row(0, named=True)
        out.append(ctx.evidence(r["input_id"], r["line_no"], note="the driver lost the GPU"))
    if first is not None and first.input_id is not None:
        note = f"the job's first error ({first.kind})"
        if lead is not None:
            note += f", {fmt_s(lead)} {'after' if lead >= 0 else 'before'} the Xid"
        out.append(ctx.evidence(first.input_id, first.line_no, note=note))
    return out


def _suggestion(node: str, gpu: dict, xid: int, severity: str) -> str:
    bus = gpu.get("bus_id", "?")
    idx = gpu.get("gpu_index", gpu.get("cuda_dev", "?"))
    # log text never becomes a command: values of the wrong shape are placeholders (postmortem.analyzer.commands)
    host, bus_arg = commands.shown(node, commands.host), commands.shown(bus, commands.bus_id)
    odd = "" if commands.host(node) else f" ({repr(str(node))[1:-1]} {commands.NOT_A_HOST})"
    if severity == "info":
        return (f"Nothing to do for this job; if it recurs, check {node} GPU {idx} ({bus}) with "
                f"`{commands.sh('nvidia-smi', '-q', '-i', bus_arg)}`.{odd}")
    serial = f", serial {gpu['serial']}" if gpu.get("serial") else ""
    drain = commands.sh("scontrol", "update", f"NodeName={host}", "State=DRAIN", f"Reason=Xid {xid} GPU {idx} {bus}")
    return (f"Drain {node}: `{drain}`; "
            f"on it run `{commands.sh('nvidia-smi', '-q', '-i', bus_arg)}` and `dcgmi diag -r 3`; open an RMA for GPU "
            f"{idx} ({bus}{serial}) if the diagnostic fails or the Xid recurs; resubmit with "
            f"`{commands.sh(f'--exclude={host}')}`.{odd}")
