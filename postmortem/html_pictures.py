"""The HTML report's pictures: inline SVG drawn from the store (no script, no network).

* **Around the failure, per rank** (``timeline``): a window centred on the hang's start (the
  last training step before the job stood still) or, without a hang, on the first failure;
  widened to hold the first failure and the node events (Xid, link flaps, OOM kills) near it.
  Per rank, the state its c10d status lines give (steps progressing, waiting in a collective,
  nothing in flight), its timeouts, errors, warnings and last line; per node with kernel-log
  events, those events; the job's training steps on a lane of their own; labelled lines at the
  last step, the node events, the first failure and the end of the logs.
* **Ring transport map** (``ring_map``): the largest communicator's channel-0 ring. Up to
  ``MATRIX_ABOVE`` nodes, one box per host in ring order (a snake of rows of up to five), each
  hop coloured and labelled by its tier; above it, a node matrix: one cell per host in ring
  order, its fill the intra-node transport, the bar at its right edge the hop to the next host.
* **Memory peak per rank** (``memory``): the numbers of the TUI's Memory screen
  (``postmortem.views.memory_view``: peaks, capacity, CUDA OOMs and host OOM kills), OOMs marked.
* **Step time per iteration** (``steps``).

Every chart has axes with ticks and units. Colours are CSS classes (``CSS``), so the page's
``prefers-color-scheme: dark`` rules recolour the pictures with the text. Every piece of text
that comes from a log or a file name goes through ``e`` (``html.escape`` after ``safe``).

Layout is computed here, not left to the browser: text widths are estimated
(``text_width``) and labels are placed where they cannot cover each other or a box; the tests
check that in markup and in headless chromium.
"""

from __future__ import annotations

import html
import math
import re
from datetime import datetime, timedelta


from postmortem.analyzer.ranges import rank_ranges
from postmortem.views.timeline import (NODE_MAJOR, Entry, failure_marks, moments, node_events, progress_states,
                                       rank_nodes, steps_times, store_of)
from postmortem.views.render import known, safe

# Estimated advance of a sans-serif glyph, as a fraction of the font size (system-ui, DejaVu
# Sans: digits 0.55-0.64, lower case 0.5-0.62, capitals up to 0.75). Over-estimating is safe.
CHAR_W = 0.62
WIDTH = 1040            # drawing width of every picture (the page column is 1100 px wide less padding)
MAX_LANES = 40          # rank lanes drawn in the timeline
MAX_MEMORY_ROWS = 48
MATRIX_ABOVE = 16       # more hosts than this: a node matrix instead of boxes

CSS = """
:root{color-scheme:light dark;--fg:#1c1c1c;--bg:#fff;--muted:#666;--rule:#ddd;--panel:#fafafa;--code:#f4f4f4;
--axis:#888;--grid:#e6e6e6;--box:#fff;--prog:#66bb6a;--wait:#ffb300;--idle:#b0bec5;--bad:#c62828;--warn:#ef6c00;
--node:#6a1b9a;--stepbg:#e8f5e9;--hangbg:#fdecea;--alloc:#1565c0;--resv:#90caf9;--near:#c62828;--nearresv:#ef9a9a;
--nvlink:#2e7d32;--pcie:#1565c0;--gdr:#6a1b9a;--net:#ab47bc;--shm:#ef6c00;--socket:#c62828;--net1:#8d1b1b;
--unknown:#78909c}
@media (prefers-color-scheme: dark){:root{--fg:#e4e4e4;--bg:#15171a;--muted:#a0a0a0;--rule:#3a3d42;
--panel:#1e2126;--code:#23262b;--axis:#9a9a9a;--grid:#2c2f34;--box:#1e2126;--prog:#43a047;--wait:#c79100;
--idle:#546e7a;--bad:#ef5350;--warn:#ffa726;--node:#ce93d8;--stepbg:#1b2a1e;--hangbg:#3a1f1f;--alloc:#64b5f6;
--resv:#1e4f7a;--near:#ef5350;--nearresv:#7f2f2f;--nvlink:#66bb6a;--pcie:#64b5f6;--gdr:#ce93d8;--net:#ba68c8;
--shm:#ffa726;--socket:#ef5350;--net1:#e57373;--unknown:#90a4ae}}
svg.pic{display:block;max-width:100%;height:auto;margin:4px 0}
svg.pic text{fill:var(--fg)}svg.pic text.muted{fill:var(--muted)}svg.pic text.bad{fill:var(--bad)}
svg.pic text.on-fill{fill:#fff}
svg.pic .axis{stroke:var(--axis);stroke-width:1}svg.pic .grid{stroke:var(--grid);stroke-width:1}
svg.pic .s-prog{fill:var(--prog)}svg.pic .s-wait{fill:var(--wait)}svg.pic .s-idle{fill:var(--idle)}
svg.pic .m-timeout,svg.pic .m-error{fill:var(--bad)}svg.pic .m-warning{fill:var(--warn)}
svg.pic .m-node{fill:var(--node)}svg.pic .m-last{fill:var(--fg)}svg.pic .m-step{stroke:var(--prog);stroke-width:1.5}
svg.pic .bg-step{fill:var(--stepbg)}svg.pic .bg-hang{fill:var(--hangbg)}
svg.pic .an{stroke-width:1.2;stroke-dasharray:4 3}svg.pic .an-bad{stroke:var(--bad)}
svg.pic .an-node{stroke:var(--node)}svg.pic .an-step{stroke:var(--prog)}svg.pic .an-end{stroke:var(--axis)}
svg.pic .culprit{fill:none;stroke:var(--bad);stroke-width:2}
svg.pic .alloc{fill:var(--alloc)}svg.pic .resv{fill:var(--resv)}svg.pic .alloc.near{fill:var(--near)}
svg.pic .resv.near{fill:var(--nearresv)}svg.pic .cap{stroke:var(--bad);stroke-width:1.5;stroke-dasharray:5 3}
svg.pic .oom{fill:var(--bad)}svg.pic .oom-ring{fill:none;stroke:var(--bad);stroke-width:2}
svg.pic .line{fill:none;stroke:var(--alloc);stroke-width:1.5}
svg.pic .box{fill:var(--box);stroke-width:2.5}svg.pic .hop{fill:none;stroke-width:2.5}
svg.pic .hop.slow{stroke-width:5}svg.pic .hop.flagged{stroke:var(--bad)!important}
svg.pic .cell{stroke:var(--bg);stroke-width:1}svg.pic .cell.flagged{stroke:var(--bad);stroke-width:2.5}
""" + "".join(f"svg.pic .t-{k}{{stroke:var(--{k})}}svg.pic .f-{k}{{fill:var(--{k})}}.sw.f-{k}{{background:var(--{k})}}"
              for k in ("nvlink", "pcie", "gdr", "net", "shm", "socket", "net1", "unknown")) + """
.sw.s-prog{background:var(--prog)}.sw.s-wait{background:var(--wait)}.sw.s-idle{background:var(--idle)}
.sw.m-timeout{background:var(--bad)}.sw.m-warning{background:var(--warn)}.sw.m-node{background:var(--node)}
.sw.m-last{background:var(--fg)}.sw.bg-step{background:var(--stepbg);outline:1px solid var(--prog)}
.sw.bg-hang{background:var(--hangbg);outline:1px solid var(--bad)}.sw.alloc{background:var(--alloc)}
.sw.resv{background:var(--resv)}.sw.cap{background:var(--bad)}.sw.m-step{background:var(--prog)}
"""


