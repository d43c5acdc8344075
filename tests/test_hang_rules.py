"""H rules (and X002) on hand-written runs, generated runs, the real corpus and real excerpts:
they fire on the culprit and stay quiet where they must."""
from pathlib import Path

import pytest

from postmortem.analyzer.pipeline import analyze
from postmortem.rules.report import build_report
from postmortem.generator import RunSpec, generate_run
from tests.scenario import write_scenario

CORPUS = Path(__file__).with_name("corpus")

RULE_FIXTURES = {
    "H001": {"fires": ["test_rank_that_never_entered_is_named", "test_wait_chain_across_groups_names_the_root",
                       "test_nccl_coll_opcounts_show_the_rank_behind",
                       "test_generated_node_group_chain_with_flight_recorder",
                       "test_generated_node_group_chain_without_flight_recorder",
                       "test_corpus_sleep_names_the_rank_and_says_it_may_enter_late"],
             "quiet": ["test_desync_blames_the_minority", "test_all_stuck_names_no_single_culprit",
                       "test_guessed_rank_mapping_is_inconclusive", "test_a_wait_cycle_is_inconclusive",
                       "test_slow_solo_work_is_not_called_a_desync", "test_healthy_run_has_no_hang_finding",
                       "test_conditional_save_is_not_blamed_on_the_waiting_rank"]},
    "H002": {"fires": ["test_desync_blames_the_minority", "test_shape_mismatch_with_two_ranks_blames_neither",
                       "test_coalesced_all_gather_sizes_that_differ_are_a_mismatch"],
             "quiet": ["test_rank_that_never_entered_is_named", "test_healthy_run_has_no_hang_finding",
                       "test_uneven_all_to_all_and_coalesced_sends_are_not_a_mismatch"]},
    "H003": {"fires": ["test_all_stuck_names_no_single_culprit"],
             "quiet": ["test_rank_that_never_entered_is_named", "test_healthy_run_has_no_hang_finding"]},
    "H004": {"fires": ["test_rank_that_never_entered_is_named"],
             "quiet": ["test_healthy_run_has_no_hang_finding"]},
    "H005": {"fires": ["test_guessed_rank_mapping_is_inconclusive", "test_a_wait_cycle_is_inconclusive",
                       "test_conditional_save_is_not_blamed_on_the_waiting_rank"],
             "quiet": ["test_rank_that_never_entered_is_named", "test_wait_chain_across_groups_names_the_root",
                       "test_healthy_run_has_no_hang_finding"]},
    "H006": {"fires": ["test_slow_solo_work_is_not_called_a_desync",
                       "test_corpus_sleep_with_its_own_progress_is_slow_solo_work"],
             "quiet": ["test_a_rank_with_no_progress_is_not_slow_solo_work",
                       "test_corpus_sleep_names_the_rank_and_says_it_may_enter_late",
                       "test_corpus_skip_is_not_slow_solo_work", "test_deadlock_is_not_an_init_hang",
                       "test_nccl_coll_opcounts_alone_do_not_make_a_hang"]},
    "H007": {"fires": ["test_missing_node_is_named_with_its_last_stage",
                       "test_store_barrier_timeout_does_not_blame_the_rank_that_arrived",
                       "test_lightning_stuck_at_init_says_how_many_arrived"],
             "quiet": ["test_elastic_min_nodes_allow_a_missing_node", "test_deadlock_is_not_an_init_hang",
                       "test_healthy_run_has_no_hang_finding"]},
    "H008": {"fires": ["test_teardown_hang_is_low_severity"],
             "quiet": ["test_deadlock_is_not_an_init_hang", "test_healthy_run_has_no_hang_finding"]},
    "X002": {"fires": ["test_missing_node_is_named_with_its_last_stage"],
             "quiet": ["test_deadlock_is_not_an_init_hang", "test_healthy_run_has_no_hang_finding"]},
}


def _report(folder):
    return build_report(analyze([folder]))


