"""Crash rules (X001, X003-X006, X009): generated runs, hand-written runs, the real corpus and
the real excerpts. Generated runs are small (2 nodes x 4 GPUs) and analysed once per module."""
from __future__ import annotations

from pathlib import Path

import pytest

from postmortem.analyzer.pipeline import analyze
from postmortem.rules.report import build_report
from postmortem.generator import RunSpec, generate_run

CORPUS = Path(__file__).with_name("corpus")

RULE_FIXTURES = {
    "X001": {"fires": ["test_host_oom_kill_torchrun_names_the_killed_rank_and_the_cascade",
                       "test_cuda_error_srun_per_gpu_is_the_first_failure", "test_corpus_kill_is_a_sigkill",
                       "test_corpus_raise_names_the_exception", "test_cgroup_oom_kill_with_clock_skew"],
             "quiet": ["test_hang_cancelled_at_time_limit_is_not_a_crash", "test_healthy_run_is_quiet",
                       "test_simultaneous_failures_on_two_nodes_are_not_blamed", "test_corpus_hang_is_not_a_crash"]},
    "X003": {"fires": ["test_cuda_error_srun_per_gpu_is_the_first_failure", "test_cuda_error_on_one_rank_by_hand"],
             "quiet": ["test_same_cuda_error_on_every_rank_is_not_a_single_rank_fault", "test_healthy_run_is_quiet",
                       "test_host_oom_kill_torchrun_names_the_killed_rank_and_the_cascade"]},
    "X004": {"fires": ["test_host_oom_kill_torchrun_names_the_killed_rank_and_the_cascade",
                       "test_cgroup_oom_kill_with_clock_skew", "test_oom_kill_by_hand_joins_the_pid_to_the_rank",
                       "test_kubernetes_oomkilled"],
             "quiet": ["test_oom_kill_after_the_first_timeout_is_not_the_cause", "test_corpus_kill_is_a_sigkill",
                       "test_cuda_error_srun_per_gpu_is_the_first_failure", "test_healthy_run_is_quiet"]},
    "X005": {"fires": ["test_real_slurm_time_limit_is_not_a_fault", "test_preemption_by_hand"],
             "quiet": ["test_hang_cancelled_at_time_limit_is_not_a_crash", "test_healthy_run_is_quiet"]},
    "X006": {"fires": ["test_node_fail_by_hand"],
             "quiet": ["test_healthy_run_is_quiet",
                       "test_host_oom_kill_torchrun_names_the_killed_rank_and_the_cascade"]},
    "X009": {"fires": ["test_real_tcpstore_host_stopped_blames_no_survivor"],
             "quiet": ["test_healthy_run_is_quiet", "test_corpus_kill_is_a_sigkill"]},
}


def _report(path: Path) -> dict:
    return build_report(analyze([path]))


def _codes(report: dict, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == code]


def _generated(tmp_path_factory, name: str, **kw) -> tuple[dict, dict]:
    out = tmp_path_factory.mktemp(name)
    spec = RunSpec(**{"nodes": 2, "gpus_per_node": 4, "seed": 0, "pyspy": False, **kw})
    truth = generate_run(out, spec)
    return truth, _report(out)


# -- generated runs ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def host_oom(tmp_path_factory):
    return _generated(tmp_path_factory, "host_oom", scenario="crash", crash_end="host-oom-kill", culprit=5,
                      node_logs=True)


@pytest.fixture(scope="module")
def cuda_srun(tmp_path_factory):
    return _generated(tmp_path_factory, "cuda_srun", scenario="crash", crash_end="illegal-address", culprit=2,
                      launcher="srun-per-gpu", node_logs=True, nccl_debug=True)


@pytest.fixture(scope="module")
def cgroup_skew(tmp_path_factory):
    return _generated(tmp_path_factory, "cgroup_skew", scenario="crash", crash_end="cgroup-oom-kill", culprit=1,
                      launcher="srun-torchrun", node_logs=True, clock_skew_s=40.0, skew_node=0)


@pytest.fixture(scope="module")
def hang_timeout(tmp_path_factory):
    return _generated(tmp_path_factory, "hang_timeout", scenario="deadlock", culprit=6, timeout_s=36000,
                      hang_duration_s=3600, node_logs=True)


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    return _generated(tmp_path_factory, "healthy", scenario="healthy", node_logs=True)


