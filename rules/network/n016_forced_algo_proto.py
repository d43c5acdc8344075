"""N016 forced-algo-proto: NCCL_ALGO / NCCL_PROTO force a choice NCCL's tuner would not make at this job's scale.

What it detects
    The values of ``NCCL_PROTO`` and ``NCCL_ALGO`` the job ran with: NCCL's own ``set by
    environment to`` echo per node, environment dumps and ``nccl.conf`` copies (``env_nodes``), and
    the job script's exports (``job_config``). It flags a setting that restricts NCCL's tuner against
    what it picks by itself: protocol ``Simple`` only (``NCCL_PROTO=Simple`` or ``^LL,LL128``),
    which drops LL and LL128 for small and medium messages; LL128 excluded (``^LL128``) on GPUs that
    run it by default (Ampere, Hopper, Blackwell with NVLink); algorithm ``Ring`` only at 64 ranks or
    more (or 8 nodes), where NCCL uses Tree (or PAT/NVLS) for small and medium all-reduce because
    a ring's latency grows with every rank. Where rank 0 printed NCCL's tuning table (TUNING), the
    finding gives the table's base latency of the forced choice against the best combination it
    disabled. A setting identical on every node is still flagged: no mismatch rule sees it.

Why it matters
    These variables are often left in a profile or job script from a debugging session or an old
    bug. Every collective then pays for it: Simple costs tens of microseconds per step where LL
    takes a few, and a 512-rank ring needs about a thousand steps per all-reduce where a tree needs
    about twenty. Small-message collectives (MoE all-to-all headers, gradient buckets tails, barriers)
    slow down, and the job is merely slow, never failing.
    A value set on some nodes only is a mismatch, E001's finding, and is left to it.

What to do
    Remove the variable and compare step time and an ``all_reduce_perf -b 8 -e 128M -f 2`` run with
    and without it. If it was set on purpose, write why next to it in the job script (a comment with
    the issue or bug it works around): the rule then stays quiet.

Known false positives
    A setting that works around a real bug of the NCCL release in use is right; the rule cannot know
    every bug, so it trusts a comment on or just above the setting in the job script or nccl.conf
    that says so (workaround, WAR, known issue/bug, an issue link or number). Per-collective values
    (``allreduce:ring;...``, 2.24+) are judged on their all-reduce part only; ``^NVLS`` and
    ``^CollNet`` (common memory and fabric workarounds) are not judged.
"""

from __future__ import annotations

import re

import polars as pl

from postmortem.rules.linkbench import linkbench_model as lm
from postmortem.rules.base import Context, Finding, with_columns
from postmortem.rules.declare import Category, Rule, Severity

RULE = Rule(code="N016", name="forced-algo-proto", severity=Severity.WARNING, category=Category.CONFIG, since="0.1.0")

PROTOS = {"ll", "ll128", "simple"}
ALGOS = {"ring", "tree", "collnetdirect", "collnetchain", "nvls", "nvlstree", "pat"}
_ALIAS = {"collnet": {"collnetdirect", "collnetchain"}, "collnet_direct": {"collnetdirect"},
          "collnet_chain": {"collnetchain"}, "nvls_tree": {"nvlstree"}}
RING_RANKS = 64
RING_NODES = 8
LL128_ARCHS = {"Ampere", "Hopper", "Blackwell"}
WORKAROUND = re.compile(r"(?i)work\s*-?around|\bWAR\b|known (?:issue|bug)|\bbug\b|issues?/\d+|issue\s*#?\d+|\bhang")


def allowed(value: str, universe: set[str]) -> set[str] | None:
    """What NCCL may still use under ``value`` (``Simple``, ``^LL128``, ``ring,tree``, 2.24+
    ``allreduce:ring;broadcast:tree``); None when the value says nothing global or about all-reduce."""
    v = value.strip().strip("'\"")
    if ":" in v:
        parts = dict(p.split(":", 1) for p in v.split(";") if ":" in p)
        v = next((val for key, val in parts.items() if key.strip().casefold().replace("_", "") == "allreduce"), None)
        if v is None:
            return None
    neg = v.startswith("^")
    names: set[str] = set()
    for n in v.lstrip("^").split(","):
        n = n.strip().casefold()
        if n:
            names |= _ALIAS.get(n, {n.replace("_", "")})
    return universe - names if neg else universe & names