def _codes(report):
    return {f["code"] for f in report["findings"]}


def test_rank_that_never_entered_is_named(tmp_path):
    report = _report(write_scenario(tmp_path, ranks=6, culprit=3))
    v = report["verdict"]
    assert v["status"] == "culprit" and v["culprit"]["ranks"] == [3]
    assert v["culprit"]["gpus"][0]["node"] == "node-02" and v["culprit"]["gpus"][0]["bus_id"] == "0000:2a:00.0"
    h001 = next(f for f in report["findings"] if f["code"] == "H001")
    assert h001["details"]["seq"] == 10 and h001["details"]["op"] == "ALLREDUCE"
    assert any("nothing in flight" in r for r in h001["details"]["why_no_timeout"])
    h004 = next(f for f in report["findings"] if f["code"] == "H004")
    assert h004["caused_by"] == [h001["id"]] and h004["ranks"] == []  # symptoms are not blamed
    assert not {"H002", "H003", "H005", "H006", "H007", "H008"} & _codes(report)


def test_desync_blames_the_minority(tmp_path):
    report = _report(write_scenario(tmp_path, ranks=6, culprit=4, desync=True))
    assert report["verdict"]["culprit"]["ranks"] == [4]
    assert "H002" in _codes(report) and "H001" not in _codes(report)


def test_all_stuck_names_no_single_culprit(tmp_path):
    report = _report(write_scenario(tmp_path, ranks=6, all_stuck=True))
    assert report["verdict"]["status"] == "no-single-culprit"
    assert "H003" in _codes(report) and "H001" not in _codes(report)
    assert report["actions"]["culprit_ranks"] is None
    assert not {"H002", "H005"} & _codes(report)


def test_guessed_rank_mapping_is_inconclusive(tmp_path):
    # 2.1-era lines, no [rankN]:, no NCCL output: rank 2's file is silent and its global rank is a guess.
    report = _report(write_scenario(tmp_path, ranks=4, culprit=2, guessed=True))
    assert report["verdict"]["status"] == "inconclusive"
    assert "H001" not in _codes(report) and "H005" in _codes(report)


def test_healthy_run_has_no_hang_finding(tmp_path):
    folder = tmp_path / "ok"
    folder.mkdir()
    (folder / "train.log").write_text(
        "h:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
        " [2026-07-24 09:00:00] iteration        1/      10 | consumed samples:           64 | "
        "elapsed time per iteration (ms): 1000.0 | lm loss: 2.000000E+00 |\n")
    report = _report(folder)
    assert report["verdict"]["status"] == "healthy" and not report["findings"]


# -- hand-written runs for the wait-for graph, slow solo work, teardown and why-no-timeout ----

def _pg(pg_id, guid, desc, r):
    return f"[PG ID {pg_id} PG GUID {guid}({desc}) Rank {r}]"


def _timeout(g, pg_rank, pg, seq, op, t="09:12:01", numel=5, numel_out=5, ms=600000):
    return (f"[rank{g}]:[E0724 {t}.1 ProcessGroupNCCL.cpp:1] {pg} Watchdog caught collective operation timeout: "
            f"WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel}, NumelOut={numel_out}, Timeout(ms)={ms}) ran for "
            f"{ms + 10} milliseconds before timing out.")


def _status(g, pg, seq, enq, comp, t="09:12:01"):
    return (f"[rank{g}]:[E0724 {t}.2 ProcessGroupNCCL.cpp:2] {pg}  failure detected by watchdog at work sequence "
            f"id: {seq} PG status: last enqueued work: {enq}, last completed work: {comp}")


def _dump(g, pg, enq, comp, t="09:12:03"):
    return (f"[rank{g}]:[E0724 {t}.1 ProcessGroupNCCL.cpp:3] {pg} Received a dump signal due to a collective timeout "
            f"from  rank 0 and we will try our best to dump the debug info. Last enqueued NCCL work: {enq}, last "
            f"completed NCCL work: {comp}.")


