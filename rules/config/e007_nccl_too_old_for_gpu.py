"""E007 nccl-too-old-for-gpu: NCCL needs more shared memory per block than this GPU allows.

What it detects
    NCCL's INFO line ``ncclMaxSharedMem N exceeds device/fn maxSharedMem M``: the release's
    kernels were built for more shared memory per block than the GPU provides.

Why it matters
    The NCCL release does not support this GPU generation properly: its kernels cannot launch
    as built, so communicators fail or fall back (seen on new consumer Blackwell cards with
    NCCL 2.25: a bug fixed in a later release). Disabling P2P or changing transports does not
    help; only another NCCL release does.

What to do
    Upgrade NCCL to a release that supports the GPU (a newer ``nvidia-nccl-cu12`` wheel or
    container), and check ``torch.cuda.nccl.version()`` in the job's environment.

Known false positives
    None known: the line is printed only when the limit is exceeded. The finding names no
    culprit node (every node with that GPU and release is affected).
"""

from __future__ import annotations

import polars as pl

from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity

RULE = Rule(code="E007", name="nccl-too-old-for-gpu", severity=Severity.ERROR, category=Category.CONFIG, since="0.1.0")


def check(ctx: Context) -> list[Finding]:
    events = ctx.table("events")
    if events.is_empty() or "kind" not in events.columns:
        return []
    hits = events.filter(pl.col("kind") == "shared_mem_limit").sort("input_id", "line_no")
    if hits.is_empty():
        return []
    procs = ctx.table("nccl_processes")
    hosts = sorted(set(hits["host"].drop_nulls().to_list())) if "host" in hits.columns else []
    versions = []
    if not procs.is_empty() and hosts:
        versions = sorted(set(procs.filter(pl.col("host").is_in(hosts))["version"].drop_nulls().to_list()))
    release = f"NCCL {', '.join(versions)}" if versions else "this NCCL release"
    first = hits.row(0, named=True)
    detail = first.get("detail") or first.get("message") or ""
    return [RULE.finding(confidence=0.75, title=f"{release} is too old for this GPU (shared memory limit exceeded)",
        message=f"NCCL reports ncclMaxSharedMem {detail} on {len(hits)} process(es) ({', '.join(hosts) or '?'}): the "
        f"kernels of {release} need more shared memory per block than the GPU provides, a known NCCL bug on new "
        "GPU generations fixed in later releases; transports and NCCL_P2P_DISABLE do not avoid it",
        nodes=hosts, evidence=[ctx.evidence(r["input_id"], r["line_no"], note="NCCL's shared memory check")
                               for r in hits.head(2).iter_rows(named=True)],
        suggestion="Upgrade NCCL to a release that supports this GPU (a newer nvidia-nccl-cu12 wheel or container "
                   "image) and check torch.cuda.nccl.version() in the job's environment.",
        culprit=False, details={"versions": versions, "drain": False})]
