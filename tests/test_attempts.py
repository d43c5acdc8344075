"""torchrun restarts (``--max-restarts``) in real corpus runs: each attempt's outcome, its cause
and last step, the job's final outcome, and the outcome said before the verdict in every format."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from postmortem.html_report import html_report
from postmortem.analyzer.pipeline import analyze
from postmortem.views.render import markdown_report, text_report
from postmortem.rules.report import build_report

CORPUS = Path(__file__).with_name("corpus")


@pytest.fixture(scope="module")
def reports():
    out = {}
    for name in ("restart-fails", "restart-recovers", "restart-static", "terminate"):
        run = analyze([CORPUS / name])
        try:
            out[name] = build_report(run)
        finally:
            run.con.close()
    return out


def test_console_lines_of_every_attempt_are_placed_in_their_own_attempt():
    """One console holds all three attempts' [defaultN]: tracebacks (no time of their own): each
    lands in its attempt, split at torchrun's 'failed (exitcode: 1)' line, none in every attempt."""
    run = analyze([CORPUS / "restart-fails"])
    try:
        rows = run.frame("SELECT e.attempt, e.line_no FROM events e JOIN inputs i USING (input_id) "
                         "WHERE i.path = 'console.log' AND e.kind = 'exception' AND e.rank = 2 ORDER BY 2")
        ends = run.frame("SELECT line_no, attempt FROM agent WHERE kind = 'worker_failed' ORDER BY 1")
    finally:
        run.con.close()
    assert rows["attempt"].null_count() == 0
    assert rows["attempt"].unique().sort().to_list() == [0, 1, 2]
    for end, attempt in ends.iter_rows():
        before = rows.filter(rows["line_no"] < end)
        assert before["attempt"].max() <= attempt


def test_every_attempt_has_its_outcome_cause_and_last_step(reports):
    attempts = reports["restart-fails"]["attempts"]["all"]
    assert [a["outcome"] for a in attempts] == ["failed", "failed", "failed"]
    assert all(a["last_step"] == 1 for a in attempts)
    assert all(a["verdict"].startswith("Rank 2 failed first") for a in attempts)
    assert reports["restart-fails"]["outcome"]["recovered"] is False


def test_a_recovered_job_says_so_before_the_failure_it_recovered_from(reports):
    r = reports["restart-recovers"]
    assert r["outcome"]["outcome"] == "completed" and r["outcome"]["recovered"] is True
    assert r["verdict"]["sentence"].startswith("The job recovered: attempt 1 completed after attempt 0 failed.")
    assert r["verdict"]["culprit"]["ranks"] == [1]
    text = text_report(r)
    assert text.startswith("OUTCOME: completed after 1 failed attempt(s) (recovered)\n")
    assert "attempt 1: completed at step 6" in text


def test_a_restart_that_fails_at_reconnect_points_back_at_the_first_cause(reports):
    """attempt_1 fails in init (every rank's gloo connectFullMesh times out, no rule names a
    cause): the consequence of the restart, so the verdict leads with attempt 0's rank 1."""
    r = reports["restart-static"]
    assert r["outcome"]["outcome"] == "failed" and r["attempts"]["analysed"] == 0
    assert r["verdict"]["status"] == "culprit" and r["verdict"]["culprit"]["ranks"] == [1]
    assert r["verdict"]["sentence"].startswith("The job failed in attempt 1 (")
    assert "the cause is in attempt 0. Attempt 0: Rank 1 failed first" in r["verdict"]["sentence"]


def test_the_outcome_comes_before_the_verdict_in_every_format(reports):
    r = reports["restart-fails"]
    text, md, page = text_report(r), markdown_report(r), html_report(r)
    assert text.index("OUTCOME: failed (in attempt 2, the last of 3") < text.index("VERDICT (")
    assert md.index("**Outcome:** failed") < md.index("**Verdict (")
    assert page.index('class="outcome"') < page.index('class="verdict"')
    assert "attempt 0: failed after step 1: Rank 2 failed first" in md


def test_terminate_without_a_watchdog_is_named_not_blamed_on_the_watchdog(reports):
    """rank 0 ends on SIGABRT after 'terminate called without an active exception'; no watchdog
    line of it: the verdict quotes the terminate, not 'typically the c10d watchdog'."""
    v = reports["terminate"]["verdict"]
    assert v["culprit"]["ranks"] == [0]
    assert "terminate called without an active exception" in v["sentence"]
    assert "watchdog" not in v["sentence"]


def test_nodes_come_from_every_source_that_names_hosts(tmp_path):
    """No rank mapping, but NCCL's line prefixes name the hosts: the run summary counts them."""
    log = tmp_path / "nccl.log"
    log.write_text("".join(f"gpu-{n:02d}:{100 + n}:{100 + n} [0] NCCL INFO Bootstrap : Using eth0:10.0.0.{n}<0>\n"
                           for n in range(1, 4)))
    run = analyze([log])
    try:
        report = build_report(run)
    finally:
        run.con.close()
    assert report["run"]["nodes"] == ["gpu-01", "gpu-02", "gpu-03"]
    assert "on 3 node(s)" in text_report(report)
    json.dumps(report)


def test_a_gloo_error_with_a_glog_header_keeps_its_time():
    """Without its time, a restart's gloo error could not be placed in its attempt."""
    import polars as pl

    from postmortem.parsers import torch_errors

    line = ("[E1203 08:38:47.093852657 ProcessGroupGloo.cpp:67] Gloo connectFullMesh failed with "
            "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.h:311] Connect timeout [none]")
    events = torch_errors.parse(pl.DataFrame({"line_no": [1], "text": [line]},
                                             schema={"line_no": pl.UInt32, "text": pl.String})).tables["events"]
    assert str(events["ts"][0]) == "2000-12-03 08:38:47.093852"   # glog has no year: analyzer.timeline sets it
