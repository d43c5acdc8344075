"""The Memory screen: per-rank peaks as bars against the card's capacity, OOMs marked.

A row per rank with memory samples or an OOM: the bar (allocated, reserved beyond it, the
capacity line), the peaks in GiB, the percent of capacity and the marks (CUDA OOM on the rank,
host OOM kill on its node). The data comes from postmortem.views.env_memory_data (the memory rules' peaks,
capacity and OOMs); rows are a DataTable, which draws only the visible rows.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Static

from postmortem.views.env_memory_data import NEAR, MemoryView, RankMemory, gib, memory_view, percent, sort_rows
from postmortem.tui.screens.base import BaseScreen, Table
from postmortem.tui.text import cell, join, plain

OOM_STYLE = "bold red"
MIN_BAR = 10


def bar(row: RankMemory, capacity: float | None, top: float, width: int) -> Text:
    """``███▒▒····│··``: allocated, reserved beyond allocated, the rest up to the scale; ``│`` is
    the capacity line (``┃`` where the bar reaches it)."""
    def cells(value: float | None) -> int:
        return max(0, min(width, round(width * (value or 0.0) / top)))

    alloc, reserved = cells(row.alloc), cells(max(row.alloc or 0.0, row.reserved or 0.0))
    near = capacity is not None and row.peak >= NEAR * capacity
    chars = ["█"] * alloc + ["▒"] * (reserved - alloc) + ["·"] * (width - reserved)
    styles = [("bold red" if near else "dodger_blue2")] * alloc + ["steel_blue1" if not near else "red"] * (reserved - alloc) \
        + ["dim"] * (width - reserved)
    if capacity:
        at = min(width - 1, max(0, round(width * capacity / top) - 1))
        chars[at] = "┃" if at < reserved else "│"
        styles[at] = "bold red"
    out = Text(no_wrap=True)
    for ch, style in zip(chars, styles):
        out.append(ch, style)
    return out


class MemoryScreen(BaseScreen):
    TITLE_NAME = "Memory"
    HELP = """Per-rank memory peaks (max allocated `█`, max reserved beyond it `▒`) against the GPU's