def _nccl_init(g, world, node, local):
    return (f"{node}:{1000 + g}:{1000 + g} [{local}] NCCL INFO ncclCommInitRank comm 0x5{g:03x} rank {g} nranks "
            f"{world} cudaDev {local} nvmlDev {local} busId {['18000', '2a000'][local % 2]} commId 0xfeed - "
            "Init COMPLETE")


def _write(folder, per_rank: dict[int, list[str]], per_node: int = 2):
    for r, lines in per_rank.items():
        node = f"node-{r // per_node + 1:02d}"
        path = folder / node / f"rank{r}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        head = [f"{node}:{1000 + r}:{1000 + r} [{r % per_node}] NCCL INFO NCCL version 2.21.5+cuda12.4",
                _nccl_init(r, len(per_rank), node, r % per_node)]
        path.write_text("\n".join(head + lines) + "\n")
    return folder


def _cross_group(folder, cycle: bool = False):
    """Ranks 0-5, two groups: "dp" = {0,1,2} and "ep" = {3,4,5}... rank 0-1 wait in dp #20 on rank 2;
    rank 2 waits in ep #30 on rank 5, which has nothing in flight anywhere (the root). cycle=True:
    rank 5 instead waits in dp's sibling group on rank 0's side, so nobody is idle."""
    dp = lambda r: _pg(1, 3, "DATA_PARALLEL_GROUP", r)   # noqa: E731
    ep = lambda r: _pg(2, 4, "EXPERT_MODEL_PARALLEL_GROUP", r)   # noqa: E731
    d0 = lambda r: _pg(0, 0, "default_pg", r)   # noqa: E731
    runs = {
        0: [_timeout(0, 0, dp(0), 20, "ALLREDUCE"), _status(0, dp(0), 20, 20, 19), _dump(0, d0(0), 50, 50)],
        1: [_timeout(1, 1, dp(1), 20, "ALLREDUCE"), _status(1, dp(1), 20, 20, 19), _dump(1, d0(1), 50, 50)],
        2: [_dump(2, dp(2), 19, 19), _timeout(2, 0, ep(0), 30, "ALLTOALL_BASE"), _status(2, ep(0), 30, 30, 29),
            _dump(2, d0(2), 50, 50)],
        3: [_timeout(3, 1, ep(1), 30, "ALLTOALL_BASE"), _status(3, ep(1), 30, 30, 29), _dump(3, d0(3), 50, 50)],
        4: [_timeout(4, 2, ep(2), 30, "ALLTOALL_BASE"), _status(4, ep(2), 30, 30, 29), _dump(4, d0(4), 50, 50)],
        5: [_dump(5, ep(3), 29, 29), _dump(5, d0(5), 50, 50)],
    }
    if cycle:
        runs[5] = [_dump(5, ep(3), 29, 29), _timeout(5, 3, dp(3), 20, "ALLREDUCE"), _status(5, dp(3), 20, 20, 19)]
        runs[2] = [_dump(2, dp(2), 19, 19), _timeout(2, 0, ep(0), 30, "ALLTOALL_BASE"),
                   _status(2, ep(0), 30, 30, 29)]
    return _write(folder, runs)


def _finding(report, code):
    return next((f for f in report["findings"] if f["code"] == code), None)


def test_wait_chain_across_groups_names_the_root(tmp_path):
    report = _report(_cross_group(tmp_path))
    h001 = _finding(report, "H001")
    assert h001 and h001["ranks"] == [5], report["verdict"]["sentence"]
    assert h001["details"]["process_group"] == "EXPERT_MODEL_PARALLEL_GROUP" and h001["details"]["seq"] == 30
    chain = h001["details"]["wait_chain"]
    assert [h.get("process_group") for h in chain[:-1]] == ["DATA_PARALLEL_GROUP", "EXPERT_MODEL_PARALLEL_GROUP"]
    assert chain[0]["waiting"] == "0-1" and chain[0]["waits_on"] == "2" and chain[-1]["root"] == "5"
    assert "Wait chain" in h001["message"] and report["verdict"]["culprit"]["ranks"] == [5]
    assert "H005" not in _codes(report)


