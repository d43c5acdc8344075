"""Node evidence joined to the run: which node each kernel/health row belongs to, which physical
GPU an Xid names, the scheduler's expected nodes, and per-node clocks.

Called from ``postmortem.analyzer.pipeline`` after ``nccl_model.build``. Produces (or replaces):

``node_events``   the kernel parser's rows plus ``node`` (``node_source``), ``gpu_index``,
                  ``cuda_dev``, ``uuid``/``serial`` (filled from the GPU join), ``global_rank``,
                  ``local_rank``, ``ts_utc``, ``ts_basis``, ``order_confidence``
``gpu_health``, ``nic_counters``   with ``node``
``gpu_identity``  one row per (node, PCI bus id): ``gpu_index`` (NVML index / nvidia-smi minor
                  number), ``cuda_dev``, ``uuid``, ``serial``, ``product``, ``global_rank``,
                  ``local_rank``, ``sources`` (which inputs named it: nvidia-smi, kernel, NCCL, ranks)
``job_nodes``     the scheduler's expected nodes with ``has_logs`` (any input line attributed to
                  the node) and ``ranks_seen``
``node_clocks``   see ``postmortem.analyzer.clocks``

Joins are explicit and keyed on the PCI address ``0000:2a:00.0`` (NCCL's ``busId 2a000``, the
Xid's ``PCI:0000:2a:00``, nvidia-smi's ``00000000:2A:00.0``) plus the node's short host name.
"""

from __future__ import annotations

import polars as pl

from postmortem.analyzer import clocks
from postmortem.analyzer.ranges import rank_ranges
from postmortem.parsers.base import among, collect_each

GPU_IDENTITY_SCHEMA = {"node": pl.String, "pci": pl.String, "gpu_index": pl.Int64, "cuda_dev": pl.Int64,
                       "uuid": pl.String, "serial": pl.String, "product": pl.String, "global_rank": pl.Int64,
                       "local_rank": pl.Int64, "sources": pl.String}


def _short(expr: pl.Expr) -> pl.Expr:
    return pl.when(expr.str.contains(r"^\d+\.\d+\.\d+\.\d+$")).then(expr).otherwise(expr.str.extract(r"^([^.]*)", 1))


def _get(tables: dict[str, pl.DataFrame], name: str) -> pl.DataFrame | None:
    frame = tables.get(name)
    return frame if frame is not None and not frame.is_empty() else None


def _known_hosts(tables: dict[str, pl.DataFrame], ranks: pl.DataFrame | None) -> set[str]:
    hosts: set[str] = set()
    if ranks is not None and not ranks.is_empty() and "node" in ranks.columns:
        hosts.update(h for h in ranks["node"].drop_nulls().to_list())
    frames = [frame for name in ("job_nodes", "nccl_members", "nccl_processes", "node_events")
              if (frame := _get(tables, name)) is not None]
    # every table's host columns in one Polars call
    named = collect_each([frame.lazy().select(_short(pl.col(col).cast(pl.String)).alias("host")).drop_nulls()
                          for frame in frames for col in ("node", "host") if col in frame.columns])
    for found in named:
        hosts.update(found["host"].to_list())
    return {h for h in hosts if h}


def _path_nodes(inputs: pl.DataFrame | None, hosts: set[str]) -> pl.DataFrame:
    """input_id -> a known host named by the input's path: a folder or the file's whole name,
    else a host the file name contains (the longest such; of equally long ones the first by
    name). Matched for all inputs at once: 31,000 inputs against 1,250 hosts took 2 s one input
    at a time."""
    empty = pl.DataFrame(schema={"input_id": pl.UInt32, "path_node": pl.String})
    if inputs is None or inputs.is_empty() or not hosts:
        return empty
    known = pl.Series(sorted(hosts), dtype=pl.String)
    parts = inputs.select(pl.col("input_id").cast(pl.UInt32), part=pl.col("path").str.split("/"))
    named = _longest(parts.explode("part").filter(pl.col("part").is_in(among(known))))
    rest = parts.join(named, on="input_id", how="anti").select(
        "input_id", part=pl.col("part").list.last().str.extract_many(among(known), overlapping=True))
    within = _longest(rest.explode("part").drop_nulls("part"))
    return pl.concat([named, within]).sort("input_id")


