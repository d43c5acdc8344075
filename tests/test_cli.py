import json
import subprocess
import sys

from tests.scenario import write_scenario


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "postmortem.cli", *args], capture_output=True, text=True)


def test_headless_commands_never_import_textual():
    code = ("import sys, postmortem.cli, postmortem.analyzer.pipeline, postmortem.rules.report, postmortem.views.render, rules; "
            "postmortem.cli.main(['rules']); assert 'textual' not in sys.modules, 'textual imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_report_exit_codes_formats_and_query(tmp_path):
    folder = write_scenario(tmp_path / "run", culprit=2)
    proc = _cli("report", str(folder), "--format", "json")
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert report["schema"] == "postmortem.report/1"
    assert report["verdict"]["culprit"]["ranks"] == [2]
    assert _cli("report", str(folder), "--fail-on", "never").returncode == 0
    out = tmp_path / "out"
    proc = _cli("report", str(folder), "--format", "md,json,text", "--out", str(out), "--db", str(tmp_path / "x.duckdb"))
    assert proc.returncode == 1 and {p.name for p in out.iterdir()} == {"report.md", "report.json", "report.txt"}
    rows = json.loads(_cli("query", "--db", str(tmp_path / "x.duckdb"), "SELECT rank, node FROM ranks ORDER BY rank",
                           "--format", "json").stdout)
    assert rows[2] == {"rank": 2, "node": "node-02"}
    found = json.loads(_cli("query", "--db", str(tmp_path / "x.duckdb"),
                            "SELECT code, severity, ranks FROM findings ORDER BY code", "--format", "json").stdout)
    assert found[0] == {"code": "H001", "severity": "error", "ranks": [2]}
    assert _cli("query", "--db", str(tmp_path / "x.duckdb"), "SELEC nonsense").returncode == 2
    assert _cli("report", str(folder), "--format", "pdf").returncode == 2


def test_rules_and_explain():
    listing = _cli("rules").stdout
    assert "H001" in listing and "H003" in listing
    explained = _cli("explain", "h001")
    assert explained.returncode == 0 and "Known false positives" in explained.stdout
    assert _cli("explain", "Z999").returncode == 2


def test_markdown_escapes_log_text(tmp_path):
    folder = write_scenario(tmp_path / "run", culprit=2, culprit_last_line="<script>alert(1)</script> `x` \x1b[31m")
    md = _cli("report", str(folder), "--format", "md").stdout
    assert "\x1b" not in md
    # log text is either escaped prose or inside a code block: rendered, it is text, never a tag
    from markdown_it import MarkdownIt
    html = MarkdownIt("commonmark").render(md)
    assert "<script" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
