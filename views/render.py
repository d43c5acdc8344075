"""Plain-text and Markdown views of a report dict. Log text is escaped for Markdown and
stripped of control characters for the terminal, so a crafted log line cannot inject markup
or escape sequences."""

from __future__ import annotations

import re

# C0/C1 control characters (ESC, BEL, CR, ...; not tab and newline) and the Unicode bidi
# controls, which reorder what a terminal or browser shows ("Trojan Source" spoofing).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _visible(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe(text: str | None) -> str:
    """Log text for a terminal: control characters (ESC included) become visible escapes."""
    return _CONTROL.sub(_visible, text or "")


def md_code(text: str | None) -> str:
    """Log text inside Markdown inline code: backticks cannot close the span, and a newline
    cannot end the paragraph it is in (and start a heading or a fence on the next line)."""
    body = safe(text).replace("`", "\u02cb").replace("\n", " ")
    return f"`{body}`"


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, with an ellipsis when something was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def md_code_block(lines: list[str], indent: str = "", limit: int = 200) -> list[str]:
    """Log lines as a fenced code block (shown as written, never markup): each line made safe and
    cut with an ellipsis; the fence is longer than any run of backticks inside, so no line can
    close it."""
    body = [clip(safe(line).replace("\n", " "), limit) for line in lines]
    longest = max((len(run) for line in body for run in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{indent}{fence}text"] + [f"{indent}{line}" for line in body] + [f"{indent}{fence}"]


def md_with_code(text: str) -> str:
    """Prose with commands in backticks (postmortem.rules' suggestions): the backticked parts become code
    spans, the rest is escaped prose."""
    parts = re.split(r"`([^`]+)`", text or "")
    return "".join(md_code(part) if i % 2 else _md_text(part) for i, part in enumerate(parts))


def upper_first(text: str) -> str:
    """``text`` with its first letter in upper case, the rest as is (labels can quote log text)."""
    return text[:1].upper() + text[1:]


def known(value) -> bool:
    """A value worth printing: not missing (None or empty). Zero is a value."""
    return value is not None and value != "" and value != []


def or_unknown(value, unknown: str = "unknown") -> str:
    """``value`` as text, or ``unknown`` when it is missing: no report says None."""
    return str(value) if known(value) else unknown


def _gpu_segments(g: dict) -> list[tuple[str, str]]:
    """Where a GPU is (node, GPU index, PCI bus id, pid), each part only when the inputs say it."""
    segments = [("t", or_unknown(g.get("node"), "unknown node"))]
    if known(g.get("cuda_dev")):
        segments.append(("t", f" GPU {g['cuda_dev']}"))
    if known(g.get("bus_id")):
        segments += [("t", " bus "), ("c", str(g["bus_id"]))]
    if known(g.get("pid")):
        segments.append(("t", f" pid {g['pid']}"))
    return segments


def _mapping(g: dict) -> str:
    """How the rank was tied to the GPU: `` (rank mapping: certain, c10d [rankN]: prefix)``."""
    parts = [str(g[k]) for k in ("mapping_confidence", "mapping_source") if known(g.get(k))]
    return f" (rank mapping: {', '.join(parts)})" if parts else ""


def action_items(report: dict) -> list[tuple[int, list[tuple[str, str]]]]:
    """The actions as (indent, segments) for every format; a segment is ``(kind, text)`` with kind
    ``t`` (plain), ``b`` (a label to stress) or ``c`` (a value to copy: host list, command, id).
    Each renderer escapes the text its own way. Values the inputs do not give are left out."""
    v, a = report["verdict"], report["actions"]
    items: list[tuple[int, list[tuple[str, str]]]] = []
    if a.get("culprit_ranks"):
        items.append((0, [("b", "Culprit rank(s) "), ("c", a["culprit_ranks"]), ("t", " on "),
                          ("c", a.get("inspect_hostlist") or "unknown nodes")]))
        for g in a["gpus"]:
            rank = f"rank {g['rank']}: " if known(g.get("rank")) else ""
            items.append((1, [("t", rank), *_gpu_segments(g), ("t", _mapping(g))]))
    elif a.get("inspect_hostlist"):
        items.append((0, [("b", "Inspect nodes "), ("c", a["inspect_hostlist"])]))
    items += [(0, [("b", "Competing explanation: "), ("t", c)]) for c in v.get("competing", [])]
    if a.get("drain_hostlist"):
        reason = f" ({a['drain_reason']})" if a.get("drain_reason") else ""
        items.append((0, [("b", "Drain "), ("c", a["drain_hostlist"]), ("t", reason)]))
    for g in a.get("rma_gpus", []):
        items.append((0, [("b", "RMA "), *_gpu_segments(g), ("t", " serial "), ("c", or_unknown(g.get("serial"))),
                          ("t", " uuid "), ("c", or_unknown(g.get("uuid")))]
                      + ([("t", f" ({g['reason']})")] if g.get("reason") else [])))
    if a.get("gpu_hours_lost"):
        h = a["gpu_hours_lost"]
        items.append((0, [("b", "GPU-hours lost: "), ("t", f"{h['value']} ({h['ranks']} ranks x {h['hours']} h "
                                                          "since the last progress)")]))
    c = a.get("checkpoint") or {}
    if c.get("last_complete_iteration") is not None:
        items.append((0, [("b", "Last complete checkpoint: "), ("t", f"iteration {c['last_complete_iteration']}")]
                      + ([("t", " at "), ("c", c["last_complete_path"])] if c.get("last_complete_path") else [])))
    if c.get("warning"):
        items.append((0, [("b", "Checkpoint: "), ("t", c["warning"])]))
    for p in a.get("py_spy", []):
        rank = f" (rank {p['rank']})" if known(p.get("rank")) else ""
        items.append((0, [("b", "If still hanging: "), ("c", p["command"]), ("t", rank)]))
    if a.get("note"):
        items.append((0, [("b", "Note: "), ("t", a["note"])]))
    return items


def finding_details(f: dict) -> list[tuple[str, str, list[str]]]:
    """What a finding's details add for a reader, for every format, as ``(kind, label, lines)``:
    kind ``line`` (each line a sentence after the label) or ``block`` (log text under the label)."""
    details = f.get("details", {})
    instead = details.get("culprit_did_instead") or {}
    parts = [("line", "why no timeout", details.get("why_no_timeout") or []),
             ("block", "culprit's main thread (py-spy, innermost first)", instead.get("py_spy_main_thread") or []),
             ("block", "culprit's last lines", instead.get("last_lines") or []),
             ("line", "note", details.get("notes") or [])]
    parts += _rank_tails(details.get("ranks"))
    return [(kind, label, [str(x) for x in lines]) for kind, label, lines in parts if lines]


def _rank_tails(ranks, limit: int = 16) -> list[tuple[str, str, list]]:
    """Each rank's first failure and last lines (X000's ``details.ranks``), earliest failure first."""
    if not isinstance(ranks, list):
        return []
    out = []
    for t in [t for t in ranks if isinstance(t, dict) and "last_lines" in t][:limit]:
        first = t.get("first_failure") or {}
        label = f"rank {t.get('rank')}"
        if first:
            where = f" ({first['path']}:{first['line']})" if known(first.get("path")) else ""
            label += f", first failure: {first.get('what')}{where}"
        if known(t.get("last_step")):
            label += f", last step {t['last_step']}"
        out.append(("block", label + ", last lines", [line.get("text") or "" for line in t["last_lines"]]))
    if len(ranks) > limit:
        out.append(("line", "more ranks", [f"{len(ranks) - limit} more in the JSON report (details.ranks)"]))
    return out


def rule_error_lines(report: dict) -> tuple[str, list[str]]:
    """A heading and one sentence per rule that raised (``rule_errors``), for every format: which
    rule, the exception, where, and that its findings are missing. Empty when none failed."""
    errors = report.get("rule_errors") or []
    if not errors:
        return "", []
    rules = sorted({e["rule"] for e in errors})
    heading = (f"PARTIAL REPORT: {len(rules)} rule(s) failed and their findings are missing; "
               "the other rules' findings and the verdict from them stand")
    lines = []
    for e in errors:
        what = e["exception"] + (f": {e['message']}" if e.get("message") else "")
        where = f" at {e['where']}" if e.get("where") else ""
        attempt = f" on attempt {e['attempt']}" if known(e.get("attempt")) and _attempts(report) > 1 else ""
        rule = " ".join(str(x) for x in (e["rule"], e.get("name")) if x)
        lines.append(f"{rule} raised {what}{where}{attempt}; its findings are missing")
    return heading, lines


def outcome_lines(report: dict) -> tuple[str, list[str]]:
    """What happened to the job, before why (every format): a headline such as ``failed`` or
    ``completed after a restart (recovered)``, then the signs it was decided from and, with torchrun
    restarts, one line per attempt with its outcome and last step."""
    o = report.get("outcome") or {}
    outcome = o.get("outcome") or "unknown"
    attempts = (report.get("attempts") or {}).get("all") or []
    headline = outcome
    if outcome == "hung" and known(o.get("ended_by")):
        headline = f"hung, then ended from outside ({o['ended_by']})"
    if o.get("recovered"):
        failed = sum(a.get("outcome") in ("failed", "hung") for a in attempts[:-1])
        headline = f"completed after {failed} failed attempt(s) (recovered)"
    elif len(attempts) > 1:
        headline = (f"{outcome} (in attempt {o.get('attempt')}, the last of {len(attempts)}: the workers were "
                    f"restarted {len(attempts) - 1} time(s))")
    lines = []
    for b in (o.get("basis") or [])[:3]:
        where = f" ({b['path']}:{b['line']})" if known(b.get("path")) and known(b.get("line")) else ""
        lines.append(f"{b['what']}{where}")
    analysed = (report.get("attempts") or {}).get("analysed")
    for a in attempts if len(attempts) > 1 else []:
        result = a.get("outcome") or "unknown"
        if known(a.get("last_step")):
            result += f" {'at' if result == 'completed' else 'after'} step {a['last_step']}"
        mark = " (the findings below are of this attempt)" if a["attempt"] == analysed else ""
        lines.append(f"attempt {a['attempt']}: {result}{mark}: {a['verdict'].split('. ')[0].split('; ')[0].rstrip('.')}")
    return headline, lines


def _attempts(report: dict) -> int:
    return len((report.get("attempts") or {}).get("all") or [])


def text_report(report: dict) -> str:
    v = report["verdict"]
    headline, basis = outcome_lines(report)
    out = [f"OUTCOME: {safe(headline)}", *[f"  {safe(line)}" for line in basis],
           f"VERDICT ({v['status']}, confidence {v['confidence']:.2f}): {safe(v['sentence'])}", ""]
    heading, failed = rule_error_lines(report)
    if failed:
        out += [heading + ":", *[f"  ! {safe(line)}" for line in failed], ""]
    for indent, segments in action_items(report):
        out.append("  " * indent + "".join(safe(text) for _, text in segments))
    out.append("")
    for f in report["findings"]:
        out.append(f"[{f['severity'].upper()}] {f['code']} {f['name']} (confidence {f['confidence']:.2f}): "
                   f"{safe(f['title'])}")
        out.append(f"    {safe(f['message'])}")
        for kind, label, lines in finding_details(f):
            if kind == "line":
                out += [f"    {label}: {safe(line)}" for line in lines]
            else:
                out.append(f"    {label}:")
                out += [f"      {clip(safe(line), 200)}" for line in lines]
        for e in f["evidence"]:
            note = f" ({e['note']})" if e.get("note") else ""
            out.append(f"    evidence {e['path']}:{e['line']}{note}")
            out.append(f"      {clip(safe(e['text']), 240)}")
        if f.get("caused_by"):
            out.append(f"    caused by: {', '.join(f['caused_by'])}")
        if f.get("suggestion"):
            out.append(f"    -> {safe(f['suggestion'])}")
        out.append("")
    if report["missing_evidence"]:
        out.append("Evidence gaps:")
        out += [f"  - {m['what']}  (next time: {m['enable']})" for m in report["missing_evidence"]]
        out.append("")
    out += _summary_lines(report)
    # Every line once more through safe (a no-op on text already made safe): paths, ids and
    # versions that come from the inputs (a file name can hold ESC) cannot reach the terminal raw.
    return "\n".join(safe(line) for line in out) + "\n"


def _summary_lines(report: dict) -> list[str]:
    r = report["run"]
    t = report["inputs"]["totals"]
    lines = [f"Run: {run_size(r)}; NCCL {', '.join(r['nccl_versions']) or 'version unknown'}; time {time_span(r)}"]
    lines.append(f"Inputs: {input_files(t)}, {t['lines']} lines: {t['parsed_lines']} parsed, "
                 f"{t['unparsed_lines']} unparsed")
    n = report["inputs"]["nccl_lines"]
    if n["total"]:
        lines.append(f"NCCL lines: {n['typed']} of {n['total']} understood"
                     + (f"; {n['untyped']} not, in {len(report['inputs']['nccl_gaps'])} shape(s):"
                        if n["untyped"] else ""))
        for gap in report["inputs"]["nccl_gaps"][:10]:
            lines.append(f"  ? {gap['count']:>6} x {safe(gap['shape'])[:100]}  (e.g. {safe(gap['example'])})")
    for m in report["messages"]:
        lines.append(f"  ! {safe(m)}")
    return lines


def input_files(t: dict) -> str:
    """``129 files (40 skipped, all of them empty)``: the inputs, and the empty ones said once."""
    empty = t.get("empty") or 0
    if not empty:
        return f"{t['files']} files ({t['skipped']} skipped)"
    which = "all of them empty" if empty == t["skipped"] else f"{empty} of them empty"
    return f"{t['files']} files ({t['skipped']} skipped, {which})"


def rank_count(r: dict) -> str:
    """``40 ranks``, ``40 ranks (38 seen)``, ``4 ranks seen (world size unknown)`` or ``ranks unknown``."""
    world, seen = r.get("ranks"), r.get("ranks_seen")
    if known(world):
        return f"{world} ranks" + (f" ({seen} seen)" if known(seen) and seen != world else "")
    return f"{seen} ranks seen (world size unknown)" if seen else "ranks unknown"


def run_size(r: dict) -> str:
    """``40 ranks on 5 node(s)``; what is unknown is said so."""
    nodes = r.get("nodes") or []
    return f"{rank_count(r)} on {len(nodes)} node(s)" if nodes else f"{rank_count(r)}; nodes unknown"


def time_span(r: dict) -> str:
    """``START .. END (how the clock was read; the end is the last timestamped line (what, path:line))``,
    or ``unknown``: the one end every view of the report gives."""
    span = r.get("time_span") or {}
    start, end = span.get("start"), span.get("end")
    if not (known(start) or known(end)):
        return "unknown"
    notes = [span.get("source"), f"the end is {span['end_basis']}" if known(span.get("end_basis")) else None]
    notes = [n for n in notes if known(n)]
    return f"{or_unknown(start)} .. {or_unknown(end)}" + (f" ({'; '.join(notes)})" if notes else "")


def markdown_report(report: dict) -> str:
    v = report["verdict"]
    headline, basis = outcome_lines(report)
    out = ["# postmortem report", "", f"**Outcome:** {_md_text(headline)}", ""]
    out += [f"- {_md_text(line)}" for line in basis] + ([""] if basis else [])
    out += [f"**Verdict ({v['status']}, confidence {v['confidence']:.2f}):** " + _md_text(v["sentence"]), ""]
    heading, failed = rule_error_lines(report)
    if failed:
        out += ["## Partial report", "", f"**{_md_text(heading)}.**", ""]
        out += [f"- {_md_text(line)}" for line in failed]
        out.append("")
    out.append("## Actions")
    for indent, segments in action_items(report):
        out.append("  " * indent + "- " + "".join(
            md_code(text) if kind == "c" else f"**{_md_text(text).strip()}** " if kind == "b" else _md_text(text)
            for kind, text in segments))
    out.append("")
    out.append("## Findings")
    for f in report["findings"]:
        out.append(f"### {f['severity']}: {f['code']} {f['name']} — {_md_text(f['title'])}")
        out.append(f"{_md_text(f['message'])} (confidence {f['confidence']:.2f})")
        for kind, label, lines in finding_details(f):
            if kind == "line":
                out += [f"- {_md_text(upper_first(label))}: {_md_text(line)}" for line in lines]
            else:
                out.append(f"- {_md_text(upper_first(label))}:")
                out += ["", *md_code_block(lines, indent="  "), ""]
        for e in f["evidence"]:
            where = md_code(f"{e['path']}:{e['line']}")
            out.append(f"- {where} {md_code(clip(e['text'], 300))}")
        if f.get("suggestion"):
            out.append(f"- **Do:** {md_with_code(f['suggestion'])}")
        out.append("")
    if report["missing_evidence"]:
        out.append("## Evidence gaps")
        out += [f"- {_md_text(m['what'])} — next time: {md_code(m['enable'])}" for m in report["missing_evidence"]]
        out.append("")
    out.append("## Run")
    out += [f"- {_md_text(line)}" for line in _summary_lines(report)]
    return "\n".join(out) + "\n"


# Inline: emphasis, code, links and images, raw HTML and entities, table cells, strikethrough.
_MD_INLINE = re.compile(r"([\\`*_\[\]<>|&~!])")
# At the start of a block: a heading, a list item, a quote, a fence, a setext underline.
_MD_BLOCK = re.compile(r"^(\s*)(#|[-+=]|\d+(?=[.)]))")


def _md_text(text: str) -> str:
    """Escape Markdown/HTML-significant characters in prose that may quote log text: nothing in
    it can become markup, a link, HTML or a new block (newlines are folded)."""
    body = _MD_INLINE.sub(r"\\\1", safe(text).replace("\n", " "))
    return _MD_BLOCK.sub(lambda m: m.group(1) + ("\\" + m.group(2) if not m.group(2)[0].isdigit() else
                                               m.group(2) + "\\"), body, count=1)