def e(value) -> str:
    """Escaped text for HTML: markup and terminal escapes from a log line show as text."""
    return html.escape(safe("" if value is None else str(value)), quote=True)


def text_width(text: str, size: float) -> float:
    """The estimated width of ``text`` at ``size`` px (see ``CHAR_W``)."""
    return len(text) * size * CHAR_W


def fit(text: str, size: float, width: float) -> str:
    """``text`` cut with an ellipsis so that it fits ``width`` at ``size`` px."""
    if text_width(text, size) <= width:
        return text
    keep = max(int(width / (size * CHAR_W)) - 1, 1)
    return text[:keep] + "\u2026"


def f1(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


def svg_open(width: float, height: float, label: str) -> str:
    return (f'<svg class="pic" xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="system-ui,sans-serif" role="img" '
            f'aria-label="{e(label)}">')


def text(x: float, y: float, body: str, size: float = 11, anchor: str = "start", cls: str = "",
         extra: str = "") -> str:
    """One ``<text>`` (``body`` is escaped here)."""
    c = f' class="{cls}"' if cls else ""
    return (f'<text x="{f1(x)}" y="{f1(y)}" font-size="{f1(size)}" text-anchor="{anchor}"{c}{extra}>'
            f"{e(body)}</text>")


def legend(items: list[tuple[str, str]]) -> str:
    """A legend under a picture: (label, class of the swatch)."""
    return '<p class="legend">' + "".join(f'<span><i class="sw {cls}"></i>{e(label)}</span>'
                                         for label, cls in items) + "</p>"


# -- axes ---------------------------------------------------------------------------------------

def nice_ticks(top: float, n: int = 5) -> list[float]:
    """0, step, 2 step, ... up to ``top`` with a round step (1, 2, 2.5, 5 x 10^k)."""
    if top <= 0:
        return [0.0]
    raw = top / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(top / step + 1e-9) + 1)]


_TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def time_ticks(lo: datetime, hi: datetime, width: float, min_px: float = 80) -> tuple[list[datetime], str, int]:
    """Round times of day between ``lo`` and ``hi``, at least ``min_px`` apart: (ticks, strftime
    format, step in seconds)."""
    span = max((hi - lo).total_seconds(), 1e-6)
    step = next((s for s in _TIME_STEPS if s * width / span >= min_px), _TIME_STEPS[-1])
    day = lo.replace(hour=0, minute=0, second=0, microsecond=0)
    t = day + timedelta(seconds=math.ceil((lo - day).total_seconds() / step) * step)
    ticks = []
    while t <= hi:
        ticks.append(t)
        t += timedelta(seconds=step)
    return ticks, ("%H:%M:%S" if step < 60 else "%H:%M"), step


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _step_name(step: int) -> str:
    return f"{step} s" if step < 60 else f"{step // 60} min" if step < 3600 else f"{step // 3600} h"


# == the timeline ===============================================================================

STATE_CLASS = {1: "s-idle", 2: "s-wait", 3: "s-prog"}
STATE_NAME = {1: "nothing in flight", 2: "waiting in a collective", 3: "collectives completing"}


def _window(anchor: datetime, keys: list[datetime], step_s: float | None, end: datetime | None,
            first: datetime | None = None):
    """[lo, hi]: around ``anchor`` and every key time, with some context before the anchor (a few
    steps), at least 10 minutes wide (or the whole of logs shorter than that: ``first`` to
    ``end``), centred on the anchor when nothing else pulls it."""
    keys = sorted(set(keys + [anchor]))
    lo, hi = keys[0], keys[-1]
    span = (hi - lo).total_seconds()
    pad = timedelta(seconds=max(30.0, 0.06 * span))
    before = timedelta(seconds=min(300.0, 3 * step_s) if step_s else 120.0)
    lo, hi = min(lo, anchor - before) - pad, hi + pad
    if end is not None and hi < end <= hi + timedelta(seconds=max(120.0, 0.2 * span)):
        hi = end + pad  # the end of the logs is just past the window: show it
    least = timedelta(minutes=10)
    if first is not None and end is not None and end - first < least:   # a short run: all of it
        a, b = min([first] + keys), max([end] + keys)
        margin = timedelta(seconds=0.05 * max((b - a).total_seconds(), 10.0))
        return a - margin, b + margin
    if hi - lo < least:
        half = least / 2
        if anchor - half <= lo and anchor + half >= hi:
            lo, hi = anchor - half, anchor + half
        else:
            grow = (least - (hi - lo)) / 2
            lo, hi = lo - grow, hi + grow
    return lo, hi


