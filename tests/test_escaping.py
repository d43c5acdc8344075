"""Issue 12: crafted log text (Rich markup, terminal escapes and OSC 8 hyperlinks, HTML, Markdown
injection, bidi overrides) and a crafted file name flow from a small run into the findings'
details and evidence, and inject nothing into the text report and stderr on a terminal, the
Markdown report (rendered by a CommonMark/GFM parser to see what a viewer would make of it), the
HTML report (parsed: no tag, attribute or link the report did not write itself) and the TUI's
text."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from postmortem.cli import main
from postmortem.html_report import html_report
from postmortem.analyzer.pipeline import analyze
from postmortem.views.render import markdown_report, safe, text_report
from postmortem.rules.report import build_report
from tests.scenario import write_scenario

# The culprit's last lines (shown whole in every format, up to 200 characters each).
LINES = [
    "[bold red]x[/] [link=http://evil.example]y[/link] \x1b]0;pwn\x07 \x1b[2J \x9b31m C1",
    "\x1b]8;;http://osc8.example\x1b\\click\x1b]8;;\x1b\\ <script>alert(1)</script> <img src=x onerror=alert(1)>",
    "](javascript:alert(1)) [a](javascript:alert(2)) `tick` | a | b | &lt;b&gt; ![i](x) <http://auto.example>",
    "# heading",
    "~~~ \u202eevil\u202c <b onmouseover=\"alert(3)\">",
]
# Appended to a waiting rank's watchdog line (evidence: Markdown shows 300 characters, HTML 600).
EVIDENCE_TAIL = " <script>ev()</script>`|# \x1b[2J"
# A file name: any byte but / and NUL is allowed on Linux.
BAD_NAME = "empty \x1b]0;pwn\x07 <img src=x onerror=alert(4)> [red]x.log"
RAW = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture(scope="module")
def crafted(tmp_path_factory):
    root = tmp_path_factory.mktemp("crafted")
    folder = write_scenario(root / "run", ranks=4, culprit=2, culprit_last_line="\n".join(LINES))
    waiting = folder / "node-01" / "rank0.log"
    waiting.write_text(waiting.read_text().replace("before timing out.", "before timing out." + EVIDENCE_TAIL, 1))
    (folder / "node-01" / BAD_NAME).write_bytes(b"")
    db = root / "store.duckdb"
    run = analyze([folder], db_path=db)
    report = build_report(run)
    return {"folder": folder, "run": run, "report": report, "db": db}


def test_the_crafted_text_reaches_the_findings(crafted):
    h001 = crafted["report"]["findings"][0]
    assert h001["code"] == "H001"
    assert h001["details"]["culprit_did_instead"]["last_lines"][:5] == LINES
    assert any(e["text"].endswith(EVIDENCE_TAIL) for e in h001["evidence"])
    assert any(safe(BAD_NAME) in m for m in crafted["report"]["messages"])  # escaped at discovery (docs/security.md)


def test_text_report_and_stderr_on_a_terminal(crafted, capsys):
    text = text_report(crafted["report"])
    assert not RAW.search(text.replace("\n", ""))
    for line in LINES:
        assert safe(line) in text  # shown, made visible, not interpreted
    assert "\\x1b]0;pwn\\x07" in text and "\\u202eevil" in text and "\\x9b31m" in text
    assert main(["report", str(crafted["folder"]), "--format", "text", "--quiet"]) == 1
    out = capsys.readouterr()
    assert out.out == text.replace(_timings(text), _timings(out.out))
    assert "empty \\x1b]0;pwn\\x07" in out.err
    assert not RAW.search(out.err.replace("\n", ""))


def _timings(text: str) -> str:
    return ""  # the text report carries no timings


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.headings: list[str] = []
        self._heading: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self._heading = []

    def handle_endtag(self, tag):
        if tag in ("h1", "h2", "h3", "h4", "h5", "h6") and self._heading is not None:
            self.headings.append("".join(self._heading))
            self._heading = None

    def handle_data(self, data):
        if self._heading is not None:
            self._heading.append(data)


def _parse(page: str) -> _Tags:
    parser = _Tags()
    parser.feed(page)
    parser.close()
    return parser


def test_markdown_report_as_a_viewer_renders_it(crafted):
    from markdown_it import MarkdownIt

    md = markdown_report(crafted["report"])
    assert not RAW.search(md.replace("\n", ""))
    for renderer in (MarkdownIt("commonmark"), MarkdownIt("gfm-like")):  # gfm-like: tables, strikethrough, linkify
        html = renderer.render(md)
        parsed = _parse(html)
        tags = {t for t, _ in parsed.tags}
        assert tags <= {"h1", "h2", "h3", "p", "ul", "li", "code", "pre", "strong", "a"}, tags
        # links: only the ones linkify makes of a URL that is shown as it is written (never javascript:)
        for tag, attrs in parsed.tags:
            assert not [k for k in attrs if k.startswith("on")]
            if tag == "a":
                assert attrs["href"].startswith("http") and "javascript" not in attrs["href"]
        report = crafted["report"]
        want = ["postmortem report", "Actions", "Findings", *(f"{f['severity']}: {f['code']}" for f in report["findings"]),
                "Evidence gaps", "Run"]
        assert len(parsed.headings) == len(want) and all(h.startswith(w) for h, w in zip(parsed.headings, want)), \
            parsed.headings
        assert "<script" not in html and "<img" not in html and "<b " not in html
        # the lines are still there to read, as text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "[bold red]x[/]" in html
        assert "](javascript:alert(1))" in html and "# heading" in html


def test_html_report_has_only_its_own_markup(crafted):
    page = html_report(crafted["report"], crafted["run"])
    assert not RAW.search(page.replace("\n", ""))
    parsed = _parse(page)
    allowed = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "div", "span", "b", "p", "ul",
               "li", "code", "pre", "table", "tr", "th", "td", "a", "br", "svg", "rect", "text", "path", "line",
               "g", "circle", "polyline", "i"}
    assert {t for t, _ in parsed.tags} <= allowed, {t for t, _ in parsed.tags} - allowed
    for tag, attrs in parsed.tags:
        assert not [k for k in attrs if k.startswith("on")], (tag, attrs)
        assert not any("javascript" in (v or "") for v in attrs.values()), (tag, attrs)
        if tag == "a":
            assert attrs["href"].startswith("#a"), attrs  # only the links between findings
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;script&gt;ev()&lt;/script&gt;" in page
    assert "\\x1b]8;;http://osc8.example\\x1b\\click" in page
    assert html_report_escapes(BAD_NAME) in page


def html_report_escapes(text: str) -> str:
    import html

    return html.escape(safe(text), quote=True)


def test_tui_text_of_the_crafted_run(crafted):
    """What the TUI's Verdict screen shows of this run (its helpers; tests/test_tui_*.py drive the
    screens with injected payloads): inert Text, no markup spans, no raw escapes."""
    from postmortem.tui.screens.verdict import evidence_prompt, finding_text, sorted_findings, summary_text, verdict_text
    from postmortem.tui.session import open_store
    from postmortem.tui.text import cell, plain

    crafted["run"].con.close()
    session = open_store(crafted["db"])
    report = session.report
    findings = sorted_findings(report)
    texts = [verdict_text(report), summary_text(report), finding_text(findings[0], {f["id"]: f for f in findings})]
    texts += [evidence_prompt(e) for e in findings[0]["evidence"]]
    texts += [plain(line) for line in LINES] + [cell(line) for line in LINES] + [plain(BAD_NAME)]
    shown = "\n".join(t.plain for t in texts)
    assert not RAW.search(shown.replace("\n", ""))
    assert safe(LINES[0]) in shown and safe(LINES[1]) in shown
    for text in texts:
        assert not any("link" in str(span.style) for span in text.spans)
