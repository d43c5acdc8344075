"""Shared helpers of the performance rules (P001-P009): the model's size and shape from the
framework's own lines, tokens per step, the steady step time, the cluster's peak and the
storage tiers a checkpoint is written to.

Numbers come from the inputs only (Megatron's arguments dump and parameter counts in
``job_config``, the ``iterations`` table, the GPU from nvidia-smi or ``report --gpu``); where one
is missing the helpers return ``None`` and say which, and the rules stay quiet or say so.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import polars as pl

from postmortem.analyzer import hardware
from postmortem.analyzer.transports import accelerator
from postmortem.rules.base import Context, memoised, with_columns

# Bytes per parameter of a mixed-precision Adam checkpoint: bf16/fp16 weights (2) + fp32 master
# weights (4) + Adam first and second moments (4 + 4).
CKPT_BYTES_PER_PARAM = 14

# Sustained write rate (GB/s, whole job) a checkpoint gets from a storage tier. NFS: the seeds'
# "490 GB over 1 GB/s NFS"; a single NFS server rarely sustains more than ~1 GB/s of large writes.
# Parallel file systems (Lustre, GPFS, Weka) reach tens of GB/s; the lower end is used.
# Write rates of the storage tiers, GB/s, from the hardware model (analyzer/hardware.toml).
STORAGE_TIERS = {t["name"]: t["line_gbyte_s"] for t in hardware.model()["tier"] if t.get("storage")}

# Steps at the start that are slow by nature (compilation, allocator warm-up, first data load).
WARMUP_STEPS = 2


@dataclass
class Model:
    total_params: float | None = None
    active_params: float | None = None
    layers: int | None = None
    hidden: int | None = None
    seq_length: int | None = None
    global_batch: int | None = None
    moe: bool = False
    recompute_full: bool = False
    sources: dict = field(default_factory=dict)    # what each number was read from
    missing: list[str] = field(default_factory=list)


@memoised
def config(ctx: Context) -> dict[str, str]:
    """job_config as key -> value (the arguments dump first, then other sources)."""
    # Every config parser writes key and value, but not every one a source.
    df = with_columns(ctx.table("job_config"), key=pl.String, value=pl.String, source=pl.String)
    out: dict[str, str] = {}
    if not df.is_empty():
        rank = {"megatron-args": 0, "megatron-model": 1, "megatron-theory": 1}
        rows = sorted(df.select("key", "value", "source").iter_rows(), key=lambda r: rank.get(r[2] or "", 5))
        for key, value, _ in rows:
            if key is not None and value not in (None, "", "None") and key not in out:
                out[key] = value
    return out


def _num(value) -> float | None:
    try:
        return float(str(value).replace(",", ""))
    except (TypeError, ValueError):
        return None


def model(ctx: Context) -> Model:
    cfg = config(ctx)
    m = Model()
    n = lambda key: _num(cfg.get(key))    # noqa: E731
    experts = n("num_experts")
    m.moe = bool(experts and experts > 1)
    m.layers = int(n("num_layers")) if n("num_layers") else None
    m.hidden = int(n("hidden_size")) if n("hidden_size") else None
    m.seq_length = int(n("seq_length")) if n("seq_length") else None
    m.global_batch = int(n("global_batch_size")) if n("global_batch_size") else None
    m.recompute_full = str(cfg.get("recompute_granularity", "")).lower() == "full"
    if n("params_total_b"):
        m.total_params, m.sources["total"] = n("params_total_b") * 1e9, "Total number of parameters in billions"
    elif n("num_parameters"):
        tp, pp = n("tp") or 1, n("pp") or 1
        if tp * pp == 1:   # with TP/PP the line counts one model-parallel shard only
            m.total_params, m.sources["total"] = n("num_parameters"), "number of parameters on model parallel rank 0"
    if n("params_active_total_b"):
        m.active_params, m.sources["active"] = n("params_active_total_b") * 1e9, \
            "Total number of active parameters in billions"
    elif m.total_params and not m.moe:
        m.active_params, m.sources["active"] = m.total_params, m.sources["total"] + " (dense model: all active)"
    if m.active_params is None:
        m.missing.append("active parameters (an MoE model: the total does not say how many a token uses)"
                         if m.moe and m.total_params else "the parameter count")
    return m


def train_steps(ctx: Context) -> pl.DataFrame:
    """One row per training iteration (validation rows dropped; the slowest printer kept)."""
    it = ctx.table("iterations")
    if it.is_empty() or "elapsed_ms" not in it.columns:
        return pl.DataFrame()
    it = with_columns(it, validation=pl.Boolean)  # only frameworks that print validation lines have the column
    if it["elapsed_ms"].drop_nulls().len() == 0 and "ts" in it.columns and it["ts"].drop_nulls().len() > 2:
        # torchtitan and others log every N steps without a step time: the time between two log
        # lines over the steps between them.
        it = (it.filter(pl.col("ts").is_not_null() & pl.col("iteration").is_not_null()
                        & ~pl.col("validation").fill_null(False))
              .unique("iteration", keep="first").sort("iteration")
              .with_columns(elapsed_ms=(pl.col("ts").diff().dt.total_microseconds() / 1000.0)
                            / pl.col("iteration").diff().cast(pl.Float64)))
    it = it.filter(pl.col("elapsed_ms").is_not_null() & pl.col("iteration").is_not_null()
                   & ~pl.col("validation").fill_null(False))
    if it.is_empty():
        return it
    return (it.lazy().sort("elapsed_ms", descending=True).unique("iteration", keep="first", maintain_order=True)
            .sort("iteration").collect(engine="in-memory"))     # one Polars call for the three steps


def steady(steps: pl.DataFrame) -> pl.DataFrame:
    """Steps after the warm-up (all of them when the run is too short to drop any)."""
    if steps.height <= WARMUP_STEPS + 2:
        return steps
    first = steps["iteration"].min()
    return steps.filter(pl.col("iteration") >= first + WARMUP_STEPS)


def median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def peak(ctx: Context) -> tuple[float | None, dict | None, str]:
    """(cluster dense BF16 peak in FLOP/s, the accelerator, how we know)."""
    acc, basis = accelerator(ctx.run, ctx.options.gpu)
    world = ctx.world_size
    if not acc or not acc.get("bf16_dense_tflops"):
        return None, acc, "the GPU model is unknown (give report --gpu)"
    if not world:
        return None, acc, "the world size is unknown"
    return world * acc["bf16_dense_tflops"] * 1e12, acc, basis


def checkpoint_bytes(m: Model) -> float | None:
    return m.total_params * CKPT_BYTES_PER_PARAM if m.total_params else None


def fmt_params(n: float) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"
