"""Who talks to whom over what: NCCL communicators, their members, ring order and every hop.

Built over all inputs at once from the NCCL parser's rows (``docs/formats/nccl.md`` section 5):

``nccl_processes``     per (host, pid): NCCL version (exact, or the range its line shapes
                       allow, section 4), network chosen, bootstrap and OOB interfaces, NICs
``nccl_communicators`` one row per communicator across ranks: how it was identified (commId;
                       a split's parent and colour; or, before 2.16, init order), size, members
                       seen, whether every member completed init
``nccl_members``       communicator rank -> host, pid, GPU (cuda/nvml device, PCI bus id), global rank
``nccl_hops``          one row per (communicator, channel, phase, src -> dst): the transport
                       from the sender's line, the NIC of each side, GDR, and the tier it runs on
``nccl_ring_order``    ring order per communicator and channel, rebuilt from rank 0's channel
                       lines, GRAPH ring lines, or the ring hops themselves
``nccl_fingerprints``  per process, the version-specific line shapes it printed and the
                       release range each allows (nccl.md section 4)

``nccl_env`` and ``nccl_tuning`` rows printed during a communicator's init get its ``comm_key``.

A connection line is attributed to a communicator by the printing process and the rank it
names for itself (sender for P2P/SHM/``[send]``, receiver for ``[receive]``), preferring a
communicator initialised on the same thread and the nearest init in file order (section 5.1).
"""

from __future__ import annotations

import polars as pl

from postmortem.parsers.base import collect_each
from postmortem.parsers.nccl import bus_id_to_pci, fingerprints

# How fast a tier is, roughly, for ordering and "slowest hop" questions (lower = faster).
# The hardware model (bandwidth per tier) prices them; here only the order matters.
TIER_ORDER = {"NVLink": 0, "NVLink via GPU": 1, "P2P": 2, "PCIe P2P": 3, "IB GDR": 4, "RoCE GDR": 4, "NET GDR": 4,
              "IB": 5, "RoCE": 5, "NET": 5, "CollNet": 4, "NVLS": 0, "SHM": 6, "Socket": 7, "NET on one host": 8}

EMPTY = {
    "nccl_processes": {"host": pl.String, "pid": pl.Int64, "version": pl.String, "version_source": pl.String,
                       "version_min": pl.String, "version_max": pl.String, "network": pl.String,
                       "bootstrap_if": pl.String, "bootstrap_addr": pl.String, "oob_if": pl.String,
                       "nics": pl.List(pl.String), "socket_ifs": pl.List(pl.String)},
    "nccl_communicators": {"comm_key": pl.String, "comm_id": pl.String, "identified_by": pl.String,
                           "nranks": pl.Int64, "members_seen": pl.Int64, "init_complete": pl.Int64,
                           "nnodes": pl.Int64, "hosts": pl.List(pl.String), "versions": pl.List(pl.String)},
    "nccl_members": {"comm_key": pl.String, "rank": pl.Int64, "nranks": pl.Int64, "host": pl.String, "pid": pl.Int64,
                     "tid": pl.Int64, "comm": pl.String, "cuda_dev": pl.Int64, "nvml_dev": pl.Int64,
                     "bus_id": pl.String, "pci": pl.String, "global_rank": pl.Int64, "completed": pl.Boolean,
                     "comm_id": pl.String, "parent": pl.String, "color": pl.Int64, "identified_by": pl.String,
                     "input_id": pl.UInt32, "line_no": pl.UInt32, "complete_line": pl.UInt32},
    "nccl_hops": {"comm_key": pl.String, "channel": pl.Int64, "phase": pl.String, "conn_index": pl.Int64,
                  "src_rank": pl.Int64, "dst_rank": pl.Int64, "src_host": pl.String, "dst_host": pl.String,
                  "src_gpu": pl.Int64, "dst_gpu": pl.Int64, "src_pci": pl.String, "dst_pci": pl.String,
                  "transport": pl.String, "detail": pl.String,
                  "net": pl.String, "send_nic": pl.String, "recv_nic": pl.String, "link": pl.String,
                  "gdr": pl.Boolean, "send_gdr": pl.Boolean, "recv_gdr": pl.Boolean, "gdr_sides": pl.String,
                  "send_flags": pl.String, "recv_flags": pl.String,
                  "pxn_via": pl.Int64, "shared": pl.Boolean, "tier": pl.String,
                  "tier_order": pl.Int64, "same_host": pl.Boolean, "input_id": pl.UInt32, "line_no": pl.UInt32,
                  "recv_input_id": pl.UInt32, "recv_line_no": pl.UInt32},
    "nccl_ring_order": {"comm_key": pl.String, "channel": pl.Int64, "order": pl.List(pl.Int64), "source": pl.String,
                        "complete": pl.Boolean, "agrees_with_hops": pl.Boolean},
}


def _empty(name: str) -> pl.DataFrame:
    return pl.DataFrame(schema=EMPTY[name])


def _get(tables: dict[str, pl.DataFrame], name: str) -> pl.DataFrame | None:
    frame = tables.get(name)
    return None if frame is None or frame.is_empty() else frame


