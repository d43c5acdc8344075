"""The Transports screen: per communicator, which transport each channel's hop uses.

The data is ``postmortem.views.transports.view`` (what ``postmortem transports`` prints), shaped by
``postmortem.views.transport_rows``. Hops off their expected tier (the view's ``attention``: SHM between
GPUs of one host, sockets where RDMA exists, NET without GDR) are marked ``✗`` in bold red,
the communicator's slowest tier ``▼`` in orange, so both read without colour too. ``m`` swaps
the hop list for a node-by-node matrix of the tiers used; ``f`` keeps only hops off NVLink;
``b`` for the links as the tools measured them (``postmortem.views.transport_rows.measured_rows``: what
``postmortem hw`` prints of p2pBandwidthLatencyTest, bandwidthTest and perftest).
"""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import ContentSwitcher, DataTable, Static

from postmortem.views import transport_rows as tr
from postmortem.tui.screens.base import BaseScreen, Table
from postmortem.tui.text import cell, join, plain

OFF_STYLE = "bold red"  # reads on dark and light themes
SLOW_STYLE = "bold dark_orange3"  # dark_orange is weak on the light theme
ROW_STYLE = {tr.OFF_TIER: OFF_STYLE, tr.SLOWEST: SLOW_STYLE, tr.NORMAL: ""}
HOP_COLUMNS = ("", "ch", "ranks", "tier", "GB/s", "transport", "hosts", "GPUs", "NIC", "phase")
MEASURED_COLUMNS = ("", "node", "tool", "what", "measured")


