"""What a rule declares about itself: its code, name, default severity, category and version.

Each rule module holds one literal ``RULE = Rule(code=..., name=..., severity=Severity...,
category=Category..., since=...)`` and makes its findings through ``RULE.finding``. The
declaration is read without importing the rule (``postmortem.rules.catalogue``), so this module
imports nothing heavy: ``postmortem rules`` and ``postmortem explain`` need no Polars or DuckDB.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from postmortem.rules.base import Finding


class Severity(StrEnum):
    """How bad a finding is; members are declared worst first, and ``rank`` is that order."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        """0 for the worst (error): the order findings sort by and ``--fail-on`` compares."""
        return list(Severity).index(self)

    @classmethod
    def rank_of(cls, value) -> int:
        """The rank of a severity string; after every severity for one that is none (a report
        read back from a file may carry anything)."""
        return cls(value).rank if value in cls._value2member_map_ else len(cls)


class Category(StrEnum):
    """What kind of cause or consequence a finding is, with how deep it lies (``layer``).

    A culprit finding explains findings of later layers that share a rank or node with it (a GPU
    that fell off the bus explains the rank that never entered the collective, which explains the
    others' timeouts): ``postmortem.rules.report.link_causes``.
    """

    HARDWARE = "hardware"
    NETWORK = "network"
    EXTERNAL = "external"
    CONFIG = "config"
    CRASH = "crash"
    HANG = "hang"
    DESYNC = "desync"
    PERF = "perf"
    SYMPTOM = "symptom"
    OUTCOME = "outcome"
    INFO = "info"

    @property
    def layer(self) -> int:
        return _LAYERS[self]


# Several categories share a layer (a configuration error is as deep as an outside kill).
_LAYERS = {Category.HARDWARE: 0, Category.NETWORK: 1, Category.EXTERNAL: 2, Category.CONFIG: 2, Category.CRASH: 3,
           Category.HANG: 4, Category.DESYNC: 4, Category.PERF: 5, Category.SYMPTOM: 6, Category.OUTCOME: 6,
           Category.INFO: 7}


@dataclass(frozen=True)
class Rule:
    """A rule's declaration: ``code`` (stable, e.g. ``H001``), ``name`` (kebab-case; the module
    is ``h001_<name with _>.py``), the default ``severity`` and ``category`` of its findings,
    and the version that introduced it (``since``)."""

    code: str
    name: str
    severity: Severity
    category: Category
    since: str

    def finding(self, *, confidence: float, title: str, message: str, severity: Severity | None = None,
                category: Category | None = None, **fields) -> Finding:
        """A finding of this rule: its severity and category unless the finding overrides them
        (with the enums, never a string); ``fields`` are the other ``Finding`` fields."""
        from postmortem.rules.base import Finding

        severity = self.severity if severity is None else severity
        category = self.category if category is None else category
        if not isinstance(severity, Severity) or not isinstance(category, Category):
            raise TypeError(f"{self.code}: severity and category must be Severity and Category members, "
                            f"not {severity!r} and {category!r}")
        return Finding(code=self.code, name=self.name, severity=severity, category=category,
                       confidence=confidence, title=title, message=message, **fields)
