"""The per-process-group picture of a hang that the H rules share (not a rule itself).

For one attempt it builds, per process group and member rank, the latest evidence of
progress: ``last enqueued`` / ``last completed`` (PG status lines, periodic work updates,
the dump-signal line each rank prints with its own PG-0 numbers) and the collective a rank
timed out in (SeqNum, OpType, NumelIn/Out). Then it classifies each PG
(``docs/formats/pytorch-failures.md`` sections 3.2, 10 and 11):

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

import re

from dataclasses import dataclass, field

import polars as pl

from postmortem.analyzer.ranges import rank_ranges
from postmortem.parsers.base import among, groups_of
from postmortem.rules.base import COLL_TRACE, Context, memoised, with_columns

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


# Columns of ``progress`` and ``collectives`` the hang model reads beyond those every store has
# (postmortem.analyzer.store.REQUIRED). The c10d parsers fill them only for some line shapes (no PG in
# PyTorch <= 2.1 lines, no time on some), so a run may lack any of them: they are added as nulls.
_C10D = {"ts": pl.Datetime("us"), "kind": pl.String, "pg_id": pl.Int64, "pg_desc": pl.String, "pg_guid": pl.String}
_PROGRESS = {**_C10D, "failing_seq": pl.Int64}
_COLLECTIVES = {**_C10D, "numel_in": pl.Int64, "numel_out": pl.Int64, "timeout_ms": pl.Int64, "ran_for_ms": pl.Int64}


def _progress(ctx: Context) -> pl.DataFrame:
    return with_columns(ctx.table("progress"), **_PROGRESS)


def _collectives(ctx: Context) -> pl.DataFrame:
    return with_columns(ctx.table("collectives"), **_COLLECTIVES)


def _pg_key(frame: pl.DataFrame) -> pl.DataFrame:
    default = (pl.col("pg_id") == 0) | (pl.col("pg_desc") == DEFAULT_PG)
    # Megatron creates one group per slice with the same description (one EP group per node):
    # the GUID tells them apart (``_distinct_groups`` names them ``desc[GUID g]``).
    desc = pl.col("_pg_desc") if "_pg_desc" in frame.columns else pl.col("pg_desc")
    key = (pl.when(default.fill_null(False)).then(pl.lit(DEFAULT_PG))
           .when(desc.is_not_null()).then(desc)
           .when(pl.col("pg_guid").is_not_null()).then(pl.concat_str([pl.lit("PG GUID "), pl.col("pg_guid")]))
           .when(pl.col("pg_id").is_not_null()).then(pl.concat_str([pl.lit("PG "), pl.col("pg_id").cast(pl.String)]))
           # `[Rank N]` with no PG (<= 2.1): assume the default PG, and remember we assumed it.
           .otherwise(pl.lit(DEFAULT_PG)))
    return frame.with_columns(pg=key, pg_assumed=pl.col("pg_id").is_null() & pl.col("pg_desc").is_null()
                              & pl.col("pg_guid").is_null())


def _global_ranks(ctx: Context, frame: pl.DataFrame) -> pl.DataFrame:
    """Rows that name only a group-local rank (``[PG 2 Rank 5]`` without a ``[rankN]:`` prefix)
    get the global rank from the Flight Recorder's group membership (``pg_ranks``)."""
    if frame.is_empty() or "pg_rank" not in frame.columns or "rank" not in frame.columns:
        return frame
    members = ctx.table("pg_ranks")
    if members.is_empty() or not {"pg_guid", "group_rank", "global_rank"} <= set(members.columns):
        return frame
    lookup = (members.select(pl.col("pg_guid").cast(pl.String).alias("_g"), pl.col("group_rank").alias("_gr"),
                             pl.col("global_rank").alias("_global")).unique(["_g", "_gr"]))
    out = frame.with_columns(_g=pl.col("pg_guid").cast(pl.String), _gr=pl.col("pg_rank"))
    out = out.join(lookup, on=["_g", "_gr"], how="left")
    return out.with_columns(rank=pl.coalesce("rank", "_global")).drop("_g", "_gr", "_global")


