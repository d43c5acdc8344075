"""Every rule documents itself, declares itself (one literal ``RULE = Rule(...)`` in a file named
after it) and ships with tests that fire it and tests that must stay quiet.

A test module declares what its tests exercise with a module-level ``RULE_FIXTURES`` dict:
``{"H001": {"fires": ["test_..."], "quiet": ["test_..."]}}``; this file checks that every rule
has at least one of each and that the named tests exist (pytest runs them as usual).
"""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from postmortem.rules import RULES
from postmortem.rules.catalogue import RULE_FILE, by_code, entries, rule_files
from postmortem.rules.declare import Category, Rule, Severity

SECTIONS = ("What it detects", "Why it matters", "What to do", "Known false positives")
TESTS = Path(__file__).resolve().parent


def _declared() -> dict[str, dict[str, list[tuple[str, str]]]]:
    """code -> kind -> [(module, test name)] over every test module that declares fixtures."""
    out: dict[str, dict[str, list[tuple[str, str]]]] = {}
    for path in sorted(TESTS.glob("test_*.py")):
        if "RULE_FIXTURES" not in path.read_text(encoding="utf-8"):
            continue
        module = importlib.import_module(f"tests.{path.stem}")
        for code, kinds in getattr(module, "RULE_FIXTURES", {}).items():
            for kind, names in kinds.items():
                for name in names:
                    out.setdefault(code, {}).setdefault(kind, []).append((module.__name__, name))
    return out


DECLARED = _declared()


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.RULE.code)
def test_rule_has_its_docstring_sections(rule):
    doc = rule.__doc__ or ""
    assert doc.startswith(f"{rule.RULE.code} {rule.RULE.name}:"), doc[:80]
    lines = {line.strip() for line in doc.splitlines()}
    missing = [s for s in SECTIONS if s not in lines]
    assert not missing, f"{rule.RULE.code} docstring lacks {missing}"
    assert rule.RULE.severity in ("error", "warning", "info")
    assert rule.RULE.name == rule.RULE.name.lower() and " " not in rule.RULE.name


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.RULE.code)
def test_rule_declares_itself_and_its_file_is_named_after_it(rule):
    declared = rule.RULE
    assert isinstance(declared, Rule) and isinstance(declared.severity, Severity)
    assert isinstance(declared.category, Category) and declared.since
    path = Path(rule.__file__)
    assert path.stem == f"{declared.code.lower()}_{declared.name.replace('-', '_')}", path.name


@pytest.mark.parametrize("path", rule_files(), ids=lambda p: p.stem)
def test_rule_declaration_is_one_literal_with_keywords(path):
    """``RULE = Rule(code="H001", name=..., severity=Severity.ERROR, category=Category.HANG,
    since="0.1.0")``: keywords only, each a string or an enum member, every field given, so that
    the catalogue can read it without importing the rule."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    rules = [n for n in tree.body if isinstance(n, ast.Assign) and [ast.unparse(t) for t in n.targets] == ["RULE"]]
    assert len(rules) == 1, f"{path.name}: one RULE = Rule(...) at module level"
    call = rules[0].value
    assert isinstance(call, ast.Call) and ast.unparse(call.func) == "Rule" and not call.args, ast.unparse(call)
    assert [kw.arg for kw in call.keywords] == ["code", "name", "severity", "category", "since"], ast.unparse(call)
    for kw in call.keywords:
        literal = isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str)
        member = ast.unparse(kw.value).split(".")[0] == {"severity": "Severity", "category": "Category"}.get(kw.arg)
        assert literal != member and (literal or isinstance(kw.value, ast.Attribute)), ast.unparse(kw)


def test_the_catalogue_reads_what_the_modules_declare():
    """``postmortem rules`` / ``explain`` and docs/rules.md read the files; the rules run imported."""
    assert [e.rule for e in entries()] == [r.RULE for r in RULES]
    assert [e.doc for e in entries()] == [r.__doc__ for r in RULES]
    assert [e.module for e in entries()] == [r.__name__ for r in RULES]
    assert list(by_code()) == [r.RULE.code for r in RULES]


def test_every_rule_file_is_in_a_family_folder():
    """A rule file at the top of rules/ or in a folder without __init__.py would never run."""
    rules_dir = Path(importlib.import_module("postmortem.rules").__file__).parent
    stray = [p for p in rules_dir.rglob("*.py") if RULE_FILE.match(p.name) and p not in rule_files()]
    assert not stray


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.RULE.code)
def test_rule_has_fixtures_that_fire_it_and_fixtures_that_keep_it_quiet(rule):
    kinds = DECLARED.get(rule.RULE.code, {})
    assert kinds.get("fires"), f"{rule.RULE.code}: no test declared to fire it"
    assert kinds.get("quiet"), f"{rule.RULE.code}: no test declared where it must stay quiet"
    for module_name, name in kinds["fires"] + kinds["quiet"]:
        assert callable(getattr(importlib.import_module(module_name), name, None)), f"{module_name}.{name} missing"


def test_fixtures_name_only_existing_rules():
    codes = {r.RULE.code for r in RULES}
    assert not set(DECLARED) - codes


def test_codes_and_names_are_unique():
    assert len({r.RULE.code for r in RULES}) == len(RULES)
    assert len({r.RULE.name for r in RULES}) == len(RULES)
