"""The per-process-group picture of a hang that the H rules share (not a rule itself).

For one attempt it builds, per process group and member rank, the latest evidence of
progress: ``last enqueued`` / ``last completed`` (PG status lines, periodic work updates,
the dump-signal line each rank prints with its own PG-0 numbers) and the collective a rank
timed out in (SeqNum, OpType, NumelIn/Out). Then it classifies each PG
(``formats/pytorch-failures.md`` sections 3.2, 10 and 11):

* ``waiting``: ranks with work in flight (enqueued > completed, or a timeout);
* the majority wait sequence ``K`` and the majority (op, size) at ``K``;
* ``behind``: members whose last enqueued is below ``K`` -- they never entered it;
  ``idle`` among them: enqueued == completed, nothing in flight at all;
* ``mismatched``: ranks waiting at ``K`` with a different op or size (minority);
* ``silent``: members with no c10d line for the PG while others wait.

Point-to-point ops (SEND/RECV) are left out of every comparison: before mid-2024 they shared
sequence numbers with collectives, and coalesced groups were numbered differently.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from analyzer.ranges import rank_ranges
from rules.base import Context

P2P_OPS = {"SEND", "RECV", "_SEND", "_RECV", "COALESCED"}
DEFAULT_PG = "default_pg"


@dataclass
class PGState:
    key: str
    members: list[int]
    members_known: bool               # default PG: world size known; others: only observed ranks
    snapshot: pl.DataFrame            # one row per observed member rank
    size_stated: bool = False         # the world size is stated by the logs (not just ranks seen)
    wait_seq: int | None = None
    majority_op: str | None = None
    majority_numel: int | None = None
    waiting: list[int] = field(default_factory=list)
    behind: list[int] = field(default_factory=list)
    idle: list[int] = field(default_factory=list)
    mismatched: list[int] = field(default_factory=list)
    silent: list[int] = field(default_factory=list)
    timed_out: list[int] = field(default_factory=list)
    has_p2p: bool = False


def _pg_key(frame: pl.DataFrame) -> pl.DataFrame:
    default = (pl.col("pg_id") == 0) | (pl.col("pg_desc") == DEFAULT_PG)
    key = (pl.when(default.fill_null(False)).then(pl.lit(DEFAULT_PG))
           .when(pl.col("pg_desc").is_not_null()).then(pl.col("pg_desc"))
           .when(pl.col("pg_guid").is_not_null()).then(pl.concat_str([pl.lit("PG GUID "), pl.col("pg_guid")]))
           .when(pl.col("pg_id").is_not_null()).then(pl.concat_str([pl.lit("PG "), pl.col("pg_id").cast(pl.String)]))
           # `[Rank N]` with no PG (<= 2.1): assume the default PG, and remember we assumed it.
           .otherwise(pl.lit(DEFAULT_PG)))
    return frame.with_columns(pg=key, pg_assumed=pl.col("pg_id").is_null() & pl.col("pg_desc").is_null()
                              & pl.col("pg_guid").is_null())


def snapshots(ctx: Context) -> pl.DataFrame:
    """Latest progress and timeout per (pg, rank) in this attempt, with evidence line refs."""
    progress = ctx.table("progress")
    colls = ctx.table("collectives")
    parts = []
    if not progress.is_empty() and "last_enqueued" in progress.columns:
        p = _pg_key(progress.filter(pl.col("rank").is_not_null()))
        p = p.sort("ts", "input_id", "line_no", nulls_last=False).group_by("pg", "rank").agg(
            enqueued=pl.col("last_enqueued").last(), completed=pl.col("last_completed").last(),
            failing_seq=pl.col("failing_seq").drop_nulls().last(),
            progress_kind=pl.col("kind").last(), progress_ts=pl.col("ts").last(),
            progress_ref=pl.struct("input_id", "line_no").last(),
            rank_confidence=pl.col("rank_confidence").first(), pg_assumed=pl.col("pg_assumed").all(),
            node=pl.col("node").drop_nulls().first(),
        )
        parts.append(p)
    if not colls.is_empty() and "seq" in colls.columns:
        # PyTorch's view only: NCCL's own COLL trace rows count opCounts per communicator, not
        # SeqNums per process group, and fingerprints are matched separately (H002).
        watchdog = pl.col("kind").is_in(["watchdog_timeout", "blocking_wait_timeout"])
        c = _pg_key(colls.filter(pl.col("rank").is_not_null() & watchdog))
        c = c.sort("ts", "input_id", "line_no").group_by("pg", "rank").agg(
            timeout_seq=pl.col("seq").last(), op=pl.col("op").last(), numel_in=pl.col("numel_in").last(),
            numel_out=pl.col("numel_out").last(), timeout_ms=pl.col("timeout_ms").last(),
            ran_for_ms=pl.col("ran_for_ms").last(), timeout_ts=pl.col("ts").last(),
            timeout_ref=pl.struct("input_id", "line_no").last(),
            rank_confidence_c=pl.col("rank_confidence").first(), pg_assumed_c=pl.col("pg_assumed").all(),
            node_c=pl.col("node").drop_nulls().first(),
        )
        parts.append(c)
    if not parts:
        return pl.DataFrame()
    snap = parts[0] if len(parts) == 1 else parts[0].join(parts[1], on=["pg", "rank"], how="full", coalesce=True)
    for column, dtype in {"enqueued": pl.Int64, "completed": pl.Int64, "failing_seq": pl.Int64,
                          "timeout_seq": pl.Int64, "op": pl.String, "numel_in": pl.Int64,
                          "rank_confidence": pl.String, "rank_confidence_c": pl.String, "node": pl.String,
                          "node_c": pl.String, "pg_assumed": pl.Boolean, "pg_assumed_c": pl.Boolean,
                          "timeout_ms": pl.Int64, "ran_for_ms": pl.Int64}.items():
        if column not in snap.columns:
            snap = snap.with_columns(pl.lit(None, dtype=dtype).alias(column))
    return snap.with_columns(
        rank_confidence=pl.coalesce("rank_confidence", "rank_confidence_c"),
        node=pl.coalesce("node", "node_c"),
        pg_assumed=pl.coalesce("pg_assumed", "pg_assumed_c"),
        # What the rank waits in: its timeout, else the failing seq, else in-flight work.
        wait_seq=pl.coalesce(
            "timeout_seq", "failing_seq",
            pl.when(pl.col("enqueued") > pl.col("completed")).then(pl.col("enqueued"))),
    ).drop("rank_confidence_c", "node_c", "pg_assumed_c").sort("pg", "rank")


def _mode(values: list):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return max(sorted(set(values)), key=values.count)


def pg_states(ctx: Context) -> list[PGState]:
    if "pg_states" in ctx.shared:
        return ctx.shared["pg_states"]
    snap = snapshots(ctx)
    states = []
    if not snap.is_empty():
        seen = list(ctx.logged_ranks())
        for (pg,), rows in snap.group_by("pg", maintain_order=True):
            states.append(_classify(pg, rows, ctx.world_size, seen))
    ctx.shared["pg_states"] = states
    return states


def _classify(pg: str, rows: pl.DataFrame, world: int | None, seen: list[int]) -> PGState:
    """``seen``: every rank any line is attributed to (at any confidence). Without a stated
    world size, the default group's members are at least those ranks."""
    observed = sorted(rows["rank"].to_list())
    known = pg == DEFAULT_PG
    if known:
        members = list(range(world)) if world is not None else sorted(set(seen) | set(observed))
    else:
        members = observed
    state = PGState(pg, members, known, rows, size_stated=known and world is not None)
    ops = set(rows["op"].drop_nulls().to_list())
    state.has_p2p = bool(ops & P2P_OPS)
    collective_rows = rows.filter(~pl.col("op").is_in(list(P2P_OPS)) | pl.col("op").is_null())
    waiting = collective_rows.filter(pl.col("wait_seq").is_not_null())
    state.timed_out = sorted(collective_rows.filter(pl.col("timeout_seq").is_not_null())["rank"].to_list())
    if waiting.is_empty():
        return state
    state.wait_seq = _mode(waiting["wait_seq"].to_list())
    at_k = waiting.filter(pl.col("wait_seq") == state.wait_seq)
    state.waiting = sorted(at_k["rank"].to_list())
    state.majority_op = _mode(at_k["op"].to_list())
    state.majority_numel = _mode(at_k["numel_in"].to_list())
    if state.majority_op is not None:
        other_op = pl.col("op").is_not_null() & (pl.col("op") != state.majority_op)
        other_size = (pl.col("numel_in").is_not_null() & (pl.col("numel_in") != state.majority_numel)
                      if state.majority_numel is not None else pl.lit(False))
        odd = at_k.filter(other_op | other_size)
        state.mismatched = sorted(odd["rank"].to_list())
    behind = rows.filter(
        (pl.col("enqueued").is_not_null() & (pl.col("enqueued") < state.wait_seq))
        | (pl.col("timeout_seq").is_not_null() & (pl.col("timeout_seq") < state.wait_seq)))
    state.behind = sorted(behind["rank"].to_list())
    state.idle = sorted(behind.filter(pl.col("enqueued") == pl.col("completed"))["rank"].to_list())
    state.silent = sorted(set(members) - set(observed))
    return state


