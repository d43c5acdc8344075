"""E002 error-handling-differs: PyTorch's NCCL error handling is set differently on some nodes.

What it detects
    ``TORCH_NCCL_ASYNC_ERROR_HANDLING`` or ``TORCH_NCCL_BLOCKING_WAIT`` (and their old
    ``NCCL_``-prefixed names) with different values on different nodes, from the nodes' env dumps
    (PyTorch does not echo them through NCCL; where NCCL's lines do carry them, those win).

Why it matters
    These decide what a rank does when its watchdog fires (0 = nothing, 1 = abort and tear
    down, 2 = abort only, 3 = tear down without abort). Ranks with handling off never exit on a
    timeout, so after a hang part of the job outlives the rest (a partial deadlock holding its
    GPUs), and the evidence of the hang looks different on those nodes. It does not cause a hang.

What to do
    Export the same value in the job script for every rank (recent PyTorch defaults to 3; 1 is
    the usual explicit choice) and remove per-node overrides from shell profiles and images.

Known false positives
    An env dump taken in a different shell than the job: the job's ranks may have had the
    same value. The finding is a warning and never names a culprit.
"""

from __future__ import annotations

from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.config.config_model import mismatch_confidence, mismatch_evidence, setting_mismatches
from postmortem.rules.config.e001_must_match_setting_differs import ERROR_HANDLING, describe, suggestion

RULE = Rule(code="E002", name="error-handling-differs", severity=Severity.WARNING, category=Category.CONFIG, since="0.1.0")


def check(ctx: Context) -> list[Finding]:
    out = []
    for m in setting_mismatches(ctx, ("must_match",)):
        if m.key not in ERROR_HANDLING:
            continue
        out.append(RULE.finding(confidence=min(0.8, mismatch_confidence(m)), title=f"{m.key} differs between nodes",
            message=describe(m) + ". Ranks with error handling off do not exit when their watchdog fires: after a hang "
            "they keep their GPUs while the others are torn down",
            nodes=m.minority, evidence=mismatch_evidence(ctx, m), suggestion=suggestion(m), culprit=False, details={"key": m.key, "values": m.summary(), "majority": m.majority,
                                    "minority": m.minority, "basis": m.basis}))
    return out