def test_a_wait_cycle_is_inconclusive(tmp_path):
    report = _report(_cross_group(tmp_path, cycle=True))
    assert "H001" not in _codes(report) and "H005" in _codes(report)
    assert report["verdict"]["status"] != "culprit"
    assert any("cycle" in r for r in _finding(report, "H005")["details"]["reasons"])


def test_nccl_coll_opcounts_show_the_rank_behind(tmp_path):
    """c10d shows ranks 0, 1, 3 timing out; rank 2 printed no c10d line but NCCL COLL lines: its last
    opCount on the world communicator is one below the others'."""
    d0 = lambda r: _pg(0, 0, "default_pg", r)   # noqa: E731
    runs = {}
    for r in range(4):
        node, local = f"node-{r // 2 + 1:02d}", r % 2
        last = 8 if r == 2 else 9
        colls = [f"{node}:{1000 + r}:{1000 + r} [{local}] NCCL INFO AllReduce: opCount {i:x} sendbuff 0x7f00 recvbuff "
                 f"0x7f00 count 5 datatype 7 op 0 root 0 comm 0x5{r:03x} [nranks=4] stream 0x5500"
                 for i in range(last + 1)]
        runs[r] = colls if r == 2 else colls + [_timeout(r, r, d0(r), 10, "ALLREDUCE"), _status(r, d0(r), 10, 10, 9)]
    report = _report(_write(tmp_path, runs))
    h001 = _finding(report, "H001")
    assert h001 and h001["ranks"] == [2], report["verdict"]["sentence"]
    assert h001["details"]["basis"] == "behind"
    assert any(h.get("source") == "NCCL COLL opCount" for h in h001["details"]["wait_chain"])


def test_nccl_coll_opcounts_alone_do_not_make_a_hang(tmp_path):
    """Per-rank logs cut at slightly different points (a healthy, still running job): no hang."""
    runs = {}
    for r in range(4):
        node, local = f"node-{r // 2 + 1:02d}", r % 2
        runs[r] = [f"{node}:{1000 + r}:{1000 + r} [{local}] NCCL INFO AllReduce: opCount {i:x} sendbuff 0x7f00 "
                   f"recvbuff 0x7f00 count 5 datatype 7 op 0 root 0 comm 0x5{r:03x} [nranks=4] stream 0x5500"
                   for i in range(9 if r == 1 else 10)]
    report = _report(_write(tmp_path, runs))
    assert not {"H001", "H005", "H006"} & _codes(report)


def _solo(folder, busy: bool):
    """Ranks 0-3 time out in ALLREDUCE #10 enqueued at 09:02:01 (600 s timeout); rank 3 never entered.
    busy=True: rank 3 keeps logging its checkpoint save after 09:02:01."""
    d0 = lambda r: _pg(0, 0, "default_pg", r)   # noqa: E731
    runs = {}
    for r in range(4):
        it = (f"[rank{r}]: [2026-07-24 09:02:00] iteration        9/     100 | consumed samples:          576 | "
              "elapsed time per iteration (ms): 1000.0 | lm loss: 2.000000E+00 |")
        if r == 3:
            runs[r] = [it, _dump(r, d0(r), 9, 9, t="09:12:02")]
            if busy:
                runs[r][1:1] = [f"[rank3]: [2026-07-24 09:0{m}:00] saving checkpoint at iteration       9 to /ckpt "
                                "in torch_dist format" for m in (3, 6)]
        else:
            runs[r] = [it, _timeout(r, r, d0(r), 10, "ALLREDUCE", t="09:12:01"), _status(r, d0(r), 10, 10, 9)]
    return _write(folder, runs)


