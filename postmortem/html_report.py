"""The HTML report: one self-contained file (no script, no network) with the verdict, actions,
findings with their evidence, and four pictures drawn as inline SVG from the store
(``postmortem.html_pictures``): the ranks around the hang's start or the first failure, with the
node events; the ring transport map (a node matrix above 16 hosts); memory peaks per rank
against capacity, OOMs marked (the Memory screen's numbers); step time per iteration.

Colours are CSS variables with a dark variant (``prefers-color-scheme: dark``). Every piece of
text that can come from a log goes through ``html.escape``: a line holding ``<script>`` shows
as text.
"""

from __future__ import annotations

import re

from postmortem import html_pictures as pictures
from postmortem.html_pictures import e
from postmortem.views.render import (action_items, clip, finding_details, input_files, outcome_lines, rank_count,
                             rule_error_lines, time_span, upper_first)

SEVERITY_COLOURS = {"error": "#c62828", "warning": "#ef6c00", "info": "#546e7a"}
STATUS_COLOURS = {"culprit": "#c62828", "no-single-culprit": "#ef6c00", "inconclusive": "#ef6c00",
                  "degraded": "#f9a825", "healthy": "#2e7d32"}
CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:0 auto;max-width:1100px;padding:16px 24px;
color:var(--fg);background:var(--bg)}
h1{font-size:22px;margin:8px 0}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid var(--rule)}
h3{font-size:15px;margin:18px 0 4px}
.verdict{border-left:6px solid var(--c);background:var(--panel);padding:10px 14px;margin:12px 0}
.badge{display:inline-block;color:#fff;background:var(--c);border-radius:3px;padding:1px 7px;font-size:12px;
font-weight:600;text-transform:uppercase;margin-right:6px}
code,pre{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{background:var(--code);padding:6px 8px;overflow-x:auto;white-space:pre-wrap;word-break:break-all;margin:2px 0 8px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid var(--rule);padding:3px 8px;text-align:left}
a{color:var(--pcie)}.muted{color:var(--muted)}.finding{margin:10px 0 18px}
.legend span{display:inline-block;margin-right:14px}.sw{display:inline-block;width:10px;height:10px;margin-right:4px}
""" + pictures.CSS


def html_report(report: dict, run=None, gpu: str | None = None) -> str:
    """The whole page; ``run`` (the analysed store) adds the pictures, the report dict alone
    still gives verdict, actions, findings and coverage; ``gpu`` is ``report --gpu``, the card
    the ring map prices hops against."""
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
        parts += _pictures(report, run, gpu)
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


def _with_code(text: str) -> str:
    """A rule's suggestion: the commands it quotes in backticks as ``<code>``, all of it escaped."""
    parts = re.split(r"`([^`]+)`", text or "")
    return "".join(f"<code>{e(part)}</code>" if i % 2 else e(part) for i, part in enumerate(parts))


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
                       f"<pre>{e(clip(ev['text'], 600))}</pre>")
        if f.get("caused_by"):
            links = ", ".join(f'<a href="#{e(c)}">{e(c)}</a>' for c in f["caused_by"])
            out.append(f"<p>Caused by {links}</p>")
        if f.get("suggestion"):
            out.append(f"<p><b>Do:</b> {_with_code(f['suggestion'])}</p>")
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
            ("inputs", f"{input_files(t)}, {t['lines']} lines: {t['parsed_lines']} parsed, "
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

PICTURES = ("Around the failure, per rank", "Ring transport map", "Memory peak per rank against capacity",
            "Step time per iteration")


def _pictures(report: dict, run, gpu: str | None) -> list[str]:
    """The four pictures (``postmortem.html_pictures``); one that cannot be drawn is left out, and a
    picture that fails costs only itself."""
    out = []
    culprit_nodes = report["verdict"]["culprit"]["nodes"]
    draws = (lambda: pictures.timeline(run, report), lambda: pictures.ring_map(run, culprit_nodes, gpu),
             lambda: pictures.memory(run, report), lambda: pictures.steps(run))
    for title, draw in zip(PICTURES, draws):
        try:
            svg = draw()
        except Exception:  # noqa: BLE001 -- a picture must never cost the report
            svg = None
        if svg:
            out += [f"<h2>{e(title)}</h2>", svg]
    return out