def _distinct_groups(ctx: Context, progress: pl.DataFrame, colls: pl.DataFrame):
    """``_pg_desc``: the group's description, made distinct per GUID when several groups share
    one (``EXPERT_MODEL_PARALLEL_GROUP[GUID 6]``). Rows with a description but no GUID take the
    GUID their rank has for that description elsewhere (it is a member of one such group)."""
    progress, colls = _global_ranks(ctx, progress), _global_ranks(ctx, colls)
    frames = [f for f in (progress, colls) if not f.is_empty() and {"pg_desc", "pg_guid", "rank"} <= set(f.columns)]
    if not frames:
        return progress, colls
    known = pl.concat([f.select("rank", "pg_desc", pl.col("pg_guid").cast(pl.String)) for f in frames])
    known = known.drop_nulls(["pg_desc", "pg_guid"]).unique()
    shared = set(known.group_by("pg_desc").agg(n=pl.col("pg_guid").n_unique()).filter(pl.col("n") > 1)["pg_desc"])
    per_rank = (known.group_by("rank", "pg_desc").agg(_guid=pl.col("pg_guid").first(), _n=pl.len())
                .filter(pl.col("_n") == 1).drop("_n"))

    def name(frame: pl.DataFrame) -> pl.DataFrame:
        if frame.is_empty() or not {"pg_desc", "pg_guid", "rank"} <= set(frame.columns):
            return frame
        frame = frame.join(per_rank, on=["rank", "pg_desc"], how="left")
        guid = pl.coalesce(pl.col("pg_guid").cast(pl.String), "_guid")
        return frame.with_columns(_pg_desc=pl.when(pl.col("pg_desc").is_in(list(shared)) & guid.is_not_null())
                                  .then(pl.concat_str([pl.col("pg_desc"), pl.lit("[GUID "), guid, pl.lit("]")]))
                                  .otherwise(pl.col("pg_desc"))).drop("_guid")

    return name(progress), name(colls)


def _named_timeouts(c: pl.DataFrame, p: pl.DataFrame) -> pl.DataFrame:
    """A watchdog line that names no group (``[Rank 5] Watchdog caught ...``) belongs to the
    group whose status line the same rank printed for the same sequence (``failure detected by
    watchdog at work sequence id: N`` in ``[PG ID 2 ...]``)."""
    if c.is_empty() or p.is_empty() or "failing_seq" not in p.columns:
        return _peer_groups(c)
    named = (p.filter(~pl.col("pg_assumed") & pl.col("failing_seq").is_not_null() & pl.col("rank").is_not_null())
             .group_by("rank", "failing_seq").agg(_pg=pl.col("pg").unique().first(), _n=pl.col("pg").n_unique())
             .filter(pl.col("_n") == 1).drop("_n"))
    if named.is_empty():
        return _peer_groups(c)
    c = c.join(named, left_on=["rank", "seq"], right_on=["rank", "failing_seq"], how="left")
    fix = pl.col("pg_assumed") & pl.col("_pg").is_not_null()
    return _peer_groups(c.with_columns(pg=pl.when(fix).then(pl.col("_pg")).otherwise(pl.col("pg")),
                                       pg_assumed=pl.when(fix).then(pl.lit(False)).otherwise(pl.col("pg_assumed")))
                        .drop("_pg"))


def _peer_groups(c: pl.DataFrame) -> pl.DataFrame:
    """A watchdog line still without a group, from a rank that named no group at all, joins the
    one named group whose other ranks timed out in the same SeqNum and op: PyTorch 2.x prints
    ``[Rank 1] Watchdog caught ...`` with no group, and a rank whose follow-up lines were not
    kept would otherwise sit alone in the default group. It stays marked as assumed."""
    if c.is_empty() or not {"pg_assumed", "seq", "op"} <= set(c.columns):
        return c
    named_ranks = set(c.filter(~pl.col("pg_assumed"))["rank"].to_list())
    peers = (c.filter(~pl.col("pg_assumed") & pl.col("seq").is_not_null())
             .group_by("seq", "op").agg(_pg=pl.col("pg").unique().first(), _n=pl.col("pg").n_unique())
             .filter(pl.col("_n") == 1).drop("_n"))
    if peers.is_empty():
        return c
    c = c.join(peers, on=["seq", "op"], how="left")
    fix = pl.col("pg_assumed") & pl.col("_pg").is_not_null() & ~pl.col("rank").is_in(list(named_ranks))
    return c.with_columns(pg=pl.when(fix).then(pl.col("_pg")).otherwise(pl.col("pg"))).drop("_pg")


