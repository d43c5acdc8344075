"""L004-L006 on hand-written tool outputs (p2pBandwidthLatencyTest, perftest, bandwidthTest) next to the
host's topo -m and ibstat: they fire on a slow pair, a slow NIC, a slow PCIe link, and stay quiet on
healthy measurements."""
from __future__ import annotations

from pathlib import Path

from postmortem.analyzer.pipeline import analyze
from postmortem.rules.report import build_report
from postmortem.generator.rungen.config_files import ibstat, topo_matrix
from tests.test_linkbench import BT_NEW_GB, BT_OLD_MB, _p2p_text, _perftest

RULE_FIXTURES = {
    "L004": {"fires": ["test_slow_nvlink_pair_fires", "test_p2p_refused_between_nvlink_gpus_fires",
                       "test_outlier_pair_without_topology_fires"],
             "quiet": ["test_healthy_p2p_matrix_is_quiet", "test_pcie_cards_without_p2p_are_quiet"]},
    "L005": {"fires": ["test_nic_at_a_fifth_of_line_rate_fires", "test_bidirectional_run_is_judged_per_direction"],
             "quiet": ["test_healthy_ib_write_bw_is_quiet", "test_bidirectional_run_is_judged_per_direction"]},
    "L006": {"fires": ["test_h2d_below_pcie_fires"], "quiet": ["test_healthy_h2d_is_quiet"]},
}


def _run(tmp_path: Path, files: dict[str, str]) -> dict:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return build_report(analyze([tmp_path]))


def _codes(report: dict, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == code]


# -- L004 ---------------------------------------------------------------------------------------

def test_slow_nvlink_pair_fires(tmp_path):
    slow = {(2, 5), (5, 2)}
    report = _run(tmp_path, {"hw/gpu-a/nvidia-smi-topo.txt": topo_matrix(8),
                             "hw/gpu-a/p2p.txt": _p2p_text(8, lambda i, j: 41.0 if (i, j) in slow else 376.0)})
    [f] = _codes(report, "L004")
    pairs = {(p["src"], p["dst"]) for p in f["details"]["slow_pairs"]}
    assert pairs == slow and f["details"]["slow_pairs"][0]["expected_gbs"] == 370
    assert "41 GB/s (NV18)" in f["message"] and "370" in f["message"]


def test_p2p_refused_between_nvlink_gpus_fires(tmp_path):
    text = _p2p_text(4, lambda i, j: 9.9 if {i, j} == {0, 1} else 376.0, cannot=((0, 1), (1, 0)))
    report = _run(tmp_path, {"hw/gpu-b/nvidia-smi-topo.txt": topo_matrix(4), "hw/gpu-b/p2p.txt": text})
    [f] = _codes(report, "L004")
    assert {(p["src"], p["dst"]) for p in f["details"]["p2p_refused"]} == {(0, 1), (1, 0)}


def test_outlier_pair_without_topology_fires(tmp_path):
    report = _run(tmp_path, {"p2p.txt": _p2p_text(4, lambda i, j: 90.0 if (i, j) == (3, 0) else 376.0)})
    [f] = _codes(report, "L004")
    assert [(p["src"], p["dst"]) for p in f["details"]["slow_pairs"]] == [(3, 0)]


def test_healthy_p2p_matrix_is_quiet(tmp_path):
    report = _run(tmp_path, {"hw/gpu-a/nvidia-smi-topo.txt": topo_matrix(8),
                             "hw/gpu-a/p2p.txt": _p2p_text(8, lambda i, j: 371.0 + (i + j) % 7)})
    assert not _codes(report, "L004")


def test_pcie_cards_without_p2p_are_quiet(tmp_path):
    topo = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tSYS\t0-23\nGPU1\tSYS\t X \t0-23\n"
    text = _p2p_text(2, lambda i, j: 6.3, cannot=((0, 1), (1, 0))).replace("H100 80GB HBM3", "GeForce RTX 4090")
    report = _run(tmp_path, {"hw/ws/topo.txt": topo, "hw/ws/p2p.txt": text})
    assert not _codes(report, "L004")


# -- L005 ---------------------------------------------------------------------------------------

BW_GB = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"


def _bw_rows(avg: float) -> list[str]:
    return [BW_GB, f" 65536      5000             {avg + 1:.2f}             {avg:.2f}               0.739861",
            f" 1048576    5000             {avg + 1:.2f}             {avg:.2f}               0.046242"]


