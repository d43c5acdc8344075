"""The SQL screen: a query box over the store, a results table, the store's tables and example
queries in a sidebar (like harlequin, or lnav's ``;`` prompt).

The first half of this module needs no Textual: which statements may run (only reads: the store
is never modified from here, even when the session holds a writable in-memory store), running
one on a cursor with a row cap, the table catalogue, the status line and a small SQL highlighter.
The screen (second half) runs each query in a worker thread on its own cursor; a new query
interrupts the one still running.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

import duckdb
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import DataTable, Static, TextArea, Tree
from textual.widgets._tree import TOGGLE_STYLE
from textual.worker import get_current_worker

from postmortem.analyzer import store
from postmortem.tui.screens.base import BaseScreen, Table
from postmortem.tui.text import cell, plain

MAX_ROWS = 10_000  # rows fetched into the table; "first N of M" says when the query has more
MAX_CELLS = 60_000  # ... and fewer rows when they are wide: 2,857 rows of `SELECT * FROM lines`
CELL_LIMIT = 120  # characters per cell before "…" (a log line stays readable, columns stay narrow)
# DataTable measures every cell it is given (~15 µs each): rows go in by chunks of about this many
# cells, one chunk per refresh, so 10,000 rows of 20 columns never freeze the screen for seconds.
CHUNK_CELLS = 4_000
CLOCK = time.perf_counter  # what times a query (the snapshot tests fix it)

# (title, SQL): the questions asked of every failed run (titles fit the sidebar at 80 columns). Each names only columns the store
# usually has; the sidebar dims those this store cannot answer (a sample without timeouts has
# no timeout columns in ``collectives``).
EXAMPLES: list[tuple[str, str]] = [
    ("Findings",
     "SELECT severity, code, title, ranks, nodes\nFROM findings\n"
     "ORDER BY CASE severity WHEN 'error' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END, code"),
    ("Last line by rank",
     "SELECT l.rank, l.node, i.path, l.line_no, l.text\nFROM lines l JOIN inputs i USING (input_id)\n"
     "WHERE l.rank IS NOT NULL AND i.kind = 'log' AND l.kind IS DISTINCT FROM 'blank'\n"
     "QUALIFY row_number() OVER (PARTITION BY l.rank ORDER BY l.input_id DESC, l.line_no DESC) = 1\n"
     "ORDER BY l.rank"),
    ("Timeouts",
     "SELECT rank, node, ts, kind, seq, op, timeout_ms, ran_for_ms, input_id, line_no\n"
     "FROM collectives WHERE kind LIKE '%timeout%'\nORDER BY ts, rank"),
    ("Unparsed by input",
     "SELECT path, kind, lines, parsed_lines, unparsed_lines\nFROM inputs WHERE unparsed_lines > 0\n"
     "ORDER BY unparsed_lines DESC"),
    ("Unparsed samples",
     "SELECT i.path, l.line_no, l.text\nFROM lines l JOIN inputs i USING (input_id)\n"
     "WHERE l.kind IS NULL\nQUALIFY row_number() OVER (PARTITION BY l.input_id ORDER BY l.line_no) = 1\n"
     "ORDER BY i.path"),
    ("Errors per rank",
     "SELECT rank, level, kind, count(*) AS n, min(ts) AS first\nFROM events\n"
     "WHERE lower(level) IN ('e', 'error', 'w', 'warning', 'warn')\nGROUP BY ALL ORDER BY rank, n DESC"),
    ("Node events (Xid)",
     "SELECT host, ts, kind, code, device, meaning, message\nFROM node_events ORDER BY ts"),
    ("Last iteration",
     "SELECT rank, max(iteration) AS last, max(ts) AS at\nFROM iterations GROUP BY rank ORDER BY rank"),
    ("Peak memory",
     "SELECT rank, max(coalesce(max_allocated_mib, allocated_mib)) AS peak_mib\n"
     "FROM memory GROUP BY rank ORDER BY peak_mib DESC"),
    ("Env differences",
     "SELECT key, n_nodes, n_values, \"values\"\nFROM env_diff WHERE class = 'must_match' AND differs"),
    ("Hops off NVLink",
     "SELECT comm_key, channel, src_rank, dst_rank, src_host, dst_host, transport, tier\n"
     "FROM nccl_hops WHERE tier_order > 0 ORDER BY tier_order DESC, comm_key, channel"),
]

READ_ONLY_HINT = "only SELECT, FROM, WITH, VALUES, DESCRIBE, SHOW, SUMMARIZE and EXPLAIN run here"


class RefusedStatement(Exception):
    """A statement that could modify the store (or the session): refused before it runs."""


@dataclass
class QueryResult:
    sql: str
    columns: list[str] = field(default_factory=list)
    rows: list[tuple] = field(default_factory=list)
    total: int | None = None  # rows the query returns, when more than ``rows``; -1: not counted
    seconds: float = 0.0
    error: str | None = None


def read_statements(sql: str) -> list[str]:
    """The statements of ``sql``, each a read; raises ``RefusedStatement`` naming the first that
    is not (DROP, DELETE, COPY, SET, ATTACH, COMMIT, PRAGMA, ...) and duckdb's parser error for
    bad syntax. EXPLAIN ANALYZE runs its statement, so EXPLAIN passes only around a read."""
    statements = duckdb.extract_statements(sql)
    if not statements:
        raise RefusedStatement("nothing to run: type a query")
    for statement in statements:
        if not _is_read(statement):
            verb = (statement.query.split() or ["?"])[0].upper()
            raise RefusedStatement(f"the store is read-only here: {verb} is not run ({READ_ONLY_HINT})")
    return [statement.query.strip().rstrip(";") for statement in statements]


def _is_read(statement) -> bool:
    if statement.type == duckdb.StatementType.SELECT:
        return True
    if statement.type == duckdb.StatementType.EXPLAIN:
        inner = re.sub(r"^\s*explain\s+(analy[sz]e\s+)?", "", statement.query, flags=re.IGNORECASE)
        inner_statements = duckdb.extract_statements(inner) if inner != statement.query else []
        return len(inner_statements) == 1 and inner_statements[0].type == duckdb.StatementType.SELECT
    return False


def run_query(cursor: duckdb.DuckDBPyConnection, sql: str, limit: int = MAX_ROWS,
              max_cells: int = MAX_CELLS, clock=None) -> QueryResult:
    """Run ``sql`` on ``cursor`` (reads only, inside a transaction that is rolled back, so even a
    statement the check let through leaves the store as it was); fetch at most ``limit`` rows
    (and ``max_cells`` cells) and count the rest when there are more."""
    result = QueryResult(sql)
    clock = clock or CLOCK
    start = clock()
    try:
        statements = read_statements(sql)
        cursor.execute("BEGIN TRANSACTION")
        try:
            for statement in statements:
                cursor.execute(statement)
            result.columns = [d[0] for d in cursor.description or []]
            limit = max(1, min(limit, max_cells // max(1, len(result.columns))))
            rows = cursor.fetchmany(limit + 1)
            if len(rows) > limit:
                rows = rows[:limit]
                result.total = _count(cursor, statements[-1])
            result.rows = rows
        finally:
            _rollback(cursor)
    except (RefusedStatement, duckdb.Error) as exc:
        result.error = one_line_error(exc)
        result.columns, result.rows = [], []
    result.seconds = clock() - start
    return result


def _count(cursor: duckdb.DuckDBPyConnection, statement: str) -> int:
    """How many rows ``statement`` returns (-1 when it cannot be counted, e.g. SHOW)."""
    try:
        return int(cursor.execute(f"SELECT count(*) FROM (\n{statement}\n)").fetchone()[0])
    except duckdb.Error:
        return -1


def _rollback(cursor: duckdb.DuckDBPyConnection) -> None:
    try:
        cursor.execute("ROLLBACK")
    except duckdb.Error:
        pass  # nothing open (an interrupted or failed statement may have ended it)


def one_line_error(exc: Exception) -> str:
    """DuckDB's message without the LINE/caret block: the lines before the first blank one."""
    text = str(exc).strip()
    head = text.split("\n\n", 1)[0]
    return " ".join(part.strip() for part in head.splitlines() if part.strip()) or type(exc).__name__


