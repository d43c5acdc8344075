"""The fleet view (``postmortem.fleet.fleet_view``) as text, Markdown, JSON and HTML.

Every piece of text that comes from a report (node names, job ids, codes, titles, sentences)
is escaped for its format: control characters made visible on the terminal (``render.safe``),
Markdown/HTML characters escaped in Markdown (``render._md_text``, ``md_code``), ``html.escape``
in HTML (``html_pictures.e``). The HTML page draws two pictures as inline SVG: nodes by culprit
jobs against jobs run (a scatter, the fleet's expected rate as a line, flagged nodes in red),
and failed jobs per day or week by category (stacked bars).
"""

from __future__ import annotations

import json

from postmortem.html_pictures import CSS as PICTURE_CSS
from postmortem.html_pictures import e, f1, fit, nice_ticks, svg_open, text
from postmortem.views.render import _md_text, clip, md_code, safe

TOP = 20   # rows per ranking in text, Markdown and HTML (JSON has them all)


def _p(value: float) -> str:
    if value is None:
        return "-"
    if value == 0.0:
        return "<1e-300"
    return f"{value:.2g}" if value < 0.01 else f"{value:.3f}"


def _headline(v: dict) -> str:
    s = v["summary"]
    span = f", {s['first'][:10]} .. {s['last'][:10]}" if s.get("first") and s.get("last") else ""
    return (f"{s['jobs']} jobs ({s['failed_jobs']} failed, {s['jobs_with_culprit']} with a culprit) on "
            f"{s['nodes']} nodes{span}")


def _test_line(v: dict) -> str:
    t = v["test"]
    return (f"one-sided binomial test of culprit jobs against jobs run at the fleet rate "
            f"{t['node_rate'] * 100:.2f}% per job run, {t['correction']}-corrected over {t['nodes_tested']} nodes; "
            f"flagged when the corrected p < {t['alpha']:g} and culprit in >= {t['min_culprit_jobs']} jobs")


def _drain_line(v: dict) -> str:
    d = v["drain"]
    if not d["nodes"]:
        return "no node, GPU or NIC fails more often than chance"
    return f"{len(d['nodes'])} node(s) fail more often than chance: {d['hostlist']}"


def _periods(v: dict) -> tuple[str, list[dict]]:
    """Per day when the fleet spans up to 62 days, else per week."""
    days = {r["day"] for r in v["categories"]["per_day"]}
    if len(days) <= 62:
        return "day", v["categories"]["per_day"]
    return "week", [{**r, "day": r["week"]} for r in v["categories"]["per_week"]]


# -- text ----------------------------------------------------------------------------------------

