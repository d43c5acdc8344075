"""What the transport rules (N010-N014, L001) share: the hops NCCL picked and what the hardware allows.

Built once per context (``@memoised``) from ``nccl_hops``, ``nccl_members``, ``nccl_processes``,
``nccl_env``, ``nccl_net``, the ``topology`` / ``topo_nics`` matrices of ``nvidia-smi topo -m``,
``nic_ports`` (ibstat, ibv_devinfo), ``gpus`` (the GPU model) and ``analyzer/hardware.toml``.
Not a rule module (its name has no code).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from postmortem.analyzer import hardware
from postmortem.analyzer.topology import GDR_PATHS, Topology  # noqa: F401 -- GDR_PATHS: the rules read it here
from postmortem.analyzer.transports import accelerator
from postmortem.rules.base import Context, Evidence, memoised, with_columns
from postmortem.rules.hardware.hw_model import node_topology


@dataclass
class Fabric:
    hops: pl.DataFrame
    acc: dict | None
    acc_source: str
    topology: Topology = field(default_factory=Topology)                          # nvidia-smi topo -m per node
    ports: pl.DataFrame = field(default_factory=pl.DataFrame)                    # nic_ports rows with a node
    global_rank: dict[tuple[str, int], int] = field(default_factory=dict)        # (comm_key, rank) -> global rank

    @property
    def topo(self) -> dict[str, dict[tuple[str, str], str]]:
        return self.topology.topo

    @property
    def topo_line(self) -> dict[str, tuple[int, int]]:
        return self.topology.topo_line

    @property
    def nic_legend(self) -> dict[str, dict[str, str]]:
        return self.topology.nic_legend

    @property
    def acc_nvlink(self) -> bool:
        """The GPU model has NVLink between every GPU of a node (a bridge joins pairs only)."""
        link = (self.acc or {}).get("nvlink")
        return bool(link) and "bridge" not in link

    def gpu_link(self, node: str | None, a: int | None, b: int | None) -> str | None:
        """``nvidia-smi topo -m`` cell between two GPUs of ``node`` (NV18, PIX, SYS ...), if the inputs have it."""
        return self.topology.gpu_link(node, a, b)

    def nic_path(self, node: str | None, gpu: int | None, nic: str | None) -> str | None:
        """``topo -m`` cell between a GPU and the NIC a hop used (by its mlx5 name, via the NIC legend)."""
        return self.topology.nic_path(node, gpu, nic)

    def rank(self, comm_key: str, rank: int | None) -> int | None:
        return self.global_rank.get((comm_key, rank)) if rank is not None else None


@memoised
def fabric(ctx: Context) -> Fabric:
    hops = ctx.table("nccl_hops")
    acc, source = accelerator(ctx.run)
    f = Fabric(hops, acc, source, node_topology(ctx))
    # ibstat, ibv_devinfo and sysfs fill different columns: the rules read these whichever tool wrote the rows.
    ports = with_columns(ctx.table("nic_ports"), state=pl.String, ca=pl.String, port=pl.Int64, link_layer=pl.String,
                         rate_gbps=pl.Float64)
    if not ports.is_empty() and "node" in ports.columns:
        f.ports = ports.filter(pl.col("node").is_not_null())
    members = ctx.table("nccl_members")
    if not members.is_empty():
        for m in members.filter(pl.col("global_rank").is_not_null()).iter_rows(named=True):
            f.global_rank[(m["comm_key"], m["rank"])] = m["global_rank"]
    return f


# -- shared readings ---------------------------------------------------------------------------------


def evidence_of(ctx: Context, rows: pl.DataFrame, note: str, limit: int = 3) -> list[Evidence]:
    """Up to ``limit`` input lines (distinct) of ``rows`` (input_id, line_no), each with ``note``."""
    if rows.is_empty():
        return []
    picked = rows.select("input_id", "line_no").drop_nulls().unique(maintain_order=True).head(limit)
    return [ctx.evidence(i, n, note) for i, n in picked.iter_rows()]


def env_settings(ctx: Context, key: str, host: str | None = None) -> pl.DataFrame:
    """NCCL's own ``KEY set by environment to VALUE`` lines (the truth about its environment)."""
    env = ctx.table("nccl_env")
    if env.is_empty() or "key" not in env.columns:
        return pl.DataFrame()
    rows = env.filter(pl.col("key") == key)
    if host is not None:
        rows = rows.filter(pl.col("host") == host)
    return rows


def price(tier: str | None, acc: dict | None, nic_gbit: float | None = None) -> hardware.Price:
    return hardware.price_hop(tier, acc, nic_gbit)


def gbs(p: hardware.Price) -> str:
    return f"~{p.gbyte_s:g} GB/s per direction" if p.gbyte_s else (p.link or "bandwidth unknown")


def nvlink_price(acc: dict | None) -> hardware.Price | None:
    if not acc or not acc.get("nvlink"):
        return None
    return hardware.price_hop("NVLink", acc)


def hosts(rows: pl.DataFrame) -> list[str]:
    """Every host either side of ``rows`` (hops)."""
    if rows.is_empty():
        return []
    return sorted(set(rows["src_host"].drop_nulls().to_list()) | set(rows["dst_host"].drop_nulls().to_list()))


def global_ranks(f: Fabric, rows: pl.DataFrame) -> list[int]:
    out = set()
    for r in rows.iter_rows(named=True):
        for side in ("src_rank", "dst_rank"):
            g = f.rank(r["comm_key"], r[side])
            if g is not None:
                out.add(g)
    return sorted(out)


def gpu_pairs(rows: pl.DataFrame) -> list[tuple[int | None, int | None]]:
    pairs = rows.select("src_gpu", "dst_gpu").unique().sort("src_gpu", "dst_gpu", nulls_last=True)
    return [tuple(p) for p in pairs.iter_rows()]


def pair_text(pairs: list[tuple], limit: int = 6) -> str:
    shown = [f"GPU{a if a is not None else '?'}->GPU{b if b is not None else '?'}" for a, b in pairs[:limit]]
    return ", ".join(shown) + (f" and {len(pairs) - limit} more" if len(pairs) > limit else "")


def gpus_of(ctx: Context, ranks: list[int], limit: int = 8) -> list[dict]:
    return [ctx.gpu_of(r) for r in ranks[:limit]]
