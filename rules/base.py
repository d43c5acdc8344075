"""What a rule reads and what it returns.

A rule is a module in a family folder of ``rules/`` (``rules/hang/h001_...py``) with a docstring
(what it detects, why it matters, what to do, known false positives), a ``RULE`` declaration
(``postmortem.rules.declare.Rule``) and ``check(ctx: Context) -> list[Finding]``, whose findings
it makes with ``RULE.finding``. Rules read the store through ``ctx`` and never import Textual.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import polars as pl

from postmortem.analyzer.store import line_text
from postmortem.parsers.base import nulls
from postmortem.parsers.nccl import COLL_KIND
from postmortem.rules.declare import Category, Severity

if TYPE_CHECKING:
    from postmortem.analyzer.pipeline import Run


@dataclass
class Evidence:
    path: str
    line: int
    text: str
    rank: int | None = None
    node: str | None = None
    note: str | None = None


@dataclass
class Finding:
    """One thing a rule found (made by ``Rule.finding``). ``severity`` and ``category`` are the
    enums (a string is converted, and one that names no member raises); ``to_dict`` has their
    strings, as the report carries them."""

    code: str
    name: str
    severity: Severity
    confidence: float
    title: str
    message: str
    ranks: list[int] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    gpus: list[dict] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    suggestion: str = ""
    caused_by: list[str] = field(default_factory=list)
    attempt: int | None = None
    category: Category = ""         # required in practice: "" names no category and raises
    culprit: bool = False           # the finding names the cause (not a symptom)
    details: dict = field(default_factory=dict)
    id: str = ""

    def __post_init__(self):
        self.severity = Severity(self.severity)
        self.category = Category(self.category)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["confidence"] = round(self.confidence, 2)
        data["severity"], data["category"] = str(self.severity), str(self.category)
        return data


def with_columns(frame: pl.DataFrame, **dtypes) -> pl.DataFrame:
    """``frame`` with each named column it lacks added as nulls of that type. A parser table has
    only the columns some row filled (no event carried a time: ``events`` has no ``ts``), so a
    rule that reads an optional column asks for it here instead of failing on its absence."""
    missing = [(name, dtype) for name, dtype in dtypes.items() if name not in frame.columns]
    if not missing:
        return frame
    if not frame.width:     # no column to take the height from: a query's one row of literals
        return frame.with_columns(pl.lit(None, dtype=dtype).alias(name) for name, dtype in missing)
    # null Series added by position (a query per table read costs more than the columns)
    return frame.hstack([nulls(name, dtype, frame.height) for name, dtype in missing])


def memoised(build):
    """``build(ctx, *args)`` computed once per ``Context`` and arguments: a model several rules read
    (the hang analysis, the crash failures) is built by the first that asks. The arguments must be
    hashable."""
    @functools.wraps(build)
    def cached(ctx: Context, *args):
        key = (cached, args)
        if key not in ctx._memo:
            ctx._memo[key] = build(ctx, *args)
        return ctx._memo[key]
    return cached


# NCCL's COLL trace rows in ``collectives`` (postmortem.parsers.nccl)
COLL_TRACE = COLL_KIND
_THIS_ATTEMPT = "attempt = ? OR attempt IS NULL"


@dataclass(frozen=True)
class Options:
    """What the user asked for beyond the inputs: ``report --gpu`` (judge against this card, not the
    one nvidia-smi names) and ``--what-if-gpu`` (M003). The rules read them from ``ctx.options``;
    the report cache keys on them."""
    gpu: str | None = None
    what_if_gpu: str | None = None


def _rows(frame: pl.DataFrame, attempt: int | None, without_coll_trace: bool) -> pl.DataFrame:
    """``frame``'s rows that ``Context.table``'s query would select (the frame itself when that is
    all of them: a frame of a million rows is not copied)."""
    keep = []
    if attempt is not None:
        keep.append(pl.col("attempt").is_null() | (pl.col("attempt") == attempt))
    if without_coll_trace and "kind" in frame.columns:
        keep.append(pl.col("kind").ne_missing(COLL_TRACE))
    if not keep or _keeps_all(frame, attempt, without_coll_trace):
        return frame
    mask = frame.select(pl.all_horizontal(keep)).to_series()
    return frame if mask.all() else frame.filter(mask)


def _keeps_all(frame: pl.DataFrame, attempt: int | None, without_coll_trace: bool) -> bool:
    """Whether ``_rows`` keeps every row of ``frame`` (the usual case: a run of one attempt, no
    COLL trace in the table), asked of its Series without a query (a Polars call each, and a
    report reads about 20 tables a context). False where a column's type is not the usual one
    (the query decides)."""
    if attempt is not None:
        attempts = frame["attempt"]
        if not attempts.dtype.is_integer() or (attempts == attempt).sum() + attempts.null_count() != frame.height:
            return False
    if without_coll_trace and "kind" in frame.columns:
        kinds = frame["kind"]
        return kinds.dtype == pl.String and not (kinds == COLL_TRACE).any()
    return True


class Context:
    """A run and one attempt, with helpers rules share (evidence lines, the rank map)."""

    def __init__(self, run: Run, attempt: int | None, options: Options | None = None):
        self.run = run
        self.attempt = attempt
        self.options = options or Options()
        self._cache: dict = {}
        self._text_cache: dict = {}
        self._memo: dict = {}       # what @memoised model builders computed for this context
        self.rule_errors: list[dict] = []  # rules that raised (postmortem.rules.report.rule_error)
        self.findings: list[Finding] = []  # the findings of the rules that ran before (postmortem.rules.report.run_rules)

    def frame(self, sql: str, params: list | None = None) -> pl.DataFrame:
        return self.run.frame(sql, params)

    def table(self, name: str) -> pl.DataFrame:
        """The rows of ``name`` in this attempt (all rows when the table has no attempt column;
        an empty frame when the run has no such table). ``collectives`` comes without its COLL
        trace rows (kind ``nccl_coll``: one per collective per rank, millions in a traced run);
        ``coll_trace_ends`` has what rules read of them."""
        if name not in self._cache:
            columns = self.run.columns(name)
            by_attempt = "attempt" in columns and self.attempt is not None
            where = [f"({_THIS_ATTEMPT})"] if by_attempt else []
            if name == "collectives" and "kind" in columns:
                where.append(f"kind IS DISTINCT FROM '{COLL_TRACE}'")
            if not columns:
                df = pl.DataFrame()
            elif (kept := self.run.kept(name)) is not None:   # the frame the analysis wrote: the same rows, no query
                df = _rows(kept, self.attempt if by_attempt else None, name == "collectives")
            else:
                sql = f'SELECT * FROM "{name}"' + (" WHERE " + " AND ".join(where) if where else "")
                df = self.frame(sql, [self.attempt] if by_attempt else None)
            self._cache[name] = df
        return self._cache[name]

    def coll_trace_ends(self) -> pl.DataFrame:
        """COLL trace rows of this attempt, only the first and the last (by opCount, then
        position) of each (comm, host, pid, rank), with the columns a communicator's progress
        needs: one aggregate over what may be millions of rows."""
        if "coll_trace_ends" not in self._cache:
            columns = set(self.run.columns("collectives"))
            wanted = ["op_count", "op", "count", "input_id", "line_no", "node", "rank_confidence"]
            if not {"kind", "comm", "host", "pid", "rank", *wanted} <= columns:
                self._cache["coll_trace_ends"] = pl.DataFrame()
                return self._cache["coll_trace_ends"]
            attempt = f" AND ({_THIS_ATTEMPT})" if "attempt" in columns and self.attempt is not None else ""
            row = "struct_pack(" + ", ".join(wanted) + ")"
            order = "struct_pack(op_count, input_id, line_no)"
            sql = f"""
                WITH ends AS (
                  SELECT comm, host, pid, rank, arg_min({row}, {order}) AS first, arg_max({row}, {order}) AS last
                  FROM collectives
                  WHERE kind = '{COLL_TRACE}' AND op_count IS NOT NULL AND comm IS NOT NULL{attempt}
                  GROUP BY comm, host, pid, rank)
                SELECT comm, host, pid, rank, unnest(first) FROM ends
                UNION ALL
                SELECT comm, host, pid, rank, unnest(last) FROM ends WHERE last <> first"""
            self._cache["coll_trace_ends"] = self.frame(sql, [self.attempt] if attempt else None)
        return self._cache["coll_trace_ends"]

    def logged_ranks(self, this_attempt: bool = False) -> set[int]:
        """Ranks that any line is attributed to (at any confidence), in the run or this attempt."""
        key = ("logged_ranks", this_attempt)
        if key not in self._cache:
            sql = "SELECT DISTINCT rank FROM lines WHERE rank IS NOT NULL"
            params = []
            if this_attempt and self.attempt is not None:
                sql += " AND (attempt = ? OR attempt IS NULL)"
                params = [self.attempt]
            self._cache[key] = set(self.frame(sql, params)["rank"].to_list())
        return self._cache[key]

    @property
    def outcome(self) -> dict:
        """The job's outcome in this attempt (``postmortem.analyzer.outcome.job_outcome``), read once."""
        if "outcome" not in self._cache:
            from postmortem.analyzer.outcome import job_outcome

            self._cache["outcome"] = job_outcome(self.run, self.attempt)
        return self._cache["outcome"]

    @property
    def ranks(self) -> pl.DataFrame:
        return self.table("ranks")

    @property
    def world_size(self) -> int | None:
        return self.run.info.get("world_size")

    def evidence(self, input_id: int, line_no: int, note: str | None = None) -> Evidence:
        # one row: fetched as Python values (a frame costs a millisecond more; a report cites dozens)
        rows = self.run.con.execute(
            "SELECT i.path, i.abs_path, l.offset, l.length, l.rank, l.node FROM lines l "
            "JOIN inputs i USING (input_id) WHERE l.input_id = ? AND l.line_no = ?", [input_id, line_no]).fetchall()
        if not rows:
            return Evidence("?", line_no, "", note=note)
        path, abs_path, offset, length, rank, node = rows[0]
        # Evidence is the line exactly as it stands in the input, launcher prefix included; a line
        # whose position is not recorded cannot be read back, and is cited by path and number only.
        text = line_text(abs_path, offset, length, self._text_cache) if None not in (abs_path, offset, length) else ""
        return Evidence(path, int(line_no), text.rstrip("\r"), rank, node, note)

    def gpu_of(self, rank: int) -> dict:
        ranks = self.ranks
        if isinstance(rank, int) and ranks["rank"].dtype.is_integer():
            match = ranks["rank"] == rank     # Series work: a query per rank asked costs more
            at = match.arg_max() if match.any() else None
        else:
            at = ranks.with_row_index("_at").filter(pl.col("rank") == rank)["_at"].first()
        if at is None:
            return {"rank": rank}
        r = ranks.row(at, named=True)
        return {"rank": rank, "node": r["node"], "local_rank": r["local_rank"], "cuda_dev": r["cuda_dev"],
                "bus_id": r["bus_id"], "pid": r["pid"],
                "mapping_source": r["source"], "mapping_confidence": r["confidence"]}