def _table(header: list[str], rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    out = [indent + "  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    out += [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return out


def _node_cells(r: dict) -> list[str]:
    return [safe(r["node"]), str(r["jobs"]), str(r["culprit_jobs"]), f"{r['expected']:.1f}",
            str(r["implicated_jobs"]), _p(r["p_value"]), _p(r["p_adjusted"]), "DRAIN" if r["flagged"] else "",
            safe(", ".join(f"{k} {n}" for k, n in list(r.get("codes", {}).items())[:4]))]


def _device_cells(r: dict) -> list[str]:
    return [safe(r["label"]), str(r["jobs"]), str(r["culprit_jobs"]), f"{r['expected']:.2f}", _p(r["p_adjusted"]),
            "DRAIN" if r["flagged"] else "", safe(", ".join(r.get("codes") or []))]


NODE_HEAD = ["node", "jobs", "culprit", "expected", "implicated", "p", "p corrected", "", "culprit codes"]
DEVICE_HEAD = ["device", "jobs", "culprit", "expected", "p corrected", "", "codes"]


def _evidence_text(r: dict, limit: int = 10) -> list[str]:
    out = []
    for ev in (r.get("evidence") or [])[:limit]:
        out.append(f"    job {safe(ev['job_id'])}  {safe((ev['start_time'] or '')[:16])}  {safe(ev['status'])} "
                   f"{safe(ev['category'])}  {safe(ev['code'] or '')}  {safe(clip(ev['sentence'] or '', 140))}")
    more = r["culprit_jobs"] - min(len(r.get("evidence") or []), limit)
    if more > 0:
        out.append(f"    ... {more} more job(s) (--format json lists up to 50)")
    return out


def text_fleet(v: dict) -> str:
    out = [f"FLEET: {_headline(v)}", f"DRAIN: {safe(_drain_line(v))}", f"TEST: {_test_line(v)}", ""]
    nodes = v["nodes"]
    out.append(f"Nodes by culprit jobs against jobs run (top {min(TOP, len(nodes))} of {len(nodes)} with any):")
    out += _table(NODE_HEAD, [_node_cells(r) for r in nodes[:TOP]]) if nodes else ["  none"]
    for r in nodes:
        if r["flagged"]:
            out += ["", f"Evidence for {safe(r['node'])}: culprit in {r['culprit_jobs']} of {r['jobs']} jobs "
                        f"(expected {r['expected']:.1f}); categories "
                        + safe(", ".join(f"{k} {n}" for k, n in r["categories"].items()))]
            out += _evidence_text(r)
    for title, key in (("GPUs (serial, else uuid, else node + bus id)", "gpus"), ("NICs", "nics")):
        rows = v[key]
        out += ["", f"{title} by culprit jobs (top {min(TOP, len(rows))} of {len(rows)}):"]
        out += _table(DEVICE_HEAD, [_device_cells(r) for r in rows[:TOP]]) if rows else ["  none"]
    unit, periods = _periods(v)
    out += ["", f"Failed jobs per {unit} by category:"]
    by_period: dict[str, list[str]] = {}
    for r in periods:
        by_period.setdefault(r["day"], []).append(f"{safe(r['category'])} {r['jobs']}")
    out += [f"  {d}  {', '.join(cats)}" for d, cats in by_period.items()] or ["  none"]
    out += ["", "Most frequent finding codes (errors and warnings; jobs):"]
    out += _table(["code", "name", "severity", "jobs"], [[safe(c["code"]), safe(c["name"]), safe(c["severity"]),
                                                          str(c["jobs"])] for c in v["codes"][:TOP]])
    out += ["", "Jobs with the same cause (same code and node, or the same title without a node):"]
    for g in v["same_cause"][:TOP]:
        ids = ", ".join(safe(j) for j in g["job_ids"][:8]) + (", ..." if g["jobs"] > 8 else "")
        out.append(f"  {safe(g['code'])} {safe(g['node'] or '(job-wide)')}: {g['jobs']} jobs ({ids}) -- "
                   f"{safe(clip(g['template'] or '', 100))}")
    if not v["same_cause"]:
        out.append("  none")
    for m in v.get("messages") or []:
        out.append(f"note: {safe(m)}")
    return "\n".join(out) + "\n"


# -- Markdown ------------------------------------------------------------------------------------

def _cell(value) -> str:
    """Report text in a Markdown table cell: a code span (``md_code``) whose pipes cannot end
    the cell."""
    return md_code(str(value) if value is not None else "").replace("|", "\\|")


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def markdown_fleet(v: dict) -> str:
    out = ["# postmortem fleet", "", f"**{_md_text(_headline(v))}**", "",
           "**Drain:** " + (f"{len(v['drain']['nodes'])} node(s) fail more often than chance: "
                            f"{_cell(v['drain']['hostlist'])}" if v["drain"]["nodes"] else _md_text(_drain_line(v))),
           "", f"Test: {_md_text(_test_line(v))}", "",
           "## Nodes by culprit jobs against jobs run", ""]
    nodes = v["nodes"]
    if nodes:
        out += [_md_row(NODE_HEAD[:7] + ["flag", "culprit codes"]), _md_row(["---"] * 9)]
        for r in nodes[:TOP]:
            c = _node_cells(r)
            out.append(_md_row([_cell(r["node"])] + c[1:7] + ["**DRAIN**" if r["flagged"] else "",
                                                              _md_text(c[8])]))
    else:
        out.append("No node was named as a culprit.")
    for r in nodes:
        if r["flagged"]:
            out += ["", f"### Evidence for {_cell(r['node'])}", "",
                    f"Culprit in {r['culprit_jobs']} of {r['jobs']} jobs (expected {r['expected']:.1f}).", ""]
            for ev in (r.get("evidence") or [])[:20]:
                out.append(f"- job {_cell(ev['job_id'])} {_md_text((ev['start_time'] or '')[:16])} "
                           f"{_md_text(ev['status'] or '')} {_md_text(ev['category'] or '')} "
                           f"{_cell(ev['code'] or '')}: {_md_text(clip(ev['sentence'] or '', 200))}")
    for title, key in (("GPUs", "gpus"), ("NICs", "nics")):
        rows = v[key]
        out += ["", f"## {title}", ""]
        if rows:
            out += [_md_row(DEVICE_HEAD[:5] + ["flag", "codes"]), _md_row(["---"] * 7)]
            for r in rows[:TOP]:
                c = _device_cells(r)
                out.append(_md_row([_cell(r["label"])] + c[1:5] + ["**DRAIN**" if r["flagged"] else "",
                                                                   _md_text(c[6])]))
        else:
            out.append("None named.")
    unit, periods = _periods(v)
    out += ["", f"## Failed jobs per {unit} by category", ""]
    by_period: dict[str, list[str]] = {}
    for r in periods:
        by_period.setdefault(r["day"], []).append(f"{r['category']} {r['jobs']}")
    out += [f"- {_md_text(d)}: {_md_text(', '.join(c))}" for d, c in by_period.items()] or ["None."]
    out += ["", "## Most frequent finding codes", "", _md_row(["code", "name", "severity", "jobs"]),
            _md_row(["---"] * 4)]
    out += [_md_row([_cell(c["code"]), _md_text(c["name"] or ""), _md_text(c["severity"] or ""), str(c["jobs"])])
            for c in v["codes"][:TOP]]
    out += ["", "## Jobs with the same cause", ""]
    for g in v["same_cause"][:TOP]:
        ids = ", ".join(_cell(j) for j in g["job_ids"][:8]) + (", ..." if g["jobs"] > 8 else "")
        out.append(f"- {_cell(g['code'])} {_cell(g['node']) if g['node'] else 'job-wide'}: {g['jobs']} jobs "
                   f"({ids}): {_md_text(clip(g['template'] or '', 120))}")
    if not v["same_cause"]:
        out.append("None.")
    if v.get("messages"):
        out += ["", "## Notes", ""] + [f"- {_md_text(m)}" for m in v["messages"]]
    return "\n".join(out) + "\n"


# -- JSON ----------------------------------------------------------------------------------------

def json_fleet(v: dict) -> str:
    return json.dumps(v, indent=2, default=str, ensure_ascii=False) + "\n"


# -- HTML ----------------------------------------------------------------------------------------

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:0 auto;max-width:1100px;padding:16px 24px;
color:var(--fg);background:var(--bg)}
h1{font-size:22px;margin:8px 0}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid var(--rule)}
h3{font-size:15px;margin:18px 0 4px}.verdict{border-left:6px solid var(--c);background:var(--panel);padding:10px 14px}
code{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid var(--rule);padding:3px 8px;text-align:left}
.muted{color:var(--muted)}.flag{color:var(--bad);font-weight:600}
.legend span{display:inline-block;margin-right:14px}.sw{display:inline-block;width:10px;height:10px;margin-right:4px}
svg.pic .dot{fill:var(--idle);fill-opacity:.7}svg.pic .dot.flagged{fill:var(--bad);fill-opacity:1}
svg.pic .exp{stroke:var(--axis);stroke-width:1.2;stroke-dasharray:5 4;fill:none}
svg.pic .flagline{stroke:var(--bad);stroke-width:1.2;stroke-dasharray:2 3;fill:none}
""" + "".join(f"svg.pic .c-{i}{{fill:{c}}}.sw.c-{i}{{background:{c}}}" for i, c in enumerate(
    ("#c62828", "#1565c0", "#6a1b9a", "#ef6c00", "#2e7d32", "#00838f", "#ad1457", "#5d4037", "#546e7a", "#9e9d24")))


def scatter(v: dict) -> str | None:
    """Nodes: jobs run (x) against culprit jobs (y); the fleet's expected rate as a dashed line."""
    pts = [(r["jobs"], r["culprit_jobs"], r["flagged"], r["node"]) for r in v["nodes"] if r["jobs"]]
    if not pts:
        return None
    w, h, left, right, top, bottom = 1040, 340, 56, 20, 16, 44
    xmax = max(p[0] for p in pts) * 1.05
    ymax = max(max(p[1] for p in pts), 1) * 1.1
    xt, yt = nice_ticks(xmax), nice_ticks(ymax)
    xmax, ymax = max(xmax, xt[-1]), max(ymax, yt[-1])

    def x(val):
        return left + (w - left - right) * val / xmax

    def y(val):
        return h - bottom - (h - top - bottom) * val / ymax

    parts = [svg_open(w, h, "nodes by culprit jobs against jobs run")]
    for t in yt:
        parts.append(f'<line class="grid" x1="{left}" x2="{w - right}" y1="{f1(y(t))}" y2="{f1(y(t))}"/>')
        parts.append(text(left - 6, y(t) + 4, f"{t:g}", 10, "end", "muted"))
    for t in xt:
        parts.append(text(x(t), h - bottom + 16, f"{t:g}", 10, "middle", "muted"))
    parts.append(f'<line class="axis" x1="{left}" x2="{w - right}" y1="{h - bottom}" y2="{h - bottom}"/>')
    parts.append(f'<line class="axis" x1="{left}" x2="{left}" y1="{top}" y2="{h - bottom}"/>')
    rate = v["test"]["node_rate"]
    x_end = min(xmax, ymax / rate) if rate > 0 else xmax
    parts.append(f'<line class="exp" x1="{f1(x(0))}" y1="{f1(y(0))}" x2="{f1(x(x_end))}" y2="{f1(y(x_end * rate))}"/>')
    line = [(n, k) for n, k in flag_line(v, xmax) if k <= ymax]    # it ends where it leaves the picture
    if len(line) > 1:
        pts_line = " ".join(f"{f1(x(n))},{f1(y(k))}" for n, k in line)
        parts.append(f'<polyline class="flagline" points="{pts_line}"/>')
    parts.append(text(w - right, h - 6, "jobs run", 11, "end", "muted"))
    parts.append(text(left + 6, top + 10, "culprit jobs", 11, "start", "muted"))
    for n, k, flagged, node in sorted(pts, key=lambda p: p[2]):
        cls = "dot flagged" if flagged else "dot"
        parts.append(f'<circle class="{cls}" cx="{f1(x(n))}" cy="{f1(y(k))}" r="{4 if flagged else 2.6}">'
                     f"<title>{e(node)}: {k} of {n} jobs</title></circle>")
    last = -1e9   # flagged nodes' labels, top to bottom, at least a line apart
    for n, k, _, node in sorted((p for p in pts if p[2]), key=lambda p: -p[1]):
        ly = max(y(k) + 4, last + 13)
        last = ly
        parts.append(text(x(n) + 7, ly, fit(node, 11, 180), 11, "start", "bad"))
    parts.append("</svg>")
    return "".join(parts)