def elapsed_text(seconds: float) -> str:
    if seconds < 0.001:
        return "< 1 ms"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.2f} s"


def status_text(result: QueryResult) -> Text:
    """The line under the query box: rows, columns and time, or the error."""
    if result.error:
        return plain("✗ " + result.error, "bold red")
    shown = len(result.rows)
    if result.total is None:
        rows = "no rows" if shown == 0 else f"{shown:,} row{'s' if shown != 1 else ''}"
    elif result.total < 0:
        rows = f"first {shown:,} rows (more not counted)"
    else:
        rows = f"first {shown:,} of {result.total:,} rows"
    columns = len(result.columns)
    return plain(f"{rows} · {columns} column{'s' if columns != 1 else ''} · {elapsed_text(result.seconds)}")


@dataclass
class TableInfo:
    name: str
    rows: int
    columns: list[tuple[str, str]]  # (name, type)


def table_catalogue(con: duckdb.DuckDBPyConnection) -> list[TableInfo]:
    """The store's tables as users see them (``store.tables``) with row counts and columns
    (catalogue queries, a few ms; a view, a COLL-traced run's collectives and nccl_lines, is
    counted)."""
    where = "WHERE database_name = current_database() AND schema_name = 'main' AND NOT internal"
    sizes = dict(con.execute(f"SELECT table_name, estimated_size FROM duckdb_tables() {where}").fetchall())
    counts = [(name, sizes[name] if name in sizes else con.execute(f'SELECT count(*) FROM "{name}"').fetchall()[0][0])
              for name in store.tables(con)]
    columns: dict[str, list[tuple[str, str]]] = {}
    for table, column, dtype in con.execute(
            f"SELECT table_name, column_name, data_type FROM duckdb_columns() {where} "
            "ORDER BY table_name, column_index").fetchall():
        columns.setdefault(table, []).append((column, dtype))
    return [TableInfo(name, int(rows or 0), columns.get(name, [])) for name, rows in counts]


