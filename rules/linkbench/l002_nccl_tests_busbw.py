"""L002 nccl-tests-busbw: an nccl-tests run's large-message bus bandwidth is far below what its link carries.

What it detects
    Each nccl-tests run in the inputs (``bench_results``), judged on its large-message rows
    (64 MB and up: the "Avg bus bandwidth" footer averages over whatever size range was asked
    for, small sizes included, and is not used). Two checks: a *collapse*, where every size
    above the best one stays below 40% of that best busbw (e.g. 29 GB/s at 32 MB, 5 GB/s from
    64 MB on), which needs no hardware model; and a *shortfall* against the tier, where the best
    large-message busbw is below 30% of the link's unidirectional rate: NVLink of the GPU model
    for a test inside one node, the NIC line rate (``nic_ports``) per GPU for a test across
    nodes.

Why it matters
    nccl-tests is the baseline every training-time number is compared with. A run far below
    the link's rate means the fabric or the node (a down-trained NVLink, a NIC at a lower rate,
    a wrong transport, PCIe ACS, a misconfigured switch buffer) is broken before the job even
    starts; a collapse above one size points at the network (PFC/ECN, MTU, adaptive routing) or
    the proxy/GDR path used for large messages.

What to do
    Rerun the test inside one node and across two nodes (``all_reduce_perf -b 8M -e 4G -f 2 -g 1``)
    to localise it; check the NVLink state (``nvidia-smi nvlink -s``), the NIC rate (``ibstat``),
    ``NCCL_DEBUG=INFO`` transport lines (P2P/NVLink, NET/IB with GDRDMA), and for a collapse the
    switch counters (PFC pause, ECN marks) and ``NCCL_IB_QPS_PER_CONNECTION`` / ``NCCL_ALGO``.

Known false positives
    Links run at 40-90% of their nominal rate in practice (an H100 PCIe NVLink-bridge pair gives
    about 115 GB/s of 300): the 30% bar leaves room for that. A test that stops below 64 MB is not
    judged against the tier. A non-monotonic curve (NVLS or tree switching algorithm at a size,
    a dip then a climb) is not a collapse: the largest sizes must all stay low. Without the GPU
    model or the NIC rate in the inputs only the collapse check runs.
"""

from __future__ import annotations

from collections import Counter

import polars as pl

from postmortem.analyzer import hardware
from postmortem.parsers.base import groups_of
from postmortem.rules.perf import skew_model as sm
from postmortem.rules.base import Context, Finding, with_columns
from postmortem.rules.declare import Category, Rule, Severity

RULE = Rule(code="L002", name="nccl-tests-busbw", severity=Severity.WARNING, category=Category.PERF, since="0.1.0")

LARGE = 64 << 20
COLLAPSE = 0.4
SHORTFALL = 0.3


def check(ctx: Context) -> list[Finding]:
    res = ctx.table("bench_results")
    if res.is_empty():
        return []
    # A table without the in-place (or out-of-place) columns: the other one alone gives the bandwidth.
    res = with_columns(res, oop_busbw_gbs=pl.Float64, ip_busbw_gbs=pl.Float64, size_bytes=pl.Int64, run=pl.UInt32)
    res = res.with_columns(busbw=pl.max_horizontal(pl.col("oop_busbw_gbs"), pl.col("ip_busbw_gbs")))
    out = []
    for (input_id, run), rows in groups_of(res, "input_id", "run", maintain_order=True):
        rows = rows.filter(pl.col("busbw").is_not_null()).sort("size_bytes")
        if rows.height < 2:
            continue
        f = _collapse(ctx, rows) or _shortfall(ctx, rows, input_id)
        if f:
            out.append(f)
    return out


def _mb(n: int) -> str:
    return f"{n / 2**20:g} MB" if n < 2**30 else f"{n / 2**30:g} GB"


