"""Hardware tool facts become findings and are shown (issue 22, bullet 7): ports down (ibstat,
ibv_devinfo, ibdev2netdev, iblinkinfo) and ibpanic lines (G005), MIG mode (G006), GPUs without a
NIC on their PCIe switch (G007), and ``postmortem hw FILE`` printing what it parsed."""
from __future__ import annotations

import json
from pathlib import Path

from postmortem.cli import main
from postmortem.analyzer.pipeline import analyze
from tests.scenario import report_of

RULE_FIXTURES = {
    "G005": {"fires": ["test_seven_of_eight_ports_down_in_ibdev2netdev", "test_ibpanic_names_the_vanished_device",
                       "test_real_dual_port_card_with_one_port_down_is_information"],
             "quiet": ["test_ports_all_up_are_quiet"]},
    "G006": {"fires": ["test_mig_mode_on_is_reported"], "quiet": ["test_mig_mode_off_is_quiet"]},
    "G007": {"fires": ["test_a_gpu_without_a_near_nic"], "quiet": ["test_every_gpu_with_its_nic_is_quiet"]},
}


def _write(folder: Path, files: dict[str, str]) -> Path:
    # each host's NCCL line names it (a folder name alone is not taken for a host)
    hosts = {name.split("/")[1] for name in files if name.count("/") >= 2}
    files = {**files, **{f"logs/{h}/nccl.log": f"{h}:10:10 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
                         for h in hosts}}
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder


def _find(report: dict, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == code]


def _ibdev2netdev(states: list[str]) -> str:
    return "".join(f"mlx5_{i} port 1 ==> ibp{20 + i}s0 ({s})\n" for i, s in enumerate(states))


def test_seven_of_eight_ports_down_in_ibdev2netdev(tmp_path):
    folder = _write(tmp_path, {"hw/gpu-07/ibdev2netdev.txt": _ibdev2netdev(["Up"] + ["Down"] * 7),
                               "hw/gpu-08/ibdev2netdev.txt": _ibdev2netdev(["Up"] * 8)})
    found = _find(report_of(folder), "G005")
    assert len(found) == 1 and found[0]["severity"] == "warning" and found[0]["nodes"] == ["gpu-07"]
    assert "7 of 8 NIC port(s) on gpu-07" in found[0]["message"] and "interface ibp21s0" in found[0]["message"]
    assert "IP interface's" in found[0]["message"]


def test_ports_all_up_are_quiet(tmp_path):
    folder = _write(tmp_path, {"hw/gpu-08/ibdev2netdev.txt": _ibdev2netdev(["Up"] * 8)})
    assert not _find(report_of(folder), "G005")


def test_real_dual_port_card_with_one_port_down_is_information(real_logs):
    found = _find(report_of(real_logs / "hw" / "ibstat_rdma-core-847_mlx4-ib-2port-tabs-ibwarn.txt"), "G005")
    assert [f["severity"] for f in found] == ["info"]
    assert "mlx4_0:1 Down/Disabled" in found[0]["message"] and "1 of 2" in found[0]["message"]


def test_ibpanic_names_the_vanished_device(tmp_path):
    text = ("ibpanic: [4121] main: stat of IB device 'mlx5_3' failed: No such file or directory\n"
            "CA 'mlx5_0'\n\tCA type: MT4129\n\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 400\n")
    found = _find(report_of(_write(tmp_path, {"hw/gpu-03/ibstat.txt": text})), "G005")
    panic = [f for f in found if f["details"]["check"] == "ibpanic"]
    assert panic and panic[0]["details"]["devices"] == ["mlx5_3"] and panic[0]["nodes"] == ["gpu-03"]


_Q = """==============NVSMI LOG==============
Timestamp                                 : Fri Jul 24 08:00:05 2026
Driver Version                            : 550.54.15
Attached GPUs                             : 1
GPU 00000000:18:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    MIG Mode
        Current                           : {mode}
        Pending                           : {mode}
"""


def test_mig_mode_on_is_reported(tmp_path):
    folder = _write(tmp_path, {"node_logs/gpu-05/nvidia-smi-q.txt": _Q.format(mode="Enabled"),
                               "hw/gpu-06/nvidia-smi.csv": "index, name, mig.mode.current\n0, NVIDIA H100 80GB HBM3, "
                                                           "Enabled\n"})
    f = _find(report_of(folder), "G006")
    assert len(f) == 1 and f[0]["nodes"] == ["gpu-05", "gpu-06"] and f[0]["details"]["count"] == 2
    assert "-mig 0" in f[0]["suggestion"]


