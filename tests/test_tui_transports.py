"""The Transports screen: per communicator and hop, the transport NCCL chose; the SHM hops of
slow-ring and the socket hops of slow-ring-sockets stand out (marked ✗, bold red), a healthy
run marks none; the communicator selector, the off-NVLink filter, the node matrix, Enter to the
hop's NCCL line; data shown literally (never as markup)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import ContentSwitcher, DataTable, Static

from tests.conftest import ROOT
from tests.tui_helpers import app_of, drive, settle
from postmortem.views import transport_rows as tr
from postmortem.tui.screens import transports as screen_module
from postmortem.tui.session import open_store

CRAFTED = "[bold red]x[/] [link=http://e]y[/link] \x1b]0;pwn\x07"
SHM_HOPS = [f"{r}→{r + 1}" for r in range(16, 23)]  # h20-node-03's ring hops (ranks 16-23)
SOCKET_HOPS = ["7→8", "15→16", "23→24", "31→0"]  # the ring's inter-node hops


async def loaded(pilot) -> None:
    """Wait for the view's worker, for the screen to apply it and for its tables to be measured."""
    await settle(pilot, lambda app: getattr(app.screen, "view", None) is not None)


def shown_rows(screen) -> list[dict]:
    """The hop table as shown: each row's cells (plain text) and styles, by column name."""
    table = screen.query_one("#hops", DataTable)
    rows = []
    for i in range(table.row_count):
        cells = table.get_row_at(i)
        assert all(isinstance(c, Text) for c in cells)
        rows.append({name or "mark": c.plain for name, c in zip(screen_module.HOP_COLUMNS, cells)}
                    | {"tier_style": str(cells[3].style), "mark_style": str(cells[0].style)})
    return rows


def marked(rows: list[dict], glyph: str = "✗") -> list[dict]:
    return [r for r in rows if r["mark"] == glyph]


# -- the model the screen shows (no Textual) ------------------------------------------------------------


def test_rows_mark_exactly_the_off_tier_hops(sample_store):
    for sample, tier, hops in (("slow-ring", "SHM", SHM_HOPS), ("slow-ring-sockets", "Socket", SOCKET_HOPS)):
        v = tr.load(open_store(sample_store(sample)).run)
        world = v["communicators"][0]
        assert world["nranks"] == 32
        rows = tr.hop_rows(world)
        off = [r for r in rows if r.mark == tr.OFF_TIER]
        assert [r.ranks for r in off] == hops, sample
        assert {r.tier for r in off} == {tier} and all(r.channels == "00-07" and r.count == 8 for r in off)
        assert all(r.tier != tier for r in rows if r.mark != tr.OFF_TIER)
        nodes, cells = tr.node_matrix(world)
        assert len(nodes) == 4
        off_cells = {pair for pair, c in cells.items() if c.off_tier}
        if tier == "SHM":
            assert off_cells == {("h20-node-03", "h20-node-03")} and cells[("h20-node-03",) * 2].tiers == ["SHM"]
        else:
            assert len(off_cells) == 4 and all(src != dst for src, dst in off_cells)
            assert all(cells[pair].tiers == ["Socket"] for pair in off_cells)


def test_healthy_run_marks_no_hop_off_tier(sample_store):
    v = tr.load(open_store(sample_store("healthy-40r")).run)
    assert len(v["communicators"]) >= 2
    for comm in v["communicators"]:
        assert not [r for r in tr.hop_rows(comm) if r.mark == tr.OFF_TIER], comm["comm_key"]
        assert not [c for c in tr.node_matrix(comm)[1].values() if c.off_tier]
        assert not [text for text, kind in tr.summary_lines(comm, v) if kind == tr.OFF_TIER]
    # the inter-node RoCE hops are the world ring's slowest tier: marked ▼, not ✗
    slow = [r for r in tr.hop_rows(v["communicators"][0]) if r.mark == tr.SLOWEST]
    assert slow and {r.tier for r in slow} == {"RoCE GDR"}


# -- Pilot -------------------------------------------------------------------------------------------


