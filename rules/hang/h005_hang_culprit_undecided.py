"""H005 hang-culprit-undecided: a hang whose culprit the evidence cannot name.

What it detects
    Ranks wait in a collective, but the evidence that would name who is missing is not
    there or not trustworthy: the lagging rank's global identity is only guessed, its log is
    missing, or more than half of the group looks behind.

Why it matters
    A confident wrong blame drains a healthy node. This finding says "inconclusive" and shows
    exactly why, and what to collect next time.

What to do
    Keep every rank's stderr with c10d's ``[rankN]:`` prefix (PyTorch >= 2.3) or NCCL_DEBUG=INFO
    (its world communicator init line maps pid to rank); enable Flight Recorder; take py-spy
    dumps of every rank while the job hangs.

Known false positives
    None: it reports the absence of a decision.
"""

from __future__ import annotations

from postmortem.analyzer.ranges import rank_ranges
from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.evidence_model import missing_for_a_hang, phrase
from postmortem.rules.hang.hang_model import analyse_hang

RULE = Rule(code="H005", name="hang-culprit-undecided", severity=Severity.WARNING, category=Category.HANG, since="0.1.0")


def check(ctx: Context) -> list[Finding]:
    hang = analyse_hang(ctx)
    if not hang.hang_states or not hang.inconclusive:
        return []
    candidates = f"rank {rank_ranges(hang.culprits)}" if hang.culprits else "no rank"
    state = hang.pg or hang.hang_states[0]
    return [RULE.finding(confidence=0.9,
        title=f"hang in {state.majority_op or 'a collective'} #{state.wait_seq} ({state.key}): culprit undecided",
        message=f"{len(state.waiting)} rank(s) wait; the evidence points at {candidates}, but: " + "; ".join(hang.inconclusive),
        ranks=[], suggestion=_suggestion(ctx),
        details={"candidates": hang.culprits, "reasons": hang.inconclusive, "process_group": state.key,
                 "seq": state.wait_seq})]


def _suggestion(ctx: Context) -> str:
    """Ask only for the evidence these inputs lack (postmortem.rules.evidence_model)."""
    missing = missing_for_a_hang(ctx)
    if missing:
        return f"Next time collect {phrase(missing)}."
    return ("The evidence a culprit is named from was collected but does not decide: read the candidates' stacks "
            "and last lines against the reasons above.")
