"""The fleet view (issue 27): ``postmortem fleet`` over many jobs' report.json files.

A generated fleet (bench.fleet_generator: schema-valid reports written directly) of 5,000 jobs
over 500 nodes with 3 planted lemon nodes must name exactly those 3 with their evidence; the same
fleet without lemons, none; a node that runs many jobs (and so is the culprit of many) is not
flagged for that. The store is incremental; hostile node names are escaped in every format;
exit codes 0/1/2/4."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import duckdb
import pytest

from postmortem import fleet
from postmortem.cli import main
from bench.fleet_generator import FleetSpec, generate_fleet, lemon_nodes, make_report, node_names
from tests.conftest import ROOT

BUSY = 10   # index of the busy node: picked 20 times as often as the others


def _run(argv, capsys) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def _view(folder: Path, capsys, *extra) -> tuple[int, dict]:
    code, out, err = _run(["fleet", str(folder), "--format", "json", "--quiet", *extra], capsys)
    return code, json.loads(out)


@pytest.fixture(scope="module")
def lemon_fleet(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fleet") / "lemons"
    truth = generate_fleet(folder, FleetSpec(jobs=5000, nodes=500, lemons=3, busy=[BUSY], seed=7))
    return folder, truth


@pytest.fixture(scope="module")
def healthy_fleet(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fleet") / "healthy"
    truth = generate_fleet(folder, FleetSpec(jobs=5000, nodes=500, lemons=0, busy=[BUSY, 250], seed=11))
    return folder, truth


# -- statistics ----------------------------------------------------------------------------------

@pytest.mark.parametrize("n, p", [(1, 0.3), (10, 0.5), (40, 0.03), (200, 0.01), (300, 0.9)])
def test_binomial_tail_matches_the_exact_sum(n, p):
    for k in range(0, n + 2):
        exact = sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k, n + 1))
        assert fleet.binom_sf(k, n, p) == pytest.approx(exact, rel=1e-9, abs=1e-15), (k, n, p)


def test_binomial_tail_is_stable_far_out():
    tiny = fleet.binom_sf(500, 1000, 0.01)          # ~1e-600: underflows to 0, no error
    assert tiny == 0.0
    small = fleet.binom_sf(31, 82, 0.0286)
    assert 0 < small < 1e-20
    assert fleet.binom_sf(30, 1_000_000, 0.00003) == pytest.approx(0.5, abs=0.05)   # near the mean
    assert fleet.binom_sf(0, 10, 0.1) == 1.0 and fleet.binom_sf(11, 10, 0.1) == 0.0


def test_corrections():
    p = [0.01, 0.04, 0.03, 0.002]
    assert fleet.correct(p, "bonferroni") == pytest.approx([0.04, 0.16, 0.12, 0.008])
    # Benjamini-Hochberg: sorted 0.002, 0.01, 0.03, 0.04 -> 0.008, 0.02, 0.04, 0.04 (monotone)
    assert fleet.correct(p, "bh") == pytest.approx([0.02, 0.04, 0.04, 0.008])


# -- the planted lemons ---------------------------------------------------------------------------

def test_the_three_planted_lemons_are_named_with_their_evidence(lemon_fleet, capsys):
    folder, truth = lemon_fleet
    code, v = _view(folder, capsys)
    assert code == 1
    assert v["schema"] == "postmortem.fleet/1"
    assert v["summary"]["jobs"] == 5000 and v["summary"]["nodes"] == 500
    assert v["drain"]["nodes"] == truth["lemons"]
    flagged = [n for n in v["nodes"] if n["flagged"]]
    assert sorted(n["node"] for n in flagged) == truth["lemons"]
    assert v["test"]["correction"] == "Bonferroni" and v["test"]["alpha"] == 0.01
    for n in flagged:
        assert n["culprit_jobs"] >= 3 and n["p_adjusted"] < 0.01
        assert len(n["evidence"]) == min(n["culprit_jobs"], fleet.EVIDENCE_JOBS)
        for ev in n["evidence"]:
            assert ev["status"] == "culprit" and ev["code"] and ev["job_id"]
        assert any(n["node"] in ev["sentence"] for ev in n["evidence"])
    # each lemon's bad GPU (index 3, by serial) and NIC port are flagged too, and nothing else
    gpus = [g for g in v["gpus"] if g["flagged"]]
    assert sorted(g["node"] for g in gpus) == truth["lemons"]
    assert all(g["key"].startswith("serial:") and "GPU 3" in g["label"] for g in gpus)
    nics = [n for n in v["nics"] if n["flagged"]]
    assert sorted(n["key"] for n in nics) == [f"{lemon}:mlx5_1" for lemon in truth["lemons"]]


def test_a_busy_node_is_not_flagged_for_running_many_jobs(lemon_fleet, capsys):
    folder, truth = lemon_fleet
    _, v = _view(folder, capsys)
    busy = next(n for n in v["nodes"] if n["node"] == truth["busy"][0])
    others = sorted(n["jobs"] for n in v["nodes"] if n["node"] != busy["node"])
    assert busy["jobs"] > 5 * others[len(others) // 2]                 # it runs far more jobs...
    top_by_count = sorted(v["nodes"], key=lambda n: -n["culprit_jobs"])[:5]
    assert busy["node"] in [n["node"] for n in top_by_count]           # ...so it is culprit often
    assert not busy["flagged"] and busy["p_adjusted"] > 0.5             # but not more than its share


def test_a_fleet_without_lemons_flags_nothing(healthy_fleet, capsys):
    folder, truth = healthy_fleet
    for correction in ("bonferroni", "bh"):
        code, v = _view(folder, capsys, "--correction", correction)
        assert code == 0, [n for n in v["nodes"] if n["flagged"]]
        assert v["drain"] == {"nodes": [], "hostlist": None}
        assert not any(x["flagged"] for x in v["nodes"] + v["gpus"] + v["nics"])
        assert v["summary"]["jobs_with_culprit"] > 500                  # failures there are, spread out
    code, out, _ = _run(["fleet", str(folder), "--quiet"], capsys)
    assert code == 0 and "DRAIN: no node, GPU or NIC fails more often than chance" in out


def test_a_looser_threshold_and_min_jobs_are_honoured(lemon_fleet, capsys):
    folder, truth = lemon_fleet
    _, v = _view(folder, capsys, "--min-jobs", "1000")
    assert v["drain"]["nodes"] == [] and v["test"]["min_culprit_jobs"] == 1000
    code, v = _view(folder, capsys, "--drain-threshold", "0.5", "--correction", "bh")
    assert code == 1 and set(truth["lemons"]) <= set(v["drain"]["nodes"])
    assert v["test"]["correction"] == "Benjamini-Hochberg"


def test_categories_codes_and_same_cause(lemon_fleet, capsys):
    folder, truth = lemon_fleet
    _, v = _view(folder, capsys)
    per_day = v["categories"]["per_day"]
    assert sum(r["jobs"] for r in per_day) == v["summary"]["failed_jobs"]
    assert sum(r["jobs"] for r in v["categories"]["per_week"]) == v["summary"]["failed_jobs"]
    assert {"hang", "hardware", "network", "crash"} <= {r["category"] for r in per_day}
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d", r["day"]) for r in per_day)
    codes = [c["code"] for c in v["codes"]]
    assert {"H001", "G001", "N001", "M001"} <= set(codes)
    assert v["codes"] == sorted(v["codes"], key=lambda c: (-c["jobs"], c["code"]))
    top = v["same_cause"][0]                      # a lemon's repeated fault leads the groups
    assert top["node"] in truth["lemons"] and top["code"] in ("G001", "N001") and top["jobs"] >= 5
    assert "N" in top["template"] and len(top["job_ids"]) == min(top["jobs"], 20)


def test_every_format_renders_and_html_draws_both_pictures(lemon_fleet, tmp_path, capsys):
    folder, truth = lemon_fleet
    out = tmp_path / "view"
    code, _, err = _run(["fleet", str(folder), "--format", "text,md,json,html", "--out", str(out)], capsys)
    assert code == 1, err
    assert sorted(p.name for p in out.iterdir()) == ["fleet.html", "fleet.json", "fleet.md", "fleet.txt"]
    text = (out / "fleet.txt").read_text()
    assert text.startswith("FLEET: 5000 jobs") and "DRAIN: 3 node(s)" in text and "Bonferroni" in text
    assert all(f"Evidence for {lemon}" in text for lemon in truth["lemons"])
    md = (out / "fleet.md").read_text()
    assert md.startswith("# postmortem fleet") and "**DRAIN**" in md
    page = (out / "fleet.html").read_text()
    assert page.count("<svg") == 2 and "nodes by culprit jobs against jobs run" in page
    assert page.count('class="dot flagged"') == 3 and "failed jobs per day by category" in page
    assert page.count('class="flagline"') == 1                          # Bonferroni: the flag threshold drawn
    assert json.loads((out / "fleet.json").read_text())["drain"]["nodes"] == truth["lemons"]
    # a second run replaces its own files
    assert main(["fleet", str(folder), "--format", "text,md,json,html", "--out", str(out), "--quiet"]) == 1


# -- the store -----------------------------------------------------------------------------------

def _day(folder: Path, jobs: int, first_id: int, seed: int) -> dict:
    return generate_fleet(folder, FleetSpec(jobs=jobs, nodes=60, lemons=1, seed=seed, first_id=first_id, days=1))


def test_the_store_is_incremental(tmp_path, capsys):
    store = tmp_path / "store"
    day1, day2 = tmp_path / "reports" / "d1", tmp_path / "reports" / "d2"
    _day(day1, 300, 1000, 1)
    _day(day2, 100, 2000, 2)
    code, out, err = _run(["fleet", str(day1), "--store", str(store), "--format", "json"], capsys)
    first = json.loads(out)
    assert first["ingest"]["new_files"] == 300 and first["summary"]["jobs"] == 300
    # the next day: only its files are read; the view covers both days
    _, out, _ = _run(["fleet", str(tmp_path / "reports"), "--store", str(store), "--format", "json"], capsys)
    second = json.loads(out)
    assert (second["ingest"]["new_files"], second["ingest"]["already_in_store"]) == (100, 300)
    assert second["summary"]["jobs"] == 400
    batches = sorted(p.name for p in (store / "table=jobs").iterdir())
    assert len(batches) == 2 and all(b.startswith("batch=") for b in batches)
    # nothing new: no batch written, the same view
    _, out, _ = _run(["fleet", str(tmp_path / "reports"), "--store", str(store), "--format", "json"], capsys)
    third = json.loads(out)
    assert third["ingest"]["new_files"] == 0 and len(list((store / "table=jobs").iterdir())) == 2
    assert third["summary"] == second["summary"]
    # a report rewritten (the job re-analysed): read again, and its new verdict replaces the old
    path = day2 / "job-2000" / "report.json"
    report = json.loads(path.read_text())
    report["verdict"]["status"] = "inconclusive"
    path.write_text(json.dumps(report, indent=2) + "\n")
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    _, out, _ = _run(["fleet", str(tmp_path / "reports"), "--store", str(store), "--format", "json"], capsys)
    fourth = json.loads(out)
    assert fourth["ingest"]["new_files"] == 1 and fourth["summary"]["jobs"] == 400
    assert fourth["summary"]["statuses"].get("inconclusive", 0) == second["summary"]["statuses"].get(
        "inconclusive", 0) + 1
    # the store alone (no PATH) gives the same view
    code, out, _ = _run(["fleet", "--store", str(store), "--format", "json"], capsys)
    assert json.loads(out)["summary"] == fourth["summary"]
    # and plain DuckDB reads the same files (the README's query)
    glob = str(store / "table=jobs" / "*" / "*.parquet")
    n = duckdb.connect().execute(f"SELECT count(DISTINCT job_id) FROM read_parquet('{glob}', "
                                 "hive_partitioning = true)").fetchone()
    assert n[0] == 400


def test_an_uncommitted_batch_is_ignored(tmp_path, capsys):
    store = tmp_path / "store"
    _day(tmp_path / "r", 50, 1, 3)
    assert main(["fleet", str(tmp_path / "r"), "--store", str(store), "--quiet"]) in (0, 1)
    files = next((store / "table=files").iterdir())
    # a crash after the data files and before the files table (the commit mark): as if never written
    for p in (store / "table=files").iterdir():
        os.rename(p, tmp_path / p.name)
    s = fleet.FleetStore(store)
    assert s.known() == {}
    con = s.connect()
    assert con.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
    os.rename(tmp_path / files.name, files)
    assert fleet.FleetStore(store).connect().execute("SELECT count(*) FROM jobs").fetchone()[0] == 50


# -- job ids, real reports, schema ---------------------------------------------------------------

@pytest.mark.parametrize("path, report, expected", [
    ("/d/job-4242/report.json", {}, "4242"),
    ("/d/4242/postmortem/report.json", {}, "4242"),
    ("/d/job=17_run2/report.json", {}, "17_run2"),
    ("/d/x/4243.report.json", {}, "4243"),
    ("/d/jobbers/report.json", {}, "jobbers"),
    ("/d/whatever/report.json", {"job_id": 99}, "99"),
])
def test_job_ids(path, report, expected):
    assert fleet.job_id_of(path, report) == expected


def test_title_templates_fold_numbers_and_keep_names():
    assert fleet.template("Xid 79 (GPU has fallen off the bus) on gpu-node-0126 GPU 3 (0000:5d:00.0), rank 35") == \
        "Xid N (GPU has fallen off the bus) on gpu-node-0126 GPU N (BUS), rank N"
    assert fleet.template("errors point at h20-node-03 (mlx5_1 (2 link down)) from 10.0.0.12") == \
        "errors point at h20-node-03 (mlx5_1 (N link down)) from IP"


def test_generated_reports_are_valid_reports():
    import jsonschema

    schema = json.loads((ROOT / "docs" / "report.schema.json").read_text())
    import random

    rng = random.Random(1)
    validator = jsonschema.Draft202012Validator(schema)
    from datetime import datetime

    for cause in [None, "deadlock", "all-stuck", "gpu-xid", "ib-flap", "oom", "cuda-error", "timeout"]:
        nodes = ["n1", "n2", "n3"]
        report = make_report("1", nodes, datetime(2026, 7, 1), cause, "n2" if cause else None, rng)
        errors = [f"{e.json_path}: {e.message[:200]}" for e in validator.iter_errors(report)]
        assert not errors, (cause, errors)


def test_real_reports_of_the_samples(tmp_path, capsys):
    """Real reports (postmortem report --format json of two samples): the GPU by its serial, the
    culprit node, the finding codes."""
    for sample in ("gpu-fell-off-bus", "silent-deadlock-40r"):
        assert main(["report", str(ROOT / "sample_logs" / sample), "--format", "json", "--quiet",
                     "--out", str(tmp_path / "fleet" / sample / "report.json")]) == 1
    capsys.readouterr()
    code, v = _view(tmp_path / "fleet", capsys, "--min-jobs", "1")
    assert code == 0 and v["summary"]["jobs"] == 2 and v["summary"]["jobs_with_culprit"] == 2
    culprits = {n["node"]: n["culprit_jobs"] for n in v["nodes"]}
    assert culprits["h20-node-02"] == 1 and culprits["h20-node-03"] == 1
    assert [g["key"] for g in v["gpus"]] == ["serial:9560848165858"]
    assert {"G001", "H001"} <= {c["code"] for c in v["codes"]}


def test_job_folders_of_raw_logs_are_reported_on_first(tmp_path, capsys):
    """A PATH with no report in it is one job's log folder: reported on first (with the cache),
    its folder name as the job id; one that cannot be read costs only itself."""
    (tmp_path / "empty-job").mkdir()
    code, out, err = _run(["fleet", str(ROOT / "sample_logs" / "gpu-fell-off-bus"),
                           str(ROOT / "sample_logs" / "silent-deadlock-40r"), str(tmp_path / "empty-job"),
                           "--format", "json", "--min-jobs", "1", "--store", str(tmp_path / "store")], capsys)
    v = json.loads(out)
    assert code == 0 and v["summary"]["jobs"] == 2 and v["summary"]["jobs_with_culprit"] == 2
    assert {n["node"]: n["culprit_jobs"] for n in v["nodes"]} == {"h20-node-02": 1, "h20-node-03": 1}
    assert "reporting on it as a job folder" in err and "empty-job" in err
    ids = duckdb.sql(f"SELECT job_id FROM read_parquet('{tmp_path / 'store'}/table=jobs/*/*.parquet')").fetchall()
    assert sorted(i for i, in ids) == ["gpu-fell-off-bus", "silent-deadlock-40r"]


# -- hostile names -------------------------------------------------------------------------------

HOSTILE = ["<script>alert(1)</script>", "evil|node`x`*_[a](http://x)", "\x1b[31mred\x1b[0m-node"]


def test_hostile_node_names_are_escaped_in_every_format(tmp_path, capsys):
    spec = FleetSpec(jobs=1500, nodes=100, lemons=3, seed=5)
    names = node_names(spec)
    for hostile, lemon in zip(HOSTILE, lemon_nodes(spec)):
        names[names.index(lemon)] = hostile
    spec.node_names = names
    generate_fleet(tmp_path / "r", spec)
    out = tmp_path / "view"
    code, _, err = _run(["fleet", str(tmp_path / "r"), "--format", "text,md,json,html", "--out", str(out)], capsys)
    assert code == 1, err
    v = json.loads((out / "fleet.json").read_text())
    assert sorted(v["drain"]["nodes"]) == sorted(HOSTILE)                  # JSON keeps the names as they are
    for name in ("fleet.txt", "fleet.md", "fleet.html"):
        body = (out / name).read_text()
        assert "\x1b" not in body and "\\x1b[31mred" in body, name
    page = (out / "fleet.html").read_text()
    assert "<script" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<a " not in page                                               # no link made of a name
    md = (out / "fleet.md").read_text()
    tables = re.findall(r"(?:^\|.*\n)+", md, re.M)
    flagged_rows = 0
    for table in tables:    # a pipe in a name does not add a column: every row as wide as the header
        rows = table.splitlines()
        width = len(re.split(r"(?<!\\)\|", rows[0]))
        for row in rows:
            assert len(re.split(r"(?<!\\)\|", row)) == width, row
            flagged_rows += "DRAIN" in row
    assert flagged_rows == 9                                                # 3 nodes, 3 GPUs, 3 NICs
    # outside code spans, no raw HTML or link syntax from a name
    prose = re.sub(r"`[^`]*`", "", md)
    assert not re.search(r"(?<!\\)<script", prose) and not re.search(r"(?<!\\)\]\(", prose)
    assert "\\<script\\>" in prose or "<script>" not in md


# -- exit codes and usage ------------------------------------------------------------------------

def test_exit_codes_and_bad_usage(tmp_path, capsys, monkeypatch):
    assert _run(["fleet"], capsys)[0] == 2                                         # nothing to read
    code, _, err = _run(["fleet", str(tmp_path / "missing")], capsys)
    assert code == 2 and "nothing readable" in err and "no such file" in err
    (tmp_path / "empty").mkdir()
    assert _run(["fleet", str(tmp_path / "empty")], capsys)[0] == 2
    junk = tmp_path / "junk" / "j1"
    junk.mkdir(parents=True)
    (junk / "report.json").write_text("{not json")
    (junk.parent / "other.report.json").write_text('{"schema": "something/1"}')
    code, _, err = _run(["fleet", str(tmp_path / "junk")], capsys)
    assert code == 2 and "unreadable" in err and "not a postmortem report" in err
    assert _run(["fleet", str(tmp_path / "junk"), "--format", "yaml"], capsys)[0] == 2
    assert _run(["fleet", str(tmp_path / "junk"), "--drain-threshold", "0"], capsys)[0] == 2
    assert _run(["fleet", "--store", str(tmp_path / "no-store")], capsys)[0] == 2
    # a few good reports beside the junk: read, and the junk is noted
    _day(tmp_path / "junk" / "good", 20, 1, 4)
    code, out, err = _run(["fleet", str(tmp_path / "junk"), "--format", "json", "--quiet"], capsys)
    assert code in (0, 1) and json.loads(out)["summary"]["jobs"] == 20 and "unreadable" in err
    # a bug: one line, exit 4
    monkeypatch.setattr(fleet, "fleet_view", lambda *a, **k: 1 / 0)
    code, _, err = _run(["fleet", str(tmp_path / "junk")], capsys)
    assert code == 4 and "internal error: ZeroDivisionError" in err and "Traceback" not in err


def test_help_lists_the_exit_codes(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["fleet", "--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and "exit codes: 0 no node" in out and "--drain-threshold" in out


def test_docs_describe_every_field(lemon_fleet, capsys):
    folder, _ = lemon_fleet
    _, v = _view(folder, capsys)
    doc = (ROOT / "docs" / "fleet.md").read_text()
    flagged = next(n for n in v["nodes"] if n["flagged"])
    keys = [*v, *v["summary"], *v["test"], *v["drain"], *flagged, *flagged["evidence"][0], *v["gpus"][0],
            *v["categories"], *v["codes"][0], *v["same_cause"][0], *v["ingest"], *v["timings"]]
    missing = sorted({k for k in keys if f"`{k}`" not in doc})
    assert not missing, f"not in docs/fleet.md: {missing}"


def test_parquet_exports_are_read_too(sample_store, tmp_path, capsys):
    """``postmortem export parquet`` writes the report as its ``report`` table: a folder of exports
    is a fleet as well (job id from ``job=<id>``)."""
    assert main(["export", "parquet", "--db", str(sample_store("ib-link-flap")), "--out", str(tmp_path / "pm")]) == 0
    capsys.readouterr()
    code, v = _view(tmp_path / "pm", capsys, "--min-jobs", "1")
    assert code == 0 and v["summary"]["jobs"] == 1
    assert [(n["node"], n["culprit_jobs"]) for n in v["nodes"]] == [("h20-node-03", 1)]
    assert [n["key"] for n in v["nics"]] == ["h20-node-03:ens13f0np0"]
    job_dir = next((tmp_path / "pm").iterdir()).name
    assert v["same_cause"] == [] and job_dir.startswith("job=")
    store = fleet.FleetStore()
    fleet.ingest(store, [tmp_path / "pm"])
    assert store.connect().execute("SELECT job_id FROM jobs").fetchall() == [(job_dir.removeprefix("job="),)]
