"""Shared helpers of the memory rules (M001-M009): CUDA OOMs with their sizes, per-rank peaks
from the framework memory lines, the card's capacity from the lines or the hardware model, and
whether a sample was taken before the optimizer state existed."""

from __future__ import annotations

import re

import polars as pl

from postmortem.analyzer import hardware
from postmortem.analyzer.transports import accelerator

GIB = 1024.0
# Functions of a traceback that allocate optimizer state the first time a step reaches it.
_STATE_INIT = {"_init_group", "_init_state", "init_state", "_lazy_init_state", "initialize_optimizer_states",
               "_init_optimizer_state"}
_UNDERSTATING_LABEL = re.compile(r"before (?:initializing )?optimizer|after 1 iterations?\b", re.I)


def gib(mib: float | None) -> str:
    return "?" if mib is None else f"{mib / GIB:.1f} GB"


# The sizes the parsers read off an OOM message (``postmortem.parsers.torch_errors.oom_size_columns``).
_SIZE_COLUMNS = {"requested": "oom_requested_mib", "capacity": "oom_capacity_mib", "free": "oom_free_mib",
                 "allocated": "oom_allocated_mib", "unallocated": "oom_unallocated_mib"}


def oom_sizes(row: dict) -> dict:
    """requested/capacity/free/allocated/reserved-unallocated MiB of one OOM event (None if absent)."""
    return {size: row.get(column) for size, column in _SIZE_COLUMNS.items()}


def ooms(ctx) -> list[dict]:
    """One row per CUDA OOM message (torch's OutOfMemoryError text, NCCL's ``Cuda failure 'out of memory'``):
    rank, node, cuda_dev, pid, input_id, line_no, message and sizes."""
    ev = ctx.table("events")
    if ev.is_empty() or "kind" not in ev.columns:
        return []
    cols = set(ev.columns)
    oom = ev.filter((pl.col("kind") == "cuda_oom")
                    | (pl.lit("error_class" in cols) & (pl.col("error_class") == "out_of_memory")
                       if "error_class" in cols else pl.lit(False)))
    rows, seen = [], set()
    for r in oom.sort("input_id", "line_no").iter_rows(named=True):
        key = (r["input_id"], r["line_no"])
        near = any(k[0] == key[0] and abs(k[1] - key[1]) <= 4 for k in seen)
        if near:   # the same failure read twice (NCCL WARN + its calloc line, or the OOM kind + the WARN)
            for row in rows:
                if row["input_id"] == r["input_id"] and abs(row["line_no"] - r["line_no"]) <= 4:
                    extra = oom_sizes(r)
                    for k, v in extra.items():
                        if row["sizes"][k] is None and v is not None:
                            row["sizes"][k] = v
                    for k in ("cuda_dev", "pid", "rank"):
                        if row.get(k) is None and r.get(k) is not None:
                            row[k] = r[k]
            continue
        seen.add(key)
        text = " ".join(x for x in (r.get("message"), r.get("detail")) if x)
        rows.append({"rank": r.get("rank"), "node": r.get("node"), "cuda_dev": r.get("cuda_dev") if "cuda_dev" in cols
                     else None, "pid": r.get("pid") if "pid" in cols else None, "input_id": r["input_id"],
                     "line_no": r["line_no"], "message": text, "ts": r.get("ts"), "nccl": "NCCL" in text
                     or r.get("kind") == "nccl_warn", "sizes": oom_sizes(r)})
    return rows


def optimizer_init_frames(ctx, oom: dict) -> list[str]:
    """The traceback frames before the OOM that allocate optimizer state for the first time."""
    st = ctx.table("stacks")
    if st.is_empty() or "function" not in st.columns:
        return []
    near = st.filter((pl.col("input_id") == oom["input_id"]) & (pl.col("line_no") < oom["line_no"])
                     & (pl.col("line_no") >= oom["line_no"] - 80))
    if "source" in st.columns:
        near = near.filter(pl.col("source") == "traceback")
    return [f for f in near["function"].to_list() if f in _STATE_INIT]


def last_iteration(ctx, rank: int | None = None) -> int | None:
    it = ctx.table("iterations")
    if it.is_empty() or "iteration" not in it.columns:
        return None
    if "validation" in it.columns:
        it = it.filter(~pl.col("validation").fill_null(False))
    values = it["iteration"].drop_nulls()
    return int(values.max()) if len(values) else None


def capacity_mib(ctx) -> tuple[float | None, str]:
    """The card's memory: from the memory lines (OOM text, torchtitan %), else the hardware model."""
    mem = ctx.table("memory")
    if not mem.is_empty() and "capacity_mib" in mem.columns:
        caps = mem["capacity_mib"].drop_nulls()
        if len(caps):
            return float(caps.max()), "the framework's memory lines"
    acc, source = accelerator(ctx.run, ctx.options.gpu)
    if acc and acc.get("memory_gb"):
        return float(acc["memory_gb"]) * GIB, f"the hardware model ({acc['name']}, {source})"
    return None, "unknown"


def peaks(ctx) -> pl.DataFrame:
    """Per rank: peak allocated and reserved MiB over the memory samples (OOM messages excluded),
    the sample count, whether every sample may predate the optimizer state, and the peak line."""
    mem = ctx.table("memory")
    if mem.is_empty() or "rank" not in mem.columns:
        return pl.DataFrame()
    if "label" in mem.columns:
        mem = mem.filter(pl.col("label").fill_null("") != "cuda_oom")
    mem = mem.filter(pl.col("rank").is_not_null())
    if mem.is_empty():
        return pl.DataFrame()

    def c(name):
        return pl.col(name) if name in mem.columns else pl.lit(None, dtype=pl.Float64)

    label = c("label").cast(pl.String).fill_null("") if "label" in mem.columns else pl.lit("")
    iteration = pl.col("iteration") if "iteration" in mem.columns else pl.lit(None, dtype=pl.Int64)
    mem = mem.with_columns(
        _alloc=pl.max_horizontal(c("max_allocated_mib"), c("allocated_mib")),
        _res=pl.max_horizontal(c("max_reserved_mib"), c("reserved_mib")),
        _early=label.str.contains("(?i)" + _UNDERSTATING_LABEL.pattern) | (iteration <= 1))
    return (mem.sort("line_no").group_by("rank").agg(
        peak_alloc=pl.col("_alloc").max(), peak_reserved=pl.col("_res").max(), samples=pl.len(),
        all_early=pl.col("_early").fill_null(False).all(), node=pl.col("node").first(),
        input_id=pl.col("input_id").sort_by("_alloc").last(), line_no=pl.col("line_no").sort_by("_alloc").last())
        .sort("rank"))


def peak_mib(p: pl.DataFrame) -> float | None:
    if p.is_empty():
        return None
    value = p.select(pl.max_horizontal(pl.col("peak_alloc").max(), pl.col("peak_reserved").max())).item()
    return float(value) if value is not None else None


def target(name: str) -> dict | None:
    return hardware.find(name)
