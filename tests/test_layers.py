"""The layers point one way, and the headless commands never import Textual (DESIGN: the epilog
path must start fast and must not need a terminal).

    parsers <- analyzer (core) <- rules (+ the verdict engine) <- views <- front ends

The front ends are the modules of ``postmortem/`` itself (command line, reports, exports, the
generator) and ``tui/``. Everything installs under the one import name ``postmortem``
(pyproject's package-dir mapping; docs/architecture.md).

Checks: the import graph read from the sources (every ``import`` statement, top level or inside
a function, type-only ones too), and the real thing: each headless command run in a fresh
interpreter, then ``sys.modules`` inspected (lazy imports could hide a static-only check)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib

import pytest

from tests.conftest import ROOT

SAMPLE = ROOT / "sample_logs" / "rendezvous-missing-node"

# folder -> (subpackage of postmortem, layer)
FOLDERS = {"parsers": 0, "analyzer": 1, "rules": 2, "views": 3, "postmortem": 4, "tui": 4}
HEADLESS_LAYERS = ("parsers", "analyzer", "rules", "views")
GENERIC = ("analyzer", "parsers", "rules", "tui", "views", "generator")


def _imports(path) -> list[tuple[str, str | None]]:
    """(imported module, enclosing function or None) for every import in ``path``; relative
    imports are made absolute."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _module_of(path).rsplit(".", 1)[0] if path.name != "__init__.py" else _module_of(path)
    found = []

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Import):
                found.extend((alias.name, function) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parent = package.rsplit(".", child.level - 1)[0] if child.level > 1 else package
                    base = f"{parent}.{base}" if base else parent
                names = [f"{base}.{a.name}" for a in child.names] if base in ("postmortem", *_packages()) else []
                found.extend((m, function) for m in (names or [base]))
            visit(child, name)
    visit(tree, None)
    return found


def _packages() -> list[str]:
    return [f"postmortem.{f}" for f in FOLDERS if f != "postmortem"]


def _module_of(path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts if parts[0] == "postmortem" else ["postmortem", *parts])


def _layer_of(module: str) -> tuple[str, int] | None:
    """The folder and layer of a project module (``postmortem.rules.base`` -> rules, 2)."""
    parts = module.split(".")
    if parts[0] != "postmortem":
        return None
    folder = parts[1] if len(parts) > 1 and parts[1] in FOLDERS else "postmortem"
    return folder, FOLDERS[folder]


def _sources(folder: str):
    return sorted((ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("folder", list(FOLDERS))
def test_dependencies_point_one_way(folder):
    """No module imports from a layer above its own; front ends may use each other, but only the
    ``tui`` command (``cli._tui``) opens the TUI, and the TUI never reaches into the report
    writers (what both need is a view)."""
    wrong = []
    for path in _sources(folder):
        rel = str(path.relative_to(ROOT))
        for module, function in _imports(path):
            target = _layer_of(module)
            if target is None:
                continue
            where = f"{rel}: imports {module}" + (f" (in {function})" if function else "")
            if target[1] > FOLDERS[folder]:
                wrong.append(where)
            elif folder == "postmortem" and target[0] == "tui" and (rel, function) != ("postmortem/cli.py", "_tui"):
                wrong.append(where)
            elif folder == "tui" and target[0] == "postmortem" and module not in ("postmortem",):
                wrong.append(where)
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("folder", HEADLESS_LAYERS)
def test_headless_layers_import_neither_textual_nor_rich(folder):
    wrong = [f"{p.relative_to(ROOT)}: imports {m}" for p in _sources(folder) for m, _ in _imports(p)
             if m.split(".")[0] in ("textual", "rich")]
    assert not wrong, "\n".join(wrong)


def test_parsers_import_nothing_of_the_project_but_parsers():
    wrong = [f"{p.relative_to(ROOT)}: imports {m}" for p in _sources("parsers") for m, _ in _imports(p)
             if (_layer_of(m) or ("parsers",))[0] != "parsers"]
    assert not wrong, "\n".join(wrong)


def test_no_generic_top_level_import_names():
    """Code, tests and benchmarks import the project as ``postmortem.*`` only: with the repository
    on ``sys.path`` a stray ``import rules`` would load a second copy of the module. ``bench`` is
    not installed; only the checkout's tests and benchmarks may use it."""
    wrong = [f"{p.relative_to(ROOT)}: imports {m}"
             for folder in (*FOLDERS, "tests", "bench") for p in _sources(folder)
             for m, _ in _imports(p) if m.split(".")[0] in GENERIC
             or (m.split(".")[0] == "bench" and folder not in ("tests", "bench"))]
    assert not wrong, "\n".join(wrong)


def test_every_package_folder_is_installed():
    """pyproject lists the packages by hand (the package-dir mapping needs it): a new folder with
    an ``__init__.py`` that is not listed would be missing from an installed postmortem."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    listed = set(config["packages"])
    folders = {_module_of(init.parent / "__init__.py") for f in FOLDERS for init in (ROOT / f).rglob("__init__.py")}
    assert folders == listed, (sorted(folders - listed), sorted(listed - folders))
    for package, folder in config["package-dir"].items():
        assert (ROOT / folder / "__init__.py").is_file() and package == f"postmortem.{folder}"


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
        "from postmortem.cli import main\n"
        "codes = []\n"
        "for argv in json.loads(sys.argv[1]):\n"
        "    try:\n"
        "        codes.append(main(argv))\n"
        "    except SystemExit as exc:\n"
        "        codes.append(exc.code)\n"
        "print(json.dumps({'codes': codes, 'loaded': sorted(m for m in sys.modules\n"
        "                  if m.split('.')[0] == 'textual' or m.startswith('postmortem.tui')\n"
        "                  or m.split('.')[0] in ('analyzer', 'parsers', 'rules', 'tui', 'views'))}))\n")
    argvs = [[a.replace("{tmp}", str(tmp_path)) for a in argv] for argv in HEADLESS]
    done = subprocess.run([sys.executable, "-c", script, json.dumps(argvs)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["loaded"] == [], result["loaded"]
    assert all(code in (0, 1) for code in result["codes"]), (result["codes"], done.stderr[-2000:])