def test_nic_at_a_fifth_of_line_rate_fires(tmp_path):
    report = _run(tmp_path, {"hw/h20-a/ibstat.txt": ibstat("h20-a"),
                             "hw/h20-a/ib_send_bw.txt": _perftest("Send BW Test", _bw_rows(78.4), device="mlx5_2")})
    [f] = _codes(report, "L005")
    d = f["details"]
    assert (d["device"], d["expected_gbit"], d["measured_gbit"]) == ("mlx5_2", 400.0, 78.4)
    assert "20% of the 400 Gb/s" in f["message"] and "PFC/ECN" in f["message"]


def test_bidirectional_run_is_judged_per_direction(tmp_path):
    """A -b run reports both directions summed: 700 Gb/s on a 400G port is healthy (350 each way),
    320 is not (160 each way)."""
    ok = _run(tmp_path / "ok", {"hw/h20-a/ibstat.txt": ibstat("h20-a"),
                                "hw/h20-a/bw.txt": _perftest("Send Bidirectional BW Test", _bw_rows(700.0))})
    assert not _codes(ok, "L005")
    bad = _run(tmp_path / "bad", {"hw/h20-a/ibstat.txt": ibstat("h20-a"),
                                  "hw/h20-a/bw.txt": _perftest("Send Bidirectional BW Test", _bw_rows(320.0))})
    [f] = _codes(bad, "L005")
    assert f["details"]["measured_gbit"] == 160.0 and f["details"]["bidirectional"] is True


def test_healthy_ib_write_bw_is_quiet(tmp_path):
    report = _run(tmp_path, {"hw/h20-a/ibstat.txt": ibstat("h20-a"),
                             "hw/h20-a/ib_write_bw.txt": _perftest("RDMA_Write BW Test", _bw_rows(387.9))})
    assert not _codes(report, "L005")


# -- L006 ---------------------------------------------------------------------------------------

def test_h2d_below_pcie_fires(tmp_path):
    slow = BT_NEW_GB.replace("55.2", "13.1")
    report = _run(tmp_path, {"hw/gpu-a/bandwidthTest.txt": slow})
    [f] = _codes(report, "L006")
    assert f["details"]["measured"] == {"H2D": 13.1} and f["details"]["expected_gbs"] == 50
    assert "PCIe Gen5" in f["title"]


def test_healthy_h2d_is_quiet(tmp_path):
    report = _run(tmp_path, {"hw/gpu-a/bandwidthTest.txt": BT_NEW_GB, "hw/gpu-b/bandwidthTest.txt": BT_OLD_MB})
    assert not _codes(report, "L006")


# -- N016 ---------------------------------------------------------------------------------------

RULE_FIXTURES["N016"] = {
    "fires": ["test_simple_only_on_every_node_fires", "test_ring_forced_at_128_ranks_fires",
              "test_ll128_disabled_on_hopper_is_info"],
    "quiet": ["test_forced_setting_with_a_stated_workaround_is_quiet", "test_ring_at_16_ranks_is_quiet",
              "test_no_forced_setting_is_quiet"],
}


def _sbatch(*exports: str) -> str:
    return "#!/bin/bash\n#SBATCH --nodes=16\n#SBATCH --gpus-per-node=8\n\nexport NCCL_DEBUG=INFO\n" + \
        "".join(e + "\n" for e in exports) + "srun torchrun train.py\n"


def _init_line(nranks: int) -> str:
    return (f"h20-node-01:1234:1300 [0] NCCL INFO comm 0x5581c0 rank 0 nranks {nranks} cudaDev 0 nvmlDev 0 "
            "busId 18000 commId 0x9f928dc519724ce3 - Init COMPLETE\n")


def test_simple_only_on_every_node_fires(tmp_path_factory):
    from postmortem.generator import RunSpec, generate_run
    out = tmp_path_factory.mktemp("simple")
    generate_run(out, RunSpec(scenario="healthy", nodes=2, gpus_per_node=2, pyspy=False, iterations_before_hang=3,
                              config_files=True, nccl_env={"NCCL_PROTO": "Simple"}))
    report = build_report(analyze([out]))
    [f] = _codes(report, "N016")
    assert f["severity"] == "warning" and f["nodes"] == ["h20-node-01", "h20-node-02"]
    assert "only the Simple protocol" in f["message"] and "(every node)" in f["title"]


