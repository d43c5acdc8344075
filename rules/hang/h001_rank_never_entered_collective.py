"""H001 rank-never-entered-collective: the rank the others are waiting for.

What it detects
    In one attempt, within one process group's members only, the ranks that never entered
    the collective the others wait in: their ``last enqueued`` sequence is below the
    sequence the majority waits in (``docs/formats/pytorch-failures.md`` 3.2), ideally with
    nothing in flight at all (``enqueued == completed``), and they are not themselves
    waiting in another group. Evidence, strongest first: PG status / work-update /
    dump-signal lines; missing status lines from a rank that was otherwise logging; py-spy
    stacks (main thread outside any collective while the others sit in one).

Why it matters
    The ranks that time out first, exit first, or send the dump signal are symptoms. The
    rank to look at (and whose code path to fix) is the one that never arrived.

What to do
    Read the culprit's stack and last lines (shown): a rank-dependent branch, a lazy
    optimizer-state initialisation, a save or evaluation on a subset of ranks. While the job
    still hangs, take ``py-spy dump --pid`` on the culprit before it is killed.

Known false positives
    A rank that never entered and a rank still busy with long solo work (a save, an
    evaluation) that would enter late look the same at the moment of the hang; when its own
    progress after the others began to wait shows it was working, H006 reports it instead.
    Silence alone (no status line) is weak: redirected stdout is block-buffered, and a rank
    whose log is missing is not guilty -- the finding then says inconclusive. Before mid-2024
    PyTorch counted send/recv in the same sequence as collectives, so a lagging counter in a
    group that also ran P2P is weaker evidence. The rank mapping must be stated by the logs
    (``[rankN]:``, NCCL's world communicator, torchrun's table); a guessed mapping never blames.
    Ranks whose processes had already ended (killed, crashed, or torn down by their agent)
    before the first watchdog timeout are behind too: they are reported as a warning and a
    symptom of the first failure (X001), not as the culprit.
"""

from __future__ import annotations

import polars as pl

from postmortem.analyzer.ranges import rank_ranges
from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.crash.crash_model import first_failure, first_timeout
from postmortem.rules.hang.hang_model import analyse_hang, chain_text, rank_lines, solo_work, stack_of, stacks_of, training_finished
from postmortem.rules.hang.why_no_timeout import why_no_timeout

RULE = Rule(code="H001", name="rank-never-entered-collective", severity=Severity.ERROR, category=Category.HANG, since="0.1.0")