def example_answers(con: duckdb.DuckDBPyConnection, sql: str) -> bool:
    """Whether this store has the tables and columns ``sql`` names (binds it, runs nothing)."""
    try:
        con.execute("EXPLAIN " + sql)
        return True
    except duckdb.Error:
        return False


def select_all(table: str) -> str:
    return f'SELECT * FROM "{table}" LIMIT 100'


def value_cell(value: object) -> Text:
    """A result value as inert table text: NULL dimmed, numbers right-aligned."""
    if value is None:
        return cell("NULL", "dim italic")
    text = cell(value, limit=CELL_LIMIT)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        text.justify = "right"
    return text


SQL_KEYWORDS = frozenset("""
    select from where group by order having limit offset qualify window over partition as and or not
    in is null like ilike between case when then else end join left right inner outer full cross on
    using distinct all union intersect except with desc asc nulls first last describe show summarize
    explain analyze values true false exists any cast filter pivot unpivot asof positional lateral
    recursive semi anti natural
""".split())
_TOKEN = re.compile(r"(?P<comment>--.*$)|(?P<string>'(?:[^']|'')*'?)|(?P<ident>\"(?:[^\"]|\"\")*\"?)"
                    r"|(?P<word>\b[A-Za-z_][A-Za-z_0-9]*\b)")


def sql_highlights(line: str) -> list[tuple[int, int, str]]:
    """(start byte, end byte, highlight name) of one line's keywords, strings and comments; the
    TextArea's theme styles these names (no tree-sitter needed)."""
    out = []
    for match in _TOKEN.finditer(line):
        kind = match.lastgroup
        if kind == "word":
            if match.group().lower() not in SQL_KEYWORDS:
                continue
            kind = "keyword"
        elif kind == "ident":
            continue
        start = len(line[:match.start()].encode())
        out.append((start, start + len(match.group().encode()), kind))
    return out


# ---------------------------------------------------------------------------------------------
# The screen


class QueryBox(TextArea):
    """The SQL box: keywords, strings and comments highlighted; up on the first line and down on
    the last one step through the session's query history."""

    class HistoryStep(Message):
        """Asks the screen for the previous (-1) or next (+1) query of the history."""

        def __init__(self, step: int):
            super().__init__()
            self.step = step

    def _build_highlight_map(self) -> None:
        # TextArea highlights through tree-sitter, which is not installed: fill its per-line
        # highlight map from a small tokenizer instead. A failure costs colour, never the box.
        super()._build_highlight_map()
        try:
            for row, line in enumerate(self.document.lines):
                self._highlights[row].extend(sql_highlights(line))
        except Exception:  # noqa: BLE001 -- private TextArea internals may change
            self._highlights.clear()

    def action_cursor_up(self, select: bool = False) -> None:
        if not select and self.cursor_location[0] == 0:
            self.post_message(self.HistoryStep(-1))
        else:
            super().action_cursor_up(select)

    def action_cursor_down(self, select: bool = False) -> None:
        if not select and self.cursor_location[0] == self.document.line_count - 1:
            self.post_message(self.HistoryStep(+1))
        else:
            super().action_cursor_down(select)


