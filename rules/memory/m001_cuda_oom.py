"""M001 cuda-oom: a CUDA out-of-memory error, with what was asked, what was free and what was fragmented.

What it detects
    A CUDA OOM on a rank (PyTorch's ``OutOfMemoryError`` text of any version, or NCCL's
    ``Cuda failure 'out of memory'`` / ``Failed to CUDA calloc`` while it sets up connections):
    the size asked for, the card's capacity, what was free, what PyTorch had allocated and what
    it had reserved but not allocated (fragmentation), with the rank, node, GPU and the last
    logged iteration. It says when the OOM came in the optimizer step that first allocates the
    optimizer state (Adam's ``exp_avg``/``exp_avg_sq`` are created lazily on the first step, and
    again on the first step after a resume), because then every memory sample logged before it
    understates the job's real peak.

Why it matters
    An OOM on one rank ends the whole job: the other ranks wait in their next collective until
    the watchdog or the launcher kills them. Their timeouts are symptoms; the OOM is the cause,
    and the cure depends on whether the memory was really used or only fragmented.

What to do
    If reserved-but-unallocated memory is large (fragmentation), set
    ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``. Otherwise lower the memory per GPU:
    a smaller micro-batch, activation recompute, more tensor/pipeline parallelism, or shard or
    offload the optimizer state (distributed optimizer / ZeRO). If the OOM came at the first
    optimizer step, budget for the optimizer state (12-16 bytes per parameter for mixed-precision
    Adam, divided by the data-parallel sharding) on top of the peak seen before it.

Known false positives
    A rank that ran out of memory because another process shared its GPU (a second job, a stray
    process): the OOM text's per-process lines show it, this rule still names the rank that
    raised. An OOM caught and retried by the program (e.g. a batch-size finder) did not end the
    job: it is then reported but not as the cause when the run went on training.
"""

from __future__ import annotations

from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.memory.memory_model import gib, last_iteration, ooms, optimizer_init_frames, peaks

RULE = Rule(code="M001", name="cuda-oom", severity=Severity.ERROR, category=Category.CRASH, since="0.1.0")


def check(ctx: Context) -> list[Finding]:
    rows = ooms(ctx)
    if not rows:
        return []
    by_place: dict = {}
    for r in rows:   # the first OOM of each rank (or node/GPU when the rank is unknown)
        by_place.setdefault((r["rank"], r["node"], r["cuda_dev"] if r["rank"] is None else None), r)
    places = list(by_place.values())
    last_it = last_iteration(ctx)
    p = peaks(ctx)
    findings = []
    for r in places:
        s = r["sizes"]
        rank, node = r["rank"], r["node"]
        where = f"rank {rank}" if rank is not None else "a process"
        if node:
            where += f" on {node}"
        if r["cuda_dev"] is not None and rank is None:
            where += f" GPU {r['cuda_dev']}"
        if r["pid"] is not None and rank is None:
            where += f" (pid {r['pid']})"
        parts = []
        if s["requested"] is not None:
            asked = f"{s['requested']:.0f} MiB" if s["requested"] < 1024 else gib(s["requested"])
            parts.append(f"asked for {asked}")
        if s["capacity"] is not None:
            parts.append(f"capacity {gib(s['capacity'])}")
        if s["free"] is not None:
            parts.append(f"free {s['free']:.0f} MiB" if s["free"] < 1024 else f"free {gib(s['free'])}")
        if s["allocated"] is not None:
            parts.append(f"allocated by PyTorch {gib(s['allocated'])}")
        if s["unallocated"] is not None:
            parts.append(f"reserved but unallocated {gib(s['unallocated'])}")
        frag = (s["unallocated"] is not None and s["unallocated"] >= 512
                and (s["requested"] is None or s["unallocated"] >= s["requested"]
                     or (s["capacity"] and s["unallocated"] >= 0.05 * s["capacity"])))
        init = optimizer_init_frames(ctx, r)
        message = f"{where} ran out of GPU memory: " + (", ".join(parts) if parts else "no sizes in the message")
        if r["nccl"]:
            message += "; NCCL could not allocate its buffers (communicator/connection setup)"
        if last_it is not None:
            message += f"; the last logged iteration was {last_it}"
        if init:
            message += (f"; it came in the optimizer step, allocating the optimizer state for the first time "
                        f"({', '.join(dict.fromkeys(init))}: lazy init, or the first step after a resume)")
            if not p.is_empty():
                message += (f"; the memory samples logged before it (peak {gib(p['peak_alloc'].max())}) were taken "
                            "before the optimizer state existed and understate the real peak")
        if frag:
            message += (f"; {gib(s['unallocated'])} was reserved but unallocated: fragmentation"
                        + (" larger than the request" if s["requested"] and s["unallocated"] >= s["requested"] else ""))
        suggestion = []
        if frag:
            suggestion.append("set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (the allocator then grows "
                              "segments instead of leaving fragmented blocks)")
        if init:
            suggestion.append("budget the optimizer state (12-16 bytes per parameter for mixed-precision Adam, "
                              "divided by the data-parallel size with a distributed optimizer / ZeRO) on top of the "
                              "peak seen before the first step; shard it (--use-distributed-optimizer, ZeRO-1/2) or "
                              "offload it")
        suggestion.append("or lower memory per GPU: smaller micro-batch, activation recompute, more TP/PP")
        ev = [ctx.evidence(r["input_id"], r["line_no"], "the OOM")]
        single = len({(x["rank"], x["node"]) for x in places}) == 1
        gpus = [ctx.gpu_of(rank)] if rank is not None else (
            [{"rank": None, "node": node, "cuda_dev": r["cuda_dev"], "pid": r["pid"]}] if node else [])
        findings.append(RULE.finding(confidence=0.9 if single else 0.6,
            title=f"CUDA out of memory on {where}" + (" at the first optimizer step" if init else ""),
            message=message, ranks=[rank] if rank is not None else [], nodes=[node] if node else [], gpus=gpus,
            evidence=ev, suggestion="; ".join(suggestion), culprit=single,
            details={"drain": False, "requested_mib": s["requested"], "capacity_mib": s["capacity"], "free_mib": s["free"],
                     "allocated_mib": s["allocated"], "reserved_unallocated_mib": s["unallocated"],
                     "fragmentation": bool(frag), "optimizer_state_init": bool(init),
                     "last_iteration": last_it}))
    return findings