def build(tables: dict[str, pl.DataFrame], ranks: pl.DataFrame | None = None) -> dict[str, pl.DataFrame]:
    """All ``nccl_*`` model tables (empty frames when the run has no NCCL output)."""
    out = {name: _empty(name) for name in EMPTY}
    shapes = _get(tables, "nccl_shapes")
    fps = fingerprints(shapes) if shapes is not None else None
    if fps is not None:
        out["nccl_fingerprints"] = fps
    processes = _processes(tables, fps)
    if processes is not None:
        out["nccl_processes"] = processes
    members = _members(tables, ranks)
    if members is None:
        if _get(tables, "nccl_connections") is None:
            return out
        members = _empty("nccl_members")
    out["nccl_members"] = members
    conns = _attribute(_get(tables, "nccl_connections"), members, tables, processes)
    hops = _hops(conns, members, tables)
    out["nccl_hops"] = hops
    out["nccl_ring_order"] = _ring_order(tables, members, hops)
    out["nccl_hops"] = _settle_phase(hops, out["nccl_ring_order"])
    out["nccl_communicators"] = _communicators(members, processes)
    keys = (members.lazy().select("host", "pid", comm="comm", comm_key="comm_key").unique(["host", "pid", "comm"])
            .collect(engine="in-memory").lazy())     # one choice of comm_key, shared by both tables
    keyed = {name: frame.lazy().drop("comm_key", strict=False).join(keys, on=["host", "pid", "comm"], how="left")
             for name in ("nccl_env", "nccl_tuning")
             if (frame := _get(tables, name)) is not None and "comm" in frame.columns}
    out.update(zip(keyed, collect_each(list(keyed.values()))))     # both in one Polars call
    return out


# -- processes ---------------------------------------------------------------------------------------


def _minor_text(minor: pl.Expr) -> pl.Expr:
    return pl.concat_str([pl.lit("2."), minor.cast(pl.String)])


def _processes(tables: dict[str, pl.DataFrame], fps: pl.DataFrame | None) -> pl.DataFrame | None:
    """Per NCCL process, its version: stated, or the range its line shapes (``fps``, the
    ``nccl_fingerprints`` rows) allow."""
    lines = _get(tables, "nccl_lines")
    if lines is None:
        return None
    procs = lines.lazy().filter(pl.col("host").is_not_null()).select("host", "pid").unique().collect(engine="in-memory")
    versions = _get(tables, "nccl_versions")
    job_versions: list[str] = []
    if versions is not None:
        exact = versions.filter(pl.col("pid").is_not_null()).group_by("host", "pid").agg(exact=pl.col("version").first())
        procs = procs.join(exact, on=["host", "pid"], how="left", nulls_equal=True)
        job_versions = versions.filter(pl.col("pid").is_null())["version"].unique().sort().to_list()
    else:
        procs = procs.with_columns(exact=pl.lit(None, dtype=pl.String))
    if fps is not None and not fps.is_empty():
        ranges = fps.group_by("host", "pid").agg(lo=pl.col("min_minor").max(), hi=pl.col("max_minor").min(),
                                                 evidence=pl.col("evidence"))
        procs = procs.join(ranges, on=["host", "pid"], how="left", nulls_equal=True)
    else:
        procs = procs.with_columns(lo=pl.lit(None, dtype=pl.Int64), hi=pl.lit(None, dtype=pl.Int64))
    procs = procs.with_columns(_version_decision(job_versions))
    return procs.join(_net_summary(tables), on=["host", "pid"], how="left", nulls_equal=True).select(
        list(EMPTY["nccl_processes"])).sort("host", "pid")


def _version_decision(job_versions: list[str]) -> list[pl.Expr]:
    """Exact version from the process's own line (2.22+); else rank 0's bare line (before 2.22
    only rank 0 prints it) when this process's line shapes allow it; else the range."""
    minor = lambda v: int(v.split(".")[1])  # noqa: E731
    job = job_versions[0] if len(job_versions) == 1 else None
    consistent = (pl.lit(job is not None) & (pl.col("lo").fill_null(0) <= (minor(job) if job else 0))
                  & (pl.col("hi").fill_null(99) >= (minor(job) if job else 0)))
    conflicting = pl.col("lo") > pl.col("hi")
    # A printed version always wins over one inferred from line shapes (issue 22): shapes only
    # say which releases a process's lines allow, and a disagreement is noted, not believed.
    version = pl.coalesce(pl.col("exact"), pl.lit(job))
    source = (pl.when(pl.col("exact").is_not_null()).then(pl.lit("its own NCCL version line"))
              .when(pl.lit(job is not None) & consistent & ~conflicting.fill_null(False)).then(
                  pl.lit("rank 0's version line; this process's line shapes agree"))
              .when(pl.lit(job is not None) & pl.col("lo").is_not_null() & ~conflicting.fill_null(False)).then(
                  pl.format("rank 0's version line (this process's line shapes say 2.{}-2.{}: a different build?)",
                            "lo", "hi"))
              .when(pl.lit(job is not None)).then(pl.lit("rank 0's version line"))
              .when(conflicting.fill_null(False)).then(pl.lit("inconsistent line shapes (a patched or mixed build)"))
              .when(pl.col("lo").is_not_null()).then(pl.format("line shapes say 2.{}-2.{}", "lo", "hi")))
    return [version.alias("version"), source.alias("version_source"),
            _minor_text(pl.col("lo")).alias("version_min"), _minor_text(pl.col("hi")).alias("version_max")]


