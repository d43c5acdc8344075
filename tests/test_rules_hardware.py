"""G rules (GPU faults, degraded PCIe/NIC links, GPU memory health) on generated runs, hand-written
runs and the real hw excerpts: they blame the GPU only when its fault comes before the job's first
error, and stay quiet (or say "not the cause") where they must."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from postmortem.analyzer.pipeline import analyze
from postmortem.rules.report import build_report
from tests.scenario import write_scenario

RULE_FIXTURES = {
    "G001": {"fires": ["test_xid79_before_timeout_names_the_gpu", "test_xid48_on_first_node_with_flight_recorder",
                       "test_handwritten_xid79_before_the_timeouts",
                       "test_handwritten_dmesg_without_time_agrees_with_hang",
                       "test_handwritten_xid31_repeated_on_one_gpu"],
             "quiet": ["test_xid_long_after_the_first_timeout_is_not_the_cause", "test_xid_on_a_gpu_no_rank_used",
                       "test_handwritten_xid43_45_after_the_kill_are_ignored",
                       "test_handwritten_single_xid13_is_the_application",
                       "test_handwritten_dmesg_without_time_on_another_rank", "test_healthy_run_is_quiet"]},
    "G002": {"fires": ["test_degraded_pcie_width_and_nic_rate"],
             "quiet": ["test_healthy_run_is_quiet", "test_pcie_gen_down_on_every_idle_gpu_is_quiet"]},
    "G003": {"fires": ["test_degraded_pcie_width_and_nic_rate", "test_real_down_port_that_nccl_uses"],
             "quiet": ["test_healthy_run_is_quiet", "test_real_ibstat_down_port_unused_is_quiet",
                       "test_real_iblinkinfo_edr_hosts_next_to_hdr_aggregation_node_is_quiet",
                       "test_real_ibv_devinfo_port_down_unused_is_quiet"]},
    "G004": {"fires": ["test_handwritten_remap_pending_without_xid"],
             "quiet": ["test_healthy_run_is_quiet", "test_xid79_before_timeout_names_the_gpu"]},
}

SMALL = dict(nodes=3, gpus_per_node=4, pyspy=False, iterations_before_hang=3)


def _generate(tmp_path_factory, name: str, **kw) -> tuple[Path, dict]:
    from postmortem.generator import RunSpec, generate_run
    out = tmp_path_factory.mktemp(name)
    truth = generate_run(out, RunSpec(**{**SMALL, **kw}))
    return out, truth


def _report(folder: Path) -> dict:
    return build_report(analyze([folder]))


def _by_code(report: dict, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == code]


# -- generated runs ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def xid79_skewed(tmp_path_factory):
    """Rank 5's GPU falls off the bus; its node's clock runs 15 min ahead, so its raw journal time is
    later than the other nodes' timeouts: only the clock correction puts the Xid first."""
    out, truth = _generate(tmp_path_factory, "xid79", culprit=5, node_fault="xid79", clock_skew_s=900.0)
    return _report(out), truth


@pytest.fixture(scope="module")
def xid48_fr(tmp_path_factory):
    out, truth = _generate(tmp_path_factory, "xid48", culprit=2, node_fault="xid48", flight_recorder="json",
                           clock_skew_s=20.0, skew_node=2)
    return _report(out), truth


@pytest.fixture(scope="module")
def xid94_late(tmp_path_factory):
    out, truth = _generate(tmp_path_factory, "xid94late", culprit=9, node_fault="xid94", fault_at_s=1500.0)
    return _report(out), truth


@pytest.fixture(scope="module")
def healthy_pair(tmp_path_factory):
    """A healthy 2x4 run with node logs and hardware files, and a copy with one GPU at x8 and one
    NIC at 200 of 400 Gb/s."""
    out, _ = _generate(tmp_path_factory, "healthy", nodes=2, scenario="healthy", node_logs=True, config_files=True)
    degraded = out.parent / (out.name + "-degraded")
    shutil.copytree(out, degraded)
    smi = degraded / "node_logs" / "h20-node-02" / "nvidia-smi-q.txt"
    text = smi.read_text()
    block = text.index("GPU 00000000:3A:00.0")
    head, tail = text[:block], text[block:]
    tail = tail.replace("Current                   : 16x", "Current                   : 8x", 1)
    smi.write_text(head + tail)
    ibstat = degraded / "hw" / "h20-node-01" / "ibstat.txt"
    text = ibstat.read_text()
    at = text.index("CA 'mlx5_3'")
    ibstat.write_text(text[:at] + text[at:].replace("Rate: 400", "Rate: 200", 1))
    return _report(out), _report(degraded)


