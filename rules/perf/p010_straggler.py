"""P010 straggler: one rank arrives last at most collectives, and everyone else waits for it.

What it detects
    Arrival skew at the same collective instance across ranks: the start of each rank's NCCL
    kernel (nsys, Kineto: ``collective_timing``) or Flight Recorder ``time_created`` of the
    same (process group, sequence number). A rank is a straggler when it arrives last among
    the ranks of its own node in more than 60% of at least 20 collectives, with a median lag of
    at least 100 us and three times the jitter of its node-mates (ranks on one node share a
    clock, so this lag does not depend on clock synchronisation). A rank alone on its node (or
    a whole node arriving late) is compared with the other nodes only when its lag exceeds the
    clock-offset uncertainty between the hosts (the NTP bound of 10 ms, or the offset
    ``node_clocks`` measured when larger). The finding names the rank, node and GPU, the median
    lag and what it costs per step (lag x collectives per profiled step, against the step time).

Why it matters
    A collective finishes when its last rank arrives: every other rank idles for the lag, at
    every step. One slow GPU (thermal or power throttling, a degraded PCIe link, a noisy
    neighbour process, a CPU-starved data loader) slows the whole job by that amount.

What to do
    Look at that GPU: ``nvidia-smi -q -d PERFORMANCE,CLOCK,POWER,TEMPERATURE -i <dev>`` for
    throttle reasons, ``nvidia-smi -q -d PCIE`` for the link width/speed, other processes on
    the GPU (``nvidia-smi --query-compute-apps=pid,name --format=csv``) and the CPU cores of its
    process (``taskset -pc <pid>``). Run the job with that node excluded (``sbatch --exclude``)
    to confirm, then drain the node if the throttling persists.

Known false positives
    A rank that is last because it does more work by design: the last pipeline stage (loss,
    and the first backward), rank 0 writing logs, metrics or checkpoints, a rank that owns an
    extra embedding or the data loader's shard. Such lags are structural; the finding says so
    for rank 0 (lower confidence). Lags between nodes below the clock uncertainty are not
    reported: a host clock running ahead looks exactly like a late node.
"""

from __future__ import annotations

import polars as pl

from postmortem.parsers.base import groups_of
from postmortem.rules.perf import skew_model as sm
from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity

RULE = Rule(code="P010", name="straggler", severity=Severity.WARNING, category=Category.PERF, since="0.1.0")

MIN_COLLECTIVES = 20
LAST_SHARE = 0.6
MIN_LAG_NS = 100_000


def check(ctx: Context) -> list[Finding]:
    arr = sm.arrivals(ctx)
    if arr.is_empty():
        return []
    findings: dict[int, Finding] = {}
    for (source,), rows in groups_of(arr, "source", maintain_order=True):
        for f in _stragglers(ctx, source, rows):
            if f.ranks[0] not in findings:           # kernels first; a Flight Recorder repeat adds nothing
                findings[f.ranks[0]] = f
    return list(findings.values())


def _stragglers(ctx: Context, source: str, rows: pl.DataFrame) -> list[Finding]:
    rows = rows.with_columns(n=pl.col("rank").n_unique().over("coll")).filter(pl.col("n") > 1)
    # a rank whose node is unknown shares a clock with nobody
    rows = rows.with_columns(node=pl.col("node").fill_null(pl.concat_str([pl.lit("?rank "), pl.col("rank").cast(pl.String)])))
    d = rows.with_columns(
        node_n=pl.len().over("coll", "node"),
        intra_lag=pl.col("start_ns") - pl.col("start_ns").min().over("coll", "node"),
        node_last=(pl.col("start_ns") == pl.col("start_ns").max().over("coll", "node")),
        glob_lag=pl.col("start_ns") - pl.col("start_ns").median().over("coll"),
        glob_last=(pl.col("start_ns") == pl.col("start_ns").max().over("coll")),
    )
    per = d.group_by("rank", "node").agg(
        colls=pl.len(), node_n=pl.col("node_n").median(),
        node_last=pl.col("node_last").filter(pl.col("node_n") > 1).mean(),
        glob_last=pl.col("glob_last").mean(),
        intra_lag=pl.col("intra_lag").filter(pl.col("node_n") > 1).median(),
        glob_lag=pl.col("glob_lag").median(),
    ).sort("rank")
    out = []
    for r in per.filter(pl.col("colls") >= MIN_COLLECTIVES).iter_rows(named=True):
        rank, node = r["rank"], r["node"]
        mates = per.filter((pl.col("node") == node) & (pl.col("rank") != rank))
        intra = r["intra_lag"] or 0
        jitter = d.filter((pl.col("node") == node) & (pl.col("rank") != rank))["intra_lag"].quantile(0.9) or 0
        nodes = sorted(set(per["node"].to_list()))
        if (r["node_n"] or 1) > 1 and (r["node_last"] or 0) > LAST_SHARE and intra >= MIN_LAG_NS \
                and intra >= 3 * jitter:
            lag, basis, conf = intra, f"against the {mates.height} other rank(s) of {node} (one clock)", 0.8
            share = r["node_last"]
        elif (r["glob_last"] or 0) > LAST_SHARE and (r["node_n"] or 1) == 1 and len(nodes) > 1:
            unc = sm.clock_uncertainty_ns(ctx, nodes)
            if (r["glob_lag"] or 0) <= unc:
                continue                               # a clock running ahead looks the same
            lag, basis, conf = r["glob_lag"], f"against the other nodes (beyond the {unc / 1e6:g} ms clock doubt)", 0.6
            share = r["glob_last"]
        else:
            continue
        out.append(_finding(ctx, source, r, int(lag), share, basis, conf))
    return out


