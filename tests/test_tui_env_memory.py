"""The Environment (4) and Memory (5) screens: opened by key on the samples, driven with Pilot
(only differences, filter, sort, jump to OOM, evidence lines), quiet on the healthy run, data
shown literally (markup and escape sequences in variable values), snapshots at 120x40."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import DataTable, Input, Static

from tests.tui_helpers import app_of, drive, settle
from postmortem.tui.screens.memory import bar
from postmortem.views.env_memory_data import UNSET, RankMemory, env_view, memory_view
from postmortem.tui.session import open_store

CRAFTED = "[bold red]x[/] [link=http://e]y[/link] \x1b]0;pwn\x07"
MARKUP = "[bold red]x[/] [link=http://e]y[/link]"     # the env dump parser drops values with control characters


async def _ready(pilot) -> None:
    """Let the screen's loading worker finish and its result be applied and measured."""
    await settle(pilot, lambda app: getattr(app.screen, "view", None) is not None)


def _matrix(app) -> DataTable:
    return app.screen.query_one("#env-matrix", DataTable)


def _keys(app) -> list[str]:
    return [v.key for v in app.screen.shown]


def _row_text(table: DataTable, index: int) -> list[str]:
    return [c.plain for c in table.get_row_at(index)]


def _styles(text) -> set[str]:
    return {str(span.style) for span in text.spans} | ({str(text.style)} if text.style else set())


def _record_show_line(app) -> list[tuple[str, int]]:
    """Replace App.show_line (the Logs screen is another task's) by a recorder."""
    calls: list[tuple[str, int]] = []
    app.show_line = lambda path, line: calls.append((path, line))
    return calls


# -- environment ----------------------------------------------------------------------------------

def test_env_mismatch_puts_the_must_match_difference_first_in_red(sample_store):
    app = app_of(sample_store("env-mismatch"))
    calls = _record_show_line(app)

    async def steps(pilot):
        await pilot.press("4")
        await _ready(pilot)
        table = _matrix(app)
        nodes = app.screen.view.nodes
        first = table.get_row_at(0)
        odd = first[2 + nodes.index("h20-node-02")]     # variable, class, then one column per node
        detail = app.screen.query_one("#env-detail", DataTable)
        detail_rows = [_row_text(detail, i) for i in range(detail.row_count)]
        summary = app.screen.query_one("#env-summary", Static).render().plain
        title = app.screen.query_one("#env-detail-title", Static).render().plain
        classes = [v.klass for v in app.screen.shown]
        await pilot.press("e")
        return (app.current_mode, first[0].plain, odd.plain, _styles(odd), _styles(first[0]), detail_rows,
                summary, title, _keys(app), classes)
    mode, name, odd, odd_styles, name_styles, detail_rows, summary, title, keys, classes = drive(app, steps)
    assert mode == "environment"
    assert name == "✗ NCCL_PROTO" and "bold red" in name_styles
    assert odd == "Simple" and "bold red" in odd_styles
    assert "1 must-match variable differs: NCCL_PROTO" in summary
    assert "E001: NCCL_PROTO on h20-node-02 differs" in title
    # where it came from: NCCL's own echo and the node's env dump, with path:line
    assert ["h20-node-02", "env dump", "env/h20-node-02.env:28", "Simple"] in detail_rows
    assert any(r[0] == "h20-node-02" and r[1] == "NCCL echo" and r[2].endswith("stdout.log:35") for r in detail_rows)
    assert ["h20-node-01", "unset there", "", "<unset>"] in detail_rows
    # must-match variables first, the by-design ones (host names, ranks) last
    assert classes.index("per_rank") > max(i for i, k in enumerate(classes) if k == "must_match")
    assert keys[0] == "NCCL_PROTO"
    # `e` from the matrix opens the odd node's line
    assert len(calls) == 1 and "h20-node-02" in calls[0][0]


