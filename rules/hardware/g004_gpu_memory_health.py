"""G004 gpu-memory-health: nvidia-smi shows pending row remaps, remap failures, ECC errors or a lost GPU.

What it detects
    In ``nvidia-smi -q`` snapshots of the job's nodes (a prolog/epilog health check, a bug
    report): ``Remapped Rows / Pending: Yes`` or ``Retired Pages / Pending ...: Yes`` (a row
    or page waits for a GPU reset), ``Remapping Failure Occurred: Yes`` (no spare rows left),
    volatile uncorrectable ECC errors (since the last reset), and ``Unable to determine the
    device handle for GPU ...`` (the driver lost the GPU). Only GPUs without an Xid in the
    kernel logs: with one, G001 reports the fault and orders it against the job's failure.

Why it matters
    A pending remap means the faulty memory is still in use until the GPU is reset; a remap
    failure or an unreachable GPU means the GPU must be replaced. These snapshots carry no
    time that orders them against the job's failure, so they are warnings, not a verdict.

What to do
    Reset the GPU (``nvidia-smi -r -i BUS``, with no process on it) to apply a pending remap;
    drain the node and open an RMA (with the serial) for a remap failure, for uncorrectable
    errors that come back after the reset, or for a GPU nvidia-smi cannot reach.

Known false positives
    Aggregate (lifetime) ECC counts and a few remapped rows with nothing pending are a
    normal, repaired GPU: not reported. A snapshot taken after the failure may show a state
    the failure caused; the message says the snapshot's time.
"""

from __future__ import annotations

import polars as pl

from postmortem.analyzer import commands
from postmortem.parsers.base import groups_of
from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.hardware.hw_model import gpu_descriptor, gpu_label, job_nodes

RULE = Rule(code="G004", name="gpu-memory-health", severity=Severity.WARNING, category=Category.HARDWARE, since="0.1.0")


def _yes(value) -> bool:
    return isinstance(value, str) and value.strip().lower().startswith("yes")


def check(ctx: Context) -> list[Finding]:
    health = ctx.table("gpu_health")
    if health.is_empty() or not {"node", "bus_id", "state"} <= set(health.columns):
        return []
    rows = health.filter(pl.col("node").is_not_null() & pl.col("bus_id").is_not_null() & _may_have_problems(health))
    nodes = job_nodes(ctx)
    if nodes:
        rows = rows.filter(pl.col("node").is_in(sorted(nodes)))
    xid_gpus: set[tuple[str, str]] = set()
    events = ctx.table("node_events")
    if not events.is_empty() and {"kind", "pci", "node"} <= set(events.columns):
        xid_gpus = {(n, p) for n, p in events.filter(pl.col("kind").is_in(["xid", "gpu_off_bus"])).select(
            "node", "pci").drop_nulls().iter_rows()}
    ident = ctx.table("gpu_identity")
    out = []
    for (node, bus), group in sorted(groups_of(rows, "node", "bus_id"), key=lambda g: g[0]):
        if (node, bus) in xid_gpus:
            continue
        problems, worst = [], None
        for r in group.sort("input_id", "line_no").iter_rows(named=True):
            found = _problems(r)
            if found and worst is None:
                worst = r
            problems += [p for p in found if p not in problems]
        if not problems:
            continue
        rank = None
        if not ident.is_empty():
            match = ident.filter((pl.col("node") == node) & (pl.col("pci") == bus))
            rank = match["global_rank"][0] if not match.is_empty() else None
        gpu = gpu_descriptor(ctx, node, bus, rank)
        if worst.get("minor") is not None:
            gpu.setdefault("gpu_index", worst["minor"])
        if worst.get("serial"):
            gpu.setdefault("serial", worst["serial"])
        label = gpu_label(gpu) + (f", rank {rank}" if rank is not None else "")
        replace = any(p.startswith(("row remapping failed", "nvidia-smi cannot reach")) for p in problems)
        when = f" (snapshot {worst['snapshot_ts']})" if worst.get("snapshot_ts") else ""
        message = (f"{label}{when}: {'; '.join(problems)}. No Xid for this GPU in the kernel logs, and the "
                   "snapshot has "
                   "no time to order it against the job's failure.")
        bus_id = gpu.get("bus_id")
        drain = commands.sh("scontrol", "update", f"NodeName={commands.shown(node, commands.host)}", "State=DRAIN",
                            f"Reason=GPU {bus_id}")
        suggestion = (f"Drain {node} (`{drain}`) and open an "
                      f"RMA for the GPU at {bus_id}" + (f" (serial {gpu['serial']})" if gpu.get("serial") else "") + "."
                      if replace else
                      f"With no process on it, reset the GPU (`{commands.sh('nvidia-smi', '-r', '-i', commands.shown(bus_id, commands.bus_id))}`) to apply the pending "
                      f"retirement/remap; if uncorrectable errors return, drain {node} and open an RMA.")
        title = f"GPU health: {problems[0]} on {label}"
        out.append(RULE.finding(confidence=0.7 if replace else 0.6, title=title, message=message,
                           ranks=[rank] if rank is not None else [], nodes=[node], gpus=[gpu],
                           evidence=[ctx.evidence(worst["input_id"], worst["line_no"],
                                                  note="nvidia-smi block of this GPU")],
                           suggestion=suggestion, culprit=False,
                           details={"problems": problems, "bus_id": bus}))
    return out


def _may_have_problems(health: pl.DataFrame) -> pl.Expr:
    """The rows ``_problems`` can find something in (a superset, decided by Polars): a fleet's
    snapshot has a block per GPU, nearly all of them healthy, and a row without a problem adds
    nothing to its GPU's finding."""
    signs = [pl.col("state") == "unreachable"] if "state" in health.columns else []
    for name in ("remap_failure", "remap_pending", "retired_pending", "ecc_volatile_uncorrected"):
        dtype = health.schema.get(name)
        if dtype == pl.String:
            signs.append(pl.col(name).str.strip_chars().str.to_lowercase().str.starts_with("yes"))
        elif dtype is not None and dtype.is_numeric():
            signs.append(pl.col(name) != 0)
        elif dtype is not None:
            signs.append(pl.col(name).is_not_null())
    return pl.any_horizontal(signs).fill_null(False) if signs else pl.lit(False)


def _problems(r: dict) -> list[str]:
    found = []
    if r.get("state") == "unreachable":
        found.append("nvidia-smi cannot reach the GPU (Unable to determine the device handle)")
    if _yes(r.get("remap_failure")):
        found.append("row remapping failed (no spare rows left)")
    if _yes(r.get("remap_pending")):
        found.append("a row remap is pending (applied at the next GPU reset)")
    if _yes(r.get("retired_pending")):
        found.append("a page retirement is pending (applied at the next GPU reset)")
    unc = r.get("ecc_volatile_uncorrected")
    if unc:
        found.append(f"{unc} uncorrectable ECC error(s) since the last reset")
    return found