def test_xid79_before_timeout_names_the_gpu(xid79_skewed):
    report, truth = xid79_skewed
    fault = truth["node_fault"]
    g001 = _by_code(report, "G001")
    assert len(g001) == 1
    f = g001[0]
    assert f["culprit"] and f["severity"] == "error" and f["category"] == "hardware" and f["confidence"] >= 0.75
    assert f["ranks"] == [5] and f["nodes"] == [fault["host"]]
    gpu = f["gpus"][0]
    assert (gpu["node"], gpu["bus_id"], gpu["gpu_index"], gpu["serial"], gpu["uuid"]) == \
        (fault["host"], fault["pci"], fault["local_gpu"], fault["serial"], fault["uuid"])
    assert f["details"]["order"] == "before" and 590 < f["details"]["seconds_before_first_error"] < 610
    assert any("NVRM: Xid" in e["text"] for e in f["evidence"])
    assert any("Watchdog caught collective operation timeout" in e["text"] for e in f["evidence"])
    assert "scontrol update NodeName=h20-node-02 State=DRAIN" in f["suggestion"]
    v = report["verdict"]
    assert v["status"] == "culprit" and v["category"] == "hardware" and v["culprit"]["ranks"] == [5]
    h001 = _by_code(report, "H001")[0]
    assert f["id"] in h001["caused_by"]
    assert not _by_code(report, "G004") and not _by_code(report, "G002")


def test_xid48_on_first_node_with_flight_recorder(xid48_fr):
    report, truth = xid48_fr
    f = _by_code(report, "G001")[0]
    assert f["culprit"] and f["ranks"] == [2] and f["nodes"] == ["h20-node-01"] and f["details"]["xid"] == 48
    assert "row" in f["message"] and f["gpus"][0]["serial"] == truth["node_fault"]["serial"]
    assert report["verdict"]["category"] == "hardware" and report["verdict"]["culprit"]["nodes"] == ["h20-node-01"]


def test_xid_long_after_the_first_timeout_is_not_the_cause(xid94_late):
    report, _ = xid94_late
    f = _by_code(report, "G001")[0]
    assert not f["culprit"] and f["severity"] == "warning" and f["details"]["order"] == "after"
    assert "after the job's first error" in f["message"]
    v = report["verdict"]
    assert v["category"] != "hardware" and v["culprit"]["ranks"] == [9]   # the hang analysis still names rank 9


def test_healthy_run_is_quiet(healthy_pair):
    healthy, _ = healthy_pair
    assert not [f for f in healthy["findings"] if f["code"].startswith("G")]


def test_degraded_pcie_width_and_nic_rate(healthy_pair):
    _, degraded = healthy_pair
    g002 = _by_code(degraded, "G002")
    assert len(g002) == 1 and g002[0]["nodes"] == ["h20-node-02"] and g002[0]["severity"] == "warning"
    assert g002[0]["gpus"][0]["bus_id"] == "0000:3a:00.0" and "x8 of x16" in g002[0]["message"]
    assert g002[0]["ranks"] == [6] and not g002[0]["culprit"]
    g003 = _by_code(degraded, "G003")
    assert len(g003) == 1 and g003[0]["nodes"] == ["h20-node-01"] and "mlx5_3:1" in g003[0]["title"]
    assert g003[0]["details"]["peers_rate_gbps"] == 400 and g003[0]["details"]["used_by_nccl"]
    assert degraded["verdict"]["status"] in ("degraded", "healthy")


# -- hand-written runs (independent of the generator) -------------------------------------------------------

def _journal(folder: Path, node: str, lines: list[str], name: str = "journal.txt") -> None:
    path = folder / node / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines))


XID79 = "NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def test_handwritten_xid79_before_the_timeouts(tmp_path):
    folder = write_scenario(tmp_path, ranks=4, culprit=2)      # rank 2: node-02, busId 18000
    _journal(folder, "node-02", [f"2026-07-24T09:02:01+0000 node-02 kernel: {XID79}",
                                 "2026-07-24T09:02:01+0000 node-02 kernel: NVRM: GPU 0000:18:00.0: GPU has fallen off "
                                 "the bus."])
    report = _report(folder)
    f = _by_code(report, "G001")[0]
    assert f["culprit"] and f["ranks"] == [2] and f["nodes"] == ["node-02"] and f["gpus"][0]["bus_id"] == "0000:18:00.0"
    assert f["details"]["order"] == "before"
    assert report["verdict"]["category"] == "hardware" and report["verdict"]["culprit"]["ranks"] == [2]


