"""``postmortem diff GOOD BAD``: did the two runs end differently, and what changed that could
explain it.

Each side is a job folder (analysed on the fly) or a store written by ``postmortem ingest``.
The answer starts from the outcomes: each run's outcome and verdict (from its report, the
``outcome`` and ``verdict`` of the JSON report) and whether they differ. Then the changes,
from the same tables the rules read, in two groups:

* changes that could explain a difference: must-match and other settings that change what the
  job does (NCCL's own "set by environment" echoes before shell dumps), versions, the node
  set, the transports and algorithms NCCL picked -- heaviest first; a change the bad run's
  verdict itself names (its setting, its node) is marked. When none changed, the answer says
  so: the cause is then in the bad run itself (a code path, a piece of hardware), and its
  report says which.
* other differences: logging and diagnostic switches (``TORCH_CPP_LOG_LEVEL``, ``NCCL_DEBUG``,
  Flight Recorder settings: they change what is written, not what runs) and the measured
  numbers (busbw, step time, memory peak) when they moved by more than a noise margin -- those
  are effects to compare, not causes.

Per-node and per-rank variables (HOSTNAME, SLURM_*, CUDA_VISIBLE_DEVICES) differ by design and
are left out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import polars as pl

from postmortem.analyzer.ranges import hostlist

# How likely each kind of change is to matter; the report lists the heaviest first.
WEIGHTS = {"must_match": 100, "version": 80, "should_match": 60, "transport": 55, "nodes": 40, "algorithm": 30,
           "busbw": 30, "step_time": 30, "memory": 20, "other": 10}
NOISE = {"busbw": 0.10, "step_time": 0.10, "memory": 0.05}   # relative change below which numbers did not move
PACKAGES = ("torch", "nvidia-nccl-cu12", "nvidia-nccl-cu11", "transformers", "deepspeed", "megatron-core",
            "transformer-engine", "transformer_engine", "flash-attn", "flash_attn", "apex", "accelerate",
            "lightning", "torchtitan", "triton")


# Settings that change what is logged or kept for diagnosis, not what the job computes or how
# its ranks talk: a difference in them does not explain a different outcome.
DIAGNOSTIC = {"TORCH_CPP_LOG_LEVEL", "TORCH_DISTRIBUTED_DEBUG", "TORCH_SHOW_CPP_STACKTRACES", "NCCL_DEBUG",
              "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_DEBUG_TIMESTAMP_FORMAT", "TORCH_NCCL_TRACE_BUFFER_SIZE",
              "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE",
              "TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_ON_TIMEOUT", "TORCH_FR_DUMP_TEMP_FILE",
              "TORCH_NCCL_DESYNC_DEBUG", "TORCH_NCCL_LOG_CPP_STACK_ON_UNCLEAN_SHUTDOWN", "LOGLEVEL",
              "PYTHONUNBUFFERED", "PYTHONFAULTHANDLER", "TORCHELASTIC_ERROR_FILE", "NCCL_RAS_ENABLE"}
_EFFECTS = ("busbw", "step_time", "memory")   # measured numbers: effects to compare, not causes


@dataclass
class Change:
    kind: str
    key: str
    good: str
    bad: str
    weight: int
    note: str = ""
    could_explain: bool = True     # a kind of change that can make a run end differently
    named_by_verdict: bool = False  # the bad run's verdict (its findings) names this setting or node


def diff(good, bad, good_report: dict | None = None, bad_report: dict | None = None) -> dict:
    """Both ``Run``s compared, starting from their outcomes (from their reports, when given).
    ``changes`` are sorted: those that could explain a difference first, heaviest first (ties by
    kind and key)."""
    changes = [*_env(good, bad), *_versions(good, bad), *_nodes(good, bad), *_transports(good, bad),
               *_algorithms(good, bad), *_numbers(good, bad)]
    for c in changes:
        c.could_explain = c.kind not in _EFFECTS and not (c.kind == "env" and c.key in DIAGNOSTIC)
        c.named_by_verdict = _named(c, bad_report)
    changes.sort(key=lambda c: (not c.could_explain, not c.named_by_verdict, -c.weight, c.kind, c.key))
    outcomes = {"good": _side(good_report), "bad": _side(bad_report)}
    outcomes["differ"] = (None if good_report is None or bad_report is None
                          else _key(outcomes["good"]) != _key(outcomes["bad"]))
    explaining = [c for c in changes if c.could_explain]
    summary = _summary(outcomes, explaining, changes)
    return {"schema": "postmortem.diff/1", "outcomes": outcomes, "changes": [asdict(c) for c in changes],
            "explaining": [c.key for c in explaining], "summary": summary}


def _side(report: dict | None) -> dict:
    """One run's outcome and verdict, as its report states them."""
    if report is None:
        return {"outcome": "unknown", "headline": "unknown (no report for this side)", "status": "unknown",
                "category": None, "verdict": None, "culprit": {"ranks": [], "nodes": []}}
    from postmortem.views.render import outcome_lines

    v = report.get("verdict") or {}
    culprit = v.get("culprit") or {}
    return {"outcome": (report.get("outcome") or {}).get("outcome") or "unknown",
            "headline": outcome_lines(report)[0], "status": v.get("status") or "unknown",
            "category": v.get("category"), "verdict": v.get("sentence"),
            "culprit": {"ranks": culprit.get("ranks") or [], "nodes": culprit.get("nodes") or []},
            "findings": sorted({f["code"] for f in report.get("findings") or [] if f.get("severity") == "error"})}