def test_slow_ring_opened_with_3_shows_the_shm_hops_marked(sample_store):
    app = app_of(sample_store("slow-ring"))

    async def steps(pilot):
        await pilot.press("3")
        await loaded(pilot)
        screen = app.screen
        comms = screen.query_one("#comms", DataTable)
        summary = screen.query_one("#summary", Static).visual.plain
        detail = screen.query_one("#detail", Static).visual.plain
        return (app.current_mode, type(screen).__name__, comms.row_count, shown_rows(screen),
                screen.query_one("#hops", DataTable).cursor_row, summary, detail)
    mode, name, ncomms, rows, cursor, summary, detail = drive(app, steps)
    assert (mode, name, ncomms) == ("transports", "TransportsScreen", 5)
    assert len(rows) == 32 and all(r["ch"] == "00-07" for r in rows)
    off = marked(rows)
    assert [r["ranks"] for r in off] == SHM_HOPS
    assert all(r["tier"] == "SHM" and r["hosts"] == "h20-node-03" and "bold red" in r["tier_style"]
               and r["transport"] == "SHM/direct/direct" and r["GB/s"] == "~50" for r in off)
    assert not [r for r in rows if r not in off and ("red" in r["tier_style"] or r["mark"])]
    nvlink = next(r for r in rows if r["ranks"] == "0→1")
    assert (nvlink["tier"], nvlink["GB/s"], nvlink["transport"]) == ("NVLink", "~370", "P2P/CUMEM/read")
    roce = next(r for r in rows if r["ranks"] == "7→8")
    assert (roce["tier"], roce["NIC"], roce["hosts"]) == ("RoCE GDR", "mlx5_7 GDR→mlx5_0 GDR", "h20-node-01→h20-node-02")
    assert cursor == 16  # opened on the first off-tier hop
    assert "✗ 56 hops off their expected tier" in summary and "GPU H20" in summary
    assert "rank 16 h20-node-03 GPU0 (0000:18:00.0) → rank 17 h20-node-03 GPU1 (0000:2a:00.0)" in detail


def test_nccls_own_reasons_are_quoted_as_postmortem_transports_prints_them(sample_store):
    """slow-ring's h20-node-03 logs "P2P is disabled between connected GPUs 0 and 1" (and 1-2 ...
    7-0): the summary quotes the first of them and counts the rest, each SHM hop's line quotes
    the one for its two GPUs, word for word as `postmortem transports` prints them (the view's
    p2p_refusals, grouped by postmortem.views.transports.refusal_groups); NVLink hops and a healthy run
    quote none."""
    from postmortem.views.transports import render_text

    def p2p(a, b):
        return (f"P2P is disabled between connected GPUs {a} and {b}. "
                "You can repress this message with NCCL_IGNORE_DISABLED_P2P=1.")
    v = tr.load(open_store(sample_store("slow-ring")).run)
    world = v["communicators"][0]
    cli = render_text(v)
    for a in range(8):
        assert f"h20-node-03: {p2p(a, (a + 1) % 8)}" in cli   # what the CLI prints, the TUI quotes
    hop = next(h for h in world["hops"] if (h["src_rank"], h["dst_rank"]) == (16, 17))
    assert tr.nccl_reasons(hop, v) == [p2p(0, 1)]
    assert tr.nccl_reasons(next(h for h in world["hops"] if h["tier"] == "NVLink"), v) == []
    summary = [text for text, kind in tr.summary_lines(world, v) if text.startswith("NCCL said")]
    assert summary == [f"NCCL said on h20-node-03: {p2p(0, 1)} (x2)",
                       "NCCL said 6 more like it (each hop's own: the line under the hops)"]   # 7-0 is no hop of this ring
    healthy = tr.load(open_store(sample_store("healthy-40r")).run)
    assert not any(text.startswith("NCCL said") for c in healthy["communicators"]
                   for text, _ in tr.summary_lines(c, healthy))

    app = app_of(sample_store("slow-ring"), start="transports")

    async def steps(pilot):
        await loaded(pilot)
        screen = app.screen
        first = screen.query_one("#detail", Static).visual.plain
        await pilot.press("down")   # 17→18: GPUs 1 and 2
        second = screen.query_one("#detail", Static).visual.plain
        return screen.query_one("#summary", Static).visual.plain, first, second
    summary, first, second = drive(app, steps)
    assert f"NCCL said on h20-node-03: {p2p(0, 1)}" in summary
    assert first.startswith("✗ SHM between GPUs of one host where P2P (NVLink) is expected: "
                            f"NCCL said: {p2p(0, 1)} rank 16 h20-node-03 GPU0")
    assert f"NCCL said: {p2p(1, 2)} rank 17" in second


def test_sockets_sample_shows_the_socket_hops_marked(sample_store):
    app = app_of(sample_store("slow-ring-sockets"), start="transports")

    async def steps(pilot):
        await loaded(pilot)
        return shown_rows(app.screen), app.screen.query_one("#summary", Static).visual.plain
    rows, summary = drive(app, steps)
    off = marked(rows)
    assert [r["ranks"] for r in off] == SOCKET_HOPS
    assert all(r["tier"] == "Socket" and "bold red" in r["tier_style"] and r["GB/s"] == "TCP" for r in off)
    assert {r["tier"] for r in rows if r not in off} == {"NVLink"}
    assert "TCP sockets where RDMA NICs would carry it" in summary