def test_slow_solo_work_is_not_called_a_desync(tmp_path):
    report = _report(_solo(tmp_path, busy=True))
    h006 = _finding(report, "H006")
    assert h006 and h006["ranks"] == [3] and h006["culprit"], report["verdict"]["sentence"]
    assert "timeout" in h006["suggestion"] and "H001" not in _codes(report)
    assert report["verdict"]["culprit"]["ranks"] == [3]


def test_a_rank_with_no_progress_is_not_slow_solo_work(tmp_path):
    report = _report(_solo(tmp_path, busy=False))
    assert "H006" not in _codes(report) and _finding(report, "H001")["ranks"] == [3]


def test_teardown_hang_is_low_severity(tmp_path):
    d0 = lambda r: _pg(0, 0, "default_pg", r)   # noqa: E731
    runs = {}
    for r in range(4):
        it = (f"[rank{r}]: [2026-07-24 09:00:00] iteration      100/     100 | consumed samples:         6400 | "
              "elapsed time per iteration (ms): 1000.0 | lm loss: 2.000000E+00 |")
        runs[r] = [it, _dump(r, d0(r), 500, 500)] if r == 1 else \
            [it, _timeout(r, r, d0(r), 501, "ALLREDUCE"), _status(r, d0(r), 501, 501, 500)]
    report = _report(_write(tmp_path, runs))
    h008 = _finding(report, "H008")
    assert h008 and h008["severity"] == "warning" and not h008["culprit"]
    assert not [f for f in report["findings"] if f["severity"] == "error"]
    assert report["verdict"]["status"] != "culprit"


def test_why_no_timeout_names_the_disabled_watchdog_settings(tmp_path):
    folder = write_scenario(tmp_path / "run", ranks=4, culprit=2)
    env = tmp_path / "run" / "env"
    env.mkdir()
    for node in ("node-01", "node-02"):
        (env / f"{node}.env").write_text("HOSTNAME=%s\nTORCH_NCCL_ASYNC_ERROR_HANDLING=0\n"
                                         "TORCH_NCCL_ENABLE_MONITORING=0\n" % node)
    report = _report(folder)
    reasons = " ".join(_finding(report, "H001")["details"]["why_no_timeout"])
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING=0" in reasons and "TORCH_NCCL_ENABLE_MONITORING=0" in reasons


def test_why_no_timeout_sees_a_gloo_group():
    report = _report(CORPUS / "skip")
    reasons = " ".join(_finding(report, "H001")["details"]["why_no_timeout"])
    assert "gloo" in reasons


# -- the real corpus: sleep vs skip -----------------------------------------------------------

def test_corpus_sleep_names_the_rank_and_says_it_may_enter_late():
    """rank 1 sleeps past the timeout: at the moment of the hang its evidence (main thread in host
    code, no progress after the others began to wait) is the same as skip's, so H001 names it and
    the suggestion says what to do if it would have entered late; H006 needs positive progress."""
    report = _report(CORPUS / "sleep")
    h001 = _finding(report, "H001")
    assert h001 and h001["ranks"] == [1] and "raise the collective timeout" in h001["suggestion"]
    assert "H006" not in _codes(report)


def test_corpus_sleep_with_its_own_progress_is_slow_solo_work(tmp_path):
    """The real sleep case, with rank 1 logging a checkpoint save while the others wait."""
    import shutil

    shutil.copytree(CORPUS / "sleep", tmp_path / "sleep")
    import datetime
    import re

    out = next((tmp_path / "sleep" / "logs").glob("*/attempt_0/1/stdout.log"))
    last = re.findall(r"^ \[([\d-]+ [\d:]+)\] iteration", out.read_text(), re.M)[-1]
    saved = datetime.datetime.fromisoformat(last) + datetime.timedelta(seconds=2)  # inside the sleep
    with out.open("a") as f:
        f.write(f" [{saved:%Y-%m-%d %H:%M:%S}] saving checkpoint at iteration       3 to /ckpt in torch_dist format\n")
    report = _report(tmp_path / "sleep")
    h006 = _finding(report, "H006")
    assert h006 and h006["ranks"] == [1] and "H001" not in _codes(report)