def check(ctx: Context) -> list[Finding]:
    hang = analyse_hang(ctx)
    if not hang.culprits or hang.inconclusive:
        return []
    if solo_work(ctx) is not None:
        return []  # it was still working and would have entered late: H006's finding
    state = hang.pg
    culprits = hang.culprits
    gpus = [ctx.gpu_of(r) for r in culprits]
    where = "; ".join(_gpu_text(g) for g in gpus)
    if state is not None:
        op = state.majority_op or "the collective"
        waited = (f"{len(state.waiting)} rank(s) of process group {state.key} wait in {op} "
                  f"SeqNum={state.wait_seq}")
    else:
        op, waited = "a collective", "the other ranks' py-spy stacks sit in a collective"
    title = f"rank {rank_ranges(culprits)} never entered {op}" + (
        f" #{state.wait_seq} ({state.key})" if state is not None else "")
    inner = next((h for h in hang.chain if h.get("inferred_members") == rank_ranges(culprits)), None)
    if inner is not None:
        # The root is the member the innermost group's waiters lack: name that collective.
        title = (f"rank {rank_ranges(culprits)} never entered {inner['op'] or 'the collective'} #{inner['seq']} "
                 f"({inner['process_group']})")
    own = _own_progress(state, culprits)
    waiting_stack = _common_stack(ctx, state.waiting if state is not None else [])
    if waiting_stack and (state is None or state.majority_op is None):
        # No descriptor names the op (no timeout fired): say where the waiting ranks are blocked.
        waited += f" (their py-spy main threads: {' <- '.join(waiting_stack)})"
    message = f"{waited}; rank {rank_ranges(culprits)} ({where}) did not: {own}"
    if len(hang.chain) > 2 or any(h.get("waits_on_in_flight_elsewhere") for h in hang.chain):
        message += f". Wait chain: {chain_text(hang.chain)}"
    evidence = _evidence(ctx, hang, culprits)
    instead = _instead(ctx, culprits[0])
    details = {
        "process_group": state.key if state else None,
        "seq": state.wait_seq if state else None,
        "op": state.majority_op if state else None,
        "numel_in": state.majority_numel if state else None,
        "waiting_ranks": rank_ranges(state.waiting) if state else None,
        "waiting_ranks_stack": waiting_stack,
        "basis": hang.basis,
        "wait_chain": hang.chain,
        "rank_mapping": {str(r): {"source": s, "confidence": c} for r, (s, c) in hang.mapping.items()},
        "culprit_did_instead": instead,
        "why_no_timeout": why_no_timeout(ctx, hang),
        "notes": hang.notes,
    }
    suggestion = ("Look at what rank {r} was doing instead (stack and last lines above): a branch that only some "
                  "ranks take before this collective (lazy optimizer-state init, a save or eval on a subset of "
                  "ranks) is the usual cause. Fix the code path so every rank issues the same collectives in the "
                  "same order. If that code would have finished and the rank entered late (long solo work), raise "
                  "the collective timeout above its duration or move the work instead.").format(r=rank_ranges(culprits))
    # After training finished, a hang in the exit path costs GPU time, not the run (H008).
    severity = Severity.WARNING if training_finished(ctx) is not None else RULE.severity
    nodes = sorted({g.get("node") for g in gpus if g.get("node")})
    first = _died_before_the_wait(ctx, culprits)
    if first is not None:
        # They did not take another code path: their processes were gone (killed, crashed or torn
        # down by the agent) before the others' watchdogs fired. X001 names the first failure.
        return [RULE.finding(severity=Severity.WARNING, confidence=hang.confidence,
                        title=f"rank {rank_ranges(culprits)} had exited before {op}"
                        + (f" #{state.wait_seq} ({state.key})" if state is not None else ""),
                        message=f"{waited}; rank {rank_ranges(culprits)} never entered it because their processes had ended: "
                        f"rank {first.rank} failed first ({first.how}) and the rest followed",
                        ranks=culprits, nodes=nodes, gpus=gpus, evidence=evidence,
                        suggestion="See the first failure (X001) and what caused it; the waiting ranks' timeouts "
                                   "followed from it.",
                        category=Category.SYMPTOM, culprit=False, details=details)]
    return [RULE.finding(severity=severity, confidence=hang.confidence, title=title, message=message, ranks=culprits,
                    nodes=nodes, gpus=gpus,
                    evidence=evidence, suggestion=suggestion, culprit=True, details=details)]


def _died_before_the_wait(ctx: Context, culprits: list[int]):
    """The first failure, when every culprit's process had already ended before the first
    watchdog timeout (by more than the clock uncertainty); else None."""
    first, tied, rest = first_failure(ctx)
    t_out = first_timeout(ctx)
    if first is None or first.t is None or t_out is None:
        return None
    if (t_out - first.t).total_seconds() <= first.uncertainty_s:
        return None
    ended = {f.rank for f in [first, *tied, *rest]
             if f.t is not None and f.how != "timeout" and (t_out - f.t).total_seconds() > f.uncertainty_s}
    # A failed worker's agent stops every worker of its node (torchrun), and records only the
    # failed one: its node mates ended with it.
    dead_nodes = {ctx.gpu_of(r).get("node") for r in ended} - {None}
    ended |= {r for r in culprits if ctx.gpu_of(r).get("node") in dead_nodes}
    return first if set(culprits) <= ended else None