def flag_line(v: dict, xmax: float, points: int = 60) -> list[tuple[float, int]]:
    """Under Bonferroni: for jobs run n, the fewest culprit jobs that get a node flagged (the
    threshold does not depend on the other nodes); empty under Benjamini-Hochberg."""
    from postmortem.fleet import binom_sf

    t = v["test"]
    rate, m = t["node_rate"], t["nodes_tested"]
    if t["correction"] != "Bonferroni" or not 0 < rate < 1 or not m:
        return []
    out = []
    for i in range(1, points + 1):
        n = max(1, round(xmax * i / points))
        k = max(t["min_culprit_jobs"], int(n * rate))
        while k <= n and binom_sf(k, n, rate) * m >= t["alpha"]:
            k += 1
        if k <= n:
            out.append((n, k))
    return out


def bars(v: dict) -> tuple[str, list[str]] | None:
    """Failed jobs per day (or week), stacked by category; (svg, categories in colour order)."""
    unit, periods = _periods(v)
    if not periods:
        return None
    days = sorted({r["day"] for r in periods})
    cats = sorted({r["category"] for r in periods}, key=lambda c: (-sum(r["jobs"] for r in periods
                                                                        if r["category"] == c), c))
    colour = {c: f"c-{i % 10}" for i, c in enumerate(cats)}
    totals = {d: sum(r["jobs"] for r in periods if r["day"] == d) for d in days}
    w, h, left, right, top, bottom = 1040, 260, 56, 20, 16, 44
    yt = nice_ticks(max(totals.values()) * 1.05)
    ymax = max(yt[-1], 1)
    slot = (w - left - right) / len(days)
    bw = max(slot * 0.8, 1)

    def y(val):
        return h - bottom - (h - top - bottom) * val / ymax

    parts = [svg_open(w, h, f"failed jobs per {unit} by category")]
    for t in yt:
        parts.append(f'<line class="grid" x1="{left}" x2="{w - right}" y1="{f1(y(t))}" y2="{f1(y(t))}"/>')
        parts.append(text(left - 6, y(t) + 4, f"{t:g}", 10, "end", "muted"))
    every = max(1, int(len(days) / ((w - left - right) / 70)) + 1)
    for i, d in enumerate(days):
        base = 0
        x0 = left + i * slot + (slot - bw) / 2
        for r in sorted((r for r in periods if r["day"] == d), key=lambda r: cats.index(r["category"])):
            parts.append(f'<rect class="{colour[r["category"]]}" x="{f1(x0)}" y="{f1(y(base + r["jobs"]))}" '
                         f'width="{f1(bw)}" height="{f1(y(base) - y(base + r["jobs"]))}"><title>{e(d)} '
                         f'{e(r["category"])}: {r["jobs"]}</title></rect>')
            base += r["jobs"]
        if i % every == 0:
            parts.append(text(x0 + bw / 2, h - bottom + 16, d[5:], 10, "middle", "muted"))
    parts.append(f'<line class="axis" x1="{left}" x2="{w - right}" y1="{h - bottom}" y2="{h - bottom}"/>')
    parts.append(text(w - right, h - 6, unit + " (month-day)", 11, "end", "muted"))
    parts.append("</svg>")
    return "".join(parts), [colour[c] for c in cats]