def test_mig_mode_off_is_quiet(tmp_path):
    assert not _find(report_of(_write(tmp_path, {"node_logs/gpu-05/nvidia-smi-q.txt": _Q.format(mode="Disabled")})), "G006")


def _topo(nic_of: dict[int, str]) -> str:
    """4 GPUs, 4 NICs; GPU g's path to NIC k is ``nic_of[g]`` when k == g, else NODE/SYS."""
    head = "\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tNIC1\tNIC2\tNIC3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    rows = []
    for g in range(4):
        gpus = ["X" if h == g else "NV18" for h in range(4)]
        nics = [nic_of.get(g, "PIX") if k == g else ("NODE" if k // 2 == g // 2 else "SYS") for k in range(4)]
        rows.append(f"GPU{g}\t" + "\t".join(gpus + nics) + f"\t0-47\t{g // 2}\t\tN/A\n")
    legend = "\nNIC Legend:\n\n" + "".join(f"  NIC{k}: mlx5_{k}\n" for k in range(4))
    return "nvidia-smi topo -m\n" + head + "".join(rows) + legend


def test_a_gpu_without_a_near_nic(tmp_path):
    folder = _write(tmp_path, {"hw/gpu-09/nvidia-smi-topo.txt": _topo({3: "SYS"})})
    f = _find(report_of(folder), "G007")
    assert len(f) == 1 and f[0]["nodes"] == ["gpu-09"] and f[0]["details"]["gpus_without"] == ["GPU3"]
    assert f[0]["severity"] == "info"          # no inter-node NCCL hop in the inputs


def test_every_gpu_with_its_nic_is_quiet(tmp_path):
    assert not _find(report_of(_write(tmp_path, {"hw/gpu-09/nvidia-smi-topo.txt": _topo({})})), "G007")


def test_hw_command_prints_what_it_parsed(tmp_path, capsys, real_logs):
    folder = _write(tmp_path, {"hw/gpu-07/ibdev2netdev.txt": _ibdev2netdev(["Up", "Down"]),
                               "hw/gpu-09/nvidia-smi-topo.txt": _topo({3: "SYS"})})
    assert main(["hw", str(folder), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "gpu-07 mlx5_1:1 Down, interface ibp21s0 (ibdev2netdev)" in out
    assert "nvidia-smi topo -m of gpu-09" in out and "GPUs without a NIC on their PCIe switch: GPU3" in out
    assert "None" not in out
    assert main(["hw", str(real_logs / "hw" / "ibstat_l2fwd-nv-6_roce-cx6dx-100g.txt"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "Active/LinkUp, 100 Gb/s, Ethernet" in out and "RoCE port at 100 Gb/s: ~12.5 GB/s per direction" in out
    assert main(["hw", str(folder), "--quiet", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {p["ca"] for p in data["parsed"]["nic_ports"]} == {"mlx5_0", "mlx5_1"}


_NT_HEAD = ("# nThread 1 nGpus 2 minBytes 8 maxBytes 16777216 step: 2(factor) warmup iters: 5 iters: 20 validation: 1\n"
            "#\n# Using devices\n#  Rank  0 Group  0 Pid   8756 on     node01 device  0 [0x01] NVIDIA H100 80GB HBM3\n")
_NT_ROWS = ("#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   "
            "busbw  #wrong\n           8             2     float     sum      -1    19.90    0.00    0.00       0    "
            "18.96    0.00    0.00       0\n# Avg bus bandwidth    : 0.0012 \n")


def test_nccl_tests_header_without_rows_is_a_stall(tmp_path):
    """nccl-tests that printed its header and nothing else is stuck (nccl#606: a PCIe P2P hang)."""
    from postmortem.analyzer.outcome import job_outcome

    run = analyze([_write(tmp_path / "stuck", {"all_reduce_perf.txt": _NT_HEAD})])
    out = job_outcome(run)
    assert out["outcome"] == "hung" and "no result row" in out["basis"][0]["what"]
    run = analyze([_write(tmp_path / "done", {"all_reduce_perf.txt": _NT_HEAD + _NT_ROWS})])
    assert job_outcome(run)["outcome"] != "hung"
