"""H009 odd-rank-out: in a failed or hung job, the one rank whose end differs from everyone else's.

What it detects
    Evidence that needs no sequence numbers (the rule defers to H001/H002 when the logs have
    them), in a job whose outcome (``postmortem.analyzer.outcome``) is failed or hung, over every rank of the job (the world size must be known and every rank
    must have logged, else a silent rank cannot be ruled out):

    * **the rank that did not time out while all the others did**: every other rank timed out
      waiting (gloo ``Timed out waiting Nms``, a watchdog or blocking-wait timeout, a store
      barrier timeout); this one did not: it never entered what they wait in;
    * **the odd one out by collective**: the ranks that timed out wait in one op (and size,
      when known), one rank waits in another (five ranks in BROADCAST, one in ALLREDUCE): it
      took another code path. The op comes from the watchdog line or, for gloo, from the
      ``torch.distributed`` function in the rank's traceback;
    * **the rank that stopped early** (weaker, confidence 0.5): each rank's own progress lines
      (training lines and the script's own prints, templates with numbers, hex and paths masked,
      kept only when most ranks print them) are counted; all ranks but one printed the same
      number, one printed fewer: it stopped first.

Why it matters
    Real training scripts do not print what the hang rules read (PG status lines, py-spy
    dumps); gloo and old watchdog lines carry no sequence number. The odd rank is still
    visible in what every job prints: who timed out, in what, and how far each rank got.

What to do
    Read the named rank's last lines (the evidence): the code path it took instead of the
    collective. Take a py-spy dump of it if the job still hangs.

Known false positives
    A rank that crashed outright also "did not time out": X001 names the same rank then. With
    two ranks there is no majority: a single timed-out rank points at the other with lower
    confidence. Block-buffered stdout can lose a killed rank's last prints, which weakens the
    progress count; that is why it only points (confidence 0.5). A guessed rank mapping never
    yields a culprit.
"""

from __future__ import annotations

import re

import polars as pl

from postmortem.analyzer.outcome import PROGRESS_KINDS, rank_tails
from postmortem.analyzer.ranges import rank_ranges
from postmortem.rules.base import Context, Finding, memoised
from postmortem.rules.declare import Category, Rule, Severity

RULE = Rule(code="H009", name="odd-rank-out", severity=Severity.ERROR, category=Category.HANG, since="0.1.0")

# torch.distributed functions a rank waits in, as NCCL/c10d name the op.
C10D_OPS = {"all_reduce": "ALLREDUCE", "broadcast": "BROADCAST", "all_gather": "ALLGATHER",
            "all_gather_into_tensor": "ALLGATHER", "all_gather_object": "ALLGATHER", "reduce_scatter": "REDUCE_SCATTER",
            "reduce_scatter_tensor": "REDUCE_SCATTER", "all_to_all": "ALLTOALL", "all_to_all_single": "ALLTOALL",
            "barrier": "BARRIER", "reduce": "REDUCE", "gather": "GATHER", "scatter": "SCATTER", "recv": "RECV",
            "send": "SEND", "broadcast_object_list": "BROADCAST", "monitored_barrier": "BARRIER"}
_NAMED_BY_LINE = "monitoredBarrier names the rank"


