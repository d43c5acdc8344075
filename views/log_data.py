"""The Logs screen's queries: the merged lines of every input, filtered and paged from DuckDB.

No Textual here (tests drive it directly). Everything lives in temporary tables of ONE
dedicated cursor (DuckDB temp tables belong to a connection), guarded by a lock: the heavy
steps (``build``, ``apply``, ``search``) run in a worker thread, page fetches run on the UI
thread and give up at once (``rows`` returns None) while a heavy step holds the cursor.

Order. ``time`` (the default) merges the inputs lnav-style: a line's time is the latest time
stamped on a row of ``events``, ``iterations``, ``progress``, ``node_events``, ``agent`` or
``slurm`` at or before it in the same input (a running maximum, so one file's lines never
swap places); lines before an input's first stamp take that first stamp; inputs with no
stamp at all (configs, hardware dumps) come first. Ties keep input path, then line order.
``file`` is input path, then line number.

Text. A line shows the store's ``text``: the message after the launcher prefix (the source
column names the rank), ANSI colour codes removed, a tqdm ``\\r`` redraw collapsed to its
last segment, exactly what the parsers read. NCCL ``INFO`` lines have NULL text in the store:
their bytes are read back from the input by offset (``postmortem.analyzer.store.line_text``), a page at
a time for display, and every candidate line's for a regex filter or a search (in the worker).

Level, derived once per line with RE2 over the text (``LEVEL_SQL``): ERROR for glog ``E``/``F``
headers, ``ERROR``/``FATAL``/``CRITICAL`` words, Python ``Traceback`` heads and ``XxxError:``
/ ``XxxException:`` lines, Xid and segfault lines; WARN for glog ``W`` headers, ``WARN``/
``WARNING`` words (``NCCL WARN`` included); DEBUG for glog ``D``, ``DEBUG``, ``TRACE``;
everything else, NCCL INFO lines included, is INFO. The level filter keeps lines at or above
a level.

Regex (filter and search): RE2 (DuckDB ``regexp_matches``) over stored text, Python ``re`` over
read-back NCCL INFO text, so a pattern must compile in both (``check_regex``). Smart case:
a pattern without capitals ignores case.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

from postmortem.analyzer.discover import COMPRESSED
from postmortem.analyzer.store import line_text

LEVELS = ("DEBUG", "INFO", "WARN", "ERROR")
DEBUG, INFO, WARN, ERROR = range(4)
TIME_TABLES = ("events", "iterations", "progress", "node_events", "agent", "slurm")
PAGE = 128
SOURCE_MIN, SOURCE_MAX = 9, 24   # the gutter's source column (rank, node or file), in characters
MAX_PAGES = 64
# A line's id in the index: its input and line number in one integer. Not ``rowid``: in a
# COLL-traced run ``lines`` is a view (postmortem.analyzer.bulk), which has none.
RID = "(input_id::BIGINT * 4294967296 + line_no)"
MAX_CHARS = 4000  # a displayed line is cut here (horizontal scroll reaches this far)

_ERROR_RE = (r"^\[?[EF]\d{4} |\b(ERROR|FATAL|CRITICAL)\b|Traceback \(most recent call last\)"
             r"|^\s*[\w.]*(Error|Exception)\b[^ ]*:|\bXid\b|Segmentation fault")
_WARN_RE = r"^\[?W\d{4} |\bWARN(ING)?\b"
_DEBUG_RE = r"^\[?D\d{4} |\b(DEBUG|TRACE)\b"
LEVEL_SQL = f"""CASE WHEN text IS NULL THEN {INFO}
  WHEN regexp_matches(text, '{_ERROR_RE}') THEN {ERROR}
  WHEN regexp_matches(text, '{_WARN_RE}') THEN {WARN}
  WHEN regexp_matches(text, '{_DEBUG_RE}') THEN {DEBUG}
  ELSE {INFO} END"""


@dataclass(frozen=True)
class Filters:
    ranks: tuple[tuple[int, int], ...] = ()  # inclusive ranges
    nodes: tuple[str, ...] = ()  # globs (an exact name is a glob)
    min_level: int = DEBUG
    regex: str = ""

    @property
    def active(self) -> bool:
        return bool(self.ranks or self.nodes or self.min_level > DEBUG or self.regex)

    def describe(self) -> str:
        parts = []
        if self.ranks:
            parts.append("rank " + ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in self.ranks))
        if self.nodes:
            parts.append("node " + ",".join(self.nodes))
        if self.min_level > DEBUG:
            parts.append(f"level ≥ {LEVELS[self.min_level]}")
        if self.regex:
            parts.append(f"/{self.regex}/")
        return " · ".join(parts)


@dataclass
class LogRow:
    pos: int  # position in the current view
    input_id: int
    line_no: int
    rank: int | None
    node: str | None
    level: int
    attempt: int | None
    path: str
    text: str


@dataclass
class ViewState:
    count: int = 0
    total: int = 0
    filters: Filters = field(default_factory=Filters)
    order: str = "time"
    hits: int = 0  # search matches in the view


def parse_ranks(spec: str) -> tuple[tuple[int, int], ...]:
    """``0-7,12`` -> ((0, 7), (12, 12)); ValueError with the bad part."""
    out = []
    for part in (p.strip() for p in spec.replace(" ", ",").split(",")):
        if not part:
            continue
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise ValueError(f"not a rank or range: {part!r}")
        lo, hi = int(m[1]), int(m[2] or m[1])
        out.append((min(lo, hi), max(lo, hi)))
    return tuple(out)


def parse_nodes(spec: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in spec.replace(" ", ",").split(",") if p.strip())


def smart_case(pattern: str) -> str:
    return pattern if not pattern or any(c.isupper() for c in pattern) or pattern.startswith("(?") \
        else "(?i)" + pattern


def python_regex(pattern: str) -> re.Pattern | None:
    """The compiled pattern (smart case), None for an empty one; ValueError when Python ``re``
    refuses it (RE2 is checked when the worker runs it: ``duckdb.Error``)."""
    if not pattern:
        return None
    try:
        return re.compile(smart_case(pattern))
    except re.error as exc:
        raise ValueError(f"bad regex: {exc}") from None


class ReadBack:
    """Reads NULL-text lines back from their inputs; decompressed inputs are kept (a few)."""

    def __init__(self, abs_paths: dict[int, str], keep: int = 4):
        self.abs_paths = abs_paths
        self.keep = keep
        self._data: OrderedDict[str, dict] = OrderedDict()

    def text(self, input_id: int, offset: int, length: int, prefix: str | None) -> str:
        path = self.abs_paths.get(input_id, "")
        try:
            raw = self._read(path, offset, length)
        except OSError as exc:
            return f"<cannot read {Path(path).name}: {exc.strerror or exc}>"
        raw = raw.removesuffix("\r")
        return raw[len(prefix):] if prefix and raw.startswith(prefix) else raw

    def _read(self, path: str, offset: int, length: int) -> str:
        plain_file = Path(path).suffix.lower() not in COMPRESSED and "!/" not in path
        if plain_file:
            return line_text(path, offset, length)
        if path not in self._data:
            self._data[path] = {}
            while len(self._data) > self.keep:
                self._data.popitem(last=False)
        self._data.move_to_end(path)
        return line_text(path, offset, length, self._data[path])

    def many(self, rows: list[tuple]) -> list[tuple[int, str]]:
        """``rows`` of (rid, input_id, offset, length, prefix) -> (rid, text), one input at a
        time (a plain file is opened once)."""
        out = []
        rows = sorted(rows, key=lambda r: (r[1], r[2]))
        i = 0
        while i < len(rows):
            j = i
            while j < len(rows) and rows[j][1] == rows[i][1]:
                j += 1
            out += self._one_input(rows[i:j])
            i = j
        return out

    def _one_input(self, rows: list[tuple]) -> list[tuple[int, str]]:
        path = self.abs_paths.get(rows[0][1], "")
        if Path(path).suffix.lower() in COMPRESSED or "!/" in path:
            return [(r[0], self.text(r[1], r[2], r[3], r[4])) for r in rows]
        out = []
        try:
            with open(path, "rb") as handle:
                for rid, _, offset, length, prefix in rows:
                    handle.seek(offset)
                    raw = handle.read(length).decode("utf-8", "backslashreplace").removesuffix("\r")
                    out.append((rid, raw[len(prefix):] if prefix and raw.startswith(prefix) else raw))
        except OSError:
            return [(r[0], "") for r in rows]
        return out


class LogData:
    """The merged, filtered lines of a store. ``build`` once, then ``apply`` filters/order;
    ``rows`` pages them; ``search`` marks matches for ``next_hit``."""

    def __init__(self, cursor):
        self.cur = cursor
        self.lock = threading.Lock()
        self.built = False
        self.state = ViewState()
        self.max_width = 80
        self.line_digits = 4
        self.source_width = SOURCE_MIN
        self.pattern: re.Pattern | None = None  # the search, for highlighting
        self.searched = ""
        self._pages: OrderedDict[int, list[LogRow]] = OrderedDict()
        self._paths: dict[int, str] = {}
        self._readback: ReadBack | None = None

    # -- heavy steps (worker thread) ------------------------------------------------------
    def build(self) -> None:
        """The line index (order positions, level, time) in a temp table; once."""
        with self.lock:
            if self.built:
                return
            cur = self.cur
            inputs = cur.execute("SELECT input_id, path, abs_path FROM inputs").fetchall()
            self._paths = {i: p for i, p, _ in inputs}
            self._readback = ReadBack({i: a for i, _, a in inputs})
            cur.execute("CREATE OR REPLACE TEMP TABLE pm_stamps AS " + self._stamps_sql())
            cur.execute(f"""CREATE OR REPLACE TEMP TABLE pm_idx AS
                WITH l AS (
                  SELECT {RID} AS rid, l.input_id, l.line_no, l.rank, l.node, l.attempt,
                         l.text IS NULL AS readback, {LEVEL_SQL} AS level, s.ts
                  FROM lines l LEFT JOIN pm_stamps s USING (input_id, line_no)),
                t AS (
                  SELECT *, coalesce(max(ts) OVER (PARTITION BY input_id ORDER BY line_no
                                                   ROWS UNBOUNDED PRECEDING),
                                     min(ts) OVER (PARTITION BY input_id)) AS t FROM l),
                p AS (SELECT input_id, row_number() OVER (ORDER BY path) AS path_pos FROM inputs)
                SELECT row_number() OVER (ORDER BY t NULLS FIRST, path_pos, line_no) - 1 AS tpos,
                       row_number() OVER (ORDER BY path_pos, line_no) - 1 AS fpos,
                       rid, input_id, line_no, rank, node, attempt, readback, level::UTINYINT AS level, t
                FROM t JOIN p USING (input_id)""")
            total, width, last, names = cur.execute(
                "SELECT count(*), coalesce(max(length), 0), coalesce(max(line_no), 1), "
                "coalesce(max(greatest(length(node), length(CAST(rank AS VARCHAR)) + 1)), 0) FROM lines").fetchone()
            # the source column as wide as the names it shows (h20-node-01, r1023), within bounds
            self.source_width = min(max(int(names), SOURCE_MIN), SOURCE_MAX)
            self.max_width = min(max(int(width), 20), MAX_CHARS)
            self.line_digits = max(len(str(last)), 3)
            self.state = ViewState(total=total)
            self.built = True
        self.apply(Filters(), "time")

    def _stamps_sql(self) -> str:
        have = {t for (t,) in self.cur.execute(
            "SELECT table_name FROM information_schema.columns WHERE column_name IN ('ts', 'input_id', 'line_no') "
            "AND table_schema = 'main' GROUP BY table_name HAVING count(*) = 3").fetchall()}
        # A dmesg line has no clock time of its own (ts NULL), only the one the node model put on it
        # (seconds since boot + boot time: ts_utc); without it, the Xid sorts among untimed files.
        utc = {t for (t,) in self.cur.execute(
            "SELECT table_name FROM information_schema.columns WHERE column_name = 'ts_utc' "
            "AND table_schema = 'main'").fetchall()}
        parts = [f"SELECT input_id, line_no, {'coalesce(ts, ts_utc)' if t in utc else 'ts'}::TIMESTAMP AS ts "
                 f"FROM {t} WHERE {'coalesce(ts, ts_utc)' if t in utc else 'ts'} IS NOT NULL"
                 for t in TIME_TABLES if t in have]
        if not parts:
            return "SELECT NULL::UINTEGER AS input_id, NULL::UINTEGER AS line_no, NULL::TIMESTAMP AS ts LIMIT 0"
        return f"SELECT input_id, line_no, max(ts) AS ts FROM ({' UNION ALL '.join(parts)}) GROUP BY ALL"

    def apply(self, filters: Filters, order: str | None = None) -> ViewState:
        """Materialise the view (row numbers over the filtered index) and re-run the search."""
        order = order or self.state.order
        with self.lock:
            where, params = self._where(filters)
            key = "tpos" if order == "time" else "fpos"
            self.cur.execute(f"""CREATE OR REPLACE TEMP TABLE pm_view AS
                SELECT row_number() OVER (ORDER BY {key}) - 1 AS vpos, {key} AS opos, rid, input_id,
                       line_no, rank, node, attempt, readback, level, t
                FROM pm_idx WHERE {where} ORDER BY vpos""", params)
            count = self.cur.execute("SELECT count(*) FROM pm_view").fetchone()[0]
            self.state = replace(self.state, count=count, filters=filters, order=order)
            self._pages = OrderedDict()  # a fresh cache: row() may be reading the old one
            self._mark_hits()
        return self.state

    def _where(self, f: Filters) -> tuple[str, list]:
        clauses, params = ["true"], []
        if f.ranks:
            clauses.append("(" + " OR ".join("rank BETWEEN ? AND ?" for _ in f.ranks) + ")")
            params += [v for r in f.ranks for v in r]
        if f.nodes:
            clauses.append("(" + " OR ".join("node GLOB ?" for _ in f.nodes) + ")")
            params += list(f.nodes)
        if f.min_level > DEBUG:
            clauses.append("level >= ?")
            params.append(f.min_level)
        if f.regex:
            self._match_readback("pm_rx", "pm_idx", " AND ".join(clauses), list(params), f.regex)
            clauses.append(f"(rid IN (SELECT {RID} FROM lines WHERE regexp_matches(text, ?)) "
                           "OR rid IN (SELECT rid FROM pm_rx))")
            params.append(smart_case(f.regex))
        return " AND ".join(clauses), params

    def _match_readback(self, table: str, source: str, where: str, params: list, pattern: str) -> None:
        """NULL-text lines of ``source`` passing ``where``, read back and matched in Python; the
        matching rids land in ``table``."""
        regex = python_regex(pattern)
        rows = self.cur.execute(f"""SELECT s.rid, s.input_id, l."offset", l.length, l.prefix
            FROM (SELECT rid, input_id, line_no FROM {source} WHERE readback AND {where}) s
            JOIN lines l ON l.input_id = s.input_id AND l.line_no = s.line_no""", params).fetchall()
        hits = [rid for rid, text in self._readback.many(rows) if regex.search(text)]
        self.cur.execute(f"CREATE OR REPLACE TEMP TABLE {table} AS SELECT unnest(?::BIGINT[]) AS rid", [hits])

    def search(self, pattern: str) -> int:
        """Mark the view's lines matching ``pattern`` (empty: none); the number of matches."""
        with self.lock:
            self.searched = pattern
            self.pattern = python_regex(pattern)
            return self._mark_hits()

    def _mark_hits(self) -> int:
        if not self.searched:
            self.cur.execute("CREATE OR REPLACE TEMP TABLE pm_hits AS SELECT 0::BIGINT AS vpos LIMIT 0")
            self.state = replace(self.state, hits=0)
            return 0
        self._match_readback("pm_hx", "pm_view", "true", [], self.searched)
        self.cur.execute(f"""CREATE OR REPLACE TEMP TABLE pm_hits AS SELECT vpos FROM pm_view
            WHERE rid IN (SELECT {RID} FROM lines WHERE regexp_matches(text, ?))
               OR rid IN (SELECT rid FROM pm_hx) ORDER BY vpos""", [smart_case(self.searched)])
        hits = self.cur.execute("SELECT count(*) FROM pm_hits").fetchone()[0]
        self.state = replace(self.state, hits=hits)
        return hits

    # -- light steps (UI thread, fast) ----------------------------------------------------
    def next_hit(self, pos: int, forward: bool = True) -> int | None:
        """The next (or previous) match after ``pos``, wrapping around; None without matches."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            if forward:
                sql = "SELECT coalesce(min(vpos) FILTER (vpos > ?), min(vpos)) FROM pm_hits"
            else:
                sql = "SELECT coalesce(max(vpos) FILTER (vpos < ?), max(vpos)) FROM pm_hits"
            return self.cur.execute(sql, [pos]).fetchone()[0]
        finally:
            self.lock.release()

    def position(self, input_id: int, line_no: int) -> int | None:
        """The view position of a line, None when the view does not hold it."""
        with self.lock:
            row = self.cur.execute("SELECT vpos FROM pm_view WHERE input_id = ? AND line_no = ?",
                                   [input_id, line_no]).fetchone()
        return None if row is None else row[0]

    def nearest(self, input_id: int, line_no: int, order: str) -> int:
        """The view position of that line, or of the first line after it in ``order``."""
        key = "tpos" if order == "time" else "fpos"
        with self.lock:
            row = self.cur.execute(f"""SELECT min(v.vpos) FROM pm_view v WHERE v.opos >=
                (SELECT {key} FROM pm_idx WHERE input_id = ? AND line_no = ?)""", [input_id, line_no]).fetchone()
        return row[0] if row and row[0] is not None else max(self.state.count - 1, 0)

    def first_where(self, column: str, value) -> int | None:
        """The first view position whose ``rank`` equals, or whose ``node`` matches (a glob),
        ``value``; None when no line of the view does."""
        test = {"rank": "rank = ?", "node": "node GLOB ?"}[column]
        with self.lock:
            row = self.cur.execute(f"SELECT min(vpos) FROM pm_view WHERE {test}", [value]).fetchone()
        return row[0] if row else None

    def first_at(self, when: str) -> tuple[int | None, str]:
        """The first view position at or after a time: ``09:21``, ``09:21:30`` (on the first day
        of the run that reaches it) or ``2026-07-24 09:21``. Returns (position, the time used)."""
        with self.lock:
            lo, hi = self.cur.execute("SELECT min(t), max(t) FROM pm_view").fetchone()
            if lo is None:
                return None, "no line of this view has a time"
            target = time_target(when, lo, hi)
            row = self.cur.execute("SELECT min(vpos) FROM pm_view WHERE t >= ?", [target]).fetchone()
        return (row[0] if row else None), str(target)

    def has_line(self, input_id: int, line_no: int) -> bool:
        with self.lock:
            return self.cur.execute("SELECT count(*) FROM lines WHERE input_id = ? AND line_no = ?",
                                    [input_id, line_no]).fetchone()[0] > 0

    def row(self, pos: int) -> LogRow | None:
        """The line at view position ``pos``; None while a heavy step holds the cursor."""
        if not 0 <= pos < self.state.count:
            return None
        page = self._page(pos // PAGE)
        return None if page is None or pos % PAGE >= len(page) else page[pos % PAGE]

    def path_of(self, input_id: int) -> str:
        return self._paths.get(input_id, "?")

    def input_of(self, path: str) -> int | None:
        """An input by its path, or by a unique tail of it (``rank3.log``)."""
        for input_id, p in self._paths.items():
            if p == path:
                return input_id
        tails = [i for i, p in self._paths.items() if p.endswith("/" + path.lstrip("/"))]
        return tails[0] if len(tails) == 1 else None

    def _page(self, number: int) -> list[LogRow] | None:
        # The UI thread reads the page cache without the lock while apply() runs in a worker;
        # apply() swaps in a new cache rather than clearing this one, so a reference taken
        # here stays whole (a clear between `in` and `[]` was a KeyError).
        pages = self._pages
        page = pages.get(number)
        if page is not None:
            pages.move_to_end(number)
            return page
        if not self.lock.acquire(blocking=False):
            return None
        try:
            pages = self._pages  # the cache of the view this page is fetched from
            page = self._fetch(number * PAGE, number * PAGE + PAGE - 1)
        finally:
            self.lock.release()
        pages[number] = page
        while len(pages) > MAX_PAGES:
            pages.popitem(last=False)
        return page

    def _fetch(self, first: int, last: int) -> list[LogRow]:
        view = self.cur.execute("""SELECT vpos, rid, input_id, line_no, rank, node, level, attempt, readback
            FROM pm_view WHERE vpos BETWEEN ? AND ? ORDER BY vpos""", [first, last]).fetchall()
        if not view:
            return []
        # Literal line numbers per input let DuckDB skip row groups (a parameter list would not).
        wanted: dict[int, list[int]] = {}
        for r in view:
            wanted.setdefault(r[2], []).append(r[3])
        where = " OR ".join(f"(input_id = {int(i)} AND line_no IN ({','.join(str(int(n)) for n in numbers)}))"
                            for i, numbers in wanted.items())
        stored = {rid: (text, offset, length, prefix) for rid, text, offset, length, prefix in self.cur.execute(
            f'SELECT {RID}, text, "offset", length, prefix FROM lines WHERE {where}').fetchall()}
        back = dict(self._readback.many([(r[1], r[2], stored[r[1]][1], stored[r[1]][2], stored[r[1]][3])
                                         for r in view if r[8]]))
        return [LogRow(pos, input_id, line_no, rank, node, level, attempt, self.path_of(input_id),
                       back[rid] if readback else stored[rid][0])
                for pos, rid, input_id, line_no, rank, node, level, attempt, readback in view]


def time_target(when: str, lo: datetime, hi: datetime) -> datetime:
    """``when`` as a datetime within the run's days: a bare time of day is taken on the first day
    (from the run's first) on which it is not before the run's first line."""
    when = when.strip().replace("T", " ")
    try:
        return datetime.fromisoformat(when)
    except ValueError:
        pass
    parts = when.split(":")
    if not 2 <= len(parts) <= 3 or not all(p.replace(".", "", 1).isdigit() for p in parts):
        raise ValueError(f"not a time: {when!r} (09:21, 09:21:30 or 2026-07-24 09:21)")
    h, m, sec = int(parts[0]), int(parts[1]), float(parts[2]) if len(parts) == 3 else 0.0
    day = lo.replace(hour=0, minute=0, second=0, microsecond=0)
    while day <= hi:
        at = day + timedelta(hours=h, minutes=m, seconds=sec)
        if at >= lo:
            return at
        day += timedelta(days=1)
    return lo.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(hours=h, minutes=m, seconds=sec)


def source_label(row: LogRow, width: int = 9) -> str:
    """A short source for the gutter: ``r12``, else the node, else the file name."""
    if row.rank is not None:
        label = f"r{row.rank}"
    elif row.node:
        label = row.node
    else:  # a file's stem, cut in the middle (slurm-4242, py-spy-413928 differ at the end)
        label = Path(row.path.split("!/")[-1]).stem
        head = (width - 1) // 2
        return label if len(label) <= width else label[:head] + "…" + label[-(width - 1 - head):]
    return label if len(label) <= width else label[:width - 1] + "…"


def display_text(text: str) -> str:
    """Tabs expanded, cut at MAX_CHARS (control characters are made visible by tui.text)."""
    text = text.expandtabs(8) if "\t" in text else text
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS - 1] + "…"
