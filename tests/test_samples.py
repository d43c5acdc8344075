"""Each bundled sample's report contains the findings its expected.json lists, and the
samples are exactly what the generator writes (so they stay in step with it)."""
import filecmp
import json
from pathlib import Path

import pytest

from postmortem.analyzer.pipeline import analyze
from postmortem.html_report import html_report
from postmortem.views.render import markdown_report, text_report
from postmortem.rules.report import build_report, to_json

SAMPLES = Path(__file__).resolve().parents[1] / "sample_logs"
NAMES = sorted(p.name for p in SAMPLES.iterdir() if (p / "expected.json").exists())


def _expected(name: str) -> dict:
    return json.loads((SAMPLES / name / "expected.json").read_text())


@pytest.mark.parametrize("name", NAMES)
def test_report_matches_expected(name, shared_cache):
    """The report holds exactly the findings expected.json lists (code, severity, ranks, nodes)."""
    expected = _expected(name)
    run = analyze([SAMPLES / name])
    report = build_report(run)
    v = report["verdict"]
    assert report["outcome"]["outcome"] == expected["outcome"], report["outcome"]
    assert v["status"] == expected["verdict"]["status"], v
    assert v["culprit"]["ranks"] == expected["verdict"]["ranks"]
    assert v["culprit"]["nodes"] == expected["verdict"]["nodes"]
    got = sorted((f["code"], f["severity"], f["ranks"], f["nodes"]) for f in report["findings"])
    want = sorted((f["code"], f["severity"], f["ranks"], f["nodes"]) for f in expected["findings"])
    assert got == want
    assert not {f["code"] for f in report["findings"]} & set(expected["absent"])
    if expected["verdict"]["status"] == "healthy":
        assert not [f for f in report["findings"] if f["severity"] in ("error", "warning")]
    for f in report["inputs"]["files"]:
        assert f["lines"] == f["parsed_lines"] + f["unparsed_lines"]
    # Nothing lost (issue 12): every physical line of every text input is a row of `lines`.
    stored = dict(run.con.execute("SELECT i.abs_path, count(l.line_no) FROM inputs i LEFT JOIN lines l "
                                  "USING (input_id) WHERE i.kind IN ('log', 'pyspy', 'env') AND i.compression IS NULL "
                                  "GROUP BY 1").fetchall())
    for path, rows in stored.items():
        data = Path(path).read_bytes()
        assert rows == data.count(b"\n") + (not data.endswith(b"\n")), path
    _valid_report(json.loads(to_json(report)))
    # The other formats render from the same report (what report --format text,md,json,html writes).
    assert expected["verdict"]["status"] in markdown_report(report) and text_report(report)
    assert html_report(report, run).count("<h2>") >= 4


def _valid_report(report: dict) -> None:
    """The JSON report follows docs/report.schema.json, the public contract."""
    import jsonschema

    schema = json.loads((SAMPLES.parent / "docs" / "report.schema.json").read_text())
    errors = [f"{e.json_path}: {e.message[:200]}" for e in jsonschema.Draft202012Validator(schema).iter_errors(report)]
    assert not errors, errors[:5]


def test_flagship_sample_says_what_the_culprit_did_and_why_no_timeout():
    report = build_report(analyze([SAMPLES / "silent-deadlock-40r"]))
    h001 = next(f for f in report["findings"] if f["code"] == "H001")
    gpu = h001["gpus"][0]
    assert (gpu["node"], gpu["cuda_dev"], gpu["bus_id"]) == ("h20-node-03", 1, "0000:2a:00.0")
    assert h001["details"]["seq"] == 7219 and h001["details"]["process_group"] == "default_pg"
    assert any("_init_group" in frame for frame in h001["details"]["culprit_did_instead"]["py_spy_main_thread"])
    assert any("configured collective timeout is 600 min" in r for r in h001["details"]["why_no_timeout"])
    assert report["actions"]["gpu_hours_lost"]["value"] > 150


@pytest.mark.parametrize("name", NAMES)
def test_samples_are_what_the_generator_writes(tmp_path, name):
    """Each sample is what the generator writes from the arguments in its expected.json."""
    from postmortem.generator import RunSpec, generate_run

    generate_run(tmp_path, RunSpec(seed=0, **_expected(name)["generator"]))
    produced = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    bundled = sorted(str(p.relative_to(SAMPLES / name)) for p in (SAMPLES / name).rglob("*")
                     if p.is_file() and p.name not in ("README.md", "expected.json"))
    assert produced == bundled
    assert all(filecmp.cmp(tmp_path / rel, SAMPLES / name / rel, shallow=False) for rel in produced)