def check(ctx: Context) -> list[Finding]:
    if ctx.outcome["outcome"] not in ("failed", "hung"):
        return []
    ranks = _all_ranks(ctx)
    if ranks is None or len(ranks) < 2:
        return []
    found = _monitored_barrier(ctx, ranks)
    if found is None and not _sequence_numbers_logged(ctx):
        # With sequence numbers, H001/H002 read the hang exactly; this rule is for when they cannot.
        waits = waiting_ranks(ctx)
        found = (_odd_by_op(ranks, waits) or _not_timed_out(ranks, waits) or _only_rank_with_an_error(ctx, ranks)
                 or _stopped_early(ctx, ranks))
    if found is None:
        return []
    suspect, confidence, why, evidence_lines = found
    if isinstance(suspect, list):  # candidates, no culprit
        return [RULE.finding(confidence=confidence, title=f"ranks {rank_ranges(suspect)} did not time out while the "
                        "others did", message=why, evidence=[ctx.evidence(i, ln, note) for i, ln, note in evidence_lines],
                        culprit=False,
                        details={"candidates": suspect, "competing": [f"rank {r}" for r in suspect]},
                        suggestion="Compare these ranks' last lines and stacks (py-spy dump while it hangs; "
                                   "TORCH_DISTRIBUTED_DEBUG=DETAIL makes monitoredBarrier name the rank).")]
    # A rank named by the line itself (monitoredBarrier) is certain; one found from whose logs
    # say what is only as sure as the mapping of those logs to ranks.
    sure = evidence_lines[0][2] == _NAMED_BY_LINE or not _guessed(ctx, suspect)
    if not sure:  # a mapping guessed from the file layout never blames: it only points
        confidence = min(confidence, 0.4)
        why += "; the rank of its log was guessed from the file layout, so this only points at it"
    gpu = ctx.gpu_of(suspect)
    node = gpu.get("node")
    evidence = [ctx.evidence(i, ln, note) for i, ln, note in evidence_lines]
    evidence += [ctx.evidence(r["input_id"], r["line_no"], f"rank {suspect}'s last lines")
                 for r in _last_lines(ctx, suspect)]
    return [RULE.finding(confidence=confidence, title=f"rank {suspect} is the odd one out", message=why,
                    ranks=[suspect], nodes=[node] if node else [], gpus=[gpu], evidence=evidence,
                    culprit=sure,
                    suggestion="Read this rank's last lines: the code path it took instead of the collective the "
                               "others wait in. While a job still hangs, py-spy dump this rank first.")]


def _sequence_numbers_logged(ctx: Context) -> bool:
    colls = ctx.table("collectives")
    progress = ctx.table("progress")
    return ("seq" in colls.columns and colls["seq"].drop_nulls().len() > 0) or not progress.is_empty()


def _all_ranks(ctx: Context) -> list[int] | None:
    """Every rank of the job, when the world size is known and every rank logged (a rank with
    no log at all could be the one)."""
    world = ctx.world_size
    seen = ctx.logged_ranks(this_attempt=True)
    if not world or not seen or set(range(world)) - seen:
        return None
    return list(range(world))


def waiting_ranks(ctx: Context) -> dict[int, dict]:
    """Ranks that timed out waiting, each with where it waited: {rank: {op, numel, input_id,
    line_no}} (op and numel None when the line does not say)."""
    out: dict[int, dict] = {}
    colls = ctx.table("collectives")
    if {"kind", "rank"} <= set(colls.columns):
        timeouts = colls.filter(pl.col("kind").is_in(["watchdog_timeout", "blocking_wait_timeout"])
                                & pl.col("rank").is_not_null())
        for r in timeouts.iter_rows(named=True):
            out.setdefault(r["rank"], {"op": r.get("op"), "numel": r.get("numel_in"), "input_id": r["input_id"],
                                       "line_no": r["line_no"]})
    events = ctx.table("events")
    if {"kind", "rank", "detail"} <= set(events.columns):
        text = pl.coalesce(pl.col("detail"), pl.col("message") if "message" in events.columns else pl.lit(None))
        gloo = events.filter(pl.col("rank").is_not_null() & (
            ((pl.col("kind") == "gloo_error") & text.str.contains("Timed out waiting"))
            | ((pl.col("kind") == "store_barrier") & text.fill_null("").str.contains("Timed out"))))
        ops = _traceback_ops(ctx)
        for r in gloo.sort("input_id", "line_no").iter_rows(named=True):
            out.setdefault(r["rank"], {"op": ops.get(r["rank"]), "numel": None, "input_id": r["input_id"],
                                       "line_no": r["line_no"]})
    return out


def _traceback_ops(ctx: Context) -> dict[int, str]:
    """The collective each rank's last traceback was in: the torch.distributed function in its
    frames (``dist.all_reduce(...)`` -> ALLREDUCE)."""
    stacks = ctx.table("stacks")
    if not {"source", "function", "file", "rank"} <= set(stacks.columns):
        return {}
    frames = stacks.filter((pl.col("source") == "traceback") & pl.col("rank").is_not_null()
                           & pl.col("file").fill_null("").str.contains("distributed_c10d")
                           & pl.col("function").is_in(list(C10D_OPS)))
    out: dict[int, str] = {}
    for r in frames.sort("input_id", "line_no").iter_rows(named=True):
        out[r["rank"]] = C10D_OPS[r["function"]]
    return out