class QueryHistory:
    """The queries run in this session, newest last; stepping past the newest brings back what
    was being typed (the draft)."""

    def __init__(self) -> None:
        self.queries: list[str] = []
        self.position = 0  # == len(queries): at the draft
        self.draft = ""

    def add(self, sql: str) -> None:
        if sql.strip() and (not self.queries or self.queries[-1] != sql):
            self.queries.append(sql)
        self.position = len(self.queries)

    def step(self, step: int, current: str) -> str | None:
        """The query ``step`` away from the shown one, or None at either end. The box keeps the
        query just run, so the first step back skips entries equal to what is shown."""
        if self.position == len(self.queries):
            self.draft = current
        target = self.position + step
        while 0 <= target < len(self.queries) and self.queries[target] == current:
            target += step
        if not 0 <= target <= len(self.queries):
            return None
        self.position = target
        return self.draft if target == len(self.queries) else self.queries[target]


def fit_label(name: str, extra: str, width: int) -> tuple[str, str]:
    """``name`` and its ``extra`` (a row count, a column's type) in ``width`` cells (0: any): the
    name cut with an ellipsis first, so the count stays whole; when even the count does not fit,
    both cut, the ellipsis at the end. Never cut silently."""
    if width <= 0 or len(name) + len(extra) <= width:
        return name, extra
    if len(extra) + 2 <= width:
        return name[:width - len(extra) - 1] + "…", extra
    return (name + extra)[:max(width - 1, 0)] + "…", ""


class SideTree(Tree):
    """The sidebar: labels of a name and a dim extra (row count, column type) fitted to the
    sidebar's width with an ellipsis (``fit_label``), where a Tree would crop them at its edge."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.parts: dict[int, tuple[str, str, str]] = {}   # node id -> (name, extra, name's style)

    def add_fitted(self, parent, name: str, extra: str, style: str, data, leaf: bool = True):
        label = plain(name, style)   # the name's style is the label's own (a dimmed example)
        label.append_text(plain(extra, "dim"))
        node = parent.add_leaf(label, data=data) if leaf else parent.add(label, data=data)
        self.parts[node.id] = (name, extra, style)
        return node

    def render_label(self, node, base_style, style) -> Text:
        """Tree.render_label (the toggle icon, then the label) on the fitted label; the node's own
        label is left whole (setting it here would repaint the tree again)."""
        parts = self.parts.get(node.id)
        width = self.scrollable_content_region.width
        if parts is None or width <= 0:
            return super().render_label(node, base_style, style)
        icon = (self.ICON_NODE_EXPANDED if node.is_expanded else self.ICON_NODE) if node.allow_expand else ""
        name, extra, name_style = parts
        name, extra = fit_label(name, extra, width - self._guides(node) - len(icon))
        label = Text.assemble(plain(name, name_style), plain(extra, "dim"))
        label.stylize(style)
        return Text.assemble((icon, base_style + TOGGLE_STYLE), label)

    def _guides(self, node) -> int:
        """The columns of tree guides left of ``node``'s label (the root is not shown)."""
        depth, parent = 0, node.parent
        while parent is not None and parent is not self.root:
            depth, parent = depth + 1, parent.parent
        return depth * self.guide_depth