def _collapse(ctx: Context, rows: pl.DataFrame) -> Finding | None:
    best = rows.sort("busbw", descending=True).row(0, named=True)
    above = rows.filter(pl.col("size_bytes") > best["size_bytes"])
    if above.height < 2 or above["size_bytes"].max() < LARGE or best["busbw"] <= 0:
        return None
    if above["busbw"].max() >= COLLAPSE * best["busbw"]:
        return None
    worst = above.sort("busbw").row(0, named=True)
    first = above.row(0, named=True)
    med = above["busbw"].median()
    msg = (f"busbw peaks at {best['busbw']:g} GB/s at {_mb(best['size_bytes'])}, then falls to {first['busbw']:g} "
           f"GB/s at {_mb(first['size_bytes'])} and stays there (median {med:g} GB/s over {above.height} larger "
           f"sizes, {100 * med / best['busbw']:.0f}% of the peak): large messages take a slower path.")
    return RULE.finding(confidence=0.7, title=f"nccl-tests bandwidth collapses above {_mb(best['size_bytes'])}", message=msg,
                   nodes=_nodes(rows), evidence=_evidence(ctx, [best, first, worst], ["peak", "first size after the collapse", "lowest"]),
                   suggestion=("Check the network path large messages take: switch PFC/ECN counters, MTU, "
                               "NCCL_DEBUG=INFO transport lines (NET/IB ... GDRDMA); compare NCCL_PROTO=Simple and "
                               "NCCL_ALGO=Ring/Tree runs of all_reduce_perf -b 16M -e 1G -f 2."),
                   details={"peak_gbs": best["busbw"], "peak_size": best["size_bytes"], "after_median_gbs": med})


def _shortfall(ctx: Context, rows: pl.DataFrame, input_id: int) -> Finding | None:
    large = rows.filter(pl.col("size_bytes") >= LARGE)
    if large.is_empty():
        return None
    expected, basis = _expected(ctx, input_id)
    if not expected:
        return None
    best = large.sort("busbw", descending=True).row(0, named=True)
    if best["busbw"] >= SHORTFALL * expected:
        return None
    msg = (f"best large-message busbw {best['busbw']:g} GB/s (at {_mb(best['size_bytes'])}, {large.height} rows of "
           f"64 MB and up) is {100 * best['busbw'] / expected:.0f}% of the {expected:g} GB/s the link carries "
           f"({basis}); healthy links give 40-90%.")
    return RULE.finding(confidence=0.6, title=f"nccl-tests busbw {best['busbw']:g} GB/s, far below {expected:g} GB/s "
                   f"({basis.split(':')[0]})", message=msg, nodes=_nodes(rows), evidence=_evidence(ctx, [best], ["best large-message row"]),
                   suggestion=("Localise it: all_reduce_perf -b 64M -e 4G -f 2 -g 1 inside one node, then across "
                               "two; check nvidia-smi nvlink -s, ibstat rates and NCCL_DEBUG=INFO transports."),
                   details={"best_large_gbs": best["busbw"], "expected_gbs": expected, "basis": basis})


def _expected(ctx: Context, input_id: int) -> tuple[float | None, str]:
    gpus = ctx.table("gpus")
    names, hosts = [], []
    if not gpus.is_empty():
        mine = gpus.filter(pl.col("input_id") == input_id) if "input_id" in gpus.columns else gpus
        names = mine["name"].drop_nulls().to_list() if "name" in mine.columns else []
        hosts = sorted(set(mine["host"].drop_nulls().to_list())) if "host" in mine.columns else []
        if not names:
            names = gpus["name"].drop_nulls().to_list() if "name" in gpus.columns else []
    # the commonest GPU; of equally common ones the first listed (a set's order changes from run to run)
    acc = hardware.find(Counter(names).most_common(1)[0][0]) if names else None
    if not hosts:
        return None, "node count not in the nccl-tests output"
    return sm.link_rate(ctx, acc, hosts, max(1, len(names) // len(hosts)) if names else None)


def _nodes(rows: pl.DataFrame) -> list[str]:
    return sorted(set(rows["node"].drop_nulls().to_list())) if "node" in rows.columns else []


def _evidence(ctx: Context, picks: list[dict], notes: list[str]) -> list:
    ev, seen = [], set()
    for row, note in zip(picks, notes):
        key = (row["input_id"], row["line_no"])
        if row.get("line_no") is None or key in seen:
            continue
        seen.add(key)
        ev.append(ctx.evidence(row["input_id"], row["line_no"], f"{note}: {row['busbw']:g} GB/s"))
    return ev
