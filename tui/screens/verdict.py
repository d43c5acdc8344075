"""The Verdict screen, the first one users see: the verdict, the actions, a run summary and the
missing evidence on top; below, the findings by severity and the selected finding's message,
suggestion, details and evidence lines. Enter on a finding or an evidence line opens the line
in the Logs screen.

The words come from the report (``postmortem.report/1``) through the same helpers the text,
Markdown and HTML reports use (``postmortem.views.render.action_items`` and ``finding_details``), so
the TUI says what the reports say. The module-level ``*_text`` functions shape the report into
Rich ``Text`` without touching Textual (the tests call them directly); every value from the
report goes through ``postmortem.tui.text`` (never markup, control characters made visible).
"""

from __future__ import annotations

from datetime import datetime

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.geometry import Region
from textual.message import Message
from textual.containers import Container, Vertical, VerticalScroll
from textual.widgets import DataTable, OptionList, Static
from textual.widgets.option_list import Option

from postmortem.analyzer.ranges import hostlist, rank_ranges
from postmortem.rules.declare import Severity
from postmortem.views.render import action_items, finding_details, known, or_unknown, outcome_lines, rank_count
from postmortem.tui.screens.base import BaseScreen, Table
from postmortem.tui.text import SEVERITY_STYLE, cell, join, plain

# Rich styles that read on dark and light themes (yellow is too weak on light).
SEVERITY_LABEL = {"error": "error", "warning": "warn", "info": "info"}
STATUS_STYLE = {
    "culprit": "bold white on red3",
    "no-single-culprit": "bold white on magenta3",
    "inconclusive": "bold white on purple4",
    "degraded": "bold black on dark_orange",
    "healthy": "bold white on green4",
    "undetermined": "bold white on red3",
    "unknown": "bold black on grey70",
}
STACK_HEADING = "culprit's main thread (py-spy"   # analyzer.render.finding_details' label
SEGMENT_STYLE = {"t": "", "b": "bold", "c": "underline"}  # action_items: plain, label, value to copy


# --- the report as Text (no Textual) ------------------------------------------------------------

def sorted_findings(report: dict) -> list[dict]:
    """Errors, then warnings, then infos; within a severity the report's own order (causes before
    symptoms)."""
    return sorted(report.get("findings", []), key=lambda f: Severity.rank_of(f.get("severity")))


def where(f: dict) -> str:
    """'17 @ h20-node-03': the finding's ranks and nodes as compact ranges ('' when job-wide)."""
    ranks = rank_ranges(f.get("ranks") or [])
    nodes = hostlist(f.get("nodes") or [])
    return " @ ".join(part for part in (ranks, nodes) if part)


def gpu_words(g: dict, node: bool = True) -> str:
    """'h20-node-03 GPU 1 (0000:2a:00.0)', each part only when the report has it."""
    parts = [or_unknown(g.get("node"), "unknown node")] if node else []
    if known(g.get("cuda_dev")):
        parts.append(f"GPU {g['cuda_dev']}")
    if known(g.get("bus_id")):
        parts.append(f"({g['bus_id']})")
    return " ".join(parts)


def verdict_text(report: dict) -> Text:
    """Status badge, confidence and category, the culprit (ranks, nodes, GPUs) and the sentence."""
    v = report["verdict"]
    status = v.get("status", "?")
    headline, _ = outcome_lines(report)
    out = join(("Outcome ", "bold"), (headline, "bold"))
    out.append("\n")
    out += join((f" {status.upper()} ", STATUS_STYLE.get(status, "bold reverse")),
               (f"  confidence {float(v.get('confidence') or 0):.2f} · {v.get('category')}", "dim"))
    culprit = v.get("culprit") or {}
    if culprit.get("ranks") or culprit.get("nodes"):
        out.append("\nCulprit ", style="bold")
        out.append_text(join(("rank ", ""), (rank_ranges(culprit.get("ranks") or []), "bold red"),
                             (" on ", ""), (hostlist(culprit.get("nodes") or []), "bold red")))
        gpus = culprit.get("gpus") or []
        if len(gpus) == 1 and gpu_words(gpus[0], node=False):  # the node is already said
            out.append_text(plain(f" · {gpu_words(gpus[0], node=False)}"))
        elif gpus:
            out.append_text(plain(" · GPUs " + ", ".join(gpu_words(g) for g in gpus)))
    frame = culprit_frame(report)
    if frame:
        out.append("\nCulprit's stack ", style="bold")
        out.append_text(plain(frame, "bold"))
        out.append_text(plain("  (innermost frame; s: the whole stack)", "dim"))
    out.append("\n")
    out.append_text(plain(v.get("sentence")))
    return out


