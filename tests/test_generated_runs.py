"""The H rules on generated runs: the right culprit across culprits, ops, rank counts, PyTorch
eras, launchers and attempts; no single culprit where there is none; inconclusive where the
rank mapping is only guessed."""
import pytest

from postmortem.analyzer.pipeline import analyze
from postmortem.rules.report import build_report
from postmortem.generator import RunSpec, generate_run

CASES = [
    # (id, spec kwargs)
    ("8r-torchrun-2.8-allgather", dict(nodes=1, culprit=5, op="_ALLGATHER_BASE", torch_era="2.8")),
    ("16r-srun-per-gpu-2.4-allreduce", dict(nodes=2, culprit=9, op="ALLREDUCE", numel_in=1, torch_era="2.4",
                                            launcher="srun-per-gpu")),
    ("16r-srun-torchrun-2.6-broadcast", dict(nodes=2, culprit=0, op="BROADCAST", torch_era="2.6",
                                             launcher="srun-torchrun")),
    ("16r-torchrun-2.3-reduce-scatter", dict(nodes=2, culprit=15, op="_REDUCE_SCATTER_BASE", torch_era="2.3")),
    ("40r-torchrun-2.8-silent-updates", dict(culprit=31, timeout_s=36000, hang_duration_s=7200, work_updates=True)),
    ("128r-srun-per-gpu-2.8", dict(nodes=16, culprit=77, launcher="srun-per-gpu", pyspy=False, nccl_debug=False)),
    ("16r-two-attempts-srun", dict(nodes=2, culprit=6, attempts=2, launcher="srun-per-gpu")),
    ("16r-two-attempts-torchrun", dict(nodes=2, culprit=11, attempts=2)),
    ("16r-node-group-hang", dict(nodes=2, culprit=12, group="node", torch_era="2.8")),
]


def _run(tmp_path, **kwargs):
    truth = generate_run(tmp_path, RunSpec(seed=3, **kwargs))
    return truth, build_report(analyze([tmp_path]))


@pytest.mark.parametrize("case,kwargs", CASES, ids=[c[0] for c in CASES])
def test_deadlock_culprit_is_named(tmp_path, case, kwargs):
    truth, report = _run(tmp_path, scenario="deadlock", **kwargs)
    v = report["verdict"]
    assert v["status"] == "culprit", v["sentence"]
    assert v["culprit"]["ranks"] == [truth["culprit_rank"]]
    assert v["culprit"]["nodes"] == [truth["culprit_host"]]
    assert report["attempts"]["analysed"] == truth["analysed_attempt"]
    gpu = v["culprit"]["gpus"][0]
    if kwargs.get("nccl_debug", True):
        assert gpu["cuda_dev"] == truth["culprit_local_rank"]
    h001 = next(f for f in report["findings"] if f["code"] == "H001")
    if kwargs.get("group") != "node":
        assert h001["details"]["seq"] == truth["hang_seq"]


@pytest.mark.parametrize("scenario", ["desync-op", "desync-size"])
def test_desync_minority_is_named(tmp_path, scenario):
    truth, report = _run(tmp_path, scenario=scenario, nodes=2, culprit=10, launcher="srun-per-gpu")
    assert report["verdict"]["culprit"]["ranks"] == [truth["culprit_rank"]]
    assert "H002" in {f["code"] for f in report["findings"]}


def test_all_stuck_names_no_single_culprit(tmp_path):
    truth, report = _run(tmp_path, scenario="all-stuck", nodes=2, launcher="srun-per-gpu", network_fault=False)
    assert report["verdict"]["status"] == "no-single-culprit"
    assert not report["verdict"]["culprit"]["ranks"]


def test_all_stuck_with_link_errors_between_two_nodes_cannot_choose_an_end(tmp_path):
    # One failing pair of two nodes: either end may be at fault, so no node is blamed.
    truth, report = _run(tmp_path, scenario="all-stuck", nodes=2, launcher="srun-per-gpu")
    assert report["verdict"]["status"] == "inconclusive", report["verdict"]
    assert not report["verdict"]["culprit"]["nodes"] and report["actions"]["drain_hostlist"] is None
    assert len(report["verdict"]["competing"]) == 2


def test_healthy_run_stays_quiet(tmp_path):
    truth, report = _run(tmp_path, scenario="healthy", nodes=2, launcher="srun-torchrun")
    assert report["verdict"]["status"] == "healthy"
    assert not [f for f in report["findings"] if f["severity"] == "error"]


def test_guessed_mapping_is_inconclusive(tmp_path):
    # PyTorch 2.1: no [rankN]: prefix; no NCCL_DEBUG: nothing maps a per-rank file to a global rank.
    truth, report = _run(tmp_path, scenario="deadlock", nodes=2, culprit=6, torch_era="2.1",
                         nccl_debug=False, pyspy=False)
    assert report["verdict"]["status"] != "culprit", report["verdict"]["sentence"]
    assert "H001" not in {f["code"] for f in report["findings"]}