def _net_summary(tables: dict[str, pl.DataFrame]) -> pl.DataFrame:
    net = _get(tables, "nccl_net")
    schema = {"host": pl.String, "pid": pl.Int64, "network": pl.String, "bootstrap_if": pl.String,
              "bootstrap_addr": pl.String, "oob_if": pl.String, "nics": pl.List(pl.String), "socket_ifs": pl.List(pl.String)}
    if net is None:
        return pl.DataFrame(schema=schema)
    net = net.sort("input_id", "line_no", "item", nulls_last=True)
    kind = pl.col("kind")
    nic = pl.concat_str([pl.col("name"), pl.lit(":"), pl.col("port").cast(pl.String), pl.lit("/"), pl.col("link")])
    return net.group_by("host", "pid").agg(
        network=pl.col("name").filter(kind == "network").last(),
        bootstrap_if=pl.col("name").filter(kind == "bootstrap_if").first(),
        bootstrap_addr=pl.col("address").filter(kind == "bootstrap_if").first(),
        oob_if=pl.col("name").filter(kind == "oob").first(),
        nics=nic.filter((kind == "ib_nics") & pl.col("name").is_not_null()).unique(maintain_order=True),
        socket_ifs=pl.concat_str([pl.col("name"), pl.lit(":"), pl.col("address")]).filter(kind == "socket_ifs").unique(maintain_order=True),
    ).cast(schema)


# -- communicators and members ---------------------------------------------------------------------


def _members(tables: dict[str, pl.DataFrame], ranks: pl.DataFrame | None) -> pl.DataFrame | None:
    comms = _get(tables, "nccl_comms")
    if comms is None:
        return None
    comms = comms.filter(pl.col("comm").is_not_null()).sort("input_id", "line_no")
    init = pl.col("phase").str.starts_with("Init")
    inst = comms.group_by("host", "pid", "comm", maintain_order=True).agg(
        rank=pl.col("rank").drop_nulls().first(), nranks=pl.col("nranks").drop_nulls().first(),
        cuda_dev=pl.col("cuda_dev").filter(init).drop_nulls().first(), nvml_dev=pl.col("nvml_dev").drop_nulls().first(),
        bus_id=pl.col("bus_id").drop_nulls().first(), comm_id=pl.col("comm_id").drop_nulls().first(),
        parent=pl.col("parent").drop_nulls().first(), color=pl.col("color").drop_nulls().first(),
        tid=pl.col("tid").filter(init).first(), input_id=pl.col("input_id").first(), line_no=pl.col("line_no").first(),
        complete_line=pl.col("line_no").filter(pl.col("phase") == "Init COMPLETE").first(),
        completed=(pl.col("phase") == "Init COMPLETE").any(),
    )
    inst = _comm_keys(inst)
    inst = inst.with_columns(pci=pl.col("bus_id").map_elements(bus_id_to_pci, return_dtype=pl.String))
    if ranks is not None and not ranks.is_empty():
        g = ranks.lazy().select(host=pl.col("node"), pid="pid", global_rank="rank").drop_nulls(["host", "pid"]).unique(["host", "pid"])
        inst = inst.lazy().join(g, on=["host", "pid"], how="left").collect(engine="in-memory")
    else:
        inst = inst.with_columns(global_rank=pl.lit(None, dtype=pl.Int64))
    return inst.select(list(EMPTY["nccl_members"]))


def _collided(inst: pl.DataFrame, key: str) -> list:
    """The values of ``key`` that more than one instance of the same rank share (one query)."""
    return inst.lazy().group_by(key, "rank").agg(n=pl.len()).filter(pl.col("n") > 1).select(
        pl.col(key).unique()).collect(engine="in-memory")[key].to_list()


def _comm_keys(inst: pl.DataFrame) -> pl.DataFrame:
    """A key shared by every member of one communicator (section 5.1).

    commId (2.16+) when printed. A split without commId (2.23+): its parent's key on the same
    process plus the colour. Otherwise (before 2.16) the k-th communicator of this size that
    the process initialised; when that puts two processes on one rank (e.g. several 8-rank
    groups), per host as well; when even that collides the key says so."""
    inst = inst.with_columns(_order=pl.int_range(pl.len()).over("host", "pid", "nranks"))
    by_order = pl.format("size{}#{}", "nranks", "_order")
    inst = inst.with_columns(_k0=by_order)
    dup = _collided(inst, "_k0")
    per_host = pl.format("size{}#{}@{}", "nranks", "_order", "host")
    inst = inst.with_columns(_k1=pl.when(pl.col("_k0").is_in(dup)).then(per_host).otherwise(pl.col("_k0")))
    dup2 = _collided(inst, "_k1")
    heuristic = pl.when(pl.col("_k1").is_in(dup2)).then(pl.lit("init order (ambiguous: ranks collide)")) \
        .when(pl.col("_k1") != pl.col("_k0")).then(pl.lit("init order and host")).otherwise(pl.lit("init order"))
    parents = inst.select("host", "pid", parent="comm", _parent_id="comm_id")
    inst = inst.join(parents, on=["host", "pid", "parent"], how="left")
    split_key = pl.format("{}/color{}", "_parent_id", "color")
    key = (pl.when(pl.col("comm_id").is_not_null()).then(pl.col("comm_id"))
           .when(pl.col("parent").is_not_null() & pl.col("_parent_id").is_not_null()).then(split_key)
           .otherwise(pl.col("_k1")))
    how = (pl.when(pl.col("comm_id").is_not_null()).then(pl.lit("commId"))
           .when(pl.col("parent").is_not_null() & pl.col("_parent_id").is_not_null()).then(pl.lit("split parent and color"))
           .otherwise(heuristic))
    return inst.with_columns(comm_key=key, identified_by=how).drop("_order", "_k0", "_k1", "_parent_id")


