"""``postmortem diff GOOD BAD``: what changed between a good and a failed run of the same job.

Each side is a job folder (analysed on the fly) or a store written by ``postmortem ingest``.
The changes come from the same tables the rules read, and are ranked by how often such a
change breaks a job: must-match settings first (NCCL's own "set by environment" echoes before
shell dumps), then versions, the node set, the transports NCCL picked, algorithm choices, and
the measured numbers (busbw, step time, memory peak) when they moved by more than a noise
margin. Per-node and per-rank variables (HOSTNAME, SLURM_*, CUDA_VISIBLE_DEVICES) differ by
design and are left out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import polars as pl

from analyzer.ranges import hostlist

# How likely each kind of change is to matter; the report lists the heaviest first.
WEIGHTS = {"must_match": 100, "version": 80, "should_match": 60, "transport": 55, "nodes": 40, "algorithm": 30,
           "busbw": 30, "step_time": 30, "memory": 20, "other": 10}
NOISE = {"busbw": 0.10, "step_time": 0.10, "memory": 0.05}   # relative change below which numbers did not move
PACKAGES = ("torch", "nvidia-nccl-cu12", "nvidia-nccl-cu11", "transformers", "deepspeed", "megatron-core",
            "transformer-engine", "transformer_engine", "flash-attn", "flash_attn", "apex", "accelerate",
            "lightning", "torchtitan", "triton")


@dataclass
class Change:
    kind: str
    key: str
    good: str
    bad: str
    weight: int
    note: str = ""


def diff(good, bad) -> dict:
    """Both ``Run``s compared; ``changes`` sorted heaviest first (ties by kind and key)."""
    changes = [*_env(good, bad), *_versions(good, bad), *_nodes(good, bad), *_transports(good, bad),
               *_algorithms(good, bad), *_numbers(good, bad)]
    changes.sort(key=lambda c: (-c.weight, c.kind, c.key))
    return {"schema": "postmortem.diff/1", "changes": [asdict(c) for c in changes],
            "summary": f"{len(changes)} change(s)" + (f"; first: {changes[0].key}" if changes else "")}


def _frame(run, sql: str) -> pl.DataFrame:
    return run.frame(sql)


def _has(run, table: str, *columns: str) -> bool:
    return set(columns) <= set(run.columns(table))


# -- environment -------------------------------------------------------------------------------

def _env_values(run) -> dict[tuple[str, str], tuple[str, str]]:
    """(key, basis) -> (class, 'VALUE on hosts; ...') over the nodes with evidence of that basis."""
    if not _has(run, "env_nodes", "node", "key", "value", "basis", "class"):
        return {}
    rows = _frame(run, "SELECT key, basis, class, value, list(DISTINCT node ORDER BY node) AS nodes FROM env_nodes "
                       "WHERE class NOT IN ('per_node', 'per_rank') GROUP BY ALL ORDER BY key, basis, value")
    nodes_per_basis = {b: set(n) for b, n in _frame(
        run, "SELECT basis, list(DISTINCT node) AS n FROM env_nodes GROUP BY basis").iter_rows()}
    out: dict[tuple[str, str], tuple[str, str]] = {}
    for (key, basis, cls), group in rows.group_by(["key", "basis", "class"], maintain_order=True):
        parts, covered = [], set()
        for value, nodes in group.select("value", "nodes").iter_rows():
            parts.append(f"{value} on {hostlist(nodes)}")
            covered |= set(nodes)
        unset = sorted(nodes_per_basis.get(basis, set()) - covered)
        if unset:
            parts.append(f"<unset> on {hostlist(unset)}")
        out[(key, basis)] = (cls, "; ".join(parts))
    return out


def _strip_hosts(text: str) -> str:
    """The values alone, so a run on other hosts with the same settings does not differ."""
    return "; ".join(sorted(part.split(" on ")[0] for part in text.split("; ")))


def _env(good, bad) -> list[Change]:
    g, b = _env_values(good), _env_values(bad)
    out = []
    for key_basis in sorted(set(g) | set(b)):
        key, basis = key_basis
        g_cls, g_val = g.get(key_basis, (None, "<unset>"))
        b_cls, b_val = b.get(key_basis, (None, "<unset>"))
        if _strip_hosts(g_val) == _strip_hosts(b_val):
            continue
        cls = b_cls or g_cls or "other"
        weight = WEIGHTS.get(cls, WEIGHTS["other"]) + (5 if basis == "NCCL INFO" else 0)
        same = next((c for c in out if (c.key, c.good, c.bad) == (key, g_val, b_val)), None)
        if same is not None:  # both kinds of evidence say the same: one change, both sources
            same.note += f" and {basis}"
            same.weight = max(same.weight, weight)
            continue
        out.append(Change("env", key, g_val, b_val, weight, f"{cls.replace('_', '-')}, from {basis}"))
    return out


# -- versions, nodes ---------------------------------------------------------------------------

def _version_sets(run) -> dict[str, str]:
    out = {}
    if _has(run, "nccl_processes", "version"):
        versions = _frame(run, "SELECT DISTINCT version FROM nccl_processes WHERE version IS NOT NULL ORDER BY 1")
        if not versions.is_empty():
            out["NCCL"] = ", ".join(versions["version"].to_list())
    if _has(run, "packages", "name", "version"):
        names = ", ".join(f"'{p}'" for p in PACKAGES)
        rows = _frame(run, f"SELECT lower(name) AS name, string_agg(DISTINCT version, ', ' ORDER BY version) AS v "
                           f"FROM packages WHERE lower(name) IN ({names}) GROUP BY 1 ORDER BY 1")
        out.update({name: v for name, v in rows.iter_rows()})
    return out


def _versions(good, bad) -> list[Change]:
    g, b = _version_sets(good), _version_sets(bad)
    return [Change("version", k, g.get(k, "?"), b.get(k, "?"), WEIGHTS["version"]) for k in sorted(set(g) | set(b))
            if k in g and k in b and g[k] != b[k]]


def _node_set(run) -> tuple[list[str], int | None]:
    nodes = _frame(run, "SELECT DISTINCT node FROM ranks WHERE node IS NOT NULL ORDER BY 1")["node"].to_list() \
        if _has(run, "ranks", "node") else []
    return nodes, run.info.get("world_size")


def _nodes(good, bad) -> list[Change]:
    (g_nodes, g_world), (b_nodes, b_world) = _node_set(good), _node_set(bad)
    out = []
    if g_world and b_world and g_world != b_world:
        out.append(Change("nodes", "world size", str(g_world), str(b_world), WEIGHTS["nodes"] + 5))
    if g_nodes and b_nodes and g_nodes != b_nodes:
        added, removed = sorted(set(b_nodes) - set(g_nodes)), sorted(set(g_nodes) - set(b_nodes))
        note = "; ".join(x for x in (f"new: {hostlist(added)}" if added else "",
                                     f"gone: {hostlist(removed)}" if removed else "") if x)
        out.append(Change("nodes", "node set", hostlist(g_nodes), hostlist(b_nodes), WEIGHTS["nodes"], note))
    return out


# -- transports and algorithms -----------------------------------------------------------------

def _tier_shares(run) -> dict[str, str]:
    """Per phase: the share of hops on each tier ('NVLink 88%, RoCE GDR 12%')."""
    if not _has(run, "nccl_hops", "tier", "phase"):
        return {}
    rows = _frame(run, "SELECT coalesce(phase, '?') AS phase, coalesce(tier, '?') AS tier, count(*) AS n "
                       "FROM nccl_hops GROUP BY ALL ORDER BY phase, n DESC, tier")
    out = {}
    for (phase,), group in rows.group_by(["phase"], maintain_order=True):
        total = group["n"].sum()
        out[f"{phase} hops by tier"] = ", ".join(f"{t} {100 * n / total:.0f}%" for t, n in
                                                 group.select("tier", "n").iter_rows())
    return out


def _transports(good, bad) -> list[Change]:
    g, b = _tier_shares(good), _tier_shares(bad)
    out = []
    for key in sorted(set(g) & set(b)):
        g_tiers = {part.rsplit(" ", 1)[0] for part in g[key].split(", ")}
        b_tiers = {part.rsplit(" ", 1)[0] for part in b[key].split(", ")}
        if g_tiers != b_tiers:
            out.append(Change("transport", key, g[key], b[key], WEIGHTS["transport"],
                              "new tier(s): " + ", ".join(sorted(b_tiers - g_tiers)) if b_tiers - g_tiers else ""))
    return out


def _choices(run) -> dict[str, str]:
    if not _has(run, "nccl_tuning", "func", "algo", "proto", "kind"):
        return {}
    rows = _frame(run, "SELECT func, string_agg(DISTINCT algo || '/' || proto, ', ' ORDER BY algo || '/' || proto) "
                       "AS c FROM nccl_tuning WHERE func IS NOT NULL AND algo IS NOT NULL AND proto IS NOT NULL "
                       "AND kind LIKE '%choice%' GROUP BY func ORDER BY func")
    return {f"{func} algorithm/protocol": c for func, c in rows.iter_rows()}


def _algorithms(good, bad) -> list[Change]:
    g, b = _choices(good), _choices(bad)
    return [Change("algorithm", k, g[k], b[k], WEIGHTS["algorithm"]) for k in sorted(set(g) & set(b)) if g[k] != b[k]]


# -- measured numbers --------------------------------------------------------------------------

def _measures(run) -> dict[str, tuple[str, float]]:
    out: dict[str, tuple[str, float]] = {}
    if _has(run, "iterations", "elapsed_ms", "iteration"):
        v = _frame(run, "SELECT median(elapsed_ms) AS v FROM iterations WHERE elapsed_ms IS NOT NULL "
                        "AND iteration > 1")["v"][0]
        if v is not None:
            out["median step time (ms)"] = ("step_time", float(v))
    if _has(run, "memory", "max_allocated_mib"):
        v = _frame(run, "SELECT max(max_allocated_mib) AS v FROM memory")["v"][0]
        if v is not None:
            out["peak allocated memory (MiB)"] = ("memory", float(v))
    if _has(run, "bench_results", "op", "oop_busbw_gbs"):
        for op, v in _frame(run, "SELECT op, max(oop_busbw_gbs) AS v FROM bench_results WHERE op IS NOT NULL "
                                 "GROUP BY op ORDER BY op").iter_rows():
            if v is not None:
                out[f"{op} peak busbw (GB/s)"] = ("busbw", float(v))
    return out


def _numbers(good, bad) -> list[Change]:
    g, b = _measures(good), _measures(bad)
    out = []
    for key in sorted(set(g) & set(b)):
        kind, g_val = g[key]
        b_val = b[key][1]
        change = (b_val - g_val) / g_val if g_val else 0.0
        if abs(change) > NOISE[kind]:
            out.append(Change(kind, key, f"{g_val:.1f}", f"{b_val:.1f}", WEIGHTS[kind], f"{100 * change:+.0f}%"))
    return out


def render_text(result: dict) -> str:
    if not result["changes"]:
        return "No difference found between the two runs in settings, versions, nodes, transports or numbers.\n"
    out = [f"{result['summary']} (most likely to matter first)", ""]
    for c in result["changes"]:
        note = f"  [{c['note']}]" if c["note"] else ""
        out.append(f"{c['kind']:10s} {c['key']}{note}")
        out.append(f"    good: {c['good']}")
        out.append(f"    bad:  {c['bad']}")
    return "\n".join(out) + "\n"
