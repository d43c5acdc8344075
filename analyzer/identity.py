"""Who wrote each line: global rank, node, pid and attempt, each with where it came from.

Launchers and libraries print different rank numbers (``formats/training-logs.md`` section
0 item 6, ``formats/pytorch-failures.md`` section 1): c10d's ``[rankN]:`` is the global
rank, torchrun's ``[defaultN]:`` and ``attempt_N/<n>/`` are local ranks, NCCL's ``rank`` is
the communicator's (global only for the world communicator), c10d's ``Rank r`` inside a PG
prefix is the PG rank (global only for PG 0), and an srun label is a task id whose meaning
depends on ``--ntasks-per-node``. Every attribution here carries a source and one of three
confidences:

``certain``  the log states the global rank (``[rankN]:``, the world communicator's init
             line for this pid, torchrun's failure table, a PG-0 rank)
``derived``  a launcher label read under its usual meaning (srun task id = global rank
             when there is one task per GPU, mpirun's rank)
``guessed``  inferred from file layout or order; rules never blame a rank on this basis
"""

from __future__ import annotations

import polars as pl

from analyzer.discover import path_hints
from parsers.nccl import bus_id_to_pci

CONFIDENCE_ORDER = {"certain": 0, "derived": 1, "guessed": 2}


def _world_size(tables: dict[str, pl.DataFrame]) -> int | None:
    comms = tables.get("nccl_comms")
    sizes = []
    if comms is not None and not comms.is_empty():
        sizes.append(comms["nranks"].max())
    exits = tables.get("exits")
    if exits is not None and not exits.is_empty() and exits["rank"].max() is not None:
        sizes.append(exits["rank"].max() + 1)
    settings = tables.get("settings")
    if settings is not None and not settings.is_empty():
        ws = settings.filter(pl.col("key") == "world_size")["value"].cast(pl.Int64, strict=False).drop_nulls()
        if len(ws):
            return int(ws.max())
    sizes = [s for s in sizes if s is not None]
    return int(max(sizes)) if sizes else None


def _process_map(tables: dict[str, pl.DataFrame], world: int | None) -> pl.DataFrame:
    """(host, pid) -> global rank from the world communicator's init lines and torchrun's table."""
    parts = []
    comms = tables.get("nccl_comms")
    if comms is not None and not comms.is_empty() and world:
        init = comms.filter(pl.col("nranks") == world, pl.col("phase").str.starts_with("Init"))
        parts.append(init.select(
            "host", "pid", pl.col("rank").alias("p_rank"), pl.col("cuda_dev").alias("p_cuda_dev"),
            pl.col("bus_id").alias("p_bus_id"), p_source=pl.lit("NCCL world communicator init line"),
        ))
    exits = tables.get("exits")
    if exits is not None and not exits.is_empty():
        parts.append(exits.drop_nulls(["pid", "rank"]).select(
            "host", "pid", pl.col("rank").alias("p_rank"), p_cuda_dev=pl.lit(None, dtype=pl.Int64),
            p_bus_id=pl.lit(None, dtype=pl.String), p_source=pl.lit("torchrun failure summary"),
        ))
    if not parts:
        return pl.DataFrame(schema={"host": pl.String, "pid": pl.Int64, "p_rank": pl.Int64,
                                    "p_cuda_dev": pl.Int64, "p_bus_id": pl.String, "p_source": pl.String})
    both = pl.concat(parts, how="diagonal_relaxed")
    # Hostnames may be FQDN in one place and short in another: key on the short name.
    return both.with_columns(host=_short(pl.col("host"))).unique(["host", "pid"], keep="first", maintain_order=True)


def _short(host: pl.Expr) -> pl.Expr:
    return pl.when(host.str.contains(r"^\d+\.\d+\.\d+\.\d+$")).then(host).otherwise(host.str.extract(r"^([^.]*)", 1))


