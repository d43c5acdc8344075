"""Memory rules (M001-M003): generated runs (small, once per module), hand-written runs, real
excerpts, and quiet cases (a healthy 85.6 GB of 96 GB peak)."""
from __future__ import annotations

from pathlib import Path

import pytest

from postmortem.analyzer.pipeline import analyze
from postmortem.rules.base import Options
from postmortem.rules.report import build_report
from postmortem.generator import RunSpec, generate_run

RULE_FIXTURES = {
    "M001": {"fires": ["test_oom_at_first_optimizer_step_names_rank_and_fragmentation",
                       "test_backward_oom_is_not_called_optimizer_init", "test_hand_written_old_oom_text",
                       "test_real_megatron_525_oom_sizes", "test_real_nccl_1235_oom_during_p2p_setup"],
             "quiet": ["test_healthy_run_is_quiet", "test_real_trl_2784_zero3_samples_are_quiet"]},
    "M002": {"fires": ["test_hand_written_peak_near_capacity", "test_hand_written_uneven_ranks"],
             "quiet": ["test_healthy_run_is_quiet", "test_oom_at_first_optimizer_step_names_rank_and_fragmentation",
                       "test_real_trl_2784_zero3_samples_are_quiet"]},
    "M003": {"fires": ["test_what_if_h100_states_the_shortfall", "test_what_if_h200_fits"],
             "quiet": ["test_healthy_run_is_quiet", "test_what_if_without_memory_lines_is_info_only"]},
}


def _codes(report: dict, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == code]


def _run(path: Path, what_if: str | None = None) -> dict:
    return build_report(analyze([path]), Options(what_if_gpu=what_if))


@pytest.fixture(scope="module")
def oom_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("oom_init")
    generate_run(out, RunSpec(nodes=2, gpus_per_node=4, seed=0, pyspy=False, scenario="crash", crash_end="oom",
                              oom_site="optimizer-init", iterations_before_hang=2, culprit=5))
    return out


@pytest.fixture(scope="module")
def healthy_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("healthy")
    generate_run(out, RunSpec(nodes=2, gpus_per_node=4, seed=0, pyspy=False, scenario="healthy"))
    return out


def test_oom_at_first_optimizer_step_names_rank_and_fragmentation(oom_run):
    report = _run(oom_run)
    (f,) = _codes(report, "M001")
    assert f["ranks"] == [5] and f["nodes"] == ["h20-node-02"] and f["culprit"] and f["category"] == "crash"
    assert f["details"]["optimizer_state_init"] and f["details"]["fragmentation"]
    assert f["details"]["requested_mib"] == pytest.approx(2048)
    assert "understate" in f["message"] and "85.6 GB" in f["message"]
    assert "expandable_segments:True" in f["suggestion"]
    assert report["verdict"]["status"] == "culprit" and report["verdict"]["culprit"]["ranks"] == [5]
    assert not _codes(report, "M002") and not _codes(report, "M003")


def test_what_if_h100_states_the_shortfall(oom_run):
    (f,) = _codes(_run(oom_run, "H100"), "M003")
    assert f["severity"] == "warning" and not f["details"]["fits"]
    assert "short by 5.6 GB" in f["message"]
    for lever in ("tensor parallelism", "recompute", "offload", "ZeRO"):
        assert lever in f["message"]


def test_what_if_h200_fits(oom_run):
    (f,) = _codes(_run(oom_run, "H200"), "M003")
    assert f["severity"] == "info" and f["details"]["fits"]


def test_backward_oom_is_not_called_optimizer_init(tmp_path):
    generate_run(tmp_path, RunSpec(nodes=2, gpus_per_node=2, seed=1, pyspy=False, nccl_debug=False,
                                   scenario="crash", crash_end="oom", iterations_before_hang=3, culprit=3))
    (f,) = _codes(_run(tmp_path), "M001")
    assert f["ranks"] == [3] and not f["details"]["optimizer_state_init"]
    assert "first optimizer step" not in f["title"]


def test_healthy_run_is_quiet(healthy_run):
    report = _run(healthy_run)
    for code in ("M001", "M002", "M003"):
        assert not _codes(report, code), code


