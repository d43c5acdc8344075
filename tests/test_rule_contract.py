"""Every rule documents itself and ships with tests that fire it and tests that must stay quiet.

A test module declares what its tests exercise with a module-level ``RULE_FIXTURES`` dict:
``{"H001": {"fires": ["test_..."], "quiet": ["test_..."]}}``; this file checks that every rule
has at least one of each and that the named tests exist (pytest runs them as usual).
"""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from postmortem.rules import RULES

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


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.CODE)
def test_rule_has_its_docstring_sections(rule):
    doc = rule.__doc__ or ""
    assert doc.startswith(f"{rule.CODE} {rule.NAME}:"), doc[:80]
    lines = {line.strip() for line in doc.splitlines()}
    missing = [s for s in SECTIONS if s not in lines]
    assert not missing, f"{rule.CODE} docstring lacks {missing}"
    assert rule.SEVERITY in ("error", "warning", "info")
    assert rule.NAME == rule.NAME.lower() and " " not in rule.NAME


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.CODE)
def test_rule_has_fixtures_that_fire_it_and_fixtures_that_keep_it_quiet(rule):
    kinds = DECLARED.get(rule.CODE, {})
    assert kinds.get("fires"), f"{rule.CODE}: no test declared to fire it"
    assert kinds.get("quiet"), f"{rule.CODE}: no test declared where it must stay quiet"
    for module_name, name in kinds["fires"] + kinds["quiet"]:
        assert callable(getattr(importlib.import_module(module_name), name, None)), f"{module_name}.{name} missing"


def test_fixtures_name_only_existing_rules():
    codes = {r.CODE for r in RULES}
    assert not set(DECLARED) - codes


def test_codes_and_names_are_unique():
    assert len({r.CODE for r in RULES}) == len(RULES)
    assert len({r.NAME for r in RULES}) == len(RULES)
