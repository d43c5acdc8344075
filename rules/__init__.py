"""Rules: one module per rule, each with CODE, NAME, SEVERITY, a docstring and ``check``.

A rule module is named after its code and name (``h001_rank_never_entered.py``); every such
module in this package is a rule, so adding a rule is adding a file. They run in code order.
"""

from __future__ import annotations

import importlib
import pkgutil
import re

_RULE_MODULE = re.compile(r"^[a-z]\d{3}_[a-z0-9_]+$")

RULES = [importlib.import_module(f"{__name__}.{info.name}")
         for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name)
         if _RULE_MODULE.match(info.name)]
BY_CODE = {rule.CODE: rule for rule in RULES}