def test_xid_on_a_gpu_no_rank_used(tmp_path):
    """Both ranks of node-02 are on bus 18 and 2a (NCCL busId): an Xid on bus 3a is another tenant's GPU."""
    folder = write_scenario(tmp_path, ranks=4, culprit=2)
    other = XID79.replace("0000:18:00", "0000:3a:00")
    _journal(folder, "node-02", [f"2026-07-24T09:02:01+0000 node-02 kernel: {other}"])
    report = _report(folder)
    f = _by_code(report, "G001")[0]
    assert not f["culprit"] and f["severity"] == "info" and f["ranks"] == []
    assert f["details"]["rank_join"] == "not-job" and f["gpus"][0]["bus_id"] == "0000:3a:00.0"
    assert report["verdict"]["category"] == "hang" and report["verdict"]["culprit"]["ranks"] == [2]


def test_handwritten_xid43_45_after_the_kill_are_ignored(tmp_path):
    folder = write_scenario(tmp_path, ranks=4, culprit=2)
    _journal(folder, "node-02", [
        "2026-07-24T09:12:30+0000 node-02 kernel: NVRM: Xid (PCI:0000:18:00): 43, pid=1002, name=python, Ch 00000008",
        "2026-07-24T09:12:31+0000 node-02 kernel: NVRM: Xid (PCI:0000:18:00): 45, pid=1002, name=python, Ch 00000008"])
    report = _report(folder)
    assert not _by_code(report, "G001")
    assert report["verdict"]["category"] == "hang"


def test_handwritten_single_xid13_is_the_application(tmp_path):
    folder = write_scenario(tmp_path, ranks=4, culprit=2)
    _journal(folder, "node-02", ["2026-07-24T09:02:01+0000 node-02 kernel: NVRM: Xid (PCI:0000:18:00): 13, pid=1002, "
                                 "name=python, Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range"])
    f = _by_code(_report(folder), "G001")[0]
    assert not f["culprit"] and f["severity"] == "info" and "the program" in f["message"]


def test_handwritten_xid31_repeated_on_one_gpu(tmp_path):
    folder = write_scenario(tmp_path, ranks=4, culprit=2)
    xid31 = "NVRM: Xid (PCI:0000:18:00): 31, pid=1002, name=python, Ch 00000010, intr 10000000. MMU Fault: ENGINE"
    _journal(folder, "node-02", [f"2026-07-24T09:0{m}:01+0000 node-02 kernel: {xid31}" for m in (1, 2, 3)])
    f = _by_code(_report(folder), "G001")[0]
    assert f["culprit"] and f["confidence"] <= 0.55 and f["details"]["occurrences"] == 3
    assert "no other" in f["message"]


def test_handwritten_dmesg_without_time_agrees_with_hang(tmp_path):
    """Plain dmesg (seconds since boot, no journal to anchor the boot time): the Xid cannot be placed
    on the job's clock; it is on the very rank the hang analysis found missing, so it is blamed at a
    lower confidence."""
    folder = write_scenario(tmp_path, ranks=4, culprit=2)
    _journal(folder, "node-02", [f"[ 8812.402823] {XID79}"], name="dmesg.txt")
    f = _by_code(_report(folder), "G001")[0]
    assert f["details"]["order"] == "unknown" and f["culprit"] and f["confidence"] <= 0.6


def test_handwritten_dmesg_without_time_on_another_rank(tmp_path):
    folder = write_scenario(tmp_path, ranks=4, culprit=2)
    _journal(folder, "node-02", [f"[ 8812.402823] {XID79.replace('0000:18:00', '0000:2a:00')}"], name="dmesg.txt")
    report = _report(folder)
    f = _by_code(report, "G001")[0]
    assert f["ranks"] == [3] and not f["culprit"] and "cannot be ordered" in f["message"]
    assert report["verdict"]["culprit"]["ranks"] == [2] and report["verdict"]["category"] == "hang"


