"""postmortem.parsers.nccl_ras: the ncclras status report (text and JSON) and the RAS INFO lines."""
from __future__ import annotations

import json

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postmortem import parsers
from postmortem.generator.rungen.ras import OPS, Comm, Job, Rank, json_report, text_report
from postmortem.parsers import nccl_ras
from postmortem.parsers.lines import envelope
from tests.parse_helpers import _env


def parse_text(text: str):
    return nccl_ras.parse(_env(text.encode()))


def rows(result, table: str) -> list[dict]:
    return result.tables[table].to_dicts()


def only(result, table: str, **where) -> dict:
    frame = result.tables[table]
    for k, v in where.items():
        frame = frame.filter(pl.col(k) == v)
    assert frame.height == 1, (table, where, frame)
    return frame.row(0, named=True)


def subset(row: dict, **expected) -> None:
    got = {k: row[k] for k in expected}
    assert got == expected


def consumed(result) -> set[int]:
    return set(result.consumed.to_list())


def test_sample_lines_hold_every_kinds_samples():
    """The kinds' samples are copies of SAMPLE_LINES' lines (the report read whole, in its order)."""
    for kind in nccl_ras.INFO_KINDS + nccl_ras.REPORT_KINDS:
        for sample in kind.samples:
            assert sample in nccl_ras.SAMPLE_LINES, (kind.name, sample)


def test_registered_as_a_log_parser():
    assert nccl_ras in parsers.LOG_PARSERS
    assert nccl_ras.NAME == "nccl_ras"


# --------------------------------------------------------------------------- line kinds

HEADER = [
    "NCCL version 2.26.2 compiled with CUDA 12.8",
    "CUDA runtime version 12080, driver version 12090",
    "",
    "Job summary",
    "===========",
    "",
]


def test_header_and_one_row_summary():
    r = parse_text("\n".join(HEADER + [
        "  Nodes  Processes         GPUs  Processes     GPUs",
        "(total)   per node  per process    (total)  (total)",
        "      3          4            2         12       24",
    ]) + "\n")
    subset(only(r, "ras_reports"), line_no=1, end_line=9, format="text", nccl_version="2.26.2",
           cuda_compiled="12.8", cuda_runtime=12080, cuda_driver=12090, nodes=3, processes_per_node=4,
           gpus_per_process=2, processes=12, gpus=24, uniform=True)
    assert consumed(r) == set(range(1, 10))  # the blank lines 3 and 6 inside the report too


def test_blank_lines_inside_a_report_are_consumed():
    r = parse_text("\n".join(HEADER + ["  Nodes  Processes         GPUs  Processes     GPUs"]) + "\n")
    assert consumed(r) == set(range(1, 8))


def test_mixed_summary_layouts_and_outlier_nodes():
    r = parse_text("\n".join(HEADER + [
        "  Nodes  Processes         GPUs",
        "          per node  per process",
        "      5          8            1",
        "      1          6            1",
        "",
        "  Nodes  Processes         GPUs",
        "(total)    (total)      (total)",
        "      6         46           46",
        "",
        "The outlier node:",
        "  Node 10.9.8.7 running processes 311,312,313,314,315,316",
    ]) + "\n")
    subset(only(r, "ras_reports"), nodes=6, processes_per_node=8, gpus_per_process=1, processes=46, gpus=46,
           uniform=False)
    outliers = r.tables["ras_ranks"].filter(pl.col("why") == "outlier_node")
    assert outliers["pid"].to_list() == [311, 312, 313, 314, 315, 316]
    assert set(outliers["node"]) == {"10.9.8.7"} and set(outliers["line_no"]) == {17}
    assert consumed(r) == set(range(1, 18))


def test_summary_with_uneven_gpus_per_process():
    r = parse_text("\n".join(HEADER + [
        "  Nodes  Processes",
        "          per node",
        "      2          2",
        "",
        "         Processes         GPUs",
        "                    per process",
        "                 3            1",
        "                 1            2",
        "",
        "  Nodes  Processes         GPUs",
        "(total)    (total)      (total)",
        "      2          4            5",
    ]) + "\n")
    subset(only(r, "ras_reports"), nodes=2, processes_per_node=2, gpus_per_process=1, processes=4, gpus=5,
           uniform=False)
    assert consumed(r) == set(range(1, 19))


TABLE = [
    "Communicators... (0.125s)",
    "=============",
    "",
    "Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors",
    "    #  in group  per comm  per node  per comm  in group",
    "    0         1         4       7-8        32        31   RUNNING  INCOMPLETE,MISMATCH",
    "    1         8         4         1         4        32  FINALIZE      OK",
    "    2         1         4         1         4         4      INIT  INCOMPLETE,ERROR,MISMATCH",
]


