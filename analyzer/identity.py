"""Who wrote each line: global rank, node, pid and attempt, each with where it came from.

Launchers and libraries print different rank numbers (``docs/formats/training-logs.md`` section
0 item 6, ``docs/formats/pytorch-failures.md`` section 1): c10d's ``[rankN]:`` is the global
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

torchrun's agents state their own mapping (``_launcher_statements``): each row of a node's
ChildFailedError summary (``rank : G (local_rank: L)`` with its pid) and, at INFO, the
rendezvous result (``local_ranks=[..]`` / ``global_ranks=[..]``). From those, ``certain``:

* a line the agent prefixed ``[<role>L]:`` in the same input and stream as its summary (the
  next summary after the line) or rendezvous result (the last one before it); a custom
  ``[<role>N|M]:`` template is read the way the summary confirms (``[default2|0]:`` with
  "rank 2 (local_rank: 0)" is rank 2), else the way the file's ``[rankN]:`` lines confirm;
* the files of an ``attempt_N/<L>/`` folder, once the folder is tied to one agent: an
  ``error_file`` of its summary points into the folder, or the folder's own certain ranks agree
  with that agent's statements and no other agent's;
* a py-spy dump (``Process P:``) whose pid the summary states, or the agent's ``failed
  (exitcode: C) local_rank: L (pid: P)`` line, or that lines of a stated rank carry (NCCL's
  ``host:pid``); a pid claimed by two ranks gives none. (Inherits the level of what stated it.)

``derived`` from the same statements: the only log folder with the only agent (nothing in the
folder against it), the one folder left for the one agent left, an attempt before the one the
summary describes, a local rank the summary does not list (the agent's offset + local rank), and
a ``[<role>N|N]:`` template line nothing else resolves. With no agent statement at all (a job
that hung, so no failure table): the ``attempt_N/<L>/`` folders of the only agent in the inputs,
when nothing names a second node (a second folder, a second NCCL host, a larger world): local
rank = global rank, and the world size is its number of local ranks (``world_size_source`` says
so). Logs of other nodes left out of the inputs would break that assumption; the source says it.
"""

from __future__ import annotations

import polars as pl

from postmortem.parsers.ascii_text import rx
from postmortem.parsers.base import among, collect_each, to_int
from postmortem.parsers.nccl import bus_id_to_pci

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
        parts.append(t.lazy().filter(pl.col("pg_rank").is_not_null() & (pg0 | unnamed)).select(
            "input_id", "line_no",
            pg0_rank=pl.when(pg0).then(pl.col("pg_rank")),
            pgx_rank=pl.when(unnamed).then(pl.col("pg_rank"))))
    if not parts:
        return pl.DataFrame(schema={"input_id": pl.UInt32, "line_no": pl.UInt32, "pg0_rank": pl.Int64,
                                    "pgx_rank": pl.Int64})
    return pl.concat(parts).unique(["input_id", "line_no"], keep="first").collect(engine="in-memory")   # one call


def _titan_inputs(lines: pl.DataFrame) -> list[int]:
    """torchtitan's launcher uses the role ``rank``, so its ``[rankN]:`` is a local rank."""
    return lines.filter(pl.col("text").str.contains("[titan]", literal=True))["input_id"].unique().to_list()


def resolve(lines: pl.DataFrame, tables: dict[str, pl.DataFrame], inputs: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, dict]:
    """Annotate every line with rank/node/pid/attempt (+ sources); build the ``ranks`` table.
    ``lines`` may carry ``_w``, the number of lines a row stands for (``postmortem.analyzer.bulk``)."""
    lines = lines.with_columns(_w=pl.col("_w").fill_null(1) if "_w" in lines.columns else pl.lit(1, dtype=pl.UInt32))
    world = _world_size(tables)
    world_source = "stated in the logs" if world is not None else None
    procs = _process_map(tables, world)
    nccl = tables.get("nccl_lines", pl.DataFrame(schema={"input_id": pl.UInt32, "line_no": pl.UInt32,
                                                          "host": pl.String, "pid": pl.Int64, "cuda_dev": pl.Int64}))
    # the NCCL lines' hosts shortened before the join: a large run's lines are mostly not NCCL's
    df = lines.join(nccl.select("input_id", "line_no", _short(pl.col("host")).alias("nccl_host"),
                                pl.col("pid").alias("nccl_pid"), pl.col("cuda_dev").alias("nccl_dev")),
                    on=["input_id", "line_no"], how="left")
    df = df.join(procs, left_on=["nccl_host", "nccl_pid"], right_on=["host", "pid"], how="left")
    df = df.join(_pg0_rows(tables), on=["input_id", "line_no"], how="left")
    titan = _titan_inputs(lines)
    is_titan = pl.col("input_id").is_in(titan) if titan else pl.lit(False)
    df, line_runs = _runs(df, tables, decided=pl.col("rank_tag").is_not_null() & ~is_titan)
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
    hints = path_hints(inputs)
    df = _launcher_statements(df, tables, hints)
    df = _path_guess(df, hints, world, agents_stated=_agents_stated(tables))
    alone = df.filter(pl.col("rank_source") == ONE_AGENT)
    if world is None and not alone.is_empty():
        world = int(alone["rank"].max()) + 1
        world_source = "the local rank folders of the only torchrun agent in the inputs (one node)"
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
    info = {"world_size": world, "world_size_source": world_source}
    keep = ["input_id", "line_no", "rank", "rank_source", "rank_confidence", "node", "node_source",
            "pid", "attempt", "attempt_source"]
    if line_runs is None:
        return df.select(keep), ranks, info
    return _per_line(df, line_runs, keep), ranks, info