def _communicators(members: pl.DataFrame, processes: pl.DataFrame | None) -> pl.DataFrame:
    m = members
    if processes is not None:
        m = m.join(processes.select("host", "pid", "version"), on=["host", "pid"], how="left")
    else:
        m = m.with_columns(version=pl.lit(None, dtype=pl.String))
    return m.group_by("comm_key").agg(
        comm_id=pl.col("comm_id").drop_nulls().first(), identified_by=pl.col("identified_by").first(),
        nranks=pl.col("nranks").max(), members_seen=pl.col("rank").n_unique(),
        init_complete=pl.col("rank").filter(pl.col("completed")).n_unique(),
        nnodes=pl.col("host").n_unique(), hosts=pl.col("host").unique().sort(),
        versions=pl.col("version").drop_nulls().unique().sort(),
        _first=pl.col("line_no").min(),
    ).sort("nranks", "comm_key", descending=[True, False]).drop("_first")


# -- connections -> hops ------------------------------------------------------------------------------


def _attribute(conns: pl.DataFrame | None, members: pl.DataFrame, tables: dict[str, pl.DataFrame],
               processes: pl.DataFrame | None) -> pl.DataFrame | None:
    """Each connection line -> the communicator instance on its process where it has that rank
    and whose member at the peer's rank is the GPU the line names (section 5.1)."""
    if conns is None:
        return None
    receive = pl.col("side") == "receive"
    conns = conns.with_columns(
        _me=pl.when(receive).then(pl.col("dst")).otherwise(pl.col("src")),
        _peer=pl.when(receive).then(pl.col("src")).otherwise(pl.col("dst")),
        _peer_dev=pl.when(receive).then(pl.col("src_dev")).otherwise(pl.col("dst_dev")),
        _row=pl.int_range(pl.len()))
    conns = _nearest_instance(_with_blocks(conns, tables), members, "_me", peers=True)
    # SHM lines never print a connection index: take the one the other lines of the same setup
    # block printed, when they agree.
    in_block = pl.col("_block").is_not_null()
    conns = conns.with_columns(
        _idx=pl.when(in_block & (pl.col("conn_index").n_unique().over("_block") == 1)).then(
            pl.col("conn_index").max().over("_block")))
    # Before 2.22 rings and trees are connected during init, so a line without a connection
    # index (P2P before 2.14, NET before 2.12, SHM always) printed after the communicator's Init
    # COMPLETE is a lazy point-to-point connection. From 2.22 rings connect at the first
    # collective, after Init COMPLETE, but then a `Connected all ...` marker follows them on
    # their thread; lazy p2p connections print none.
    conns = conns.join(_runtime_connect(processes), on=["host", "pid"], how="left")
    after_init = (pl.col("input_id") == pl.col("comm_input")) & (pl.col("line_no") > pl.col("comm_complete_line"))
    lazy = (pl.col("conn_index").is_null() & pl.col("_idx").is_null() & after_init.fill_null(False)
            & (~pl.col("_runtime_connect").fill_null(False) | pl.col("_block").is_null()))
    phase = pl.when((pl.col("_idx") == 1) | lazy).then(pl.lit("p2p")).otherwise(pl.col("phase"))
    return conns.with_columns(phase=phase).drop("comm_input", "comm_complete_line", "_block", "_idx", "_runtime_connect")


def _runtime_connect(processes: pl.DataFrame | None) -> pl.DataFrame:
    """(host, pid) of processes running NCCL 2.22 or later (by version line or line shapes)."""
    schema = {"host": pl.String, "pid": pl.Int64, "_runtime_connect": pl.Boolean}
    if processes is None or processes.is_empty():
        return pl.DataFrame(schema=schema)
    minor = pl.coalesce(pl.col("version").str.extract(r"^2\.(\d+)", 1), pl.col("version_min").str.extract(r"^2\.(\d+)", 1))
    return processes.select("host", "pid", _runtime_connect=minor.cast(pl.Int64) >= 22).cast(schema)