def waiting_anywhere(states: list[PGState]) -> set[int]:
    """Ranks that have a collective in flight in some PG: blocked in NCCL, not in host code."""
    out: set[int] = set()
    for s in states:
        out.update(s.waiting)
    return out


def rank_lines(ctx: Context, rank: int, limit: int = 6) -> pl.DataFrame:
    """The last lines a rank wrote in this attempt (per input, in file order)."""
    attempt_filter = "AND (attempt = ? OR attempt IS NULL)" if ctx.attempt is not None else ""
    params = [rank] + ([ctx.attempt] if ctx.attempt is not None else [])
    return ctx.frame(
        f"SELECT input_id, line_no, kind FROM lines WHERE rank = ? {attempt_filter} "
        "AND text IS NOT NULL AND coalesce(kind, '') NOT IN ('blank') QUALIFY row_number() OVER (PARTITION BY input_id ORDER BY line_no DESC) <= ? "
        "ORDER BY input_id, line_no", params + [limit])


def stack_of(ctx: Context, rank: int) -> pl.DataFrame:
    """The frames of every thread in the rank's py-spy dump (``depth`` 0 innermost), if one exists."""
    stacks = _stacks(ctx)
    if stacks.is_empty():
        return stacks
    return stacks.filter(pl.col("stack_rank") == rank)