def check(ctx: Context) -> list[Finding]:
    settings = _settings(ctx)
    if not settings:
        return []
    world, nodes = _scale(ctx)
    acc = lm.accelerator(ctx, None)
    reporting = _reporting_nodes(ctx)
    out = []
    for key in ("NCCL_PROTO", "NCCL_ALGO"):
        by_value: dict[str, list[dict]] = {}
        for s in settings.get(key, []):
            by_value.setdefault(s["value"].strip().casefold(), []).append(s)
        for _v, rows in sorted(by_value.items()):
            if _explained(ctx, rows):
                continue
            # set on some nodes only: a mismatch, E001's finding (and the likelier cause of trouble)
            on = {r["node"] for r in rows if r["node"]}
            if not any(r["node"] is None for r in rows) and on and reporting - on:
                continue
            f = _judge(ctx, key, rows, world, nodes, acc)
            if f:
                out.append(f)
    return out


def _settings(ctx: Context) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    env = ctx.table("env_nodes")
    if not env.is_empty() and "key" in env.columns:
        env = with_columns(env, basis=pl.String, node=pl.String)
        for r in env.filter(pl.col("key").is_in(["NCCL_PROTO", "NCCL_ALGO"]) & pl.col("value").is_not_null()).iter_rows(named=True):
            for value in str(r["value"]).split(" | "):
                out.setdefault(r["key"], []).append({"node": r["node"] if r["node"] != "?" else None, "value": value,
                                                     "input_id": r["input_id"], "line_no": r["line_no"],
                                                     "source": r["basis"]})
    job = ctx.table("job_config")
    if not job.is_empty() and "key" in job.columns:
        job = with_columns(job, source=pl.String)
        for r in job.filter(pl.col("key").is_in(["NCCL_PROTO", "NCCL_ALGO"]) & pl.col("value").is_not_null()).iter_rows(named=True):
            out.setdefault(r["key"], []).append({"node": None, "value": r["value"], "input_id": r["input_id"],
                                                 "line_no": r["line_no"], "source": r["source"] or "job script"})
    return out


def _reporting_nodes(ctx: Context) -> set[str]:
    """Nodes whose settings the inputs show (an env dump, or NCCL's echo lines)."""
    env = ctx.table("env_nodes")
    if env.is_empty() or "node" not in env.columns:
        return set()
    return {n for n in env["node"].drop_nulls().unique().to_list() if n != "?"}


def _scale(ctx: Context) -> tuple[int | None, int | None]:
    world = ctx.world_size
    comms = ctx.table("nccl_comms")
    if not world and not comms.is_empty() and "nranks" in comms.columns:
        world = comms["nranks"].max()
    ranks = ctx.table("ranks")
    nodes = None
    if not ranks.is_empty() and "node" in ranks.columns:
        nodes = ranks["node"].drop_nulls().n_unique() or None
    if not world and not ranks.is_empty():
        world = ranks.height
    return (int(world) if world else None), nodes


def _explained(ctx: Context, rows: list[dict]) -> bool:
    """A comment on or up to three lines above the setting that says it works around something."""
    for r in rows:
        if r["source"] == "NCCL INFO" or r["input_id"] is None or r["line_no"] is None:
            continue
        for n in range(max(1, int(r["line_no"]) - 3), int(r["line_no"]) + 1):
            text = ctx.evidence(r["input_id"], n).text
            comment = text[text.index("#"):] if "#" in text else ""
            if comment and WORKAROUND.search(comment):
                return True
    return False


