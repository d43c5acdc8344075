"""X003 cuda-error: a CUDA error (illegal memory access, device-side assert, ECC, launch failure) on one rank.

What it detects
    CUDA fault lines (``events`` kind ``cuda_fault`` from ``parsers/torch_errors.py``: an illegal
    memory access, a device-side assert, an uncorrectable ECC error, an unspecified launch
    failure, a misaligned address, an illegal instruction) grouped by rank. One rank with the
    error while the others timed out or were torn down: that rank is the culprit (its GPU for an
    uncorrectable ECC error). The same error on every rank (or on several at once): not a
    single-rank fault but something every rank shares (the code, the input batch).

Why it matters
    A CUDA error kills one process; the others then wait in the next collective until their
    watchdog fires and read like a hang. An ECC error is a hardware fault of one GPU (drain it,
    open an RMA); an illegal access or an assert is a bug (do not drain anything).

What to do
    ECC: take the GPU out of service (``nvidia-smi -q -d ECC,ROW_REMAPPER`` on the node, then an
    RMA if the count stays). Illegal access / launch failure: rerun with
    ``CUDA_LAUNCH_BLOCKING=1`` to get the faulting kernel; ``compute-sanitizer`` on a small
    repro. Device-side assert: the assertion line names the kernel and the condition (an index
    out of range: check the labels / token ids of the batch), ``TORCH_USE_CUDA_DSA=1`` for more.

Known false positives
    A CUDA error printed after the NCCL communicator was aborted (after the first watchdog
    timeout) is teardown noise: ignored. An ECC error that appears on every rank at once is not
    one bad GPU. The error is reported asynchronously: the traceback may point at a later call.
"""

from __future__ import annotations

import polars as pl

from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.crash.crash_model import first_timeout

RULE = Rule(code="X003", name="cuda-error", severity=Severity.ERROR, category=Category.CRASH, since="0.1.0")

MEANING = {
    "illegal_memory_access": "an illegal memory access (a kernel read or wrote out of bounds)",
    "device_side_assert": "a device-side assert (a kernel's assertion failed, typically an index out of range)",
    "ecc": "an uncorrectable ECC error (GPU memory hardware fault)",
    "launch_failure": "an unspecified launch failure (a kernel crashed; also seen after Xid 13/31/43)",
    "misaligned_address": "a misaligned address in a kernel",
    "illegal_instruction": "an illegal instruction in a kernel",
    "launch_timeout": "a kernel launch timeout",
}


def check(ctx: Context) -> list[Finding]:
    events = ctx.table("events")
    if events.is_empty() or not {"kind", "rank", "detail"} <= set(events.columns):
        return []
    faults = events.filter((pl.col("kind") == "cuda_fault") & pl.col("rank").is_not_null()
                           & pl.col("detail").is_in(list(MEANING))).sort("input_id", "line_no")
    t_out = first_timeout(ctx)
    if t_out is not None and "ts" in faults.columns:
        faults = faults.filter(pl.col("ts").is_null() | (pl.col("ts") < t_out))   # after the abort: noise
    if faults.is_empty():
        return []
    per_rank = faults.group_by("rank").agg(pl.col("detail").first(), pl.col("input_id").first(),
                                           pl.col("line_no").first()).sort("rank")
    ranks = per_rank["rank"].to_list()
    classes = sorted(set(per_rank["detail"].to_list()))
    world = ctx.world_size or len(ctx.logged_ranks(this_attempt=True)) or None
    evidence = [ctx.evidence(i, n, note=f"rank {r}: {MEANING[d].split(' (')[0]}")
                for r, d, i, n in per_rank.head(3).iter_rows()]
    if len(ranks) == 1:
        rank, cls = ranks[0], classes[0]
        gpu = ctx.gpu_of(rank)
        _identity(ctx, gpu)
        ecc = cls == "ecc"
        where = f"rank {rank}" + (f" on {gpu['node']}" if gpu.get("node") else "") + \
            (f" GPU {gpu['cuda_dev']}" if gpu.get("cuda_dev") is not None else "")
        others = (world - 1) if world else None
        message = (f"{where} hit {MEANING[cls]}; no other rank reported a CUDA error"
                   + (f" (the other {others} rank(s) ended in consequence)" if others else ""))
        suggestion = ("Check the GPU: nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT on the node; drain it and "
                      "open an RMA if the uncorrectable count is non-zero or rows are pending remap."
                      if ecc else
                      "Rerun with CUDA_LAUNCH_BLOCKING=1 (and TORCH_USE_CUDA_DSA=1 for asserts) to find the kernel; "
                      "this is a software fault on this rank's data or code path, not a reason to drain the node.")
        return [RULE.finding(confidence=0.85 if ecc else 0.8, title=f"CUDA error on rank {rank}: {cls}", message=message,
                        ranks=[rank], nodes=[gpu["node"]] if gpu.get("node") else [], gpus=[gpu],
                        evidence=evidence, suggestion=suggestion, category=Category.HARDWARE if ecc else Category.CRASH,
                        culprit=True, details={"error_class": cls, "drain": ecc})]
    every = bool(world) and len(ranks) >= max(2, world)
    spread = "every rank" if every else f"{len(ranks)} ranks ({', '.join(map(str, ranks[:8]))}" + \
        (", ..." if len(ranks) > 8 else "") + ")"
    message = (f"{spread} reported {' / '.join(MEANING[c].split(' (')[0] for c in classes)}: a cause the ranks share "
               "(the model code, the input batch, a library), not a single faulty rank or GPU")
    return [RULE.finding(severity=Severity.WARNING if every else RULE.severity, confidence=0.5, title=f"the same CUDA error on {spread}", message=message,
                    ranks=ranks, nodes=sorted({ctx.gpu_of(r).get("node") for r in ranks} - {None}),
                    evidence=evidence, culprit=False,
                    suggestion="Reproduce on one GPU with CUDA_LAUNCH_BLOCKING=1; do not drain nodes for this.",
                    details={"error_classes": classes, "ranks": ranks, "single_rank": False})]


def _identity(ctx: Context, gpu: dict) -> None:
    ident = ctx.table("gpu_identity")
    if ident.is_empty() or gpu.get("node") is None or "global_rank" not in ident.columns:
        return
    row = ident.filter(pl.col("global_rank") == gpu["rank"])
    if not row.is_empty():
        r = row.row(0, named=True)
        for key in ("serial", "uuid"):
            if r.get(key):
                gpu[key] = r[key]