def _stacks(ctx: Context) -> pl.DataFrame:
    """py-spy frames with the rank they belong to, computed once per attempt context."""
    if "stacks_by_rank" not in ctx.shared:
        ctx.shared["stacks_by_rank"] = _stacks_by_rank(ctx)
    return ctx.shared["stacks_by_rank"]


def _stacks_by_rank(ctx: Context) -> pl.DataFrame:
    """Live stacks per rank: py-spy dumps and faulthandler dumps (tracebacks of exceptions are
    not where a rank waits, so they are left out).

    py-spy dumps name a pid; the rank comes from the (node, pid) of the rank map. The node is
    taken from the dump's folder names when one of them is a known node; a pid that matches one
    rank only is accepted on its own (pids rarely collide in one job). faulthandler dumps are
    lines of the rank's own stderr: they take the rank those lines are attributed to, when
    that attribution is certain or derived; their main thread is the one whose outermost
    frame is the script's ``<module>``.
    """
    stacks = ctx.frame("SELECT s.*, i.path FROM stacks s JOIN inputs i USING (input_id)")
    if stacks.is_empty():
        return pl.DataFrame()
    source = pl.col("source") if "source" in stacks.columns else pl.lit(None, dtype=pl.String)
    stacks = stacks.with_columns(_source=source)
    parts = [_pyspy_by_rank(ctx, stacks.filter(pl.col("_source").is_null() | (pl.col("_source") == "pyspy")))]
    parts.append(_faulthandler_by_rank(stacks.filter(pl.col("_source") == "faulthandler")))
    parts = [p for p in parts if not p.is_empty()]
    return pl.concat(parts, how="diagonal_relaxed") if parts else pl.DataFrame()