# -- hand-written runs --------------------------------------------------------------------------

def _megatron_mem(rank: int, it: int, max_alloc: float, reserved: float) -> str:
    return (f"[Rank {rank}] (after {it} iterations) memory (MB) | allocated: {max_alloc / 2:.2f} | "
            f"max allocated: {max_alloc:.2f} | reserved: {reserved:.2f} | max reserved: {reserved:.2f}")


def _write_ranks(folder: Path, lines_by_rank: dict[int, list[str]], smi: bool = True) -> Path:
    for rank, lines in lines_by_rank.items():
        d = folder / "logs" / "attempt_0" / str(rank)
        d.mkdir(parents=True, exist_ok=True)
        (d / "stdout.log").write_text("\n".join(lines) + "\n")
    if smi:
        (folder / "nvidia-smi.csv").write_text(
            "index, name, pci.bus_id, memory.total [MiB]\n0, NVIDIA H20, 00000000:18:00.0, 97871 MiB\n")
    return folder


def test_hand_written_peak_near_capacity(tmp_path):
    _write_ranks(tmp_path, {0: [_megatron_mem(0, 10, 95100.0, 96500.0)], 1: [_megatron_mem(1, 10, 94900.0, 96400.0)]})
    report = _run(tmp_path, None)
    found = _codes(report, "M002")
    assert found, report["findings"]
    assert "of 96.0 GB (98%)" in found[0]["title"] and found[0]["ranks"] == [0, 1]
    assert found[0]["category"] == "perf" and not found[0]["culprit"]


def test_hand_written_uneven_ranks(tmp_path):
    _write_ranks(tmp_path, {0: [_megatron_mem(0, 10, 40000.0, 42000.0)], 1: [_megatron_mem(1, 10, 70000.0, 72000.0)]})
    found = [f for f in _codes(_run(tmp_path), "M002") if "differ" in f["title"]]
    assert found and found[0]["ranks"] == [1]


def test_hand_written_old_oom_text(tmp_path):
    _write_ranks(tmp_path, {2: [
        "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 10.92 GiB total capacity; "
        "9.82 GiB already allocated; 30.56 MiB free; 1.01 GiB cached)"]}, smi=False)
    (f,) = _codes(_run(tmp_path), "M001")
    assert f["details"]["requested_mib"] == pytest.approx(20.0)
    assert f["details"]["fragmentation"]       # 1 GiB cached against a 20 MiB request


def test_what_if_without_memory_lines_is_info_only(tmp_path):
    _write_ranks(tmp_path, {0: ["hello"]}, smi=False)
    found = _codes(_run(tmp_path, "H100"), "M003")
    assert all(f["severity"] == "info" for f in found)


# -- real excerpts ------------------------------------------------------------------------------

def test_real_megatron_525_oom_sizes(real_logs):
    (f,) = _codes(_run(real_logs / "training" / "megatron-lm-issue-525-oom-pre21-format.log"), "M001")
    d = f["details"]
    assert d["requested_mib"] == pytest.approx(786.0) and d["capacity_mib"] == pytest.approx(31.74 * 1024)
    assert d["free_mib"] == pytest.approx(577.12)
    assert d["reserved_unallocated_mib"] == pytest.approx((29.97 - 28.82) * 1024, rel=0.01)


def test_real_nccl_1235_oom_during_p2p_setup(real_logs):
    report = _run(real_logs / "nccl" / "nccl-issue-1235-oom-during-p2p-setup-socket-closed.log")
    (f,) = _codes(report, "M001")
    # INDEX: GPU memory exhaustion on rank 3 (cuda dev 3 on node01) while NCCL allocated 6 MiB buffers
    assert f["nodes"] == ["node01"]
    assert f["gpus"] and f["gpus"][0].get("cuda_dev") == 3 or f["ranks"] == [3]
    assert f["details"]["requested_mib"] == pytest.approx(6.0)
    assert "NCCL" in f["message"]


def test_real_trl_2784_zero3_samples_are_quiet(real_logs):
    report = _run(real_logs / "training" / "trl-issue-2784-zero3-optimizer-state-memory.log")
    assert not _codes(report, "M001") and not _codes(report, "M002")