def _longest(matches: pl.DataFrame) -> pl.DataFrame:
    """Per input_id, the longest matched ``part`` (ties: the first by name) as ``path_node``."""
    return (matches.sort(pl.col("part").str.len_chars(), "part", descending=[True, False])
            .group_by("input_id", maintain_order=True).first()
            .select(pl.col("input_id").cast(pl.UInt32), path_node=pl.col("part")))


def _with_nodes(frame: pl.DataFrame, path_nodes: pl.DataFrame) -> pl.DataFrame:
    """node = the line's host (journal), the attributed node, a host named in the same input, or
    a host named by the input's path."""
    if "input_id" not in frame.columns:
        return frame
    host = _short(pl.col("host")) if "host" in frame.columns else pl.lit(None, dtype=pl.String)
    attr = pl.col("node").cast(pl.String) if "node" in frame.columns else pl.lit(None, dtype=pl.String)
    plan = frame.lazy().with_columns(_lh=host, _an=attr)     # one plan: a Polars call a step cost more
    per_input = plan.filter(pl.col("_lh").is_not_null()).group_by("input_id").agg(_ih=pl.col("_lh").mode().first())
    plan = plan.join(per_input, on="input_id", how="left").join(path_nodes.lazy(), on="input_id", how="left")
    node = pl.coalesce("_lh", "_an", "_ih", "path_node")
    source = (pl.when(pl.col("_lh").is_not_null()).then(pl.lit("host named by the line"))
              .when(pl.col("_an").is_not_null()).then(pl.lit("line attribution"))
              .when(pl.col("_ih").is_not_null()).then(pl.lit("host named by other lines of the input"))
              .when(pl.col("path_node").is_not_null()).then(pl.lit("host named by the input's path")))
    return plan.with_columns(node=node, node_source=source).drop("_lh", "_an", "_ih", "path_node").collect(engine="in-memory")


def gpu_identity(tables: dict[str, pl.DataFrame], ranks: pl.DataFrame | None) -> pl.DataFrame:
    parts = []
    health = _get(tables, "gpu_health")
    if health is not None and "node" in health.columns:
        parts.append(health.filter(pl.col("state") == "ok").select(
            "node", pci="bus_id", gpu_index="minor", uuid="uuid", serial="serial", product="product",
            _src=pl.lit("nvidia-smi")))
    events = _get(tables, "node_events")
    if events is not None and "node" in events.columns:
        ident = events.filter(pl.col("kind").is_in(["gpu_identity", "xid", "gpu_off_bus"]) & pl.col("pci").is_not_null())
        if not ident.is_empty():
            parts.append(ident.group_by("node", "pci").agg(uuid=pl.col("uuid").drop_nulls().first(),
                                                          serial=pl.col("serial").drop_nulls().first())
                         .with_columns(_src=pl.lit("kernel log")))
    members = _get(tables, "nccl_members")
    if members is not None:
        m = members.filter(pl.col("pci").is_not_null()).sort("nranks", descending=True)
        parts.append(m.group_by(_short(pl.col("host")).alias("node"), "pci").agg(
            cuda_dev=pl.col("cuda_dev").drop_nulls().first(), nvml=pl.col("nvml_dev").drop_nulls().first(),
            global_rank=pl.col("global_rank").drop_nulls().first()).with_columns(_src=pl.lit("NCCL busId")))
    if ranks is not None and not ranks.is_empty() and "bus_id" in ranks.columns:
        parts.append(ranks.filter(pl.col("bus_id").is_not_null() & pl.col("node").is_not_null()).select(
            "node", pci="bus_id", cuda_dev="cuda_dev", global_rank="rank", local_rank="local_rank",
            _src=pl.lit("rank map")))
    if not parts:
        return pl.DataFrame(schema=GPU_IDENTITY_SCHEMA)
    both = pl.concat(parts, how="diagonal_relaxed").filter(pl.col("node").is_not_null() & pl.col("pci").is_not_null())
    for c, t in {"gpu_index": pl.Int64, "nvml": pl.Int64, "cuda_dev": pl.Int64, "uuid": pl.String, "serial": pl.String,
                 "product": pl.String, "global_rank": pl.Int64, "local_rank": pl.Int64}.items():
        if c not in both.columns:
            both = both.with_columns(pl.lit(None, dtype=t).alias(c))
    out = both.group_by("node", "pci").agg(
        gpu_index=pl.coalesce(pl.col("nvml").drop_nulls().first(), pl.col("gpu_index").drop_nulls().first()),
        cuda_dev=pl.col("cuda_dev").drop_nulls().first(), uuid=pl.col("uuid").drop_nulls().first(),
        serial=pl.col("serial").drop_nulls().first(), product=pl.col("product").drop_nulls().first(),
        global_rank=pl.col("global_rank").drop_nulls().first(), local_rank=pl.col("local_rank").drop_nulls().first(),
        sources=pl.col("_src").unique().sort().str.join(", "),
    )
    return out.select([pl.col(c).cast(t) for c, t in GPU_IDENTITY_SCHEMA.items()]).sort("node", "pci")


