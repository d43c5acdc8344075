"""Per-node environment, and which variables differ between nodes (``docs/formats/training-logs.md`` 9.2).

``build`` runs over all inputs after parsing and attribution and adds two tables (and gives
hardware-tool rows saved per node, ``hw/<host>/...``, the node their path names; ``hw_nodes``):

``env_nodes``  one row per (node, key, basis): the value a node's dump shows (several distinct values
               on one node -- per-rank dumps that disagree -- are joined with `` | ``), where the
               node name came from (``node_source``: the line's attributed node, a launcher host
               prefix, the dump's own ``HOSTNAME``/``SLURMD_NODENAME``, its section header, the
               ``srun -l`` task label, or the file name), ``source`` (``env`` or ``nccl.conf``:
               an input named ``*nccl.conf``; ``NCCL INFO``: NCCL's ``X set by environment to Y``
               lines, table ``nccl_env``), ``basis`` (``env dump`` for dumps and nccl.conf copies,
               ``NCCL INFO`` for the echoes: the two are compared separately, each over the nodes
               that have that kind of evidence), ``class`` and evidence (``input_id``,
               ``line_no``). A variable set in the environment wins over the same key in a
               ``nccl.conf`` copy of that node, as in NCCL.
``env_diff``   one row per key and basis, over the nodes that have evidence of that basis:
               ``class`` (``must_match``, ``should_match``, ``per_node``, ``per_rank``,
               ``other``), ``n_nodes`` (nodes with evidence of that basis),
               ``n_set`` (nodes that set it), ``n_values`` (distinct values, an unset variable
               counting as one value ``<unset>``), ``differs``, ``values`` (``VALUE @ node,node;
               ...``, most common first) and the first line that shows the minority value.

"Which must-match variables differ between nodes":
``SELECT key, basis, values FROM env_diff WHERE class = 'must_match' AND differs``.

The classes follow the reference table: the NCCL algorithm/protocol/sizing/transport-selection
knobs, PyTorch's error-handling switches and the rendezvous variables must match;
``NCCL_SOCKET_IFNAME``/``NCCL_IB_HCA`` may differ per node; ``CUDA_VISIBLE_DEVICES``, ranks and
host names differ by design; every other ``NCCL_*``/``TORCH_NCCL_*`` and the allocator,
TransformerEngine, OpenMP, UCX and libfabric knobs should match.
"""

from __future__ import annotations

import polars as pl

from postmortem.parsers.base import collect_each, groups_of

MUST_MATCH = {
    "NCCL_ALGO", "NCCL_PROTO", "NCCL_BUFFSIZE", "NCCL_NTHREADS", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS",
    "NCCL_NCHANNELS", "NCCL_MIN_NRINGS", "NCCL_MAX_NRINGS", "NCCL_LL_THRESHOLD", "NCCL_LL128_THRESHOLD",
    "NCCL_TREE_THRESHOLD", "NCCL_P2P_NET_CHUNKSIZE", "NCCL_NET_OVERHEAD", "NCCL_IB_DISABLE", "NCCL_NET",
    "NCCL_NET_PLUGIN", "NCCL_CROSS_NIC", "NCCL_COLLNET_ENABLE", "NCCL_NVLS_ENABLE", "NCCL_PXN_DISABLE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_BLOCKING_WAIT",
    "NCCL_BLOCKING_WAIT", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NNODES",
}
PER_NODE = {"NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_DEBUG_FILE", "GLOO_SOCKET_IFNAME", "NCCL_TOPO_FILE",
            "NCCL_TOPO_DUMP_FILE"}
PER_RANK = {"CUDA_VISIBLE_DEVICES", "RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "ROLE_RANK",
            "SLURM_NODEID", "SLURM_PROCID", "SLURM_LOCALID", "SLURMD_NODENAME", "SLURM_TOPOLOGY_ADDR",
            "HOSTNAME", "HOST", "PWD", "OLDPWD", "_", "SHLVL", "SLURM_TASK_PID", "SLURM_STEP_NODELIST",
            "SLURM_GTIDS", "SLURM_LAUNCH_NODE_IPADDR", "SLURM_SRUN_COMM_HOST", "SSH_CLIENT", "SSH_CONNECTION",
            "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE", "GROUP_WORLD_SIZE", "LOCAL_WORLD_SIZE"}
