"""Each bundled sample's report contains the findings its expected.json lists, and the
samples are exactly what the generator writes (so they stay in step with it)."""
import filecmp
import json
from pathlib import Path

import pytest

from analyzer.pipeline import analyze
from analyzer.report import build_report

SAMPLES = Path(__file__).resolve().parents[1] / "sample_logs"
NAMES = sorted(p.name for p in SAMPLES.iterdir() if (p / "expected.json").exists())


@pytest.mark.parametrize("name", NAMES)
def test_report_matches_expected(name):
    expected = json.loads((SAMPLES / name / "expected.json").read_text())
    report = build_report(analyze([SAMPLES / name]))
    v = report["verdict"]
    assert v["status"] == expected["verdict"]["status"]
    assert v["culprit"]["ranks"] == expected["verdict"]["ranks"]
    assert v["culprit"]["nodes"] == expected["verdict"]["nodes"]
    for want in expected["findings"]:
        assert any(f["code"] == want["code"] and f["severity"] == want["severity"] and f["ranks"] == want["ranks"]
                   and f["nodes"] == want["nodes"] for f in report["findings"]), want
    codes = {f["code"] for f in report["findings"]}
    assert not codes & set(expected["absent"])
    if not expected["findings"]:
        assert not [f for f in report["findings"] if f["severity"] == "error"]
    for f in report["inputs"]["files"]:
        assert f["lines"] == f["parsed_lines"] + f["unparsed_lines"]


def test_flagship_sample_says_what_the_culprit_did_and_why_no_timeout():
    report = build_report(analyze([SAMPLES / "silent-deadlock-40r"]))
    h001 = next(f for f in report["findings"] if f["code"] == "H001")
    gpu = h001["gpus"][0]
    assert (gpu["node"], gpu["cuda_dev"], gpu["bus_id"]) == ("h20-node-03", 1, "0000:2a:00.0")
    assert h001["details"]["seq"] == 7219 and h001["details"]["process_group"] == "default_pg"
    assert any("_init_group" in frame for frame in h001["details"]["culprit_did_instead"]["py_spy_main_thread"])
    assert any("configured collective timeout is 600 min" in r for r in h001["details"]["why_no_timeout"])
    assert report["actions"]["gpu_hours_lost"]["value"] > 150


@pytest.mark.parametrize("name,args", [
    ("silent-deadlock-40r", dict(scenario="deadlock", timeout_s=36000, hang_duration_s=18000, work_updates=True,
                                 config_files=True, node_logs=True)),
    ("healthy-40r", dict(scenario="healthy", config_files=True, node_logs=True)),
])
def test_samples_are_what_the_generator_writes(tmp_path, name, args):
    from bench.generator import RunSpec, generate_run

    generate_run(tmp_path, RunSpec(seed=0, **args))
    produced = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    bundled = sorted(str(p.relative_to(SAMPLES / name)) for p in (SAMPLES / name).rglob("*")
                     if p.is_file() and p.name not in ("README.md", "expected.json"))
    assert produced == bundled
    assert all(filecmp.cmp(tmp_path / rel, SAMPLES / name / rel, shallow=False) for rel in produced)