def test_host_oom_kill_torchrun_names_the_killed_rank_and_the_cascade(host_oom):
    truth, report = host_oom
    x004 = _codes(report, "X004")
    assert x004 and x004[0]["ranks"] == [5] and x004[0]["nodes"] == [truth["culprit_host"]]
    assert x004[0]["category"] == "external" and x004[0]["culprit"]
    assert "Out of memory: Killed process" in x004[0]["evidence"][0]["text"]
    x001 = _codes(report, "X001")
    assert x001 and x001[0]["ranks"] == [5] and "SIGKILL" in x001[0]["message"]
    cascade = {c["rank"]: c["how"] for c in x001[0]["details"]["cascade"]}
    assert {r for r, h in cascade.items() if h == "teardown"} == {4, 6, 7}      # node mates: the agent's SIGTERM
    assert {r for r, h in cascade.items() if h == "timeout"} == {0, 1, 2, 3}    # the other node waited
    assert x001[0]["details"]["order_confidence"] == "high"
    assert report["verdict"]["status"] == "culprit" and report["verdict"]["culprit"]["ranks"] == [5]
    assert not _codes(report, "X003") and not _codes(report, "X006")


def test_cuda_error_srun_per_gpu_is_the_first_failure(cuda_srun):
    truth, report = cuda_srun
    x003 = _codes(report, "X003")
    assert x003 and x003[0]["ranks"] == [2] and x003[0]["culprit"]
    assert x003[0]["details"]["error_class"] == "illegal_memory_access"
    x001 = _codes(report, "X001")
    assert x001 and x001[0]["ranks"] == [2] and "illegal memory access" in x001[0]["message"]
    assert not _codes(report, "X004")
    assert report["verdict"]["culprit"]["ranks"] == [2]


def test_cgroup_oom_kill_with_clock_skew(cgroup_skew):
    truth, report = cgroup_skew
    x004 = _codes(report, "X004")
    assert x004 and x004[0]["ranks"] == [1] and x004[0]["details"]["cgroup"]
    x001 = _codes(report, "X001")
    assert x001 and x001[0]["ranks"] == [1]
    assert report["verdict"]["culprit"]["ranks"] == [1]


def test_hang_cancelled_at_time_limit_is_not_a_crash(hang_timeout):
    truth, report = hang_timeout
    assert not _codes(report, "X001") and not _codes(report, "X005") and not _codes(report, "X004")
    assert report["verdict"]["culprit"]["ranks"] in ([6], [])


def test_healthy_run_is_quiet(healthy):
    truth, report = healthy
    assert not [f for f in report["findings"] if f["code"] in ("X001", "X003", "X004", "X005", "X006", "X009")]


# -- hand-written runs (independent of the generator) ------------------------------------------

def _nccl(host: str, pid: int, rank: int, world: int) -> str:
    dev = rank % 2
    return (f"{host}:{pid}:{pid + 50} [{dev}] NCCL INFO ncclCommInitRank comm 0x5{rank:03x} rank {rank} nranks {world} "
            f"cudaDev {dev} nvmlDev {dev} busId {['18000', '2a000'][dev]} commId 0xfeed - Init COMPLETE")


def _table(entries: list[tuple[int, int, int, int, str, str]], root: int) -> list[str]:
    """A ChildFailedError table: entries (rank, local_rank, exitcode, pid, host, time)."""
    def block(i, e):
        rank, local, code, pid, host, t = e
        tb = f"Signal {-code} received by PID {pid}" if code < 0 else "To enable traceback see: https://pytorch.org"
        return [f"[{i}]:", f"  time      : {t}", f"  host      : {host}", f"  rank      : {rank} (local_rank: {local})",
                f"  exitcode  : {code} (pid: {pid})", "  error_file: <N/A>", f"  traceback : {tb}"]
    others = [e for e in entries if e[0] != root]
    rootrow = next(e for e in entries if e[0] == root)
    lines = ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "=" * 60, "train.py FAILED",
             "-" * 60, "Failures:"]
    for i, e in enumerate(others, 1):
        lines += block(i, e)
    if not others:
        lines.append("  <NO_OTHER_FAILURES>")
    return lines + ["-" * 60, "Root Cause (first observed failure):", *block(0, rootrow), "=" * 60]


