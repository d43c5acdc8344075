"""What the RAS rules (H010, N021, N022) share: the latest ``ncclras`` report of the attempt and
how its ranks, processes and nodes map to the job's global ranks and host names.

RAS names a process by pid and a node by its IP address (or host name), and a rank by its
number in the communicator (``postmortem.parsers.nccl_ras``). A communicator rank is a global rank only
where the mapping says so: the process's pid is the pid of exactly one rank of the job (the
``ranks`` table), or the communicator holds every rank of the job (the default process group).
An IP becomes a host name through the addresses NCCL bootstrapped on (``nccl_processes``).
Not a rule module (its name has no code).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from postmortem.rules.base import Context, memoised, with_columns


@dataclass
class Ras:
    reports: pl.DataFrame                    # ras_reports rows of the latest report (one row)
    comms: pl.DataFrame
    findings: pl.DataFrame
    ranks: pl.DataFrame
    host_of_ip: dict[str, str] = field(default_factory=dict)
    rank_of_pid: dict[int, int] = field(default_factory=dict)
    world: int | None = None

    @property
    def empty(self) -> bool:
        return self.reports.is_empty()

    def host(self, node: str | None) -> str | None:
        return self.host_of_ip.get(node, node) if node else None

    def global_rank(self, rank: int | None, pid: int | None, comm_size: int | None) -> int | None:
        if pid is not None and pid in self.rank_of_pid:
            return self.rank_of_pid[pid]
        if rank is not None and comm_size and self.world and comm_size == self.world:
            return rank
        return None

    def comm_size(self, hash_: str | None) -> int | None:
        if hash_ is None or self.comms.is_empty():
            return None
        rows = self.comms.filter(pl.col("hash") == hash_)["ranks"].drop_nulls()
        return int(rows[0]) if len(rows) else None

    def evidence_rows(self, rows: pl.DataFrame) -> pl.DataFrame:
        return rows.select("input_id", "line_no") if {"input_id", "line_no"} <= set(rows.columns) else pl.DataFrame()


_RANK_COLS = dict(report_line=pl.UInt32, hash=pl.String, rank=pl.Int64, gpu=pl.Int64, pid=pl.Int64, node=pl.String,
                  why=pl.String, op=pl.String, op_count=pl.Int64, status=pl.String, input_id=pl.UInt32,
                  line_no=pl.UInt32)
_FINDING_COLS = dict(report_line=pl.UInt32, block_line=pl.UInt32, section=pl.String, group=pl.Int64,
                     comm_index=pl.Int64, hash=pl.String, kind=pl.String, what=pl.String, op=pl.String,
                     count=pl.Int64, op_count=pl.Int64, status=pl.String, message=pl.String, input_id=pl.UInt32,
                     line_no=pl.UInt32)


@memoised
def latest(ctx: Context) -> Ras:
    """The attempt's last RAS report (in input and line order) with its rows, read once."""
    reports = with_columns(ctx.table("ras_reports"), input_id=pl.UInt32, line_no=pl.UInt32, nodes=pl.Int64,
                           processes=pl.Int64, gpus=pl.Int64, nccl_version=pl.String, timestamp=pl.String,
                           format=pl.String, timeouts=pl.Int64)
    empty = Ras(pl.DataFrame(), pl.DataFrame(), pl.DataFrame(), pl.DataFrame())
    if reports.is_empty():
        return empty
    last = reports.sort("input_id", "line_no").tail(1)
    input_id, line = last["input_id"][0], last["line_no"][0]

    def rows(name: str, cols: dict) -> pl.DataFrame:
        frame = with_columns(ctx.table(name), **cols)
        if frame.is_empty():
            return frame
        return frame.filter((pl.col("input_id") == input_id) & (pl.col("report_line") == line))

    ranks = rows("ras_ranks", _RANK_COLS)
    if (last["format"][0] if "format" in last.columns else None) == "json":
        ranks = pl.concat([ranks, _json_rank_rows(ranks, rows("ras_rank_ops", dict(
            report_line=pl.UInt32, hash=pl.String, rank=pl.Int64, op=pl.String, op_count=pl.Int64,
            input_id=pl.UInt32, line_no=pl.UInt32)))], how="diagonal_relaxed")
    ras = Ras(last, rows("ras_comms", dict(report_line=pl.UInt32, hash=pl.String, ranks=pl.Int64, nodes=pl.Int64,
                                           status=pl.String, errors=pl.String, group=pl.Int64,
                                           missing_ranks=pl.Int64, input_id=pl.UInt32, line_no=pl.UInt32)),
              rows("ras_findings", _FINDING_COLS), ranks)
    ras.host_of_ip = _hosts(ctx)
    ranks = with_columns(ctx.ranks, pid=pl.Int64, rank=pl.Int64)
    if not ranks.is_empty():
        unique = ranks.drop_nulls(["pid", "rank"]).group_by("pid").agg(pl.col("rank").unique()).filter(
            pl.col("rank").list.len() == 1)
        ras.rank_of_pid = {p: r[0] for p, r in unique.iter_rows()}
    # The job's size: the launcher's, else RAS's job summary, else every process RAS saw (the RAS
    # network spans the job; a JSON report has no summary).
    seen = ras.ranks.select("node", "pid").drop_nulls().unique().height if not ras.ranks.is_empty() else 0
    ras.world = ctx.world_size or (int(last["gpus"][0]) if last["gpus"][0] is not None else None) or seen or None
    return ras