def test_only_differences_filter_and_escape(sample_store):
    app = app_of(sample_store("env-mismatch"), start="environment")

    async def steps(pilot):
        await _ready(pilot)
        seen = {"all": _keys(app)}
        await pilot.press("d")
        seen["diffs"] = _keys(app)
        await pilot.press("d", "slash")
        seen["box_focused"] = isinstance(app.screen.focused, Input)
        await pilot.press("i", "b", "_")
        seen["ib"] = _keys(app)
        await pilot.press("enter")
        seen["kept"] = _keys(app)
        seen["matrix_focused"] = app.screen.focused is _matrix(app)
        await pilot.press("down", "enter")          # select a variable: focus moves to its lines
        seen["detail_focused"] = app.screen.focused.id
        await pilot.press("escape")
        seen["cleared"] = _keys(app)
        await pilot.press("slash", "[", "x")        # not a regex: a substring
        seen["bad_regex"] = _keys(app)
        await pilot.press("escape")
        await pilot.press("slash", *"^nccl_(proto|algo)$")
        seen["regex"] = _keys(app)
        return seen
    seen = drive(app, steps)
    assert seen["diffs"][0] == "NCCL_PROTO"
    assert set(seen["diffs"]) == {"NCCL_PROTO", "HOSTNAME", "SLURMD_NODENAME", "SLURM_NODEID"}
    assert seen["box_focused"]
    assert seen["ib"] and all("ib_" in k.lower() for k in seen["ib"]) and "NCCL_IB_HCA" in seen["ib"]
    assert seen["kept"] == seen["ib"] and seen["matrix_focused"]
    assert seen["detail_focused"] == "env-detail"
    assert seen["cleared"] == seen["all"]
    assert seen["bad_regex"] == []
    assert seen["regex"] == ["NCCL_PROTO"]


def test_healthy_run_highlights_no_must_match_difference(sample_store):
    app = app_of(sample_store("healthy-40r"), start="environment")

    async def steps(pilot):
        await _ready(pilot)
        table = _matrix(app)
        styles = set()
        for i in range(table.row_count):
            for c in table.get_row_at(i):
                styles |= _styles(c)
        await pilot.press("d")
        return styles, app.screen.query_one("#env-summary", Static).render().plain, _keys(app), \
            [v for v in app.screen.view.variables if v.must_differ]
    styles, summary, diffs, must = drive(app, steps)
    assert "bold red" not in styles and "bold dark_orange" not in styles
    assert "no must-match variable differs" in summary and not must
    # the only differences are host names and node ids: by design, shown muted, not flagged
    assert set(diffs) == {"HOSTNAME", "SLURMD_NODENAME", "SLURM_NODEID"}


@pytest.fixture(scope="module")
def crafted_store(tmp_path_factory) -> Path:
    """Three nodes' env dumps (node-c's NCCL_PROTO and WEIRD_VAR carry markup) and node-c's NCCL
    echo of NCCL_ALGO with markup and an OSC escape sequence."""
    from postmortem.analyzer.pipeline import analyze
    from postmortem.rules.report import build_report

    root = tmp_path_factory.mktemp("crafted")
    job = root / "job"
    (job / "env").mkdir(parents=True)
    (job / "logs" / "node-c").mkdir(parents=True)
    for node, proto in (("node-a", "Simple"), ("node-b", "Simple"), ("node-c", MARKUP)):
        (job / "env" / f"{node}.env").write_text(
            f"SLURM_JOB_ID=7\nHOSTNAME={node}\nNCCL_PROTO={proto}\nNCCL_DEBUG=INFO\nWEIRD_VAR={MARKUP}\n"
            "PATH=/usr/bin\n")
    (job / "logs" / "node-c" / "rank0.log").write_text(
        f"node-c:1:1 [0] NCCL INFO NCCL_ALGO set by environment to {CRAFTED}\n")
    db = root / "crafted.duckdb"
    run = analyze([job], db_path=db)
    build_report(run)
    run.con.close()
    return db


def test_crafted_values_are_shown_literally(crafted_store):
    app = app_of(crafted_store, start="environment")

    async def steps(pilot):
        await _ready(pilot)
        table = _matrix(app)
        rows = {app.screen.shown[i].key: table.get_row_at(i) for i in range(table.row_count)}
        await pilot.press("slash", *"ALGO", "enter")
        detail = app.screen.query_one("#env-detail", DataTable)
        lines = [[c.plain for c in detail.get_row_at(i)] for i in range(detail.row_count)]
        return rows, lines, app.screen.query_one("#env-detail-title", Static).render().plain, _keys(app)
    rows, lines, title, keys = drive(app, steps)
    assert keys == ["NCCL_ALGO"] and "E001" in title
    # the brackets are on screen, not interpreted (the matrix cuts long values; the detail has them whole)
    proto = rows["NCCL_PROTO"]
    assert any(c.plain.startswith("[bold red]x[/] [link=") and not c.spans for c in proto[2:])
    weird = rows["WEIRD_VAR"]
    assert all(c.plain.startswith("[bold red]x[/] [link=") and not c.spans for c in weird[2:])
    value = next(r[3] for r in lines if r[0] == "node-c")
    assert value.startswith("[bold red]x[/] [link=http://e]y[/link] ")
    assert "\x1b" not in value and "\x07" not in value and "\\x1b" in value and "\\x07" in value
    algo = [c.plain for c in rows["NCCL_ALGO"]]
    assert all("\x1b" not in c for c in algo) and any(c.startswith("[bold red]x[/]") for c in algo)


