"""P020 first-nan: the first NaN/inf in the loss or gradient norm, with its iteration, rank and node.

What it detects
    The earliest bad value of the training numerics: a ``nan``/``inf`` loss or grad norm in the
    iteration lines (Megatron, Megatron-DeepSpeed, HF Trainer, DeepSpeed, torchtitan ...), a
    Megatron iteration line whose ``lm loss`` is left out (Megatron prints a loss only when its
    average is above zero, so a NaN loss disappears from the line) while no iteration was
    skipped, a ``number of nan iterations`` count, and the rerun state machine's ``Unexpected
    result nan`` lines (which name the rank, node and device). The finding names the iteration,
    the rank that printed it (Megatron prints from the last rank; the loss is reduced across
    ranks, so the printer is not the source) or the rank the rerun machine names, and whether
    the NaN persisted to the end of the log (training diverged) or the run recovered. It then
    looks for a GPU fault (Xid 48/94/95 ECC, 79, 64, 74, ...) in the kernel logs of that node
    (of every job node when only the printer is known) at or before the NaN, on one clock
    (``ts_utc``, ``node_clocks``): when there is one, the NaN is reported as its symptom.

Why it matters
    A NaN is where a run stops learning: every later step is wasted GPU time, and the
    checkpoints written after it are poisoned. A NaN right after an ECC error or a GPU falling
    off the bus is not a numerics problem at all: the GPU computed garbage, and the fix is the
    node, not the learning rate.

What to do
    With a GPU fault before it: treat the GPU fault (G001) first; resume from the last
    checkpoint before the NaN iteration on other nodes (``--exclude=NODE``). Otherwise: resume
    from the last good checkpoint and rerun the step; if it reproduces on another node, it is
    the numerics (lower the learning rate or lengthen warm-up, check the batch at that
    iteration for bad samples, use bf16 instead of fp16 or check the loss scale, clip
    gradients); if it does not, suspect the GPU. Megatron: ``--check-for-nan-in-loss-and-grad``
    stops at the first NaN and the rerun state machine (``--rerun-mode validate_results``)
    reruns the step to tell a transient (hardware) fault from a reproducible one.

Known false positives
    A loss left out of a Megatron line also happens when the loss is exactly zero or negative,
    or when every iteration of the logging interval was skipped (fp16 loss-scale warm-up: the
    rule stays quiet when skipped iterations are counted), or when a pasted line is truncated.
    A GPU fault on another node than the NaN's, or after it, is not linked. Megatron's NaN on
    the last rank says nothing about which rank produced it: without the rerun machine's
    report the whole job's nodes are checked for faults.
"""

from __future__ import annotations

from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.hardware.hw_model import job_nodes
from postmortem.rules.numerics.numerics_model import fault_before, gpu_faults, read_numerics

RULE = Rule(code="P020", name="first-nan", severity=Severity.ERROR, category=Category.PERF, since="0.1.0")


