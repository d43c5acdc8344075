"""The real excerpts in ../shared/real-data/logs/torch parse, every line is accounted for,
and the verdict holds to what each thread established (see that folder's INDEX.md)."""
import pytest

from postmortem.analyzer.pipeline import analyze
from postmortem.rules.report import build_report


@pytest.fixture
def torch_dir(real_logs):
    return real_logs / "torch"


def _report(path):
    run = analyze([path])
    return run, build_report(run)


def test_every_excerpt_is_accounted_for(torch_dir):
    run, report = _report(torch_dir)
    logs = [f for f in report["inputs"]["files"] if f["path"].endswith(".log")]
    assert len(logs) == 7
    for f in report["inputs"]["files"]:
        assert f["lines"] == f["parsed_lines"] + f["unparsed_lines"]
    # every line of every real torch excerpt is understood
    assert sum(f["unparsed_lines"] for f in logs) == 0


def test_milabench_timeouts_on_one_node_blame_nobody(torch_dir):
    # Four ranks of one node time out at SeqNum 2070; the thread never found the cause.
    run, report = _report(torch_dir / "milabench-pr-269-reduce-timeout-wrapped-lines.log")
    colls = run.frame("SELECT rank, seq, op, ran_for_ms FROM collectives ORDER BY rank")
    assert colls["rank"].to_list() == [11, 12, 14, 15]
    assert set(colls["seq"].to_list()) == {2070} and set(colls["op"].to_list()) == {"REDUCE"}
    assert report["verdict"]["status"] != "culprit"
    assert report["inputs"]["totals"]["unparsed_lines"] == 0  # the poster's wrapped lines are joined


def test_detail_mismatch_with_two_ranks_is_not_a_confident_blame(torch_dir):
    # Rank 1 and rank 0 disagree at SequenceNumber 3104; with two ranks there is no majority.
    run, report = _report(torch_dir / "ms-swift-pr-9443-detail-allreduce-shape-mismatch.log")
    fps = run.frame("SELECT pg_rank, seq, numel_in FROM collectives WHERE kind = 'fingerprint' ORDER BY pg_rank")
    assert fps.to_dicts() == [{"pg_rank": 0, "seq": 3104, "numel_in": 51123456},
                              {"pg_rank": 1, "seq": 3104, "numel_in": 195812480}]
    assert report["verdict"]["status"] != "culprit"
    h002 = [f for f in report["findings"] if f["code"] == "H002"]
    assert h002 and not h002[0]["ranks"]


def test_store_host_stopped_is_not_blamed_on_the_survivors(torch_dir):
    run, report = _report(torch_dir / "vllm-pr-32139-tcpstore-host-stopped.log")
    kinds = set(run.frame("SELECT kind FROM events")["kind"].to_list())
    assert "store_error" in kinds
    assert report["verdict"]["status"] != "culprit"


def test_heartbeat_and_desync_report_lines_are_understood(torch_dir):
    run, _ = _report(torch_dir)
    kinds = set(run.frame("SELECT kind FROM events")["kind"].to_list())
    assert {"heartbeat_timeout", "watchdog_stuck", "desync_report", "store_barrier", "blocking_wait_timeout"} <= kinds


def test_every_real_excerpt_parses_and_is_accounted_for(real_logs):
    run = analyze([real_logs])
    build_report(run)
    inputs = run.frame("SELECT path, lines, parsed_lines, unparsed_lines, kind FROM inputs")
    assert len(inputs) > 70 and (inputs["kind"] != "skipped").all()
    assert (inputs["lines"] == inputs["parsed_lines"] + inputs["unparsed_lines"]).all()


def test_partial_views_of_a_hang_stay_inconclusive(real_logs):
    # Watchdog pastes that show a few ranks timing out but never state the group's size:
    # a silent rank cannot be ruled out, so nobody is blamed and "all stuck" is not claimed.
    training = real_logs / "training"
    for name in ("megatron-lm-issue-735-moe-nccl-timeout.log", "nccl-issue-1111-megatron-reduce-scatter-hang.log",
                 "ace-issue-348-watchdog-torch21-format.log"):
        run, report = _report(training / name)
        assert report["verdict"]["status"] == "inconclusive", name
        assert "H005" in {f["code"] for f in report["findings"]}


def test_progress_bar_glued_to_a_watchdog_line_is_split(real_logs):
    run, _ = _report(real_logs / "training" / "torchrec-issue-189-alltoall-seq-desync.log")
    colls = run.frame("SELECT pg_rank, seq, op FROM collectives ORDER BY seq")
    assert colls.to_dicts() == [{"pg_rank": 1, "seq": 4188, "op": "ALLTOALL_BASE"},
                                {"pg_rank": 4, "seq": 4190, "op": "ALLTOALL_BASE"}]
