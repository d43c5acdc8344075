"""The Environment screen: variables by node, differences highlighted, must-match variables first.

The matrix has a row per variable and a column per node; below it, the selected variable's
value on each node and the line that shows it (NCCL's own ``set by environment`` echo, the
node's env dump or its nccl.conf). Values, classes and flagged differences come from
tui.env_memory_data (env_model's tables and the E001 rule's comparison).
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Input, Static

from postmortem.rules.config.config_model import ECHO, UNSET
from postmortem.views.env_memory_data import CLASS_LABEL, CLASS_MEANING, EnvVar, EnvView, env_view, matches
from postmortem.tui.screens.base import BaseScreen, Table
from postmortem.tui.text import cell, join, plain

CELL_LIMITS = (8, 24)    # characters of a value in the matrix, fitted to the width (the detail shows more)
SOURCE_LABEL = {"NCCL INFO": "NCCL echo", "env": "env dump", "nccl.conf": "nccl.conf"}
MUST_STYLE, ODD_STYLE = "bold red", "bold dark_orange"
NARROW_NAME = 24         # below 100 columns names are cut here (the line above the detail has the whole name)


class EnvironmentScreen(BaseScreen):
    TITLE_NAME = "Environment"
    HELP = """Environment variables by node: a row per variable, a column per node. Must-match