capacity (`│`: from the memory lines, else the GPU model's memory). Peaks at 95% of capacity
or more are red. `CUDA OOM` marks a rank that ran out of GPU memory; `host OOM` the ranks of a
node where the kernel OOM killer struck (`host OOM ✗`: the rank whose process it killed). Ranks
without memory lines and without an OOM are not listed. Enter opens the rank's OOM or peak line
in the Logs screen."""
    BINDINGS = [
        Binding("s", "sort", "Sort", tooltip="Sort by rank / by peak"),
        Binding("o", "next_oom", "OOM", tooltip="Jump to the next rank with an OOM"),
        Binding("e", "evidence", "Evidence", tooltip="Open the rank's OOM or peak line in the Logs screen"),
    ]
    DEFAULT_CSS = """
    MemoryScreen #mem-summary { height: auto; max-height: 3; padding: 0 1; }
    MemoryScreen #mem-table { height: 1fr; }
    /* a neutral cursor: the bars keep their own colours on the selected row */
    MemoryScreen #mem-table > .datatable--cursor { background: $foreground 20%; }
    MemoryScreen #mem-detail { height: auto; max-height: 3; padding: 0 1; background: $boost; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.view: MemoryView | None = None
        self.by_peak = False
        self.rows: list[RankMemory] = []
        self._bar_width = 0

    def compose_body(self) -> ComposeResult:
        yield Static(plain("Reading the memory lines…"), id="mem-summary")
        yield Table(id="mem-table", cursor_type="row", cursor_foreground_priority="renderable")
        yield Static(plain(""), id="mem-detail")

    def on_mount(self) -> None:
        self.load_view(memory_view, self._loaded)

    def _loaded(self, view: MemoryView) -> None:
        self.view = view
        self._summarise()
        self._refill()
        self.query_one("#mem-table", DataTable).focus()

    # -- the table -------------------------------------------------------------------------------

    def _width_for_bar(self) -> int:
        """What the other columns leave (each column has one cell of padding either side, and
        the vertical scrollbar takes two)."""
        rows = self.view.rows if self.view else []
        node = max([len(r.node or "?") for r in rows] + [4])
        mark = max([_marks(r).cell_len for r in rows] + [3])
        rank = max([len(str(r.rank)) for r in rows] + [4])
        fixed = rank + node + len("alloc") + len("resv") + len("% cap") + mark + 7 * 2 + 2
        return max(MIN_BAR, (self.size.width or 120) - fixed)

    def _refill(self) -> None:
        assert self.view is not None
        table = self.query_one("#mem-table", DataTable)
        keep = self.rows[table.cursor_row].rank if self.rows and 0 <= table.cursor_row < len(self.rows) else None
        self._bar_width = self._width_for_bar()
        table.clear(columns=True)
        table.add_column(plain("rank"), key="rank")
        table.add_column(plain("node"), key="node")
        label = next(t for t in ("peak against capacity", "peak vs capacity", "peak") if len(t) <= self._bar_width)
        table.add_column(plain(label), key="bar", width=self._bar_width)
        table.add_column(plain("alloc"), key="alloc")
        table.add_column(plain("resv"), key="reserved")
        table.add_column(plain("% cap"), key="pct")
        table.add_column(plain("OOM"), key="mark")
        self.rows = sort_rows(self.view.rows, self.by_peak)
        culprits = set(self.session.culprit_ranks)
        table.add_rows(self._cells(r, r.rank in culprits) for r in self.rows)
        if keep is not None:
            table.move_cursor(row=[r.rank for r in self.rows].index(keep))
        self._show_detail()

    def _cells(self, row: RankMemory, culprit: bool) -> list[Text]:
        view = self.view
        pct = percent(row.peak, view.capacity)
        pct_style = OOM_STYLE if pct is not None and pct >= 100 * NEAR else \
            "dark_orange" if pct is not None and pct >= 85 else ""
        return [cell(row.rank, "bold" if culprit else ""), cell(row.node or "?", "dim"),
                bar(row, view.capacity, view.top, self._bar_width) if row.peak else cell("no memory lines", "dim italic"),
                _number(row.alloc), _number(row.reserved),
                cell("" if pct is None else f"{pct:.0f}%", pct_style), _marks(row)]

    def on_resize(self) -> None:
        if self.view is not None and self._width_for_bar() != self._bar_width:
            self._refill()

    # -- summary and detail ----------------------------------------------------------------------

    def _summarise(self) -> None:
        view = self.view
        if not view.rows:
            self.query_one("#mem-summary", Static).update(plain(
                "No memory lines and no OOM in this run (Megatron 'memory (MB)', DeepSpeed see_memory_usage, "
                "torchtitan, Lightning, CUDA OOM messages, kernel OOM kills)."))
            return
        cap = (f"capacity {gib(view.capacity)} from {view.capacity_source}" if view.capacity
               else "capacity unknown (no memory lines with it, GPU model not detected: give --gpu)")
        top = max(view.rows, key=lambda r: r.peak)
        sampled = sum(1 for r in view.rows if r.samples)
        parts: list = [(cap, "")]
        if top.peak:
            pct = percent(top.peak, view.capacity)
            parts.append((f" · peak {gib(top.peak)}" + (f" ({pct:.0f}%)" if pct else "") + f" on rank {top.rank}",
                          OOM_STYLE if pct and pct >= 100 * NEAR else ""))
        parts.append((f" · memory lines from {sampled} of {view.n_ranks or '?'} ranks\n", "dim"))
        cuda = [r.rank for r in view.rows if r.cuda_oom]
        host = sorted({r.node or "?" for r in view.rows if r.host_oom})
        if cuda or host:
            what = []
            if cuda:
                what.append(f"CUDA OOM on rank{'s' if len(cuda) > 1 else ''} {_ranks_text(cuda)}")
            if host:
                what.append(f"host OOM kill on {', '.join(host)}")
            parts.append(("; ".join(what), OOM_STYLE))
        else:
            parts.append(("no OOM", "green"))
        parts.append(("   █ allocated  ▒ reserved  │ capacity  · alloc, resv in GiB", "dim"))
        self.query_one("#mem-summary", Static).update(join(*parts))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_detail()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_evidence()

    def _current(self) -> RankMemory | None:
        table = self.query_one("#mem-table", DataTable)
        if self.rows and 0 <= table.cursor_row < len(self.rows):
            return self.rows[table.cursor_row]
        return None

    def _show_detail(self) -> None:
        row = self._current()
        detail = self.query_one("#mem-detail", Static)
        if row is None:
            detail.update(plain(""))
            return
        parts: list = [(f"rank {row.rank}", "bold"), (f" on {row.node or '?'}", "")]
        if row.samples:
            parts.append((f" · {row.samples} memory sample{'s' if row.samples > 1 else ''}", ""))
            if row.early:
                parts.append((" · all taken before the optimizer state existed: the real peak is higher", "dark_orange"))
        if row.cuda_oom and row.oom_sizes:
            s = row.oom_sizes
            sizes = [f"{label} {gib(s[key])}" for key, label in (("requested", "asked"), ("free", "free"),
                                                                  ("allocated", "allocated"),
                                                                  ("unallocated", "reserved but unallocated"))
                     if s.get(key) is not None]
            parts.append((" · CUDA OOM: " + (", ".join(sizes) or "no sizes in the message"), OOM_STYLE))
            if row.at_oom:
                parts.append((" (the bar is the OOM message's reading: no memory lines on this rank)", "dim"))
        if row.host_oom:
            parts.append((" · the kernel OOM killer killed this rank's process" if row.host_oom_killed
                          else " · the kernel OOM killer struck on this node", OOM_STYLE))
        if row.evidence:
            parts.append(("  (e: open the line)", "dim"))
        detail.update(join(*parts))

    # -- keys ------------------------------------------------------------------------------------

    def action_sort(self) -> None:
        self.by_peak = not self.by_peak
        if self.view is not None:
            self._refill()

    def action_next_oom(self) -> None:
        table = self.query_one("#mem-table", DataTable)
        marked = [i for i, r in enumerate(self.rows) if r.cuda_oom or r.host_oom]
        if not marked:
            self.notify("No OOM in this run.", timeout=3)
            return
        after = [i for i in marked if i > table.cursor_row]
        table.move_cursor(row=(after or marked)[0])

    def action_evidence(self) -> None:
        row = self._current()
        if row is None or row.evidence is None:
            return
        path = self.view.paths.get(int(row.evidence[0]))
        if path:
            self.app.show_line(path, int(row.evidence[1]))  # type: ignore[attr-defined]


def _marks(row: RankMemory) -> Text:
    marks = []
    if row.cuda_oom:
        marks.append(("CUDA OOM", OOM_STYLE))
    if row.host_oom:
        marks.append(("host OOM ✗" if row.host_oom_killed else "host OOM", OOM_STYLE))
    out = Text(no_wrap=True)
    for i, (text, style) in enumerate(marks):
        out.append(("  " if i else "") + text, style)
    return out


def _number(mib: float | None) -> Text:
    """GiB with one decimal, right-aligned (the unit is in the legend)."""
    return Text("" if mib is None else f"{mib / 1024:.1f}", justify="right", no_wrap=True)


def _ranks_text(ranks: list[int], limit: int = 8) -> str:
    shown = ", ".join(map(str, ranks[:limit]))
    return shown + (f" and {len(ranks) - limit} more" if len(ranks) > limit else "")