def check(ctx: Context) -> list[Finding]:
    num = read_numerics(ctx)
    first = num.first
    if first is None:
        return []
    where = f"iteration {first.iteration}" if first.iteration is not None else "an unnumbered step"
    who = (f"rank {first.rank}" if first.rank is not None else "the logging rank") + (
        f" on {first.node}" if first.node else "")
    how = "named by Megatron's rerun state machine" if first.named_by == "rerun" else "printed by"
    diverged = num.last_bad and num.finite_after == 0 and num.bad_rows >= 2
    n_bad = max(num.bad_rows, 1)
    persisted = (f"it persisted: {n_bad} bad iteration line(s), none finite after it, to the end of the log "
                 "(training diverged)" if diverged else
                 f"{n_bad} bad line(s); {num.finite_after} finite loss(es) after it (the run went on)")
    evidence = [ctx.evidence(first.input_id, first.line_no, note=f"first bad value: {first.what}")] \
        if first.input_id is not None else []
    rerun = next((b for b in num.bad if b.named_by == "rerun" and b is not first), None)
    if rerun is not None and rerun.input_id is not None:
        evidence.append(ctx.evidence(rerun.input_id, rerun.line_no, note="the rerun state machine names the rank"))
    # which nodes' hardware could explain it
    src = next((b for b in num.bad if b.named_by == "rerun"), None)
    if src is not None and src.node:
        nodes, scope = {src.node}, f"{src.node} (the node the rerun machine names)"
    elif first.node and first.rank is not None and first.named_by == "rerun":
        nodes, scope = {first.node}, first.node
    else:
        nodes = set(job_nodes(ctx)) or ({first.node} if first.node else set())
        scope = "the job's nodes (the loss is reduced across ranks, so the printing rank is not the source)"
    faults = gpu_faults(ctx)
    fault, order = fault_before(ctx, first, faults, nodes)
    details = {"iteration": first.iteration, "what": first.what, "rank": first.rank, "node": first.node,
               "named_by": first.named_by, "bad_lines": n_bad, "finite_after": num.finite_after,
               "diverged": diverged, "fault_order": order}
    if fault is not None and order == "before":
        xid, fnode = int(fault["xid"]), fault["node"]
        frank = fault.get("global_rank")
        gpu = ctx.gpu_of(int(frank)) if frank is not None else {"node": fnode, "pci": fault.get("pci")}
        evidence.append(ctx.evidence(fault["input_id"], fault["line_no"], note=f"Xid {xid} on {fnode} before it"))
        message = (f"the first NaN/inf is at {where} ({first.what}, {how} {who}); Xid {xid} on {fnode}"
                   + (f" (rank {frank}'s GPU)" if frank is not None else "")
                   + f" came at or before it: the NaN is the GPU fault's symptom, not a numerics problem; {persisted}")
        details.update(xid=xid, fault_node=fnode, fault_rank=frank)
        return [RULE.finding(severity=Severity.ERROR if diverged else Severity.WARNING, confidence=0.8,
                        title=f"NaN at {where} after Xid {xid} on {fnode}", message=message,
                        ranks=[int(frank)] if frank is not None else ([first.rank] if first.rank is not None else []),
                        nodes=[fnode], gpus=[gpu], evidence=evidence[:3], category=Category.SYMPTOM, culprit=False,
                        suggestion=(f"Treat the GPU fault on {fnode} first (G001): drain it, then resume from the "
                                    f"last checkpoint before iteration {first.iteration} with --exclude={fnode}; "
                                    "checkpoints written after the NaN are poisoned."),
                        details=details)]
    hint = ""
    if fault is not None and order == "unordered":
        hint = (f"; Xid {int(fault['xid'])} on {fault['node']} has no time to order it against the NaN "
                "(it may be the cause: check it)")
    elif order == "after":
        hint = "; the GPU fault(s) on those nodes came after it"
    checked = (f"no GPU fault on {scope} before it{hint}" if not ctx.table("node_events").is_empty()
               else "no kernel logs to check for a GPU fault")
    message = (f"the first NaN/inf is at {where} ({first.what}, {how} {who}); {persisted}; {checked}. Usual causes: too high a learning rate or too short a warm-up, a bad "
               "batch at that iteration, fp16 overflow past the loss scale, a faulty GPU computing garbage")
    ranks = [first.rank] if first.rank is not None else []
    confidence = 0.6 if first.named_by == "rerun" else 0.35 if first.what.startswith("loss left out") else 0.5
    return [RULE.finding(severity=Severity.ERROR if diverged else Severity.WARNING, confidence=confidence,
                    title=f"NaN/inf at {where}" + (": training diverged" if diverged else ""), message=message, ranks=ranks,
                    nodes=[first.node] if first.node else [], gpus=[ctx.gpu_of(r) for r in ranks],
                    evidence=evidence[:3], culprit=False,
                    suggestion=(f"Resume from the last checkpoint before iteration {first.iteration} and rerun the "
                                "step on another node: if it does not reproduce, suspect the GPU (dcgmi diag -r 3); "
                                "if it does, lower the learning rate / lengthen warm-up, inspect that batch, prefer "
                                "bf16 or check the fp16 loss scale, clip gradients (--clip-grad 1.0). Megatron: "
                                "--check-for-nan-in-loss-and-grad stops at the first NaN, and --rerun-mode "
                                "validate_results reruns the step to tell a transient fault from a reproducible one."),
                    details=details)]