def snapshots(ctx: Context) -> pl.DataFrame:
    """Latest progress and timeout per (pg, rank) in this attempt, with evidence line refs."""
    progress, colls = _distinct_groups(ctx, _progress(ctx), _collectives(ctx))
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
        c = _named_timeouts(_pg_key(colls.filter(pl.col("rank").is_not_null() & watchdog)),
                            _pg_key(progress) if {"pg_id", "pg_desc", "pg_guid", "rank", "failing_seq"}
                            <= set(progress.columns) else pl.DataFrame())
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
                          "timeout_seq": pl.Int64, "op": pl.String, "numel_in": pl.Int64, "numel_out": pl.Int64,
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


@memoised
def pg_states(ctx: Context) -> list[PGState]:
    snap = snapshots(ctx)
    if snap.is_empty():
        return []
    seen = list(ctx.logged_ranks())
    # One split and one conversion for every PG: a 10,000-rank run has over a thousand PGs, and
    # a dozen Polars calls per PG cost seconds where plain rows cost milliseconds.
    parts = snap.partition_by("pg", maintain_order=True, as_dict=True)
    rows_of: dict[str, list[dict]] = {}
    for row in snap.select(_CLASSIFY_COLUMNS).iter_rows(named=True):
        rows_of.setdefault(row["pg"], []).append(row)
    return [_classify(pg, frame, rows_of[pg], ctx.world_size, seen) for (pg,), frame in parts.items()]


_CLASSIFY_COLUMNS = ["pg", "rank", "op", "numel_in", "numel_out", "wait_seq", "timeout_seq", "enqueued", "completed"]


def _gather_shaped(row: dict) -> bool:
    """A COALESCED work whose NumelOut is a whole multiple (2 or more) of its NumelIn, or the
    reverse: coalesced all-gathers and reduce-scatters (FSDP's, Lightning's), collectives every
    rank must issue alike; coalesced sends and receives (batch_isend_irecv) stay P2P."""
    n_in, n_out = row["numel_in"], row["numel_out"]
    if row["op"] != "COALESCED" or n_in is None or n_out is None:
        return False
    big, small = max(n_in, n_out), min(n_in, n_out)
    return small > 0 and big >= 2 * small and big % small == 0


# Ops whose NumelIn may differ between ranks by design: uneven all-to-all splits, and a scatter's
# non-root ranks (no input). Only their op is compared.
SIZE_FREE_OPS = r"ALLTOALL|(?<!REDUCE_)SCATTER"


def _ranks(rows: list[dict]) -> list[int]:
    return sorted(r["rank"] for r in rows)


