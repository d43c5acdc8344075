"""What the skew rules (P010, L002, L003) share: arrivals at collectives and the link a benchmark ran on.

Arrivals (one row per collective instance and rank: ``source``, ``coll``, ``rank``, ``node``,
``start_ns``) come from two inputs:

* ``collective_timing`` (``postmortem.analyzer.collective_timing``): the start of each rank's NCCL kernel
  of the same instance (nsys / Kineto);
* ``collectives`` rows of kind ``flight_recorder``: ``time_created`` of the entry with the same
  (process group, ``collective_seq_id``) on every rank, i.e. when the CPU enqueued it.

Times of one node share a clock; times of two nodes differ by the hosts' clock offset (NTP:
0.1-10 ms; ``node_clocks`` when it measured more). ``clock_uncertainty_ns`` is the offset the
rules must exceed before a lag across nodes counts.
"""

from __future__ import annotations

import polars as pl

from postmortem.rules.base import Context, with_columns

NTP_BOUND_NS = 10_000_000     # what NTP-synchronised hosts may differ by (0.1-10 ms): the default doubt


def arrivals(ctx: Context) -> pl.DataFrame:
    """``source``, ``coll`` (instance key), ``rank``, ``node``, ``start_ns`` (epoch ns), ``op``."""
    frames = []
    timing = ctx.table("collective_timing")
    if not timing.is_empty():
        frames.append(timing.filter(pl.col("rank").is_not_null() & pl.col("start").is_not_null()).select(
            source=pl.col("source"),
            coll=pl.concat_str([pl.col("coll_key"), pl.lit("#"), pl.col("coll_index").cast(pl.String)]),
            rank=pl.col("rank").cast(pl.Int64), start_ns=pl.col("start").dt.epoch("ns"), op=pl.col("op")))
    coll = ctx.table("collectives")
    if not coll.is_empty() and "time_created" in coll.columns:
        fr = coll.filter((pl.col("kind") == "flight_recorder") & pl.col("time_created").is_not_null()
                         & pl.col("rank").is_not_null() & pl.col("seq").is_not_null()
                         & ~pl.col("is_p2p").fill_null(False))
        if not fr.is_empty():
            pg = pl.coalesce(pl.col("pg_guid").cast(pl.String), pl.col("pg_id").cast(pl.String), pl.lit("?"))
            frames.append(fr.select(
                source=pl.lit("flight_recorder"),
                coll=pl.concat_str([pg, pl.lit("#"), pl.col("seq").cast(pl.String)]),
                rank=pl.col("rank").cast(pl.Int64), start_ns=pl.col("time_created").dt.epoch("ns"),
                op=pl.col("op").cast(pl.String)).unique(["source", "coll", "rank"], keep="first"))
    if not frames:
        return pl.DataFrame(schema={"source": pl.String, "coll": pl.String, "rank": pl.Int64, "start_ns": pl.Int64,
                                    "op": pl.String, "node": pl.String})
    df = pl.concat(frames, how="vertical_relaxed")
    nodes = ctx.ranks.select("rank", "node") if not ctx.ranks.is_empty() else pl.DataFrame(
        schema={"rank": pl.Int64, "node": pl.String})
    return df.join(nodes.unique("rank").with_columns(pl.col("rank").cast(pl.Int64)), on="rank", how="left")


def clock_uncertainty_ns(ctx: Context, nodes: list[str]) -> int:
    """The offset two of ``nodes`` may differ by: the NTP bound, or more when ``node_clocks``
    measured a larger offset between them."""
    clocks = ctx.table("node_clocks")
    worst = 0.0
    if not clocks.is_empty():
        offs = clocks.filter(pl.col("node").is_in(nodes) & pl.col("offset_s").is_not_null())["offset_s"].to_list()
        if len(offs) >= 1:
            worst = max(offs + [0.0]) - min(offs + [0.0])
    return max(NTP_BOUND_NS, int(worst * 1e9))


def link_rate(ctx: Context, acc: dict | None, hosts: list[str], gpus_per_host: int | None) -> tuple[float | None, str]:
    """Per-direction GB/s a collective over ``hosts`` can reach, and how that was priced: the GPU
    model's NVLink inside one node, the NIC line rate per GPU (``nic_ports``) across nodes."""
    if len(hosts) <= 1:
        if not acc or not acc.get("nvlink_unidir_gbs"):
            return None, "no NVLink rate for this GPU"
        return float(acc["nvlink_unidir_gbs"]), f"{acc['name']} {acc['nvlink']}: {acc['nvlink_unidir_gbs']} GB/s per direction"
    nics = ctx.table("nic_ports")
    if nics.is_empty() or "rate_gbps" not in nics.columns:
        return None, "NIC rate not in the inputs"
    nics = with_columns(nics, state=pl.String)  # a tool that prints no state: the port counts as active
    nics = nics.filter(pl.col("rate_gbps").is_not_null()
                       & pl.col("state").fill_null("Active").str.to_lowercase().str.contains("active"))
    here = nics.filter(pl.col("node").is_in(hosts))
    nics = here if not here.is_empty() else nics
    if nics.is_empty():
        return None, "NIC rate not in the inputs"
    rate = float(nics["rate_gbps"].median())
    per_node = float(nics.group_by("node").len()["len"].median() or 1)
    gpn = gpus_per_host or 8
    share = min(1.0, per_node / gpn)
    return round(rate / 8 * share, 1), f"{rate:g} Gb/s NIC, {per_node:g} per {gpn} GPUs: {rate / 8 * share:g} GB/s per GPU"
