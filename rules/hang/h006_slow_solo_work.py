"""H006 slow-solo-work: the rank the others waited for was busy with its own work, not stuck.

What it detects
    The one rank that never entered the collective the others time out in (as H001 finds
    it), where the evidence shows it was still *working* after the others began to wait:
    its own timestamped progress (iteration or validation lines, checkpoint-save lines, other
    log lines) after the enqueue time of the op the others wait in, c10d counters still
    advancing in another group, or live stacks that are active in compute or moving between
    dumps (not idle in a sleep or a wait).

Why it matters
    This is not a desync and not a fault: the rank would have entered late. Rank-0-only
    checkpoint saves, evaluations, logging or data preparation that outlast the collective
    timeout kill a healthy job. Fixing "the code path" (H001's advice) is the wrong fix.

What to do
    Raise the collective timeout above the solo work's duration
    (``init_process_group(timeout=timedelta(minutes=...))``, Megatron
    ``--distributed-timeout-minutes``), or move the work off the critical path: save
    asynchronously or on every rank (distributed checkpointing), run evaluation on all ranks,
    or put a barrier with its own longer timeout right after the solo work.

Known false positives
    A rank that loops forever while logging (a retry loop, a deadlocked helper thread that
    still prints) looks busy too. Timestamps compared across nodes are only as good as the
    clocks. Without timestamps or live stacks the two cases cannot be told apart, and H001
    reports the rank as never entered (with this possibility in its suggestion).
"""

from __future__ import annotations

from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.hang.hang_model import analyse_hang, solo_work

RULE = Rule(code="H006", name="slow-solo-work", severity=Severity.ERROR, category=Category.HANG, since="0.1.0")


def check(ctx: Context) -> list[Finding]:
    work = solo_work(ctx)
    if work is None:
        return []
    hang = analyse_hang(ctx)
    rank, state = work["rank"], hang.pg
    gpu = ctx.gpu_of(rank)
    where = (f"{state.majority_op or 'a collective'} #{state.wait_seq} ({state.key})" if state is not None
             else "a collective")
    waiting = f"{len(state.waiting)} rank(s)" if state is not None else "the other ranks"
    timeout = ""
    if state is not None and "timeout_ms" in state.snapshot.columns:
        ms = state.snapshot["timeout_ms"].drop_nulls()
        timeout = f" after Timeout(ms)={int(ms.max())}" if len(ms) else ""
    message = (f"{waiting} waited in {where} and timed out{timeout}, while rank {rank} "
               f"({gpu.get('node') or 'node ?'}) was still working on its own: {'; '.join(work['signs'])}. "
               "It would have entered late: the timeout was shorter than its solo work, not a desync")
    evidence = [ctx.evidence(i, n, note=f"rank {rank} still making progress") for i, n in work["refs"]]
    return [RULE.finding(confidence=0.7 * (hang.confidence / 0.9 if hang.confidence else 1.0),
        title=f"rank {rank} was busy with slow solo work while the others waited in {where}", message=message,
        ranks=[rank], nodes=[gpu["node"]] if gpu.get("node") else [], gpus=[gpu], evidence=evidence,
        culprit=True,
        suggestion=("Raise the collective timeout above the solo work's duration (init_process_group(timeout="
                    "datetime.timedelta(minutes=60)) or Megatron --distributed-timeout-minutes), or move the work off "
                    "the critical path: asynchronous/distributed checkpointing, evaluation on every rank, or a barrier "
                    "with its own longer timeout right after it."),
        details={"rank": rank, "progress_after_wait": work["signs"], "wait_start": str(work["wait_start"]),
                 "process_group": state.key if state is not None else None,
                 "seq": state.wait_seq if state is not None else None})]