def _key(side: dict) -> tuple:
    return side["outcome"], side["status"], side["category"]


def _named(change: Change, report: dict | None) -> bool:
    """Whether the bad run's error and warning findings name this change's setting or node."""
    if report is None:
        return False
    for f in report.get("findings") or []:
        if f.get("severity") not in ("error", "warning"):
            continue
        if change.kind == "env" and ((f.get("details") or {}).get("key") == change.key or change.key in f.get("title", "")):
            return True
        if change.kind == "nodes" and change.key == "node set" and set(f.get("nodes") or []) & set(
                part for part in change.note.replace(";", " ").split() if part not in ("new:", "gone:")):
            return True
        if change.kind == "version" and change.key in f.get("title", ""):
            return True
    return False


def _summary(outcomes: dict, explaining: list[Change], changes: list[Change]) -> str:
    differ = outcomes["differ"]
    head = ("the outcomes differ" if differ else "the same outcome" if differ is False else "outcomes unknown")
    if explaining:
        return f"{head}; {len(explaining)} change(s) could explain it, first: {explaining[0].key}"
    return f"{head}; no change that could explain it" + (f" ({len(changes)} other difference(s))" if changes else "")


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


def render_text(result: dict, names: tuple[str, str] = ("good", "bad")) -> str:
    """The outcomes first, then the changes that could explain a difference (or that none
    could), then the other differences."""
    from postmortem.views.render import safe

    o = result.get("outcomes") or {}
    out = []
    if o:
        differ = o.get("differ")
        out.append("Outcomes: " + ("they differ." if differ else "the same." if differ is False else "unknown."))
        width = max(len(n) for n in names)
        for side, name in zip(("good", "bad"), names):
            s = o[side]
            verdict = f"; verdict {s['status']}" + (f" ({s['category']})" if s.get("category") not in (None, "none") else "")
            out.append(f"  {side:4s} {safe(name):{width}s}  {safe(s['headline'])}{verdict}")
            if s.get("verdict"):
                out.append(f"       {_cut(safe(s['verdict']), 220)}")
        out.append("")
    changes = result["changes"]
    explaining = [c for c in changes if c.get("could_explain", True)]
    others = [c for c in changes if not c.get("could_explain", True)]
    if explaining:
        out.append("Changes that could explain it (settings, versions, nodes, transports; most likely first):")
        out += _change_lines(explaining)
    else:
        out.append("No change that could explain it: no must-match or behaviour setting, version, node set, "
                   "transport or algorithm differs between the runs.")
        if o and o.get("differ"):
            out.append("  The cause is in the bad run itself (a code path, a piece of hardware, the data): its "
                       "report says which.")
    if others:
        out += ["", "Other differences (logging and diagnostics, measured numbers: effects, not causes):"]
        out += _change_lines(others)
    return "\n".join(out) + "\n"


def _change_lines(changes: list[dict]) -> list[str]:
    from postmortem.views.render import safe

    out = []
    for c in changes:
        note = f"  [{c['note']}]" if c["note"] else ""
        named = "  <- the bad run's verdict names it" if c.get("named_by_verdict") else ""
        out.append(f"  {c['kind']:10s} {safe(c['key'])}{safe(note)}{named}")
        out.append(f"      good: {safe(c['good'])}")
        out.append(f"      bad:  {safe(c['bad'])}")
    return out


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "\u2026"