def _classify(pg: str, snapshot: pl.DataFrame, rows: list[dict], world: int | None, seen: list[int]) -> PGState:
    """``rows``: ``snapshot``'s rows as dicts. ``seen``: every rank any line is attributed to (at
    any confidence). Without a stated world size, the default group's members are at least those ranks."""
    observed = _ranks(rows)
    known = pg == DEFAULT_PG
    if known:
        members = list(range(world)) if world is not None else sorted(set(seen) | set(observed))
    else:
        members = observed
    state = PGState(pg, members, known, snapshot, size_stated=known and world is not None)
    state.has_p2p = any(r["op"] in P2P_OPS for r in rows)
    collective_rows = [r for r in rows if r["op"] is None or r["op"] not in P2P_OPS or _gather_shaped(r)]
    waiting = [r for r in collective_rows if r["wait_seq"] is not None]
    state.timed_out = _ranks([r for r in collective_rows if r["timeout_seq"] is not None])
    if not waiting:
        return state
    k = state.wait_seq = _mode([r["wait_seq"] for r in waiting])
    at_k = [r for r in waiting if r["wait_seq"] == k]
    state.waiting = _ranks(at_k)
    state.majority_op = _mode([r["op"] for r in at_k])
    state.majority_numel = _mode([r["numel_in"] for r in at_k])
    if state.majority_op is not None:
        sized = state.majority_numel is not None and not re.search(SIZE_FREE_OPS, state.majority_op)
        state.mismatched = _ranks([
            r for r in at_k
            if (r["op"] is not None and r["op"] != state.majority_op)
            or (sized and r["numel_in"] is not None and r["numel_in"] != state.majority_numel)])
    behind = [r for r in rows
              if (r["enqueued"] is not None and r["enqueued"] < k) or (r["timeout_seq"] is not None and r["timeout_seq"] < k)]
    state.behind = _ranks(behind)
    state.idle = _ranks([r for r in behind if r["enqueued"] is not None and r["enqueued"] == r["completed"]])
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
        "AND text IS NOT NULL AND coalesce(kind, '') NOT IN ('blank') "
        "QUALIFY row_number() OVER (PARTITION BY input_id ORDER BY line_no DESC) <= ? "
        "ORDER BY input_id, line_no", params + [limit])


def stack_of(ctx: Context, rank: int) -> pl.DataFrame:
    """The frames of every thread in the rank's py-spy dump (``depth`` 0 innermost), if one exists."""
    return stacks_of(ctx, [rank])


def stacks_of(ctx: Context, ranks: list[int]) -> pl.DataFrame:
    """``stack_of`` for many ranks at once (one filter, not one per rank), in dump order."""
    stacks = _stacks(ctx)
    if stacks.is_empty():
        return stacks
    return stacks.filter(pl.col("stack_rank").is_in(among(pl.Series(list(ranks), dtype=stacks.schema["stack_rank"]))))


@memoised
def _stacks(ctx: Context) -> pl.DataFrame:
    """py-spy frames with the rank they belong to, computed once per attempt context."""
    return _stacks_by_rank(ctx)


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
    # A dump format without thread names or file paths leaves those columns out of the table.
    stacks = with_columns(stacks, thread_name=pl.String, thread_id=pl.String, thread_state=pl.String, file=pl.String,
                          file_line=pl.Int64, dump_index=pl.Int64, depth=pl.Int64)
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
    chain: list[dict] = field(default_factory=list)   # wait-for hops, outermost first, then the root
    nccl_states: list[PGState] = field(default_factory=list)   # NCCL communicators seen through COLL opCounts


def _wait_chain(usable: list[PGState], best: PGState, culprits: list[int], in_flight: set[int]) -> list[dict]:
    """The hops from the outermost waiters to the root: the groups whose members behind are
    the waiting ranks of an inner group, breadth-first from the group that waits on the root."""
    depth, order, frontier = {best.key: 0}, [best], set(best.waiting)
    while frontier:
        nxt: set[int] = set()
        for s in usable:
            if s.key not in depth and set(s.behind) & frontier:
                depth[s.key] = max(depth[o.key] for o in order if set(s.behind) & set(o.waiting)) + 1
                order.append(s)
                nxt |= set(s.waiting)
        frontier = nxt
    hops = []
    for s in sorted(order, key=lambda s: -depth[s.key]):
        through = sorted(set(s.behind) & in_flight)
        hops.append({"process_group": s.key, "op": s.majority_op,
                     "seq": s.wait_seq, "counter": "opCount" if s.key.startswith(NCCL_COMM) else "SeqNum",
                     "waiting": rank_ranges(s.waiting), "waits_on": rank_ranges(s.behind),
                     "waits_on_in_flight_elsewhere": rank_ranges(through) if through else None,
                     "source": _source_of(s)})
    hops += _inner_hops(usable, best, culprits, in_flight)
    root_idle = all(r in set(best.idle) for r in culprits)
    hops.append({"root": rank_ranges(culprits),
                 "in_flight": "nothing in flight (last enqueued == last completed)" if root_idle
                 else "no collective in flight in any group the logs show"})
    return hops


