"""H003 all-ranks-stuck: every member waits in the same collective; nobody is behind.

What it detects
    A process group in which every known member has the same sequence in flight (or timed
    out in it) with the same op and size, and no member is behind or silent.

Why it matters
    No rank failed to arrive, so there is no single culprit to drain: the collective itself
    did not complete. Usual causes are the network or a GPU (IB/RoCE errors, a flapping link,
    an Xid), an NCCL/environment mismatch between nodes, or a watchdog/host stall.

What to do
    Look at NCCL WARN lines, kernel logs (Xid, mlx5 link down) and per-node NCCL versions and
    settings; run nccl-tests across the nodes involved.

Known false positives
    If some members' logs are missing, "all" means all that logged: the finding says how many
    members were seen.
"""

from __future__ import annotations

import polars as pl

from postmortem.analyzer.ranges import rank_ranges
from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.hang.hang_model import pg_states

RULE = Rule(code="H003", name="all-ranks-stuck", severity=Severity.ERROR, category=Category.HANG, since="0.1.0")


def check(ctx: Context) -> list[Finding]:
    out = []
    for state in pg_states(ctx):
        if state.wait_seq is None or state.behind or state.mismatched or state.silent or not state.size_stated:
            continue
        if len(state.waiting) < 2 or set(state.waiting) != set(state.snapshot["rank"].to_list()):
            continue
        warns = ctx.table("events")
        net = warns.filter(pl.col("kind") == "nccl_warn") if "kind" in warns.columns else warns
        ref_col = "timeout_ref" if "timeout_ref" in state.snapshot.columns else "progress_ref"
        evidence = [ctx.evidence(ref["input_id"], ref["line_no"], note="one of the waiting ranks")
                    for ref in state.snapshot[ref_col].drop_nulls().to_list()[:2]]
        evidence += [ctx.evidence(i, n, note="NCCL warning")
                     for i, n in net.select("input_id", "line_no").head(3).iter_rows()]
        seen = (f"{len(state.waiting)} of {len(state.members)}" if state.members_known
                else f"all {len(state.waiting)} observed")
        nodes = sorted(set(net["node"].drop_nulls().to_list())) if "node" in net.columns else []
        out.append(RULE.finding(confidence=0.8,
            title=f"all ranks of {state.key} are stuck in {state.majority_op or 'a collective'} #{state.wait_seq}",
            message=f"{seen} members (ranks {rank_ranges(state.waiting)}) have SeqNum {state.wait_seq} in flight with the same "
            "op and size and none is behind: no single rank failed to arrive"
            + (f"; NCCL warnings came from {', '.join(nodes)}" if nodes else ""),
            ranks=[], nodes=nodes, evidence=evidence, culprit=False,
            suggestion="Check the network and GPUs (NCCL WARN lines, dmesg Xid / mlx5 link events, nccl-tests between "
                       "the nodes) and compare NCCL versions and NCCL_* settings across nodes.",
            details={"process_group": state.key, "seq": state.wait_seq, "op": state.majority_op,
                     "waiting_ranks": rank_ranges(state.waiting)}))
    return out
