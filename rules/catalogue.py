"""The rules as they declare themselves, read from their files without importing them.

``postmortem rules``, ``postmortem explain`` and ``docs/rules.md`` need each rule's declaration
and docstring only; importing the rules would cost Polars, DuckDB and the parsers (most of a
second). So each rule file is parsed (``ast``) for its docstring and its literal
``RULE = Rule(code=..., name=..., severity=Severity.X, category=Category.Y, since=...)``;
``tests/test_rule_contract.py`` holds this reading to what the imported modules declare.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from postmortem.rules.declare import Category, Rule, Severity

RULES_DIR = Path(__file__).resolve().parent
# A rule module: its code and its name (``h001_rank_never_entered_collective.py``), in a family folder.
RULE_FILE = re.compile(r"^[a-z]\d{3}_[a-z0-9_]+\.py$")
_ENUMS = {"Severity": Severity, "Category": Category}
_DECLARATION = re.compile(r"^RULE = ", re.M)


@dataclass(frozen=True)
class Entry:
    """One rule file: its declaration, its docstring (as ``__doc__`` has it) and where it lives."""

    rule: Rule
    doc: str
    module: str     # postmortem.rules.hang.h001_rank_never_entered_collective
    path: Path


def rule_files() -> list[Path]:
    """Every rule file of every family folder, in code order (the order the rules run in)."""
    paths = [p for family in RULES_DIR.iterdir() if (family / "__init__.py").is_file()
             for p in family.iterdir() if RULE_FILE.match(p.name)]
    return sorted(paths, key=lambda p: p.name)


def read(path: Path) -> Entry:
    """The entry of one rule file; ValueError when its ``RULE`` is not a literal declaration. Only
    the docstring, the imports and the declaration are parsed (the code after it is not needed)."""
    text = path.read_text(encoding="utf-8")
    found = _DECLARATION.search(text)
    if found is None:
        raise ValueError(f"{path.name}: needs a module-level RULE = Rule(...)")
    head = ast.parse(text[:found.start()], str(path))
    rule = Rule(**declared_fields(_statement(text[found.start():], path.name).value, path.name))
    module = f"{__package__}.{path.parent.name}.{path.stem}"
    return Entry(rule, ast.get_docstring(head, clean=False) or "", module, path)


def _statement(text: str, where: str) -> ast.Assign:
    """The statement ``text`` starts with (the declaration, on one line or several)."""
    end = 0
    while (end := text.find("\n", end) + 1) > 0:
        try:
            return ast.parse(text[:end]).body[0]
        except SyntaxError:
            continue
    raise ValueError(f"{where}: RULE = Rule(...) does not parse")


def declared_fields(call: ast.expr, where: str) -> dict:
    """The keywords of ``Rule(...)``, each a string literal or an enum member (``Severity.ERROR``)."""
    if not (isinstance(call, ast.Call) and ast.unparse(call.func) == "Rule") or call.args:
        raise ValueError(f"{where}: RULE must be Rule(...) with keyword arguments only")
    fields = {}
    for kw in call.keywords:
        value = kw.value
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            fields[kw.arg] = value.value
        elif (isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id in _ENUMS
              and value.attr in _ENUMS[value.value.id].__members__):
            fields[kw.arg] = _ENUMS[value.value.id][value.attr]
        else:
            raise ValueError(f"{where}: RULE's {kw.arg}= must be a literal, not {ast.unparse(value)}")
    return fields


@cache
def entries() -> tuple[Entry, ...]:
    """Every rule's entry, in code order."""
    return tuple(read(p) for p in rule_files())


def by_code() -> dict[str, Entry]:
    return {e.rule.code: e for e in entries()}