def _inner_hops(usable: list[PGState], best: PGState, culprits: list[int], in_flight: set[int]) -> list[dict]:
    """Members the root's group waits on that themselves wait in another group where nobody is
    seen behind: the one they wait for printed nothing for that group. When the group's size is
    known (all-gather / reduce-scatter NumelOut vs NumelIn) and exactly the roots are missing
    from it, say so."""
    through = set(best.behind) & in_flight
    hops = []
    for s in usable:
        if s is best or s.behind or not (set(s.waiting) & through):
            continue
        size = _group_size(s)
        observed = set(s.snapshot["rank"].to_list())
        missing = size - len(observed) if size else None
        likely = culprits if missing == len(culprits) and not set(culprits) & observed else []
        on = "a member that printed nothing for this group"
        if size:
            on += f" ({size} members by NumelOut/NumelIn, {len(observed)} seen"
            on += f"; rank {rank_ranges(likely)} is the one with nothing in flight)" if likely else ")"
        hops.append({"process_group": s.key, "op": s.majority_op, "seq": s.wait_seq, "counter": "SeqNum",
                     "waiting": rank_ranges(s.waiting), "waits_on": on, "waits_on_in_flight_elsewhere": None,
                     "source": _source_of(s), "inferred_members": rank_ranges(likely) if likely else None})
    return hops


def _group_size(state: PGState) -> int | None:
    snap = state.snapshot
    if "numel_out" not in snap.columns or state.majority_numel in (None, 0):
        return None
    outs = snap.filter(pl.col("numel_in") == state.majority_numel)["numel_out"].drop_nulls()
    if not len(outs):
        return None
    out, numel = int(outs[0]), int(state.majority_numel)
    op = (state.majority_op or "").upper()
    if "ALLGATHER" in op and out % numel == 0 and out > numel:
        return out // numel
    if "REDUCE_SCATTER" in op and numel % out == 0 and numel > out:
        return numel // out
    return None


def _source_of(state: PGState) -> str:
    if state.key.startswith(NCCL_COMM):
        return "NCCL COLL opCount"
    snap = state.snapshot
    kinds = set(snap["progress_kind"].drop_nulls().to_list()) if "progress_kind" in snap.columns else set()
    names = []
    if kinds - {"flight_recorder"} or ("timeout_seq" in state.snapshot.columns
                                         and state.snapshot["timeout_seq"].drop_nulls().len()):
        names.append("c10d")
    if "flight_recorder" in kinds:
        names.append("Flight Recorder")
    return " + ".join(names) or "c10d"


def chain_text(chain: list[dict]) -> str:
    parts = []
    for hop in chain:
        if "root" in hop:
            parts.append(f"rank {hop['root']} has {hop['in_flight']}")
            continue
        what = f"{hop['op'] + ' ' if hop['op'] else ''}{hop['counter']} {hop['seq']}"
        on = f"rank(s) {hop['waits_on']}" if hop["waits_on"][:1].isdigit() else hop["waits_on"]
        parts.append(f"rank(s) {hop['waiting']} wait in {hop['process_group']} {what} on {on}")
    return "; ".join(parts)


NCCL_COMM = "NCCL comm "