def timeline(run, report: dict) -> str | None:
    """The per-rank picture around the hang's start or the first failure (see the module doc)."""
    store = store_of(run, quiet=True)
    marks = failure_marks(store)
    nodes_ev = node_events(store)
    steps = steps_times(store)
    at = moments(run, marks, steps)
    if at is None:
        return None
    end, first_log, first_fail, step_s, last_step = at.end, at.first_log, at.first_failure, at.step_s, at.last_step
    fail_ts = first_fail.ts if first_fail else None
    hung = at.hang_start is not None
    anchor = at.anchor
    step_times = [t for t, _ in steps]
    until, start, moved = fail_ts or end, at.hang_start, at.last_advance
    stall = (until - start).total_seconds() if hung else 0.0
    reach = timedelta(minutes=30)
    faults = [m for m in nodes_ev if NODE_MAJOR.match(m.kind)
              and anchor - reach <= m.ts <= (fail_ts or anchor) + timedelta(minutes=5)]
    keys = [anchor] + ([fail_ts] if fail_ts and fail_ts - anchor <= timedelta(hours=2) else []) + [m.ts for m in faults]
    lo, hi = _window(anchor, keys, step_s, end, first_log)

    ranks_known, _ = rank_nodes(store)
    culprits = [r for r in report["verdict"]["culprit"]["ranks"]]
    shown = _lanes(run, ranks_known, culprits, marks, nodes_ev, lo, hi, first_fail)
    if not shown:
        return None
    node_lanes = sorted({m.node for m in nodes_ev if m.node and lo <= m.ts <= hi}, key=_natural)[:6]
    states = _states(store, shown, lo, hi)

    left, right = 190, 16
    plot = WIDTH - left - right
    x = lambda t: left + plot * (t - lo).total_seconds() / (hi - lo).total_seconds()  # noqa: E731

    # labelled lines across the picture, their labels stacked where they would collide
    notes: list[tuple[datetime, str, str]] = []
    if hung and last_step and lo <= last_step[0] <= hi:
        it = f" (iteration {last_step[1]})" if last_step[1] is not None else ""
        notes.append((last_step[0], f"last step {last_step[0]:%H:%M:%S}{it}", "an-step"))
    if hung and moved and (not last_step or moved > last_step[0]) and lo <= moved <= hi:
        notes.append((moved, f"collectives last completed {moved:%H:%M:%S}", "an-step"))
    seen_faults = set()
    for m in sorted(faults, key=lambda m: m.ts):
        key = (m.kind, m.node, m.ts.replace(microsecond=0))
        if key in seen_faults or len(seen_faults) >= 3 or not lo <= m.ts <= hi:
            continue
        seen_faults.add(key)
        notes.append((m.ts, f"{m.text.split(' (')[0]} on {m.node or 'a node'} {m.ts:%H:%M:%S}", "an-node"))
    if first_fail and lo <= first_fail.ts <= hi:
        who = f" rank {first_fail.rank}" if first_fail.rank is not None else ""
        what = first_fail.text.split(":")[0].replace("_", " ")
        notes.append((first_fail.ts, f"first failure {first_fail.ts:%H:%M:%S}: {what}{who}", "an-bad"))
    if lo <= end <= hi:
        notes.append((end, f"end of logs {end:%H:%M:%S}", "an-end"))
    placed, levels = _stack_labels([(x(t), label) for t, label, _ in notes], left, WIDTH - 4, size=10)
    head = 8 + 13 * levels
    axis_y = head + 16
    lane_h, lane_gap = 14, 3
    rows = [("steps", None)] + [("node", n) for n in node_lanes] + [("rank", r) for r in shown]
    top = axis_y + 6
    height = top + len(rows) * (lane_h + lane_gap) + 40
    svg = [svg_open(WIDTH, height, "per-rank timeline around the failure")]

    # backgrounds: training progressing / no progress (hang)
    lanes_top, lanes_bottom = top - 2, top + len(rows) * (lane_h + lane_gap)
    if steps:
        first_in = next((t for t in step_times if t >= lo), None)
        if first_in is not None and last_step and last_step[0] >= lo:
            svg.append(f'<rect class="bg-step" x="{f1(x(max(first_in, lo)))}" y="{f1(lanes_top)}" '
                       f'width="{f1(max(x(last_step[0]) - x(max(first_in, lo)), 1))}" '
                       f'height="{f1(lanes_bottom - lanes_top)}"><title>training steps logged</title></rect>')
    if hung:
        stop = min(until, hi)
        svg.append(f'<rect class="bg-hang" x="{f1(x(max(start, lo)))}" y="{f1(lanes_top)}" '
                   f'width="{f1(max(x(stop) - x(max(start, lo)), 1))}" height="{f1(lanes_bottom - lanes_top)}">'
                   f'<title>no progress for {e(duration(stall))}</title></rect>')

    # time axis: ticks, labels, grid
    ticks, fmt, step = time_ticks(lo, hi, plot)
    svg.append(f'<line class="axis" x1="{left}" y1="{axis_y}" x2="{left + plot}" y2="{axis_y}"/>')
    for t in ticks:
        tx = x(t)
        svg.append(f'<line class="axis" x1="{f1(tx)}" y1="{axis_y}" x2="{f1(tx)}" y2="{axis_y + 4}"/>')
        svg.append(f'<line class="grid" x1="{f1(tx)}" y1="{axis_y + 5}" x2="{f1(tx)}" y2="{f1(lanes_bottom)}"/>')
        if tx - text_width(t.strftime(fmt), 10) / 2 >= left - 2 and tx + text_width(t.strftime(fmt), 10) / 2 <= WIDTH:
            svg.append(text(tx, axis_y - 3, t.strftime(fmt), 10, "middle", "axis-label"))
    svg.append(text(left - 8, axis_y - 3, f"time of day ({_step_name(step)} ticks)", 10, "end", "muted"))

    # annotation lines and their labels
    for (t, label, cls), (lx, level, anchor_side) in zip(notes, placed):
        tx = x(t)
        ly = 8 + 13 * level + 9
        svg.append(f'<line class="an {cls}" x1="{f1(tx)}" y1="{f1(ly + 2)}" x2="{f1(tx)}" y2="{f1(lanes_bottom)}"/>')
        svg.append(text(lx, ly, label, 10, anchor_side, "bad" if cls == "an-bad" else ""))

    # lanes
    by_rank: dict[int, list[Entry]] = {}
    for m in marks:
        if m.rank is not None and lo <= m.ts <= hi:
            by_rank.setdefault(int(m.rank), []).append(m)
    for m in nodes_ev:
        if m.rank is not None and lo <= m.ts <= hi:
            by_rank.setdefault(int(m.rank), []).append(Entry(m.us, m.rank, m.node, "node", m.text))
    for i, (kind, key) in enumerate(rows):
        y = top + i * (lane_h + lane_gap)
        if kind == "steps":
            svg.append(text(left - 8, y + 11, "training steps", 11, "end"))
            for t, it in steps:
                if lo <= t <= hi:
                    svg.append(f'<line class="m-step" x1="{f1(x(t))}" y1="{y + 1}" x2="{f1(x(t))}" y2="{y + lane_h - 1}">'
                               f"<title>iteration {e(it)} at {e(t)}</title></line>")
            svg += _mark_shapes([m for m in marks if m.kind == "job" and lo <= m.ts <= hi], x, y, lane_h)
        elif kind == "node":
            svg.append(text(left - 8, y + 11, fit(f"node {key}", 11, left - 12), 11, "end"))
            svg += _mark_shapes([Entry(m.us, None, m.node, "node", m.text) for m in nodes_ev
                                 if m.node == key and lo <= m.ts <= hi], x, y, lane_h)
        else:
            node = ranks_known.get(key)
            label = f"rank {key}" + (f" · {node}" if node else "")
            svg.append(text(left - 8, y + 11, fit(label, 11, left - 12), 11, "end", "bad" if key in culprits else ""))
            for first_px, last_px, state in states.get(key, []):
                svg.append(f'<rect class="{STATE_CLASS[state]}" x="{f1(left + first_px)}" y="{y + 2}" '
                           f'width="{f1(max(last_px - first_px, 1))}" height="{lane_h - 4}">'
                           f"<title>rank {key}: {STATE_NAME[state]}</title></rect>")
            svg += _mark_shapes(by_rank.get(key, []), x, y, lane_h)
            if key in culprits:
                svg.append(f'<rect class="culprit" x="{left - 2}" y="{y - 1}" width="{plot + 4}" height="{lane_h + 2}">'
                           "<title>the culprit the verdict names</title></rect>")
    # what is off the picture, and which ranks are drawn
    foot = lanes_bottom + 14
    ranks_all = sorted(ranks_known) or sorted(by_rank)
    svg.append(text(left, foot, f"{len(shown)} of {len(ranks_all) or len(shown)} ranks drawn "
                                f"({rank_ranges(sorted(shown))}), the culprit first", 10, "start", "muted"))
    if end > hi:
        later = (end - hi).total_seconds()
        svg.append(text(WIDTH - 4, foot, f"the logs go on to {end:%H:%M:%S} ({duration(later)} after this window) \u2192",
                        10, "end", "muted"))
    elif lo > min(step_times + [m.ts for m in marks], default=lo):
        pass
    svg.append("</svg>")
    items = [("collectives completing", "s-prog"), ("waiting in a collective", "s-wait"),
             ("nothing in flight", "s-idle"), ("training step", "m-step"), ("timeout / error", "m-timeout"),
             ("warning", "m-warning"), ("node event (kernel log)", "m-node"), ("last line", "m-last")]
    if hung:
        items.append((f"no progress for {duration(stall)}", "bg-hang"))
    centre = "the hang's start (the last sign of progress)" if hung else \
        "the first failure" if first_fail else "the end of the logs"
    note = (f'<p class="muted">Around {e(centre)}: {e(f"{lo:%H:%M:%S}")} to {e(f"{hi:%H:%M:%S}")}; '
            "times as the logs print them, kernel-log times moved onto the same clock. Rank states come from "
            "c10d status lines (blank: no status line in that stretch).</p>")
    return "".join(svg) + legend(items) + note


