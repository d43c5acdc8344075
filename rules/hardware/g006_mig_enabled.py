"""G006 mig-enabled: MIG (Multi-Instance GPU) mode is on for GPUs of a training job.

What it detects
    ``nvidia-smi -q`` (``MIG Mode`` / ``Current : Enabled``) or ``nvidia-smi --query-gpu=...,
    mig.mode.current --format=csv`` showing MIG mode enabled on GPUs of the job's nodes.

Why it matters
    With MIG on, a process sees a slice of a GPU (a fraction of its SMs and memory) and CUDA
    P2P/IPC between MIG instances is not supported: NCCL cannot use NVLink between them and
    falls back to slower paths or fails, and a job sized for whole GPUs runs out of memory or
    runs several times slower. MIG left on after an inference workload is a common surprise.

What to do
    Turn MIG off on the node for training (``nvidia-smi -i N -mig 0``, then a GPU reset or a
    reboot; on Kubernetes, the MIG strategy of the GPU operator), or schedule the job on nodes
    without MIG.

Known false positives
    A job that was meant to run on MIG slices (small inference or single-GPU work) is fine; the
    finding is a warning, not an error, and names the GPUs so the owner can tell.
"""

from __future__ import annotations

import polars as pl

from postmortem.analyzer.ranges import hostlist
from postmortem.rules.base import Context, Finding, with_columns
from postmortem.rules.declare import Category, Rule, Severity

RULE = Rule(code="G006", name="mig-enabled", severity=Severity.WARNING, category=Category.HARDWARE, since="0.1.0")


def check(ctx: Context) -> list[Finding]:
    rows = []
    health = with_columns(ctx.table("gpu_health"), mig_mode=pl.String, bus_id=pl.String, node=pl.String,
                          input_id=pl.UInt32, line_no=pl.UInt32)
    if not health.is_empty():
        on = health.filter(pl.col("mig_mode").fill_null("").str.to_lowercase() == "enabled")
        rows += [(r["node"], r["bus_id"], r["input_id"], r["line_no"], "nvidia-smi") for r in on.iter_rows(named=True)]
    query = with_columns(ctx.table("gpu_query"), field=pl.String, value=pl.String, node=pl.String,
                         input_id=pl.UInt32, line_no=pl.UInt32)
    if not query.is_empty():
        on = query.filter((pl.col("field") == "mig.mode.current") & (pl.col("value").fill_null("").str.to_lowercase()
                                                                     == "enabled"))
        seen = {(n, i, line) for n, _, i, line, _ in rows}
        rows += [(r["node"], None, r["input_id"], r["line_no"], "nvidia-smi --query-gpu")
                 for r in on.iter_rows(named=True) if (r["node"], r["input_id"], r["line_no"]) not in seen]
    if not rows:
        return []
    nodes = sorted({r[0] for r in rows if r[0]})
    gpus = sorted({r[1] for r in rows if r[1]})
    message = (f"MIG mode is enabled on {len(rows)} GPU(s)" + (f" of {hostlist(nodes)}" if nodes else "")
               + (f" ({', '.join(gpus[:8])})" if gpus else "")
               + ": each process sees a MIG slice (part of the SMs and memory), and P2P/NVLink between MIG "
                 "instances is not available to NCCL; a training job sized for whole GPUs runs slower or out of memory")
    return [RULE.finding(confidence=0.75, title=f"MIG mode on {len(rows)} GPU(s)" + (f" of {hostlist(nodes)}" if nodes else ""),
                    message=message, nodes=nodes,
                    evidence=[ctx.evidence(i, n, note=f"{src}: MIG mode enabled") for _, _, i, n, src in rows[:3]],
                    suggestion=("Turn MIG off for training: nvidia-smi -i <gpu> -mig 0, then reset the GPU (or reboot); "
                                "or schedule the job on nodes without MIG."),
                    culprit=False,
                    details={"gpus": gpus, "nodes": nodes, "count": len(rows), "drain": False})]
