"""Rules: one module per rule, in family folders (``rules/hang/``, ``rules/network/``...) beside the
model they share; each has a docstring, a ``RULE`` declaration (``postmortem.rules.declare``) and
``check``.

A rule module is named after its code and name (``hang/h001_rank_never_entered_collective.py``);
every such module in a family folder is a rule, so adding a rule is adding a file. They run in
code order. ``RULES`` and ``BY_CODE`` import them on first use: ``postmortem.rules.catalogue``
reads their declarations without importing them (and so without Polars or DuckDB).
"""

from __future__ import annotations

import importlib


def __getattr__(name: str):
    """``RULES`` (the rule modules in code order) and ``BY_CODE``, imported on first use."""
    if name not in ("RULES", "BY_CODE"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from postmortem.rules.catalogue import entries

    rules = [importlib.import_module(entry.module) for entry in entries()]
    globals().update(RULES=rules, BY_CODE={rule.RULE.code: rule for rule in rules})
    return globals()[name]