def _natural(name: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name or ""))


def _lanes(run, ranks_known, culprits, marks, nodes_ev, lo, hi, first_fail) -> list[int]:
    """The ranks drawn: the culprits, the ranks of node events and of the first failures, then the
    lowest ranks; the culprits first, then in rank order."""
    everyone = sorted(set(ranks_known) | {int(m.rank) for m in marks if m.rank is not None})
    wanted: list[int] = [r for r in culprits if r in everyone or not everyone]
    wanted += [int(m.rank) for m in sorted(nodes_ev, key=lambda m: m.ts) if m.rank is not None and lo <= m.ts <= hi]
    failures = sorted((m for m in marks if m.kind in ("timeout", "error") and m.rank is not None and lo <= m.ts <= hi),
                      key=lambda m: m.ts)
    wanted += [int(m.rank) for m in failures[:3]]
    chosen: list[int] = []
    for r in wanted + everyone:
        if r not in chosen:
            chosen.append(r)
        if len(chosen) >= MAX_LANES:
            break
    pinned = [r for r in culprits if r in chosen]
    return pinned + sorted(r for r in chosen if r not in pinned)


def _states(store, ranks: list[int], lo: datetime, hi: datetime) -> dict[int, list[tuple[float, float, int]]]:
    """Per rank, stretches in pixels of the plot (from ``lo``) with the state its c10d status lines
    give between two lines of one process group: 3 the completed counter moved, 2 it did not and
    work was in flight, 1 nothing in flight. A rank in several groups takes the busiest state."""
    rows = progress_states(store, ranks, lo, hi)
    if not rows:
        return {}
    span = (hi - lo).total_seconds()
    plot = WIDTH - 190 - 16
    cells = 400
    grid: dict[int, list[int]] = {}
    for rank, t0, t1, state in rows:
        a = max(0, int(cells * (t0 - lo).total_seconds() / span))
        b = min(cells - 1, int(cells * (t1 - lo).total_seconds() / span))
        g = grid.setdefault(int(rank), [0] * cells)
        for c in range(a, b + 1):
            g[c] = max(g[c], int(state))
    out: dict[int, list[tuple[float, float, int]]] = {}
    for rank, g in grid.items():
        runs, start = [], 0
        for c in range(1, cells + 1):
            if c == cells or g[c] != g[start]:
                if g[start]:
                    runs.append((plot * start / cells, plot * c / cells, g[start]))
                start = c
        out[rank] = runs
    return out


_SHAPE = {"timeout": "m-timeout", "error": "m-error", "warning": "m-warning", "node": "m-node", "last": "m-last",
          "job": "m-error"}
_DRAW_ORDER = ("last", "warning", "job", "error", "timeout", "node")