@memoised
def nccl_comm_states(ctx: Context) -> list[PGState]:
    """Per NCCL communicator, each member's last COLL ``opCount`` (``NCCL_DEBUG_SUBSYS=COLL``):
    the ops a rank enqueued on that communicator. Members whose last opCount is below the
    majority's never enqueued the op the others sit in. The global rank comes from the
    communicator's member table (``nccl_members``: host, pid -> global rank)."""
    out = []
    rows = ctx.coll_trace_ends()
    if rows.is_empty():
        return out
    members = ctx.table("nccl_members")
    if not members.is_empty() and {"comm", "host", "pid", "comm_key", "global_rank"} <= set(members.columns):
        m = members.select("comm", "host", "pid", pl.col("comm_key").alias("_key"), pl.col("global_rank").alias("_gr"),
                           pl.col("nranks").alias("_n")).unique(["comm", "host", "pid"])
        rows = rows.join(m, on=["comm", "host", "pid"], how="left")
    else:
        rows = rows.with_columns(_key=pl.lit(None, dtype=pl.String), _gr=pl.lit(None, dtype=pl.Int64),
                                 _n=pl.lit(None, dtype=pl.Int64))
    rows = rows.with_columns(_key=pl.coalesce("_key", pl.concat_str([pl.col("host"), pl.lit(":"), pl.col("comm")])),
                             rank=pl.coalesce("_gr", "rank")).filter(pl.col("rank").is_not_null())
    last = rows.sort("op_count", "input_id", "line_no").group_by("_key", "rank").agg(
        enqueued=pl.col("op_count").last() + 1, op=pl.col("op").last(), numel_in=pl.col("count").last(),
        progress_ref=pl.struct("input_id", "line_no").last(), node=pl.col("node").drop_nulls().first(),
        rank_confidence=pl.col("rank_confidence").first() if "rank_confidence" in rows.columns else pl.lit(None),
        nranks=pl.col("_n").max())
    for (key,), group in groups_of(last, "_key", maintain_order=True):
        if len(group) < 2:
            continue
        top = int(group["enqueued"].max())
        at_top = group.filter(pl.col("enqueued") == top)
        below = group.filter(pl.col("enqueued") < top)
        if below.is_empty() or len(below) >= len(at_top):
            continue  # everyone level, or no majority ahead: nothing to read from counts alone
        nranks = group["nranks"].max()
        listed = members.filter(pl.col("comm_key") == key)["global_rank"].drop_nulls().unique().to_list() \
            if not members.is_empty() and "comm_key" in members.columns else []
        known = nranks is not None and len(listed) == nranks
        snap = group.with_columns(completed=pl.lit(None, dtype=pl.Int64), timeout_seq=pl.lit(None, dtype=pl.Int64),
                                  timeout_ref=pl.lit(None), pg_assumed=pl.lit(False),
                                  progress_kind=pl.lit(COLL_TRACE),
                                  wait_seq=pl.when(pl.col("enqueued") == top).then(pl.lit(top)))
        state = PGState(f"{NCCL_COMM}{key}", sorted(listed) if known else sorted(group["rank"].to_list()), known, snap,
                        size_stated=known)
        state.wait_seq = top
        state.waiting = sorted(at_top["rank"].to_list())
        state.majority_op = _mode(at_top["op"].to_list())
        state.majority_numel = _mode(at_top["numel_in"].to_list())
        state.behind = sorted(below["rank"].to_list())
        state.silent = sorted(set(state.members) - set(group["rank"].to_list()))
        out.append(state)
    return out


MIN_CONFIDENCE_TO_BLAME = {"certain": 1.0, "derived": 0.85}


@memoised
def analyse_hang(ctx: Context) -> HangAnalysis:
    states = pg_states(ctx)
    hang_states = [s for s in states if s.wait_seq is not None]
    result = HangAnalysis(states, hang_states)
    if not hang_states:
        _stack_only(ctx, result)
        return result
    result.nccl_states = [s for s in nccl_comm_states(ctx) if s.wait_seq is not None]
    in_flight = waiting_anywhere(states) | waiting_anywhere(result.nccl_states)
    # A desync (a minority at K with another op or size) is H002's finding, not a wait.
    usable = [s for s in sorted(hang_states, key=lambda s: (s.key != DEFAULT_PG, -len(s.waiting))) + result.nccl_states
              if not (s.mismatched and len(s.mismatched) < len(s.waiting) / 2)]
    # The wait-for graph: the waiting ranks of a group wait on its members that are behind; a
    # member behind in one group may itself wait in another. The roots wait nowhere.
    roots = {r for s in usable for r in s.behind if r not in in_flight}
    if roots:
        direct = [s for s in usable if set(s.behind) & roots]
        # The group that waits on the roots alone (the innermost hop), c10d/FR before NCCL's view.
        best = min(direct, key=lambda s: (not set(s.behind) <= roots, s.key.startswith(NCCL_COMM),
                                          len(s.members), s.key != DEFAULT_PG))
        culprits = sorted(set(best.behind) & roots)
        result.culprits, result.basis, result.pg = culprits, "behind", best
        idle = set(best.idle)
        result.confidence = (0.9 if all(r in idle for r in culprits) else 0.75) * (
            0.85 if best.key.startswith(NCCL_COMM) else 1.0)
        result.chain = _wait_chain(usable, best, culprits, in_flight)
        others = sorted(roots - set(culprits))
        if others and not any(set(s.behind) & set(others) for s in usable if s.key in
                              {h.get("process_group") for h in result.chain}):
            result.notes.append(f"rank(s) {rank_ranges(others)} also have nothing in flight while others wait on them "
                                "in a group outside this chain")
    if not result.culprits and any(s.behind for s in usable):
        behind = sorted({r for s in usable for r in s.behind})
        result.inconclusive.append(
            f"rank(s) {rank_ranges(behind)} are behind in one group but wait in another: the wait-for graph has no "
            "rank with nothing in flight (a cycle, or a group whose progress lines are missing)")
    if not result.culprits and not result.inconclusive:
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
        result.notes.append("this group also ran send/recv, whose sequence numbers older PyTorch shared with "
                            "collectives")
    if result.inconclusive:
        result.confidence = min(result.confidence, 0.3)