variables that differ between nodes (what rule E001/E002 reports) come first, in red, with the
odd nodes' values marked; other differences are orange; per-node and per-rank variables
(interfaces, host names, ranks) differ by design and are never flagged. A node's value is
NCCL's own `set by environment` line where NCCL printed it, else the node's env dump.
The table below lists the selected variable on each node and the line that shows it. Enter on
a variable moves there (Tab moves back); Enter on a line, or `e`, opens it in the Logs screen
(`e` on a variable opens the odd node's line)."""
    BINDINGS = [
        Binding("slash", "filter", "Filter", tooltip="Filter variables by name (substring or regex)"),
        Binding("d", "only_differences", "Diffs", tooltip="Show only variables that differ between nodes"),
        Binding("e", "evidence", "Evidence", tooltip="Open the selected line in the Logs screen"),
        Binding("escape", "clear_filter", "Clear the filter", show=False),
    ]
    DEFAULT_CSS = """
    EnvironmentScreen #env-summary { height: auto; max-height: 2; padding: 0 1; }
    EnvironmentScreen #env-filter { display: none; }
    EnvironmentScreen.filtering #env-filter { display: block; }
    EnvironmentScreen #env-matrix { height: 1fr; }
    EnvironmentScreen #env-detail-title { height: auto; max-height: 2; padding: 0 1; background: $boost; }
    EnvironmentScreen #env-detail { height: 40%; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.view: EnvView | None = None
        self.shown: list[EnvVar] = []
        self.only_differences = False
        self.pattern = ""
        self._evidence: list[tuple[str | None, int | None]] = []   # per detail row: (path, line)
        self._evidence_nodes: list[str] = []
        self._detail_odd: set[str] = set()

    def compose_body(self) -> ComposeResult:
        yield Static(plain("Reading the environment…"), id="env-summary")
        yield Input(placeholder="variable name: substring or regex (Enter: keep, Esc: clear)", id="env-filter",
                    compact=True)
        yield Table(id="env-matrix", cursor_type="row", fixed_columns=1, zebra_stripes=True)
        yield Static(plain(""), id="env-detail-title")
        yield Table(id="env-detail", cursor_type="row")

    def on_mount(self) -> None:
        self.load_view(env_view, self._loaded)

    def _loaded(self, view: EnvView) -> None:
        self.view = view
        detail = self.query_one("#env-detail", DataTable)
        detail.add_columns(plain("node"), plain("from"), plain("line"), plain("value"))
        self._refill()
        self.query_one("#env-matrix", DataTable).focus()

    # -- the matrix ------------------------------------------------------------------------------

    def _refill(self) -> None:
        """Rebuild the matrix for the current filter and differences switch."""
        assert self.view is not None
        table = self.query_one("#env-matrix", DataTable)
        selected = self._selected()
        table.clear(columns=True)
        table.add_column(plain("variable"), key="key")
        if self._wide:
            table.add_column(plain("class"), key="class")
        for node in self.view.nodes:
            table.add_column(plain(node), key=f"node:{node}")
        self.shown = [v for v in self.view.variables
                      if (v.differs or not self.only_differences) and matches(v, self.pattern)]
        limit = self._cell_limit()
        for i, var in enumerate(self.shown):
            table.add_row(*self._row(var, limit), key=str(i))
        self._summarise()
        keys = [v.key for v in self.shown]
        if selected and selected.key in keys:
            table.move_cursor(row=keys.index(selected.key))
        self._show_detail(self._selected() or (self.shown[0] if self.shown else None))

    def _selected(self) -> EnvVar | None:
        table = self.query_one("#env-matrix", DataTable)
        if table.row_count and 0 <= table.cursor_row < len(self.shown):
            return self.shown[table.cursor_row]
        return None

    def on_resize(self) -> None:
        if self.view is not None:
            self._refill()    # the value cut and the class column follow the width

    @property
    def _wide(self) -> bool:
        """Room for the class column (at 80 columns the detail line names the class instead)."""
        return (self.size.width or 120) >= 100

    def _cell_limit(self) -> int:
        """Values cut so that the node columns fit beside the names where they can."""
        assert self.view is not None
        name = min(max((len(v.key) for v in self.shown), default=8), 999 if self._wide else NARROW_NAME) + 4
        room = (self.size.width or 120) - name - 10
        each = room // max(1, len(self.view.nodes)) - 2
        header = max((len(n) for n in self.view.nodes), default=0)   # the column is this wide anyway
        return max(CELL_LIMITS[0], header, min(CELL_LIMITS[1], each))

    def _row(self, var: EnvVar, limit: int) -> list[Text]:
        key = var.key if self._wide or len(var.key) <= NARROW_NAME else var.key[:NARROW_NAME - 1] + "…"
        if var.must_differ:
            name = join(("✗ ", MUST_STYLE), (key, MUST_STYLE))
        elif var.differs and var.klass not in ("per_node", "per_rank"):
            name = join(("≠ ", ODD_STYLE), (key, ""))
        else:
            name = join(("  ", ""), (key, "dim" if var.klass in ("per_node", "per_rank") else ""))
        cells = [name] + ([cell(CLASS_LABEL.get(var.klass, var.klass), "dim")] if self._wide else [])
        for node in self.view.nodes:
            cells.append(self._value_cell(var, node, limit))
        return cells

    def _value_cell(self, var: EnvVar, node: str, limit: int) -> Text:
        if node not in var.shown:
            return cell("—", "dim")
        value = var.shown[node]
        style = MUST_STYLE if (node in var.odd and var.must_differ) else ODD_STYLE if node in var.odd else ""
        if value == UNSET:
            return cell("<unset>", style or "dim italic")
        return cell(value, style, limit=limit)

    def _summarise(self) -> None:
        assert self.view is not None
        view = self.view
        if not view.variables:
            self.query_one("#env-summary", Static).update(
                plain("No environment in this run: no env dumps, nccl.conf copies or NCCL 'set by environment' "
                      "lines were found."))
            return
        must = view.must_differ
        parts: list = [(f"{len(view.nodes)} nodes · {len(view.variables)} variables · ", "")]
        if must:
            parts.append((f"{len(must)} must-match variable{'s differ' if len(must) > 1 else ' differs'}: "
                          + ", ".join(v.key for v in must), MUST_STYLE))
        else:
            parts.append(("no must-match variable differs", "green"))
        differing = sum(1 for v in view.variables if v.differs and not v.must_differ
                        and v.klass not in ("per_node", "per_rank"))
        if differing:
            parts.append((f" · {differing} other difference{'s' if differing > 1 else ''}", ODD_STYLE))
        shown = []
        if self.only_differences:
            shown.append("only differences")
        if self.pattern:
            shown.append(f"filter {self.pattern!r}")
        if shown:
            parts.append((f" · showing {len(self.shown)} ({', '.join(shown)})", "italic"))
        self.query_one("#env-summary", Static).update(join(*parts))

    # -- the selected variable on each node ------------------------------------------------------

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "env-matrix" and event.row_key.value is not None:
            index = int(event.row_key.value)
            if 0 <= index < len(self.shown):
                self._show_detail(self.shown[index])

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "env-matrix":
            self.query_one("#env-detail", DataTable).focus()
        else:
            self.action_evidence()

    def _show_detail(self, var: EnvVar | None) -> None:
        detail = self.query_one("#env-detail", DataTable)
        detail.clear()
        self._evidence, self._evidence_nodes = [], []
        self._detail_odd = var.odd if var else set()
        title = self.query_one("#env-detail-title", Static)
        if var is None:
            title.update(plain("No variable matches." if self.view and self.view.variables else ""))
            return
        if var.flagged:
            verdict = (var.flagged, MUST_STYLE if var.must_differ else ODD_STYLE)
        elif var.differs:
            verdict = ("differs between nodes", "dim" if var.klass in ("per_node", "per_rank") else ODD_STYLE)
        else:
            verdict = ("the same on every node", "dim")
        title.update(join((var.key, "bold"), (" · ", "dim"), verdict,
                          (f" · {CLASS_MEANING.get(var.klass, var.klass)}", "dim")))
        by_node: dict[str, list] = {}
        for s in var.sightings:
            by_node.setdefault(s.node, []).append(s)
        for node in self.view.nodes:
            seen = sorted(by_node.get(node, []), key=lambda s: s.basis != ECHO)
            if not seen:
                value = "<unset>" if node in var.shown else "—"
                self._detail_row(detail, var, node, cell(value, "dim italic"), "unset there" if node in var.shown
                                 else "no evidence", None, None)
            for s in seen:
                source = SOURCE_LABEL.get(s.source, s.source)
                if node in var.shown and var.shown[node] != s.value:
                    source += " (NCCL's line wins)"   # a dump from another shell: config_model believes the echo
                self._detail_row(detail, var, node, self._value_cell_of(var, node, s.value), source, s.path, s.line)

    def _value_cell_of(self, var: EnvVar, node: str, value: str) -> Text:
        style = MUST_STYLE if (node in var.odd and var.must_differ) else ODD_STYLE if node in var.odd else ""
        return cell(value, style, limit=400)

    def _detail_row(self, detail: DataTable, var: EnvVar, node: str, value: Text, source: str,
                    path: str | None, line: int | None) -> None:
        where = cell(_tail(f"{path}:{line}", max(24, (self.size.width or 120) - 50)) if path else "", "dim")
        detail.add_row(cell(node, MUST_STYLE if node in var.odd and var.must_differ else ""), cell(source, "dim"),
                       where, value, key=str(len(self._evidence)))
        self._evidence.append((path, line))
        self._evidence_nodes.append(node)

    # -- keys ------------------------------------------------------------------------------------

    def action_filter(self) -> None:
        self.add_class("filtering")
        box = self.query_one("#env-filter", Input)
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "env-filter" and self.view is not None:
            self.pattern = event.value.strip()
            self._refill()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "env-filter":
            self.query_one("#env-matrix", DataTable).focus()
            if not self.pattern:
                self.remove_class("filtering")

    def action_clear_filter(self) -> None:
        box = self.query_one("#env-filter", Input)
        self.remove_class("filtering")
        if box.value:
            box.value = ""          # Input.Changed refills the matrix
        self.query_one("#env-matrix", DataTable).focus()

    def action_only_differences(self) -> None:
        self.only_differences = not self.only_differences
        if self.view is not None:
            self._refill()

    def action_evidence(self) -> None:
        detail = self.query_one("#env-detail", DataTable)
        if not self._evidence or detail.row_count == 0:
            return
        if self.focused is not detail:
            # from the matrix: the odd node's line first (the one that matters), else the first line
            odd = [i for i, node in enumerate(self._evidence_nodes) if node in self._detail_odd]
            lines = [self._evidence[i] for i in odd] + self._evidence
            target = next(((p, n) for p, n in lines if p), None)
        else:
            target = self._evidence[min(detail.cursor_row, len(self._evidence) - 1)]
        if target and target[0] and target[1]:
            self.app.show_line(target[0], int(target[1]))  # type: ignore[attr-defined]


def _tail(text: str, limit: int) -> str:
    """The end of a long path (the file name and line number are what identify it)."""
    return text if len(text) <= limit else "…" + text[-(limit - 1):]