def _html_table(head: list[str], rows: list[list[str]]) -> str:
    return ("<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows) + "</table>")


def html_fleet(v: dict) -> str:
    colour = "#c62828" if v["drain"]["nodes"] else "#2e7d32"
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             "<title>postmortem fleet</title>", f"<style>{PICTURE_CSS}{CSS}</style></head><body>",
             "<h1>postmortem fleet</h1>", f"<p>{e(_headline(v))}</p>",
             f'<div class="verdict" style="--c:{colour}"><b>{e(_drain_line(v))}</b>'
             f'<p class="muted">{e(_test_line(v))}</p></div>']
    parts.append("<h2>Nodes by culprit jobs against jobs run</h2>")
    pic = scatter(v)
    if pic:
        parts += [pic, '<p class="legend"><span><i class="sw" style="background:var(--idle)"></i>node</span>'
                       '<span><i class="sw" style="background:var(--bad)"></i>flagged</span>'
                       '<span class="muted">dashed grey: the culprit jobs the fleet\'s rate expects; dotted red: '
                       'the fewest that get a node flagged</span></p>']
    nodes = v["nodes"]
    parts.append(_html_table(NODE_HEAD[:7] + ["", "culprit codes"], [
        [f"<code>{e(r['node'])}</code>", *(e(c) for c in _node_cells(r)[1:7]),
         '<span class="flag">DRAIN</span>' if r["flagged"] else "", e(_node_cells(r)[8])] for r in nodes[:TOP]])
        if nodes else "<p>No node was named as a culprit.</p>")
    for r in nodes:
        if r["flagged"]:
            parts.append(f"<h3>Evidence for <code>{e(r['node'])}</code>: culprit in {r['culprit_jobs']} of "
                         f"{r['jobs']} jobs (expected {r['expected']:.1f})</h3>")
            parts.append(_html_table(["job", "start", "status", "category", "code", "verdict"], [
                [f"<code>{e(ev['job_id'])}</code>", e((ev["start_time"] or "")[:16]), e(ev["status"]),
                 e(ev["category"]), f"<code>{e(ev['code'])}</code>", e(clip(ev["sentence"] or "", 240))]
                for ev in (r.get("evidence") or [])[:20]]))
    for title, key in (("GPUs", "gpus"), ("NICs", "nics")):
        rows = v[key]
        parts.append(f"<h2>{title}</h2>")
        parts.append(_html_table(DEVICE_HEAD[:5] + ["", "codes"], [
            [f"<code>{e(r['label'])}</code>", *(e(c) for c in _device_cells(r)[1:5]),
             '<span class="flag">DRAIN</span>' if r["flagged"] else "", e(_device_cells(r)[6])] for r in rows[:TOP]])
            if rows else "<p>None named.</p>")
    unit, _ = _periods(v)
    parts.append(f"<h2>Failed jobs per {unit} by category</h2>")
    drawn = bars(v)
    if drawn:
        svg, classes = drawn
        unit_periods = _periods(v)[1]
        cats = []
        for r in unit_periods:
            if r["category"] not in cats:
                cats.append(r["category"])
        cats.sort(key=lambda c: (-sum(r["jobs"] for r in unit_periods if r["category"] == c), c))
        parts += [svg, '<p class="legend">' + "".join(f'<span><i class="sw {cls}"></i>{e(c)}</span>'
                                                      for c, cls in zip(cats, classes)) + "</p>"]
    else:
        parts.append("<p>No failed job with a time.</p>")
    parts.append("<h2>Most frequent finding codes</h2>")
    parts.append(_html_table(["code", "name", "severity", "jobs"], [
        [f"<code>{e(c['code'])}</code>", e(c["name"]), e(c["severity"]), e(c["jobs"])] for c in v["codes"][:TOP]]))
    parts.append("<h2>Jobs with the same cause</h2>")
    parts.append(_html_table(["code", "node", "jobs", "title", "job ids"], [
        [f"<code>{e(g['code'])}</code>", f"<code>{e(g['node'])}</code>" if g["node"] else "job-wide", e(g["jobs"]),
         e(clip(g["template"] or "", 160)), e(", ".join(g["job_ids"][:10]) + (", ..." if g["jobs"] > 10 else ""))]
        for g in v["same_cause"][:TOP]]) if v["same_cause"] else "<p>None.</p>")
    if v.get("messages"):
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{e(m)}</li>" for m in v["messages"]) + "</ul>")
    parts.append(f'<p class="muted">{e(v.get("generator", ""))} &middot; {e(v["schema"])}</p></body></html>')
    return "\n".join(parts) + "\n"


RENDERERS = {"text": text_fleet, "md": markdown_fleet, "json": json_fleet, "html": html_fleet}
FILES = {"text": "fleet.txt", "md": "fleet.md", "json": "fleet.json", "html": "fleet.html"}