def test_group_table_rows():
    r = parse_text("\n".join(TABLE) + "\n")
    comms = rows(r, "ras_comms")
    assert [(c["group"], c["comms_in_group"], c["nodes"], c["ranks_per_node"], c["ranks_per_node_min"],
             c["ranks_per_node_max"], c["ranks"], c["ranks_in_group"], c["status"], c["errors"]) for c in comms] == [
        (0, 1, 4, "7-8", 7, 8, 32, 31, "RUNNING", "INCOMPLETE,MISMATCH"),
        (1, 8, 4, "1", 1, 1, 4, 32, "FINALIZE", "OK"),
        (2, 1, 4, "1", 1, 1, 4, 4, "INIT", "INCOMPLETE,ERROR,MISMATCH"),
    ]
    assert [c["line_no"] for c in comms] == [6, 7, 8]
    subset(only(r, "ras_reports"), line_no=1, collection_s=0.125, groups=3, comms=10)
    assert consumed(r) == set(range(1, 9))


def test_no_communicator_data_and_old_gathering_line():
    r = parse_text("Gathering data about the NCCL communicators (timeout 5s)...\n=============\n\n"
                   "Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors\n"
                   "    #  in group  per comm  per node  per comm  in group\n"
                   "No communicator data collected!\n")
    assert only(r, "ras_findings")["what"] == "no_comm_data"
    assert consumed(r) == set(range(1, 7))


def errors_section(*block: str) -> str:
    return "\n".join(["Errors", "======", "", *block, "", "Warnings", "========", ""]) + "\n"


def test_job_level_incomplete_and_dead():
    r = parse_text(errors_section(
        "INCOMPLETE",
        "  Missing communicator data from 2 job processes",
        "  Process 7001 on node 10.0.3.4 managing GPU 6",
        "  Process 7002 on node 10.0.3.4 managing GPUs 0,1 (NVML 2,3)",
        "  [could not find information on 1 process]",
        "",
        "DEAD",
        "  1 job process is considered dead (unreachable via the RAS network)",
        "  Process 9100 on node fe80::1 managing GPU 3",
    ))
    f = r.tables["ras_findings"]
    assert f.select("what", "kind", "count", "section").rows() == [
        ("block", "INCOMPLETE", None, "errors"), ("missing_processes", "INCOMPLETE", 2, "errors"),
        ("unlisted_processes", "INCOMPLETE", 1, "errors"), ("block", "DEAD", None, "errors"),
        ("dead_processes", "DEAD", 1, "errors")]
    procs = r.tables["ras_ranks"].select("pid", "node", "gpu", "nvml_gpu", "gpus", "why").rows()
    assert procs == [(7001, "10.0.3.4", 6, 6, "6", "missing_process"),
                     (7002, "10.0.3.4", None, None, "0,1 (NVML 2,3)", "missing_process"),
                     (9100, "fe80::1", 3, 3, "3", "dead_process")]
    subset(only(r, "ras_reports"), missing_processes=2, dead_processes=1)
    assert consumed(r) == set(range(1, 16))  # not the trailing blank line


def test_dead_plural():
    r = parse_text(errors_section("DEAD", "  3 job processes are considered dead (unreachable via the RAS network)"))
    subset(only(r, "ras_findings", what="dead_processes"), count=3, kind="DEAD")


def test_comm_incomplete_block():
    r = parse_text(errors_section(
        "#0-0 (0badc0ffee000042) INCOMPLETE",
        "  Missing communicator data from 2 ranks",
        "  Rank 9 -- GPU 1 managed by process 4410 on node 10.0.0.2",
        "  Rank 10 -- [process information not found]",
        "",
        "#0-1 (00000000000000a1) INCOMPLETE",
        "  Missing communicator data from 3 ranks",
        "  The missing ranks: 1,2,3",
    ))
    subset(only(r, "ras_findings", what="block", comm_index=0), group=0, hash="0badc0ffee000042",
           kind="INCOMPLETE", section="errors", line_no=4, block_line=4)
    subset(only(r, "ras_findings", what="missing_ranks", comm_index=0), count=2, hash="0badc0ffee000042")
    subset(only(r, "ras_findings", what="missing_ranks", comm_index=1), count=3, hash="00000000000000a1")
    ranks = r.tables["ras_ranks"].select("rank", "gpu", "pid", "node", "why", "hash").rows()
    assert ranks == [(9, 1, 4410, "10.0.0.2", "missing", "0badc0ffee000042"),
                     (10, None, None, None, "missing", "0badc0ffee000042"),
                     (1, None, None, None, "missing", "00000000000000a1"),
                     (2, None, None, None, "missing", "00000000000000a1"),
                     (3, None, None, None, "missing", "00000000000000a1")]


