"""What the configuration rules (E001-E007) share: per-node settings with NCCL's own echo as
the truth, majorities and minorities, and per-node versions.

Settings come from ``env_nodes`` (``analyzer/env_model.py``): basis ``NCCL INFO`` (NCCL's
``X set by environment to Y`` lines) and basis ``env dump`` (shell ``env`` dumps, ``nccl.conf``
copies). For one variable, a node's value is NCCL's echo when any node echoed the variable and
this node printed echo lines (no echo there then means unset); otherwise its dump's value. A
node whose dump disagrees with its own echo is believed by its echo (a dump taken in another
shell). ``docs/formats/nccl.md`` 3.8: echoes appear once per process when the variable is read and set.

Versions come from ``nccl_processes`` (a process's own version line, else the release range its
line shapes allow: ``version_min``/``version_max``), never from rank 0's line copied onto the
others, which is an assumption, not evidence.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import polars as pl

from postmortem.rules.base import Context, Evidence, memoised

ECHO, DUMP = "NCCL INFO", "env dump"
UNSET = "<unset>"
# Compared without case: NCCL parses these case-insensitively.
_CASELESS = {"NCCL_PROTO", "NCCL_ALGO", "NCCL_NET", "NCCL_P2P_LEVEL", "NCCL_NET_GDR_LEVEL"}


@dataclass
class NodeValue:
    node: str
    value: str | None           # None: unset
    source: str                 # "echo" | "dump"
    ref: tuple[int, int] | None  # (input_id, line_no) of the line that shows it
    dump: str | None = None     # the dump's value where the node has a dump (None: unset there or no dump)
    has_dump: bool = False


@dataclass
class Mismatch:
    key: str
    klass: str
    values: list[NodeValue]
    majority: str | None                     # the majority's value (UNSET for unset); None: no majority
    minority: list[str]                      # nodes not on the majority value (all differing nodes if no majority)
    basis: str                               # "echo" | "echo+dump" | "dump" | "dump, not echoed"
    contradicted: list[str] = field(default_factory=list)   # nodes whose dump disagrees with their echo

    def shown(self, value: str | None) -> str:
        return UNSET if value is None else value

    def groups(self) -> list[tuple[str, list[str]]]:
        """(value, nodes) most common first."""
        by: dict[str, list[str]] = {}
        for v in self.values:
            by.setdefault(self.shown(v.value), []).append(v.node)
        return sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0]))

    def summary(self) -> str:
        return "; ".join(f"{value} on {', '.join(sorted(nodes))}" for value, nodes in self.groups())


def _norm(key: str, value: str | None) -> str:
    if value is None:
        return UNSET
    value = value.strip()
    return value.casefold() if key in _CASELESS else value


@memoised
def setting_mismatches(ctx: Context, classes: tuple[str, ...]) -> list[Mismatch]:
    """Variables of ``classes`` whose value differs between nodes, echo first."""
    env = ctx.table("env_nodes")
    out: list[Mismatch] = []
    if env.is_empty():
        return out
    env = env.filter(pl.col("node").is_not_null() & (pl.col("node") != "?"))
    echo_nodes = set(env.filter(pl.col("basis") == ECHO)["node"].to_list())
    dump_nodes = set(env.filter(pl.col("basis") == DUMP)["node"].to_list())
    # a row without a key names no setting to compare (and `key == None` would match no row)
    rows = env.filter(pl.col("class").is_in(list(classes)) & pl.col("key").is_not_null())
    by_key: dict[str, list[dict]] = {}     # a node's few dozen settings: read once, not filtered per key
    for row in rows.iter_rows(named=True):
        by_key.setdefault(row["key"], []).append(row)
    for key in sorted(by_key):
        krows = by_key[key]
        echo = {r["node"]: r for r in krows if r["basis"] == ECHO}
        dump = {r["node"]: r for r in krows if r["basis"] == DUMP}
        klass = krows[0]["class"]
        values: list[NodeValue] = []
        contradicted = []
        if echo:
            for node in sorted(echo_nodes | dump_nodes):
                d = dump.get(node)
                if node in echo_nodes:
                    e = echo.get(node)
                    value = e["value"] if e else None
                    ref = (e["input_id"], e["line_no"]) if e else None
                    nv = NodeValue(node, value, "echo", ref, d["value"] if d else None, node in dump_nodes)
                    if node in dump_nodes and _norm(key, nv.dump) != _norm(key, value):
                        contradicted.append(node)
                else:
                    nv = _from_dump(node, d)
                values.append(nv)
        else:
            values = [_from_dump(node, dump.get(node)) for node in sorted(dump_nodes)]
        if len(values) < 2 or len({_norm(key, v.value) for v in values}) < 2:
            continue
        counts = Counter(_norm(key, v.value) for v in values)
        (top, n_top), *rest = counts.most_common()
        majority = top if not rest or n_top > rest[0][1] else None
        minority = sorted(v.node for v in values if majority is None or _norm(key, v.value) != majority)
        if majority is not None:
            majority = next((v.value for v in values if _norm(key, v.value) == majority), None) or UNSET
        odd = [v for v in values if v.node in minority] if majority is not None else values
        echoed = [v for v in values if v.source == "echo"]
        if len({_norm(key, v.value) for v in echoed}) > 1:
            # NCCL's own lines show the difference; the dumps of those nodes may confirm it
            agree = all(v.has_dump and _norm(key, v.dump) == _norm(key, v.value) for v in odd if v.source == "echo")
            basis = "echo+dump" if agree else "echo"
        elif echo:
            basis = "dump"          # the echoes agree; only nodes without echo lines differ, by their dumps
        else:
            basis = "dump, not echoed" if echo_nodes & set(minority) else "dump"
        out.append(Mismatch(key, klass, values, majority, minority, basis, contradicted))
    return out


def _from_dump(node: str, row: dict | None) -> NodeValue:
    value = row["value"] if row else None
    return NodeValue(node, value, "dump", (row["input_id"], row["line_no"]) if row else None, value, True)


def mismatch_confidence(m: Mismatch) -> float:
    """How sure a must-match difference is real (not a dump from another shell)."""
    if m.basis.startswith("echo"):
        set_both = all(v.value is not None for v in m.values)
        base = 0.85 if set_both else 0.8
        return min(0.95, base + (0.05 if m.basis == "echo+dump" else 0.0))
    if m.basis == "dump":
        return 0.6
    return 0.45   # the dump says so, NCCL's own lines on those nodes do not


def mismatch_evidence(ctx: Context, m: Mismatch, limit: int = 4) -> list[Evidence]:
    out = []
    odd = [v for v in m.values if v.node in m.minority]
    for v in odd[:2]:
        if v.ref:
            what = "NCCL's own echo" if v.source == "echo" else "env dump"
            out.append(ctx.evidence(*v.ref, note=f"{m.key}={m.shown(v.value)} on {v.node} ({what})"))
        if v.source == "echo" and v.has_dump and v.dump is not None:
            ref = _dump_ref(ctx, v.node, m.key)
            if ref:
                out.append(ctx.evidence(*ref, note=f"{v.node}'s env dump agrees"))
    rest = [v for v in m.values if v.node not in m.minority and v.ref]
    if rest and m.majority is not None:
        v = rest[0]
        out.append(ctx.evidence(*v.ref, note=f"{m.key}={m.shown(v.value)} on {v.node} (the majority)"))
    return out[:limit]


def _dump_ref(ctx: Context, node: str, key: str) -> tuple[int, int] | None:
    env = ctx.table("env_nodes")
    row = env.filter((pl.col("node") == node) & (pl.col("key") == key) & (pl.col("basis") == DUMP))
    return (row["input_id"][0], row["line_no"][0]) if not row.is_empty() else None


def ranks_on(ctx: Context, nodes: list[str]) -> list[int]:
    ranks = ctx.ranks
    if ranks.is_empty() or "node" not in ranks.columns:
        return []
    return sorted(ranks.filter(pl.col("node").is_in(nodes))["rank"].drop_nulls().to_list())


def majority_split(values: dict[str, str]) -> tuple[str | None, list[str]]:
    """node -> value: (majority value or None, minority nodes; all nodes off the top value when
    there is no strict majority)."""
    counts = Counter(values.values())
    (top, n_top), *rest = counts.most_common()
    if rest and rest[0][1] == n_top:
        return None, sorted(values)
    return top, sorted(n for n, v in values.items() if v != top)


# -- versions ----------------------------------------------------------------------------------


@dataclass
class NodeVersion:
    node: str
    lo: int                 # NCCL 2.lo ... 2.hi
    hi: int
    exact: str | None       # a version line of its own (2.22+ every process prints one)
    pids: list[int]
    refs: list[tuple[int, int, str]]   # (input_id, line_no, what) lines that pin the version down

    def text(self) -> str:
        if self.exact:
            return self.exact
        return f"2.{self.lo}" if self.lo == self.hi else f"2.{self.lo}-2.{self.hi}"

    def conflicts(self, other: NodeVersion) -> bool:
        if self.exact and other.exact:
            return self.exact != other.exact
        return self.lo > other.hi or other.lo > self.hi


def _minor(text: str | None) -> int | None:
    if not text:
        return None
    parts = text.split(".")
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def nccl_node_versions(ctx: Context) -> list[NodeVersion]:
    """Per node: the NCCL release its processes' own evidence allows (own version lines, line
    shapes); processes with no evidence of their own, or with shapes of no single release
    (a patched build), are left out."""
    procs = ctx.table("nccl_processes")
    if procs.is_empty():
        return []
    fps = ctx.table("nccl_fingerprints")
    versions = ctx.table("nccl_versions")
    nodes: dict[str, NodeVersion] = {}
    for row in procs.iter_rows(named=True):
        source = row.get("version_source") or ""
        if source.startswith("its own"):
            lo = hi = _minor(row["version"])
            exact = row["version"]
        elif row.get("version_min") and not source.startswith("inconsistent"):
            lo, hi, exact = _minor(row["version_min"]), _minor(row["version_max"]), None
        else:
            continue
        if lo is None or hi is None or not row["host"]:
            continue
        nv = nodes.get(row["host"])
        if nv is None:
            nv = nodes[row["host"]] = NodeVersion(row["host"], lo, hi, exact, [], [])
        else:
            nv.lo, nv.hi = max(nv.lo, lo), min(nv.hi, hi)
            if exact and nv.exact and exact != nv.exact:
                nv.exact = " | ".join(sorted({*nv.exact.split(" | "), exact}))
            nv.exact = nv.exact or exact
        nv.pids.append(row["pid"])
    _pin_down(nodes, versions, fps)
    return sorted(nodes.values(), key=lambda v: v.node)


def _pin_down(nodes: dict[str, NodeVersion], versions: pl.DataFrame, fps: pl.DataFrame) -> None:
    """Each node's evidence lines: its first own version line (when its release is exact), then
    the lines of up to two kinds of fingerprint, narrowest first. One join and sort for every node
    (a filter per node cost seconds at a thousand nodes)."""
    procs = pl.DataFrame([(nv.node, pid) for nv in nodes.values() for pid in nv.pids],
                         schema={"host": pl.String, "pid": pl.Int64}, orient="row").unique()
    first_version: dict[str, dict] = {}
    if not versions.is_empty():
        if "host" in versions.columns:
            own = _of_processes(versions, procs).sort("host", "input_id", "line_no", maintain_order=True)
            first_version = {r["host"]: r for r in own.unique("host", keep="first", maintain_order=True)
                             .iter_rows(named=True)}
        else:   # no host to tell nodes apart: every node's lines are all of them
            r = versions.sort("input_id", "line_no", maintain_order=True).row(0, named=True)
            first_version = {node: r for node in nodes}
    for node, r in first_version.items():
        nv = nodes[node]
        if nv.exact:
            nv.refs.append((r["input_id"], r["line_no"], f"{nv.node} prints NCCL version {r['version']}"))
    if fps.is_empty():
        return
    mine = (_of_processes(fps, procs).with_columns(span=pl.col("max_minor") - pl.col("min_minor"))
            .sort("host", "span", "input_id", "line_no", maintain_order=True)
            .unique(["host", "evidence"], keep="first", maintain_order=True)
            .group_by("host", maintain_order=True).head(2))
    for r in mine.iter_rows(named=True):
        nodes[r["host"]].refs.append((r["input_id"], r["line_no"],
                                      f"{r['evidence']}: NCCL 2.{r['min_minor']}-2.{r['max_minor']}"))


def _of_processes(frame: pl.DataFrame, procs: pl.DataFrame) -> pl.DataFrame:
    """``frame``'s rows of the (host, pid) pairs in ``procs``."""
    procs = procs.cast({"host": frame.schema["host"], "pid": frame.schema["pid"]})
    return frame.join(procs, on=["host", "pid"], how="semi", maintain_order="left")


