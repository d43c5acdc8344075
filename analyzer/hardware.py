"""The hardware model: accelerators, link tiers and busbw factors (``analyzer/hardware.toml``).

The numbers are data with their sources (``docs/formats/hardware.md``); this module matches a GPU
name to an accelerator, prices an NCCL hop by the tier it runs on, and gives the busbw
factor of a collective. It never invents a number: where the inputs do not say what a link
is (the GPU model, a NIC's rate), the price is ``None`` with the reason.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import polars as pl

DATA = Path(__file__).with_name("hardware.toml")


@lru_cache(maxsize=1)
def model() -> dict:
    with open(DATA, "rb") as handle:
        return tomllib.load(handle)


def accelerators() -> list[dict]:
    return model()["accelerator"]


def tier(name: str | None) -> dict | None:
    return next((t for t in model()["tier"] if t["name"] == name), None) if name else None


def find(name: str | None, memory_mib: float | None = None) -> dict | None:
    """The accelerator an nvidia-smi name (or a user's ``--gpu`` text) names.

    Substring match on ``match`` ignoring case and punctuation, longest pattern first; ``memory_mib``
    (nvidia-smi memory.total) tells apart variants that share a name (A100 40/80 GB)."""
    if not name:
        return None
    text = _folded(name)
    hits = []
    for acc in accelerators():
        for pattern in acc.get("match", []) + [acc["id"], acc["name"]]:
            if _folded(pattern) in text:
                hits.append((len(_folded(pattern)), acc))
    if memory_mib is not None:
        sized = [(n, a) for n, a in hits if "memory_mib" not in a or a["memory_mib"][0] <= memory_mib <= a["memory_mib"][1]]
        hits = sized or hits
    if not hits and len(text) >= 3:
        # A short user text (``--gpu H100``, ``hw A100``): the first accelerator in the model's
        # order (SXM before PCIe, 40 GB before 80 GB) whose name starts with it.
        hits = [(0, acc) for acc in accelerators()
                if any(_folded(p).startswith(text) for p in acc.get("match", []) + [acc["id"], acc["name"]])][:1]
    return max(hits, key=lambda hit: hit[0])[1] if hits else None


def _folded(text: str) -> str:
    """Case and punctuation do not matter: ``A100-SXM4-80GB`` ~ ``a100 sxm4 80gb``."""
    return re.sub(r"[^a-z0-9]", "", text.lower())


def machine_balance(acc: dict) -> float | None:
    """Dense BF16 FLOP per byte of HBM traffic: above it a kernel is compute-bound."""
    if not acc.get("bf16_dense_tflops") or not acc.get("hbm_tbps"):
        return None
    return acc["bf16_dense_tflops"] / acc["hbm_tbps"]


# -- busbw ------------------------------------------------------------------------------------------

_OP_KEYS = {"allreduce": "all_reduce", "reducescatter": "reduce_scatter", "reducescattertensor": "reduce_scatter",
            "allgather": "all_gather", "allgatherintotensor": "all_gather", "alltoall": "alltoall",
            "alltoallv": "alltoall", "gather": "gather", "scatter": "scatter", "broadcast": "broadcast",
            "reduce": "reduce", "sendrecv": "sendrecv", "send": "sendrecv", "recv": "sendrecv"}
_FORMULAS = {"1": lambda n: 1.0, "(n-1)/n": lambda n: (n - 1) / n, "2*(n-1)/n": lambda n: 2 * (n - 1) / n}


def busbw_formula(op: str | None) -> str | None:
    """The busbw factor formula (``"2*(n-1)/n"``, ``"(n-1)/n"``, ``"1"``) of a collective, ``op`` in
    any spelling NCCL, PyTorch or a trace uses (``AllReduce``, ``ALLREDUCE``, ``_ALLGATHER_BASE``,
    ``nccl:all_reduce``, ``allgather_into_tensor_coalesced``); None when the op is unknown."""
    if not op:
        return None
    key = re.sub(r"^(?:nccl:|c10d::)", "", op.lower())
    key = re.sub(r"[^a-z]", "", key.replace("_base", "").replace("coalesced", ""))
    return model()["busbw_factor"].get(_OP_KEYS.get(key, ""))


def busbw_factor(op: str | None, ranks: int | None) -> float | None:
    """busbw = algbw x factor (nccl-tests' definition), for ``ranks`` ranks."""
    formula = busbw_formula(op)
    if formula is None or not ranks or ranks < 1:
        return None
    return _FORMULAS[formula](ranks)


def busbw_factor_expr(op: pl.Expr, ops: list[str], n: pl.Expr, unknown: float = 1.0) -> pl.Expr:
    """The same factor as a Polars expression over a column of ops (``ops``: its distinct values,
    looked up once each) and a column of rank counts."""
    formulas = {o: busbw_formula(o) for o in ops if o is not None}
    formula = op.replace_strict(formulas, default=None, return_dtype=pl.String)
    expr = pl.lit(unknown)
    for text, fn in _FORMULAS.items():
        expr = pl.when(formula == text).then(fn(n)).otherwise(expr)
    return expr


# -- pricing NCCL hops ------------------------------------------------------------------------------


@dataclass
class Price:
    gbyte_s: float | None     # per direction, achievable where known, else line rate
    link: str | None          # the tier it was priced as
    basis: str                # how we know (or why we do not)


def price_hop(tier_label: str | None, acc: dict | None, nic_gbit: float | None = None) -> Price:
    """What one NCCL hop can carry per direction, from the tier ``postmortem.analyzer.nccl_model`` gave it."""
    label = tier_label or ""
    if label in ("NVLink", "NVLink via GPU", "P2P", "NVLS"):
        if acc is None:
            return Price(None, None, "GPU model unknown (give --gpu MODEL, or include nvidia-smi output)")
        if acc.get("nvlink"):
            t = tier(acc["nvlink"])
            note = "; two NVLink hops through another GPU" if label == "NVLink via GPU" else ""
            note += "; P2P without read mode or a GRAPH path type: assumed NVLink" if label == "P2P" else ""
            return _priced(t, acc["nvlink"], f"{acc['name']} {acc['nvlink']}{note}")
        label = "PCIe P2P"
    if label in ("PCIe P2P", "SHM"):
        if acc is None or not acc.get("pcie"):
            return Price(None, None, "GPU model or its PCIe generation unknown")
        t = tier(acc["pcie"])
        how = "GPU to GPU over PCIe" if label == "PCIe P2P" else "through host memory: device to host and back over PCIe"
        return _priced(t, acc["pcie"], f"{acc['name']} {acc['pcie']}, {how}")
    if label in ("IB", "IB GDR", "RoCE", "RoCE GDR", "NET", "NET GDR", "CollNet"):
        if nic_gbit:
            staged = "" if "GDR" in label else "; without GPUDirect RDMA the data is staged through host memory"
            return Price(nic_gbit / 8, f"{nic_gbit:g} Gb/s NIC", f"NIC rate from ibstat/ibv_devinfo (line rate){staged}")
        return Price(None, None, "NIC rate not in the inputs (ibstat or ibv_devinfo output gives it)")
    if label == "Socket":
        return Price(None, "TCP", "TCP sockets: bounded by the NIC and the CPU, typically a few GB/s at most")
    if label == "NET on one host":
        return Price(None, "loopback network", "two GPUs of one host talking through the network stack: far below P2P or SHM")
    return Price(None, None, "unknown tier")


def _priced(t: dict | None, link: str, basis: str) -> Price:
    if t is None:
        return Price(None, link, f"{basis}; no bandwidth for {link} in the model")
    if t.get("achievable_gbyte_s"):
        return Price(t["achievable_gbyte_s"], link, f"{basis}; achievable ({t['source']})")
    return Price(t["line_gbyte_s"], link, f"{basis}; line rate ({t['source']})")