# -- slow solo work (H006) ------------------------------------------------------------------

@memoised
def solo_work(ctx: Context) -> dict | None:
    """Evidence that the one rank the others wait for was still *working* after they began to
    wait (so it would have entered late): its own timestamped progress after the wait began
    (iteration/validation lines, checkpoint-save lines, c10d counters advancing in another
    group), or live stacks that moved between dumps. None when there is no such evidence."""
    hang = analyse_hang(ctx)
    if len(hang.culprits) != 1 or hang.inconclusive:
        return None
    rank = hang.culprits[0]
    t_wait = _wait_start(ctx, hang, rank)
    signs, refs = [], []
    if t_wait is not None:
        for name, label in (("iterations", "iteration/validation line"), ("events", "log line")):
            t = ctx.table(name)
            if t.is_empty() or not {"rank", "ts"} <= set(t.columns):
                continue
            after = t.filter((pl.col("rank") == rank) & (pl.col("ts") > t_wait))
            if name == "iterations" and "iteration" in t.columns:
                # its own line for a step the others also finished is not work done while they waited
                done = t.filter(pl.col("rank") != rank)["iteration"].drop_nulls()
                if len(done):
                    after = after.filter((pl.col("iteration") > done.max())
                                         | (pl.col("validation").fill_null(False) if "validation" in t.columns
                                            else pl.lit(False)))
            if name == "events" and "level" in after.columns:
                after = after.filter(pl.col("level").fill_null("info").is_in(["info", "debug"])
                                     & ~pl.col("kind").fill_null("").str.contains("timeout|error|exception|traceback"))
            if not after.is_empty():
                kinds = sorted(set(after["kind"].drop_nulls().to_list())) if "kind" in after.columns else []
                signs.append(f"{len(after)} {label}(s) of its own after the others began to wait at {t_wait}"
                             + (f" ({', '.join(kinds[:4])})" if kinds else ""))
                refs += after.sort("ts").select("input_id", "line_no").head(2).rows()
        progress = _progress(ctx)  # _pg_key needs the PG columns, absent from lines of PyTorch <= 2.1
        if not progress.is_empty() and {"rank", "ts", "last_completed"} <= set(progress.columns):
            mine = _pg_key(progress.filter(pl.col("rank") == rank))
            for (pg,), rows in groups_of(mine, "pg", maintain_order=True):
                # Periodic status lines are a minute apart: only growth between two lines both
                # after the others began to wait is work done while they waited.
                later = rows.filter(pl.col("ts") > t_wait).sort("ts", "input_id", "line_no", maintain_order=True)[
                    "last_completed"].drop_nulls()
                if len(later) >= 2 and later.max() > later[0]:
                    grown = rows.filter((pl.col("ts") > t_wait) & (pl.col("last_completed") > later[0]))
                    signs.append(f"its completed work in {pg} kept advancing after the others began to wait "
                                 f"({later[0]} -> {later.max()})")
                    refs += grown.select("input_id", "line_no").head(1).rows()
    busy = _busy_stack(ctx, rank)
    if busy:
        signs.append(busy[0])
        refs.append(busy[1])
    if not signs:
        return None
    result = {"rank": rank, "signs": signs, "refs": refs[:3], "wait_start": t_wait}
    return result