def test_error_block():
    r = parse_text(errors_section(
        "#1-0 (00000000deadbeef) ERROR",
        "  Initialization errors on 3 ranks",
        "  2 ranks reported Remote process error",
        "  Rank 4 -- GPU 4 (NVML 7) managed by process 812 on node 10.0.0.5",
        "  Rank 5 -- GPU 5 managed by process 813 on node 10.0.0.5",
        "  Rank 6 reported System error -- GPU 6 managed by process 814 on node 10.0.0.5",
        "  Asynchronous error on 1 rank",
        "  Rank 0 reported Unhandled CUDA error -- [process information not found]",
    ))
    f = r.tables["ras_findings"].filter(pl.col("what") != "block")
    assert f.select("what", "count", "status", "kind").rows() == [
        ("init_errors", 3, None, "ERROR"), ("reported", 2, "Remote process error", "ERROR"),
        ("reported", 1, "System error", "ERROR"), ("async_errors", 1, None, "ERROR"),
        ("reported", 1, "Unhandled CUDA error", "ERROR")]
    ranks = r.tables["ras_ranks"].select("rank", "gpu", "nvml_gpu", "pid", "why", "status").rows()
    assert ranks == [(4, 4, 7, 812, "init_error", "Remote process error"),
                     (5, 5, 5, 813, "init_error", "Remote process error"),
                     (6, 6, 6, 814, "init_error", "System error"),
                     (0, None, None, None, "async_error", "Unhandled CUDA error")]


def warnings_section(*block: str) -> str:
    return "\n".join(["Warnings", "========", "", *block, ""]) + "\n"


def test_timeout_block():
    r = parse_text(warnings_section(
        "TIMEOUT", "  Encountered 1 communication timeout while gathering communicator data"))
    subset(only(r, "ras_findings", what="timeouts"), count=1, kind="TIMEOUT", section="warnings")
    assert only(r, "ras_reports")["timeouts"] == 1


def test_mismatch_op_counts_recorded_as_printed():
    r = parse_text(warnings_section(
        "#0-0 (fa93daea854b060b) MISMATCH",
        "  Communicator ranks have different AllGather operation counts",
        "  29 ranks have launched up to operation 1310",
        "  3 ranks have launched up to operation 1311",
        "  Rank 2 -- GPU 2 managed by process 7702 on node 10.20.0.1",
        "  Rank 17 -- GPU 1 managed by process 8101 on node 10.20.0.3",
        "  Rank 30 -- GPU 6 managed by process 9106 on node 10.20.0.4",
        "",
        "  Communicator ranks have different Broadcast operation counts",
        "  31 ranks have not launched any operations",
        "  Rank 0 has launched up to operation 1 -- GPU 0 managed by process 7700 on node 10.20.0.1",
        "",
        "  Communicator ranks have different AllReduce operation counts",
        "  31 ranks have launched up to operation 5",
        "  Rank 9 has not launched any operations -- GPU 1 managed by process 7709 on node 10.20.0.2",
    ))
    f = r.tables["ras_findings"]
    assert f.filter(pl.col("what").is_in(["launched_up_to", "not_launched", "op_count_mismatch"])).select(
        "what", "op", "count", "op_count").rows() == [
        ("op_count_mismatch", "AllGather", None, None), ("launched_up_to", "AllGather", 29, 1310),
        ("launched_up_to", "AllGather", 3, 1311),
        ("op_count_mismatch", "Broadcast", None, None), ("not_launched", "Broadcast", 31, 0),
        ("launched_up_to", "Broadcast", 1, 1),
        ("op_count_mismatch", "AllReduce", None, None), ("launched_up_to", "AllReduce", 31, 5),
        ("not_launched", "AllReduce", 1, 0)]
    assert set(f["hash"]) == {"fa93daea854b060b"} and set(f["kind"]) == {"MISMATCH"}
    ranks = r.tables["ras_ranks"].select("rank", "gpu", "pid", "node", "why", "op", "op_count").rows()
    assert ranks == [(2, 2, 7702, "10.20.0.1", "launched_up_to", "AllGather", 1311),
                     (17, 1, 8101, "10.20.0.3", "launched_up_to", "AllGather", 1311),
                     (30, 6, 9106, "10.20.0.4", "launched_up_to", "AllGather", 1311),
                     (0, 0, 7700, "10.20.0.1", "launched_up_to", "Broadcast", 1),
                     (9, 1, 7709, "10.20.0.2", "not_launched", "AllReduce", 0)]
    assert consumed(r) == set(range(1, 19))


