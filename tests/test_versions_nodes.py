"""Facts over guesses (issue 22, bullet 8): a printed NCCL version wins over one inferred from
line shapes, and every view counts the nodes from every source that names hosts."""
from __future__ import annotations


from postmortem.analyzer.pipeline import analyze
from postmortem.rules.report import build_report
from postmortem.views.transports import bandwidth_map, render_text, view
from tests.scenario import write_files


def test_a_printed_version_wins_over_line_shapes(tmp_path):
    # Rank 0 prints the bare version line (before 2.22 only rank 0 does); the other process's lines
    # have 2.8-2.11 shapes (`Channel NN :` NET lines without a connection index).
    files = {
        "a/rank0.log": ["NCCL version 2.14.3+cuda11.7",
                        "a:100:100 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>"],
        "b/rank1.log": ["b:200:200 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",
                        "b:200:210 [0] NCCL INFO Channel 00 : 1[1b000] -> 0[1a000] [send] via NET/IB/0",
                        "b:200:210 [0] NCCL INFO Trees [0] -1/-1/-1->1->0 [1] 0/-1/-1->1->-1"],
    }
    run = analyze([write_files(tmp_path, files)])
    procs = {r["host"]: r for r in run.frame("SELECT * FROM nccl_processes").iter_rows(named=True)}
    assert procs["b"]["version"] == "2.14.3" and procs["a"]["version"] == "2.14.3"
    assert "line shapes say 2.8-2.11" in procs["b"]["version_source"]
    text = render_text(view(run))
    assert "NCCL 2.14.3 (printed by rank 0; this host's line shapes say 2.8-2.11)" in text
    assert "2.8-2.11 (by line shapes)" not in text
    report = build_report(run)
    assert report["run"]["nccl_versions"] == ["2.14.3"]


def test_the_node_count_takes_every_host_source(tmp_path):
    # 4 hosts print NCCL lines; only one hop is logged (between two of them).
    files = {f"h{i}/rank{i}.log": [f"h{i}:{100 + i}:{100 + i} [0] NCCL INFO Bootstrap : Using eth0:10.0.0.{i + 1}<0>"]
             for i in range(4)}
    files["h0/rank0.log"].append("h0:100:110 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA")
    files["h1/rank1.log"].append("h1:101:111 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [receive] via NET/IB/0/GDRDMA")
    run = analyze([write_files(tmp_path, files)])
    assert bandwidth_map(run)["nodes"] == 4
    assert len(build_report(run)["run"]["nodes"]) == 4