def _common_stack(ctx: Context, ranks: list[int], depth: int = 2) -> list[str]:
    """The innermost ``depth`` main-thread frames most of the waiting ranks' py-spy dumps share."""
    stacks = stacks_of(ctx, ranks)
    if stacks.is_empty():
        return []
    # per rank: its innermost main-thread frames (a rank with a dump but no main thread: none)
    main = (stacks.with_columns(_row=pl.int_range(pl.len()))
            .filter(pl.col("thread_name") == "MainThread").sort("stack_rank", "depth", "_row")
            .group_by("stack_rank", maintain_order=True).head(depth)
            .group_by("stack_rank", maintain_order=True)
            .agg(pl.format("{} ({}:{})", *(pl.col(c).cast(pl.String).fill_null("None")   # as an f-string
                                              for c in ("function", "file", "file_line"))).alias("key")))
    keys = {r: tuple(k) for r, k in main.iter_rows()}
    dumped = set(stacks["stack_rank"].to_list())
    counts: dict[tuple, int] = {}
    for r in ranks:
        if r in dumped:
            key = keys.get(r, ())
            counts[key] = counts.get(key, 0) + 1
    if not counts:
        return []
    best = max(sorted(counts), key=counts.get)
    return list(best) if counts[best] > len(ranks) / 2 else []


def _gpu_text(g: dict) -> str:
    parts = [g.get("node") or "node ?"]
    if g.get("cuda_dev") is not None:
        parts.append(f"GPU {g['cuda_dev']}")
    if g.get("bus_id"):
        parts.append(f"bus {g['bus_id']}")
    return " ".join(parts)


def _own_progress(state, culprits: list[int]) -> str:
    if state is None:
        return "its main thread is outside any collective"
    snap = state.snapshot
    texts = []
    for r in culprits:
        row = snap.filter(snap["rank"] == r)
        if row.is_empty():
            texts.append(f"rank {r} printed no status line for this group")
            continue
        enq, comp = row["enqueued"][0], row["completed"][0]
        if enq is not None and enq == comp:
            texts.append(f"rank {r}: last enqueued {enq}, last completed {comp} -- nothing in flight")
        else:
            texts.append(f"rank {r}: last enqueued {enq}, last completed {comp}")
    return "; ".join(texts)


def _evidence(ctx: Context, hang, culprits: list[int]):
    out = []
    state = hang.pg
    if state is not None:
        snap = state.snapshot
        for r in culprits[:4]:
            row = snap.filter(snap["rank"] == r)
            if not row.is_empty() and row["progress_ref"][0] is not None:
                ref = row["progress_ref"][0]
                out.append(ctx.evidence(ref["input_id"], ref["line_no"], note=f"culprit rank {r}'s own progress"))
        majority = snap.filter(snap["rank"].is_in(state.waiting))
        for ref_col in ("timeout_ref", "progress_ref"):
            if ref_col in majority.columns:
                refs = majority[ref_col].drop_nulls()
                if len(refs):
                    ref = refs[0]
                    out.append(ctx.evidence(ref["input_id"], ref["line_no"], note="a waiting rank, for comparison"))
                    break
    for r in culprits[:2]:
        frames = stack_of(ctx, r)
        if not frames.is_empty():
            first = frames.filter(frames["thread_name"] == "MainThread").sort("depth")
            if not first.is_empty():
                out.append(ctx.evidence(first["input_id"][0], first["line_no"][0],
                                        note=f"rank {r}'s py-spy main thread, innermost frame"))
    return out


def _instead(ctx: Context, rank: int) -> dict:
    frames = stack_of(ctx, rank)
    stack = []
    if not frames.is_empty():
        main = frames.filter(frames["thread_name"] == "MainThread").sort("depth").head(8)
        stack = [f"{f} ({p}:{n})" if n is not None else f"{f} ({p})"
                 for f, p, n in main.select("function", "file", "file_line").iter_rows()]
    last = rank_lines(ctx, rank)
    lines = [ctx.evidence(i, n).text for i, n in last.select("input_id", "line_no").iter_rows()]
    return {"py_spy_main_thread": stack, "last_lines": lines[-8:]}