def test_mismatch_status_and_legacy_lines():
    r = parse_text(warnings_section(
        "#0-0 (9e17999afaa87dbb) MISMATCH",
        "  Communicator ranks have different status",
        "  20 ranks have status NOCOMM",
        "  10 ranks have status RUNNING",
        "  2 ranks have status FINALIZE",
        "  Rank 3 -- GPU 3 managed by process 600 on node 10.0.0.1",
        "  Rank 11 -- GPU 3 managed by process 700 on node 10.0.0.2",
        "  Rank 12 has status ABORT -- GPU 4 managed by process 701 on node 10.0.0.2",
        "  The unknown ranks: 13,14",
        "  Rank 15 has status UNKNOWN",
        "  Communicator ranks have different collective operation counts",
        "  30 ranks have launched up to operation 6650",
        "  Rank 1 has launched up to operation 6649 -- GPU 1 managed by process 598 on node 10.0.0.1",
    ))
    f = r.tables["ras_findings"].filter(pl.col("what") != "block")
    assert f.select("what", "count", "status", "op", "op_count").rows() == [
        ("status_mismatch", None, None, None, None), ("has_status", 20, "NOCOMM", None, None),
        ("has_status", 10, "RUNNING", None, None), ("has_status", 2, "FINALIZE", None, None),
        ("has_status", 1, "ABORT", None, None),
        ("op_count_mismatch", None, None, "collective", None),
        ("launched_up_to", 30, None, "collective", 6650), ("launched_up_to", 1, None, "collective", 6649)]
    ranks = r.tables["ras_ranks"].select("rank", "why", "status", "op", "op_count").rows()
    assert ranks == [(3, "status", "FINALIZE", None, None), (11, "status", "FINALIZE", None, None),
                     (12, "status", "ABORT", None, None), (13, "status", "UNKNOWN", None, None),
                     (14, "status", "UNKNOWN", None, None), (15, "status", "UNKNOWN", None, None),
                     (1, "launched_up_to", None, "collective", 6649)]
    assert consumed(r) == set(range(1, 17))


def test_collection_phase_lines():
    r = parse_text("\n".join([
        "Gathering data about the RAS network (timeout 5s)... obtained a result in 0.318s",
        " Warning: encountered 2 communication timeouts while gathering data",
        " Warning: missing data from 2 processes (received from 30, expected 32)",
        "  The missing processes:",
        "  Process 4410 on node 10.0.0.2 managing GPU 1",
        "  Process 4411 on node 10.0.0.2 managing GPU 2",
        " Collected data about 240 unidirectional connections",
        " Travel times (valid only if system clocks are synchronized between nodes):",
        "  Minimum 0.001s, maximum 0.052s, average 0.007s",
        " Warning: negative travel times were observed across 2 connections,",
        " indicating that the system clocks are *not* synchronized.",
        " Ordering of events based on local timestamps should be considered unreliable",
        "  The affected connections:",
        "  From node 10.0.0.1 process 4400 to node 10.0.0.2 process 4410: observed travel time of -0.013s",
        "  From node 10.0.0.3 process 4420 to node 10.0.0.2 process 4411: observed travel time of -0.002s",
        " No connection data collected!",
    ]) + "\n")
    f = r.tables["ras_findings"]
    assert f.select("what", "count", "expected", "seconds", "timeout_s").rows() == [
        ("gathering", None, None, 0.318, 5.0), ("collection_timeouts", 2, None, None, None),
        ("missing_data", 2, 32, None, None), ("connections", 240, None, None, None),
        ("travel_min", None, None, 0.001, None), ("travel_max", None, None, 0.052, None),
        ("travel_avg", None, None, 0.007, None), ("negative_travel_times", 2, None, None, None),
        ("negative_travel_time", None, None, -0.013, None), ("negative_travel_time", None, None, -0.002, None),
        ("no_connection_data", None, None, None, None)]
    assert set(f["section"]) == {"collection"}
    assert r.tables["ras_ranks"].select("pid", "why").rows() == [(4410, "missing_process"), (4411, "missing_process")]
    assert consumed(r) == set(range(1, 17))


def test_ras_info_lines_become_events():
    r = parse_text("\n".join([
        "gpu-a17:20411:20490 [2] NCCL INFO RAS client listening socket at 127.0.0.1<28028>",
        "gpu-a17:20411:20490 [2] NCCL INFO RAS failed to establish a client listening socket at localhost:28028",
        "gpu-a17:20411:20490 [2] NCCL INFO RAS collective 10.3.0.17<39011>:4 timeout warning (5s) -- 3 responses missing",
        "gpu-a17:20411:20490 [2] NCCL INFO RAS declaring peer 10.3.0.22<40123> as DEAD; rasDeadPeersHash 0xa1b2",
        "[2026-01-02 03:04:05] gpu-a17:20411:20490 [2] NCCL INFO RAS send stuck timeout error (42s) on socket "
        "connection with 10.3.0.22<40123>",
        "gpu-a17:20411:20490 [2] NCCL INFO RAS link 10.3.0.17<39011> -> 10.3.0.22<40123> established",
        "gpu-a17:20411:20490 [2] NCCL INFO Channel 00/0 : 3[2] -> 4[3] via P2P/CUMEM",
    ]) + "\n")
    ev = r.tables["events"]
    assert ev.select("line_no", "kind", "detail").rows() == [
        (1, "ras_client_socket", "127.0.0.1<28028>"), (2, "ras_client_socket_failed", "localhost:28028"),
        (3, "ras_coll_timeout", "3"), (4, "ras_dead_peer", "10.3.0.22<40123>"),
        (5, "ras_send_stuck", "10.3.0.22<40123>"), (6, "ras_info", None)]
    assert ev["message"][0] == "RAS client listening socket at 127.0.0.1<28028>"
    assert consumed(r) == {1, 2, 3, 4, 5, 6}