def test_corpus_skip_is_not_slow_solo_work():
    report = _report(CORPUS / "skip")
    assert "H006" not in _codes(report) and _finding(report, "H001")["ranks"] == [2]


# -- generated runs: cross-group chains, the missing node -------------------------------------

@pytest.fixture(scope="module")
def node_group_fr(tmp_path_factory):
    folder = tmp_path_factory.mktemp("node_fr")
    truth = generate_run(folder, RunSpec(seed=5, nodes=2, gpus_per_node=4, culprit=6, group="node",
                                         flight_recorder="json"))
    return truth, _report(folder)


def test_generated_node_group_chain_with_flight_recorder(node_group_fr):
    truth, report = node_group_fr
    h001 = _finding(report, "H001")
    assert h001["ranks"] == [truth["culprit_rank"]]
    assert h001["details"]["seq"] == truth["hang_seq"]
    assert "EXPERT_MODEL_PARALLEL_GROUP" in h001["details"]["process_group"]
    chain = h001["details"]["wait_chain"]
    assert chain[0]["process_group"] == "default_pg" and chain[-1]["root"] == str(truth["culprit_rank"])
    assert "Flight Recorder" in chain[-2]["source"]


def test_generated_node_group_chain_without_flight_recorder(tmp_path):
    truth = generate_run(tmp_path, RunSpec(seed=5, nodes=2, gpus_per_node=4, culprit=5, group="node", pyspy=False))
    report = _report(tmp_path)
    h001 = _finding(report, "H001")
    assert h001["ranks"] == [5] and f"#{truth['hang_seq']}" in h001["title"]
    assert any(h.get("inferred_members") == "5" for h in h001["details"]["wait_chain"])
    assert "H006" not in _codes(report)


@pytest.fixture(scope="module")
def missing_node(tmp_path_factory):
    folder = tmp_path_factory.mktemp("missing")
    truth = generate_run(folder, RunSpec(seed=1, nodes=4, gpus_per_node=2, scenario="missing-node", missing_node=1))
    return folder, truth, _report(folder)


def test_missing_node_is_named_with_its_last_stage(missing_node):
    folder, truth, report = missing_node
    h007 = _finding(report, "H007")
    assert h007 and h007["culprit"] and h007["nodes"] == [truth["missing_node"]]
    assert h007["details"]["last_stage"] == {truth["missing_node"]: "scheduled"}
    assert report["verdict"]["status"] == "culprit" and report["verdict"]["culprit"]["nodes"] == [truth["missing_node"]]
    x002 = _finding(report, "X002")
    assert x002 and x002["category"] == "symptom" and not x002["culprit"] and h007["id"] in x002["caused_by"]
    assert not {"H001", "H005"} & _codes(report)


def test_elastic_min_nodes_allow_a_missing_node(missing_node, tmp_path):
    import shutil

    folder, truth, _ = missing_node
    shutil.copytree(folder, tmp_path / "run")
    out = tmp_path / "run" / "slurm-4242.out"
    out.write_text(out.read_text().replace("min_nodes        : 4", "min_nodes        : 3"))
    report = _report(tmp_path / "run")
    assert "H007" not in _codes(report)


def test_deadlock_is_not_an_init_hang(node_group_fr):
    _, report = node_group_fr
    assert not {"H007", "H008", "X002", "H006"} & _codes(report)


# -- real excerpts: the stated cause or an honest inconclusive, never the trap -----------------

def test_store_barrier_timeout_does_not_blame_the_rank_that_arrived(real_logs):
    """rank 0's barrier timed out with worker_count=1 of world_size=4: rank 0 is the one that
    arrived, so ranks 1-3 are the ones that never came (the thread: they were still loading)."""
    report = _report(real_logs / "torch" / "nuplan-devkit-issue-253-store-barrier-init-timeout.log")
    h007 = _finding(report, "H007")
    assert h007 and h007["culprit"] and h007["ranks"] == [1, 2, 3]
    assert h007["details"]["expected_world"] == 4 and h007["details"]["arrived"] == 1
    assert "before init_process_group" in h007["message"]
    assert report["verdict"]["status"] == "culprit" and report["verdict"]["culprit"]["ranks"] == [1, 2, 3]
    assert not any(f["culprit"] and 0 in f["ranks"] for f in report["findings"])


