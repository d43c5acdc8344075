"""H008 teardown-hang: training finished, then the job hung on its way out.

What it detects
    The last training iteration reached the run's own target (``iteration N/N``), and after
    it the job hung: ranks waited in a collective (a final barrier, a checkpoint all-gather,
    ``destroy_process_group``) until a watchdog or the scheduler ended it, or the logs show
    no exit for a long time after the last step.

Why it matters
    The model trained to the end: the cost is the GPU time the hang held, and possibly the
    final checkpoint (check that its save completed). It is low severity, and not a reason to
    drain a node or rerun the training.

What to do
    Check the last checkpoint completed; make the exit path symmetric (every rank calls the
    same final barrier/save, then ``destroy_process_group()``), and set a short timeout on the
    teardown barrier, or ``TORCH_NCCL_ABORT_IN_DESTROY_PG=1`` (2.3+) so a stuck destroy aborts.

Known false positives
    A run whose ``train_iters`` was raised on resume, or a framework that prints its target
    differently, can look finished early; a hang in a post-training evaluation is reported
    here too.
"""

from __future__ import annotations


from postmortem.analyzer.ranges import rank_ranges
from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.hang.hang_model import analyse_hang, training_finished
from postmortem.rules.hang.why_no_timeout import hang_span

RULE = Rule(code="H008", name="teardown-hang", severity=Severity.WARNING, category=Category.HANG, since="0.1.0")


def check(ctx: Context) -> list[Finding]:
    done = training_finished(ctx)
    if done is None:
        return []
    hang = analyse_hang(ctx)
    waiting = sorted({r for s in hang.hang_states for r in s.waiting})
    span = hang_span(ctx)
    hung_s = (span[1] - span[0]).total_seconds() if span else 0.0
    if not waiting and hung_s < 600:
        return []
    where = ""
    if hang.hang_states:
        s = hang.pg or hang.hang_states[0]
        where = (f"; rank(s) {rank_ranges(waiting)} then waited in {s.majority_op or 'a collective'} "
                 f"#{s.wait_seq} ({s.key})")
    if hang.culprits:
        where += f", which rank {rank_ranges(hang.culprits)} never entered"
    message = (f"training reached iteration {done['iteration']}/{done['train_iters']}{where}"
               + (f"; the logs go on {hung_s / 60:.0f} min after the last step" if hung_s else "")
               + ": the job hung in teardown (final save, barrier or destroy_process_group), after training finished")
    return [RULE.finding(confidence=0.75,
        title=f"hang after training finished (iteration {done['iteration']}/{done['train_iters']})", message=message,
        ranks=[], evidence=[ctx.evidence(*done["ref"], note="the last training iteration")],
        culprit=False,
        suggestion=("Check the final checkpoint completed. Make every rank take the same exit path (same final "
                    "barrier/save, then dist.destroy_process_group()), give the teardown barrier a short timeout, or "
                    "set TORCH_NCCL_ABORT_IN_DESTROY_PG=1 so a stuck destroy aborts."),
        details={"last_iteration": done["iteration"], "train_iters": done["train_iters"],
                 "waiting_ranks": rank_ranges(waiting) if waiting else None, "hung_s": round(hung_s)})]


