"""No human-readable output says ``None``: a value the inputs do not give is left out or said as
"unknown". Checked on the text, Markdown and HTML reports and on ``postmortem transports`` text
of every bundled sample, every case of the real failure-injection corpus and every folder of
../shared/real-data/logs.

Log text may say None itself (``TypeError: 'NoneType' ...``, a Python repr in a log line): it is
replaced by a placeholder before rendering, wherever the report quotes it -- evidence lines, the
culprit's last lines and py-spy frames, the shapes of unparsed NCCL lines, P2P refusal messages --
and the HTML timeline's hover texts (the events' own messages) are dropped.
"""
from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from postmortem.html_report import html_report
from postmortem.analyzer.pipeline import NothingReadable, analyze
from postmortem.views.render import markdown_report, text_report
from postmortem.rules.report import build_report
from postmortem.views.transports import render_text, view
from tests.conftest import REAL, ROOT

FOLDERS = sorted(p for p in (ROOT / "sample_logs").iterdir() if p.is_dir())
FOLDERS += sorted(p for p in (ROOT / "tests" / "corpus").iterdir() if p.is_dir())
FOLDERS += sorted(p for p in REAL.iterdir() if p.is_dir()) if REAL.is_dir() else []
NONE = re.compile(r"\bNone\b")
LOG = "LOGTEXT"
# The timeline's marks carry the event's message as hover text: `<title>watchdog_timeout: ...</title>`.
MARK_TITLE = re.compile(r"<title>[a-z_]+: .*?</title>", re.S)


def without_log_text(report: dict) -> dict:
    """The report with every quoted log line replaced by a placeholder."""
    r = copy.deepcopy(report)
    for f in r["findings"]:
        for e in f["evidence"]:
            e["text"] = LOG
        instead = (f.get("details") or {}).get("culprit_did_instead") or {}
        for key in ("py_spy_main_thread", "last_lines"):
            if instead.get(key):
                instead[key] = [LOG]
    for gap in r["inputs"].get("nccl_gaps") or []:
        gap["shape"] = LOG
    return r


def none_lines(text: str) -> list[str]:
    return [line.strip()[:300] for line in text.splitlines() if NONE.search(line)]


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_report_format_says_none(folder: Path, shared_cache):
    try:
        run = analyze([folder])
    except NothingReadable:  # no report to check (a corpus case being regenerated: empty files)
        pytest.skip(f"{folder}: nothing readable")
    report = without_log_text(build_report(run))
    outputs = {"text": text_report(report), "md": markdown_report(report),
               "html": MARK_TITLE.sub("<title></title>", html_report(report, run))}
    transports = view(run)
    for refusal in transports["p2p_refusals"]:
        refusal["message"] = LOG
    outputs["transports"] = render_text(transports, all_hops=True)
    found = {name: none_lines(text) for name, text in outputs.items() if none_lines(text)}
    assert not found, found


def test_a_run_summary_without_world_size_nodes_or_times_says_unknown():
    """The text the samples may not reach: a run with nothing known about it."""
    from postmortem.views.render import run_size, time_span

    r = {"ranks": None, "ranks_seen": 0, "nodes": [], "time_span": {"start": None, "end": None, "source": None}}
    assert run_size(r) == "ranks unknown; nodes unknown" and time_span(r) == "unknown"
    r = {"ranks": None, "ranks_seen": 4, "nodes": ["a"], "time_span": {"start": "t0", "end": None, "source": None}}
    assert run_size(r) == "4 ranks seen (world size unknown) on 1 node(s)" and time_span(r) == "t0 .. unknown"


def test_a_gpu_without_index_bus_or_pid_leaves_them_out():
    from postmortem.views.render import action_items

    report = {"verdict": {"competing": []},
              "actions": {"culprit_ranks": "2", "inspect_hostlist": None,
                          "gpus": [{"rank": 2, "node": "localhost", "cuda_dev": None, "bus_id": None, "pid": 13342,
                                    "mapping_confidence": "certain", "mapping_source": None}],
                          "rma_gpus": [{"node": None, "cuda_dev": 3, "bus_id": None, "serial": None, "uuid": None,
                                        "reason": None}],
                          "py_spy": [{"command": "ssh h py-spy dump --pid 1", "rank": None}]}}
    text = ["".join(t for _, t in segments) for _, segments in action_items(report)]
    assert text == ["Culprit rank(s) 2 on unknown nodes",
                    "rank 2: localhost pid 13342 (rank mapping: certain)",
                    "RMA unknown node GPU 3 serial unknown uuid unknown",
                    "If still hanging: ssh h py-spy dump --pid 1"]