SHOULD_PREFIXES = ("NCCL_", "TORCH_NCCL_", "NVTE_", "UCX_", "FI_")
SHOULD_MATCH = {"TORCH_DISTRIBUTED_DEBUG", "CUDA_DEVICE_MAX_CONNECTIONS", "PYTORCH_CUDA_ALLOC_CONF",
                "OMP_NUM_THREADS", "TORCH_CPP_LOG_LEVEL", "CUDA_LAUNCH_BLOCKING", "CUDA_MODULE_LOADING",
                "TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_ON_TIMEOUT"}
_HOST_KEYS = ["SLURMD_NODENAME", "HOSTNAME", "SLURM_TOPOLOGY_ADDR", "HOST"]

ENV_NODES_SCHEMA = {"node": pl.String, "node_source": pl.String, "key": pl.String, "value": pl.String,
                    "basis": pl.String, "source": pl.String, "class": pl.String, "input_id": pl.UInt32, "line_no": pl.UInt32}
ENV_DIFF_SCHEMA = {"key": pl.String, "basis": pl.String, "class": pl.String, "n_nodes": pl.UInt32, "n_set": pl.UInt32,
                   "n_values": pl.UInt32, "differs": pl.Boolean, "values": pl.String,
                   "input_id": pl.UInt32, "line_no": pl.UInt32}


def classify(key: pl.Expr) -> pl.Expr:
    return (pl.when(key.is_in(list(MUST_MATCH))).then(pl.lit("must_match"))
            .when(key.is_in(list(PER_NODE))).then(pl.lit("per_node"))
            .when(key.is_in(list(PER_RANK)) | key.str.starts_with("SLURM_STEP")).then(pl.lit("per_rank"))
            .when(key.is_in(list(SHOULD_MATCH)) | pl.any_horizontal([key.str.starts_with(p) for p in SHOULD_PREFIXES]))
            .then(pl.lit("should_match"))
            .otherwise(pl.lit("other")))


def build(tables: dict[str, pl.DataFrame], lines: pl.DataFrame | None = None,
          inputs: pl.DataFrame | None = None) -> dict[str, pl.DataFrame]:
    env = tables.get("env")
    empty = {"env_nodes": pl.DataFrame(schema=ENV_NODES_SCHEMA), "env_diff": pl.DataFrame(schema=ENV_DIFF_SCHEMA)}
    named = [frame.lazy().select(pl.col("node").unique()) for frame in tables.values()
             if "node" in frame.columns and frame.schema["node"] == pl.String]
    known = {n for found in collect_each(named) for n in found["node"].to_list() if n}   # one call
    parts = []
    if env is not None and not env.is_empty() and "key" in env.columns:
        parts.append(env_nodes(env, lines, inputs))
    echoes = nccl_echo_nodes(tables.get("nccl_env"))
    if not echoes.is_empty():
        parts.append(echoes)
    if not parts:
        return {**empty, **hw_nodes(tables, known, inputs)}
    nodes = pl.concat(parts).sort("basis", "node", "key")
    known.update(n for n in nodes["node"].unique().to_list() if n and n != "?")
    diff = pl.concat([env_diff(part) for _, part in groups_of(nodes, "basis", maintain_order=True)]).sort("basis", "class", "key")
    return {"env_nodes": nodes, "env_diff": diff, **hw_nodes(tables, known, inputs)}


def nccl_echo_nodes(nccl_env: pl.DataFrame | None) -> pl.DataFrame:
    """NCCL's ``X set by environment to Y`` INFO lines (``nccl_env``) per node: basis ``NCCL INFO``.
    Only nodes that printed such lines take part in that basis's comparison."""
    if nccl_env is None or nccl_env.is_empty() or not {"key", "value", "node"} <= set(nccl_env.columns):
        return pl.DataFrame(schema=ENV_NODES_SCHEMA)
    df = nccl_env.lazy().filter(pl.col("node").is_not_null() & pl.col("key").is_not_null())
    out = df.sort("input_id", "line_no").group_by(["node", "key"], maintain_order=True).agg(
        node_source=pl.lit("NCCL line prefix"),
        value=pl.col("value").fill_null("").unique(maintain_order=True).sort().str.join(" | "),
        input_id=pl.col("input_id").first(), line_no=pl.col("line_no").first(),
    ).with_columns(basis=pl.lit("NCCL INFO"), source=pl.lit("NCCL INFO"), **{"class": classify(pl.col("key"))})
    return out.select([pl.col(c).cast(t) for c, t in ENV_NODES_SCHEMA.items()]).collect(engine="in-memory")


HW_TABLES = ("topology", "gpus", "gpu_query", "nic_ports", "ib_links", "bench_results", "bench_runs",
             "packages", "job_config", "cuda_bandwidth", "p2p_matrix", "perftest_results", "perftest_params")