def test_screens_say_when_the_run_has_nothing_to_show(crafted_store, oom_store):
    async def env_steps(pilot):
        await _ready(pilot)
        return _matrix(pilot.app).row_count, pilot.app.screen.query_one("#env-summary", Static).render().plain

    async def memory_steps(pilot):
        await _ready(pilot)
        await pilot.press("o", "s", "e")
        return _mem_table(pilot.app).row_count, pilot.app.screen.query_one("#mem-summary", Static).render().plain
    assert drive(app_of(oom_store, start="environment"), env_steps) == (
        0, "No environment in this run: no env dumps, nccl.conf copies or NCCL 'set by environment' lines were found.")
    rows, summary = drive(app_of(crafted_store, start="memory"), memory_steps, size=(80, 24))
    assert rows == 0 and summary.startswith("No memory lines and no OOM in this run")


def test_env_view_reuses_the_rule_comparison(sample_store):
    session = open_store(sample_store("env-mismatch"))
    view = env_view(session.run, session.report)
    proto = view.variables[0]
    assert proto.key == "NCCL_PROTO" and proto.must_differ and proto.odd == {"h20-node-02"}
    assert proto.shown["h20-node-01"] == UNSET and proto.shown["h20-node-02"] == "Simple"
    assert [v.key for v in view.must_differ] == ["NCCL_PROTO"]
    ifname = next(v for v in view.variables if v.key == "NCCL_SOCKET_IFNAME")
    assert ifname.klass == "per_node" and not ifname.odd and not ifname.flagged


# -- memory ---------------------------------------------------------------------------------------

def _mem_table(app) -> DataTable:
    return app.screen.query_one("#mem-table", DataTable)


def _ranks(app) -> list[int]:
    return [r.rank for r in app.screen.rows]


def test_memory_peak_bars_oom_sort_and_jump(sample_store):
    app = app_of(sample_store("memory-peak"))
    calls = _record_show_line(app)

    async def steps(pilot):
        await pilot.press("5")
        await _ready(pilot)
        table = _mem_table(app)
        seen = {"mode": app.current_mode, "ranks": _ranks(app),
                "rows": [_row_text(table, i) for i in range(table.row_count)],
                "summary": app.screen.query_one("#mem-summary", Static).render().plain}
        await pilot.press("s")
        seen["by_peak"] = _ranks(app)
        await pilot.press("s")
        seen["by_rank"] = _ranks(app)
        await pilot.press("o")
        seen["oom_row"] = app.screen.rows[table.cursor_row].rank
        seen["detail"] = app.screen.query_one("#mem-detail", Static).render().plain
        await pilot.press("enter")
        return seen
    seen = drive(app, steps)
    assert seen["mode"] == "memory" and seen["ranks"] == [0, 11]
    rank0, rank11 = seen["rows"]
    assert rank0[3:6] == ["85.6", "86.5", "90%"] and rank0[6] == ""
    assert "█" in rank0[2] and rank0[2].endswith("│")       # the capacity line at the end of the scale
    assert rank11[6] == "CUDA OOM"
    assert "capacity 95.6 GiB" in seen["summary"] and "CUDA OOM on rank 11" in seen["summary"]
    assert seen["by_peak"] == [11, 0] and seen["by_rank"] == [0, 11]
    assert seen["oom_row"] == 11 and "asked 2.0 GiB" in seen["detail"]
    assert calls == [(calls[0][0], 20)] and "h20-node-02" in calls[0][0]