def _judge(ctx: Context, key: str, rows: list[dict], world, nodes, acc) -> Finding | None:
    value = rows[0]["value"].strip().strip("'\"")
    nodes_set = sorted({r["node"] for r in rows if r["node"]})
    scope = f"on {len(nodes_set)} node(s)" if nodes_set else "in the job script"
    if key == "NCCL_PROTO":
        ok = allowed(value, PROTOS)
        if ok is None:
            return None
        if ok == {"simple"}:
            sev, what = Severity.WARNING, (f"NCCL_PROTO={value} leaves only the Simple protocol: small and medium messages lose "
                                    "LL and LL128, whose per-step latency is a fraction of Simple's")
            disabled = {"ll", "ll128"}
        elif "ll128" not in ok and acc and acc.get("arch") in LL128_ARCHS and acc.get("nvlink"):
            sev, what = Severity.INFO, (f"NCCL_PROTO={value} disables LL128, which NCCL uses by default on {acc['name']} "
                                 "(NVLink): medium messages (tens of KB to a few MB) run on LL or Simple instead")
            disabled = {"ll128"}
        else:
            return None
        cost = _tuning_cost(ctx, proto_off=disabled)
    else:
        ok = allowed(value, ALGOS)
        if ok is None or ok != {"ring"}:
            return None
        big = (world and world >= RING_RANKS) or (nodes and nodes >= RING_NODES)
        if not big:
            return None
        sev = Severity.WARNING
        what = (f"NCCL_ALGO={value} forces Ring at {world or '?'} ranks on {nodes or '?'} nodes: a ring all-reduce takes "
                f"2x{(world or 2) - 1} steps, each paying the network latency, where NCCL picks Tree (or PAT/NVLS) for "
                "small and medium messages at this scale")
        cost = _tuning_cost(ctx, algo_off=ALGOS - {"ring"})
    msg = what + f" (set {scope}: " + ", ".join(sorted({r['source'] for r in rows})) + ")."
    if cost:
        msg += " " + cost["text"]
    ev = []
    for r in sorted(rows, key=lambda r: (r["source"] != "sbatch export", r["node"] or "", r["line_no"] or 0))[:4]:
        if r["input_id"] is not None and r["line_no"] is not None:
            ev.append(ctx.evidence(r["input_id"], r["line_no"], f"{key}={r['value']} ({r['source']})"))
    return RULE.finding(severity=sev, confidence=0.7, title=f"{key}={value} forced {scope}" + (" (every node)" if nodes and
                   len(nodes_set) == nodes and nodes > 1 else ""), message=msg, nodes=nodes_set, evidence=ev,
                   suggestion=(f"Unset {key} and compare step time and all_reduce_perf -b 8 -e 128M -f 2 with and "
                               "without it; if it works around a known NCCL bug, say so in a comment next to it."),
                   details={"key": key, "value": value, "allowed": sorted(ok), "world": world, "nodes": nodes,
                            "cost": cost})


def _tuning_cost(ctx: Context, proto_off: set[str] = frozenset(), algo_off: set[str] = frozenset()) -> dict | None:
    """From rank 0's tuning table (AllReduce cells): base latency of what is left against the best
    combination the setting turned off."""
    t = ctx.table("nccl_tuning")
    if t.is_empty() or "latency_us" not in t.columns:
        return None
    cells = with_columns(t, func=pl.String, algo=pl.String, proto=pl.String).filter(
        pl.col("latency_us").is_not_null() & (pl.col("latency_us") > 0)
        & pl.col("func").str.to_lowercase().str.replace_all(r"[^a-z]", "").eq("allreduce"))
    if cells.is_empty():
        return None
    norm = cells.with_columns(_a=pl.col("algo").str.to_lowercase().str.replace_all("_", ""),
                              _p=pl.col("proto").str.to_lowercase())
    off = pl.col("_p").is_in(list(proto_off)) | pl.col("_a").is_in(list(algo_off))
    left, gone = norm.filter(~off), norm.filter(off)
    if left.is_empty() or gone.is_empty():
        return None
    a = left.sort("latency_us").row(0, named=True)
    b = gone.sort("latency_us").row(0, named=True)
    if b["latency_us"] >= a["latency_us"]:
        return None
    return {"forced_us": a["latency_us"], "forced": f"{a['algo']}/{a['proto']}", "best_off_us": b["latency_us"],
            "best_off": f"{b['algo']}/{b['proto']}",
            "text": (f"NCCL's tuning table gives AllReduce a base latency of {a['latency_us']:g} us with "
                     f"{a['algo']}/{a['proto']} against {b['latency_us']:g} us with {b['algo']}/{b['proto']}, which the "
                     f"setting turns off.")}