def hw_nodes(tables: dict[str, pl.DataFrame], known: set[str], inputs: pl.DataFrame | None) -> dict[str, pl.DataFrame]:
    """Tool output saved per node (``hw/<host>/nvidia-smi-topo.txt``, ``<host>.ibstat``): where a row
    has no attributed node, a path component (folder, or the file name up to its first dot or
    underscore) that names a known node gives it (``node_source`` = ``file path``); rows with a
    ``host`` column (nccl-tests' device list) take a known node from it (``host column``)."""
    if inputs is None or inputs.is_empty() or not known:
        return {}
    parts = inputs.select(pl.col("input_id").cast(pl.UInt32), part=pl.col("path").str.split("/")).explode("part")
    parts = parts.with_columns(part=pl.col("part").str.replace(r"[._].*$", "")).filter(pl.col("part").is_in(list(known)))
    hint = parts.group_by("input_id").agg(_path_node=pl.col("part").last())
    out = {}
    hint = hint.lazy()
    for name in HW_TABLES:
        frame = tables.get(name)
        if frame is None or frame.is_empty() or "input_id" not in frame.columns:
            continue
        have = set(frame.columns)
        frame = frame.lazy().join(hint, on="input_id", how="left")
        if "node" not in have:
            frame = frame.with_columns(node=pl.lit(None, dtype=pl.String), node_source=pl.lit(None, dtype=pl.String))
            have |= {"node", "node_source"}
        if "node_source" not in have:
            frame = frame.with_columns(node_source=pl.when(pl.col("node").is_not_null()).then(pl.lit("attributed")))
        frame = frame.with_columns(
            node_source=pl.when(pl.col("node").is_null() & pl.col("_path_node").is_not_null()).then(pl.lit("file path"))
            .otherwise(pl.col("node_source")),
            node=pl.coalesce("node", "_path_node"),
        ).drop("_path_node")
        if "host" in have and tables[name].schema["host"] == pl.String:
            # nccl-tests' device lines name the host of every rank
            host = pl.col("host").str.extract(r"^([^.]+)", 1)
            named = pl.col("node").is_null() & host.is_in(list(known))
            frame = frame.with_columns(node_source=pl.when(named).then(pl.lit("host column")).otherwise(pl.col("node_source")),
                                       node=pl.when(named).then(host).otherwise(pl.col("node")))
        out[name] = frame
    return dict(zip(out, collect_each(list(out.values()))))    # every table in one call