def culprit_frame(report: dict) -> str:
    """The innermost frame of the culprit's main thread (py-spy), when a culprit finding has it."""
    f = culprit_stack_finding(report.get("findings", []))
    return str(culprit_stack(f)[0]) if f else ""


def culprit_stack(f: dict) -> list:
    """The culprit's py-spy main thread a finding carries, innermost first ([] when none)."""
    return ((f.get("details") or {}).get("culprit_did_instead") or {}).get("py_spy_main_thread") or []


def culprit_stack_finding(findings: list[dict]) -> dict | None:
    """The first culprit finding with the culprit's py-spy stack (what ``s`` shows)."""
    return next((f for f in findings if f.get("culprit") and culprit_stack(f)), None)


def actions_text(report: dict) -> Text:
    """The actions, item for item as ``postmortem.views.render.action_items`` gives them to every format."""
    out = Text()
    for indent, segments in action_items(report):
        out.append("\n" + "  " * indent + ("• " if indent == 0 else "· "))
        for kind, text in segments:
            out.append_text(plain(text, SEGMENT_STYLE.get(kind, "")))
    return Text("Actions", style="bold underline") + out if out else out


def summary_text(report: dict) -> Text:
    """Ranks, nodes, GPU model, NCCL versions, time span, inputs and the missing evidence."""
    run, totals = report.get("run", {}), report.get("inputs", {}).get("totals", {})
    nodes = run.get("nodes") or []
    ranks = rank_count(run)
    gpu = (run.get("gpu_model") or {}).get("name") or "GPU unknown"
    nccl = ", ".join(run.get("nccl_versions") or []) or "none seen"
    where = f"{ranks} on {len(nodes)} node(s) {hostlist(nodes)}" if nodes else f"{ranks}, nodes unknown"
    out = join(("Run ", "bold"), (f"{where} · {gpu} · NCCL {nccl}", ""),
               (" · " + time_span(run.get("time_span") or {}), ""))
    out.append_text(plain(f"\nInputs {totals.get('files', 0)} files, {totals.get('lines', 0):,} lines: "
                          f"{totals.get('parsed_lines', 0):,} parsed, {totals.get('unparsed_lines', 0):,} unparsed"
                          + (f", {totals['skipped']} skipped" if totals.get("skipped") else "")))
    for gap in report.get("missing_evidence", []):
        out.append_text(join(("\nMissing ", "bold dark_orange"), (gap.get("what"), ""),
                             (f" (next time: {gap.get('enable')})", "dim")))
    return out