def test_weak_lines_alone_are_not_a_report():
    r = parse_text("Errors\n======\n\nWarnings\n========\n     32          8\nDEAD\n")
    assert not len(r.consumed)
    assert all(t.is_empty() for t in r.tables.values())


# The 2.26.2 example of nccl.md 3.13, rewritten with other numbers, hash and nodes.
EXAMPLE_2_26 = """\
NCCL version 2.26.2 compiled with CUDA 12.6
CUDA runtime version 12060, driver version 12070

Job summary
===========

  Nodes  Processes         GPUs  Processes     GPUs
(total)   per node  per process    (total)  (total)
      8          8            1         64       64

Communicators... (0.02s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         8         8        64        64   RUNNING  MISMATCH

Errors
======

Warnings
========

#0-0 (3c5d7e9f0a1b2c4d) MISMATCH
  Communicator ranks have different AllGather operation counts
  61 ranks have launched up to operation 2207
  3 ranks have launched up to operation 2208
  Rank 5 -- GPU 5 managed by process 51005 on node 10.44.0.11
  Rank 33 -- GPU 1 managed by process 51033 on node 10.44.0.15
  Rank 60 -- GPU 4 managed by process 51060 on node 10.44.0.18

"""


def test_reference_example_rewritten():
    r = parse_text("some unrelated line before\n" + EXAMPLE_2_26 + "[rank0]: after the report\n")
    subset(only(r, "ras_reports"), line_no=2, nccl_version="2.26.2", cuda_compiled="12.6", cuda_runtime=12060,
           cuda_driver=12070, nodes=8, processes_per_node=8, gpus_per_process=1, processes=64, gpus=64,
           collection_s=0.02, groups=1, comms=1)
    subset(only(r, "ras_comms"), group=0, comms_in_group=1, nodes=8, ranks=64, ranks_in_group=64, status="RUNNING",
           errors="MISMATCH", hash="3c5d7e9f0a1b2c4d", report_line=2)
    counts = r.tables["ras_findings"].filter(pl.col("what") == "launched_up_to").select("count", "op_count").rows()
    assert counts == [(61, 2207), (3, 2208)]
    listed = r.tables["ras_ranks"]
    assert listed.select("rank", "op_count", "node").rows() == [
        (5, 2208, "10.44.0.11"), (33, 2208, "10.44.0.15"), (60, 2208, "10.44.0.18")]
    n_lines = EXAMPLE_2_26.count("\n")
    assert consumed(r) == set(range(2, 2 + n_lines - 1))  # the trailing blank line is not claimed


def test_report_with_srun_label_prefix():
    text = "".join(f"3: {line}\n" for line in EXAMPLE_2_26.splitlines())
    r = parse_text(text)
    assert only(r, "ras_comms")["errors"] == "MISMATCH"
    assert r.tables["ras_findings"].filter(pl.col("what") == "launched_up_to")["count"].to_list() == [61, 3]


def test_two_reports_back_to_back():
    r = parse_text(EXAMPLE_2_26 + EXAMPLE_2_26.replace("2207", "2300").replace("2208", "2301"))
    reports = r.tables["ras_reports"]
    assert reports.height == 2
    second = reports["line_no"][1]
    assert second == EXAMPLE_2_26.count("\n") + 1
    f = r.tables["ras_findings"].filter(pl.col("what") == "launched_up_to")
    assert f.select("report_line", "op_count").rows() == [(1, 2207), (1, 2208), (second, 2300), (second, 2301)]


# --------------------------------------------------------------------------- real excerpt

def test_real_report_nccl_1730(real_logs):
    path = real_logs / "nccl" / "nccl-issue-1730-ras-healthy-but-torch-watchdog-timeout-2.26.2.log"
    if not path.is_file():
        pytest.skip(f"{path} is not present")
    r = nccl_ras.parse(envelope(path.read_bytes()))
    subset(only(r, "ras_reports"), line_no=1, end_line=22, format="text", nccl_version="2.26.2",
           cuda_compiled="12.4", cuda_runtime=12040, cuda_driver=12040, nodes=32, processes_per_node=8,
           gpus_per_process=1, processes=256, gpus=256, uniform=True, groups=1, comms=1, collection_s=0.01)
    # RAS says the one 256-rank communicator is RUNNING with no errors (nccl#1730) ...
    subset(only(r, "ras_comms"), line_no=16, group=0, comms_in_group=1, nodes=32, ranks_per_node="8", ranks=256,
           ranks_in_group=256, status="RUNNING", errors="OK")
    assert r.tables["ras_findings"].is_empty() and r.tables["ras_ranks"].is_empty()
    # ... while PyTorch's watchdog lines after it are not RAS output.
    assert consumed(r) == set(range(1, 23))