def test_healthy_run_marks_no_oom(sample_store):
    app = app_of(sample_store("healthy-40r"), start="memory")

    async def steps(pilot):
        await _ready(pilot)
        table = _mem_table(app)
        rows = [_row_text(table, i) for i in range(table.row_count)]
        await pilot.press("o")
        return rows, app.screen.query_one("#mem-summary", Static).render().plain
    rows, summary = drive(app, steps)
    assert rows and all(r[6] == "" for r in rows)
    assert "no OOM" in summary and "OOM on" not in summary


@pytest.fixture(scope="module")
def oom_store(tmp_path_factory) -> Path:
    """Ranks 0 and 1 log Megatron memory lines; rank 2 raises the old CUDA OOM text."""
    from postmortem.analyzer.pipeline import analyze
    from postmortem.rules.report import build_report

    root = tmp_path_factory.mktemp("oom")
    job = root / "job"
    lines = {
        0: "[Rank 0] (after 10 iterations) memory (MB) | allocated: 47550.00 | max allocated: 95100.00 | "
           "reserved: 96500.00 | max reserved: 96500.00",
        1: "[Rank 1] (after 10 iterations) memory (MB) | allocated: 20000.00 | max allocated: 40000.00 | "
           "reserved: 42000.00 | max reserved: 42000.00",
        2: "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 95.58 GiB total capacity; "
           "88.00 GiB already allocated; 30.56 MiB free; 1.01 GiB cached)",
    }
    for rank, line in lines.items():
        d = job / "logs" / "attempt_0" / str(rank)
        d.mkdir(parents=True)
        (d / "stdout.log").write_text(line + "\n")
    (job / "nvidia-smi.csv").write_text(
        "index, name, pci.bus_id, memory.total [MiB]\n0, NVIDIA H20, 00000000:18:00.0, 97871 MiB\n")
    db = root / "oom.duckdb"
    run = analyze([job], db_path=db)
    build_report(run)
    run.con.close()
    return db


def test_cuda_oom_is_marked_on_its_rank_only(oom_store):
    app = app_of(oom_store, start="memory")

    async def steps(pilot):
        await _ready(pilot)
        table = _mem_table(app)
        return {r.rank: _row_text(table, i) for i, r in enumerate(app.screen.rows)}
    rows = drive(app, steps, size=(80, 24))
    assert rows[2][6] == "CUDA OOM" and rows[0][6] == "" and rows[1][6] == ""
    # capacity from the OOM line (95.58 GiB): rank 0's 96500 MiB reserved is 99% of it
    assert rows[0][5] == "99%" and rows[1][5] == "43%" and rows[2][3] == "88.0"


def test_memory_view_and_bar():
    row = RankMemory(0, "n", alloc=50.0, reserved=70.0)
    text = bar(row, capacity=100.0, top=100.0, width=10)
    assert text.plain == "█████▒▒··│"
    near = bar(RankMemory(1, "n", alloc=96.0, reserved=99.0), 100.0, 100.0, 10)
    assert near.plain == "██████████"[:9] + "┃" and "bold red" in _styles(near)


def test_memory_view_of_the_peak_sample(sample_store):
    session = open_store(sample_store("memory-peak"))
    view = memory_view(session.run, session.report)
    rank11 = next(r for r in view.rows if r.rank == 11)
    assert view.capacity == pytest.approx(97873.92) and rank11.cuda_oom == (rank11.cuda_oom[0], 20)
    assert rank11.at_oom and rank11.alloc == pytest.approx(90531.84)


def test_host_oom_kill_marks_the_nodes_ranks(sample_store):
    session = open_store(sample_store("host-oom-kill"))
    view = memory_view(session.run, session.report)
    marked = {r.rank: r.host_oom_killed for r in view.rows if r.host_oom}
    assert sorted(marked) == list(range(8, 16))          # h20-node-02's ranks
    assert [r for r, killed in marked.items() if killed] == [13]
    assert not any(r.cuda_oom for r in view.rows)


# -- snapshots ------------------------------------------------------------------------------------

def test_snapshot_environment_env_mismatch(snap_compare, sample_store):
    assert snap_compare(app_of(sample_store("env-mismatch"), start="environment"), terminal_size=(120, 40),
                        run_before=_ready)


def test_snapshot_memory_memory_peak(snap_compare, sample_store):
    assert snap_compare(app_of(sample_store("memory-peak"), start="memory"), terminal_size=(120, 40),
                        run_before=_ready)