def time_span(span: dict) -> str:
    """'2026-07-24 08:00:06 -> 14:22:53 (6h 22m)'; the date is repeated only when it changes."""
    start, end = _when(span.get("start")), _when(span.get("end"))
    if start is None or end is None:
        return "time span unknown"
    end_words = end.strftime("%H:%M:%S" if end.date() == start.date() else "%Y-%m-%d %H:%M:%S")
    minutes = int((end - start).total_seconds() // 60)
    return f"{start:%Y-%m-%d %H:%M:%S} → {end_words} ({minutes // 60}h {minutes % 60:02d}m)"


def _when(value) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None


def marker(f: dict, by_id: dict[str, dict]) -> Text:
    """'culprit' for a cause, '← H001' for a finding another one explains."""
    out = Text(no_wrap=True)
    if f.get("culprit"):
        out.append("culprit", "bold red" if f.get("severity") == "error" else "bold")
    causes = [by_id[i]["code"] for i in f.get("caused_by") or [] if i in by_id]
    if causes:
        out.append((" " if out else "") + "← " + ",".join(causes), "dim")
    return out


def finding_text(f: dict, by_id: dict[str, dict]) -> Text:
    """What the detail pane says of a finding: headline, message, suggestion, details, causes."""
    sev = f.get("severity", "")
    confidence = f"  confidence {float(f.get('confidence') or 0):.2f} · {f.get('category')}"
    out = join((f"{sev.upper()} ", SEVERITY_STYLE.get(sev, "")), (f"{f.get('code')} ", "bold"),
               (f.get("name"), "dim"), (confidence, "dim"))
    out.append("\n")
    out.append_text(plain(f.get("title"), "bold"))
    if where(f):
        out.append_text(join(("\nOn ", "bold"), (where(f), "")))
    for g in f.get("gpus") or []:
        rank = f"rank {g['rank']}: " if known(g.get("rank")) else ""
        pid = f" pid {g['pid']}" if known(g.get("pid")) else ""
        out.append_text(plain(f"\n  {rank}{gpu_words(g)}{pid}", "dim"))
    out.append("\n\n")
    out.append_text(plain(f.get("message")))
    if f.get("suggestion"):
        out.append_text(join(("\n\n→ ", "bold"), (f.get("suggestion"), "")))
    for kind, label, lines in finding_details(f):
        if kind == "line":
            out.append_text(_detail_lines(label, lines))
        else:
            out.append_text(join((f"\n{label}:", "bold"), *[(f"\n  {line}", "dim") for line in lines]))
    for cause_id in f.get("caused_by") or []:
        cause = by_id.get(cause_id)
        words = f"{cause['code']} {cause.get('title')}" if cause else cause_id
        out.append_text(join(("\nCaused by ", "bold"), (words, "")))
    return out


def _detail_lines(label: str, lines: list[str]) -> Text:
    out = Text()
    for line in lines:
        out.append_text(join((f"\n{label}: ", "bold"), (line, "")))
    return out


def evidence_prompt(e: dict, width: int = 0) -> Text:
    """An evidence line: where (path:line, rank, node, note), then the line as it stands.
    ``path:line`` is one unit that never wraps (a fold inside it once read ``stderr.log:77`` /
    ``1 · rank 17`` as line 77): past ``width`` columns the path is cut from the left."""
    where_parts = [path_line(str(e.get("path")), e.get("line"), width)]
    if e.get("rank") is not None:
        where_parts.append(f"rank {e['rank']}")
    if e.get("node"):
        where_parts.append(str(e["node"]))
    out = join((" · ".join(where_parts), "bold"))
    if e.get("note"):
        out.append_text(plain(f" — {e['note']}", "dim"))
    text = str(e.get("text") or "")
    out.append_text(plain("\n" + (text[:400] + "…" if len(text) > 400 else text)))
    return out


def path_line(path: str, line, width: int = 0) -> str:
    """``path:line`` in at most ``width`` columns (0: any): the path shortened from the left to
    ``…/tail`` (from a ``/`` where one is kept), ``:line`` always whole."""
    suffix = f":{line}"
    if width <= 0 or len(path) + len(suffix) <= width:
        return path + suffix
    keep = max(width - len(suffix) - 1, 1)
    tail = path[-keep:]
    cut = tail.find("/", 1)
    if 0 < cut < len(tail) - 1:
        tail = tail[cut:]   # "…/attempt_0/1/stderr.log" rather than "…_0/1/stderr.log"
    return "…" + tail + suffix


def findings_heading(findings: list[dict]) -> Text:
    counts = {sev: sum(1 for f in findings if f.get("severity") == sev) for sev in Severity}
    out = Text("Findings ", style="bold")
    parts = [plain(f"{n} {sev}{'s' if n != 1 and sev != 'info' else ''}", SEVERITY_STYLE[sev])
             for sev, n in counts.items() if n]
    return out + Text(" · ").join(parts) if parts else out + Text("none", style="dim")


# --- widgets ------------------------------------------------------------------------------------

class FindingsTable(Table):
    """The findings, one row each; Enter opens the finding's first evidence line."""

    BINDINGS = [Binding("enter", "select_cursor", "Open")]


class EvidenceList(OptionList):
    """The selected finding's evidence lines; Enter opens one in the Logs screen."""

    BINDINGS = [Binding("enter", "select", "Open")]

    class Resized(Message):
        """The list's width may have changed: the screen refits its path:line units."""

    def on_resize(self) -> None:
        # its own resize, not the screen's: the list is laid out after the screen is
        self.post_message(self.Resized())

    @property
    def prompt_width(self) -> int:
        """The columns a prompt is wrapped to (0 before the first layout)."""
        padding = self.get_component_styles("option-list--option").padding.width
        return max(self.scrollable_content_region.width - self._get_left_gutter_width() - padding, 0)


class VerdictScreen(BaseScreen):
    TITLE_NAME = "Verdict"
    HELP = ("The verdict (status, culprit, sentence), what to do next, a run summary and the "
            "evidence that was missing, then every finding by severity (`culprit` marks a cause, "
            "`← CODE` a finding that cause explains). The selected finding's message, suggestion, "
            "details and evidence lines show below the list; Enter on a finding or an evidence "
            "line opens that line in the Logs screen. `e` moves to the evidence lines, `f` or Escape "
            "back to the findings, `v` shows the verdict whole (again: back to the findings), `c` "
            "goes to the finding that causes the selected one, `s` shows the culprit's py-spy stack whole "
            "(when the run has one: the headline names its innermost frame).")
    BINDINGS = [
        Binding("enter", "open_evidence", "Open"),
        Binding("e", "focus_evidence", "Evidence", show=False),
        Binding("v", "toggle_verdict", "Verdict"),
        # shown only when the run has the culprit's py-spy stack (check_action)
        Binding("s", "show_stack", "Stack", tooltip="The culprit's py-spy stack, whole, in the finding's details"),
        Binding("f,escape", "focus_findings", "Back to the findings list", show=False),
        Binding("c", "goto_cause", "Go to the finding that causes this one", show=False),
    ]
    # Side by side from 100 columns; stacked below (80x24).
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (32, "-tall")]
    DEFAULT_CSS = """
    VerdictScreen #verdict { height: auto; max-height: 45%; padding: 0 1;
                             border-bottom: solid $primary; }
    VerdictScreen.-short #verdict { max-height: 35%; }
    VerdictScreen #findings-pane { height: auto; max-height: 30%; }
    VerdictScreen.-short #findings-pane { max-height: 7; }
    VerdictScreen #findings-heading { padding: 0 1; height: 1; }
    VerdictScreen #findings { height: auto; max-height: 100%; }
    VerdictScreen #detail { height: 1fr; border-top: solid $primary; layout: horizontal; }
    VerdictScreen.-narrow #detail { layout: vertical; }
    VerdictScreen #finding-scroll { width: 1fr; height: 1fr; padding: 0 1 0 0; scrollbar-gutter: stable;
                                    border-left: blank; }
    VerdictScreen #evidence-pane { width: 1fr; height: 1fr; border-left: solid $primary; padding-left: 1; }
    VerdictScreen.-narrow #evidence-pane { width: 100%; height: auto; max-height: 50%; border-left: none; }
    VerdictScreen #evidence-heading { height: 1; color: $text-muted; }
    VerdictScreen #evidence { height: auto; max-height: 100%; scrollbar-gutter: stable; }
    VerdictScreen.-verdict-full #verdict { max-height: 100%; height: 1fr; }
    /* The pane with the focus stands out (the cursor colours of a focused table): its heading
       reversed (class -focused, set by _mark_focused_pane), or a bar at its left (the details,
       which have no heading). A blank border keeps the place. */
    VerdictScreen #findings-pane.-focused #findings-heading,
    VerdictScreen #evidence-pane.-focused #evidence-heading {
        background: $block-cursor-background; color: $block-cursor-foreground; text-style: bold; }
    VerdictScreen #finding-scroll:focus { border-left: tall $block-cursor-background; }
    VerdictScreen.-verdict-full #findings-pane, VerdictScreen.-verdict-full #detail { display: none; }
    """

    def compose_body(self) -> ComposeResult:
        report = self.session.report
        self.findings = sorted_findings(report)
        self.by_id = {f["id"]: f for f in report.get("findings", []) if "id" in f}
        with VerticalScroll(id="verdict"):
            yield Static(verdict_text(report), id="verdict-head")
            actions = actions_text(report)
            if actions:
                yield Static(actions, id="actions")
            yield Static(summary_text(report), id="summary")
        with Vertical(id="findings-pane"):
            yield Static(findings_heading(self.findings), id="findings-heading")
            yield FindingsTable(id="findings", cursor_type="row", zebra_stripes=True)
        with Container(id="detail"):
            with VerticalScroll(id="finding-scroll"):
                yield Static(plain(""), id="finding-text")
            with Vertical(id="evidence-pane"):
                yield Static(plain(""), id="evidence-heading")
                yield EvidenceList(id="evidence", compact=True)

    def on_mount(self) -> None:
        self._fill_table()
        table = self.query_one("#findings", FindingsTable)
        table.focus()
        self.show_finding(0)

    def on_descendant_focus(self) -> None:
        self._mark_focused_pane()

    def on_descendant_blur(self) -> None:
        self._mark_focused_pane()

    def _mark_focused_pane(self) -> None:
        """Class the findings and evidence panes by whether their list has the focus (Textual 8
        restyles a heading under a ``:focus-within`` pane only when the pane has such a rule of
        its own, so the class is set here)."""
        focused = self.focused
        for pane, inner in (("#findings-pane", "#findings"), ("#evidence-pane", "#evidence")):
            self.query_one(pane).set_class(focused is not None and focused.id == inner[1:], "-focused")

    def on_resize(self) -> None:
        self._fill_table()

    def on_evidence_list_resized(self) -> None:
        self._refit_evidence()

    def _refit_evidence(self) -> None:
        """path:line shortened to the evidence list's new width (when it changed)."""
        evidence = self.query_one("#evidence", EvidenceList)
        if evidence.prompt_width != getattr(self, "_evidence_width", None):
            self._fill_evidence(self.current_finding)

    # --- the findings table --------------------------------------------------------------------

    def _fill_table(self) -> None:
        """(Re)build the rows with a title column that fits the table's width."""
        table = self.query_one("#findings", FindingsTable)
        row = table.cursor_row
        table.clear(columns=True)
        wheres = [where(f) or "job-wide" for f in self.findings]
        where_width = min(24, max([len(w) for w in wheres] + [len("ranks @ nodes")]))
        markers = [marker(f, self.by_id) for f in self.findings]
        marker_width = max([m.cell_len for m in markers] + [4])
        fixed = 5 + 4 + where_width + 4 + marker_width + 2 * 6  # other columns and their padding
        width = table.size.width or self.size.width
        title_width = max(12, width - fixed - 2 - 2)
        for label, w in (("sev", 5), ("code", 4), ("title", title_width), ("ranks @ nodes", where_width),
                         ("conf", 4), ("", marker_width)):
            table.add_column(Text(label, style="bold"), width=w)
        for f, w, m in zip(self.findings, wheres, markers):
            sev = f.get("severity", "")
            table.add_row(cell(SEVERITY_LABEL.get(sev, sev), SEVERITY_STYLE.get(sev, "")),
                          cell(f.get("code"), "bold"), cell(f.get("title"), limit=title_width),
                          cell(w, "dim" if w == "job-wide" else "", limit=where_width),
                          cell(f"{float(f.get('confidence') or 0):.2f}"), m, key=f.get("id"))
        if self.findings:
            table.move_cursor(row=min(max(row, 0), len(self.findings) - 1), animate=False)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.show_finding(event.cursor_row)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.open_evidence(self.current_finding, 0)

    # --- the detail pane -----------------------------------------------------------------------

    @property
    def current_finding(self) -> dict | None:
        row = self.query_one("#findings", FindingsTable).cursor_row
        return self.findings[row] if 0 <= row < len(self.findings) else None

    def show_finding(self, row: int) -> None:
        """Put finding ``row``'s text and evidence lines in the detail pane (once per finding: the
        table re-highlights its row on every resize)."""
        f = self.findings[row] if 0 <= row < len(self.findings) else None
        key = id(f)
        if key == getattr(self, "_shown", None):
            return
        self._shown = key
        with self.app.batch_update():
            self._fill_detail(f)

    def _fill_detail(self, f: dict | None) -> None:
        text = self.query_one("#finding-text", Static)
        heading = self.query_one("#evidence-heading", Static)
        evidence = self.query_one("#evidence", EvidenceList)
        evidence.clear_options()
        if f is None:
            text.update(plain("No findings: nothing in the logs points at a fault.", "dim"))
            heading.update(plain(""))
            return
        text.update(finding_text(f, self.by_id))
        self.query_one("#finding-scroll", VerticalScroll).scroll_home(animate=False)
        lines = f.get("evidence") or []
        heading.update(plain(f"Evidence ({len(lines)}) · Enter opens the line in Logs" if lines
                             else "No evidence lines"))
        self._fill_evidence(f)

    def _fill_evidence(self, f: dict | None) -> None:
        """The evidence lines as options, ``path:line`` fitted to the pane's width (the
        highlighted line kept)."""
        evidence = self.query_one("#evidence", EvidenceList)
        highlighted = evidence.highlighted
        evidence.clear_options()
        self._evidence_width = width = evidence.prompt_width
        lines = (f or {}).get("evidence") or []
        options: list[Option | None] = []
        for i, e in enumerate(lines):
            option = Option(evidence_prompt(e, width), id=str(i))
            options += [None, option] if i else [option]
        evidence.add_options(options)
        if lines:
            evidence.highlighted = min(highlighted or 0, len(lines) - 1)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.open_evidence(self.current_finding, int(event.option.id or 0))

    def open_evidence(self, f: dict | None, index: int) -> None:
        lines = (f or {}).get("evidence") or []
        if not 0 <= index < len(lines):
            self.notify("This finding has no evidence line to open.", severity="warning")
            return
        self.app.show_line(lines[index]["path"], int(lines[index]["line"]))  # type: ignore[attr-defined]

    # --- actions -------------------------------------------------------------------------------

    def action_open_evidence(self) -> None:
        evidence = self.query_one("#evidence", EvidenceList)
        index = 0
        if evidence.has_focus and evidence.highlighted is not None:
            index = int(evidence.get_option_at_index(evidence.highlighted).id or 0)
        self.open_evidence(self.current_finding, index)

    def action_focus_evidence(self) -> None:
        self.set_class(False, "-verdict-full")
        evidence = self.query_one("#evidence", EvidenceList)
        if evidence.option_count:
            evidence.focus()

    def action_focus_findings(self) -> None:
        self.set_class(False, "-verdict-full")
        self.query_one("#findings", FindingsTable).focus()

    def action_toggle_verdict(self) -> None:
        full = not self.has_class("-verdict-full")
        self.set_class(full, "-verdict-full")
        target = self.query_one("#verdict") if full else self.query_one("#findings")
        self.call_after_refresh(target.focus)  # a widget just shown again can take focus only once laid out

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        if action == "show_stack":
            return culprit_stack_finding(self.findings) is not None   # False: not in the footer
        return True

    def action_show_stack(self) -> None:
        """Select the finding with the culprit's stack and scroll its details to the stack."""
        f = culprit_stack_finding(self.findings)
        if f is None:
            return
        self.set_class(False, "-verdict-full")
        self.query_one("#findings", FindingsTable).move_cursor(row=self.findings.index(f))
        self.show_finding(self.findings.index(f))
        self.call_after_refresh(self._scroll_to_stack)

    def _scroll_to_stack(self) -> None:
        """The details' wrapped line that heads the stack, at the top of the pane, which takes
        the focus so that the arrows and page keys scroll it on. (The pane keeps its scrollbar's
        gutter, so the text drawn now wraps as it will once the scrollbar shows.)"""
        box = self.query_one("#finding-scroll", VerticalScroll)
        text = self.query_one("#finding-text", Static)
        lines = text.render_lines(Region(0, 0, *text.size))   # as drawn: Textual's own wrapping
        row = next((i for i, line in enumerate(lines) if line.text.lstrip().startswith(STACK_HEADING)), 0)
        box.scroll_to(y=row, animate=False, immediate=True)
        box.focus()

    def action_goto_cause(self) -> None:
        f = self.current_finding
        ids = [f2.get("id") for f2 in self.findings]
        for cause_id in (f or {}).get("caused_by") or []:
            if cause_id in ids:
                self.query_one("#findings", FindingsTable).move_cursor(row=ids.index(cause_id))
                return
        self.notify("No finding causes this one.", severity="information")
