"""Markdown and HTML show log text as code and commands as code (issue 24, reports).

Stacks and last lines are fenced code blocks in Markdown (not bullets of escaped prose), the
commands a suggestion quotes are code spans in Markdown and ``<code>`` in HTML (not escaped
backticks), and text cut to fit ends with an ellipsis."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from postmortem.html_report import html_report
from postmortem.analyzer.pipeline import analyze
from postmortem.rules.report import build_report
from postmortem.views.render import clip, markdown_report, md_code_block, text_report

SAMPLE = Path(__file__).resolve().parent.parent / "sample_logs" / "gpu-fell-off-bus"


@pytest.fixture(scope="module")
def analysed():
    run = analyze([SAMPLE], use_cache=False)
    return run, build_report(run)


def _culprit_finding(report: dict) -> dict:
    return next(f for f in report["findings"] if f["details"].get("culprit_did_instead"))


def test_stacks_and_last_lines_are_code_blocks_in_markdown(analysed):
    _, report = analysed
    html = MarkdownIt("commonmark").render(markdown_report(report))
    blocks = re.findall(r"<pre><code[^>]*>(.*?)</code></pre>", html, re.S)
    assert any(b.startswith("_init_group (torch/optim/adam.py:168)\nstep (torch/optim/adam.py:226)") for b in blocks)
    assert any("[rank13]:[E0724 09:32:57" in b for b in blocks)
    assert "<li>_init_group" not in html


def test_suggested_commands_are_code_in_markdown_and_html(analysed):
    run, report = analysed
    md_html = MarkdownIt("commonmark").render(markdown_report(report))
    assert "<code>scontrol update NodeName=h20-node-02 State=DRAIN" in md_html
    assert "\\`scontrol" not in markdown_report(report)
    page = html_report(report, run)
    assert "<b>Do:</b> Drain h20-node-02: <code>scontrol update NodeName=h20-node-02" in page
    assert "`scontrol" not in page


def test_cut_text_ends_with_an_ellipsis(analysed):
    _, report = analysed
    assert clip("abcdef", 4) == "abc\u2026" and clip("abcd", 4) == "abcd"
    md = markdown_report(report)
    long_line = next(line for line in md.splitlines() if "Received a dump signal" in line and "`" not in line)
    assert long_line.endswith("\u2026") and len(long_line.strip()) == 200
    text = text_report(report)
    cut = [line for line in text.splitlines() if "Received a dump signal" in line]
    assert cut and all(line.endswith("\u2026") or "NCCL work: 7218." in line for line in cut)


def test_a_log_line_cannot_close_its_fence_or_add_markup(analysed):
    _, report = analysed
    report = copy.deepcopy(report)
    hostile = ["```", "````` <script>alert(1)</script>", "# heading", "</code></pre><img src=x onerror=1>"]
    _culprit_finding(report)["details"]["culprit_did_instead"]["last_lines"] = hostile
    block = md_code_block(hostile)
    assert block[0] == "``````text" and block[-1] == "``````"
    html = MarkdownIt("commonmark").render(markdown_report(report))
    assert "<script" not in html and "<img" not in html and "<h1>heading" not in html
    pre = next(b for b in re.findall(r"<pre><code[^>]*>(.*?)</code></pre>", html, re.S) if "alert" in b)
    assert pre.splitlines() == ["```", "````` &lt;script&gt;alert(1)&lt;/script&gt;", "# heading",
                                "&lt;/code&gt;&lt;/pre&gt;&lt;img src=x onerror=1&gt;"]
