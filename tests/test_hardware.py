"""The hardware model (analyzer/hardware.toml): matching, busbw factors, hop prices, `postmortem hw`."""
from __future__ import annotations

import json

import pytest

from postmortem.analyzer import hardware
from postmortem.cli import main


@pytest.mark.parametrize(("name", "memory", "expected"), [
    ("NVIDIA H100 80GB HBM3", 81559, "h100_sxm"),
    ("NVIDIA H100 PCIe", 81559, "h100_pcie"),
    ("NVIDIA A100-SXM4-40GB", 40960, "a100_40gb"),
    ("NVIDIA A100-SXM-80GB", 81920, "a100_80gb"),
    ("NVIDIA H20", None, "h20"),
    ("NVIDIA H800", None, "h800"),
    ("NVIDIA L40S", 46068, "l40s"),
    ("NVIDIA GeForce RTX 4090", None, "rtx4090"),
    ("h200", None, "h200"),
])
def test_nvidia_smi_names_find_their_accelerator(name, memory, expected):
    assert hardware.find(name, memory)["id"] == expected


def test_unknown_names_find_nothing():
    assert hardware.find("Tesla K80") is None
    assert hardware.find(None) is None


def test_every_row_is_dense_and_sourced():
    for acc in hardware.accelerators():
        assert acc["source"] and acc["confidence"] in {"datasheet", "maint", "issue", "page", "known"}
    # Dense, not the 2:4-sparse headline (hardware.md section 1 item 1).
    assert hardware.find("H100 SXM")["bf16_dense_tflops"] == 989
    assert hardware.find("RTX 4090")["bf16_dense_tflops"] == 165


@pytest.mark.parametrize(("op", "n", "factor"), [
    ("AllReduce", 8, 2 * 7 / 8), ("ALLREDUCE", 2, 1.0), ("_ALLGATHER_BASE", 8, 7 / 8),
    ("nccl:all_gather", 2, 0.5), ("ReduceScatter", 4, 0.75), ("Broadcast", 8, 1.0), ("Send", 2, 1.0),
])
def test_busbw_factors_follow_nccl_tests(op, n, factor):
    assert hardware.busbw_factor(op, n) == pytest.approx(factor)


@pytest.mark.parametrize("op", ["allgather_into_tensor_coalesced", "reduce_scatter_tensor_coalesced", "all_to_allv",
                                "alltoall_base", "_reduce_scatter_base"])
def test_trace_op_spellings_are_n_minus_1_over_n(op):
    assert hardware.busbw_formula(op) == "(n-1)/n"


def test_hop_prices_and_honest_unknowns():
    h100 = hardware.find("H100 SXM")
    assert hardware.price_hop("NVLink", h100).gbyte_s == 370
    assert hardware.price_hop("SHM", h100).gbyte_s == 50
    assert hardware.price_hop("NVLink", None).gbyte_s is None
    l40s = hardware.find("L40S")
    assert hardware.price_hop("P2P", l40s).link == "PCIe Gen4"  # no NVLink on the card: P2P is PCIe
    assert hardware.price_hop("RoCE GDR", h100).gbyte_s is None
    assert hardware.price_hop("RoCE GDR", h100, nic_gbit=400).gbyte_s == 50
    assert "TCP" in hardware.price_hop("Socket", h100).basis


def test_hw_command(capsys):
    assert main(["hw"]) == 0
    assert "H100 SXM5" in capsys.readouterr().out
    assert main(["hw", "a100-80gb", "--format", "json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["id"] == "a100_80gb" and row["machine_balance_flop_per_byte"] == pytest.approx(312 / 2.039)
    assert main(["hw", "K80"]) == 2


def test_transports_prices_hops_with_the_gpu_model(tmp_path, capsys):
    from postmortem.generator import RunSpec, generate_run

    generate_run(tmp_path, RunSpec(nodes=2, gpus_per_node=4, scenario="healthy", pyspy=False,
                                   nccl_version="2.19.3", nccl_shm_node=1))
    assert main(["transports", str(tmp_path), "--quiet", "--gpu", "H20", "--format", "json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert view["accelerator"]["name"] == "H20"
    world = max(view["communicators"], key=lambda c: c["nranks"])
    prices = {h["tier"]: h["gbyte_s"] for h in world["hops"]}
    assert prices["NVLink"] == 370 and prices["SHM"] == 50


def test_network_hops_are_priced_from_ibstat_rates(capsys):
    from pathlib import Path

    sample = Path(__file__).resolve().parents[1] / "sample_logs" / "healthy-40r"
    assert main(["transports", str(sample), "--quiet", "--format", "json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert view["accelerator"]["name"] == "H20"  # from the sample's nvidia-smi CSV
    world = max(view["communicators"], key=lambda c: c["nranks"])
    roce = [h for h in world["hops"] if h["tier"] == "RoCE GDR"]
    assert roce and {h["gbyte_s"] for h in roce} == {50.0}  # 400 Gb/s ConnectX-7 ports in ibstat


def test_a_tie_between_gpu_names_is_broken_by_name_not_by_chance():
    """Mixed inputs with as many V100 as A100 rows (the real excerpts have that): the same model
    every time, so a verdict (P001's MFU) never depends on DuckDB's group order."""
    import duckdb
    import polars as pl

    from postmortem.analyzer.pipeline import Run
    from postmortem.analyzer.transports import accelerator

    names = ["Tesla V100-SXM2-32GB", "NVIDIA A100-SXM-80GB"] * 8
    picked = set()
    for order in (names, names[::-1]):
        con = duckdb.connect()
        con.register("g", pl.DataFrame({"name": order}).to_arrow())
        con.execute("CREATE TABLE gpus AS SELECT * FROM g")
        acc, source = accelerator(Run(con))
        picked.add((acc["name"], source))
    assert picked == {(hardware.find("NVIDIA A100-SXM-80GB")["name"], "gpus: NVIDIA A100-SXM-80GB")}