def version_split(nodes: list) -> tuple[object | None, list]:
    """(a node of the majority, minority nodes) over items with ``conflicts``; (None, every node in
    a conflict) when no release is held by a strict majority; (x, []) when nothing conflicts."""
    if len(nodes) < 2:
        return None, []
    # Nodes of one signature (exact, lo, hi) conflict alike: compare the few distinct ones,
    # each weighed by how many nodes hold it (a 10,000-rank run has 1,250 nodes, not 1,250 releases).
    held: dict[tuple, list] = {}
    for a in nodes:
        held.setdefault(_signature(a), []).append(a)
    kind_support = {sig: sum(len(other) for other in held.values() if not group[0].conflicts(other[0]))
                    for sig, group in held.items()}
    in_conflict = {sig for sig, group in held.items() if any(group[0].conflicts(other[0]) for other in held.values())}
    support = {id(a): kind_support[_signature(a)] for a in nodes}
    best = max(nodes, key=lambda a: (support[id(a)], -(a.hi - a.lo) if hasattr(a, "hi") else 0))
    minority = [b for b in nodes if best.conflicts(b)]
    if not in_conflict:
        return best, []
    if len(minority) * 2 >= len(nodes) or any(support[id(a)] == support[id(best)] and best.conflicts(a) for a in nodes):
        return None, [a for a in nodes if _signature(a) in in_conflict]
    return best, minority


def _signature(node) -> tuple:
    """What ``conflicts`` reads of a node."""
    return (node.exact, node.lo, node.hi)