def _faulthandler_by_rank(stacks: pl.DataFrame) -> pl.DataFrame:
    if stacks.is_empty() or "rank" not in stacks.columns:
        return pl.DataFrame()
    trusted = stacks.filter(pl.col("rank").is_not_null() & pl.col("rank_confidence").is_in(["certain", "derived"]))
    thread = ["input_id", "dump_index", "thread_id"]
    main = (pl.col("function") == "<module>").any().over(thread)
    return trusted.with_columns(stack_rank=pl.col("rank"), thread_name=pl.when(main).then(pl.lit("MainThread"))
                                .otherwise(pl.col("thread_name")))


def _pyspy_by_rank(ctx: Context, stacks: pl.DataFrame) -> pl.DataFrame:
    ranks = ctx.ranks.drop_nulls(["pid"])
    if stacks.is_empty() or ranks.is_empty():
        return pl.DataFrame()
    nodes = set(ranks["node"].drop_nulls().to_list())
    stacks = stacks.with_columns(
        dump_node=pl.col("path").str.split("/").list.eval(
            pl.element().filter(pl.element().is_in(list(nodes)))).list.first())
    by_node = stacks.join(ranks.select(pl.col("rank").alias("stack_rank"), "node", "pid"),
                          left_on=["dump_node", "pid"], right_on=["node", "pid"], how="left")
    unique_pid = ranks.group_by("pid").agg(n=pl.len(), r=pl.col("rank").first()).filter(pl.col("n") == 1)
    by_node = by_node.join(unique_pid.select("pid", "r"), on="pid", how="left").with_columns(
        stack_rank=pl.coalesce("stack_rank", "r")).drop("r")
    return by_node.filter(pl.col("stack_rank").is_not_null())


@dataclass
class HangAnalysis:
    """Who the evidence blames for a hang in one attempt, or why it cannot say."""
    states: list[PGState]
    hang_states: list[PGState]
    culprits: list[int] = field(default_factory=list)
    basis: str = ""                    # behind | silent | stack
    pg: PGState | None = None           # the PG the culprit failed to enter
    confidence: float = 0.0
    inconclusive: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    mapping: dict = field(default_factory=dict)   # rank -> (source, confidence)


MIN_CONFIDENCE_TO_BLAME = {"certain": 1.0, "derived": 0.85}


def analyse_hang(ctx: Context) -> HangAnalysis:
    if "hang" in ctx.shared:
        return ctx.shared["hang"]
    states = pg_states(ctx)
    hang_states = [s for s in states if s.wait_seq is not None]
    result = HangAnalysis(states, hang_states)
    ctx.shared["hang"] = result
    if not hang_states:
        _stack_only(ctx, result)
        return result
    in_flight = waiting_anywhere(states)
    for state in sorted(hang_states, key=lambda s: (s.key != DEFAULT_PG, -len(s.waiting))):
        if state.mismatched and len(state.mismatched) < len(state.waiting) / 2:
            continue  # a desync: H002's finding
        roots = [r for r in state.behind if r not in in_flight]
        if roots:
            result.culprits, result.basis, result.pg = roots, "behind", state
            idle = set(state.idle)
            result.confidence = 0.9 if all(r in idle for r in roots) else 0.75
            break
    if not result.culprits:
        _silent_members(ctx, result, in_flight)
    if not result.culprits and not result.inconclusive:
        for state in hang_states:
            if not state.behind and not state.mismatched and not state.size_stated:
                result.inconclusive.append(
                    f"{len(state.waiting)} rank(s) of {state.key} wait in SeqNum {state.wait_seq}, but the logs never "
                    "state how many ranks the group has, so a rank that printed nothing cannot be ruled out")
                break
    if result.culprits:
        _check_culprits(ctx, result)
    return result