def _wait_start(ctx: Context, hang: HangAnalysis, culprit: int):
    """When the others began to wait: the enqueue time of the first timed-out op (timeout time
    minus its run time), else the last iteration line of the waiting ranks."""
    from datetime import timedelta

    state = hang.pg
    if state is not None and "timeout_ts" in state.snapshot.columns:
        rows = state.snapshot.filter(pl.col("timeout_ts").is_not_null() & pl.col("ran_for_ms").is_not_null())
        if not rows.is_empty():
            return min(ts - timedelta(milliseconds=ms)
                       for ts, ms in rows.select("timeout_ts", "ran_for_ms").iter_rows())
    progress = ctx.table("progress")
    if state is not None and state.waiting and not progress.is_empty() and \
            {"rank", "ts", "last_enqueued", "pg_id", "pg_desc", "pg_guid"} <= set(progress.columns):
        # The first status line of a waiting rank that shows the op enqueued.
        entered = _pg_key(progress.filter(pl.col("rank").is_in(state.waiting))).filter(
            (pl.col("pg") == state.key) & (pl.col("last_enqueued") >= state.wait_seq))["ts"].drop_nulls()
        if len(entered):
            return entered.min()
    iterations = ctx.table("iterations")
    if iterations.is_empty() or not {"rank", "ts"} <= set(iterations.columns):
        return None
    others = iterations.filter(pl.col("rank").is_not_null() & (pl.col("rank") != culprit))
    if state is not None and state.waiting:
        others = others.filter(pl.col("rank").is_in(state.waiting))
    return others["ts"].max()


def _busy_stack(ctx: Context, rank: int):
    """(sign, ref) when the rank's live main thread moved between two dumps, outside any
    collective; None otherwise."""
    frames = stack_of(ctx, rank)
    if frames.is_empty():
        return None
    main = frames.filter(pl.col("thread_name") == "MainThread")
    if main.is_empty():
        return None
    dumps = main.group_by("input_id", "dump_index").agg(
        state=pl.col("thread_state").first(), top=pl.col("function").sort_by("depth").first(),
        stack=pl.col("function").sort_by("depth").str.join("<"),
        comm=pl.col("file").str.contains("torch/distributed/").any(),
        line=pl.col("line_no").sort_by("depth").first()).sort("input_id", "dump_index")
    if dumps["comm"].any():
        return None
    if dumps["stack"].n_unique() > 1:
        return (f"its {len(dumps)} stack dumps differ (it was moving: {' | '.join(dumps['top'].to_list()[:3])})",
                (dumps["input_id"][0], dumps["line"][0]))
    # One dump active in compute is not enough: a rank stuck in a code path that never reaches
    # the collective (the lazy optimizer-state init of a deadlock) is active too.
    return None


# -- teardown (H008) --------------------------------------------------------------------------

def training_finished(ctx: Context) -> dict | None:
    """The last training iteration reached ``train_iters`` (the run's own target): what hangs
    after it is teardown (final save, barrier, destroy_process_group), not training."""
    iterations = ctx.table("iterations")
    if iterations.is_empty() or not {"iteration", "train_iters"} <= set(iterations.columns):
        return None
    train = iterations.filter(~pl.col("validation").fill_null(False)) if "validation" in iterations.columns \
        else iterations
    target = train["train_iters"].drop_nulls()
    last = train["iteration"].drop_nulls()
    if not len(target) or not len(last) or int(last.max()) < int(target.max()):
        return None
    ts = train["ts"].max() if "ts" in train.columns else None
    row = train.sort("iteration").row(len(train) - 1, named=True)
    return {"iteration": int(last.max()), "train_iters": int(target.max()), "ts": ts,
            "ref": (row["input_id"], row["line_no"])}