NVSMI = """==============NVSMI LOG==============
Timestamp                                 : Fri Jul 24 09:30:00 2026
Driver Version                            : 535.129.03
Attached GPUs                             : 2
GPU 00000000:18:00.0
    Product Name                          : NVIDIA H20
    Serial Number                         : 1652123456789
    Minor Number                          : 0
    PCI
        Bus Id                            : 00000000:18:00.0
        GPU Link Info
            PCIe Generation
                Max                       : 5
                Current                   : {gen}
            Link Width
                Max                       : 16x
                Current                   : 16x
    Clocks Event Reasons
        Idle                              : Active
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 1
        Pending                           : {pending}
        Remapping Failure Occurred        : No
GPU 00000000:2A:00.0
    Product Name                          : NVIDIA H20
    Serial Number                         : 1652123456790
    Minor Number                          : 1
    PCI
        Bus Id                            : 00000000:2A:00.0
        GPU Link Info
            PCIe Generation
                Max                       : 5
                Current                   : {gen}
            Link Width
                Max                       : 16x
                Current                   : 16x
    Clocks Event Reasons
        Idle                              : Active
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 0
        Pending                           : No
        Remapping Failure Occurred        : No
"""


def test_handwritten_remap_pending_without_xid(tmp_path):
    folder = write_scenario(tmp_path, ranks=4, culprit=2)
    _journal(folder, "node-02", NVSMI.format(gen=5, pending="Yes").splitlines(), name="nvidia-smi-q.txt")
    report = _report(folder)
    f = _by_code(report, "G004")[0]
    assert f["nodes"] == ["node-02"] and f["ranks"] == [2] and not f["culprit"] and f["severity"] == "warning"
    assert f["gpus"][0]["serial"] == "1652123456789" and "nvidia-smi -r -i 0000:18:00.0" in f["suggestion"]
    assert report["verdict"]["category"] == "hang"


def test_pcie_gen_down_on_every_idle_gpu_is_quiet(tmp_path):
    folder = write_scenario(tmp_path, ranks=4, culprit=2)
    _journal(folder, "node-02", NVSMI.format(gen=1, pending="No").splitlines(), name="nvidia-smi-q.txt")
    report = _report(folder)
    assert not _by_code(report, "G002") and not _by_code(report, "G004")


# -- real excerpts (../shared/real-data/logs/hw) ------------------------------------------------------------

def _with_real(tmp_path: Path, real_logs: Path, name: str, node: str = "node-01") -> Path:
    """A hand-written 4-rank run plus one real excerpt, copied under the node's folder (a link out of
    the job folder would be skipped: docs/security.md)."""
    folder = write_scenario(tmp_path, ranks=4, culprit=2)
    (folder / node).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(real_logs / "hw" / name, folder / node / name)
    return folder


def test_real_ibstat_down_port_unused_is_quiet(tmp_path, real_logs):
    """INDEX: port 1 Down/Disabled `Rate: 10`, port 2 Active `Rate: 56`: the down port is not used by the
    job, and a disabled port's rate means nothing: no degraded-link finding."""
    report = _report(_with_real(tmp_path, real_logs, "ibstat_rdma-core-847_mlx4-ib-2port-tabs-ibwarn.txt"))
    assert not _by_code(report, "G003")


def test_real_ibv_devinfo_port_down_unused_is_quiet(tmp_path, real_logs):
    report = _report(_with_real(tmp_path, real_logs, "ibv_devinfo_deepep-60_port-down-mtu-1024-mixed-cx6-cx7.txt"))
    assert not _by_code(report, "G003")


def test_real_iblinkinfo_edr_hosts_next_to_hdr_aggregation_node_is_quiet(tmp_path, real_logs):
    """INDEX: EDR (4X 25.78125) host links next to an HDR (53.125) aggregation node on an MQM8700: the
    hosts' EDR links are what their HCAs do, not a degraded link."""
    report = _report(_with_real(tmp_path, real_logs, "iblinkinfo_nccl-tests-71_edr-hdr-lane-speeds.txt"))
    assert not _by_code(report, "G003")


def test_real_down_port_that_nccl_uses(tmp_path, real_logs):
    """The same real ibstat excerpt, on a node whose NCCL says it uses mlx4_0 port 1 (the Down one)."""
    folder = _with_real(tmp_path, real_logs, "ibstat_rdma-core-847_mlx4-ib-2port-tabs-ibwarn.txt")
    log = folder / "node-01" / "rank0.log"
    lines = log.read_text().splitlines()
    lines.insert(1, "node-01:1000:1000 [0] NCCL INFO NET/IB : Using [0]mlx4_0:1/IB [1]mlx4_0:2/IB ; "
                    "OOB eth0:10.0.0.1<0>")
    log.write_text("\n".join(lines) + "\n")
    report = _report(folder)
    g003 = _by_code(report, "G003")
    assert len(g003) == 1 and "mlx4_0:1" in g003[0]["title"] and g003[0]["nodes"] == ["node-01"]
    assert not g003[0]["culprit"] and re.search(r"\bDown\b", g003[0]["message"])