def _with_blocks(conns: pl.DataFrame, tables: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """``_block``: the lines one thread printed up to its next ``Connected all ...`` marker. They
    set up one communicator, so a line that can only belong to one candidate decides for all."""
    info = _get(tables, "nccl_info")
    if info is None or "kind" not in info.columns:
        return conns.with_columns(_block=pl.lit(None, dtype=pl.String))
    key = ["input_id", "host", "pid", "tid"]
    # A ring and the trees that follow it on one thread are one communicator's setup: the block
    # ends at `Connected all trees` (or NVLS), not at `Connected all rings`.
    markers = info.filter((pl.col("kind") == "connected") & (pl.col("key") != "Connected all rings")).select(
        *key, _mline=pl.col("line_no")).sort("_mline")
    if markers.is_empty():
        return conns.with_columns(_block=pl.lit(None, dtype=pl.String))
    joined = conns.lazy().with_columns(_l=pl.col("line_no")).sort("_l").join_asof(
        markers.lazy(), left_on="_l", right_on="_mline", by=key, strategy="forward", check_sortedness=False)
    block = pl.when(pl.col("_mline").is_not_null()).then(pl.format("{}:{}:{}:{}:{}", *key, "_mline"))
    return joined.with_columns(_block=block).drop("_l", "_mline").sort("_row").collect(engine="in-memory")


UNIDENTIFIED = "unidentified (no init line names it)"


def _nearest_instance(rows: pl.DataFrame, members: pl.DataFrame, rank_col: str, peers: bool = False) -> pl.DataFrame:
    """Each row (a line naming ``rank_col`` as its own rank) -> the communicator instance on the
    same process with that rank. When the process's own init line for that rank is missing (a
    cut excerpt) but the process holds exactly one communicator, the row goes to that one."""
    picked = _nearest_by_rank(rows, members, rank_col, peers)
    lone = members.lazy().group_by("host", "pid").agg(_only=pl.col("comm_key").unique()).filter(
        pl.col("_only").list.len() == 1).with_columns(_only=pl.col("_only").list.first())
    picked = picked.join(lone, on=["host", "pid"], how="left")
    # the whole choice is one plan, run in one Polars call (a call per step cost more than the work)
    return picked.with_columns(comm_key=pl.coalesce("comm_key", "_only")).drop("_only").collect(engine="in-memory")


def _nearest_by_rank(rows: pl.DataFrame, members: pl.DataFrame, rank_col: str, peers: bool) -> pl.LazyFrame:
    """The plan of: rank the candidate instances of each row, best first:

    1. same input file;
    2. consistent with the line (``peers``): the peer rank exists in the communicator and its
       member there is the GPU the line names (bus id before 2.18, device index from 2.18);
       judged over the whole ``_block`` when the row has one;
    3. printed during that communicator's init (before its Init COMPLETE), nearest completion
       first; else after it, nearest first (lazy connections);
    4. same thread as the init."""
    cand = members.lazy().select("host", "pid", "comm_key", "nranks", _rank="rank", _tid="tid", _input="input_id",
                                 _start="line_no", _end="complete_line")
    joined = rows.lazy().join(cand, left_on=["host", "pid", rank_col], right_on=["host", "pid", "_rank"], how="left")
    bad = pl.lit(False)
    if peers:
        peer = members.lazy().select("comm_key", _peer="rank", _peer_bus="bus_id",
                                     _peer_idx=pl.coalesce("nvml_dev", "cuda_dev"))
        joined = joined.join(peer, on=["comm_key", "_peer"], how="left")
        dev = pl.col("_peer_dev").str.to_lowercase()
        hexlike = (dev.str.len_chars() >= 3) | dev.str.contains("[a-f]")
        bad = ((pl.col("_peer") >= pl.col("nranks")).fill_null(False)
               | (hexlike & (pl.col("_peer_bus").str.to_lowercase() != dev)).fill_null(False)
               | (~hexlike & (dev.cast(pl.Int64, strict=False) != pl.col("_peer_idx"))).fill_null(False))
    joined = joined.with_columns(_bad=bad)
    if peers:
        joined = joined.with_columns(_bad=pl.when(pl.col("_block").is_not_null())
                                     .then(pl.col("_bad").any().over("_block", "comm_key")).otherwise(pl.col("_bad")))
    line, end = pl.col("line_no").cast(pl.Int64), pl.col("_end").cast(pl.Int64)
    during = (line <= end).fill_null(False)
    score = pl.struct(
        other_input=(pl.col("_input") != pl.col("input_id")).fill_null(True),
        bad=pl.col("_bad"),
        after=~during,
        distance=pl.when(during).then(end - line).otherwise((line - end).abs()).fill_null(
            (line - pl.col("_start").cast(pl.Int64)).abs()).fill_null(2**31),
        other_tid=(pl.col("_tid") != pl.col("tid")).fill_null(True),
    )
    joined = joined.with_columns(_score=score).sort("_row", "_score")
    drop = ["_tid", "_start", "_score", "_bad"] + (["_peer_bus", "_peer_idx"] if peers else [])
    return joined.unique("_row", keep="first", maintain_order=True).drop(drop).rename(
        {"_input": "comm_input", "_end": "comm_complete_line"})


def _hops(conns: pl.DataFrame | None, members: pl.DataFrame, tables: dict[str, pl.DataFrame]) -> pl.DataFrame:
    if conns is None:
        return _empty("nccl_hops")
    # Without any init line naming it, a connection's communicator is unknown; rank numbers
    # are still communicator ranks, so they are grouped under one "unidentified" key.
    conns = conns.with_columns(comm_key=pl.coalesce(pl.col("comm_key"), pl.lit(UNIDENTIFIED)))
    conns = _with_nic_names(conns, tables)
    # The connection slot: the printed index, else (releases that print none) 1 for a lazy
    # point-to-point connection and 0 for ring/tree ones, so a p2p hop between ring
    # neighbours is not merged with the ring hop.
    # (the steps up to the hosts' fill as one plan: a Polars call each cost more than their work)
    conns = conns.lazy().with_columns(
        _slot=pl.coalesce(pl.col("conn_index"), pl.when(pl.col("phase") == "p2p").then(1).otherwise(0)))
    key = ["comm_key", "channel", "_slot", "src", "dst"]
    conns = conns.with_columns(_send_flags=pl.col("detail"))
    sender = conns.filter(pl.col("side").is_null() | (pl.col("side") == "send"))
    receiver = conns.filter(pl.col("side") == "receive").unique(key, keep="first")
    sender = sender.unique(key, keep="first")
    # Both sides describe the same hop; a hop whose sender's log is missing keeps the receiver's view.
    shared_cols = ["transport", "detail", "net", "phase", "pxn_via", "shared", "link", "nranks", "conn_index"]
    hops = sender.join(receiver.select(*key, *shared_cols, recv_nic="nic_name", _recv_host="host", _recv_gdr="gdr",
                                       _recv_flags="detail", _recv_input="input_id", _recv_line="line_no"),
                       on=key, how="full", coalesce=True, nulls_equal=True, suffix="_r")
    hops = hops.with_columns([pl.coalesce(c, f"{c}_r").alias(c) for c in shared_cols]).drop([f"{c}_r" for c in shared_cols])
    where = members.lazy().select("comm_key", "rank", _m_host="host", _m_gpu="cuda_dev", _m_pci="pci")
    for side in ("src", "dst"):
        hops = hops.join(where.rename({"rank": side, "_m_host": f"_{side}_host", "_m_gpu": f"{side}_gpu",
                                       "_m_pci": f"{side}_pci"}), on=["comm_key", side], how="left")
    printed_intra = pl.col("transport").is_in(["P2P", "SHM"])
    hops = hops.with_columns(
        src_host=pl.coalesce(pl.when(pl.col("side") == "send").then(pl.col("host")), pl.col("_src_host"),
                             pl.when(printed_intra).then(pl.col("host"))),
        dst_host=pl.coalesce(pl.col("_recv_host"), pl.col("_dst_host"), pl.when(printed_intra).then(pl.col("host"))),
        send_nic=pl.when(pl.col("side") == "send").then(pl.col("nic_name")),
        # Each side of a NET hop says for itself whether it uses GPUDirect RDMA (nccl.md 3.7): the
        # sender's `[send] via NET/IB/0/GDRDMA` is about the sending node only.
        send_gdr=pl.when(pl.col("side") == "send").then(pl.col("gdr").fill_null(False)),
        recv_gdr=pl.when(pl.col("_recv_line").is_not_null()).then(pl.col("_recv_gdr").fill_null(False)),
        send_flags=pl.when(pl.col("side") == "send").then(pl.col("_send_flags")),
        recv_flags=pl.when(pl.col("_recv_line").is_not_null()).then(pl.col("_recv_flags")),
        input_id=pl.coalesce("input_id", "_recv_input"), line_no=pl.coalesce("line_no", "_recv_line"),
        recv_input_id=pl.col("_recv_input"), recv_line_no=pl.col("_recv_line"),
    )
    known = pl.concat_list(pl.col("send_gdr"), pl.col("recv_gdr")).list.drop_nulls()
    hops = hops.with_columns(
        # a hop is GDR when every side that logged its line has it
        gdr=(known.list.len() > 0) & known.list.all(),
        gdr_sides=pl.when(pl.col("send_gdr").is_not_null() & pl.col("recv_gdr").is_not_null()).then(
            pl.when(pl.col("send_gdr") & pl.col("recv_gdr")).then(pl.lit("both"))
            .when(pl.col("send_gdr")).then(pl.lit("send only"))
            .when(pl.col("recv_gdr")).then(pl.lit("receive only"))
            .otherwise(pl.lit("neither")))
        .when(pl.col("send_gdr").is_not_null()).then(
            pl.when(pl.col("send_gdr")).then(pl.lit("send yes, receive not logged"))
            .otherwise(pl.lit("send no, receive not logged")))
        .when(pl.col("recv_gdr").is_not_null()).then(
            pl.when(pl.col("recv_gdr")).then(pl.lit("receive yes, send not logged"))
            .otherwise(pl.lit("receive no, send not logged")))).collect(engine="in-memory")
    plan = _fill_hosts(hops).with_columns(same_host=pl.col("src_host") == pl.col("dst_host"))
    plan = plan.with_columns(tier=_tier(tables)).with_columns(
        tier_order=pl.col("tier").replace_strict(TIER_ORDER, default=9, return_dtype=pl.Int64))
    # input_id and line_no break ties (hops of one channel whose ranks are unknown): without them
    # such rows came out in a different order from one run to the next
    return plan.rename({"src": "src_rank", "dst": "dst_rank"}).select(list(EMPTY["nccl_hops"])).sort(
        "comm_key", "channel", "phase", "src_rank", "input_id", "line_no", nulls_last=True, maintain_order=True
    ).collect(engine="in-memory")


def _fill_hosts(hops: pl.DataFrame) -> pl.LazyFrame:
    """A hop whose other side's line is missing (a NET hop seen from one side only, no init line
    naming the member) takes that rank's host from the communicator's other hops, when they
    agree on one host for it (an excerpt without init lines still shows which hops stay on a host).
    The plan of it: ``_hops`` runs it with its last steps."""
    sides = pl.concat([hops.lazy().select("comm_key", _r="src", _h="src_host"),
                       hops.lazy().select("comm_key", _r="dst", _h="dst_host")])
    known = sides.drop_nulls().group_by("comm_key", "_r").agg(_hs=pl.col("_h").unique()).filter(
        pl.col("_hs").list.len() == 1).select("comm_key", "_r", _h=pl.col("_hs").list.first()).collect(engine="in-memory")
    plan = hops.lazy()
    if known.is_empty():
        return plan
    for side in ("src", "dst"):
        plan = plan.join(known.lazy().rename({"_r": side}), on=["comm_key", side], how="left").with_columns(
            pl.coalesce(f"{side}_host", "_h").alias(f"{side}_host")).drop("_h")
    return plan


def _with_nic_names(conns: pl.DataFrame, tables: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """``NET/IB/2`` names the printing process's NIC #2: look its name and link layer up."""
    net = _get(tables, "nccl_net")
    if net is None:
        return conns.with_columns(nic_name=pl.lit(None, dtype=pl.String), link=pl.lit(None, dtype=pl.String))
    nics = net.filter(pl.col("kind") == "ib_nics", pl.col("index").is_not_null()).group_by("host", "pid", "index").agg(
        nic_name=pl.col("name").unique(maintain_order=True).str.join("+"), link=pl.col("link").first())
    conns = conns.join(nics, left_on=["host", "pid", "nic"], right_on=["host", "pid", "index"], how="left")
    return conns.with_columns(nic_name=pl.coalesce(pl.col("nic_name"),
                                                   pl.when(pl.col("nic").is_not_null()).then(
                                                       pl.format("{}/{}", "net", "nic"))))


def _tier(tables: dict[str, pl.DataFrame]) -> pl.Expr:
    """What the hop runs on (nccl.md section 5.3). P2P is NVLink when NCCL used read mode or the
    GRAPH search reported an NVLink intra-node path; PCIe when it reported a PCIe path type."""
    graph = _get(tables, "nccl_graph")
    nvl_hosts, pcie_hosts = [], []
    if graph is not None and "type_intra" in graph.columns:
        types = graph.filter(pl.col("kind") == "graph_pattern").group_by("host").agg(t=pl.col("type_intra").unique())
        nvl_hosts = types.filter(pl.col("t").list.contains("NVL"))["host"].to_list()
        pcie_hosts = types.filter(~pl.col("t").list.contains("NVL") & pl.col("t").list.eval(
            pl.element().is_in(["PIX", "PXB", "PHB", "SYS"])).list.any())["host"].to_list()
    t, net, link = pl.col("transport"), pl.col("net").fill_null(""), pl.col("link").fill_null("")
    fabric = (pl.when(net == "Socket").then(pl.lit("Socket"))
              .when(link == "RoCE").then(pl.lit("RoCE"))
              .when((link == "IB") | (net == "IB")).then(pl.lit("IB"))
              .otherwise(pl.lit("NET")))
    fabric = pl.when((fabric != "Socket") & pl.col("gdr")).then(pl.concat_str([fabric, pl.lit(" GDR")])).otherwise(fabric)
    return (pl.when(t == "P2P").then(
                pl.when(pl.col("detail").str.starts_with("indirect")).then(pl.lit("NVLink via GPU"))
                .when(pl.col("detail").str.contains(r"/read\b|^read") | pl.col("src_host").is_in(nvl_hosts)).then(pl.lit("NVLink"))
                .when(pl.col("src_host").is_in(pcie_hosts)).then(pl.lit("PCIe P2P"))
                .otherwise(pl.lit("P2P")))
            .when(t == "SHM").then(pl.lit("SHM"))
            .when(t == "COLLNET").then(pl.lit("CollNet"))
            .when(t == "NVLS").then(pl.lit("NVLS"))
            .when((t == "NET") & pl.col("same_host").fill_null(False)).then(pl.lit("NET on one host"))
            .when(t == "NET").then(fabric)
            .otherwise(t))


# -- ring order -----------------------------------------------------------------------------------


def _ring_order(tables: dict[str, pl.DataFrame], members: pl.DataFrame, hops: pl.DataFrame) -> pl.DataFrame:
    """Per communicator and channel: rank 0's printed order when it is complete, else the chain
    of next-neighbours from GRAPH ``Ring`` lines or from the ring hops."""
    nranks = members.group_by("comm_key").agg(nranks=pl.col("nranks").max())
    nxt_parts = []
    ring_hops = hops.filter(pl.col("phase") == "ring").select("comm_key", "channel", src="src_rank", dst="dst_rank")
    if not ring_hops.is_empty():
        nxt_parts.append(ring_hops.with_columns(source=pl.lit("ring connection lines")))
    rings = _get(tables, "nccl_rings")
    printed = pl.DataFrame(schema={"comm_key": pl.String, "channel": pl.Int64, "order": pl.List(pl.Int64)})
    if rings is not None:
        neigh = rings.filter(pl.col("kind") == "ring_neighbors")
        if not neigh.is_empty():
            neigh = _nearest_instance(neigh.with_columns(_row=pl.int_range(pl.len())), members, "me")
            nxt_parts.append(neigh.select("comm_key", "channel", src="me", dst="next", source=pl.lit("GRAPH ring lines")))
        lists = rings.filter(pl.col("kind") == "ring_order", ~pl.col("truncated"))
        if not lists.is_empty():
            lists = _nearest_instance(lists.with_columns(_zero=pl.lit(0, dtype=pl.Int64), _row=pl.int_range(pl.len())),
                                      members, "_zero")
            # the first printed line of each ring wins; sorted first, since joins do not keep row order
            printed = (lists.filter(pl.col("comm_key").is_not_null()).sort("comm_key", "channel", "_row")
                       .unique(["comm_key", "channel"], keep="first", maintain_order=True)
                       .select("comm_key", "channel", "order"))
    # ring connection lines first, then GRAPH lines; each part sorted, so which pointer wins on a
    # conflict does not depend on row order
    chains = _chains(pl.concat([part.sort("comm_key", "channel", "src", "dst") for part in nxt_parts])
                     if nxt_parts else None)
    out = printed.join(nranks, on="comm_key", how="left").filter(pl.col("order").list.len() == pl.col("nranks"))
    out = out.select("comm_key", "channel", "order", source=pl.lit("rank 0's channel line"))
    if chains is not None:
        missing = chains.join(out.select("comm_key", "channel"), on=["comm_key", "channel"], how="anti")
        out = pl.concat([out, missing.select("comm_key", "channel", "order", "source")])
        check = chains.select("comm_key", "channel", _hop_order="order")
        out = out.join(check, on=["comm_key", "channel"], how="left").with_columns(
            agrees_with_hops=pl.when(pl.col("_hop_order").is_not_null()).then(pl.col("_hop_order") == pl.col("order"))
        ).drop("_hop_order")
    else:
        out = out.with_columns(agrees_with_hops=pl.lit(None, dtype=pl.Boolean))
    out = out.join(nranks, on="comm_key", how="left").with_columns(complete=pl.col("order").list.len() == pl.col("nranks"))
    return out.select(list(EMPTY["nccl_ring_order"])).sort("comm_key", "channel")


def _settle_phase(hops: pl.DataFrame, rings: pl.DataFrame) -> pl.DataFrame:
    """A hop between ring neighbours is a ring hop when no marker said otherwise, and always
    when it is P2P/SHM: NCCL prints those once, at ring setup, even if trees reuse them."""
    if hops.is_empty() or rings.is_empty():
        return hops
    pairs = rings.lazy().select("comm_key", "channel", "order").with_columns(
        src_rank=pl.col("order"), dst_rank=pl.col("order").list.shift(-1).list.concat(pl.col("order").list.slice(0, 1)))
    pairs = pairs.with_columns(dst_rank=pl.col("dst_rank").list.drop_nulls()).with_columns(
        dst_rank=pl.when(pl.col("dst_rank").list.len() == pl.col("src_rank").list.len()).then(pl.col("dst_rank"))
        .otherwise(pl.col("order").list.slice(1).list.concat(pl.col("order").list.slice(0, 1))))
    # drop the whole-ring ``order`` list before exploding: explode would copy it onto every
    # pair, n x n values per ring (800M for eight channels of a 10,000-rank ring)
    pairs = pairs.select("comm_key", "channel", "src_rank", "dst_rank").explode("src_rank", "dst_rank").with_columns(
        _neighbours=pl.lit(True)).collect(engine="in-memory")
    # the hops keep their order (``_hops``): a join may otherwise return them in any order
    hops = hops.join(pairs, on=["comm_key", "channel", "src_rank", "dst_rank"], how="left", maintain_order="left")
    known = rings.select("comm_key", "channel", _known=pl.col("complete"))
    hops = hops.join(known, on=["comm_key", "channel"], how="left", maintain_order="left")
    init_time = (pl.col("conn_index").fill_null(0) != 1) & (pl.col("phase").fill_null("") != "p2p")
    neighbours = pl.col("_neighbours").fill_null(False) & init_time
    ring = neighbours & (pl.col("phase").is_null() | pl.col("transport").is_in(["P2P", "SHM"]))
    # Before 2.8 no markers: an init-time hop that is not between ring neighbours is a tree hop.
    tree = pl.col("phase").is_null() & init_time & ~pl.col("_neighbours").fill_null(False) & pl.col("_known").fill_null(False)
    phase = pl.when(ring).then(pl.lit("ring")).when(tree).then(pl.lit("tree")).otherwise(pl.col("phase"))
    return hops.with_columns(phase=phase).drop("_neighbours", "_known")


def _cut(values: list[int], lengths: list[int]) -> pl.Series:
    """``values`` cut into consecutive lists of ``lengths`` (one list per length, in order)."""
    flat = pl.DataFrame({"_len": lengths}, schema={"_len": pl.UInt32}).select(
        _list=pl.int_range(pl.len(), dtype=pl.UInt32).repeat_by("_len").explode())
    lists = flat.with_columns(order=pl.Series(values, dtype=pl.Int64)).group_by("_list", maintain_order=True).agg("order")
    return lists["order"]


def _chains(nxt: pl.DataFrame | None) -> pl.DataFrame | None:
    """Follow next-neighbour pointers from rank 0 on each (communicator, channel): the ranks up
    to (not including) the first one with no pointer or seen before. A ring without a
    communicator or channel stays at [0].

    A walk is sequential: joins that follow one pointer per step are quadratic for a 10,000-rank
    ring, and doubling the pointers each step (one join over every link per step, log2 of the
    ring's length steps) took 1.5 s for the 10,000-rank run's rings. A dict per ring walks each
    pointer once: linear in the links, a few hundredths of a second there."""
    if nxt is None or nxt.is_empty():
        return None
    ring = ["comm_key", "channel"]
    nxt = nxt.unique([*ring, "src"], keep="first", maintain_order=True)
    source = nxt.group_by(ring).agg(source=pl.col("source").first())
    pointers: dict[tuple, dict[int, int | None]] = {}
    links = nxt.drop_nulls(ring).select(*ring, pl.col("src").cast(pl.Int64), pl.col("dst").cast(pl.Int64))
    for comm, channel, src, dst in zip(*(links[c].to_list() for c in links.columns)):
        pointers.setdefault((comm, channel), {})[src] = dst
    starts = nxt.filter(pl.col("src") == 0).select(ring)
    walked: list[int] = []      # every ring's ranks one after another, and each ring's length
    lengths: list[int] = []
    for comm, channel in starts.iter_rows():
        step = pointers.get((comm, channel), {})
        seen, node = {0}, step.get(0)
        walked.append(0)
        while node is not None and node not in seen:
            walked.append(node)
            seen.add(node)
            node = step.get(node)
        lengths.append(len(seen))
    # one flat Series cut into lists: a frame of Python lists built a Series per ring (the
    # 10,000-rank run's rings: 0.17-0.20 s, cut: 0.09 s)
    walk = starts.with_columns(order=_cut(walked, lengths))
    return walk.join(source, on=ring, how="left").select("comm_key", "channel", "order", "source")
