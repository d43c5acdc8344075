"""Advice checked against the data (issue 24, item 6): an evidence gap or a suggestion is not given
when the inputs show it is already satisfied; zero-valued costs are left out; the run has one end
time, with its source, in every format."""
from __future__ import annotations

import re

import pytest

from postmortem.html_report import html_report
from postmortem.analyzer.pipeline import analyze
from postmortem.views.render import markdown_report, text_report
from postmortem.rules.report import build_report
from tests.conftest import ROOT

SAMPLES = ROOT / "sample_logs"


def _all_formats(folder):
    run = analyze([folder])
    report = build_report(run)
    return report, {"text": text_report(report), "md": markdown_report(report), "html": html_report(report, run)}


@pytest.fixture(scope="module")
def deadlock():
    return _all_formats(SAMPLES / "silent-deadlock-40r")


def test_flight_recorder_settings_already_set_are_not_asked_for(deadlock):
    report, views = deadlock
    # the env dumps of every node set TORCH_NCCL_DUMP_ON_TIMEOUT=1 and TORCH_NCCL_TRACE_BUFFER_SIZE=2000
    env = (SAMPLES / "silent-deadlock-40r" / "env" / "h20-node-01.env").read_text()
    assert "TORCH_NCCL_DUMP_ON_TIMEOUT=1" in env and "TORCH_NCCL_TRACE_BUFFER_SIZE=2000" in env
    for name, view in views.items():
        assert "TORCH_NCCL_TRACE_BUFFER_SIZE=2000" not in view, name
        assert "TORCH_NCCL_DUMP_ON_TIMEOUT=1" not in view, name
    fr = [g for g in report["missing_evidence"] if "Flight Recorder" in g["what"]]
    assert len(fr) == 1 and "turned it on" in fr[0]["what"] and "copy" in fr[0]["enable"]
    for f in report["findings"]:
        assert "TORCH_NCCL_TRACE_BUFFER_SIZE=2000" not in (f.get("suggestion") or "")


def test_no_flight_recorder_gap_when_dumps_were_read(tmp_path):
    from postmortem.generator import RunSpec, generate_run

    generate_run(tmp_path / "run", RunSpec(nodes=2, gpus_per_node=2, culprit=3, seed=2, flight_recorder="pickle"))
    run = analyze([tmp_path / "run"], use_cache=False)
    assert run.frame("SELECT count(*) AS n FROM inputs WHERE kind = 'flight_recorder'")["n"][0] > 0
    report = build_report(run)
    assert any(f["category"] in ("hang", "desync") for f in report["findings"])     # a hang: the gap would apply
    assert not [g for g in report["missing_evidence"] if "Flight Recorder" in g["what"]]
    assert "no Flight Recorder dumps were read" not in text_report(report)
    assert not [f for f in report["findings"] if "Flight Recorder" in (f.get("suggestion") or "")]


def test_a_job_without_flight_recorder_is_asked_for_exactly_what_it_lacks(tmp_path):
    from tests.scenario import write_scenario

    report = build_report(analyze([write_scenario(tmp_path / "run", ranks=4, culprit=2)], use_cache=False))
    fr = [g for g in report["missing_evidence"] if "Flight Recorder" in g["what"]]
    assert fr and fr[0]["what"] == "no Flight Recorder dumps were read"
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE=2000" in fr[0]["enable"] and "TORCH_NCCL_DUMP_ON_TIMEOUT=1" in fr[0]["enable"]


def test_no_gpu_hours_line_on_a_healthy_run():
    report, views = _all_formats(SAMPLES / "healthy-40r")
    assert report["actions"]["gpu_hours_lost"] is None
    for name, view in views.items():
        assert "GPU-hours lost" not in view, name


def test_no_gpu_hours_and_no_gpu_advice_for_a_cpu_job():
    report, views = _all_formats(ROOT / "tests" / "corpus" / "sleep")      # torchrun + gloo on CPUs
    assert report["outcome"]["outcome"] == "failed" and report["actions"]["gpu_hours_lost"] is None
    assert "GPU-hours" not in views["text"]
    gaps = " ".join(g["what"] for g in report["missing_evidence"])
    assert "NCCL_DEBUG" not in gaps and "nvidia-smi" not in gaps


def test_gpu_hours_still_counted_where_they_were_lost(deadlock):
    report, views = deadlock
    assert report["actions"]["gpu_hours_lost"]["value"] > 150 and "GPU-hours lost: 201.1" in views["text"]


def test_one_end_time_with_its_source(deadlock):
    report, views = deadlock
    span = report["run"]["time_span"]
    end = span["end"]
    assert end.startswith("2026-07-24 14:22:53")
    assert span["end_basis"].startswith("the last timestamped line (") and "slurm-4242.out:" in span["end_basis"]
    assert report["actions"]["gpu_hours_lost"]["to"] == end
    text = views["text"]
    stamps = set(re.findall(r"14:22:53(?:\.\d+)?", text))
    assert stamps == {end.split(" ")[1]}, stamps          # not .556840 here, .877000 there and :53 elsewhere
    assert f"to the end of the logs at {end}" in text and f".. {end} (" in text
