"""Skew rules (P010 straggler, L002 nccl-tests busbw, L003 collective busbw) on generated profiled
runs, hand-written Flight Recorder dumps and nccl-tests output, and the real nccl-tests excerpts:
they name the slow rank only when its lag is consistent and beyond the clock doubt, and judge
bandwidth on large messages against the link's own tier."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from postmortem.analyzer.pipeline import analyze
from postmortem.rules.report import build_report

RULE_FIXTURES = {
    "P010": {"fires": ["test_generated_slow_gpu_is_named_with_its_cost", "test_handwritten_flight_recorder_straggler",
                       "test_lone_rank_per_node_beyond_clock_doubt_is_named", "test_rank0_straggler_is_less_sure"],
             "quiet": ["test_generated_equal_ranks_are_quiet", "test_clock_skew_larger_than_lag_does_not_blame",
                       "test_handwritten_flight_recorder_equal_ranks_quiet"]},
    "L002": {"fires": ["test_real_collapse_above_32mb", "test_handwritten_single_node_shortfall"],
             "quiet": ["test_real_nvlink_bridge_pair_is_healthy", "test_real_nvls_dip_is_not_a_collapse",
                       "test_generated_equal_ranks_are_quiet"]},
    "L003": {"fires": ["test_generated_slow_link_with_waiting_removed"],
             "quiet": ["test_generated_slow_gpu_is_named_with_its_cost", "test_generated_equal_ranks_are_quiet"]},
}

SMALL = {"nodes": 2, "gpus_per_node": 4, "scenario": "healthy", "config_files": True, "profile": True}


def _generate(tmp_path_factory, name: str, **kw) -> Path:
    from postmortem.generator import RunSpec, generate_run
    out = tmp_path_factory.mktemp(name)
    generate_run(out, RunSpec(**{**SMALL, **kw}))
    return out


def _report(folder: Path) -> dict:
    return build_report(analyze([folder]))


def _by_code(report: dict, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == code]


# -- generated profiled runs -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def straggler(tmp_path_factory):
    return _report(_generate(tmp_path_factory, "straggler", slow_rank=5, slow_ms=3.0))


@pytest.fixture(scope="module")
def equal(tmp_path_factory):
    return _report(_generate(tmp_path_factory, "equal"))


def test_generated_slow_gpu_is_named_with_its_cost(straggler):
    [f] = _by_code(straggler, "P010")
    assert f["ranks"] == [5] and f["nodes"] == ["h20-node-02"] and f["culprit"] and f["category"] == "perf"
    assert f["gpus"][0]["cuda_dev"] == 1
    assert f["details"]["collectives"] == 24 and abs(f["details"]["median_lag_ms"] - 3.0) < 0.05
    assert abs(f["details"]["cost_per_step_ms"] - 3.0) < 0.05 and "6.0% of the 50.0 ms step" in f["message"]
    assert f["confidence"] >= 0.7
    assert not _by_code(straggler, "L003")       # busbw with the wait removed is healthy
    assert straggler["verdict"]["status"] == "degraded"


def test_generated_equal_ranks_are_quiet(equal):
    # rank 7 is last every time, but by 10 us: jitter, not a straggler
    for code in ("P010", "L002", "L003"):
        assert not _by_code(equal, code), code


def _profile_only(folder: Path, hosts: list[str], late_rank: int | None, delay_ns: int,
                  clock_ahead_ns: dict[int, int] | None = None) -> Path:
    """One GPU per node: each rank's export on its own host; ``clock_ahead_ns`` shifts a rank's
    host clock (all its times read later)."""
    from postmortem.generator.rungen.nsys import BASE_EPOCH_NS, write_nsys_export
    for r, host in enumerate(hosts):
        write_nsys_export(folder / "nsys" / f"rank_{r}.sqlite", r, world=len(hosts), steps=24, late_rank=late_rank,
                          delay_ns=delay_ns, gpus_per_node=1, host=host, gpu_name="NVIDIA H20",
                          base_epoch_ns=BASE_EPOCH_NS + (clock_ahead_ns or {}).get(r, 0))
    return folder


def test_clock_skew_larger_than_lag_does_not_blame(tmp_path):
    # node c's clock runs 6 ms ahead: its rank looks 6 ms late at every collective, on one GPU per node
    run = _profile_only(tmp_path, ["a", "b", "c", "d"], None, 0, {2: 6_000_000})
    report = _report(run)
    assert not [f for f in _by_code(report, "P010") if f["culprit"]]


def test_lone_rank_per_node_beyond_clock_doubt_is_named(tmp_path):
    run = _profile_only(tmp_path, ["a", "b", "c", "d"], 2, 30_000_000)
    [f] = _by_code(_report(run), "P010")
    assert f["ranks"] == [2] and f["nodes"] == ["c"] and 0.5 <= f["confidence"] < 0.8
    assert "clock doubt" in f["message"]


def test_rank0_straggler_is_less_sure(tmp_path_factory):
    report = _report(_generate(tmp_path_factory, "rank0", nodes=1, config_files=False, slow_rank=0))
    [f] = _by_code(report, "P010")
    assert f["ranks"] == [0] and f["confidence"] <= 0.5 and "by design" in f["message"]


@pytest.fixture(scope="module")
def slow_link(tmp_path_factory):
    import postmortem.generator.rungen.nsys as nsys
    saved = nsys.TRANSFER_NS
    nsys.TRANSFER_NS = 6_000_000          # 64 MB all-reduce in 6 ms once everyone is there
    try:
        return _report(_generate(tmp_path_factory, "slowlink", nodes=1))
    finally:
        nsys.TRANSFER_NS = saved


def test_generated_slow_link_with_waiting_removed(slow_link):
    [f] = _by_code(slow_link, "L003")
    assert f["nodes"] == ["h20-node-01"] and not f["culprit"] and f["details"]["expected_gbs"] == 450
    assert 10 < f["details"]["median_busbw_gbs"] < 25
    assert not _by_code(slow_link, "P010")


# -- hand-written Flight Recorder dumps ---------------------------------------------------------------------

def _fr_run(folder: Path, late: dict[int, int], n: int = 30, init_lines: bool = True) -> Path:
    """2 nodes x 2 ranks, JSON dumps of 30 completed all-reduces each (time_created_ns), and each
    rank's NCCL init line (which says on which host the rank runs)."""
    t0 = 1_784_884_000_000_000_000
    for r in range(4):
        host = f"gpu-{r // 2 + 1}"
        if init_lines:
            log = folder / host / f"rank{r}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(f"{host}:{1000 + r}:{1000 + r} [{r % 2}] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
                           f"{host}:{1000 + r}:{1100 + r} [{r % 2}] NCCL INFO ncclCommInitRank comm 0x5{r:03x} "
                           f"rank {r} nranks 4 cudaDev {r % 2} nvmlDev {r % 2} busId {['18000', '2a000'][r % 2]} "
                           "commId 0xfeed - Init COMPLETE\n")
        entries = [{"collective_seq_id": s + 1, "input_dtypes": ["BFloat16"], "input_sizes": [[4096]],
                    "is_p2p": False, "op_id": s + 1, "output_dtypes": ["BFloat16"], "output_sizes": [[4096]],
                    "p2p_seq_id": 0, "pg_id": 0, "process_group": ["0", "default_pg"],
                    "profiling_name": "nccl:all_reduce", "record_id": s, "retired": True, "state": "completed",
                    "time_created_ns": t0 + s * 400_000_000 + (r * 7919 * (s + 3)) % 40_000 + late.get(r, 0),
                    "time_discovered_completed_ns": t0 + s * 400_000_000 + 20_000_000,
                    "time_discovered_started_ns": 0, "timeout_ms": 600000} for s in range(n)]
        dump = {"entries": entries, "nccl_version": "2.21.5", "version": "2.7",
                "pg_config": {"0": {"desc": "default_pg", "name": "0", "ranks": "[0, 1, 2, 3]"}},
                "pg_status": {"0": {"last_completed_collective": str(n), "last_enqueued_collective": str(n),
                                    "last_started_collective": "-1"}}}
        path = folder / "flight_recorder" / host / f"nccl_trace_rank_{r}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(dump))
    return folder