def _monitored_barrier(ctx: Context, ranks: list[int]) -> tuple | None:
    """With TORCH_DISTRIBUTED_DEBUG=DETAIL, gloo's monitoredBarrier on rank 0 names the ranks
    that never reached it: ``Ranks 3 failed to pass monitoredBarrier in 6000 ms``."""
    events = ctx.table("events")
    if not {"kind", "message"} <= set(events.columns):
        return None
    rows = events.filter((pl.col("kind") == "monitored_barrier")
                         & pl.col("message").fill_null("").str.contains("failed to pass monitoredBarrier"))
    named: dict[int, dict] = {}
    for r in rows.sort("input_id", "line_no").iter_rows(named=True):
        listed = re.search(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier", r["message"])
        for rank in (int(x) for x in re.findall(r"\d+", listed.group(1))) if listed else ():
            named.setdefault(rank, r)
    if len(named) != 1 or not set(named) <= set(ranks):
        return None
    suspect, row = next(iter(named.items()))
    why = (f"PyTorch's monitoredBarrier (TORCH_DISTRIBUTED_DEBUG=DETAIL) says rank {suspect} failed to pass it: "
           f"the other ranks reached the barrier, rank {suspect} never did")
    return suspect, 0.85, why, [(row["input_id"], row["line_no"], _NAMED_BY_LINE)]


def _not_timed_out(ranks: list[int], waits: dict) -> tuple | None:
    quiet = [r for r in ranks if r not in waits]
    if not quiet or not waits or len(quiet) > len(waits):
        return None
    if len(quiet) > 1:
        return _some_did_not_time_out(quiet, waits)
    suspect = quiet[0]
    n = len(waits)
    confidence = 0.7 if n >= 3 else 0.6 if n == 2 else 0.5
    others = rank_ranges(sorted(waits))
    why = (f"every other rank ({others}) timed out waiting in a collective; rank {suspect} did not: it never "
           f"entered what they waited in (no sequence numbers were logged, so the count of timeouts decides)")
    first = waits[min(waits)]
    return suspect, confidence, why, [(first["input_id"], first["line_no"], f"rank {min(waits)} timed out")]


def _some_did_not_time_out(quiet: list[int], waits: dict) -> tuple:
    """A few ranks did not time out: one of them is likely the one the others waited for, but
    the timeouts alone cannot say which (confidence 0.3: names nobody)."""
    why = (f"ranks {rank_ranges(sorted(waits))} timed out waiting in a collective; ranks {rank_ranges(quiet)} did "
           f"not: one of them likely never entered what the others waited in, and nothing in the logs tells which")
    first = waits[min(waits)]
    return quiet, 0.3, why, [(first["input_id"], first["line_no"], f"rank {min(waits)} timed out")]


def _only_rank_with_an_error(ctx: Context, ranks: list[int]) -> tuple | None:
    """A hung job (no rank failed) where exactly one rank printed a traceback: typically a
    thread of it died (``Exception in thread NAME:``) and its main thread waits for that thread
    while the others wait for it in a collective."""
    if ctx.outcome["outcome"] != "hung":
        return None
    events = ctx.table("events")
    if not {"kind", "rank"} <= set(events.columns):
        return None
    errors = events.filter((pl.col("kind") == "python_traceback") & pl.col("rank").is_in(ranks))
    if errors.is_empty() or errors["rank"].n_unique() != 1:
        return None
    row = errors.sort("input_id", "line_no").row(0, named=True)
    what = row.get("exc_type") or "an exception"
    why = (f"the job hung with no rank failing; only rank {row['rank']} printed an error ({what}"
           f"{': ' + str(row['detail'])[:120] if row.get('detail') else ''}), the others stopped in step: a thread "
           f"of it died or it is stuck after the error, and the others wait for it")
    return row["rank"], 0.6, why, [(row["input_id"], row["line_no"], f"rank {row['rank']}'s error")]


def _odd_by_op(ranks: list[int], waits: dict) -> tuple | None:
    known = {r: (w["op"], w["numel"]) for r, w in waits.items() if w["op"]}
    if len(known) < 3:
        return None
    counts: dict = {}
    for key in known.values():
        counts[key] = counts.get(key, 0) + 1
    majority = max(counts, key=counts.get)
    odd = [r for r, key in known.items() if key != majority]
    if len(odd) != 1 or counts[majority] < 2 or len(known) < len(ranks) - 1:
        return None
    suspect = odd[0]
    op, numel = known[suspect]
    m_op, m_numel = majority
    size = f" of {numel} elements" if numel is not None else ""
    why = (f"ranks {rank_ranges(sorted(r for r in known if r != suspect))} timed out in {m_op}"
           f"{f' of {m_numel} elements' if m_numel is not None else ''}; rank {suspect} timed out in {op}{size}: "
           f"it took another code path and entered a different collective")
    w = waits[suspect]
    return suspect, 0.65, why, [(w["input_id"], w["line_no"], f"rank {suspect} waited in {op}")]


def _stopped_early(ctx: Context, ranks: list[int]) -> tuple | None:
    counts = _progress_counts(ctx)
    if counts.is_empty() or set(ranks) - set(counts["rank"].to_list()):
        return None
    mode = counts["n"].mode().sort()[-1]
    behind = counts.filter(pl.col("n") < mode)
    level = counts.filter(pl.col("n") == mode).height
    if behind.height != 1 or level != len(ranks) - 1 or level < 2:
        return None
    row = behind.row(0, named=True)
    why = (f"each rank's own progress lines (the script's prints and training lines): {level} ranks printed "
           f"{mode}, rank {row['rank']} only {row['n']}; it stopped first, before the point the others reached "
           f"(this points, it does not prove: a rank's last prints can be lost in a buffer)")
    return row["rank"], 0.5, why, [(row["input_id"], row["line_no"], f"rank {row['rank']}'s last progress line")]


def _progress_counts(ctx: Context) -> pl.DataFrame:
    """Per rank, the number of its progress lines whose template (digits, hex, paths masked)
    most ranks print, and the last such line. Error, launcher and NCCL lines are not progress."""
    kinds = ", ".join(f"'{k}'" for k in PROGRESS_KINDS)
    attempt = f" AND (l.attempt = {int(ctx.attempt)} OR l.attempt IS NULL)" if ctx.attempt is not None else ""
    if "text" not in ctx.run.columns("lines"):
        return pl.DataFrame()
    return ctx.frame(f"""
        WITH p AS (
          SELECT rank, input_id, line_no,
                 regexp_replace(regexp_replace(regexp_replace(coalesce(text, ''), '(/[^ :]+)+', '/P', 'g'),
                                '0x[0-9a-fA-F]+', 'X', 'g'), '[0-9]+', 'N', 'g') AS template
          FROM lines l
          WHERE rank IS NOT NULL AND (kind IS NULL OR kind IN ({kinds})){attempt}),
        common AS (
          SELECT template FROM p GROUP BY template
          HAVING count(DISTINCT rank) * 4 >= 3 * (SELECT count(DISTINCT rank) FROM p) AND template <> ''),
        ranked AS (
          SELECT p.*, count(*) OVER (PARTITION BY rank) AS n,
                 row_number() OVER (PARTITION BY rank ORDER BY input_id DESC, line_no DESC) AS k
          FROM p JOIN common USING (template))
        SELECT rank, n, input_id, line_no FROM ranked WHERE k = 1 ORDER BY rank""")


@memoised
def _tails(ctx: Context) -> dict[int, dict]:
    """Each rank's tail (``postmortem.analyzer.tails.rank_tails``) by rank, read once."""
    return {t["rank"]: t for t in rank_tails(ctx.run, ctx.attempt, limit=10_000)}


def _last_lines(ctx: Context, rank: int, limit: int = 3) -> list[dict]:
    lines = _tails(ctx).get(rank, {}).get("last_lines", [])[-limit:]
    ids = dict(ctx.frame("SELECT path, input_id FROM inputs").iter_rows())
    return [{"input_id": ids[x["path"]], "line_no": x["line"]} for x in lines if x["path"] in ids]


def _guessed(ctx: Context, rank: int) -> bool:
    row = ctx.ranks.filter(pl.col("rank") == rank) if "rank" in ctx.ranks.columns else pl.DataFrame()
    return row.is_empty() or row["confidence"][0] == "guessed"