class SqlScreen(BaseScreen):
    TITLE_NAME = "SQL"
    HELP = (
        "A query box over the run's store (DuckDB SQL) and its results. The store is never "
        "modified from here: only reads run (SELECT, FROM, WITH, VALUES, DESCRIBE, SHOW, SUMMARIZE, "
        "EXPLAIN), each inside a transaction that is rolled back. **ctrl+r** (or ctrl+j) runs the query "
        "(ctrl+enter reaches the app only in terminals that report it: in tmux it arrives as a "
        "plain enter, which adds a line); a new query interrupts the one still running. At most "
        f"{MAX_ROWS:,} rows are fetched, fewer when they are wide ({MAX_CELLS:,} cells; "
        "\"first N of M rows\" says when there are more). Digits and "
        "letters type into the box: **escape** leaves it (then 1-7, q and ? work again), **e** "
        "goes back. Up on the first line / down on the last (or ctrl+up/down) step through the "
        "queries run in this session. The sidebar lists example queries and the store's tables "
        "with their row counts: **enter** on a table fills the box with `SELECT * FROM` it, space "
        "unfolds its columns, enter on a column inserts its name. Enter on a result row that has "
        "`input_id` (or `path`) and `line_no` opens that line in the Logs screen."
    )
    BINDINGS = [
        Binding("ctrl+r,ctrl+enter,ctrl+j", "run_query", "Run",
                tooltip="Run the query (ctrl+enter only where the terminal reports it: not in tmux)"),
        Binding("escape", "leave_box", "Results",
                tooltip="Leave the query box for the results (then 1-7, q and ? work again)"),
        Binding("e", "edit", "Edit", tooltip="Back to the query box"),
        Binding("ctrl+up", "history(-1)", "Previous query in the history", show=False),
        Binding("ctrl+down", "history(1)", "Next query in the history", show=False),
        Binding("t", "focus_sidebar", "Go to the tables and examples", show=False),
        Binding("f2", "toggle_sidebar", "Show/hide the tables and examples", show=False),
    ]
    DEFAULT_CSS = """
    SqlScreen #sql-side { width: 30%; min-width: 22; max-width: 36; border-right: vkey $primary 30%; }
    SqlScreen #sql-side.hidden { display: none; }
    SqlScreen #sql-main { width: 1fr; }
    SqlScreen QueryBox { height: 8; }
    SqlScreen #sql-status { height: 1; padding: 0 1; color: $text-muted; }
    SqlScreen #sql-status.error { color: $error; }
    SqlScreen #sql-results { height: 1fr; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.history = QueryHistory()
        self._query_cursor: duckdb.DuckDBPyConnection | None = None
        self.last_result: QueryResult | None = None
        self.filling = False  # rows of the last result still being added to the table
        self._fill_generation = 0

    def compose_body(self) -> ComposeResult:
        with Horizontal():
            yield SideTree(plain("store"), id="sql-side")
            with Vertical(id="sql-main"):
                yield QueryBox("", soft_wrap=True, tab_behavior="focus", id="sql-box",
                               placeholder="SELECT … (ctrl+r runs; escape leaves the box)")
                yield Static(plain("ctrl+r runs the query; enter on a table in the sidebar fills the box"),
                             id="sql-status")
                yield Table(id="sql-results", zebra_stripes=True, cursor_type="row")

    def on_mount(self) -> None:
        self._fill_sidebar()
        self.query_one(QueryBox).focus()

    def on_resize(self) -> None:
        # 3 lines of query at 24 rows, 6 at 40: the results keep most of a small terminal.
        self.query_one(QueryBox).styles.height = max(5, min(10, self.size.height // 5))

    # -- sidebar ------------------------------------------------------------------------------

    def _fill_sidebar(self) -> None:
        tree = self.query_one(SideTree)
        tree.show_root = False
        tree.auto_expand = False
        con = self.session.run.con
        examples = tree.root.add(plain("Examples", "bold"), expand=True)
        for title, sql in EXAMPLES:
            tree.add_fitted(examples, title, "", "" if example_answers(con, sql) else "dim", ("example", sql))
        tables = tree.root.add(plain("Tables", "bold"), expand=True)
        for info in table_catalogue(con):
            node = tree.add_fitted(tables, info.name, f" {info.rows:,}", "", ("table", info.name), leaf=False)
            for column, dtype in info.columns:
                tree.add_fitted(node, column, " " + dtype.lower(), "", ("column", column))

    @on(Tree.NodeSelected, "#sql-side")
    def _picked(self, event: Tree.NodeSelected) -> None:
        kind, value = event.node.data or (None, None)
        box = self.query_one(QueryBox)
        if kind == "example":
            self.set_query(value)
        elif kind == "table":
            self.set_query(select_all(value))
        elif kind == "column":
            box.insert(value if re.fullmatch(r"[a-z_][a-z0-9_]*", value) else f'"{value}"')
            box.focus()
        else:
            event.node.toggle()

    def set_query(self, sql: str, focus: bool = True) -> None:
        box = self.query_one(QueryBox)
        box.load_text(sql)
        box.move_cursor(box.document.end)
        if focus:
            box.focus()

    # -- running ------------------------------------------------------------------------------

    def action_run_query(self) -> None:
        sql = self.query_one(QueryBox).text
        if not sql.strip():
            self._show_status(plain("type a query first (or pick a table or an example in the sidebar)"))
            return
        self.history.add(sql)
        if self._query_cursor is not None:
            try:
                self._query_cursor.interrupt()  # the old query stops; its worker's result is dropped
            except duckdb.Error:
                pass
        self._fill_generation += 1  # stop adding the previous result's rows
        self._query_cursor = cursor = self.session.cursor()
        self._show_status(plain("running…"))
        self._run_in_thread(cursor, sql)

    @work(thread=True, exclusive=True, group="sql")
    def _run_in_thread(self, cursor: duckdb.DuckDBPyConnection, sql: str) -> None:
        worker = get_current_worker()
        # No query of the user's runs while the cache entry of a run just analysed is being
        # written (its file is attached to the store until then: tui.session.analyze_paths).
        self.session.run.cache_written()
        try:
            result = run_query(cursor, sql)
        finally:
            cursor.close()
        cells = [[value_cell(v) for v in row] for row in result.rows]  # off the UI thread
        if not worker.is_cancelled:
            self.app.call_from_thread(self._show_result, cursor, result, cells)

    def _show_result(self, cursor: duckdb.DuckDBPyConnection, result: QueryResult,
                     cells: list[list[Text]]) -> None:
        if cursor is not self._query_cursor:
            return  # a newer query replaced this one
        self._query_cursor = None
        self.last_result = result
        table = self.query_one("#sql-results", DataTable)
        table.clear(columns=True)
        for name in result.columns:
            table.add_column(cell(name, "bold"))
        self._show_status(status_text(result), error=bool(result.error))
        self._fill_generation += 1
        self._add_rows(cells, 0, self._fill_generation)

    def _add_rows(self, cells: list[list[Text]], start: int, generation: int) -> None:
        """Add one chunk of rows, then the next after the screen has been painted."""
        if generation != self._fill_generation:
            return  # another result (or query) came since
        size = max(50, CHUNK_CELLS // max(1, len(cells[0]) if cells else 1))
        self.query_one("#sql-results", DataTable).add_rows(cells[start:start + size])
        self.filling = start + size < len(cells)
        if self.filling:
            self.call_after_refresh(self._add_rows, cells, start + size, generation)

    def _show_status(self, text: Text, error: bool = False) -> None:
        status = self.query_one("#sql-status", Static)
        status.update(text)
        status.set_class(error, "error")

    @on(DataTable.RowSelected, "#sql-results")
    def _open_row_in_logs(self, event: DataTable.RowSelected) -> None:
        """A result row with input_id (or path) and line_no opens at that line in the Logs screen."""
        result = self.last_result
        if result is None or event.cursor_row >= len(result.rows):
            return
        row = dict(zip(result.columns, result.rows[event.cursor_row]))
        path, line_no = row.get("path"), row.get("line_no")
        if path is None and row.get("input_id") is not None:
            found = self.session.frame("SELECT path FROM inputs WHERE input_id = ?", [row["input_id"]])
            path = found["path"][0] if len(found) else None
        if isinstance(path, str) and isinstance(line_no, int):
            self.app.show_line(path, line_no)  # type: ignore[attr-defined]
        else:
            self.notify("this row has no input_id (or path) and line_no to open", timeout=3)

    # -- keys ---------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        box_focused = isinstance(self.focused, QueryBox)
        if action == "leave_box":
            return box_focused
        if action == "edit":
            return not box_focused
        return True

    def action_leave_box(self) -> None:
        self.query_one("#sql-results", DataTable).focus()

    def action_edit(self) -> None:
        self.query_one(QueryBox).focus()

    def action_focus_sidebar(self) -> None:
        side = self.query_one("#sql-side", Tree)
        side.remove_class("hidden")
        side.focus()

    def action_toggle_sidebar(self) -> None:
        side = self.query_one("#sql-side", Tree)
        side.toggle_class("hidden")
        if side.has_class("hidden") and side.has_focus:
            self.query_one(QueryBox).focus()

    def action_history(self, step: int) -> None:
        box = self.query_one(QueryBox)
        sql = self.history.step(step, box.text)
        if sql is not None:
            self.set_query(sql)

    @on(QueryBox.HistoryStep)
    def _history_from_box(self, event: QueryBox.HistoryStep) -> None:
        event.stop()
        self.action_history(event.step)
