"""The HTML report is one self-contained page: verdict, findings, evidence and pictures, with
every piece of log text escaped."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from analyzer.html_report import html_report
from analyzer.pipeline import analyze
from analyzer.report import build_report
from tests.scenario import write_scenario

HOSTILE = "<script>alert(1)</script><img src=x onerror=alert(2)> \x1b[31mred\x1b[0m"


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    from bench.generator import RunSpec, generate_run

    out = tmp_path_factory.mktemp("html-run")
    generate_run(out, RunSpec(nodes=2, gpus_per_node=4, culprit=5, seed=3, config_files=True))
    run = analyze([out])
    return html_report(build_report(run), run)


def test_a_log_line_with_markup_shows_as_text(tmp_path):
    folder = write_scenario(tmp_path / "run", ranks=4, culprit=2, culprit_last_line=HOSTILE)
    run = analyze([folder])
    page = html_report(build_report(run), run)
    assert "alert(1)" in page                      # the line is shown ...
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert not re.search(r"<\s*script", page, re.I)  # ... but never as markup
    assert not re.search(r"<\s*img", page, re.I)
    assert "\x1b" not in page and "\\x1b[31m" in page


def test_the_page_is_self_contained(generated):
    assert generated.startswith("<!DOCTYPE html>") and generated.rstrip().endswith("</html>")
    external = re.findall(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", generated, re.I)
    assert not external
    assert "<link" not in generated and "<script" not in generated
    assert set(re.findall(r"https?://[^\s\"'<>]+", generated)) <= {"http://www.w3.org/2000/svg"}


def test_the_pictures_are_drawn_from_the_run(generated):
    for title in ("Last minutes before the failure, per rank", "Ring transport map",
                  "Memory peak per rank against capacity", "Step time per iteration"):
        assert f"<h2>{title}</h2>" in generated
    assert generated.count("<svg") == 4
    assert 'stroke="#c62828" stroke-width="2"><title>culprit</title>' in generated  # the culprit's row


def test_without_a_store_the_page_still_has_verdict_and_findings(tmp_path):
    report = build_report(analyze([write_scenario(tmp_path / "run", ranks=4, culprit=1)]))
    page = html_report(report)
    assert "<svg" not in page and report["verdict"]["status"] in page and "H001" in page


@pytest.mark.skipif(not shutil.which("chromium"), reason="chromium is not installed")
def test_headless_chromium_renders_it(generated, tmp_path):
    page = tmp_path / "report.html"
    page.write_text(generated, encoding="utf-8")
    shot = tmp_path / "shot.png"
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1200,900",
                    f"--screenshot={shot}", page.as_uri()], check=True, capture_output=True, timeout=120)
    assert shot.stat().st_size > 10_000
