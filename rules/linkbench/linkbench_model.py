"""What the measured-link rules (L004-L006) share: where a measurement was taken, and what the
hardware there should carry.

A measurement's *place* is its node where the run attributed one (``node``: the host in the
file's path, ``analyzer/env_model.hw_nodes``), else the folder its file sits in, so a folder of
bare tool outputs (``hw/nodeA/p2p.txt`` next to ``hw/nodeA/topo.txt``) still joins within a host.
"""

from __future__ import annotations

import posixpath

import polars as pl

from postmortem.analyzer import hardware
from postmortem.rules.base import Context, with_columns


def placed(ctx: Context, frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with ``place`` (node, else the input's folder) and ``path``."""
    if frame.is_empty():
        return frame.with_columns(place=pl.lit(None, dtype=pl.String), path=pl.lit(None, dtype=pl.String))
    frame = with_columns(frame, node=pl.String)
    inputs = ctx.table("inputs")
    if inputs.is_empty() or "input_id" not in frame.columns:
        return frame.with_columns(place=pl.col("node"), path=pl.lit(None, dtype=pl.String))
    paths = inputs.select(pl.col("input_id").cast(frame.schema["input_id"]), "path")
    frame = frame.join(paths, on="input_id", how="left")
    folder = pl.col("path").map_elements(posixpath.dirname, return_dtype=pl.String)
    return frame.with_columns(place=pl.coalesce(pl.col("node"), folder))


def accelerator(ctx: Context, place: str | None, names: list[str] | None = None) -> dict | None:
    """The GPU model at ``place``: the names a tool printed there (``names``), else ``gpus`` rows of
    that place, else of the whole run."""
    names = [n for n in (names or []) if n]
    if not names:
        gpus = placed(ctx, ctx.table("gpus"))
        if not gpus.is_empty() and "name" in gpus.columns:
            here = gpus.filter(pl.col("place") == place) if place is not None else gpus.head(0)
            names = (here if not here.is_empty() else gpus)["name"].drop_nulls().to_list()
    if not names:
        return None
    return hardware.find(max(sorted(set(names)), key=names.count))


def topo_links(ctx: Context, place: str | None) -> dict[tuple[str, str], str]:
    """``nvidia-smi topo -m`` cells between GPUs at ``place``: (GPUi, GPUj) -> NV18 / PIX / SYS ..."""
    topo = placed(ctx, ctx.table("topology"))
    if topo.is_empty() or "link" not in topo.columns:
        return {}
    topo = with_columns(topo, matrix=pl.String)
    here = topo.filter((pl.col("place") == place) & (pl.col("matrix").fill_null("topo") == "topo")
                       & pl.col("from").str.starts_with("GPU") & pl.col("to").str.starts_with("GPU"))
    return {(r["from"], r["to"]): r["link"] for r in here.select("from", "to", "link").iter_rows(named=True)}


def nic_rate(ctx: Context, place: str | None, device: str | None) -> tuple[float | None, str, dict | None]:
    """The line rate (Gb/s) of NIC ``device`` at ``place`` from ``ibstat`` (``nic_ports``), how it
    was found, and the port row. Falls back to the same device name elsewhere in the job, then to
    the job's usual port rate (a fleet of one NIC model)."""
    ports = placed(ctx, ctx.table("nic_ports"))
    if ports.is_empty() or "rate_gbps" not in ports.columns:
        return None, "no NIC rate in the inputs (ibstat gives it)", None
    ports = ports.filter(pl.col("rate_gbps").is_not_null())
    if ports.is_empty():
        return None, "no NIC rate in the inputs (ibstat gives it)", None
    mine = ports.filter((pl.col("place") == place) & (pl.col("ca") == device))
    if not mine.is_empty():
        row = mine.row(0, named=True)
        return float(row["rate_gbps"]), f"ibstat of {place}: {device} at {row['rate_gbps']:g} Gb/s", row
    same = ports.filter(pl.col("ca") == device)
    if not same.is_empty():
        rate = float(same["rate_gbps"].median())
        return rate, f"{device} elsewhere in the job runs at {rate:g} Gb/s (ibstat)", same.row(0, named=True)
    rate = float(ports["rate_gbps"].median())
    return rate, f"the job's NIC ports run at {rate:g} Gb/s (median of ibstat rates)", None


def nvlink_expected(acc: dict | None) -> tuple[float | None, str]:
    """Per-direction GB/s one GPU pair reaches over NVLink in a copy benchmark, and its basis."""
    if not acc or not acc.get("nvlink"):
        return None, "GPU model or its NVLink unknown"
    t = hardware.tier(acc["nvlink"])
    if not t:
        return None, f"no bandwidth for {acc['nvlink']} in the model"
    if t.get("achievable_gbyte_s"):
        return float(t["achievable_gbyte_s"]), f"{acc['name']} {acc['nvlink']}: about {t['achievable_gbyte_s']:g} GB/s " \
                                               f"achievable per direction ({t['source']})"
    return float(t["line_gbyte_s"]), f"{acc['name']} {acc['nvlink']}: {t['line_gbyte_s']:g} GB/s line rate"


def pcie_expected(acc: dict | None) -> tuple[float | None, str, str | None]:
    """Per-direction GB/s a pinned host<->device copy reaches on the card's PCIe generation."""
    if not acc or not acc.get("pcie"):
        return None, "GPU model or its PCIe generation unknown", None
    t = hardware.tier(acc["pcie"])
    if not t:
        return None, f"no bandwidth for {acc['pcie']} in the model", acc["pcie"]
    value = t.get("achievable_gbyte_s") or t["line_gbyte_s"]
    return float(value), (f"{acc['name']} on {acc['pcie']} x16: {t['line_gbyte_s']:g} GB/s line rate, about {value:g} "
                          f"achievable ({t['source']})"), acc["pcie"]