def _write_two_nodes(folder: Path, node_tables: dict[str, list[str]], rank_lines: dict[int, list[str]]) -> Path:
    world = 4
    for r in range(world):
        host = f"node-0{r // 2 + 1}"
        path = folder / host / f"rank{r}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join([_nccl(host, 1000 + r, r, world), *rank_lines.get(r, [])]) + "\n")
    for host, lines in node_tables.items():
        (folder / host / "agent.log").write_text("\n".join(lines) + "\n")
    return folder


def test_simultaneous_failures_on_two_nodes_are_not_blamed(tmp_path):
    """Two ranks on two nodes raise their own exception in the same second (clocks unchecked):
    the order is unknown, so no single rank is blamed."""
    t = "2026-07-24_09:22:24"
    tables = {"node-01": _table([(0, 0, 1, 1000, "node-01", t), (1, 1, -15, 1001, "node-01", t)], root=0),
              "node-02": _table([(2, 0, 1, 1002, "node-02", t), (3, 1, -15, 1003, "node-02", t)], root=2)}
    raised = {r: [f"[rank{r}]: Traceback (most recent call last):",
                  f'[rank{r}]:   File "train.py", line 9, in <module>',
                  f"[rank{r}]: ValueError: bad batch {r}"] for r in (0, 2)}
    report = _report(_write_two_nodes(tmp_path, tables, raised))
    x001 = _codes(report, "X001")
    assert x001 and not x001[0]["culprit"] and sorted(x001[0]["ranks"]) == [0, 2]
    assert "simultaneous" in x001[0]["title"]
    assert report["verdict"]["status"] != "culprit"


def test_cuda_error_on_one_rank_by_hand(tmp_path):
    t = "2026-07-24_09:22:24"
    tables = {"node-01": _table([(0, 0, -15, 1000, "node-01", t), (1, 1, 1, 1001, "node-01", t)], root=1)}
    lines = {1: ["[rank1]: Traceback (most recent call last):", '[rank1]:   File "train.py", line 9, in <module>',
                 "[rank1]: RuntimeError: CUDA error: uncorrectable ECC error encountered"]}
    report = _report(_write_two_nodes(tmp_path, tables, lines))
    x003 = _codes(report, "X003")
    assert x003 and x003[0]["ranks"] == [1] and x003[0]["culprit"] and x003[0]["category"] == "hardware"
    assert x003[0]["nodes"] == ["node-01"]


def test_same_cuda_error_on_every_rank_is_not_a_single_rank_fault(tmp_path):
    lines = {r: [f"[rank{r}]: Traceback (most recent call last):", f'[rank{r}]:   File "train.py", line 9, in <module>',
                 f"[rank{r}]: RuntimeError: CUDA error: device-side assert triggered"] for r in range(4)}
    report = _report(_write_two_nodes(tmp_path, {}, lines))
    x003 = _codes(report, "X003")
    assert x003 and not x003[0]["culprit"] and sorted(x003[0]["ranks"]) == [0, 1, 2, 3]
    assert not [f for f in report["findings"] if f["code"] == "X003" and f["culprit"]]


def _kernel(folder: Path, host: str, lines: list[str]) -> None:
    d = folder / "node_logs" / host
    d.mkdir(parents=True, exist_ok=True)
    (d / "journal-kernel.txt").write_text("".join(f"{ln}\n" for ln in lines))


def test_oom_kill_by_hand_joins_the_pid_to_the_rank(tmp_path):
    t = "2026-07-24_09:22:25"
    tables = {"node-02": _table([(2, 0, -15, 1002, "node-02", t), (3, 1, -9, 1003, "node-02", t)], root=3)}
    folder = _write_two_nodes(tmp_path, tables, {})
    _kernel(folder, "node-02", [
        "2026-07-24T09:22:24+0000 node-02 kernel: oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,"
        "mems_allowed=0-1,oom_memcg=/slurm/job_1,task_memcg=/slurm/job_1/step_0,task=python,pid=1003,uid=1000",
        "2026-07-24T09:22:24+0000 node-02 kernel: Memory cgroup out of memory: Killed process 1003 (python) "
        "total-vm:98765432kB, anon-rss:87654321kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:180000kB "
        "oom_score_adj:0"])
    report = _report(folder)
    x004 = _codes(report, "X004")
    assert x004 and x004[0]["ranks"] == [3] and x004[0]["nodes"] == ["node-02"] and x004[0]["details"]["cgroup"]
    assert x004[0]["culprit"] and x004[0]["category"] == "external"
    x001 = _codes(report, "X001")
    assert x001 and x001[0]["ranks"] == [3]


