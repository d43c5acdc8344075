"""What the Environment and Memory screens show, shaped without Textual.

Environment: a matrix of variables by node from ``env_nodes`` (analyzer/env_model.py: the class
of each variable, NCCL's ``set by environment`` echoes and the env dumps per node). A node's
value is chosen as the configuration rules choose it (rules/config/config_model.py): NCCL's own echo
where the variable was echoed anywhere and the node printed echo lines, else the node's dump.
Which must-match variables differ, and which nodes are the odd ones out, is what E001/E002
compute (``setting_mismatches``), never re-derived here.

Memory: per-rank peaks (rules/memory/memory_model.py ``peaks``) against the card's capacity (the memory
lines, else the report's GPU model), CUDA OOMs (``ooms`` and M001) and host OOM kills
(``oom_kills`` and X004) marked on the ranks they hit.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import polars as pl

from postmortem.analyzer.pipeline import Run
from postmortem.parsers.base import groups_of
from postmortem.rules.base import Context
from postmortem.rules.config.config_model import DUMP, ECHO, UNSET, setting_mismatches
# The memory numbers live in rules.memory_view, shared with the HTML report's memory chart.
from postmortem.views.memory_view import NEAR, MemoryView, RankMemory, gib, memory_view, percent, sort_rows  # noqa: F401

# Display order of the classes (env_model.classify): must-match first, by-design differences last.
CLASS_ORDER = ("must_match", "should_match", "other", "per_node", "per_rank")
CLASS_LABEL = {"must_match": "must", "should_match": "should", "other": "other", "per_node": "node",
               "per_rank": "rank"}
CLASS_MEANING = {
    "must_match": "must match on every node (NCCL never exchanges it)",
    "should_match": "should match on every node",
    "other": "compared, not judged",
    "per_node": "may differ per node (interfaces, HCAs): never flagged",
    "per_rank": "differs by design (ranks, host names, devices): never flagged",
}


@dataclass
class Sighting:
    """One line that shows a variable on a node."""
    node: str
    value: str
    basis: str            # ECHO or DUMP (env_model's basis)
    source: str           # "NCCL INFO", "env" or "nccl.conf"
    path: str | None
    line: int | None


@dataclass
class EnvVar:
    key: str
    klass: str
    shown: dict[str, str | None]          # node -> the value compared (UNSET when unset there; absent: no evidence)
    sightings: list[Sighting]
    differs: bool = False
    odd: set[str] = field(default_factory=set)   # nodes off the majority value
    flagged: str | None = None            # "E001: ..." when a rule reports the difference
    must_differ: bool = False             # a must-match variable that differs (E001/E002)

    @property
    def order(self) -> tuple:
        """Flagged must-match differences first, then by class, differing before equal, then name."""
        return (not self.must_differ, CLASS_ORDER.index(self.klass) if self.klass in CLASS_ORDER else 9,
                not self.differs, self.key)


@dataclass
class EnvView:
    nodes: list[str]
    variables: list[EnvVar]

    @property
    def must_differ(self) -> list[EnvVar]:
        return [v for v in self.variables if v.must_differ]


def env_view(run: Run, report: dict) -> EnvView:
    """Every variable of ``env_nodes`` with its value on each node, must-match differences first."""
    if not {"node", "key", "basis"} <= set(run.columns("env_nodes")):
        return EnvView([], [])
    rows = run.frame("SELECT e.node, e.key, e.value, e.basis, e.source, e.class, i.path, e.line_no "
                     "FROM env_nodes e LEFT JOIN inputs i USING (input_id) ORDER BY e.key, e.node, e.basis")
    if rows.is_empty():
        return EnvView([], [])
    echo_nodes = set(rows.filter(pl.col("basis") == ECHO)["node"].to_list())
    dump_nodes = set(rows.filter(pl.col("basis") == DUMP)["node"].to_list())
    nodes = sorted(echo_nodes | dump_nodes, key=_node_order)
    flagged = _flagged_by_rules(run, report)
    out = []
    for (key,), part in groups_of(rows, ["key"], maintain_order=True):
        sightings = [Sighting(r["node"], r["value"] or "", r["basis"], r["source"], r["path"], r["line_no"])
                     for r in part.iter_rows(named=True)]
        var = EnvVar(key, part["class"][0] or "other", _shown_values(sightings, echo_nodes, dump_nodes), sightings)
        _judge(var, flagged.get(key))
        out.append(var)
    out.sort(key=lambda v: v.order)
    return EnvView(nodes, out)


def _node_order(node: str) -> tuple:
    """h20-node-2 before h20-node-10; the unknown node '?' last."""
    return (node == "?", [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", node)])


def _shown_values(sightings: list[Sighting], echo_nodes: set[str], dump_nodes: set[str]) -> dict[str, str | None]:
    """node -> value as config_model compares it: the echo wins where the variable was echoed
    anywhere and the node printed echo lines; otherwise the dump (UNSET when the node's dump
    lacks it). Nodes with no evidence of either kind are absent."""
    echo = {s.node: s.value for s in sightings if s.basis == ECHO}
    dump = {s.node: s.value for s in sightings if s.basis == DUMP}
    shown: dict[str, str | None] = {}
    for node in echo_nodes | dump_nodes:
        if echo and node in echo_nodes:
            shown[node] = echo.get(node, UNSET)
        elif node in dump_nodes:
            shown[node] = dump.get(node, UNSET)
    return shown


def _flagged_by_rules(run: Run, report: dict) -> dict[str, tuple[str, list[str] | None]]:
    """key -> (what flags it, the odd nodes): the must-match differences E001/E002 compute, with
    the finding's title when the report has one; then E003's should-match differences."""
    titles = {}
    for f in report.get("findings") or []:
        key = (f.get("details") or {}).get("key")
        if f.get("code") in ("E001", "E002", "E003") and key and key not in titles:
            titles[key] = f"{f['code']}: {f.get('title', '')}"
    ctx = Context(run, None)
    out = {}
    for m in setting_mismatches(ctx, ("must_match",)):
        out[m.key] = (titles.get(m.key, "must-match variable differs between nodes"), m.minority, True)
    for key, title in titles.items():
        out.setdefault(key, (title, None, False))
    return out


def _judge(var: EnvVar, flag: tuple | None) -> None:
    values = Counter(v for v in var.shown.values())
    var.differs = len(values) > 1
    if flag:
        var.flagged, minority, var.must_differ = flag
        if minority:
            var.odd = set(minority)
    if var.differs and not var.odd and var.klass not in ("per_node", "per_rank"):
        (top, n_top), *rest = values.most_common()
        if not rest or n_top > rest[0][1]:
            var.odd = {n for n, v in var.shown.items() if v != top}
        else:
            var.odd = set(var.shown)


def matches(var: EnvVar, pattern: str) -> bool:
    """The filter box: a case-insensitive regex over the name, a substring when it is not a regex."""
    if not pattern:
        return True
    try:
        return re.search(pattern, var.key, re.I) is not None
    except re.error:
        return pattern.lower() in var.key.lower()