def test_no_false_positives_in_the_other_real_logs(real_logs):
    for path in sorted((real_logs).rglob("*.log")):
        if "ras" in path.name:
            continue
        r = nccl_ras.parse(envelope(path.read_bytes()))
        assert not len(r.consumed), path.name


# --------------------------------------------------------------------------- round trip

def ring_job(n_nodes=4, per_node=8, ahead=(), op="AllGather", base=640, **kw) -> Job:
    ranks = []
    for r in range(n_nodes * per_node):
        counts = {o: 3 for o in OPS}
        counts[op] = base + (1 if r in ahead else 0)
        ranks.append(Rank(r, f"10.7.0.{r // per_node + 1}", 40000 + r, r % per_node, counts=counts))
    return Job([Comm(0xFA93DAEA854B060B, ranks)], **kw)


def test_round_trip_mismatch_minority_is_listed():
    job = ring_job(ahead=(12, 27))
    text = text_report(job)
    r = parse_text(text)
    subset(only(r, "ras_comms"), status="RUNNING", errors="MISMATCH", ranks=32, nodes=4, hash="fa93daea854b060b")
    f = r.tables["ras_findings"].filter(pl.col("what") == "launched_up_to")
    # Recorded as printed: the majority line (30 ranks at 640) and the minority (2 at 641) ...
    assert f.select("op", "count", "op_count").rows() == [("AllGather", 30, 640), ("AllGather", 2, 641)]
    # ... and the ranks NCCL lists are the minority, which is *ahead*.
    listed = r.tables["ras_ranks"]
    assert listed.select("rank", "op_count", "pid", "gpu").rows() == [(12, 641, 40012, 4), (27, 641, 40027, 3)]
    assert consumed(r) == {n for n, line in enumerate(text.splitlines(), 1)} - {len(text.splitlines())}


def test_round_trip_large_minority_is_not_listed():
    job = ring_job(ahead=tuple(range(11)))  # 11 ranks: above the 10-rank detail threshold
    r = parse_text(text_report(job))
    f = r.tables["ras_findings"].filter(pl.col("what") == "launched_up_to")
    assert f.select("count", "op_count").rows() == [(21, 640), (11, 641)]
    assert r.tables["ras_ranks"].is_empty()
    job.verbose = True  # verbose lifts the limit to under 50 % of the communicator
    r = parse_text(text_report(job))
    assert r.tables["ras_ranks"]["rank"].to_list() == list(range(11))


def trouble_job() -> Job:
    ranks = [Rank(r, f"10.8.0.{r // 4 + 1}", 50000 + r, r % 4, counts={"AllReduce": 100}) for r in range(16)]
    ranks[5].state = "missing"
    ranks[9].state = "dead"
    ranks[14].state = "nocomm"
    ranks[2].init_state = 6
    ranks[3].async_error = 1
    ranks[7].abort_flag = True
    ranks[1].counts = {"AllReduce": 101}
    small = [Rank(0, "10.8.0.1", 50000, 0, nvml=2), Rank(1, "10.8.0.2", 50004, 0, nvml=2)]
    return Job([Comm(0x00C0FFEE, ranks), Comm(0xABCDEF0123, small)], timeouts=3,
               extra_processes=[("10.8.0.9", 59999, [0], "missing")])


def test_round_trip_text_missing_dead_errors():
    r = parse_text(text_report(trouble_job()))
    subset(only(r, "ras_reports"), nodes=5, processes=17, missing_processes=2, dead_processes=1, timeouts=3)
    big = only(r, "ras_comms", group=0)
    subset(big, status="ABORT", errors="INCOMPLETE,ERROR,MISMATCH", ranks=16, hash="0000000000c0ffee",
           missing_ranks=2, ranks_in_group=13)
    # No block names the healthy one-communicator group, so its hash is not known from the text.
    subset(only(r, "ras_comms", group=1), status="RUNNING", errors="OK", ranks=2, hash=None)
    ranks = r.tables["ras_ranks"]
    assert sorted(ranks.filter(pl.col("why") == "missing")["rank"].to_list()) == [5, 9]
    assert ranks.filter(pl.col("why") == "missing_process")["pid"].to_list() == [50005, 59999]
    assert ranks.filter(pl.col("why") == "dead_process")["pid"].to_list() == [50009]
    subset(only(r, "ras_ranks", why="init_error"), rank=2, status="Remote process error")
    subset(only(r, "ras_ranks", why="async_error"), rank=3, status="Unhandled CUDA error")
    statuses = r.tables["ras_findings"].filter(pl.col("what") == "has_status").select("count", "status").rows()
    # Rank 2's failed init makes it INIT (the client's rule); groups are most frequent first, then by status.
    assert statuses == [(11, "RUNNING"), (1, "ABORT"), (1, "INIT"), (1, "NOCOMM")]
    assert ranks.filter((pl.col("why") == "status") & (pl.col("status") == "ABORT"))["rank"].to_list() == [7]
    f = r.tables["ras_findings"].filter(pl.col("what") == "launched_up_to")
    assert f.select("op", "count", "op_count").rows() == [("AllReduce", 12, 100), ("AllReduce", 1, 101)]