def _finding(ctx: Context, source: str, r: dict, lag: int, share: float, basis: str, conf: float) -> Finding:
    rank, node = r["rank"], r["node"]
    colls = r["colls"]
    steps, step_ns = _steps(ctx, rank)
    label = {"flight_recorder": "Flight Recorder time_created", "nsys": "nsys NCCL kernel starts",
             "kineto": "Kineto NCCL kernel starts"}.get(source, f"{source} kernel starts")
    cost = ""
    per_step_ns = None
    if steps:
        per_step_ns = lag * colls / steps
        cost = f"; about {per_step_ns / 1e6:.2f} ms per step ({colls / steps:g} collective(s) per step"
        cost += f", {100 * per_step_ns / step_ns:.1f}% of the {step_ns / 1e6:.1f} ms step)" if step_ns else ")"
    structural = ""
    if rank == 0:
        conf = min(conf, 0.5)
        structural = " Rank 0 often does extra work by design (logging, metrics, checkpoint writes): rule that out."
    gpu = ctx.gpu_of(rank)
    ident = ctx.table("gpu_identity")
    if not ident.is_empty() and {"node", "cuda_dev"} <= set(ident.columns) and gpu.get("cuda_dev") is not None:
        hit = ident.filter((pl.col("node") == node) & (pl.col("cuda_dev") == gpu["cuda_dev"]))
        if not hit.is_empty():
            row = hit.row(0, named=True)
            gpu |= {k: row[k] for k in ("serial", "uuid") if k in row and row[k]}
    dev = gpu.get("cuda_dev")
    where = f"rank {rank} ({node}" + (f", GPU {dev})" if dev is not None else ")")
    msg = (f"{where} arrived last in {100 * share:.0f}% of {colls} "
           f"collectives ({label}); median lag {lag / 1e6:.2f} ms {basis}{cost}.{structural}")
    return RULE.finding(confidence=conf, title=f"Straggler: {where} arrives {lag / 1e6:.2f} ms late at every collective", message=msg,
        ranks=[rank], nodes=[node] if not node.startswith("?") else [], gpus=[gpu], culprit=True,
        suggestion=(f"Check GPU {dev if dev is not None else '?'} on {node}: nvidia-smi -q -d "
                    "PERFORMANCE,CLOCK,POWER,TEMPERATURE (throttle reasons), nvidia-smi -q -d PCIE (link width), "
                    "other processes on the GPU and the rank's CPU affinity; rerun with the node excluded "
                    f"(sbatch --exclude={node}) to confirm."),
        details={"source": source, "collectives": colls, "median_lag_ms": round(lag / 1e6, 3),
                 "last_share": round(share, 2),
                 "cost_per_step_ms": round(per_step_ns / 1e6, 3) if per_step_ns else None})


def _steps(ctx: Context, rank: int) -> tuple[int | None, float | None]:
    """Profiled steps of ``rank`` (PyTorch ``ProfilerStep#k`` ranges) and their median length."""
    nvtx = ctx.table("nvtx")
    if nvtx.is_empty() or "text" not in nvtx.columns:
        return None, None
    steps = nvtx.filter((pl.col("rank") == rank) & pl.col("text").str.starts_with("ProfilerStep#"))
    if steps.is_empty():
        return None, None
    return steps.height, steps["dur_ns"].median()