def test_handwritten_flight_recorder_straggler(tmp_path):
    [f] = _by_code(_report(_fr_run(tmp_path, {3: 4_000_000})), "P010")
    assert f["ranks"] == [3] and f["details"]["source"] == "flight_recorder" and f["culprit"]
    assert abs(f["details"]["median_lag_ms"] - 4.0) < 0.1


def test_handwritten_flight_recorder_equal_ranks_quiet(tmp_path):
    assert not _by_code(_report(_fr_run(tmp_path / "a", {})), "P010")
    # the same 4 ms lag with no line saying where the ranks run: no shared clock is known, and
    # 4 ms across hosts is within NTP's doubt
    assert not _by_code(_report(_fr_run(tmp_path / "b", {3: 4_000_000}, init_lines=False)), "P010")


# -- nccl-tests: real excerpts and hand-written ----------------------------------------------------------------

def _with_real(tmp_path: Path, real_logs: Path, name: str, header: str = "") -> Path:
    src = real_logs / "hw" / name
    dst = tmp_path / "hw" / name
    dst.parent.mkdir(parents=True)
    if header:
        dst.write_text(header + src.read_text())
    else:
        shutil.copy(src, dst)
    return tmp_path


def test_real_collapse_above_32mb(tmp_path, real_logs):
    """nccl-1453: 29.5 GB/s at 32 MB, then ~5 GB/s from 64 MB on (the INDEX's collapse)."""
    report = _report(_with_real(tmp_path, real_logs, "nccltests_nccl-1453_mpirun-tag-output-rank-prefix.txt"))
    [f] = _by_code(report, "L002")
    assert "collapses above 32 MB" in f["title"] and f["details"]["peak_gbs"] == 29.5
    assert f["evidence"] and not f["culprit"]