def _mark_shapes(marks: list[Entry], x, y: float, h: float) -> list[str]:
    """One shape per kind and pixel column (the first mark's text as its tooltip, with a count)."""
    out = []
    groups: dict[tuple[str, int], list[Entry]] = {}
    for m in marks:
        groups.setdefault((m.kind, int(x(m.ts) // 3)), []).append(m)
    for kind in _DRAW_ORDER:
        for (k, _), ms in sorted(groups.items(), key=lambda kv: kv[0][1]):
            if k != kind:
                continue
            m = ms[0]
            mx = x(m.ts)
            more = f" (and {len(ms) - 1} more here)" if len(ms) > 1 else ""
            tip = f"<title>{e(f'{m.ts:%H:%M:%S.%f}'[:12])} {e(m.text[:300])}{e(more)}</title>"
            cls = _SHAPE.get(kind, "m-node")
            if kind == "node":
                cy = y + h / 2
                out.append(f'<path class="{cls}" d="M{f1(mx)},{f1(cy - 6)} L{f1(mx + 5)},{f1(cy)} L{f1(mx)},{f1(cy + 6)} '
                           f'L{f1(mx - 5)},{f1(cy)} Z">{tip}</path>')
            elif kind == "last":
                out.append(f'<rect class="{cls}" x="{f1(mx - 1)}" y="{f1(y + 3)}" width="2" height="{f1(h - 6)}">{tip}</rect>')
            elif kind == "warning":
                out.append(f'<path class="{cls}" d="M{f1(mx)},{f1(y + 2)} L{f1(mx + 4)},{f1(y + h - 2)} '
                           f'L{f1(mx - 4)},{f1(y + h - 2)} Z">{tip}</path>')
            else:
                out.append(f'<rect class="{cls}" x="{f1(mx - 2)}" y="{f1(y)}" width="4" height="{f1(h)}">{tip}</rect>')
    return out


def _stack_labels(items: list[tuple[float, str]], left: float, right: float, size: float):
    """Place each label at its x on the lowest level where it does not touch a label placed
    before it: ([(label x, level, text-anchor)], number of levels)."""
    placed: list[tuple[float, int, str]] = []
    taken: list[tuple[float, float, int]] = []
    for x, label in items:
        w = text_width(label, size) + 6
        if x + 3 + w <= right:
            a, b, lx, side = x + 3, x + 3 + w, x + 3, "start"
        else:
            a, b, lx, side = max(x - 3 - w, left), x - 3, x - 3, "end"
        level = 0
        while any(lv == level and not (b <= ta or a >= tb) for ta, tb, lv in taken):
            level += 1
        taken.append((a, b, level))
        placed.append((lx, level, side))
    return placed, (max((lv for _, lv, _ in placed), default=-1) + 1)


# == the ring map ===============================================================================

def tier_class(tier: str | None) -> str:
    t = (tier or "").lower()
    if not t:
        return "unknown"
    if "one host" in t:
        return "net1"
    if "nvl" in t:
        return "nvlink"
    if "p2p" in t or "pcie" in t:
        return "pcie"
    if "shm" in t:
        return "shm"
    if "socket" in t:
        return "socket"
    if "gdr" in t or "collnet" in t:
        return "gdr"
    if t.startswith(("ib", "roce", "net")):
        return "net"
    return "unknown"


def ring_map(run, culprit_nodes: list[str] | None = None, gpu: str | None = None) -> str | None:
    """The largest communicator's channel-0 ring: host boxes up to ``MATRIX_ABOVE`` hosts, a node
    matrix above. The hosts the verdict names are outlined."""
    if not run.columns("nccl_hops"):
        return None
    from postmortem.views.transports import view

    try:
        # the one communicator drawn: the most ranks among those with a ring order (views.transports)
        comms = view(run, gpu=gpu, ring_map=True)["communicators"]
    except Exception:  # noqa: BLE001 -- a picture must never cost the report
        return None
    if not comms or not comms[0].get("rings"):
        return None
    comm = comms[0]
    ring = comm["rings"][0]
    links = ring.get("links") or []
    if not links:
        return None
    hosts: list[tuple[str, list[int]]] = []
    for link in links:
        host = link.get("src_host") or "?"
        if not hosts or hosts[-1][0] != host:
            hosts.append((host, []))
        hosts[-1][1].append(link["src_rank"])
    if len(hosts) > 1 and hosts[0][0] == hosts[-1][0]:   # the ring started inside a host
        hosts[0] = (hosts[0][0], hosts[-1][1] + hosts[0][1])
        hosts.pop()
    slowest = ring.get("slowest") or {}
    flagged = {(h["src_rank"], h["dst_rank"]) for h in comm.get("attention") or []}
    # a host's intra-node tier: that of its first hop inside it (one pass: a 10,000-rank ring has
    # 1,250 hosts, and a scan of the links per host was 1.3 s)
    first_inside: dict = {}
    for lk in links:
        if lk.get("src_host") == lk.get("dst_host"):
            first_inside.setdefault(lk.get("src_host"), lk.get("tier"))
    intra = {host: first_inside.get(host) for host, _ in hosts}
    inter = [lk for lk in links if lk.get("src_host") != lk.get("dst_host")]
    draw = _boxes if len(hosts) <= MATRIX_ABOVE else _matrix
    named = set(culprit_nodes or [])
    svg = draw(hosts, intra, inter, slowest, flagged, named)
    size = f" ({e(comm['nranks'])} ranks)" if known(comm.get("nranks")) else ""
    note = ""
    if slowest:
        speed = f"{e(slowest.get('gbyte_s'))} GB/s" if known(slowest.get("gbyte_s")) else "speed unknown"
        priced = f": {e(slowest.get('priced_as'))}" if known(slowest.get("priced_as")) else ""
        how = ("(drawn thicker); hops slower than their tier should be are red" if draw is _boxes else
               "(a host whose outgoing hop is slower than its tier should be is outlined in red)")
        note = (f"Slowest hop {e(slowest.get('src_rank'))}&#8594;{e(slowest.get('dst_rank'))} "
                f"({e(slowest.get('tier') or 'tier unknown')}, {speed}{priced}) caps the ring {how}. ")
    if named & {h for h, _ in hosts}:
        note += f"The host(s) the verdict names ({e(', '.join(sorted(named & {h for h, _ in hosts})))}) are outlined. "
    shape = ("one box per host in ring order" if draw is _boxes else
             f"{len(hosts)} hosts, too many for boxes: one cell per host in ring order, left to right and top to "
             "bottom; a cell's colour is its intra-node transport, the bar at its right edge the hop to the next host")
    caption = (f"<p class=muted>Communicator {e(comm['comm_key'])}{size}, channel {e(ring['channel'])}: {shape}. "
               f"{note}</p>")
    present = {}
    for tier in [intra[h] for h, _ in hosts] + [lk.get("tier") for lk in inter]:
        if tier:
            present.setdefault(tier, tier_class(tier))
    return svg + caption + legend([(t, f"f-{c}") for t, c in present.items()])


def _boxes(hosts, intra, inter, slowest, flagged, named) -> str:
    """Host boxes in ring order, a snake of rows of up to five; hop labels in the gaps between
    boxes (two short lines: ranks, tier), so they never cover a box."""
    cols = min(len(hosts), 5)
    rows = math.ceil(len(hosts) / cols)
    margin, box_w, box_h, gap_x, gap_y = 34, 140, 58, (WIDTH - 34 - 10 - cols * 140) / max(cols - 1, 1), 54
    if cols == 1:
        gap_x = 0
    gap_x = min(gap_x, 150)
    width = margin + cols * box_w + (cols - 1) * gap_x + 10
    top = 12
    height = top + rows * box_h + (rows - 1) * gap_y + 56
    pos = {}
    for i, (host, _) in enumerate(hosts):
        r, c = divmod(i, cols)
        if r % 2:
            c = cols - 1 - c
        pos[host] = (margin + c * (box_w + gap_x), top + r * (box_h + gap_y), r, c)
    svg = [svg_open(width, height, "ring transport map")]
    for host, ranks in hosts:
        bx, by, _, _ = pos[host]
        cls = tier_class(intra[host])
        culprit = "; named by the verdict" if host in named else ""
        svg.append(f'<rect class="box t-{cls}" x="{f1(bx)}" y="{f1(by)}" width="{box_w}" height="{box_h}" rx="6">'
                   f"<title>{e(host)}: ranks {e(rank_ranges(ranks))}; intra-node hops {e(intra[host] or 'none')}"
                   f"{culprit}</title></rect>")
        if host in named:
            svg.append(f'<rect class="culprit" x="{f1(bx - 4)}" y="{f1(by - 4)}" width="{box_w + 8}" '
                       f'height="{box_h + 8}" rx="8"><title>{e(host)}: named by the verdict</title></rect>')
        svg.append(text(bx + box_w / 2, by + 18, fit(host, 12, box_w - 10), 12, "middle"))
        svg.append(text(bx + box_w / 2, by + 34, fit(f"ranks {rank_ranges(ranks)}", 11, box_w - 10), 11, "middle"))
        svg.append(text(bx + box_w / 2, by + 50, fit(intra[host] or "no intra-node hop", 10, box_w - 10), 10,
                        "middle", "muted"))
    order = [h for h, _ in hosts]
    for link in inter:
        src, dst = link.get("src_host") or "?", link.get("dst_host") or "?"
        if src not in pos or dst not in pos:
            continue
        sx, sy, sr, sc = pos[src]
        dx, dy, dr, dc = pos[dst]
        pair = (link["src_rank"], link["dst_rank"])
        cls = f"hop t-{tier_class(link.get('tier'))}" + (" slow" if pair == (slowest.get("src_rank"), slowest.get(
            "dst_rank")) else "") + (" flagged" if pair in flagged else "")
        tip = f"<title>{e(link['src_rank'])}&#8594;{e(link['dst_rank'])} {e(src)} &#8594; {e(dst)}: " \
              f"{e(link.get('tier') or 'tier unknown')}</title>"
        l1, l2 = f"{link['src_rank']}\u2192{link['dst_rank']}", link.get("tier") or "?"
        follows = order.index(dst) == order.index(src) + 1   # the closing hop (last -> first) goes round
        if follows and sr == dr and abs(sc - dc) == 1:       # side by side
            x1, x2 = (sx + box_w, dx) if sc < dc else (sx, dx + box_w)
            y = sy + box_h / 2
            svg.append(f'<line class="{cls}" x1="{f1(x1)}" y1="{f1(y)}" x2="{f1(x2)}" y2="{f1(y)}">{tip}</line>')
            mid, room = (x1 + x2) / 2, abs(x2 - x1) - 6
            svg.append(text(mid, y - 7, fit(l1, 10, room), 10, "middle"))
            svg.append(text(mid, y + 15, fit(l2, 10, room), 10, "middle", "muted"))
        elif follows and sc == dc and dr == sr + 1:           # down to the next row
            cx = sx + box_w / 2
            svg.append(f'<line class="{cls}" x1="{f1(cx)}" y1="{f1(sy + box_h)}" x2="{f1(cx)}" y2="{f1(dy)}">{tip}</line>')
            side = "end" if sc == cols - 1 else "start"
            tx = cx - 8 if side == "end" else cx + 8
            svg.append(text(tx, sy + box_h + gap_y / 2 - 2, l1, 10, side))
            svg.append(text(tx, sy + box_h + gap_y / 2 + 11, l2, 10, side, "muted"))
        else:                                                 # the ring closes: round the outside
            bottom = top + rows * box_h + (rows - 1) * gap_y + 14
            x_src, x_dst = sx + box_w / 2, dx + box_w / 2
            if rows == 1:
                d = f"M{f1(x_src)},{f1(sy + box_h)} L{f1(x_src)},{f1(bottom)} L{f1(x_dst)},{f1(bottom)} L{f1(x_dst)},{f1(dy + box_h)}"
                label_x = (x_src + x_dst) / 2
            else:
                d = (f"M{f1(x_src)},{f1(sy + box_h)} L{f1(x_src)},{f1(bottom)} L{margin - 18},{f1(bottom)} "
                     f"L{margin - 18},{f1(dy + box_h / 2)} L{f1(dx)},{f1(dy + box_h / 2)}")
                label_x = (x_src + margin) / 2
            svg.append(f'<path class="{cls}" d="{d}">{tip}</path>')
            svg.append(text(label_x, bottom + 15, f"{l1} {l2} (closes the ring)", 10, "middle"))
    svg.append("</svg>")
    return "".join(svg)


def _short_names(hosts: list[str]) -> list[str]:
    """What tells the hosts apart: the names without their common prefix (h20-node-113 -> 113)."""
    if len(hosts) < 2:
        return hosts
    prefix = hosts[0]
    for h in hosts[1:]:
        while not h.startswith(prefix):
            prefix = prefix[:-1]
    prefix = re.sub(r"\d+$", "", prefix)   # keep whole numbers: node-1 and node-10
    return [h[len(prefix):] or h for h in hosts]


def _matrix(hosts, intra, inter, slowest, flagged, named) -> str:
    """One cell per host in ring order (row-major); fill: intra-node tier; right-edge bar: the
    hop to the next host; red outline: a flagged or the slowest hop leaves this host."""
    n = len(hosts)
    cols = 16 if n <= 256 else 32
    margin, gap = 4, 3
    cell_w = (WIDTH - 2 * margin - (cols - 1) * gap) / cols
    cell_h = 30 if cols <= 16 else 22
    rows = math.ceil(n / cols)
    height = margin * 2 + rows * (cell_h + gap) + 4
    names = _short_names([h for h, _ in hosts])
    out_hop = {}
    for link in inter:
        out_hop.setdefault(link.get("src_host"), link)
    svg = [svg_open(WIDTH, height, "node matrix of the ring")]
    for i, ((host, ranks), name) in enumerate(zip(hosts, names)):
        r, c = divmod(i, cols)
        x0, y0 = margin + c * (cell_w + gap), margin + r * (cell_h + gap)
        hop = out_hop.get(host)
        pair = (hop["src_rank"], hop["dst_rank"]) if hop else None
        bad = pair is not None and (pair in flagged or pair == (slowest.get("src_rank"), slowest.get("dst_rank"))
                                    and tier_class(hop.get("tier")) in ("socket", "net1", "shm"))
        hop_text = (f"; hop {hop['src_rank']}\u2192{hop['dst_rank']} to {hop.get('dst_host')}: "
                    f"{hop.get('tier') or 'tier unknown'}") if hop else ""
        culprit = "; named by the verdict" if host in named else ""
        tip = (f"<title>{e(host)}: ranks {e(rank_ranges(ranks))}; intra-node {e(intra[host] or 'none')}{e(hop_text)}"
               f"{culprit}</title>")
        svg.append(f'<rect class="cell f-{tier_class(intra[host])}{" flagged" if bad else ""}" x="{f1(x0)}" '
                   f'y="{f1(y0)}" width="{f1(cell_w - 6)}" height="{cell_h}" rx="2">{tip}</rect>')
        if host in named:
            svg.append(f'<rect class="culprit" x="{f1(x0 - 1.5)}" y="{f1(y0 - 1.5)}" width="{f1(cell_w - 3)}" '
                       f'height="{cell_h + 3}" rx="3">{tip}</rect>')
        svg.append(f'<rect class="f-{tier_class(hop.get("tier") if hop else None)}" x="{f1(x0 + cell_w - 5)}" '
                   f'y="{f1(y0)}" width="5" height="{cell_h}">{tip}</rect>')
        if text_width(name, 10) <= cell_w - 10:
            svg.append(text(x0 + (cell_w - 6) / 2, y0 + cell_h / 2 + 4, name, 10, "middle", "on-fill"))
    svg.append("</svg>")
    return "".join(svg)


# == memory =====================================================================================

def memory(run, report: dict) -> str | None:
    """Per-rank peaks against capacity, from ``postmortem.views.memory_view`` (the Memory screen's numbers):
    allocated, reserved beyond it, the capacity line, CUDA OOMs and host OOM kills marked."""
    from postmortem.views.memory_view import NEAR, memory_view

    try:
        view = memory_view(run, report)
    except Exception:  # noqa: BLE001 -- a picture must never cost the report
        return None
    if not view.rows:
        return None
    rows = view.rows
    if len(rows) > MAX_MEMORY_ROWS:   # the OOMs and the highest peaks, shown in rank order
        keep = sorted(rows, key=lambda r: (not (r.cuda_oom or r.host_oom), -r.peak, r.rank))[:MAX_MEMORY_ROWS]
        rows = sorted(keep, key=lambda r: r.rank)
    capacity, top = view.capacity, view.top
    ticks = nice_ticks(top / 1024)
    if ticks[-1] * 1024 < top:   # the axis ends on a tick
        ticks.append(ticks[-1] + (ticks[1] - ticks[0] if len(ticks) > 1 else top / 1024))
    scale_top = ticks[-1] * 1024
    left, value_w, mark_w = 180, 150, 120
    plot = WIDTH - left - value_w - mark_w
    row_h, head = 18, 30
    height = head + row_h * len(rows) + 34
    x = lambda mib: left + plot * (mib or 0.0) / scale_top  # noqa: E731
    svg = [svg_open(WIDTH, height, "memory peak per rank")]
    bottom = head + row_h * len(rows)
    for t in ticks:
        tx = x(t * 1024)
        svg.append(f'<line class="grid" x1="{f1(tx)}" y1="{head - 4}" x2="{f1(tx)}" y2="{bottom}"/>')
        svg.append(f'<line class="axis" x1="{f1(tx)}" y1="{bottom}" x2="{f1(tx)}" y2="{bottom + 4}"/>')
        svg.append(text(tx, bottom + 15, f"{t:g}", 10, "middle"))
    svg.append(f'<line class="axis" x1="{left}" y1="{bottom}" x2="{left + plot}" y2="{bottom}"/>')
    svg.append(text(left + plot, bottom + 28, "GiB (1 GiB = 1024 MiB)", 10, "end", "muted"))
    svg.append(text(left + plot + 10, head - 10, "max alloc. / reserved", 10, "start", "muted"))
    if capacity:
        cx = x(capacity)
        svg.append(f'<line class="cap" x1="{f1(cx)}" y1="{head - 6}" x2="{f1(cx)}" y2="{bottom}">'
                   f"<title>capacity {capacity / 1024:.1f} GiB ({e(view.capacity_source)})</title></line>")
        svg.append(text(cx, head - 10, f"capacity {capacity / 1024:.1f} GiB", 10, "end", "bad"))
    for i, r in enumerate(rows):
        y = head + i * row_h
        near = capacity is not None and r.peak >= NEAR * capacity
        tip_bits = [f"rank {r.rank}" + (f" on {r.node}" if r.node else "")]
        if r.alloc is not None:
            tip_bits.append(f"max allocated {r.alloc / 1024:.1f} GiB")
        if r.reserved is not None:
            tip_bits.append(f"max reserved {r.reserved / 1024:.1f} GiB")
        if r.at_oom:
            tip_bits.append("read from the OOM message (no memory samples)")
        if r.early:
            tip_bits.append("every sample predates the optimizer state: the real peak is higher")
        tip = f"<title>{e('; '.join(tip_bits))}</title>"
        svg.append(text(left - 8, y + 13, fit(f"rank {r.rank}" + (f" · {r.node}" if r.node else ""), 11, left - 12), 11,
                        "end", "bad" if r.cuda_oom or r.host_oom_killed else ""))
        if r.reserved:
            svg.append(f'<rect class="resv{" near" if near else ""}" x="{left}" y="{y + 3}" '
                       f'width="{f1(x(max(r.reserved, r.alloc or 0)) - left)}" height="{row_h - 6}">{tip}</rect>')
        if r.alloc:
            svg.append(f'<rect class="alloc{" near" if near else ""}" x="{left}" y="{y + 3}" '
                       f'width="{f1(x(r.alloc) - left)}" height="{row_h - 6}">{tip}</rect>')
        if r.peak:
            pct = f" ({100 * r.peak / capacity:.0f}%)" if capacity else ""
            value = " / ".join(f"{v / 1024:.1f}" for v in (r.alloc, r.reserved) if v is not None) + f" GiB{pct}"
        else:
            value = "no memory lines"
        svg.append(text(left + plot + 10, y + 13, value, 11, "start", "" if r.peak else "muted"))
        marks = []
        if r.cuda_oom:
            marks.append("CUDA OOM")
        if r.host_oom:
            marks.append("host OOM \u2717 killed" if r.host_oom_killed else "host OOM (node)")
        if marks:
            mx = x(r.peak) if r.peak else left + 4
            what = " and ".join(marks)
            oom_tip = f"<title>{e(what)} on rank {e(r.rank)}</title>"
            svg.append(f'<g class="oom-mark" data-rank="{e(r.rank)}"><circle class="oom-ring" cx="{f1(mx)}" '
                       f'cy="{f1(y + row_h / 2)}" r="6">{oom_tip}</circle>'
                       + text(left + plot + value_w, y + 13, fit(what, 11, mark_w - 4), 11, "start", "bad oom")
                       + "</g>")
    svg.append("</svg>")
    items = [("max allocated", "alloc"), ("max reserved", "resv")]
    if capacity:
        items.append((f"GPU capacity ({view.capacity_source})", "cap"))
    shown = f"{len(rows)} of {len(view.rows)} ranks with memory lines or an OOM" if len(rows) < len(view.rows) else \
        f"{len(rows)} rank(s) with memory lines or an OOM"
    n_ranks = f" ({view.n_ranks} ranks in the run)" if view.n_ranks else ""
    return "".join(svg) + legend(items) + (f"<p class=muted>{e(shown)}{e(n_ranks)}; red: at {NEAR:.0%} of capacity or "
                                           "more; a circle marks an OOM.</p>")


# == step time ==================================================================================

def steps(run) -> str | None:
    store = store_of(run, quiet=True)
    if not {"iteration", "elapsed_ms"} <= set(store.columns("iterations")):
        return None
    valid = f"NOT coalesce({store.col('iterations', 'validation', 'BOOLEAN')}, false)"
    rows = store.frame("SELECT iteration, median(elapsed_ms) AS ms FROM iterations WHERE iteration IS NOT NULL "
                      f"AND elapsed_ms IS NOT NULL AND {valid} GROUP BY iteration ORDER BY iteration")
    if rows.height < 2:
        return None
    left, right, top, plot_h = 70, 20, 14, 170
    plot = WIDTH - left - right
    secs = (rows["ms"] / 1000).to_list()
    yt = nice_ticks(max(secs) * 1.05)
    y_top = yt[-1] if yt[-1] >= max(secs) else max(secs)
    lo, hi = rows["iteration"].min(), rows["iteration"].max()
    x = lambda it: left + plot * (it - lo) / ((hi - lo) or 1)  # noqa: E731
    y = lambda s: top + plot_h * (1 - s / y_top)  # noqa: E731
    svg = [svg_open(WIDTH, top + plot_h + 44, "step time per iteration")]
    for t in yt:
        svg.append(f'<line class="grid" x1="{left}" y1="{f1(y(t))}" x2="{left + plot}" y2="{f1(y(t))}"/>')
        svg.append(text(left - 6, y(t) + 4, f"{t:g}", 10, "end"))
    svg.append(f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}"/>')
    svg.append(f'<line class="axis" x1="{left}" y1="{top + plot_h}" x2="{left + plot}" y2="{top + plot_h}"/>')
    for it in nice_ticks(hi - lo, 8) if hi > lo else [0]:
        if it != int(it):   # iterations are whole numbers
            continue
        v = lo + int(it)
        if v > hi:
            break
        svg.append(f'<line class="axis" x1="{f1(x(v))}" y1="{top + plot_h}" x2="{f1(x(v))}" y2="{top + plot_h + 4}"/>')
        svg.append(text(x(v), top + plot_h + 16, f"{v:g}", 10, "middle"))
    svg.append(text(left + plot, top + plot_h + 32, "iteration", 10, "end", "muted"))
    svg.append(text(14, top + plot_h / 2, "s per step", 10, "middle", "muted",
                    f' transform="rotate(-90 14 {f1(top + plot_h / 2)})"'))
    points = " ".join(f"{f1(x(it))},{f1(y(ms / 1000))}" for it, ms in rows.iter_rows())
    svg.append(f'<polyline class="line" points="{points}"/>')
    svg.append("</svg>")
    median = rows["ms"].median()
    return "".join(svg) + f"<p class=muted>median step {median / 1000:.2f} s over {rows.height} iterations</p>"