def env_nodes(env: pl.DataFrame, lines: pl.DataFrame | None, inputs: pl.DataFrame | None) -> pl.DataFrame:
    df = env.select(
        "input_id", "line_no", "key", "value",
        section=pl.col("section") if "section" in env.columns else pl.lit(None, dtype=pl.String),
        attributed=pl.col("node") if "node" in env.columns else pl.lit(None, dtype=pl.String),
    ).with_columns(pl.col("input_id").cast(pl.UInt32), pl.col("line_no").cast(pl.UInt32))
    if lines is not None and not lines.is_empty() and {"srun_task", "host_tag"} <= set(lines.columns):
        # the lines of the dumps' inputs alone: a join with all of them built a table of every
        # line (the 10,000-rank run's 1.6 M: 0.4 s)
        own = lines.lazy().filter(pl.col("input_id").cast(pl.UInt32).is_in(df["input_id"].unique().implode()))
        df = df.join(own.select(pl.col("input_id").cast(pl.UInt32), pl.col("line_no").cast(pl.UInt32),
                                "srun_task", "host_tag").collect(engine="in-memory"), on=["input_id", "line_no"], how="left")
    else:
        df = df.with_columns(srun_task=pl.lit(None, dtype=pl.Int32), host_tag=pl.lit(None, dtype=pl.String))
    if inputs is not None and not inputs.is_empty():
        df = df.join(inputs.select(pl.col("input_id").cast(pl.UInt32), "path"), on="input_id", how="left")
    else:
        df = df.with_columns(path=pl.lit(None, dtype=pl.String))
    name = pl.col("path").str.replace(r"^.*/", "")
    conf = name.str.contains(r"nccl\.conf$")
    stem = pl.when(conf).then(
        pl.coalesce(name.str.extract(r"^(.+?)[._-]+\.?nccl\.conf$", 1),
                    pl.col("path").str.extract(r"([^/]+)/(?:etc/|\.)?[^/]*nccl\.conf$", 1)))\
        .otherwise(name.str.replace(r"\.(?:env|txt|log|out|dump)$", "").str.replace(r"^env[._-]", ""))
    group = ["input_id", "section", "srun_task", "host_tag"]
    host_value = (pl.when(pl.col("key").is_in(_HOST_KEYS)).then(pl.col("value").str.extract(r"^([^.\s]+)", 1)))
    df = df.with_columns(
        _hostvar=host_value.sort_by(pl.col("key").replace_strict({k: i for i, k in enumerate(_HOST_KEYS)}, default=99))
        .drop_nulls().first().over(group),
        _stem=stem, source=pl.when(conf).then(pl.lit("nccl.conf")).otherwise(pl.lit("env")),
    )
    section = pl.col("section").str.replace(r"^(?:env[._-])", "").str.replace(r"\.(?:env|txt)$", "")
    task = pl.concat_str([pl.lit("task "), pl.col("srun_task").cast(pl.String)])
    candidates = [("attributed", "attributed node"), ("_confnode", "nccl.conf path"), ("host_tag", "launcher host prefix"),
                  ("_hostvar", "HOSTNAME in the dump"), ("_section", "section header"),
                  ("_task", "srun task label"), ("_stem", "file name")]
    df = df.with_columns(_section=section, _task=task,
                         _confnode=pl.when(pl.col("source") == "nccl.conf").then(pl.col("_stem")))
    df = df.with_columns(
        node=pl.coalesce([pl.col(c) for c, _ in candidates]),
        node_source=pl.coalesce([pl.when(pl.col(c).is_not_null()).then(pl.lit(why)) for c, why in candidates]),
    ).with_columns(node=pl.col("node").fill_null("?"))
    # One value per (node, key): the environment wins over nccl.conf; per-rank disagreement joined.
    df = df.with_columns(_prio=pl.when(pl.col("source") == "env").then(0).otherwise(1))
    df = df.filter(pl.col("_prio") == pl.col("_prio").min().over(["node", "key"]))
    out = df.sort("input_id", "line_no").group_by(["node", "key"], maintain_order=True).agg(
        node_source=pl.col("node_source").first(),
        value=pl.col("value").fill_null("").unique(maintain_order=True).sort().str.join(" | "),
        source=pl.col("source").first(), input_id=pl.col("input_id").first(), line_no=pl.col("line_no").first(),
    )
    out = out.with_columns(basis=pl.lit("env dump"), **{"class": classify(pl.col("key"))})
    return out.select([pl.col(c).cast(t) for c, t in ENV_NODES_SCHEMA.items()]).sort("node", "key")


def env_diff(nodes: pl.DataFrame) -> pl.DataFrame:
    if nodes.is_empty():
        return pl.DataFrame(schema=ENV_DIFF_SCHEMA)
    n_nodes = nodes["node"].n_unique()
    # one plan, run in one call (a dozen eager steps cost more than their work)
    # Sorted first: which node's line is a value's evidence must not depend on row order.
    nodes = nodes.lazy().sort("node", "key", "input_id", "line_no")
    all_nodes = nodes.select("node").unique(maintain_order=True)
    keys = nodes.select("key", "basis", "class").unique("key", keep="first", maintain_order=True)
    grid = keys.join(all_nodes, how="cross").join(
        nodes.select("node", "key", "value", "input_id", "line_no"), on=["node", "key"], how="left").sort("key", "node")
    grid = grid.with_columns(_v=pl.col("value").fill_null("<unset>"))
    per_value = grid.group_by(["key", "_v"], maintain_order=True).agg(
        n=pl.len(), nodes=pl.col("node").sort().str.join(","),
        input_id=pl.col("input_id").drop_nulls().first(), line_no=pl.col("line_no").drop_nulls().first(),
    ).sort(["key", "n", "_v"], descending=[False, True, False])
    summary = per_value.group_by("key", maintain_order=True).agg(
        n_values=pl.len(),
        values=pl.concat_str([pl.col("_v"), pl.lit(" @ "), pl.col("nodes")]).str.join("; "),
        # Evidence: the first line of the least common value (the odd one out), else the first.
        input_id=pl.col("input_id").drop_nulls().last(), line_no=pl.col("line_no").drop_nulls().last(),
    )
    n_set = grid.group_by("key").agg(n_set=pl.col("value").is_not_null().sum())
    out = keys.join(summary, on="key").join(n_set, on="key").with_columns(
        n_nodes=pl.lit(n_nodes), differs=pl.col("n_values") > 1)
    return out.select([pl.col(c).cast(t) for c, t in ENV_DIFF_SCHEMA.items()]).sort("class", "key").collect(
        engine="in-memory")