def test_real_nvlink_bridge_pair_is_healthy(tmp_path, real_logs):
    """nccl-tests-194: 2x H100 PCIe over an NVLink bridge at ~115 GB/s is healthy, also when the
    device lines say what the GPUs are (115 of 300 GB/s is above the 30% bar)."""
    name = "nccltests_nccl-tests-194_h100pcie-nvlink-bridge-pair.txt"
    header = ("# Using devices\n"
              "#  Rank  0 Group  0 Pid  12345 on      box1 device  0 [0x01] NVIDIA H100 PCIe\n"
              "#  Rank  1 Group  0 Pid  12346 on      box1 device  1 [0x21] NVIDIA H100 PCIe\n")
    assert not _by_code(_report(_with_real(tmp_path / "a", real_logs, name)), "L002")
    assert not _by_code(_report(_with_real(tmp_path / "b", real_logs, name, header)), "L002")


def test_real_nvls_dip_is_not_a_collapse(tmp_path, real_logs):
    """nccl-1244: 270 GB/s at 64 MB, 227 at 128 MB, 314 at 512 MB: non-monotonic, not broken."""
    report = _report(_with_real(tmp_path, real_logs, "nccltests_nccl-1244_h20-2node-16gpu-nvls-rows.txt"))
    assert not _by_code(report, "L002")


def test_handwritten_single_node_shortfall(tmp_path):
    """8x H20 in one node reaching 60 GB/s at 1 GB: 13% of NVLink's 450 GB/s per direction."""
    lines = ["# nThread 1 nGpus 1 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 "
             "agg iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
    lines += [f"#  Rank {r:2d} Group  0 Pid {7000 + r:6d} on     node-a device {r:2d} [0x{0x18 + r:02x}] NVIDIA H20"
              for r in range(8)]
    lines += ["#", "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   "
              "algbw   busbw #wrong"]
    size = 8
    while size <= 1 << 30:
        bus = min(60.0, size / 2**20 * 2)
        alg = bus / 1.75
        t = size / (alg * 1e3) if alg else 0
        lines.append(f"{size:12d}  {size // 4:12d}     float     sum      -1  {t:8.1f} {alg:7.2f} {bus:7.2f}"
                     f"      0  {t:8.1f} {alg:7.2f} {bus:7.2f}      0")
        size *= 4
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 21.0 ", "#"]
    path = tmp_path / "hw" / "all_reduce_perf.txt"
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(lines) + "\n")
    [f] = _by_code(_report(tmp_path), "L002")
    assert f["details"]["expected_gbs"] == 450 and f["details"]["best_large_gbs"] == 60.0
    assert "13%" in f["message"] and f["evidence"]
