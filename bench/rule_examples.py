"""A pytest plugin that records every finding the rules make, for ``docs/rules.md``'s examples.

    pytest -p bench.rule_examples tests/test_x.py::test_y      # RULE_EXAMPLES_OUT=file.json

``bench.make_docs`` runs the tests a rule declares to fire it (``RULE_FIXTURES``) with this plugin
when no sample, corpus case or real excerpt makes the rule fire with evidence lines.
"""

from __future__ import annotations

import json
import os

from postmortem.rules.declare import Rule

_SEEN: list[dict] = []
_CURRENT: list[str] = [""]


def pytest_configure(config):
    make = Rule.finding

    def recording(rule, **kwargs):
        finding = make(rule, **kwargs)
        _SEEN.append({"code": finding.code, "test": _CURRENT[0], "title": finding.title, "message": finding.message,
                      "evidence": [{"path": e.path, "line": e.line, "text": e.text} for e in finding.evidence]})
        return finding

    Rule.finding = recording


def pytest_runtest_setup(item):
    _CURRENT[0] = item.nodeid


def pytest_unconfigure(config):
    with open(os.environ["RULE_EXAMPLES_OUT"], "w", encoding="utf-8") as out:
        json.dump(_SEEN, out)
