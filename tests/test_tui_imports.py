"""The headless commands never import Textual (DESIGN: the epilog path must start fast and must
not need a terminal), and dependencies point one way: parsers <- analyzer <- rules <- tui.

Two checks: the import graph read from the sources (every ``import`` statement, top level or
inside a function), and the real thing: each headless command run in a fresh interpreter, then
``sys.modules`` inspected (lazy imports could hide a static-only check)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

SAMPLE = ROOT / "sample_logs" / "rendezvous-missing-node"


def _imports(path) -> list[tuple[str, str | None]]:
    """(imported module, enclosing function or None) for every import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Import):
                found.extend((alias.name, function) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                found.append((child.module, function))
            visit(child, name)
    visit(tree, None)
    return found


@pytest.mark.parametrize("package, forbidden", [
    ("parsers", ("analyzer", "rules", "tui", "textual")),
    ("analyzer", ("rules", "tui", "textual")),
    ("rules", ("tui", "textual")),
])
def test_dependencies_point_one_way(package, forbidden):
    # The command line and the report sit on top of the rules (report.run_rules and the rules /
    # explain commands import the registry lazily) and the tui command opens the app: those lazy
    # imports are the only arrows allowed back; the HTML report's memory chart draws the numbers the
    # memory rules compute (rules.memory_view, shared with the TUI's Memory screen).
    allowed = {("analyzer/report.py", "rules"), ("analyzer/cli.py", "rules"), ("analyzer/cli.py", "tui"),
               ("analyzer/html_pictures.py", "rules")}
    wrong = []
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        for module, function in _imports(path):
            top = module.split(".")[0]
            if top in forbidden and (rel, top) not in allowed:
                wrong.append(f"{rel}: imports {module}" + (f" (in {function})" if function else ""))
    assert not wrong, "\n".join(wrong)


def test_only_the_tui_command_imports_tui():
    users = [(str(p.relative_to(ROOT)), f) for p in sorted(ROOT.glob("*/**/*.py"))
             if p.parts[len(ROOT.parts)] in ("analyzer", "parsers", "rules")
             for m, f in _imports(p) if m.split(".")[0] in ("tui", "textual")]
    assert users == [("analyzer/cli.py", "_tui"), ("analyzer/cli.py", "_tui")]


HEADLESS = [
    ["--help"],
    ["report", str(SAMPLE), "--format", "text,md,json,html", "--out", "{tmp}/out", "--quiet"],
    ["ingest", str(SAMPLE), "--db", "{tmp}/s.duckdb", "--quiet"],
    ["query", "--db", "{tmp}/s.duckdb", "SELECT count(*) FROM lines", "--format", "json"],
    ["transports", "--db", "{tmp}/s.duckdb", "--format", "json"],
    ["hw", "H100"],
    ["export", "perfetto", "--db", "{tmp}/s.duckdb", "--out", "{tmp}/trace.json"],
    ["diff", str(SAMPLE), "{tmp}/s.duckdb", "--quiet"],
    ["fleet", "{tmp}/out", "--store", "{tmp}/fleet", "--format", "text,json", "--quiet"],
    ["rules"],
    ["explain", "H001"],
]


def test_headless_commands_never_import_textual(tmp_path):
    script = (
        "import json, sys\n"
        "from analyzer.cli import main\n"
        "codes = []\n"
        "for argv in json.loads(sys.argv[1]):\n"
        "    try:\n"
        "        codes.append(main(argv))\n"
        "    except SystemExit as exc:\n"
        "        codes.append(exc.code)\n"
        "print(json.dumps({'codes': codes, 'loaded': sorted(m for m in sys.modules\n"
        "                  if m.split('.')[0] in ('textual', 'tui'))}))\n")
    argvs = [[a.replace("{tmp}", str(tmp_path)) for a in argv] for argv in HEADLESS]
    done = subprocess.run([sys.executable, "-c", script, json.dumps(argvs)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["loaded"] == [], result["loaded"]
    assert all(code in (0, 1) for code in result["codes"]), (result["codes"], done.stderr[-2000:])