def _per_line(heads: pl.DataFrame, line_runs: pl.DataFrame, keep: list[str]) -> pl.DataFrame:
    """Each line of ``line_runs`` with its run's ``keep`` columns from ``heads`` (a row per run):
    gathered by run number where ``heads`` holds each run once, else joined."""
    heads = heads.sort("_run")
    runs = heads["_run"]
    if runs.len() and runs[0] == 1 and runs[-1] == runs.len() and runs.is_unique().all():
        taken = heads.select([c for c in keep if c not in ("input_id", "line_no")]).gather(line_runs["_run"] - 1)
        return pl.concat([line_runs.select("input_id", "line_no"), taken], how="horizontal").select(keep)
    return line_runs.join(heads.drop("input_id", "line_no"), on="_run", how="left", maintain_order="left").select(keep)


# --- runs of lines read alike -------------------------------------------------------------------
# Every step below reads a line by its input, its stream (launcher tags, prefix), its NCCL process
# and its PG-0 rank, except for the lines some step reads one by one. Most lines of a job are
# runs of lines that share all of those (a rank's c10d status lines, its training log): each run
# is attributed once, by its first line standing for all of them (``_w``), and every line of the
# run takes that line's attribution. The 1,024-rank run's 322,183 lines are 9,850 such rows, and its
# attribution takes 0.3 s instead of 0.8 s (the 10,000-rank run: 1.58 M lines, 4.7-5.1 s before).
# A step added here that reads a line's own text, position or table row must say so in ``_breaks``
# (or ``_ALIKE``); tests/test_identity_runs.py holds the runs to the line-by-line result.
RUNS_FROM = 20_000    # lines; below, the few calls that find the runs cost more than they save
_ALIKE = ("input_id", "srun_task", "mpi_rank", "host_tag", "ray_pid", "local_rank", "rank_tag", "prefix",
          "nccl_host", "nccl_pid", "nccl_dev")


def _runs(df: pl.DataFrame, tables: dict[str, pl.DataFrame], decided: pl.Expr) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """``df`` (one row per line, in input and line order) as one row per run of lines read alike,
    with ``_run``; and each line's ``_run`` (None, and ``df`` as it was, where its lines are not
    in that order). A PG-0 rank tells lines apart only where no ``[rankN]:`` prefix ``decided``
    the rank. A line read on its own (``_breaks``) is a run, and the line after it starts one;
    so do the first line of a py-spy dump and the line after it, and a line that prints a pid
    (``_pids`` reads its text)."""
    ordered = df.select(((pl.col("input_id") > pl.col("input_id").shift())
                         | ((pl.col("input_id") == pl.col("input_id").shift())
                            & (pl.col("line_no") > pl.col("line_no").shift()))).fill_null(True).all()).item()
    if not ordered or df.height < RUNS_FROM:
        return df, None
    breaks = _breaks(tables)
    if not breaks.is_empty():
        df = df.join(breaks, on=["input_id", "line_no"], how="left", maintain_order="left")
    else:
        df = df.with_columns(_alone=pl.lit(None, dtype=pl.Boolean))
    alike = [pl.col(c) for c in _ALIKE if c in df.columns]
    alike += [pl.when(~decided).then(pl.col(c)).alias(c) for c in ("pg0_rank", "pgx_rank") if c in df.columns]
    after_alone = pl.col("_alone").shift().fill_null(False)
    starts = (pl.struct(alike).rle_id().diff().fill_null(1) != 0) | pl.col("_alone").is_not_null() | after_alone
    if "text" in df.columns:
        starts = starts | pl.col("text").str.contains("pid", literal=True).fill_null(False)
    df = df.with_columns(_run=starts.cum_sum().cast(pl.UInt32), _start=starts).drop("_alone")
    line_runs = df.select("input_id", "line_no", "_run")
    # A run's head is its first line, and its weight the lines of the run (the running total at
    # its last line less that at the last line of the run before): no hashing of a million runs
    # (a group_by that took the first of every column: 0.34-0.66 s on the 535 MB log's 0.98 M
    # runs; this, 0.05-0.12 s).
    upto = pl.col("_w").cum_sum().filter(pl.col("_start").shift(-1).fill_null(True))
    weight = (upto - upto.shift(1, fill_value=0)).alias("_w")
    return df.select([weight if c == "_w" else pl.col(c).filter(pl.col("_start"))
                      for c in df.columns if c != "_start"]), line_runs