class TransportsScreen(BaseScreen):
    TITLE_NAME = "Transports"
    HELP = """
Per NCCL communicator (the table at the top), every hop of every channel: ranks, tier,
estimated bandwidth per direction (priced against the hardware model), transport as NCCL
wrote it, hosts, GPUs and NICs (each side of a network hop: its NIC and `GDR` / `noGDR`); the
line under it tells all about the highlighted hop (PCI bus ids, each side's GPUDirect RDMA,
why it is priced so). `✗` (bold red) marks hops off their expected tier, as the report's
findings do: SHM or the network between GPUs of one host where P2P is possible, TCP sockets
between hosts, a side without GPUDirect RDMA where it is possible. `▼` marks the slowest tier.
Where NCCL said why a hop fell back ("P2P is disabled between connected GPUs 0 and 1", the
lines `postmortem transports` lists), the summary and the hop's line quote it.
Hops that are the same on several channels are one row (`ch 00-07`). The matrix shows, per
pair of nodes (rows send, columns receive, the diagonal is intra-node), the tiers used.
`b` shows the links as the tools measured them, beside the hops: p2pBandwidthLatencyTest
matrices, perftest (`ib_send_bw`, `ib_write_bw`, ...) per NIC, bandwidthTest per GPU, what
`postmortem hw` prints; `✗` marks a measurement an L004-L006 finding calls slow.
Keys: `c` / `C` next / previous communicator (or move in its table: `tab` focuses it), `f` only
the hops off NVLink (again: all hops), `m` the node matrix (again: the hops), `b` the measured
links (again: the hops), `o` one row per channel, `enter` the NCCL line that declared the hop,
in Logs.
"""
    BINDINGS = [
        Binding("c", "next_comm", "Comm", tooltip="Next communicator"),
        Binding("f", "toggle_off_nvlink", "Off-NVLink", tooltip="Only hops off NVLink, or all hops"),
        Binding("m", "toggle_matrix", "Matrix", tooltip="Node-by-node matrix of transports, or the hops"),
        Binding("b", "toggle_measured", "Measured", tooltip="The links as perftest, bandwidthTest and "
                "p2pBandwidthLatencyTest measured them, or the hops"),
        Binding("C", "previous_comm", "Previous communicator", show=False),
        Binding("o", "toggle_grouping", "Hops: one row per channel, or grouped over channels", show=False),
        Binding("enter", "open_evidence", "Open the highlighted hop's NCCL line in Logs", show=False),
    ]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (34, "-tall")]
    DEFAULT_CSS = """
    TransportsScreen #comms { height: auto; max-height: 7; }
    TransportsScreen #summary { height: auto; max-height: 12; padding: 0 1; background: $boost; overflow-y: auto; }
    TransportsScreen #views { height: 1fr; }
    TransportsScreen #hops, TransportsScreen #matrix { height: 1fr; }
    TransportsScreen #foot { height: auto; }
    TransportsScreen #legend { height: 1; color: $text-muted; padding: 0 1; }
    TransportsScreen #detail { height: auto; max-height: 3; padding: 0 1; }
    TransportsScreen.-short #comms { max-height: 4; overflow-x: hidden; }
    TransportsScreen.-short #summary { max-height: 4; overflow-y: auto; }
    TransportsScreen.-short #detail { max-height: 2; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.view: dict | None = None
        self.comm_index = 0
        self.off_nvlink_only = False
        self.grouped = True
        self.rows: list[tr.HopRow] = []
        self.nodes: list[str] = []
        self.cells: dict[tuple[str, str], tr.MatrixCell] = {}
        self.matrix_of: int | None = None  # the communicator the matrix table shows
        self.measured: list[tr.MeasuredRow] | None = None  # read when first shown

    def compose_body(self):
        yield Table(id="comms", cursor_type="row", cursor_foreground_priority="renderable")
        yield Static(plain("Reading the NCCL transports…"), id="summary")
        with ContentSwitcher(initial="hops", id="views"):
            yield Table(id="hops", cursor_type="row", cursor_foreground_priority="renderable")
            yield Table(id="matrix", cursor_type="cell", cursor_foreground_priority="renderable")
            yield Table(id="measured", cursor_type="row", cursor_foreground_priority="renderable")
        with Vertical(id="foot"):
            yield Static(plain(""), id="legend")
            yield Static(plain(""), id="detail")

    def on_mount(self) -> None:
        self.query_one("#comms", DataTable).add_columns(*(plain(c) for c in ("communicator", "ranks", "nodes",
                                                                             "✗ off-tier", "tiers", "hosts")))
        self.query_one("#hops", DataTable).add_columns(*(plain(c) for c in HOP_COLUMNS))
        self.query_one("#hops", DataTable).focus()
        # the view reads every NCCL table: off the UI thread
        self.load_view(lambda run, _report: tr.load(run), self._loaded, self._failed)

    def _failed(self, why: str) -> None:
        self.query_one("#summary", Static).update(plain(f"Cannot read the transports: {why}", OFF_STYLE))

    def _loaded(self, v: dict) -> None:
        self.view = v
        comms = self.query_one("#comms", DataTable)
        for row in tr.comm_rows(v):
            style = OFF_STYLE if row.off_tier else ""
            comms.add_row(cell(row.key, style), cell(row.nranks if row.nranks is not None else "?"),
                          cell(row.nnodes if row.nnodes is not None else "?"),
                          cell(f"✗ {row.off_tier}" if row.off_tier else "·", style), cell(row.tiers), cell(row.hosts))
        if not v["communicators"]:
            self.query_one("#summary", Static).update(plain(
                "No NCCL communicator or connection lines in the inputs (is NCCL_DEBUG=INFO set? "
                "did init get that far?)."))
            return
        self.show_comm(0)

    # -- showing one communicator ---------------------------------------------------------------------

    @property
    def comm(self) -> dict | None:
        return self.view["communicators"][self.comm_index] if self.view and self.view["communicators"] else None

    def show_comm(self, index: int) -> None:
        self.comm_index = index
        comms = self.query_one("#comms", DataTable)
        if comms.cursor_row != index:
            comms.move_cursor(row=index)
        self.query_one("#summary", Static).update(self._summary())
        self.nodes, self.cells = tr.node_matrix(self.comm)
        self.matrix_of = None  # filled when shown: a 128-node matrix is 16k cells to measure
        self._fill_hops(first_marked=True)
        if self._showing("matrix"):
            self._fill_matrix()

    def _summary(self) -> Text:
        lines = tr.summary_lines(self.comm, self.view)
        style = {tr.OFF_TIER: OFF_STYLE, tr.SLOWEST: SLOW_STYLE, "": ""}
        return Text("\n").join(plain(text, style[kind]) for text, kind in lines)

    def _fill_hops(self, first_marked: bool = False) -> None:
        table = self.query_one("#hops", Table)
        table.clear()
        self.rows = tr.hop_rows(self.comm, off_nvlink_only=self.off_nvlink_only, grouped=self.grouped)
        for row in self.rows:
            style = ROW_STYLE[row.mark]
            table.add_row(cell(tr.MARK[row.mark], style), cell(row.channels), cell(row.ranks, style),
                          cell(row.tier, style), cell(row.bandwidth, style), cell(row.transport), cell(row.hosts),
                          cell(row.gpus), cell(row.nic), cell(row.phase))
        if first_marked:
            marked = [i for i, r in enumerate(self.rows) if r.mark == tr.OFF_TIER] or \
                     [i for i, r in enumerate(self.rows) if r.mark == tr.SLOWEST]
            if marked:
                table.move_cursor(row=marked[0], scroll=False)
                # a few rows of context above it rather than the marked row at the bottom edge
                table.scroll_when_measured(max(0, marked[0] - 3))
        self._show_legend()
        self._show_hop_detail(table.cursor_row)

    def _showing(self, view: str) -> bool:
        return self.query_one("#views", ContentSwitcher).current == view

    def _fill_matrix(self) -> None:
        if self.matrix_of == self.comm_index:
            return
        self.matrix_of = self.comm_index
        table = self.query_one("#matrix", DataTable)
        table.clear(columns=True)
        table.add_columns(plain("from ↓ to →"), *(plain(n) for n in self.nodes))
        for src in self.nodes:
            cells = []
            for dst in self.nodes:
                c = self.cells.get((src, dst))
                if c is None:
                    cells.append(cell("·", "dim"))
                elif c.off_tier:
                    cells.append(cell(f"{tr.MARK[tr.OFF_TIER]} {c.text}", OFF_STYLE))
                else:
                    cells.append(cell(c.text))
            table.add_row(cell(src, "bold"), *cells)
        first_off = next(((r, c + 1) for r, src in enumerate(self.nodes) for c, dst in enumerate(self.nodes)
                          if (src, dst) in self.cells and self.cells[(src, dst)].off_tier), (0, 1))
        table.move_cursor(row=first_off[0], column=first_off[1])

    def _show_legend(self) -> None:
        if self._showing("measured"):
            n = len(self.measured or [])
            text = f"{n} measurement(s) · ✗ a finding calls it slow · b: back to the hops"
        elif self._showing("matrix"):
            text = "rows send, columns receive · ✗ off NVLink/RDMA where it exists"
        else:
            hops = sum(r.count for r in self.rows)
            which = "hops off NVLink" if self.off_nvlink_only else "hops"
            grouping = f" in {len(self.rows)} rows" if self.grouped else ""
            text = f"{hops} {which}{grouping} · ✗ off its expected tier · ▼ slowest tier"
        self.query_one("#legend", Static).update(plain(text))

    def _show_hop_detail(self, index: int) -> None:
        detail = self.query_one("#detail", Static)
        if not 0 <= index < len(self.rows):
            detail.update(plain("no hop off NVLink in this communicator" if self.off_nvlink_only else ""))
            return
        row = self.rows[index]
        why = plain(f"{tr.MARK[row.mark]} {row.why}: ", OFF_STYLE) if row.why else plain("")
        # NCCL's own words first: the detail is cut at 3 lines on a small terminal
        said = "".join(f"NCCL said: {message} " for message in tr.nccl_reasons(row.hop, self.view))
        detail.update(join(why, (said, OFF_STYLE), (tr.hop_detail(row.hop), "")))

    # -- events and actions ---------------------------------------------------------------------------

    @on(DataTable.RowHighlighted, "#comms")
    def _comm_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if self.view and event.cursor_row != self.comm_index:
            self.show_comm(event.cursor_row)

    @on(DataTable.RowHighlighted, "#hops")
    def _hop_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_hop_detail(event.cursor_row)

    @on(DataTable.RowSelected, "#hops")
    def _hop_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open_evidence()

    @on(DataTable.CellHighlighted, "#matrix")
    def _cell_highlighted(self, event: DataTable.CellHighlighted) -> None:
        if self._showing("matrix"):
            self._show_cell_detail(event.coordinate.row, event.coordinate.column)

    def _show_cell_detail(self, row: int, col: int) -> None:
        if 0 <= row < len(self.nodes) and 0 <= col <= len(self.nodes):
            src = self.nodes[row]
            dst = self.nodes[col - 1] if col else src  # the row's own name: its intra-node cell
            off = self.cells.get((src, dst))
            style = OFF_STYLE if off and off.off_tier else ""
            self.query_one("#detail", Static).update(plain(tr.cell_detail(src, dst, off), style))

    def _step_comm(self, step: int) -> None:
        if self.view and self.view["communicators"]:
            self.show_comm((self.comm_index + step) % len(self.view["communicators"]))

    def action_next_comm(self) -> None:
        self._step_comm(1)

    def action_previous_comm(self) -> None:
        self._step_comm(-1)

    def action_toggle_off_nvlink(self) -> None:
        if self.comm:
            self.off_nvlink_only = not self.off_nvlink_only
            self._fill_hops(first_marked=True)

    def action_toggle_grouping(self) -> None:
        if self.comm:
            self.grouped = not self.grouped
            self._fill_hops(first_marked=True)

    def action_toggle_measured(self) -> None:
        views = self.query_one("#views", ContentSwitcher)
        if views.current == "measured":
            self._switch("hops")
            return
        self._switch("measured")
        if self.measured is None:
            self.query_one("#detail", Static).update(plain("Reading the measurements…"))
            self.load_view(tr.measured_rows, self._measured_loaded, self._measured_failed)
        else:
            self._show_measured_detail(self.query_one("#measured", DataTable).cursor_row)

    def _measured_loaded(self, rows: list) -> None:
        self.measured = rows
        table = self.query_one("#measured", DataTable)
        table.clear(columns=True)
        table.add_columns(*(plain(c) for c in MEASURED_COLUMNS))
        for r in rows:
            style = OFF_STYLE if r.finding else ""
            table.add_row(cell(tr.MARK[tr.OFF_TIER] if r.finding else "·", style), cell(r.node), cell(r.tool),
                          cell(r.what), cell(r.measured, style))
        self._show_legend()
        self._show_measured_detail(table.cursor_row)

    def _measured_failed(self, why: str) -> None:
        self.measured = []
        self.query_one("#detail", Static).update(plain(f"Cannot read the measurements: {why}", OFF_STYLE))

    def _show_measured_detail(self, index: int) -> None:
        detail = self.query_one("#detail", Static)
        rows = self.measured or []
        if not rows:
            detail.update(plain("No p2pBandwidthLatencyTest, bandwidthTest or perftest output in the inputs."))
        elif 0 <= index < len(rows):
            r = rows[index]
            detail.update(plain(r.finding or f"{r.tool} on {r.node}: no finding calls it slow", OFF_STYLE if r.finding
                                else ""))

    @on(DataTable.RowHighlighted, "#measured")
    def _measured_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if self._showing("measured"):
            self._show_measured_detail(event.cursor_row)

    def _switch(self, view: str) -> None:
        self.query_one("#views", ContentSwitcher).current = view
        if view == "matrix" and self.comm:
            self._fill_matrix()
        self.query_one(f"#{view}", DataTable).focus()
        self._show_legend()
        if view == "hops":
            self._show_hop_detail(self.query_one("#hops", DataTable).cursor_row)
        elif view == "matrix":
            at = self.query_one("#matrix", DataTable).cursor_coordinate
            self._show_cell_detail(at.row, at.column)

    def action_toggle_matrix(self) -> None:
        views = self.query_one("#views", ContentSwitcher)
        self._switch("hops" if views.current == "matrix" else "matrix")

    def action_open_evidence(self) -> None:
        """Enter on a hop: the NCCL line that declared it, in the Logs screen."""
        if not self._showing("hops"):
            return
        index = self.query_one("#hops", DataTable).cursor_row
        if not 0 <= index < len(self.rows):
            return
        hop = self.rows[index].hop
        if hop.get("input_id") is None or not hop.get("line_no"):
            self.notify("This hop has no source line.", severity="warning")
            return
        # a cursor of its own: the session's connection may hold an unfinished result (stored_report)
        con = self.session.cursor()
        try:
            paths = con.execute("SELECT path FROM inputs WHERE input_id = ?", [hop["input_id"]]).fetchall()
        finally:
            con.close()
        if paths:
            self.app.show_line(paths[0][0], int(hop["line_no"]))  # type: ignore[attr-defined]
