"""What ``nvidia-smi topo -m`` says about each node: the link between two GPUs, between a GPU and a NIC.

Built from the ``topology`` matrix cells and the ``topo_nics`` NIC legend (``postmortem.parsers.hwtools``),
each input's node from the store's attribution. Shared by the transports view (which hops are
slower than they should be) and the transport rules (N010, N013), so that the two never judge a
hop differently (``docs/formats/hardware.md`` section 4).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

GDR_PATHS = {"PIX", "PXB", "PHB"}          # GPU-NIC paths GPUDirect RDMA can use (nccl.md 3.4)


@dataclass
class Topology:
    topo: dict[str, dict[tuple[str, str], str]] = field(default_factory=dict)   # node -> (GPUi, GPUj|NICk) -> link
    topo_line: dict[str, tuple[int, int]] = field(default_factory=dict)        # node -> (input_id, line_no)
    nic_legend: dict[str, dict[str, str]] = field(default_factory=dict)         # node -> mlx5_k -> NICk

    def gpu_link(self, node: str | None, a: int | None, b: int | None) -> str | None:
        """``nvidia-smi topo -m`` cell between two GPUs of ``node`` (NV18, PIX, SYS ...), if the inputs have it."""
        if node is None or a is None or b is None:
            return None
        return self.topo.get(node, {}).get((f"GPU{a}", f"GPU{b}"))

    def nic_path(self, node: str | None, gpu: int | None, nic: str | None) -> str | None:
        """``topo -m`` cell between a GPU and the NIC a hop used (by its mlx5 name, via the NIC legend)."""
        if node is None or gpu is None or not nic:
            return None
        column = self.nic_legend.get(node, {}).get(nic.split("+")[0].split(":")[0])
        return self.topo.get(node, {}).get((f"GPU{gpu}", column)) if column else None

    def gpus_without_close_nic(self, node: str) -> tuple[list[str], list[str]]:
        """(GPUs of ``node`` with no NIC at PIX/PXB, GPUs with one), from its matrix."""
        cells = self.topo.get(node, {})
        gpus = sorted({a for a, _ in cells if a.startswith("GPU")}, key=lambda g: int(g[3:]) if g[3:].isdigit() else 0)
        nics = {b for _, b in cells if not b.startswith("GPU")}
        close = [g for g in gpus if any(cells.get((g, n)) in ("PIX", "PXB") for n in nics)]
        return [g for g in gpus if g not in close], close


UNKNOWN_NODE = "(node not known)"


def load(topology: pl.DataFrame, legend: pl.DataFrame, keep_unknown: bool = False) -> Topology:
    """A ``Topology`` from the store's ``topology`` and ``topo_nics`` rows (either may be empty).
    ``keep_unknown``: matrices of no known node are kept under ``UNKNOWN_NODE`` (to show them)."""
    out = Topology()
    if topology.is_empty() or "link" not in topology.columns:
        return out
    if "node" not in topology.columns:
        topology = topology.with_columns(node=pl.lit(None, dtype=pl.String))
    if keep_unknown:
        topology = topology.with_columns(node=pl.col("node").fill_null(UNKNOWN_NODE))
    # A matrix cell the parser could not place has no from/to (and a table of such cells lacks the columns).
    for name in ("from", "to", "input_id", "line_no", "matrix"):
        if name not in topology.columns:
            topology = topology.with_columns(pl.lit(None, dtype=pl.String if name in ("from", "to", "matrix")
                                                    else pl.Int64).alias(name))
    # The -p2p matrix holds capabilities, not links; the -mp (PCIe-only) view shows NODE/SYS between
    # GPUs joined by NVLink, so only its GPU-NIC cells count.
    matrix = pl.col("matrix").fill_null("topo")
    topology = topology.filter(pl.col("node").is_not_null() & pl.col("link").is_not_null() & pl.col("to").is_not_null()
                               & pl.col("from").is_not_null()
                               & ((matrix == "topo") | ((matrix == "pcie") & ~pl.col("to").str.starts_with("GPU"))))
    # columns as lists, not a dict per row: a fleet's matrices are tens of thousands of cells
    for node, start, end, link in zip(*(topology[name].to_list() for name in ("node", "from", "to", "link"))):
        out.topo.setdefault(node, {})[(start, end)] = link
    first = topology.unique("node", keep="first", maintain_order=True)
    out.topo_line = {node: (input_id, line_no) for node, input_id, line_no in
                     zip(*(first[name].to_list() for name in ("node", "input_id", "line_no")))}
    if not legend.is_empty():
        node_of = dict(topology.select("input_id", "node").unique("input_id").iter_rows()) if "input_id" in topology.columns else {}
        for r in legend.iter_rows(named=True):
            node = r.get("node") or node_of.get(r.get("input_id"))
            # A legend row the parser could not split lacks device or nic (the columns may be absent).
            if node and r.get("device") and r.get("nic"):
                out.nic_legend.setdefault(node, {})[r["device"]] = r["nic"]
    for node, cells in out.topo.items():  # old matrices name NIC columns mlx5_k themselves
        for _, to in cells:
            if to.startswith("mlx5"):
                out.nic_legend.setdefault(node, {}).setdefault(to, to)
    return out


def from_run(run, keep_unknown: bool = False) -> Topology:
    """The topology of a run's store (``run.frame``/``run.columns``, as the CLI and the TUI hold it)."""
    frames = [run.frame(f"SELECT * FROM {name}") if run.columns(name) else pl.DataFrame()
              for name in ("topology", "topo_nics")]
    return load(*frames, keep_unknown=keep_unknown)