def _pg0_rows(tables: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """PG ranks of c10d rows. ``pg0_rank``: the prefix names PG 0 / default_pg, so the PG rank
    is the global rank. ``pgx_rank``: a bare ``[Rank N]`` (<= 2.1, no PG named) -- the default
    group is only assumed, so it can only ever give a guessed global rank."""
    parts = []
    for name in ("progress", "collectives", "events"):
        t = tables.get(name)
        if t is None or t.is_empty() or "pg_rank" not in t.columns:
            continue
        pg0 = ((pl.col("pg_id") == 0) | (pl.col("pg_desc") == "default_pg")).fill_null(False)
        unnamed = pl.col("pg_id").is_null() & pl.col("pg_desc").is_null() & pl.col("pg_guid").is_null()
        parts.append(t.filter(pl.col("pg_rank").is_not_null() & (pg0 | unnamed)).select(
            "input_id", "line_no",
            pg0_rank=pl.when(pg0).then(pl.col("pg_rank")),
            pgx_rank=pl.when(unnamed).then(pl.col("pg_rank"))))
    if not parts:
        return pl.DataFrame(schema={"input_id": pl.UInt32, "line_no": pl.UInt32, "pg0_rank": pl.Int64,
                                    "pgx_rank": pl.Int64})
    return pl.concat(parts).unique(["input_id", "line_no"], keep="first")


def _titan_inputs(lines: pl.DataFrame) -> list[int]:
    """torchtitan's launcher uses the role ``rank``, so its ``[rankN]:`` is a local rank."""
    return lines.filter(pl.col("text").str.contains("[titan]", literal=True))["input_id"].unique().to_list()


def resolve(lines: pl.DataFrame, tables: dict[str, pl.DataFrame], inputs: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, dict]:
    """Annotate every line with rank/node/pid/attempt (+ sources); build the ``ranks`` table.
    ``lines`` may carry ``_w``, the number of lines a row stands for (``analyzer.bulk``)."""
    lines = lines.with_columns(_w=pl.col("_w").fill_null(1) if "_w" in lines.columns else pl.lit(1, dtype=pl.UInt32))
    world = _world_size(tables)
    procs = _process_map(tables, world)
    nccl = tables.get("nccl_lines", pl.DataFrame(schema={"input_id": pl.UInt32, "line_no": pl.UInt32,
                                                          "host": pl.String, "pid": pl.Int64, "cuda_dev": pl.Int64}))
    df = lines.join(nccl.select("input_id", "line_no", pl.col("host").alias("nccl_host"), pl.col("pid").alias("nccl_pid"),
                                pl.col("cuda_dev").alias("nccl_dev")),
                    on=["input_id", "line_no"], how="left")
    df = df.with_columns(nccl_host=_short(pl.col("nccl_host")))
    df = df.join(procs, left_on=["nccl_host", "nccl_pid"], right_on=["host", "pid"], how="left")
    df = df.join(_pg0_rows(tables), on=["input_id", "line_no"], how="left")
    titan = _titan_inputs(lines)
    is_titan = pl.col("input_id").is_in(titan) if titan else pl.lit(False)
    # srun label + torchrun role prefix on the same stream: one torchrun per node, so the
    # srun label is a node index, not a rank.
    # So is a labelled stream that carries torchrun's own agent lines (srun started the agents).
    per_node_srun = (lines.filter(pl.col("srun_task").is_not_null() & pl.col("local_rank").is_not_null())
                     ["input_id"].unique().to_list())
    agent = tables.get("agent")
    if agent is not None and not agent.is_empty():
        labelled = set(lines.filter(pl.col("srun_task").is_not_null())["input_id"].unique().to_list())
        per_node_srun = sorted(set(per_node_srun) | (labelled & set(agent["input_id"].unique().to_list())))
    srun_is_rank = pl.col("srun_task").is_not_null() & ~pl.col("input_id").is_in(per_node_srun)

    candidates = [
        (pl.col("rank_tag").is_not_null() & ~is_titan, pl.col("rank_tag"), "c10d [rankN]: prefix", "certain"),
        (pl.col("p_rank").is_not_null(), pl.col("p_rank"), pl.col("p_source"), "certain"),
        (pl.col("pg0_rank").is_not_null(), pl.col("pg0_rank"), "PG 0 rank in the c10d prefix", "certain"),
        (pl.col("mpi_rank").is_not_null(), pl.col("mpi_rank"), "mpirun --tag-output rank", "derived"),
        (srun_is_rank, pl.col("srun_task"), "srun --label task id (one task per GPU)", "derived"),
    ]
    rank, source, conf = pl.lit(None, dtype=pl.Int64), pl.lit(None, dtype=pl.String), pl.lit(None, dtype=pl.String)
    for cond, value, src, level in reversed(candidates):
        src_expr = src if isinstance(src, pl.Expr) else pl.lit(src)
        rank = pl.when(cond).then(value.cast(pl.Int64)).otherwise(rank)
        source = pl.when(cond).then(src_expr).otherwise(source)
        conf = pl.when(cond).then(pl.lit(level)).otherwise(conf)
    df = df.with_columns(rank=rank, rank_source=source, rank_confidence=conf)
    df = _propagate_streams(df)
    # what each input's path says (torchrun's attempt_N/<local_rank>/), read once for both uses
    hints = {input_id: path_hints(path) for input_id, path in inputs.select("input_id", "path").iter_rows()}
    df = _path_guess(df, hints, world)
    unnamed = pl.col("rank").is_null() & pl.col("pgx_rank").is_not_null()
    df = df.with_columns(
        rank=pl.when(unnamed).then(pl.col("pgx_rank")).otherwise(pl.col("rank")),
        rank_source=pl.when(unnamed).then(pl.lit("[Rank N] of an unnamed process group, assumed to be the default group"))
        .otherwise(pl.col("rank_source")),
        rank_confidence=pl.when(unnamed).then(pl.lit("guessed")).otherwise(pl.col("rank_confidence")),
    )
    df = _nodes(df, tables, inputs)
    df = _attempts(df, tables, hints)
    ranks = _ranks_table(df, procs, tables)
    info = {"world_size": world}
    keep = ["input_id", "line_no", "rank", "rank_source", "rank_confidence", "node", "node_source",
            "pid", "attempt", "attempt_source"]
    return df.select(keep), ranks, info


def _weighted_mode(df: pl.DataFrame, by: str, value: pl.Expr, name: str) -> pl.DataFrame:
    """Per ``by``: the value most lines have (a row counts ``_w`` lines: the first line of a run
    of COLL trace lines stands for the run, ``analyzer.bulk``); a tie goes to the smallest."""
    rows = df.select(by, _v=value, _n=pl.col("_w")).drop_nulls("_v")
    return (rows.group_by(by, "_v").agg(_n=pl.col("_n").sum())
            .sort([by, "_n", "_v"], descending=[False, True, False])
            .group_by(by, maintain_order=True).agg(pl.col("_v").first().alias(name)))


def _stream_key() -> list[pl.Expr]:
    return [pl.col(c) for c in ("input_id", "srun_task", "mpi_rank", "local_rank", "host_tag", "ray_pid")]


def _propagate_streams(df: pl.DataFrame) -> pl.DataFrame:
    """A stream (one file, or one launcher tag inside a combined file) whose attributed lines
    all name one rank gives that rank to its other lines."""
    key = ["input_id", "srun_task", "mpi_rank", "local_rank", "host_tag", "ray_pid"]
    known = df.filter(pl.col("rank").is_not_null())
    streams = known.group_by(key).agg(
        n=pl.col("rank").n_unique(),
        s_rank=pl.col("rank").first(),
        s_conf=pl.col("rank_confidence").sort_by(pl.col("rank_confidence").replace_strict(CONFIDENCE_ORDER, default=9)).first(),
        s_source=pl.col("rank_source").first(),
        s_pid=pl.col("nccl_pid").drop_nulls().first(),
        s_pids=pl.col("nccl_pid").drop_nulls().n_unique(),
    ).filter(pl.col("n") == 1)
    df = df.join(streams.drop("n"), on=key, how="left", nulls_equal=True)
    fill = pl.col("rank").is_null() & pl.col("s_rank").is_not_null()
    return df.with_columns(
        rank=pl.when(fill).then(pl.col("s_rank")).otherwise(pl.col("rank")),
        rank_source=pl.when(fill).then(pl.concat_str([pl.lit("same stream as lines with "), pl.col("s_source")]))
        .otherwise(pl.col("rank_source")),
        rank_confidence=pl.when(fill).then(pl.col("s_conf")).otherwise(pl.col("rank_confidence")),
        pid=pl.coalesce(pl.col("nccl_pid"), pl.when(pl.col("s_pids") == 1).then(pl.col("s_pid"))),
    ).drop("s_rank", "s_conf", "s_source", "s_pid", "s_pids")


def _path_guess(df: pl.DataFrame, hints_of: dict[int, dict], world: int | None) -> pl.DataFrame:
    """torchrun log dirs give a local rank; node order from the folder names is only a guess."""
    rows = []
    for input_id, hints in hints_of.items():
        if "local_rank" in hints:
            # torchrun writes <log_dir>/<run_id>_<random>/attempt_N/<local_rank>/: one folder per agent
            # (per node), so everything above attempt_N tells the nodes apart.
            rows.append({"input_id": input_id, "h_local": hints["local_rank"],
                         "h_node_dir": "/".join(hints["dirs"][:-2])})
    if not rows:
        return df.with_columns(h_local=pl.lit(None, dtype=pl.Int64))
    hints = pl.DataFrame(rows, schema={"input_id": pl.UInt32, "h_local": pl.Int64, "h_node_dir": pl.String})
    dirs = sorted(hints["h_node_dir"].unique().to_list())
    per_node = int(hints["h_local"].max()) + 1
    hints = hints.with_columns(h_guess=pl.col("h_node_dir").replace_strict({d: i for i, d in enumerate(dirs)}) * per_node + pl.col("h_local"))
    df = df.join(hints, on="input_id", how="left")
    guess = pl.col("rank").is_null() & pl.col("h_guess").is_not_null() & pl.col("srun_task").is_null()
    return df.with_columns(
        rank=pl.when(guess).then(pl.col("h_guess")).otherwise(pl.col("rank")),
        rank_source=pl.when(guess).then(pl.lit("guessed from folder order x local rank in the torchrun log path"))
        .otherwise(pl.col("rank_source")),
        rank_confidence=pl.when(guess).then(pl.lit("guessed")).otherwise(pl.col("rank_confidence")),
    ).drop("h_guess", "h_node_dir")


def _nodes(df: pl.DataFrame, tables: dict[str, pl.DataFrame], inputs: pl.DataFrame) -> pl.DataFrame:
    """Node per line: NCCL's host, a host tag, the stream's NCCL host, or the rank's host."""
    key = ["input_id", "srun_task", "mpi_rank", "local_rank", "host_tag", "ray_pid"]
    stream_host = df.filter(pl.col("nccl_host").is_not_null()).group_by(key).agg(
        n=pl.col("nccl_host").n_unique(), s_host=pl.col("nccl_host").first()).filter(pl.col("n") == 1).drop("n")
    df = df.join(stream_host, on=key, how="left", nulls_equal=True)
    rank_host = _weighted_mode(df.filter(pl.col("rank").is_not_null()), "rank", pl.col("nccl_host"), "r_host")
    exits = tables.get("exits")
    if exits is not None and not exits.is_empty():
        extra = exits.drop_nulls(["rank", "host"]).select("rank", r_host2=_short(pl.col("host"))).unique("rank")
        rank_host = rank_host.join(extra, on="rank", how="full", coalesce=True).select(
            "rank", r_host=pl.coalesce("r_host", "r_host2"))
    df = df.join(rank_host, on="rank", how="left")
    df = df.join(_srun_task_hosts(tables), on="srun_task", how="left")
    node = pl.coalesce(pl.col("nccl_host"), _short(pl.col("host_tag")), pl.col("s_host"), pl.col("r_host"),
                       pl.col("t_host"))
    source = (pl.when(pl.col("nccl_host").is_not_null()).then(pl.lit("NCCL line prefix"))
              .when(pl.col("host_tag").is_not_null()).then(pl.lit("launcher host prefix"))
              .when(pl.col("s_host").is_not_null()).then(pl.lit("NCCL lines of the same stream"))
              .when(pl.col("r_host").is_not_null()).then(pl.lit("host of the rank"))
              .when(pl.col("t_host").is_not_null()).then(pl.lit("srun task exit line (task -> host)")))
    return df.with_columns(node=node, node_source=source).drop("s_host", "r_host", "t_host")


def _srun_task_hosts(tables: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """``srun: error: host: tasks 8-11,13-15: ...`` -> one (srun_task, host) row per task."""
    slurm = tables.get("slurm")
    empty = pl.DataFrame(schema={"srun_task": pl.Int32, "t_host": pl.String})
    if slurm is None or slurm.is_empty() or "tasks" not in slurm.columns:
        return empty
    rows = []
    for host, tasks in slurm.drop_nulls(["host", "tasks"]).select("host", "tasks").unique().iter_rows():
        for part in tasks.replace("tasks", "").replace("task", "").split(","):
            bounds = part.strip().split("-")
            if all(b.strip().isdigit() for b in bounds) and len(bounds) in (1, 2):
                lo, hi = int(bounds[0]), int(bounds[-1])
                rows += [{"srun_task": t, "t_host": host.split(".")[0]} for t in range(lo, min(hi, lo + 100000) + 1)]
    if not rows:
        return empty
    return pl.DataFrame(rows, schema=empty.schema).unique("srun_task", keep="first")


def _attempts(df: pl.DataFrame, tables: dict[str, pl.DataFrame], hints_of: dict[int, dict]) -> pl.DataFrame:
    """torchrun's attempt_N folder, else repeated NCCL version banners within one file."""
    path_attempt = {input_id: hints.get("attempt") for input_id, hints in hints_of.items()}
    df = df.with_columns(p_attempt=pl.col("input_id").replace_strict(path_attempt, default=None, return_dtype=pl.Int64))
    versions = tables.get("nccl_versions")
    if versions is not None and not versions.is_empty():
        marks = versions.select("input_id", "line_no", banner=pl.lit(True))
        df = df.join(marks, on=["input_id", "line_no"], how="left")
    else:
        df = df.with_columns(banner=pl.lit(None, dtype=pl.Boolean))
    df = df.sort("input_id", "line_no")
    who = pl.coalesce(pl.col("rank").cast(pl.String), pl.col("pid").cast(pl.String), pl.lit("?"))
    df = df.with_columns(_n=pl.col("banner").fill_null(False).cast(pl.Int64).cum_sum().over(["input_id", who]))
    df = df.with_columns(_n=pl.when(pl.col("banner").fill_null(False)).then(pl.col("_n")))
    df = df.with_columns(b_attempt=(pl.col("_n").fill_null(0).cum_max().over("input_id") - 1).clip(lower_bound=0))
    has_banner = df.group_by("input_id").agg(hb=pl.col("banner").fill_null(False).any())
    df = df.join(has_banner, on="input_id", how="left")
    attempt = pl.coalesce(pl.col("p_attempt"), pl.when(pl.col("hb")).then(pl.col("b_attempt")))
    source = (pl.when(pl.col("p_attempt").is_not_null()).then(pl.lit("torchrun attempt_N folder"))
              .when(pl.col("hb")).then(pl.lit("NCCL version banners in the file")))
    return df.with_columns(attempt=attempt, attempt_source=source).drop("p_attempt", "banner", "_n", "b_attempt", "hb")


def _ranks_table(df: pl.DataFrame, procs: pl.DataFrame, tables: dict[str, pl.DataFrame]) -> pl.DataFrame:
    known = df.filter(pl.col("rank").is_not_null())
    agg = known.group_by("rank").agg(
        pid=pl.col("pid").drop_nulls().last(),
        source=pl.col("rank_source").sort_by(pl.col("rank_confidence").replace_strict(CONFIDENCE_ORDER, default=9)).first(),
        confidence=pl.col("rank_confidence").sort_by(pl.col("rank_confidence").replace_strict(CONFIDENCE_ORDER, default=9)).first(),
        inputs=pl.col("input_id").n_unique(),
    )
    for name, value in (("node", pl.col("node")), ("local_rank", pl.coalesce(pl.col("local_rank"), pl.col("h_local"))),
                        ("cuda_dev", pl.col("nccl_dev"))):
        agg = agg.join(_weighted_mode(known, "rank", value, name), on="rank", how="left")
    if not procs.is_empty():
        gpu = procs.filter(pl.col("p_bus_id").is_not_null()).group_by("p_rank").agg(
            bus_id=pl.col("p_bus_id").last(), nccl_cuda_dev=pl.col("p_cuda_dev").last())
        agg = agg.join(gpu, left_on="rank", right_on="p_rank", how="left")
        agg = agg.with_columns(cuda_dev=pl.coalesce("nccl_cuda_dev", "cuda_dev")).drop("nccl_cuda_dev")
    else:
        agg = agg.with_columns(bus_id=pl.lit(None, dtype=pl.String))
    exits = tables.get("exits")
    if exits is not None and not exits.is_empty():
        # torchrun's failure summary states each rank's pid and host: fill what the lines lacked.
        lr = exits.drop_nulls(["rank"]).group_by("rank").agg(
            x_local=pl.col("local_rank").drop_nulls().first(), x_pid=pl.col("pid").drop_nulls().last(),
            x_node=_short(pl.col("host").drop_nulls().first()))
        agg = agg.join(lr, on="rank", how="left").with_columns(
            local_rank=pl.coalesce("local_rank", "x_local"), pid=pl.coalesce("pid", "x_pid"),
            node=pl.coalesce("node", "x_node")).drop("x_local", "x_pid", "x_node")
    agg = agg.with_columns(local_rank=pl.coalesce(pl.col("local_rank"), pl.col("cuda_dev")),
                           bus_id=pl.col("bus_id").map_elements(bus_id_to_pci, return_dtype=pl.String))
    return agg.select("rank", "node", "pid", "local_rank", "cuda_dev", "bus_id", "source", "confidence", "inputs").sort("rank")