def test_oom_kill_after_the_first_timeout_is_not_the_cause(tmp_path):
    """Rank 1 never entered SeqNum 10 (the hand-written hang); an OOM kill an hour after the
    timeouts, during teardown, is not the cause."""
    from tests.scenario import write_scenario

    folder = write_scenario(tmp_path / "run", ranks=4, culprit=1)
    _kernel(folder, "node-02", [
        "2026-07-24T10:30:00+0000 node-02 kernel: Out of memory: Killed process 1003 (python) total-vm:1234kB, "
        "anon-rss:1000kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:1kB oom_score_adj:0"])
    report = _report(folder)
    assert not [f for f in _codes(report, "X004") if f["culprit"]]
    assert report["verdict"]["culprit"]["ranks"] in ([1], [])


def test_kubernetes_oomkilled(tmp_path):
    (tmp_path / "describe-pod.txt").write_text("\n".join([
        "Name:             trainer-worker-3", "Namespace:        default", "Node:             gpu-node-3/10.0.0.13",
        "Status:           Failed", "Containers:", "  trainer:", "    State:          Terminated",
        "      Reason:       OOMKilled", "      Exit Code:    137", "    Restart Count:  0"]) + "\n")
    report = _report(tmp_path)
    x004 = _codes(report, "X004")
    assert x004 and "137" in x004[0]["message"] and x004[0]["category"] == "external"


def test_node_fail_by_hand(tmp_path):
    (tmp_path / "sacct.txt").write_text(
        "JobID|JobName|Partition|State|ExitCode|Start|End|Elapsed|NNodes|NTasks|NodeList\n"
        "4242|pretrain|gpu|NODE_FAIL|1:0|2026-07-24T08:00:00|2026-07-24T14:12:31|06:12:31|2|8|node-[01-02]\n")
    report = _report(tmp_path)
    x006 = _codes(report, "X006")
    assert x006 and x006[0]["category"] == "external"
    assert not x006[0]["culprit"]          # nothing here says which node went down


def test_preemption_by_hand(tmp_path):
    (tmp_path / "slurm-77.out").write_text(
        "slurmstepd: error: *** JOB 77 ON node-01 CANCELLED AT 2026-07-24T13:22:05 DUE TO PREEMPTION ***\n")
    report = _report(tmp_path)
    x005 = _codes(report, "X005")
    assert x005 and x005[0]["details"]["kind"] == "preemption" and x005[0]["details"]["drain"] is False
    assert not x005[0]["nodes"]


# -- the real corpus and real excerpts ---------------------------------------------------------

def test_corpus_kill_is_a_sigkill():
    report = _report(CORPUS / "kill")
    x001 = _codes(report, "X001")
    assert x001 and x001[0]["ranks"] == [3] and "-9 = SIGKILL" in x001[0]["message"]
    # ranks 0 and 2 raised "Connection closed by peer" because rank 3 died: reactions, not causes
    assert {c["rank"] for c in x001[0]["details"]["cascade"]} == {0, 1, 2}
    assert not _codes(report, "X004") and not _codes(report, "X009")


def test_corpus_raise_names_the_exception():
    report = _report(CORPUS / "raise")
    x001 = _codes(report, "X001")
    assert x001 and x001[0]["ranks"] == [0] and "injected failure" in x001[0]["message"]


def test_corpus_hang_is_not_a_crash():
    report = _report(CORPUS / "skip")
    assert not _codes(report, "X001") and not _codes(report, "X003")


def test_real_slurm_time_limit_is_not_a_fault(real_logs):
    report = _report(real_logs / "training" / "zetta-utils-issue-671-slurm-time-limit.log")
    x005 = _codes(report, "X005")
    assert x005 and x005[0]["details"]["kind"] == "time limit" and x005[0]["details"]["faulty"] is False
    assert "not faulty" in x005[0]["message"]
    assert not report["verdict"]["culprit"]["nodes"]        # nothing to drain


def test_real_tcpstore_host_stopped_blames_no_survivor(real_logs):
    report = _report(real_logs / "torch" / "vllm-pr-32139-tcpstore-host-stopped.log")
    x009 = _codes(report, "X009")
    assert x009 and not x009[0]["culprit"] and x009[0]["category"] == "symptom"
    assert "store host" in x009[0]["message"] or "hosted the TCPStore" in x009[0]["message"]
    assert report["verdict"]["status"] != "culprit"       # ranks 2 and 3 are survivors, not the origin
