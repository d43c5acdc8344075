"""Every error NCCL states reaches the verdict (issue 22, bullets 1-2): the catalogue of NCCL
errors (``parsers/nccl_errors.py``), the ``nccl_errors`` table (WARN lines and NCCL errors
wrapped by PyTorch) and N020. Hand-written runs in the shapes of ``docs/formats/nccl.md`` and
``docs/formats/pytorch-failures.md``, and the real excerpts."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from postmortem.parsers import nccl_errors
from tests.scenario import report_of, write_files

RULE_FIXTURES = {
    "N020": {"fires": ["test_duplicate_launch_names_the_rank_and_the_fix",
                       "test_shm_too_small_wrapped_by_pytorch_with_last_error",
                       "test_socket_ifname_matching_nothing_says_the_value",
                       "test_nvls_cuda_failure_points_at_the_fabric_manager",
                       "test_wrapped_connect_refused_decodes_the_errno",
                       "test_remote_exited_alone_is_a_reaction_that_says_what_is_missing",
                       "test_an_unknown_warn_is_never_silent",
                       "test_proxy_call_failure_is_listed_under_its_cause",
                       "test_real_excerpts_name_the_stated_cause"],
             "quiet": ["test_a_healthy_single_node_run_has_no_nccl_error",
                       "test_errors_another_rule_explains_are_left_to_it",
                       "test_harmless_warns_are_information_only"]},
}


def _n020(report: dict, cause: str | None = None) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == "N020"
            and (cause is None or f["details"].get("cause") == cause)]


def _rank_lines(host: str, rank: int, nranks: int, dev: int, extra: list[str], version: str = "2.21.5",
                pid: int | None = None) -> list[str]:
    pid = pid or 4000 + rank
    head = f"{host}:{pid}:{pid} [{dev}] NCCL INFO"
    return [f"{head} Bootstrap : Using eth0:10.0.0.{1 + rank // 8}<0>",
            f"{head} NCCL version {version}+cuda12.4",
            f"{head} comm 0x7f{rank:02d} rank {rank} nranks {nranks} cudaDev {dev} nvmlDev {dev} busId {dev + 1}8000 "
            f"commId 0x5ae7 - Init START",
            *[line.replace("HEAD", f"{host}:{pid}:{pid + 11} [{dev}]") for line in extra]]


# -- the catalogue ----------------------------------------------------------------------------------

@pytest.mark.parametrize("cause", nccl_errors.CAUSES, ids=lambda c: c.name)
def test_each_sample_is_classified_as_its_own_cause(cause):
    assert cause.samples, f"{cause.name} has no sample line"
    src = "transport/nvls.cc:254" if cause.src else "misc/socket.cc:46"
    frame = pl.DataFrame({"msg": list(cause.samples), "src": [src] * len(cause.samples)})
    got, klass = nccl_errors.classify(pl.col("msg"), pl.col("src"))
    out = frame.select(cause=got, klass=klass)
    assert out["cause"].to_list() == [cause.name] * len(cause.samples), out
    assert set(out["klass"].to_list()) == {cause.error_class}
    assert cause.meaning and cause.action and cause.versions
    assert cause.role in ("cause", "consequence", "result", "harmless")
    assert cause.where in ("printer", "peer", "link", "job")


def test_fields_give_peer_rank_address_errno_and_result():
    frame = pl.DataFrame({"m": ["socketStartConnect: Connect to 10.1.0.2<43215> failed : Connection refused",
                                "[Proxy Service 3] Failed to execute operation Connect from rank 5, retcode 2",
                                "Call to ibv_modify_qp failed with error Network is unreachable",
                                "Error: failed to extend /dev/shm/nccl-8bZ3Cd to 9637892 bytes"]})
    out = frame.select(**nccl_errors.fields(pl.col("m")))
    assert out["peer"][0] == "10.1.0.2<43215>" and out["errno_name"][0] == "ECONNREFUSED" and out["errno"][0] == 111
    assert out["peer_rank"][1] == 5 and out["result"][1] == "system error"
    assert out["errno_name"][2] == "ENETUNREACH"
    assert out["bytes"][3] == 9637892


def test_the_warn_classes_other_rules_read_are_kept():
    from postmortem.parsers.nccl_catalogue import WARN_CLASSES

    classes = {c for c, _, _ in WARN_CLASSES}
    assert {"ib_completion_error", "ib_modify_qp", "bind_failed", "no_interface", "socket_error", "out_of_memory",
            "version_mismatch", "libibverbs_missing", "fatal_error", "size_mismatch", "peer_closed"} <= classes


# -- N020 on hand-written runs --------------------------------------------------------------------

def test_duplicate_launch_names_the_rank_and_the_fix(tmp_path):
    # Rank 0 is the bootstrap root: a second process claiming rank 1 makes it print the WARN.
    files = {f"n{n}/rank{r}.log": _rank_lines(f"gpu-n{n}", r, 8, r % 4, [])
             for n in (1, 2) for r in range(4 * (n - 1), 4 * n)}
    files["n1/rank0.log"] += ["", "gpu-n1:4000:4031 [0] bootstrap.cc:256 NCCL WARN Bootstrap Root : rank 1 of 8 "
                              "ranks has already checked in",
                              "gpu-n1:4000:4031 [0] NCCL INFO bootstrap.cc:260 -> 3"]
    report = report_of(write_files(tmp_path, files))
    f = _n020(report, "duplicate_rank")
    assert len(f) == 1
    f = f[0]
    assert f["severity"] == "error" and f["nodes"] == ["gpu-n1"] and f["ranks"] == [0]
    assert f["details"]["peer_ranks"] == [1] and f["details"]["where"] == "job"
    assert "already checked in" in f["message"] and "duplicated launch" in f["message"]
    assert "MASTER_PORT" in f["suggestion"]
    assert not f["culprit"]           # the job's launch, not rank 0's node
    assert report["verdict"]["status"] != "healthy"


def _shm_run(tmp_path: Path, with_warn: bool) -> Path:
    warn = ["", "node7:4001:4012 [1] transport/shm.cc:111 NCCL WARN Error: failed to extend "
                "/dev/shm/nccl-8bZ3Cd to 9637892 bytes",
            "node7:4001:4012 [1] NCCL INFO transport/shm.cc:115 -> 2"] if with_warn else []
    torch = ["[rank1]: Traceback (most recent call last):",
             '[rank1]:   File "train.py", line 40, in <module>',
             "[rank1]:     dist.all_reduce(t)",
             "[rank1]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
             "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), "
             "NCCL version 2.21.5",
             "[rank1]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or "
             "device error. ",
             "[rank1]: Last error:",
             "[rank1]: Error: failed to extend /dev/shm/nccl-8bZ3Cd to 9637892 bytes"]
    files = {"node7/rank0.log": _rank_lines("node7", 0, 2, 0, []),
             "node7/rank1.log": _rank_lines("node7", 1, 2, 1, warn) + torch}
    return write_files(tmp_path, files)


def test_shm_too_small_wrapped_by_pytorch_with_last_error(tmp_path):
    # Without NCCL_DEBUG: only PyTorch's text carries NCCL's words (Last error: + the next line).
    report = report_of(_shm_run(tmp_path / "wrapped", with_warn=False))
    f = _n020(report, "shm_too_small")
    assert len(f) == 1 and f[0]["severity"] == "error" and f[0]["nodes"] == ["node7"] and f[0]["ranks"] == [1]
    assert f[0]["culprit"] and "--shm-size" in f[0]["suggestion"]
    assert "/dev/shm" in f[0]["message"] and f[0]["details"]["processes"] == 1
    # the result code alone ("unhandled system error") is not a second finding: its cause is stated
    assert not _n020(report, "unhandled_system_error")
    assert report["verdict"]["status"] == "culprit" and report["verdict"]["culprit"]["nodes"] == ["node7"]
    # With NCCL_DEBUG the WARN line says it too: still one finding, citing the WARN first.
    report = report_of(_shm_run(tmp_path / "warn", with_warn=True))
    f = _n020(report, "shm_too_small")
    assert len(f) == 1 and "NCCL WARN" in f[0]["evidence"][0]["text"]


def test_socket_ifname_matching_nothing_says_the_value(tmp_path):
    head = "gpu-a:700:700 [0]"
    lines = [f"{head} NCCL INFO NCCL_SOCKET_IFNAME set by environment to ib0",
             "", f"{head} misc/socket.cc:602 NCCL WARN Bootstrap : no socket interface found",
             f"{head} NCCL INFO init.cc:1521 -> 2"]
    report = report_of(write_files(tmp_path, {"gpu-a/rank0.log": lines}))
    f = _n020(report, "no_socket_interface")[0]
    assert f["nodes"] == ["gpu-a"] and f["severity"] == "error"
    assert "NCCL_SOCKET_IFNAME is ib0" in f["message"] and "NCCL_SOCKET_IFNAME=ib0" in f["suggestion"]


def test_nvls_cuda_failure_points_at_the_fabric_manager(tmp_path):
    extra = ["", "[2025-05-10 23:09:41] HEAD transport/nvls.cc:254 NCCL WARN Cuda failure 1 'invalid argument'",
             "HEAD NCCL INFO transport/nvls.cc:409 -> 1"]
    files = {f"h1/rank{r}.log": _rank_lines("h1", r, 8, r, extra if r == 2 else [], version="2.26.2")
             for r in range(8)}
    report = report_of(write_files(tmp_path, files))
    f = _n020(report, "nvls_cuda_failure")[0]
    assert "NCCL_NVLS_ENABLE=0" in f["suggestion"] and "Fabric Manager" in f["suggestion"]
    assert f["ranks"] == [2] and f["nodes"] == ["h1"] and f["gpus"][0]["cuda_dev"] == 2
    assert "invalid argument" in f["message"]
    assert not f["details"]["drain"]
    assert report["actions"]["drain_hostlist"] is None


def test_wrapped_connect_refused_decodes_the_errno(tmp_path):
    lines = ["[rank3]:[E0724 09:12:11.5 ProcessGroupNCCL.cpp:1500] [PG ID 0 PG GUID 0(default_pg) Rank 3] "
             "Process group watchdog thread terminated with exception: NCCL error: unhandled system error "
             "(run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5",
             "[rank3]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or "
             "device error. ",
             "[rank3]: Last error:",
             "[rank3]: socketStartConnect: Connect to 10.1.0.2<43215> failed : Connection refused"]
    report = report_of(write_files(tmp_path, {"node3/rank3.log": lines}))
    f = _n020(report, "connect_failed")[0]
    assert f["details"]["errno"] == ["ECONNREFUSED"] and "ECONNREFUSED (111" in f["message"]
    assert f["details"]["peers"] == ["10.1.0.2<43215>"] and f["ranks"] == [3]
    assert not f["culprit"]                   # where: the peer it could not reach
    assert not _n020(report, "unhandled_system_error")


def test_remote_exited_alone_is_a_reaction_that_says_what_is_missing(tmp_path):
    lines = ["[rank5]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:"
             "275, remote process exited or there was a network error, NCCL version 2.19.3",
             "[rank5]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
             "prematurely."]
    report = report_of(write_files(tmp_path, {"node1/rank5.log": lines}))
    f = _n020(report, "remote_exited")
    assert f and f[0]["severity"] == "warning" and not f[0]["culprit"] and f[0]["category"] == "symptom"
    assert "cause is on the peer or outside these logs" in f[0]["message"]


def test_an_unknown_warn_is_never_silent(tmp_path):
    lines = _rank_lines("h9", 0, 1, 0, ["", "HEAD misc/foo.cc:12 NCCL WARN Something new happened to widget 7"])
    report = report_of(write_files(tmp_path, {"h9/rank0.log": lines}))
    f = _n020(report)
    assert len(f) == 1 and f[0]["severity"] == "warning" and f[0]["confidence"] <= 0.3
    assert f[0]["details"]["cause"] == "unknown" and "widget 7" in f[0]["message"]


def test_proxy_call_failure_is_listed_under_its_cause(tmp_path):
    extra = ["", "HEAD transport/shm.cc:111 NCCL WARN Error: failed to extend /dev/shm/nccl-1 to 4194304 bytes",
             "", "HEAD proxy.cc:1200 NCCL WARN Proxy Call to rank 1 failed (Connect)",
             "", "HEAD misc/socket.cc:46 NCCL WARN socketProgress: Connection closed by remote peer h2<4000>"]
    files = {"h2/rank0.log": _rank_lines("h2", 0, 2, 0, extra), "h2/rank1.log": _rank_lines("h2", 1, 2, 1, [])}
    report = report_of(write_files(tmp_path, files))
    assert [f["details"]["cause"] for f in _n020(report)] == ["shm_too_small"]
    f = _n020(report)[0]
    assert f["details"]["reactions"] == 2 and "reaction line(s)" in f["message"]
    assert "proxy call to a peer rank failed" in f["message"]


def test_a_healthy_single_node_run_has_no_nccl_error(tmp_path):
    from postmortem.generator import RunSpec, generate_run

    generate_run(tmp_path, RunSpec(nodes=1, gpus_per_node=4, scenario="healthy"))
    report = report_of(tmp_path)
    assert not _n020(report)


def test_errors_another_rule_explains_are_left_to_it(real_logs):
    # nccl#1235: NCCL's out of memory is M001's; nccl-tests#185: ibv_modify_qp is N001's; the
    # socket reactions of both are not findings of their own.
    for stem, other in (("nccl-issue-1235", "M001"), ("nccl-tests-issue-185", "N001")):
        report = report_of(next((real_logs / "nccl").glob(stem + "*")))
        assert any(f["code"] == other for f in report["findings"]), stem
        assert not _n020(report), (stem, [f["title"] for f in _n020(report)])


def test_harmless_warns_are_information_only(tmp_path):
    lines = _rank_lines("h3", 0, 1, 0, ["", "HEAD misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]"])
    report = report_of(write_files(tmp_path, {"h3/rank0.log": lines}))
    assert all(f["severity"] == "info" for f in _n020(report))
    assert not [f for f in report["findings"] if f["severity"] == "error"]


@pytest.mark.parametrize("stem,cause,words", [
    ("nccl-issue-1176", "bootstrap_truncated", "message truncated"),
    ("nccl-issue-957", "cuda_failure", "invalid argument"),
    ("nccl-issue-1920", "peer_closed", "connection reset"),
])
def test_real_excerpts_name_the_stated_cause(real_logs, stem, cause, words):
    report = report_of(next((real_logs / "nccl").glob(stem + "*")))
    f = _n020(report, cause)
    assert f and words in (f[0]["title"] + " " + f[0]["message"]).lower()
    assert report["verdict"]["status"] != "healthy"