def test_lightning_stuck_at_init_says_how_many_arrived(real_logs):
    report = _report(real_logs / "training" / "lightning-issue-19606-stuck-at-init.log")
    h007 = _finding(report, "H007")
    assert h007 and not h007["culprit"] and h007["details"]["expected_world"] == 5
    assert report["verdict"]["status"] == "inconclusive"


def test_conditional_save_is_not_blamed_on_the_waiting_rank(real_logs):
    report = _report(real_logs / "torch" / "openrlhf-issue-1135-conditional-save-allgather.log")
    assert report["verdict"]["status"] == "inconclusive"
    assert not any(f["culprit"] and 6 in f["ranks"] for f in report["findings"])
    assert "H005" in _codes(report) and "H001" not in _codes(report)


def test_shape_mismatch_with_two_ranks_blames_neither(real_logs):
    report = _report(real_logs / "torch" / "ms-swift-pr-9443-detail-allreduce-shape-mismatch.log")
    h002 = _finding(report, "H002")
    assert h002 and not h002["culprit"] and "code path" in h002["message"]
    assert report["verdict"]["status"] == "inconclusive"


def test_coalesced_all_gather_sizes_that_differ_are_a_mismatch(real_logs):
    """diffsynth#458: two ranks time out in one coalesced all-gather (SeqNum 610, NumelOut 8x
    NumelIn) with different sizes; rank 1's line names no group, rank 7's follow-up lines do. The
    thread's cause is a sharding bug (mismatched shard shapes): named, with no side blamed."""
    report = _report(real_logs / "training" / "diffsynth-issue-458-lightning-step0-allgather-timeout.log")
    h002 = _finding(report, "H002")
    assert h002 and not h002["culprit"] and h002["details"]["seq"] == 610
    assert "rank 1: COALESCED NumelIn=56320" in h002["message"] and "rank 7: COALESCED NumelIn=107520" in h002["message"]
    assert report["verdict"]["status"] == "inconclusive" and not report["verdict"]["culprit"]["ranks"]


def _timeouts(tmp_path, op, sizes, numel_out=None):
    folder = tmp_path / f"{op.lower()}-{numel_out}"
    folder.mkdir()
    for rank, numel in enumerate(sizes):
        out = numel_out if numel_out is not None else numel
        (folder / f"rank{rank}.log").write_text(
            f"[rank{rank}]:[E0724 09:32:57.0000{rank:02d} ProcessGroupNCCL.cpp:616] {_pg(0, 0, 'default_pg', rank)} "
            f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum=42, OpType={op}, NumelIn={numel}, "
            f"NumelOut={out}, Timeout(ms)=600000) ran for 600007 milliseconds before timing out.\n")
    return folder


def test_uneven_all_to_all_and_coalesced_sends_are_not_a_mismatch(tmp_path):
    # all_to_all_single with uneven splits: each rank's NumelIn differs by design
    report = _report(_timeouts(tmp_path, "ALLTOALL_BASE", [100, 100, 300, 100]))
    assert not _finding(report, "H002")
    # batch_isend_irecv: COALESCED work with NumelIn == NumelOut is point-to-point
    report = _report(_timeouts(tmp_path, "COALESCED", [64, 64, 128, 64]))
    assert not _finding(report, "H002")
    # the same shape as a coalesced all-gather (NumelOut = 4 x NumelIn): rank 2 is the minority
    report = _report(_timeouts(tmp_path, "COALESCED", [64, 64, 128, 64], numel_out=256))
    h002 = _finding(report, "H002")
    assert h002 and h002["culprit"] and h002["ranks"] == [2]
