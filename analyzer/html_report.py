"""The HTML report: one self-contained file (no script, no network) with the verdict, actions,
findings with their evidence, and four pictures drawn as inline SVG from the store:

* the per-rank timeline of the last minutes before the failure (in flight / idle per rank,
  timeouts, exceptions and NCCL warnings as marks, the culprit's row outlined);
* the ring transport map of the largest communicator (one box per host in ring order, each
  hop coloured by tier, the slowest hop marked and priced);
* per-rank memory peaks against the GPU's capacity;
* step time per iteration.

Every piece of text that can come from a log goes through ``html.escape``: a line holding
``<script>`` shows as text.
"""

from __future__ import annotations

import html
from datetime import datetime, timedelta

import polars as pl

from analyzer.ranges import rank_ranges
from analyzer.render import (action_items, finding_details, known, outcome_lines, rank_count, rule_error_lines, safe,
                             time_span, upper_first)

WINDOW = timedelta(minutes=15)
BUCKETS = 180
MAX_ROWS = 48
TIER_COLOURS = {"NVLink": "#2e7d32", "NVLS": "#2e7d32", "PCIe": "#1565c0", "SHM": "#ef6c00", "Socket": "#c62828",
                "IB": "#6a1b9a", "RoCE": "#6a1b9a"}
SEVERITY_COLOURS = {"error": "#c62828", "warning": "#ef6c00", "info": "#546e7a"}
STATUS_COLOURS = {"culprit": "#c62828", "no-single-culprit": "#ef6c00", "inconclusive": "#ef6c00",
                  "degraded": "#f9a825", "healthy": "#2e7d32"}
CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:0 auto;max-width:1100px;padding:16px 24px;
color:#1c1c1c;background:#fff}
h1{font-size:22px;margin:8px 0}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:18px 0 4px}
.verdict{border-left:6px solid var(--c);background:#fafafa;padding:10px 14px;margin:12px 0}
.badge{display:inline-block;color:#fff;background:var(--c);border-radius:3px;padding:1px 7px;font-size:12px;
font-weight:600;text-transform:uppercase;margin-right:6px}
code,pre{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{background:#f4f4f4;padding:6px 8px;overflow-x:auto;white-space:pre-wrap;word-break:break-all;margin:2px 0 8px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
.muted{color:#666}.finding{margin:10px 0 18px}svg{max-width:100%;height:auto}
.legend span{display:inline-block;margin-right:14px}.sw{display:inline-block;width:10px;height:10px;margin-right:4px}
"""


def e(value) -> str:
    """Escaped text for HTML: markup and terminal escapes from a log line show as text."""
    return html.escape(safe("" if value is None else str(value)), quote=True)


def html_report(report: dict, run=None) -> str:
    """The whole page; ``run`` (the analysed store) adds the pictures, the report dict alone
    still gives verdict, actions, findings and coverage."""
    v = report["verdict"]
    colour = STATUS_COLOURS.get(v["status"], "#546e7a")
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             "<title>postmortem report</title>", f"<style>{CSS}</style></head><body>",
             "<h1>postmortem report</h1>", *_outcome(report),
             f'<div class="verdict" style="--c:{colour}"><span class="badge" style="--c:{colour}">{e(v["status"])}'
             f'</span><b>{e(v["category"])}</b> <span class="muted">confidence {v["confidence"]:.2f}</span>'
             f"<p>{e(v['sentence'])}</p></div>"]
    parts += _rule_errors(report)
    parts += _actions(report)
    if run is not None:
        parts += _pictures(report, run)
    parts += _findings(report["findings"])
    parts += _gaps(report["missing_evidence"])
    parts += _coverage(report)
    parts.append(f'<p class="muted">{e(report["generator"])} &middot; {e(report["schema"])}</p></body></html>')
    return "\n".join(parts) + "\n"


def _outcome(report: dict) -> list[str]:
    """What happened to the job, above the verdict (why)."""
    headline, basis = outcome_lines(report)
    items = "".join(f"<li>{e(line)}</li>" for line in basis)
    return [f'<p class="outcome"><b>Outcome:</b> {e(headline)}</p>' + (f"<ul>{items}</ul>" if items else "")]


def _rule_errors(report: dict) -> list[str]:
    """A partial report says so under the verdict: the rules that raised, each with its exception."""
    heading, failed = rule_error_lines(report)
    if not failed:
        return []
    colour = SEVERITY_COLOURS["warning"]
    return [f'<div class="verdict partial" style="--c:{colour}"><b>{e(heading)}.</b><ul>'
            + "".join(f"<li>{e(line)}</li>" for line in failed) + "</ul></div>"]


def _actions(report: dict) -> list[str]:
    tags = {"t": "{}", "b": "<b>{}</b>", "c": "<code>{}</code>"}
    items = [f'<li style="margin-left:{24 * indent}px">' + "".join(tags[kind].format(e(text)) for kind, text in segments)
             + "</li>" for indent, segments in action_items(report)]
    return ["<h2>Actions</h2>", "<ul>" + "".join(items) + "</ul>"] if items else []


def _findings(findings: list[dict]) -> list[str]:
    out = ["<h2>Findings</h2>"] if findings else []
    for f in findings:
        colour = SEVERITY_COLOURS[f["severity"]]
        out.append(f'<div class="finding" id="{e(f["id"])}"><h3><span class="badge" style="--c:{colour}">'
                   f'{e(f["severity"])}</span>{e(f["code"])} {e(f["name"])} &mdash; {e(f["title"])}</h3>')
        out.append(f"<p>{e(f['message'])} <span class=muted>(confidence {f['confidence']:.2f})</span></p>")
        for kind, label, lines in finding_details(f):
            if kind == "line":
                out += [f"<p>{e(upper_first(label))}: {e(line)}</p>" for line in lines]
            else:
                out.append(f"<div class=muted>{e(label)}</div><pre>{e(chr(10).join(lines))}</pre>")
        for ev in f["evidence"]:
            note = f" &mdash; {e(ev['note'])}" if ev.get("note") else ""
            out.append(f"<div class=muted><code>{e(ev['path'])}:{e(ev['line'])}</code>{note}</div>"
                       f"<pre>{e(ev['text'][:600])}</pre>")
        if f.get("caused_by"):
            links = ", ".join(f'<a href="#{e(c)}">{e(c)}</a>' for c in f["caused_by"])
            out.append(f"<p>Caused by {links}</p>")
        if f.get("suggestion"):
            out.append(f"<p><b>Do:</b> {e(f['suggestion'])}</p>")
        out.append("</div>")
    return out


def _gaps(gaps: list[dict]) -> list[str]:
    if not gaps:
        return []
    return ["<h2>Evidence gaps</h2>", "<ul>" + "".join(
        f"<li>{e(g['what'])}<br><span class=muted>next time:</span> <code>{e(g['enable'])}</code></li>" for g in gaps)
        + "</ul>"]


def _coverage(report: dict) -> list[str]:
    r, t = report["run"], report["inputs"]["totals"]
    gpu = (r.get("gpu_model") or {}).get("name") or "unknown"
    rows = [("ranks", rank_count(r)), ("nodes", ", ".join(r["nodes"]) or "unknown"),
            ("GPU model", gpu), ("NCCL", ", ".join(r["nccl_versions"]) or "unknown"),
            ("time", time_span(r)),
            ("inputs", f"{t['files']} files ({t['skipped']} skipped), {t['lines']} lines: {t['parsed_lines']} parsed, "
                       f"{t['unparsed_lines']} unparsed")]
    n = report["inputs"]["nccl_lines"]
    if n["total"]:
        rows.append(("NCCL lines", f"{n['typed']} of {n['total']} understood"))
    out = ["<h2>Run</h2>", "<table>" + "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in rows)
           + "</table>"]
    if report["messages"]:
        out.append("<ul>" + "".join(f"<li>{e(m)}</li>" for m in report["messages"]) + "</ul>")
    return out


# -- pictures ---------------------------------------------------------------------------------

def _pictures(report: dict, run) -> list[str]:
    culprits = set(report["verdict"]["culprit"]["ranks"])
    out = []
    for title, svg in (("Last minutes before the failure, per rank", _timeline(run, culprits)),
                       ("Ring transport map", _ring_map(run)),
                       ("Memory peak per rank against capacity", _memory(run, report)),
                       ("Step time per iteration", _steps(run))):
        if svg:
            out += [f"<h2>{e(title)}</h2>", svg]
    return out


def _frame(run, sql: str) -> pl.DataFrame:
    try:
        return run.frame(sql)
    except Exception:  # noqa: BLE001 -- a picture must never cost the report
        return pl.DataFrame()


def _timeline(run, culprits: set[int]) -> str | None:
    """One row per rank over the last WINDOW, in buckets: amber while any of its process groups
    has work in flight, grey when all are idle; marks for timeouts, exceptions, NCCL warnings."""
    if not {"ts", "rank", "last_enqueued", "last_completed"} <= set(run.columns("progress")):
        return None
    prog = _frame(run, "SELECT rank, ts, coalesce(last_enqueued, 0) > coalesce(last_completed, 0) AS busy "
                       "FROM progress WHERE ts IS NOT NULL AND rank IS NOT NULL")
    marks = _frame(run, "SELECT rank, ts, kind, coalesce(message, detail, kind) AS text FROM events "
                        "WHERE ts IS NOT NULL AND rank IS NOT NULL AND kind IN ('watchdog_timeout', 'timeout', "
                        "'exception', 'nccl_warn', 'watchdog_exception', 'dump_signal', 'heartbeat_timeout') "
                        "ORDER BY ts") if "kind" in run.columns("events") else pl.DataFrame()
    if prog.is_empty():
        return None
    end = prog["ts"].max()
    if not marks.is_empty():
        end = max(end, marks["ts"].max())
    start = end - WINDOW
    bucket = WINDOW / BUCKETS
    micros = bucket // timedelta(microseconds=1)
    # A rank's state holds until its next progress line: take each bucket's state, then carry
    # it forward over buckets with no line (progress lines come about once a minute).
    seen = (prog.with_columns(cell=((pl.col("ts") - start).dt.total_microseconds() // micros).clip(0, BUCKETS - 1))
            .sort("ts").group_by("rank", "cell").agg(pl.col("busy").any()))
    grid = pl.DataFrame({"rank": seen["rank"].unique().sort()}).join(
        pl.DataFrame({"cell": pl.arange(0, BUCKETS, eager=True)}), how="cross")
    cells = (grid.join(seen, on=["rank", "cell"], how="left", coalesce=True).sort("rank", "cell")
             .with_columns(pl.col("busy").forward_fill().over("rank"))
             .with_columns(run=(pl.col("busy") != pl.col("busy").shift(1)).fill_null(True).cum_sum().over("rank"))
             .drop_nulls("busy")
             .group_by("rank", "run").agg(pl.col("busy").first(), pl.col("cell").min().alias("first"),
                                         pl.col("cell").max().alias("last")).sort("rank", "first"))
    ranks = sorted(set(prog["rank"].to_list()))
    shown = sorted((sorted(culprits & set(ranks)) + [r for r in ranks if r not in culprits])[:MAX_ROWS])
    left, width, row_h = 90, 900, 14
    height = 30 + row_h * len(shown) + 20
    svg = [_svg_open(left + width + 20, height)]
    x = _scale(start, end, left, left + width)
    for tick in range(6):
        t = start + (end - start) * tick / 5
        svg.append(f'<text x="{x(t):.1f}" y="14" font-size="10" text-anchor="middle">{e(t.strftime("%H:%M:%S"))}'
                   "</text>")
    cell_w = width / BUCKETS
    for i, rank in enumerate(shown):
        y = 22 + i * row_h
        svg.append(f'<text x="{left - 6}" y="{y + 10}" font-size="10" text-anchor="end">rank {rank}</text>')
        for first, last, busy in cells.filter(pl.col("rank") == rank).select("first", "last", "busy").iter_rows():
            svg.append(f'<rect x="{left + first * cell_w:.1f}" y="{y}" width="{(last - first + 1) * cell_w:.1f}" '
                       f'height="{row_h - 3}" fill="{"#ffb300" if busy else "#b0bec5"}"/>')
        if rank in culprits:
            svg.append(f'<rect x="{left}" y="{y - 1}" width="{width}" height="{row_h - 1}" fill="none" '
                       'stroke="#c62828" stroke-width="2"><title>culprit</title></rect>')
        for m in marks.filter((pl.col("rank") == rank) & (pl.col("ts") >= start)).iter_rows(named=True):
            svg.append(f'<rect x="{x(m["ts"]) - 1.5:.1f}" y="{y - 1}" width="3" height="{row_h - 1}" fill="#c62828">'
                       f'<title>{e(m["kind"])}: {e(str(m["text"])[:300])}</title></rect>')
    svg.append(f'<text x="{left}" y="{height - 4}" font-size="10">{len(shown)} of {len(ranks)} ranks shown '
               f"({e(rank_ranges(shown))}); the {int(WINDOW.total_seconds() // 60)} min before the last line; "
               "blank: no progress line in that interval</text></svg>")
    legend = _legend([("work in flight", "#ffb300"), ("idle (nothing in flight)", "#b0bec5"),
                      ("timeout / exception / NCCL warning", "#c62828")])
    return "".join(svg) + legend


def _ring_map(run) -> str | None:
    """The largest communicator's channel-0 ring: host boxes in ring order, hops by tier."""
    if not run.columns("nccl_hops"):
        return None
    from analyzer.transports import view

    try:
        comms = view(run, gpu=run.info.get("gpu"))["communicators"]
    except Exception:  # noqa: BLE001 -- a picture must never cost the report
        return None
    comms = [c for c in comms if c.get("rings")]
    if not comms:
        return None
    comm = max(comms, key=lambda c: (c["nranks"] or 0, c["comm_key"]))
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
    slowest = ring.get("slowest") or {}
    flagged = {(h["src_rank"], h["dst_rank"]) for h in comm.get("attention") or []}
    box_w, gap, y = 150, 60, 30
    width = len(hosts) * (box_w + gap) + 20
    svg = [_svg_open(width, 150)]
    for i, (host, ranks) in enumerate(hosts):
        bx = 10 + i * (box_w + gap)
        intra = [lk for lk in links if lk.get("src_host") == host and lk.get("dst_host") == host]
        tier = intra[0]["tier"] if intra else None
        svg.append(f'<rect x="{bx}" y="{y}" width="{box_w}" height="60" rx="6" fill="#fff" '
                   f'stroke="{_tier_colour(tier)}" stroke-width="3"><title>{e(host)}: ranks {e(rank_ranges(ranks))}; intra-node hops '
                   f'{e(tier or "none")}</title></rect>')
        svg.append(f'<text x="{bx + box_w / 2}" y="{y + 22}" font-size="12" text-anchor="middle">{e(host)}</text>')
        svg.append(f'<text x="{bx + box_w / 2}" y="{y + 40}" font-size="11" text-anchor="middle">ranks '
                   f'{e(rank_ranges(ranks))}</text>')
        svg.append(f'<text x="{bx + box_w / 2}" y="{y + 54}" font-size="10" text-anchor="middle" '
                   f'fill="{_tier_colour(tier)}">{e(tier or "")}</text>')
    for i, link in enumerate(lk for lk in links if lk.get("src_host") != lk.get("dst_host")):
        src = next((j for j, (h, _) in enumerate(hosts) if h == link.get("src_host")), 0)
        x1 = 10 + src * (box_w + gap) + box_w
        wrap = src == len(hosts) - 1
        slow = (link["src_rank"], link["dst_rank"]) == (slowest.get("src_rank"), slowest.get("dst_rank"))
        colour = "#c62828" if (link["src_rank"], link["dst_rank"]) in flagged else _tier_colour(link.get("tier"))
        label = f"{link['src_rank']}&#8594;{link['dst_rank']} {e(link.get('tier'))}"
        if wrap:
            svg.append(f'<path d="M{x1},{y + 45} C{x1 + 40},{y + 110} 0,{y + 110} 10,{y + 45}" fill="none" '
                       f'stroke="{colour}" stroke-width="{3 if slow else 2}"><title>{label}</title></path>')
            svg.append(f'<text x="{width / 2}" y="{y + 108}" font-size="10" text-anchor="middle">{label} '
                       "(ring closes)</text>")
        else:
            svg.append(f'<line x1="{x1}" y1="{y + 30}" x2="{x1 + gap}" y2="{y + 30}" stroke="{colour}" '
                       f'stroke-width="{3 if slow else 2}"><title>{label}</title></line>')
            svg.append(f'<text x="{x1 + gap / 2}" y="{y + 24}" font-size="9" text-anchor="middle">{label}</text>')
    svg.append("</svg>")
    size = f" ({e(comm['nranks'])} ranks)" if known(comm.get("nranks")) else ""
    note = (f"<p class=muted>Communicator {e(comm['comm_key'])}{size}, channel "
            f"{e(ring['channel'])}. Slowest hop {e(slowest.get('src_rank'))}&#8594;{e(slowest.get('dst_rank'))} "
            f"({e(slowest.get('tier'))}, {e(slowest.get('gbyte_s') or '?')} GB/s: {e(slowest.get('priced_as'))}) "
            "caps the ring (drawn thicker); hops slower than their tier should be are red.</p>") if slowest else ""
    return "".join(svg) + note + _legend([(k, v) for k, v in TIER_COLOURS.items() if k not in ("NVLS", "RoCE")])


def _memory(run, report: dict) -> str | None:
    cols = set(run.columns("memory"))
    if not {"rank", "max_allocated_mib"} <= cols:
        return None
    peaks = _frame(run, "SELECT rank, max(max_allocated_mib) AS allocated, max(max_reserved_mib) AS reserved, "
                        "max(capacity_mib) AS capacity FROM memory WHERE rank IS NOT NULL GROUP BY rank ORDER BY rank")
    if peaks.is_empty():
        return None
    capacity = peaks["capacity"].drop_nulls().max() if peaks["capacity"].drop_nulls().len() else None
    if capacity is None:
        capacity = _capacity_of(report)
    top = max(capacity or 0, peaks["reserved"].fill_null(0).max() or 0, peaks["allocated"].fill_null(0).max() or 0)
    if not top:
        return None
    rows = peaks.head(MAX_ROWS)
    left, width, row_h = 70, 700, 16
    svg = [_svg_open(left + width + 120, 20 + row_h * rows.height + 20)]
    for i, r in enumerate(rows.iter_rows(named=True)):
        y = 10 + i * row_h
        for value, colour in ((r["reserved"], "#90caf9"), (r["allocated"], "#1565c0")):
            if value:
                svg.append(f'<rect x="{left}" y="{y}" width="{width * value / top:.1f}" height="{row_h - 4}" '
                           f'fill="{colour}"><title>rank {r["rank"]}: {value:.0f} MiB</title></rect>')
        svg.append(f'<text x="{left - 6}" y="{y + 10}" font-size="10" text-anchor="end">rank {r["rank"]}</text>')
        peak = r["reserved"] or r["allocated"] or 0
        svg.append(f'<text x="{left + width * peak / top + 4:.1f}" y="{y + 10}" font-size="10">{peak / 1024:.1f} GiB'
                   + (f" ({100 * peak / capacity:.0f}%)" if capacity else "") + "</text>")
    if capacity:
        cx = left + width * capacity / top
        svg.append(f'<line x1="{cx:.1f}" y1="4" x2="{cx:.1f}" y2="{14 + row_h * rows.height}" stroke="#c62828" '
                   f'stroke-dasharray="4 3"><title>capacity {capacity:.0f} MiB</title></line>')
    svg.append("</svg>")
    return "".join(svg) + _legend([("max allocated", "#1565c0"), ("max reserved", "#90caf9")]
                                  + ([("GPU capacity", "#c62828")] if capacity else []))


def _capacity_of(report: dict) -> float | None:
    from analyzer import hardware

    name = (report["run"].get("gpu_model") or {}).get("name")
    acc = hardware.find(name) if name else None
    memory = acc.get("memory_gb") if acc else None
    # Cards are sold in GiB ("80GB" H100: 81,559 MiB in nvidia-smi), as rules.memory_model counts them.
    return memory * 1024 if memory else None


def _steps(run) -> str | None:
    if not {"iteration", "elapsed_ms"} <= set(run.columns("iterations")):
        return None
    steps = _frame(run, "SELECT iteration, median(elapsed_ms) AS ms FROM iterations WHERE iteration IS NOT NULL "
                        "AND elapsed_ms IS NOT NULL AND NOT coalesce(validation, false) GROUP BY iteration "
                        "ORDER BY iteration")
    if steps.height < 2:
        return None
    left, width, height = 60, 900, 180
    top = steps["ms"].max() * 1.1
    lo, hi = steps["iteration"].min(), steps["iteration"].max()
    x = _scale(lo, hi, left, left + width)
    points = " ".join(f"{x(it):.1f},{10 + height * (1 - ms / top):.1f}" for it, ms in steps.iter_rows())
    svg = [_svg_open(left + width + 20, height + 40),
           f'<polyline points="{points}" fill="none" stroke="#1565c0" stroke-width="1.5"/>',
           f'<line x1="{left}" y1="{10 + height}" x2="{left + width}" y2="{10 + height}" stroke="#999"/>',
           f'<text x="{left - 6}" y="16" font-size="10" text-anchor="end">{top / 1000:.1f} s</text>',
           f'<text x="{left - 6}" y="{10 + height}" font-size="10" text-anchor="end">0</text>',
           f'<text x="{left}" y="{height + 30}" font-size="10">iteration {lo}</text>',
           f'<text x="{left + width}" y="{height + 30}" font-size="10" text-anchor="end">iteration {hi}</text>',
           "</svg>"]
    median = steps["ms"].median()
    return "".join(svg) + f"<p class=muted>median step {median / 1000:.2f} s over {steps.height} iterations</p>"


def _svg_open(width: float, height: float) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="system-ui,sans-serif">')


def _scale(lo, hi, x0: float, x1: float):
    if isinstance(lo, datetime):
        span = (hi - lo).total_seconds() or 1.0
        return lambda t: x0 + (x1 - x0) * (t - lo).total_seconds() / span
    span = (hi - lo) or 1
    return lambda v: x0 + (x1 - x0) * (v - lo) / span


def _tier_colour(tier: str | None) -> str:
    for key, colour in TIER_COLOURS.items():
        if tier and key.lower() in tier.lower():
            return colour
    return "#546e7a"


def _legend(items: list[tuple[str, str]]) -> str:
    return '<p class="legend">' + "".join(f'<span><i class="sw" style="background:{c}"></i>{e(label)}</span>'
                                         for label, c in items) + "</p>"