def _silent_members(ctx: Context, result: HangAnalysis, in_flight: set[int]) -> None:
    for state in result.hang_states:
        if not state.members_known or not state.silent:
            continue
        silent = [r for r in state.silent if r not in in_flight]
        alive = ctx.logged_ranks(this_attempt=True)
        logged = [r for r in silent if r in alive]
        missing = [r for r in silent if r not in alive]
        if missing:
            result.inconclusive.append(
                f"no log at all from rank(s) {rank_ranges(missing)}: a missing file is not evidence of guilt")
        if logged and not missing:
            result.culprits, result.basis, result.pg = logged, "silent", state
            result.confidence = 0.55
            result.notes.append(
                "the culprit printed no c10d status or timeout line for this process group while the others did; "
                "silence alone is weak evidence (stdout may be block-buffered)")
        return


def _stack_only(ctx: Context, result: HangAnalysis) -> None:
    """No c10d evidence: compare live stacks (py-spy, faulthandler): collective frame vs host code.
    A rank seen in a collective or sync point in any dump is waiting, not the one that never came."""
    stacks = _stacks(ctx)
    if stacks.is_empty():
        return
    main = stacks.filter(pl.col("thread_name") == "MainThread")
    per_rank = main.group_by("stack_rank").agg(
        in_comm=pl.col("file").str.contains("torch/distributed/").any()
        | pl.col("function").str.contains(r"^(synchronize|wait|barrier)$").any())
    if len(per_rank) < 2:
        return
    waiting = per_rank.filter(pl.col("in_comm"))["stack_rank"].to_list()
    others = per_rank.filter(~pl.col("in_comm"))["stack_rank"].to_list()
    if waiting and others and len(others) < len(waiting) / 2:
        result.culprits, result.basis = sorted(others), "stack"
        result.confidence = 0.6
        result.notes.append(
            f"{len(waiting)} stack dumps (py-spy or faulthandler) show the main thread in a collective or sync "
            f"point; {len(others)} show it elsewhere")


def _check_culprits(ctx: Context, result: HangAnalysis) -> None:
    """Never blame a rank whose identity is only guessed; temper confidence otherwise."""
    ranks = ctx.ranks
    for r in result.culprits:
        row = ranks.filter(pl.col("rank") == r)
        level = row["confidence"][0] if not row.is_empty() else None
        source = row["source"][0] if not row.is_empty() else None
        result.mapping[r] = (source, level)
        if level not in MIN_CONFIDENCE_TO_BLAME:
            result.inconclusive.append(
                f"rank {r}'s global rank is only {level or 'unknown'} ({source or 'no mapping'}): "
                "the logs never state which process is which global rank")
        else:
            result.confidence *= MIN_CONFIDENCE_TO_BLAME[level]
    members = len(result.pg.members) if result.pg else 0
    if members and len(result.culprits) > members / 2:
        result.inconclusive.append(
            f"{len(result.culprits)} of {members} ranks look behind: that is the majority, not an outlier")
    if result.pg is not None and result.pg.snapshot["pg_assumed"].fill_null(False).any():
        result.confidence *= 0.9
        result.notes.append("the log lines name no process group (PyTorch <= 2.1); the default group was assumed")
    if result.pg is not None and result.pg.has_p2p:
        result.confidence *= 0.8
        result.notes.append("this group also ran send/recv, whose sequence numbers older PyTorch shared with collectives")
    if result.inconclusive:
        result.confidence = min(result.confidence, 0.3)