def _breaks(tables: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """Where runs break: ``_alone`` true for the lines some step reads one by one (a run of
    their own): torchrun's failure summaries (rows and title) and rendezvous results
    (``_agent_maps``, ``_agent_of``), its ``worker_failed`` lines (``_pids``), NCCL version
    banners (``_attempts``); false for the lines that start a run: the first line of each py-spy
    dump and the line after its last (``_pids`` gives the lines between them the dump's pid)."""
    parts = []
    for name, columns in (("exits", ("line_no", "table_line")), ("agent", ("line_no",)), ("nccl_versions", ("line_no",))):
        t = tables.get(name)
        if t is None or t.is_empty() or "input_id" not in t.columns:
            continue
        for column in columns:
            if column in t.columns:
                parts.append(t.select(pl.col("input_id").cast(pl.UInt32), line_no=pl.col(column).cast(pl.UInt32),
                                      _alone=pl.lit(True)))
    stacks = tables.get("stacks")
    if stacks is not None and not stacks.is_empty() and {"input_id", "dump_line", "pid"} <= set(stacks.columns):
        dumps = stacks.drop_nulls(["dump_line", "pid"]).group_by("input_id", "dump_line").agg(last=pl.col("line_no").max())
        parts += [dumps.select(pl.col("input_id").cast(pl.UInt32), line_no=line.cast(pl.UInt32), _alone=pl.lit(False))
                  for line in (pl.col("dump_line"), pl.col("last") + 1)]
    if not parts:
        return pl.DataFrame(schema={"input_id": pl.UInt32, "line_no": pl.UInt32, "_alone": pl.Boolean})
    return pl.concat(parts).drop_nulls().group_by("input_id", "line_no").agg(pl.col("_alone").max())


# --- what torchrun's agents state --------------------------------------------------------------
# Each node's agent states which global rank each of its local ranks is: every row of its
# ChildFailedError summary (``rank : G (local_rank: L)``, with the pid and host) and, at INFO,
# its rendezvous result (``local_ranks=[0, 1]`` / ``global_ranks=[2, 3]``). With those, the
# lines the agent prefixed (``[default1]:``), its ``--log-dir`` folders (``attempt_N/<L>/``, no
# ``[rankN]:`` in them under default settings) and its workers' pids (py-spy dumps) have a
# stated global rank, not one guessed from folder order.

_OUTER = ("srun_task", "mpi_rank", "host_tag", "ray_pid")   # the agent's own stream (not local_rank)
_TEMPLATE = r"\[[A-Za-z_]+?(\d+)\|(\d+)\]:"                 # a custom line-prefix template [<role>N|M]:
_LEVEL = {None: 9, **CONFIDENCE_ORDER}


def _outer_key() -> pl.Expr:
    return pl.concat_str([pl.col(c).cast(pl.String).fill_null("") for c in _OUTER], separator="|")


def _agent_maps(df: pl.DataFrame, tables: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """One row per (agent, local rank) an agent states: ``agent`` (input, kind, line of the
    table or rendezvous block), ``input_id``, ``_okey`` (its stream), ``a_line``, ``a_kind``
    (``table``/``rendezvous``), ``a_host``, ``a_local``, ``a_rank``, ``a_pid``, ``a_error_file``."""
    schema = {"input_id": pl.UInt32, "line_no": pl.UInt32, "a_line": pl.UInt32, "a_kind": pl.String,
              "a_host": pl.String, "a_local": pl.Int64, "a_rank": pl.Int64, "a_pid": pl.Int64,
              "a_error_file": pl.String}
    parts = []
    exits = tables.get("exits")
    if exits is not None and not exits.is_empty() and "input_id" in exits.columns:
        title = pl.col("table_line") if "table_line" in exits.columns else pl.col("line_no")
        parts.append(exits.drop_nulls(["rank", "local_rank"]).select(
            pl.col("input_id").cast(pl.UInt32), pl.col("line_no").cast(pl.UInt32),
            a_line=pl.coalesce(title, pl.col("line_no")).cast(pl.UInt32), a_kind=pl.lit("table"),
            a_host=_short(pl.col("host")), a_local=pl.col("local_rank").cast(pl.Int64),
            a_rank=pl.col("rank").cast(pl.Int64), a_pid=pl.col("pid").cast(pl.Int64),
            a_error_file=pl.col("error_file").cast(pl.String)))
    agent = tables.get("agent")
    if agent is not None and not agent.is_empty() and "input_id" in agent.columns:
        rdzv = agent.filter((pl.col("kind") == "rendezvous") & (pl.col("key") == "global_rank"))
        if not rdzv.is_empty():
            parts.append(rdzv.select(
                pl.col("input_id").cast(pl.UInt32), pl.col("line_no").cast(pl.UInt32),
                a_line=pl.col("line_no").cast(pl.UInt32), a_kind=pl.lit("rendezvous"),
                a_host=pl.lit(None, dtype=pl.String), a_local=pl.col("local_rank").cast(pl.Int64),
                a_rank=pl.col("value").cast(pl.Int64, strict=False), a_pid=pl.lit(None, dtype=pl.Int64),
                a_error_file=pl.lit(None, dtype=pl.String)).drop_nulls("a_rank"))
    if not parts:
        return pl.DataFrame(schema=schema | {"_okey": pl.String, "agent": pl.String})
    maps = pl.concat([p.cast(schema) for p in parts])
    keys = df.select("input_id", "line_no", _okey=_outer_key())
    maps = maps.join(keys, on=["input_id", "line_no"], how="left").with_columns(pl.col("_okey").fill_null("|||"))
    return maps.with_columns(agent=pl.concat_str([pl.col("input_id").cast(pl.String), pl.col("a_kind"),
                                                  pl.col("a_line").cast(pl.String)], separator=":"))


def _agent_of(rows: pl.DataFrame, maps: pl.DataFrame) -> pl.DataFrame:
    """``rows`` (``input_id``, ``line_no``, ``_okey``) + ``agent``: the agent that prefixed the line,
    from the same input and stream -- its last rendezvous result before the line, else the next
    failure summary after it (an agent prints its summary when its workers are gone), else the
    last one before it."""
    agents = maps.lazy().select("input_id", "_okey", "a_line", "a_kind", "agent").unique().sort("a_line") \
        .collect(engine="in-memory")
    rows = rows.sort("line_no")
    kinds = set(agents["a_kind"].to_list())
    plans = []      # each way of finding the agent as a plan, collected together
    for kind, strategy in (("rendezvous", "backward"), ("table", "forward"), ("table", "backward")):
        if kind not in kinds:
            continue
        right = agents.lazy().filter(pl.col("a_kind") == kind).drop("a_kind")
        plans.append(rows.lazy().select("input_id", "line_no", "_okey").join_asof(
            right, left_on="line_no", right_on="a_line", by=["input_id", "_okey"], strategy=strategy,
            check_sortedness=False).select(pl.col("agent").alias(f"_ag{len(plans)}")))
    if not plans:
        return rows.with_columns(agent=pl.lit(None, dtype=pl.String))
    picked = pl.concat(collect_each(plans), how="horizontal").select(agent=pl.coalesce(pl.all()))
    return pl.concat([rows, picked], how="horizontal")


def _better(df: pl.DataFrame, rank: str, source: str, level: str) -> pl.DataFrame:
    """Take (rank, source, level) from the columns named where they are set and more certain than
    what the row has (a stated mapping replaces a guess, never a statement)."""
    if df[rank].is_null().all():
        return df.drop(rank, source, level)
    take = pl.col(rank).is_not_null() & (
        pl.col(level).replace_strict(_LEVEL, default=9, return_dtype=pl.Int64)
        < pl.col("rank_confidence").replace_strict(_LEVEL, default=9, return_dtype=pl.Int64))
    return df.with_columns(
        rank=pl.when(take).then(pl.col(rank)).otherwise(pl.col("rank")),
        rank_source=pl.when(take).then(pl.col(source)).otherwise(pl.col("rank_source")),
        rank_confidence=pl.when(take).then(pl.col(level)).otherwise(pl.col("rank_confidence")),
    ).drop(rank, source, level)


# torchrun writes <log_dir>/<run_id>_<random>/attempt_N/<local_rank>/{stdout,stderr}.log: one
# folder per agent (per node), so everything above attempt_N tells the nodes apart.
_ATTEMPT_FOLDER = r"(?:^|/)attempt_(\d+)/(\d+)/(?:stdout|stderr)\.log"


def path_hints(inputs: pl.DataFrame) -> pl.DataFrame:
    """What each input's path says, in one Polars call for every input (a job folder of 31,000
    inputs: 0.25 s of Python a path at a time): torchrun's ``attempt`` and ``local_rank``, and
    ``node_dir``, the folders above ``attempt_N`` joined as ``postmortem.analyzer.discover.path_parts``
    gives them (an archive member's path is its path inside the archive)."""
    path = pl.col("path").str.split("!/").list.last()
    root = (pl.when(path.str.starts_with("//") & ~path.str.starts_with("///")).then(pl.lit(["//"]))
            .when(path.str.starts_with("/")).then(pl.lit(["/"])).otherwise(pl.lit([], dtype=pl.List(pl.String))))
    parts = pl.concat_list(root, path.str.split("/").list.eval(
        pl.element().filter((pl.element() != "") & (pl.element() != "."))))
    found = path.str.extract_groups(rx(_ATTEMPT_FOLDER))
    local_rank = to_int(found.struct.field("2"))
    return inputs.lazy().select(
        pl.col("input_id").cast(pl.UInt32), attempt=to_int(found.struct.field("1")), local_rank=local_rank,
        node_dir=pl.when(local_rank.is_not_null()).then(
            parts.list.head((parts.list.len().cast(pl.Int64) - 3).clip(lower_bound=0)).list.join("/")),
    ).collect(engine="in-memory")


def _launcher_statements(df: pl.DataFrame, tables: dict[str, pl.DataFrame], hints: pl.DataFrame) -> pl.DataFrame:
    """Global ranks from what torchrun's agents state (see above): their prefixed lines, their
    log folders, and the pids of their workers (py-spy dumps)."""
    if "prefix" not in df.columns:
        df = df.with_columns(prefix=pl.lit(None, dtype=pl.String))
    maps = _agent_maps(df, tables)
    if not maps.is_empty():
        df = _prefixed_lines(df, maps)
    df = _template_lines(df)
    if not maps.is_empty():
        df = _log_folders(df, maps, hints)
    return _pids(df, maps, tables)


def _prefixed_lines(df: pl.DataFrame, maps: pl.DataFrame) -> pl.DataFrame:
    """Lines an agent prefixed with ``[<role>L]:`` (or a custom ``[<role>N|M]:`` template) in the
    same input as its failure summary or rendezvous result."""
    inputs = maps["input_id"].unique()
    tpl = pl.col("prefix").str.extract_groups(_TEMPLATE)
    rows = df.filter(pl.col("input_id").is_in(among(inputs)) & pl.col("local_rank").is_not_null()).select(
        "input_id", "line_no", "rank_tag", _okey=_outer_key(), _L=pl.col("local_rank").cast(pl.Int64),
        _a=tpl.struct.field("1").cast(pl.Int64, strict=False), _b=tpl.struct.field("2").cast(pl.Int64, strict=False))
    if rows.is_empty():
        return df
    rows = _agent_of(rows, maps)
    stated = maps.select("agent", "a_local", "a_rank", "a_kind").unique(["agent", "a_local"], keep="first")
    # The default template `[<role>L]:` names the local rank. A custom template names two numbers
    # in an order only its author knows: the agent's own table says which pair it states --
    # `[<role>G|L]:` when local rank M maps to N, `[<role>L|G]:` when local rank N maps to M.
    look = lambda col, name: rows.select("line_no", "input_id", "agent", pl.col(col).alias("a_local")).join(
        stated, on=["agent", "a_local"], how="left").select("input_id", "line_no", pl.col("a_rank").alias(name),
                                                          pl.col("a_kind").alias(f"{name}_k"))
    rows = (rows.join(look("_L", "_gL"), on=["input_id", "line_no"], how="left")
            .join(look("_b", "_gb"), on=["input_id", "line_no"], how="left")
            .join(look("_a", "_ga"), on=["input_id", "line_no"], how="left"))
    templated = pl.col("_a").is_not_null() & pl.col("_b").is_not_null()
    words = lambda k: pl.when(pl.col(k) == "rendezvous").then(pl.lit("torchrun rendezvous result")).otherwise(
        pl.lit("torchrun failure summary"))
    new_rank = (pl.when(~templated).then(pl.col("_gL"))
                .when(pl.col("_gb") == pl.col("_a")).then(pl.col("_a"))
                .when(pl.col("_ga") == pl.col("_b")).then(pl.col("_b")))
    new_src = (pl.when(~templated & pl.col("_gL").is_not_null()).then(pl.concat_str(
                   [words("_gL_k"), pl.lit(" of the agent that prefixed the line ([<role><local rank>]:)")]))
               .when(templated & (pl.col("_gb") == pl.col("_a"))).then(pl.concat_str(
                   [words("_gb_k"), pl.lit(" of the agent that prefixed the line (line-prefix template [<role><rank>|<local rank>]:)")]))
               .when(templated & (pl.col("_ga") == pl.col("_b"))).then(pl.concat_str(
                   [words("_ga_k"), pl.lit(" of the agent that prefixed the line (line-prefix template [<role><local rank>|<rank>]:)")])))
    rows = rows.select("input_id", "line_no", _r=new_rank, _s=new_src,
                       _c=pl.when(new_rank.is_not_null()).then(pl.lit("certain")))
    df = df.join(rows, on=["input_id", "line_no"], how="left")
    return _better(df, "_r", "_s", "_c")


def _template_lines(df: pl.DataFrame) -> pl.DataFrame:
    """Lines behind a custom ``[<role>N|M]:`` template that no agent statement resolved: the
    ``[rankN]:`` lines of the same input say which number is the global rank (each line of the
    input then takes that number); where N == M on a line either reading gives that rank."""
    if "prefix" not in df.columns or not df.select(pl.col("prefix").str.contains("|", literal=True).any()).item():
        return df
    tpl = pl.col("prefix").str.extract_groups(_TEMPLATE)
    df = df.with_columns(_a=tpl.struct.field("1").cast(pl.Int64, strict=False),
                         _b=tpl.struct.field("2").cast(pl.Int64, strict=False))
    if df["_a"].is_null().all():
        return df.drop("_a", "_b")
    votes = df.filter(pl.col("_a").is_not_null() & pl.col("rank_tag").is_not_null() & (pl.col("_a") != pl.col("_b"))
                      ).group_by("input_id").agg(
        first=(pl.col("rank_tag") == pl.col("_a")).sum(), second=(pl.col("rank_tag") == pl.col("_b")).sum())
    votes = votes.select("input_id", _order=pl.when((pl.col("first") > 0) & (pl.col("second") == 0)).then(pl.lit(1))
                         .when((pl.col("second") > 0) & (pl.col("first") == 0)).then(pl.lit(2)))
    df = df.join(votes, on="input_id", how="left")
    rank = (pl.when(pl.col("_order") == 1).then(pl.col("_a")).when(pl.col("_order") == 2).then(pl.col("_b"))
            .when(pl.col("_a") == pl.col("_b")).then(pl.col("_a")))
    df = df.with_columns(
        _r=rank,
        _s=pl.when(pl.col("_order").is_not_null()).then(pl.lit(
            "torchrun line-prefix template [<role>N|M]: (which number is the rank: from the [rankN]: lines of the file)"))
        .when(rank.is_not_null()).then(pl.lit("torchrun line-prefix template [<role>N|N]: (both numbers agree)")),
        _c=pl.when(pl.col("_order").is_not_null()).then(pl.lit("certain"))
        .when(rank.is_not_null()).then(pl.lit("derived")))
    return _better(df.drop("_a", "_b", "_order"), "_r", "_s", "_c")


def _log_folders(df: pl.DataFrame, maps: pl.DataFrame, hints: pl.DataFrame) -> pl.DataFrame:
    """torchrun's ``<log_dir>/<run_id>_<random>/attempt_N/<L>/`` folders: one ``<run_id>_<random>``
    folder per agent. A folder is an agent's when an ``error_file`` of its summary points into it,
    or when the folder's ``[rankN]:`` lines agree with that agent and no other (certain); when it
    is the only folder and there is only one agent, or the one folder left for the one agent left,
    with nothing in the folder against it (derived: a copy of another node's folder would look
    the same)."""
    folders = hints.filter(pl.col("local_rank").is_not_null()).select(
        "input_id", h_local="local_rank", h_dir="node_dir", h_attempt="attempt")
    if folders.is_empty():
        return df
    # One key per agent. torchrun gives an agent's workers consecutive global ranks (rank = offset
    # + local rank), so statements with one offset are one agent's: its summary (which lists only
    # the workers that failed), its rendezvous results, the same summary in a copied console.
    offset = maps.group_by("agent").agg(off=(pl.col("a_rank") - pl.col("a_local")).unique())
    maps = maps.join(offset, on="agent").with_columns(key=pl.when(pl.col("off").list.len() == 1).then(
        pl.concat_str([pl.lit("offset "), pl.col("off").list.first().cast(pl.String)])).otherwise(pl.col("agent")))
    stated = maps.select("key", "a_local", "a_rank").unique(["key", "a_local"], keep="first")
    keys = maps.select("key", off=pl.when(pl.col("off").list.len() == 1).then(pl.col("off").list.first())).unique("key")
    dirs = folders.select("h_dir").unique()
    anchors = (df.join(folders, on="input_id").filter(pl.col("rank").is_not_null() & (pl.col("rank_confidence") == "certain"))
               .select("h_dir", "h_local", "rank").unique().with_columns(o=pl.col("rank") - pl.col("h_local")))
    # A folder and an agent agree when every rank stated in the folder is the one the agent states
    # for that local rank. For an agent with one offset that is: the folder's ranks all have that
    # offset (a join on the offset, not a folder x agent product: 1,250 agents x 10,000 ranks).
    by_offset = (anchors.group_by("h_dir").agg(o=pl.col("o").unique()).filter(pl.col("o").list.len() == 1)
                 .select("h_dir", key=pl.concat_str([pl.lit("offset "), pl.col("o").list.first().cast(pl.String)]))
                 .join(keys.select("key"), on="key", how="semi"))
    odd = stated.join(keys.filter(pl.col("off").is_null()).select("key"), on="key", how="semi")
    n_anchor = anchors.group_by("h_dir").agg(n=pl.len())
    by_pairs = (anchors.join(odd, left_on=["h_local", "rank"], right_on=["a_local", "a_rank"])
                .group_by("h_dir", "key").agg(hits=pl.len()).join(n_anchor, on="h_dir")
                .filter(pl.col("hits") == pl.col("n")).select("h_dir", "key"))
    candidates = pl.concat([by_offset, by_pairs])
    by_anchor = (candidates.filter(pl.len().over("h_dir") == 1)
                 .with_columns(how=pl.lit("its [rankN]: lines agree with that agent's and no other's")))

    def agrees(folder: str, key: str) -> bool:
        mine = anchors.filter(pl.col("h_dir") == folder)
        off = keys.filter(pl.col("key") == key)["off"][0]
        if off is not None:
            return bool((mine["o"] == off).all())
        said = dict(stated.filter(pl.col("key") == key).select("a_local", "a_rank").iter_rows())
        return all(said.get(local) == rank for local, rank in mine.select("h_local", "rank").iter_rows())

    matched = by_anchor
    errs = maps.drop_nulls("a_error_file")
    if not errs.is_empty():
        pointed = errs.select("key", base=pl.col("a_error_file").str.extract(r"/([^/]+)/attempt_\d+/\d+/error\.json$", 1))
        by_file = (dirs.with_columns(base=pl.col("h_dir").str.extract(r"([^/]+)$", 1))
                   .join(pointed.drop_nulls("base"), on="base").select("h_dir", "key").unique()
                   .filter(pl.len().over("h_dir") == 1)
                   .with_columns(how=pl.lit("an error_file of that agent's failure summary points into it")))
        matched = pl.concat([by_file, by_anchor.filter(~pl.col("h_dir").is_in(among(by_file["h_dir"])))])
    left_dirs = dirs.filter(~pl.col("h_dir").is_in(among(matched["h_dir"])))["h_dir"].to_list()
    left_keys = sorted(set(keys["key"].to_list()) - set(matched["key"].to_list()))
    if len(left_dirs) == 1 and len(left_keys) == 1 and agrees(left_dirs[0], left_keys[0]):
        how = ("it is the only log folder, and that the only agent" if matched.is_empty()
               else "it is the one log folder left for the one agent left")
        matched = pl.concat([matched, pl.DataFrame({"h_dir": left_dirs, "key": left_keys, "how": [how]})])
    if matched.is_empty():
        return df
    last = folders.group_by("h_dir").agg(last_attempt=pl.col("h_attempt").max())
    got = (folders.join(matched, on="h_dir").join(last, on="h_dir")
           .join(stated.rename({"a_local": "h_local"}), on=["key", "h_local"], how="left")
           .join(keys, on="key", how="left"))
    earlier = pl.col("h_attempt").fill_null(0) < pl.col("last_attempt").fill_null(0)
    sure = pl.col("a_rank").is_not_null() & ~earlier & pl.col("how").is_in(
        ["its [rankN]: lines agree with that agent's and no other's",
         "an error_file of that agent's failure summary points into it"])
    got = got.select(
        "input_id",
        _r=pl.coalesce("a_rank", pl.col("off") + pl.col("h_local")),
        _s=pl.concat_str([
            pl.when(pl.col("a_rank").is_not_null()).then(pl.lit("torchrun's statement of this local rank's global rank"))
            .otherwise(pl.lit("torchrun's consecutive global ranks (the agent's offset + this local rank)")),
            pl.lit(", by the agent that wrote this attempt_N/<local rank>/ log folder ("), pl.col("how"), pl.lit(")"),
            pl.when(earlier).then(pl.lit("; an attempt before the one stated")).otherwise(pl.lit(""))]),
        _c=pl.when(sure).then(pl.lit("certain")).otherwise(pl.lit("derived")),
    ).filter(pl.col("_r").is_not_null())
    df = df.join(got, on="input_id", how="left")
    return _better(df, "_r", "_s", "_c")


def _pids(df: pl.DataFrame, maps: pl.DataFrame, tables: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """Worker pids -> global ranks, from what states both: torchrun's failure summary (``exitcode
    : C (pid: P)``), the agent's ``failed (exitcode: C) local_rank: L (pid: P)`` line with that
    agent's statements, any line whose rank is stated and that names its process's pid (NCCL's
    ``host:pid:tid``, Ray's ``pid=``), and (derived) a ``pid P`` printed in a line of a known
    rank. A py-spy dump (``Process P: ...``) then takes P's rank at the best level stated; a pid
    that two ranks claim (two hosts, or a pid printed by another rank) gives none."""
    stacks = tables.get("stacks")
    if stacks is None or stacks.is_empty() or "dump_line" not in stacks.columns:
        return df
    dumps = (stacks.drop_nulls(["dump_line", "pid"]).group_by("input_id", "dump_line")
             .agg(pid=pl.col("pid").first(), last=pl.col("line_no").max())
             .with_columns(pl.col("input_id").cast(pl.UInt32), pl.col("dump_line").cast(pl.UInt32)))
    if dumps.is_empty():
        return df
    parts = [df.filter(pl.col("rank").is_not_null() & pl.col("rank_confidence").is_in(["certain", "derived"])).select(
        pid=pl.coalesce(pl.col("nccl_pid"), pl.col("ray_pid")).cast(pl.Int64), p_rank="rank",
        p_conf="rank_confidence", p_src=pl.concat_str([pl.lit("pid of lines attributed by "), pl.col("rank_source")]))
        .drop_nulls("pid")]
    if "text" in df.columns:
        # a rank's own line that prints a pid (`... on node07, pid 16415`): most likely its own,
        # but nothing standard says so -- derived, at best
        said = df.filter(pl.col("rank").is_not_null() & pl.col("rank_confidence").is_in(["certain", "derived"])
                         & pl.col("text").str.contains("pid", literal=True))
        said = said.select(pid=pl.col("text").str.extract(r"\bpid[:= ]\s*(\d+)\b", 1).cast(pl.Int64, strict=False),
                           p_rank="rank", p_conf=pl.lit("derived"),
                           p_src=pl.concat_str([pl.lit("a pid printed on a line of the rank ("), pl.col("rank_source"),
                                                pl.lit(")")])).drop_nulls("pid")
        parts.append(said)
    if not maps.is_empty():
        parts.append(maps.filter(pl.col("a_kind") == "table").drop_nulls("a_pid").select(
            pid="a_pid", p_rank="a_rank", p_conf=pl.lit("certain"),
            p_src=pl.lit("pid stated by torchrun's failure summary")))
        agent = tables.get("agent")
        if agent is not None and not agent.is_empty() and "input_id" in agent.columns:
            failed = agent.filter(pl.col("kind") == "worker_failed").drop_nulls(["pid", "local_rank"])
            if not failed.is_empty():
                keys = df.select("input_id", "line_no", _okey=_outer_key())
                failed = failed.select(pl.col("input_id").cast(pl.UInt32), pl.col("line_no").cast(pl.UInt32),
                                       pid=pl.col("pid").cast(pl.Int64), a_local=pl.col("local_rank").cast(pl.Int64)
                                       ).join(keys, on=["input_id", "line_no"], how="left")
                failed = _agent_of(failed, maps).join(maps.select("agent", "a_local", "a_rank").unique(["agent", "a_local"]),
                                                      on=["agent", "a_local"], how="inner")
                parts.append(failed.select("pid", p_rank="a_rank", p_conf=pl.lit("certain"), p_src=pl.lit(
                    "pid and local rank of the agent's 'failed (exitcode: C) local_rank: L (pid: P)' line")))
    # the rest is one plan, run in one call (a dozen eager steps cost more than their work)
    pids = pl.concat([part.lazy() for part in parts], how="vertical_relaxed").with_columns(
        _lvl=pl.col("p_conf").replace_strict(_LEVEL, default=9, return_dtype=pl.Int64))
    pids = pids.sort("_lvl").group_by("pid").agg(
        n=pl.col("p_rank").n_unique(), p_rank=pl.col("p_rank").first(), p_conf=pl.col("p_conf").first(),
        p_src=pl.col("p_src").first()).filter(pl.col("n") == 1).drop("n")
    dumped = dumps.lazy().join(pids, on="pid", how="left")
    ids = pl.Series(dumps["input_id"].unique(), dtype=pl.UInt32)
    lines = df.lazy().select("input_id", "line_no").filter(pl.col("input_id").is_in(among(ids))).sort("line_no")
    at = lines.join_asof(dumped.sort("dump_line"), left_on="line_no", right_on="dump_line", by="input_id",
                         strategy="backward", check_sortedness=False).filter(pl.col("line_no") <= pl.col("last"))
    at = at.select("input_id", "line_no", _dump_pid="pid", _r="p_rank",
                   _s=pl.concat_str([pl.lit("py-spy dump of pid "), pl.col("pid").cast(pl.String), pl.lit(": "),
                                     pl.col("p_src")]), _c="p_conf")
    df = df.lazy().join(at, on=["input_id", "line_no"], how="left").with_columns(
        pid=pl.coalesce(pl.col("pid"), pl.col("_dump_pid"))).drop("_dump_pid").collect(engine="in-memory")
    return _better(df, "_r", "_s", "_c")


def _weighted_mode(df: pl.DataFrame, by: str, value: pl.Expr, name: str) -> pl.DataFrame:
    """Per ``by``: the value most lines have (a row counts ``_w`` lines: the first line of a run
    of COLL trace lines stands for the run, ``postmortem.analyzer.bulk``); a tie goes to the smallest."""
    rows = df.select(by, _v=value, _n=pl.col("_w")).drop_nulls("_v")
    return (rows.group_by(by, "_v").agg(_n=pl.col("_n").sum())
            .sort([by, "_n", "_v"], descending=[False, True, False])
            .group_by(by, maintain_order=True).agg(pl.col("_v").first().alias(name)))


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


def _agents_stated(tables: dict[str, pl.DataFrame]) -> bool:
    """Whether any torchrun agent stated its mapping (a failure table): then that statement, not
    the folder layout, decides, and a folder it did not claim stays a guess."""
    exits = tables.get("exits")
    return exits is not None and not exits.is_empty()


def _path_guess(df: pl.DataFrame, hints: pl.DataFrame, world: int | None,
                agents_stated: bool = False) -> pl.DataFrame:
    """torchrun log dirs give a local rank; node order from the folder names is only a guess."""
    hints = hints.filter(pl.col("local_rank").is_not_null()).select("input_id", h_local="local_rank",
                                                                      h_node_dir="node_dir")
    if hints.is_empty():
        return df.with_columns(h_local=pl.lit(None, dtype=pl.Int64))
    dirs = sorted(hints["h_node_dir"].unique().to_list())
    per_node = int(hints["h_local"].max()) + 1
    hints = hints.with_columns(h_guess=pl.col("h_node_dir").replace_strict({d: i for i, d in enumerate(dirs)}) * per_node + pl.col("h_local"))
    df = df.join(hints, on="input_id", how="left")
    guess = pl.col("rank").is_null() & pl.col("h_guess").is_not_null() & pl.col("srun_task").is_null()
    single = not agents_stated and one_agent_alone(df, dirs, per_node, world)
    source, level = ((ONE_AGENT, "derived") if single else
                     ("guessed from folder order x local rank in the torchrun log path", "guessed"))
    return df.with_columns(
        rank=pl.when(guess).then(pl.col("h_guess")).otherwise(pl.col("rank")),
        rank_source=pl.when(guess).then(pl.lit(source)).otherwise(pl.col("rank_source")),
        rank_confidence=pl.when(guess).then(pl.lit(level)).otherwise(pl.col("rank_confidence")),
    ).drop("h_guess", "h_node_dir")


ONE_AGENT = ("local rank of the only torchrun agent in the inputs (its attempt_N/<local rank>/ folders; "
             "no other node is named anywhere, so local rank = global rank)")


def one_agent_alone(df: pl.DataFrame, dirs: list[str], per_node: int, world: int | None) -> bool:
    """One torchrun agent's log folder, and nothing in the inputs that names a second node (a
    second folder, a second NCCL host, a world larger than the agent's workers): the job ran on
    this one node, so a local rank is the global rank. Still only ``derived``: the logs of other
    nodes could have been left out, which is why the source says what it assumed."""
    if len(dirs) != 1 or (world is not None and world != per_node):
        return False
    hosts = df["nccl_host"].drop_nulls().n_unique() if "nccl_host" in df.columns else 0
    return hosts <= 1


def _nodes(df: pl.DataFrame, tables: dict[str, pl.DataFrame], inputs: pl.DataFrame) -> pl.DataFrame:
    """Node per line: NCCL's host, a host tag, the stream's NCCL host, or the rank's host."""
    key = ["input_id", "srun_task", "mpi_rank", "local_rank", "host_tag", "ray_pid"]
    plan = df.lazy()    # one plan, run in one call (a dozen eager steps cost more than their work)
    stream_host = plan.filter(pl.col("nccl_host").is_not_null()).group_by(key).agg(
        n=pl.col("nccl_host").n_unique(), s_host=pl.col("nccl_host").first()).filter(pl.col("n") == 1).drop("n")
    plan = plan.join(stream_host, on=key, how="left", nulls_equal=True)
    rank_host = _weighted_mode(plan.filter(pl.col("rank").is_not_null()), "rank", pl.col("nccl_host"), "r_host")
    exits = tables.get("exits")
    if exits is not None and not exits.is_empty():
        extra = exits.lazy().drop_nulls(["rank", "host"]).select("rank", r_host2=_short(pl.col("host"))).unique("rank")
        rank_host = rank_host.join(extra, on="rank", how="full", coalesce=True).select(
            "rank", r_host=pl.coalesce("r_host", "r_host2"))
    plan = plan.join(rank_host, on="rank", how="left")
    plan = plan.join(_srun_task_hosts(tables).lazy(), on="srun_task", how="left")
    node = pl.coalesce(pl.col("nccl_host"), _short(pl.col("host_tag")), pl.col("s_host"), pl.col("r_host"),
                       pl.col("t_host"))
    source = (pl.when(pl.col("nccl_host").is_not_null()).then(pl.lit("NCCL line prefix"))
              .when(pl.col("host_tag").is_not_null()).then(pl.lit("launcher host prefix"))
              .when(pl.col("s_host").is_not_null()).then(pl.lit("NCCL lines of the same stream"))
              .when(pl.col("r_host").is_not_null()).then(pl.lit("host of the rank"))
              .when(pl.col("t_host").is_not_null()).then(pl.lit("srun task exit line (task -> host)")))
    return plan.with_columns(node=node, node_source=source).drop("s_host", "r_host", "t_host").collect(engine="in-memory")


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


def _attempts(df: pl.DataFrame, tables: dict[str, pl.DataFrame], hints: pl.DataFrame) -> pl.DataFrame:
    """torchrun's attempt_N folder, else repeated NCCL version banners within one file."""
    # one plan, run in one call (eager steps cost more than their work on a small run)
    df = df.lazy().with_columns(p_attempt=pl.col("input_id").replace_strict(
        hints["input_id"], hints["attempt"], default=None, return_dtype=pl.Int64))
    versions = tables.get("nccl_versions")
    if versions is not None and not versions.is_empty():
        marks = versions.lazy().select("input_id", "line_no", banner=pl.lit(True))
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
    return df.with_columns(attempt=attempt, attempt_source=source).drop(
        "p_attempt", "banner", "_n", "b_attempt", "hb").collect(engine="in-memory")


def _ranks_table(df: pl.DataFrame, procs: pl.DataFrame, tables: dict[str, pl.DataFrame]) -> pl.DataFrame:
    known = df.lazy().filter(pl.col("rank").is_not_null())    # one plan, run in one call
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
        gpu = procs.lazy().filter(pl.col("p_bus_id").is_not_null()).group_by("p_rank").agg(
            bus_id=pl.col("p_bus_id").last(), nccl_cuda_dev=pl.col("p_cuda_dev").last())
        agg = agg.join(gpu, left_on="rank", right_on="p_rank", how="left")
        agg = agg.with_columns(cuda_dev=pl.coalesce("nccl_cuda_dev", "cuda_dev")).drop("nccl_cuda_dev")
    else:
        agg = agg.with_columns(bus_id=pl.lit(None, dtype=pl.String))
    exits = tables.get("exits")
    if exits is not None and not exits.is_empty():
        # torchrun's failure summary states each rank's pid and host: fill what the lines lacked.
        lr = exits.lazy().drop_nulls(["rank"]).group_by("rank").agg(
            x_local=pl.col("local_rank").drop_nulls().first(), x_pid=pl.col("pid").drop_nulls().last(),
            x_node=_short(pl.col("host").drop_nulls().first()))
        agg = agg.join(lr, on="rank", how="left").with_columns(
            local_rank=pl.coalesce("local_rank", "x_local"), pid=pl.coalesce("pid", "x_pid"),
            node=pl.coalesce("node", "x_node")).drop("x_local", "x_pid", "x_node")
    agg = agg.with_columns(local_rank=pl.coalesce(pl.col("local_rank"), pl.col("cuda_dev")),
                           bus_id=pl.col("bus_id").map_elements(bus_id_to_pci, return_dtype=pl.String))
    return agg.select("rank", "node", "pid", "local_rank", "cuda_dev", "bus_id", "source", "confidence", "inputs").sort(
        "rank").collect(engine="in-memory")