def _nodes_seen(tables: dict[str, pl.DataFrame], ranks: pl.DataFrame | None) -> set[str]:
    # every table's distinct names first (a table can have a row per line, and a few nodes),
    # all in one query: two Polars calls per table were a thirtieth of a small run's calls
    names = [frame.lazy().select(pl.col("node").drop_nulls().unique()) for name, frame in tables.items()
             if name not in ("job_nodes", "job", "gpu_identity", "node_clocks") and frame is not None
             and frame.schema.get("node") == pl.String]
    seen: set[str] = set()
    if names:
        seen.update(pl.concat(names).unique().select(_short(pl.col("node"))).collect(engine="in-memory").to_series().drop_nulls().to_list())
    if ranks is not None and not ranks.is_empty():
        seen.update(ranks["node"].drop_nulls().to_list())
    return seen


def _job_nodes(job_nodes: pl.DataFrame | None, seen: set[str], ranks: pl.DataFrame | None) -> pl.DataFrame | None:
    """The scheduler's nodes of the job, each with whether any input is of it (``seen``: the
    short names of every node the tables name) and its ranks."""
    if job_nodes is None:
        return None
    counts = pl.DataFrame(schema={"node": pl.String, "ranks_seen": pl.Int64})
    per_node = {}
    if ranks is not None and not ranks.is_empty():
        # each node's count and ranks from one grouping
        grouped = ranks.drop_nulls(["node"]).group_by("node").agg(ranks_seen=pl.len().cast(pl.Int64), _ranks="rank")
        per_node = {node: rank_ranges(listed) for node, listed in zip(grouped["node"].to_list(), grouped["_ranks"].to_list())}
        counts = grouped[["node", "ranks_seen"]]
    jn = job_nodes.with_columns(_s=_short(pl.col("node")))
    jn = jn.join(counts.rename({"node": "_s"}), on="_s", how="left").with_columns(
        has_logs=pl.col("_s").is_in(sorted(seen)), ranks_seen=pl.col("ranks_seen").fill_null(0),
        ranks=pl.col("_s").replace_strict(per_node, default=None, return_dtype=pl.String))
    keep = ["input_id", "line_no", "job_id", "node", "node_index", "source", "parser", "attempt", "has_logs",
            "ranks_seen", "ranks"]
    return jn.select([c for c in keep if c in jn.columns])


def build(tables: dict[str, pl.DataFrame], ranks: pl.DataFrame | None = None,
          inputs: pl.DataFrame | None = None) -> dict[str, pl.DataFrame]:
    out: dict[str, pl.DataFrame] = {}
    hosts = _known_hosts(tables, ranks)
    path_nodes = _path_nodes(inputs, hosts)
    for name in ("node_events", "gpu_health", "nic_counters"):
        frame = _get(tables, name)
        if frame is not None:
            out[name] = _with_nodes(frame, path_nodes)
    merged = {**tables, **out}
    identity = gpu_identity(merged, ranks)
    out["gpu_identity"] = identity
    seen = _nodes_seen(merged, ranks)
    nodes = sorted(seen | hosts)
    node_clocks = clocks.estimate(merged, nodes)
    events = out.get("node_events")
    if events is not None:
        joined = events.join(identity.select("node", "pci", "gpu_index", "cuda_dev", "global_rank", "local_rank",
                                             _uuid="uuid", _serial="serial"), on=["node", "pci"], how="left")
        joined = joined.with_columns(uuid=pl.coalesce("uuid", "_uuid"), serial=pl.coalesce("serial", "_serial")).drop(
            "_uuid", "_serial")
        if "rank" in joined.columns:
            joined = joined.with_columns(rank=pl.coalesce(pl.col("rank"), pl.col("global_rank")))
        events, node_clocks = clocks.apply(joined, node_clocks)
        out["node_events"] = events.sort("input_id", "line_no")
    out["node_clocks"] = node_clocks
    jn = _job_nodes(_get(tables, "job_nodes"), seen, ranks)
    if jn is not None:
        out["job_nodes"] = jn
    return out