def test_healthy_screen_has_no_off_tier_marker(sample_store):
    app = app_of(sample_store("healthy-40r"), start="transports")

    async def steps(pilot):
        await loaded(pilot)
        seen = []
        for _ in range(app.screen.query_one("#comms", DataTable).row_count):
            seen.append(shown_rows(app.screen))
            await pilot.press("c")
        comm_marks = [c.plain for c in app.screen.query_one("#comms", DataTable).get_column_at(3)]
        return seen, comm_marks
    seen, comm_marks = drive(app, steps)
    assert len(seen) == 6
    assert not [r for rows in seen for r in rows if r["mark"] == "✗" or "red" in r["tier_style"]]
    assert set(comm_marks) == {"·"}
    assert {r["tier"] for r in marked(seen[0], "▼")} == {"RoCE GDR"}


def test_switch_communicator_filter_and_matrix(sample_store):
    app = app_of(sample_store("slow-ring"), start="transports")

    async def steps(pilot):
        await loaded(pilot)
        screen = app.screen
        out = {}
        await pilot.press("c")  # the communicator of h20-node-03 alone: every hop SHM
        out["next"] = (screen.comm_index, screen.query_one("#comms", DataTable).cursor_row, shown_rows(screen))
        await pilot.press("C")
        out["previous"] = screen.comm_index
        screen.query_one("#comms", DataTable).focus()
        await pilot.press("down", "down")
        out["by_table"] = (screen.comm_index, screen.comm["hosts"])
        await pilot.press("C", "C")
        await pilot.press("f")
        out["filtered"] = (shown_rows(screen), screen.query_one("#legend", Static).visual.plain)
        await pilot.press("f")
        out["unfiltered"] = len(shown_rows(screen))
        await pilot.press("o")
        out["ungrouped"] = shown_rows(screen)
        await pilot.press("o", "m")
        matrix = screen.query_one("#matrix", DataTable)
        out["matrix"] = (screen.query_one("#views", ContentSwitcher).current,
                         [[c.plain for c in matrix.get_row_at(i)] for i in range(matrix.row_count)],
                         str(matrix.get_cell_at((2, 3)).style), str(matrix.get_cell_at((0, 1)).style),
                         screen.query_one("#detail", Static).visual.plain, app.focused is matrix)
        await pilot.press("m")
        out["back"] = screen.query_one("#views", ContentSwitcher).current
        return out
    out = drive(app, steps)
    index, cursor, rows = out["next"]
    assert (index, cursor) == (1, 1)
    assert len(rows) == 8 and {r["tier"] for r in rows} == {"SHM"} and len(marked(rows)) == 8
    assert out["previous"] == 0
    assert out["by_table"] == (2, ["h20-node-02"])
    filtered, legend = out["filtered"]
    assert {r["tier"] for r in filtered} == {"SHM", "RoCE GDR"} and len(filtered) == 11
    assert [r["ranks"] for r in marked(filtered)] == SHM_HOPS
    assert legend.startswith("88 hops off NVLink in 11 rows")
    assert out["unfiltered"] == 32
    assert len(out["ungrouped"]) == 256 and len(marked(out["ungrouped"])) == 56
    assert {r["ch"] for r in out["ungrouped"]} == {f"{c:02d}" for c in range(8)}
    view, cells, off_style, on_style, detail, focused = out["matrix"]
    assert view == "matrix" and focused
    assert cells[0] == ["h20-node-01", "NVLink", "RoCE GDR", "·", "·"]
    assert cells[2] == ["h20-node-03", "·", "·", "✗ SHM", "RoCE GDR"]
    assert "bold red" in off_style and "red" not in on_style
    assert [c for row in cells for c in row if "✗" in c] == ["✗ SHM"]
    assert detail == "h20-node-03 (intra-node): 56 hops on SHM; ✗ 56 off their expected tier"
    assert out["back"] == "hops"


def test_enter_opens_the_hops_nccl_line(sample_store):
    app = app_of(sample_store("slow-ring"), start="transports")
    asked = []
    app.show_line = lambda path, line: asked.append((path, line))

    async def steps(pilot):
        await loaded(pilot)
        await pilot.press("enter")  # the cursor is on 16→17, the first SHM hop
    drive(app, steps)
    assert len(asked) == 1
    path, line = asked[0]
    text = (ROOT / "sample_logs" / "slow-ring" / path).read_text(encoding="utf-8").splitlines()[line - 1]
    assert "via SHM/direct/direct" in text and "16[" in text and "-> 17[" in text