def _json_rank_rows(ranks: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """A JSON report (2.28.7+) holds raw per-rank data where the text client prints conclusions:
    the rows the text would have named -- ranks whose operation count differs from their
    communicator's majority (``launched_up_to`` / ``not_launched``), ranks with an init or
    asynchronous error (``init_error`` / ``async_error``, the error's name as ``status``), ranks
    whose status differs from the majority's (``status``)."""
    members = with_columns(ranks, init_state=pl.Int64, async_error=pl.Int64).filter(pl.col("why") == "member")
    base = ["report_line", "hash", "rank", "gpu", "pid", "node", "input_id", "line_no"]
    parts = []
    if not ops.is_empty() and not members.is_empty():
        majority = ops.group_by("hash", "op", "op_count").agg(n=pl.len()).sort("n", "op_count", descending=True) \
            .unique(["hash", "op"], keep="first").select("hash", "op", _major="op_count")
        odd = ops.join(majority, on=["hash", "op"]).filter(pl.col("op_count") != pl.col("_major"))
        odd = odd.join(members.select(base).drop("line_no", "input_id", "report_line"), on=["hash", "rank"], how="left")
        parts.append(odd.with_columns(why=pl.when(pl.col("op_count") == 0).then(pl.lit("not_launched"))
                                      .otherwise(pl.lit("launched_up_to"))).drop("_major"))
    if not members.is_empty():
        names = {1: "Unhandled CUDA error", 2: "System error", 3: "Internal error", 4: "Invalid argument",
                 5: "Invalid usage", 6: "Remote process error"}
        for column, why in (("init_state", "init_error"), ("async_error", "async_error")):
            bad = members.filter(pl.col(column).is_in(list(names)))
            if not bad.is_empty():
                parts.append(bad.select(*base, why=pl.lit(why), status=pl.col(column).replace_strict(
                    names, default=None, return_dtype=pl.String)))
        usual = members.group_by("hash", "status").agg(n=pl.len()).sort("n", descending=True).unique(
            "hash", keep="first").select("hash", _usual="status")
        odd = members.join(usual, on="hash").filter(pl.col("status") != pl.col("_usual"))
        if not odd.is_empty():
            parts.append(odd.select(*base, "status", why=pl.lit("status")))
    if not parts:
        return ranks.clear()
    return pl.concat(parts, how="diagonal_relaxed")


def _hosts(ctx: Context) -> dict[str, str]:
    """IP address -> host name, from the addresses NCCL bootstrapped on and its OOB interfaces."""
    out = {}
    procs = with_columns(ctx.table("nccl_processes"), host=pl.String, bootstrap_addr=pl.String)
    for host, addr in procs.select("host", "bootstrap_addr").drop_nulls().iter_rows():
        out.setdefault(addr.split("<")[0].split("%")[0], host)
    net = with_columns(ctx.table("nccl_net"), host=pl.String, address=pl.String, kind=pl.String)
    if not net.is_empty():
        for host, addr in net.filter(pl.col("kind").is_in(["oob", "bootstrap_if", "socket_ifs"])).select(
                "host", "address").drop_nulls().iter_rows():
            out.setdefault(addr.split("<")[0].split("%")[0], host)
    return out


def c10d_timeouts(ctx: Context) -> pl.DataFrame:
    """The watchdog timeouts of this attempt (``collectives`` kind ``watchdog_timeout``)."""
    coll = with_columns(ctx.table("collectives"), kind=pl.String, rank=pl.Int64, seq=pl.Int64, op=pl.String,
                        input_id=pl.UInt32, line_no=pl.UInt32)
    if coll.is_empty():
        return coll
    return coll.filter(pl.col("kind").is_in(["watchdog_timeout", "blocking_wait_timeout"]))