def test_ring_forced_at_128_ranks_fires(tmp_path):
    report = _run(tmp_path, {"job.sbatch": _sbatch("export NCCL_ALGO=Ring"), "logs/rank0.log": _init_line(128)})
    [f] = _codes(report, "N016")
    assert f["details"]["world"] == 128 and "2x127 steps" in f["message"]


def test_ll128_disabled_on_hopper_is_info(tmp_path):
    report = _run(tmp_path, {"job.sbatch": _sbatch("export NCCL_PROTO=^LL128"),
                             "hw/h20-node-01/nvidia-smi-topo.txt": topo_matrix(2),
                             "hw/h20-node-01/p2p.txt": _p2p_text(2, lambda i, j: 376.0)})
    [f] = _codes(report, "N016")
    assert f["severity"] == "info" and "LL128" in f["message"]


def test_forced_setting_with_a_stated_workaround_is_quiet(tmp_path):
    report = _run(tmp_path, {"job.sbatch": _sbatch("# workaround: LL128 hang on this driver, NVIDIA/nccl issue #1234",
                                                   "export NCCL_PROTO=Simple",
                                                   "export NCCL_ALGO=Ring  # WAR for a tree hang at 128 ranks"),
                             "logs/rank0.log": _init_line(128)})
    assert not _codes(report, "N016")


def test_ring_at_16_ranks_is_quiet(tmp_path):
    report = _run(tmp_path, {"job.sbatch": _sbatch("export NCCL_ALGO=Ring"), "logs/rank0.log": _init_line(16)})
    assert not _codes(report, "N016")


def test_no_forced_setting_is_quiet(tmp_path):
    report = _run(tmp_path, {"job.sbatch": _sbatch("export NCCL_ALGO=^NVLS"), "logs/rank0.log": _init_line(128)})
    assert not _codes(report, "N016")


def test_allowed_sets():
    from postmortem.rules.network.n016_forced_algo_proto import ALGOS, PROTOS, allowed
    assert allowed("Simple", PROTOS) == {"simple"}
    assert allowed("^LL,LL128", PROTOS) == {"simple"}
    assert allowed("^ll128", PROTOS) == {"ll", "simple"}
    assert allowed("allreduce:ring;broadcast:tree", ALGOS) == {"ring"}
    assert allowed("broadcast:tree", ALGOS) is None
    assert allowed("^CollNet", ALGOS) == ALGOS - {"collnetdirect", "collnetchain"}


# -- postmortem hw ------------------------------------------------------------------------------

def test_hw_command_shows_the_link_measurements(tmp_path, capsys):
    from postmortem.cli import main
    from tests.test_linkbench import LAT_CURRENT
    for rel, text in {"hw/gpu-a/p2p.txt": _p2p_text(4, lambda i, j: 41.0 if (i, j) == (1, 2) else 376.0),
                      "hw/gpu-a/bw.txt": _perftest("Send BW Test", _bw_rows(78.4)) + _perftest("Send Latency Test",
                                                                                                LAT_CURRENT),
                      "hw/gpu-a/bandwidthTest.txt": BT_NEW_GB}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert main(["hw", str(tmp_path), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "P2P=enabled writes GB/s: min 41, median 376, max 376 (worst GPU1->GPU2)" in out
    assert "H2D pinned: 55.2 GB/s at 32000000 B" in out
    assert "mlx5_0 Send BW Test (client side, link Ethernet, MTU 4096, GID index 3): best average 78.4 Gb/s" in out
    assert "Send Latency Test" in out and "1.79 us at 2 B" in out
    assert main(["hw", str(tmp_path), "--quiet", "--format", "json"]) == 0
    import json
    parsed = json.loads(capsys.readouterr().out)["parsed"]
    assert parsed["perftest"][0]["best_avg_gbit"] == 78.4 and parsed["host_device"] and parsed["p2p"]


def test_setting_on_one_node_only_is_left_to_e001(tmp_path):
    """env-mismatch: NCCL_PROTO=Simple on h20-node-02 only is a mismatch (E001), not N016's."""
    report = build_report(analyze([Path(__file__).resolve().parents[1] / "sample_logs" / "env-mismatch"]))
    assert not _codes(report, "N016") and _codes(report, "E001")


RULE_FIXTURES["N016"]["quiet"].append("test_setting_on_one_node_only_is_left_to_e001")