def test_data_is_shown_literally(sample_store, monkeypatch):
    real_load = tr.load

    def crafted_load(run, gpu=None):
        v = real_load(run, gpu=gpu)
        comm = v["communicators"][0]
        comm["comm_key"] = CRAFTED
        comm["hosts"] = [CRAFTED, *comm["hosts"][1:]]
        comm["tuning"] = [{"func": CRAFTED, "bytes": 1, "algo": "RING", "proto": CRAFTED, "ch_lo": 0, "ch_hi": 1,
                           "kernel": None, "time_us": 1.0}]
        for h in comm["hops"] + comm["attention"]:
            if h["src_rank"] == 16:
                h["src_host"] = h["dst_host"] = CRAFTED
                h["detail"] = CRAFTED
        return v
    monkeypatch.setattr(screen_module.tr, "load", crafted_load)
    app = app_of(sample_store("slow-ring"), start="transports")

    async def steps(pilot):
        await loaded(pilot)
        screen = app.screen
        row = screen.query_one("#hops", DataTable).get_row_at(16)
        comm = screen.query_one("#comms", DataTable).get_row_at(0)[0]
        await pilot.press("m")
        matrix = screen.query_one("#matrix", DataTable)
        labels = [col.label for col in matrix.columns.values()]
        return (row, comm, screen.query_one("#summary", Static).visual.plain,
                screen.query_one("#detail", Static).visual.plain, labels, app.screen.title)
    row, comm, summary, detail, labels, title = drive(app, steps)
    shown = CRAFTED.replace("\x1b", "\\x1b").replace("\x07", "\\x07")
    hosts, transport = row[6], row[5]
    assert isinstance(hosts, Text) and hosts.plain == shown and not hosts.spans
    assert transport.plain == f"SHM/{shown}"
    assert comm.plain == shown
    assert f"{shown} · 32 ranks" in summary and f"hosts: {shown}, h20-node-02" in summary
    assert f"algo: {shown} 1 B → RING/{shown} ch 0..1" in summary
    assert "\x1b" not in summary + detail and "[bold red]x[/]" in detail
    assert any(isinstance(label, Text) and label.plain == shown for label in labels)


# -- snapshots (120x40) ------------------------------------------------------------------------------


def test_snapshot_slow_ring_opened(snap_compare, sample_store):
    assert snap_compare(app_of(sample_store("slow-ring"), start="transports"), terminal_size=(120, 40),
                        run_before=loaded)


def test_snapshot_slow_ring_off_nvlink(snap_compare, sample_store):
    async def filtered(pilot):
        await loaded(pilot)
        await pilot.press("f")
        await pilot.pause()
    assert snap_compare(app_of(sample_store("slow-ring"), start="transports"), terminal_size=(120, 40),
                        run_before=filtered)


def test_snapshot_slow_ring_matrix(snap_compare, sample_store):
    async def matrix(pilot):
        await loaded(pilot)
        await pilot.press("m")
        await pilot.pause()
    assert snap_compare(app_of(sample_store("slow-ring"), start="transports"), terminal_size=(120, 40),
                        run_before=matrix)


def test_measured_links_are_shown_beside_the_hops_with_the_slow_nic_marked(sample_store):
    """slow-nic-forced-proto: perftest on every node, h20-node-03's ib_send_bw at a fifth of line
    rate (L005). `b` shows the measurements, the slow one marked ✗ with the finding; `b` again
    goes back to the hops."""
    store = sample_store("slow-nic-forced-proto")
    session = open_store(store)
    rows = tr.measured_rows(session.run, session.report)
    slow = [r for r in rows if r.finding]
    assert slow and {r.node for r in slow} == {"h20-node-03"} and all(r.finding.startswith("L005") for r in slow)
    assert {r.node for r in rows if r.tool.startswith("perftest")} >= {"h20-node-01", "h20-node-02", "h20-node-04"}
    app = app_of(store, start="transports")

    async def steps(pilot):
        await loaded(pilot)
        await pilot.press("b")
        await settle(pilot, lambda a: a.screen.measured is not None)
        screen = app.screen
        table = screen.query_one("#measured", DataTable)
        shown = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        current = screen.query_one("#views", ContentSwitcher).current
        target = next(i for i, row in enumerate(shown) if row[0] == "✗")
        table.move_cursor(row=target)
        await pilot.pause()
        detail = screen.query_one("#detail", Static).visual.plain
        await pilot.press("b")
        return current, shown, detail, screen.query_one("#views", ContentSwitcher).current
    current, shown, detail, back = drive(app, steps)
    assert current == "measured" and back == "hops"
    assert [row for row in shown if row[0] == "✗"] and all(row[1] == "h20-node-03" for row in shown if row[0] == "✗")
    assert "Gb/s" in " ".join(row[4] for row in shown)
    assert detail.startswith("L005 ")