def test_round_trip_grouped_comms_and_nvml():
    comms = [Comm(0x100 + i, [Rank(k, f"10.9.0.{k + 1}", 60000 + 8 * k + i, i, nvml=7 - i) for k in range(4)])
             for i in range(8)]
    r = parse_text(text_report(Job(comms)))
    subset(only(r, "ras_comms"), group=0, comms_in_group=8, nodes=4, ranks_per_node="1", ranks=4,
           ranks_in_group=32, status="RUNNING", errors="OK", hash=None)
    subset(only(r, "ras_reports"), nodes=4, processes_per_node=8, processes=32, gpus=32, uniform=True)


def test_round_trip_mixed_summary():
    ranks = [Rank(r, f"10.10.0.{1 if r < 8 else 2 if r < 16 else 3}", 70000 + r, r % 8) for r in range(22)]
    r = parse_text(text_report(Job([Comm(0x77, ranks)])))
    subset(only(r, "ras_reports"), nodes=3, processes_per_node=8, gpus_per_process=1, processes=22, gpus=22,
           uniform=False)
    assert set(r.tables["ras_ranks"].filter(pl.col("why") == "outlier_node")["node"]) == {"10.10.0.3"}


def test_round_trip_json():
    job = trouble_job()
    text = "\n".join(["before the report", json_report(job).rstrip("\n"), "after the report"]) + "\n"
    r = parse_text(text)
    rep = only(r, "ras_reports")
    n_json = json_report(job).count("\n")
    subset(rep, line_no=2, end_line=1 + n_json, format="json", nccl_version="2.26.2", cuda_runtime=12060,
           timestamp="2026-03-02 10:11:12", comms=2, collection_s=0.01, timeouts=3, problem=None)
    assert consumed(r) == set(range(2, 2 + n_json))
    ops = r.tables["ras_rank_ops"]
    answered = {0x00C0FFEE: set(range(16)) - {5, 9, 14}, 0xABCDEF0123: {0, 1}}
    truth = {(c.hash, rk.rank, op): rk.counts.get(op, 0) for c in job.comms for rk in c.ranks for op in OPS
             if rk.rank in answered[c.hash]}
    got = {(int(h, 16), rank, op): n for h, rank, op, n in ops.select("hash", "rank", "op", "op_count").rows()}
    assert got == truth
    # Text and JSON of the same job agree on what RAS concludes per communicator.
    t = parse_text(text_report(job)).tables["ras_comms"].select("ranks", "status", "errors").sort("ranks")
    j = r.tables["ras_comms"].select("ranks", "status", "errors").sort("ranks")
    assert t.rows() == j.rows()
    missing = r.tables["ras_ranks"].filter(pl.col("why") == "missing").select(
        "rank", "unresponsive", "considered_dead", "status").sort("rank").rows()
    assert missing == [(5, True, False, None), (9, True, True, None), (14, False, False, "NOCOMM")]
    # Object lines: each rank row points at its `{` line.
    lines = text.splitlines()
    for n in r.tables["ras_ranks"]["line_no"].to_list():
        assert lines[n - 1].strip() == "{" and '"rank"' in lines[n]
    for n in r.tables["ras_comms"]["line_no"].to_list():
        assert lines[n - 1].strip() == "{" and '"hash"' in lines[n]
    f = r.tables["ras_findings"].filter(pl.col("what") == "launched_up_to")
    assert f.select("hash", "op", "count", "op_count").rows() == [
        ("0000000000c0ffee", "AllReduce", 12, 100), ("0000000000c0ffee", "AllReduce", 1, 101)]


def test_round_trip_json_single_line():
    doc = json.dumps(json.loads(json_report(ring_job(ahead=(3,)))))
    r = parse_text("x\n" + doc + "\ny\n")
    assert consumed(r) == {2}
    assert only(r, "ras_comms")["errors"] == "MISMATCH"
    assert r.tables["ras_rank_ops"].height == 32 * len(OPS)


job_strategy = st.builds(
    lambda n_nodes, per_node, ahead, behind_op, missing, nocomm, verbose: (
        n_nodes, per_node, ahead, behind_op, missing, nocomm, verbose),
    st.integers(1, 4), st.integers(1, 8), st.sets(st.integers(0, 31), max_size=12), st.sampled_from(OPS),
    st.sets(st.integers(0, 31), max_size=3), st.sets(st.integers(0, 31), max_size=2), st.booleans())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job_strategy)
def test_round_trip_property(spec):
    n_nodes, per_node, ahead, op, missing, nocomm, verbose = spec
    size = n_nodes * per_node
    job = ring_job(n_nodes, per_node, ahead={a for a in ahead if a < size}, op=op, verbose=verbose)
    for r in job.comms[0].ranks:
        if r.rank in missing:
            r.state = "missing"
        elif r.rank in nocomm:
            r.state = "nocomm"
    if all(r.state != "ok" for r in job.comms[0].ranks):
        return
    view_members = [r for r in job.comms[0].ranks if r.state == "ok"]
    text = parse_text(text_report(job))
    js = parse_text(json_report(job))
    # Same verdict from both formats.
    assert text.tables["ras_comms"].select("status", "errors").rows() == \
        js.tables["ras_comms"].select("status", "errors").rows()
    # The op-count distribution is recovered exactly from both: in the text a group of 2+ ranks
    # has a count line and a group of one its own "Rank R has launched up to ..." line.
    truth: dict[int, int] = {}
    for r in view_members:
        truth[r.counts[op]] = truth.get(r.counts[op], 0) + 1
    for result in (text, js):
        f = result.tables["ras_findings"].filter((pl.col("what") == "launched_up_to") & (pl.col("op") == op))
        assert dict(f.select("op_count", "count").rows()) == (truth if len(truth) > 1 else {})
    # The text lists a group's ranks only when it is an outlier.
    listed = set(text.tables["ras_ranks"].filter(pl.col("why") == "launched_up_to")["rank"].to_list())
    limit = (lambda n: n < size * 0.5) if verbose else (lambda n: n <= 10 and n <= size * 0.25)
    expected = {r.rank for r in view_members if len(truth) > 1 and
                (truth[r.counts[op]] == 1 or limit(truth[r.counts[op]]))}
    assert listed == expected


# --------------------------------------------------------------------------- truncation and garbage

def test_truncated_json_gives_a_problem_not_an_exception():
    full = json_report(trouble_job())
    cut = full[: int(len(full) * 0.6)]
    r = parse_text("header line\n" + cut)
    rep = only(r, "ras_reports")
    assert rep["format"] == "json" and rep["nccl_version"] == "2.26.2"
    assert "truncated" in rep["problem"] and "does not parse" in rep["problem"]
    ev = only(r, "events", kind="ras_json_truncated")
    assert ev["line_no"] == 2 and ev["message"] == rep["problem"]
    # What was complete is kept; every line of the block is claimed.
    assert r.tables["ras_comms"].height >= 1 and r.tables["ras_ranks"].height >= 1
    lines = ("header line\n" + cut).split("\n")
    assert consumed(r) == {n for n, line in enumerate(lines, 1) if n >= 2 and line.strip()}


@pytest.mark.parametrize("fraction", [0.001, 0.01, 0.05, 0.2, 0.5, 0.8, 0.95, 0.999])
def test_json_cut_anywhere(fraction):
    full = json_report(trouble_job())
    r = parse_text(full[: max(1, int(len(full) * fraction))])
    reports = r.tables["ras_reports"]
    if reports.height:
        assert reports["problem"][0] is not None


def test_other_json_mentioning_nccl_version_is_left_alone():
    r = parse_text('{"event": "startup", "nccl_version": "2.21.5", "world_size": 8}\n')
    assert not len(r.consumed) and r.tables["ras_reports"].is_empty()


def test_deeply_nested_json_does_not_raise():
    r = parse_text('{"nccl_version": "2.28.7", "communicators": ' + "[" * 100000 + "\n")
    assert only(r, "ras_reports")["problem"]


FRAGMENTS = [line for line in nccl_ras.SAMPLE_LINES] + [
    "", "=====", "Errors", "DEAD", "  Rank x -- GPU", "#0-0 (zz) MISMATCH", "   99999999999999999999999  1",
    "    0         1         4       7-8        32        31   RUNNING  INCOMPLETE,", '"rank": ', "{", "}", "[",
    '  "communicators": [{"hash": 7, "ranks": [{"rank": "x", "status": 3, "collective_counts": [1]}]}]',
    '{"nccl_version": 5, "communicators": {"a": 1}, "ras": []}',
    "  99999999999999999999999 ranks have launched up to operation 99999999999999999999999",
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=40)), max_size=60))
def test_garbage_never_raises(parts):
    text = "\n".join(parts)
    result = nccl_ras.parse(envelope(text.encode("utf-8", "surrogatepass")))
    for name, schema in nccl_ras.TABLES.items():
        assert dict(result.tables[name].schema) == schema


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2000))
def test_random_bytes_never_raise(data):
    nccl_ras.parse(envelope(data))
