"""bench/ingest_bench.py (issue 11) at a tiny size: every field present and sane, no wall-clock assertion."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench import ingest_bench
from bench.lineparser_baseline import parse as baseline_parse

REPO = Path(__file__).resolve().parent.parent
FIELDS = {"key", "ranks", "coll", "nsys", "iterations", "generate_s", "generated_reused", "spec", "files",
          "binary_files", "bytes", "text_bytes", "mb", "lines", "grep_s", "grep_lines", "ingest_s", "report_s",
          "ingest_report_s", "peak_rss_mib", "peak_rss_source", "import_s", "store_lines", "verdict", "findings",
          "stage_timings", "mb_per_s", "lines_per_s", "ratio_ingest_grep", "baseline_s", "baseline_rows",
          "baseline_peak_rss_mib", "ratio_baseline_ingest", "repeats", "lnav_s", "ratio_lnav_ingest",
          "single_log_bytes"}


def _wc_l(run_dir: Path) -> tuple[int, int, int, int]:
    """(files, bytes, wc -l over the text files, binary files), independently of the harness."""
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    binary = [p for p in files if p.suffix == ".sqlite"]
    text = [p for p in files if p.suffix != ".sqlite"]
    wc = subprocess.run(["wc", "-l", *map(str, text)], capture_output=True, text=True, check=True).stdout
    total = int(wc.strip().splitlines()[-1].split()[0]) if len(text) > 1 else int(wc.split()[0])
    return len(files), sum(p.stat().st_size for p in files), total, len(binary)


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ingest_bench")
    out = tmp / "bench.json"
    (tmp / "tmp").mkdir()
    proc = subprocess.run([sys.executable, "-m", "bench.ingest_bench", "--ranks", "8", "--iterations", "3",
                           "--coll", "--nsys", "--json", str(out), "--keep", str(tmp / "runs")],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TMPDIR": str(tmp / "tmp")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp, out, json.loads(out.read_text()), proc.stdout


def test_json_has_every_field_with_sane_values(bench_run):
    tmp, _, result, stdout = bench_run
    assert result["schema"] == ingest_bench.SCHEMA
    machine = result["machine"]
    assert machine["cpu_count"] >= 1 and machine["python"] and machine["polars"] and machine["duckdb"]
    assert machine["speed_probe_s"] > 0 and machine["speed_probe_end_s"] > 0   # the machine's drift, measured
    assert [r["key"] for r in result["runs"]] == ["8r-coll-nsys"]
    row = result["runs"][0]
    assert FIELDS <= set(row), FIELDS - set(row)
    assert row["ranks"] == 8 and row["coll"] and row["nsys"] and row["repeats"] == 1
    assert row["spec"]["nccl_subsys"].endswith(",COLL") and row["spec"]["profile"] is True
    for key in ("grep_s", "ingest_s", "report_s", "baseline_s", "import_s", "ingest_report_s"):
        assert row[key] > 0, key
    for key in ("peak_rss_mib", "baseline_peak_rss_mib"):
        assert 10 < row[key] < 64 * 1024, key
    # Ratios and rates come from the measured times.
    assert row["ratio_ingest_grep"] == pytest.approx(row["ingest_s"] / row["grep_s"])
    assert row["ratio_baseline_ingest"] == pytest.approx(row["baseline_s"] / row["ingest_s"])
    assert row["mb_per_s"] == pytest.approx(row["bytes"] / 1e6 / row["ingest_s"])
    assert row["lines_per_s"] == pytest.approx(row["lines"] / row["ingest_s"])
    assert row["ingest_report_s"] == pytest.approx(row["ingest_s"] + row["report_s"])
    # Counts agree with an independent wc -l; grep, our store and the baseline saw the same lines.
    files, size, lines, binary = _wc_l(tmp / "runs" / row["key"])
    assert (row["files"], row["bytes"], row["lines"], row["binary_files"]) == (files, size, lines, binary)
    assert binary == 8                                  # one nsys export per rank
    assert row["mb"] == pytest.approx(size / 1e6, abs=1e-3)
    assert row["grep_lines"] == row["lines"] == row["baseline_rows"]
    assert row["store_lines"] == row["lines"]
    assert row["verdict"]["culprit_ranks"] == [5]      # the generated deadlock's culprit (ranks // 2 + 1)
    for label in ("ingest s", "grep -c s", "baseline/ingest", "peak RSS MiB", "lnav s"):
        assert label in stdout
    if shutil.which("lnav") is None:      # lnav is a peer only where it is installed
        assert row["lnav_s"] is None and row["ratio_lnav_ingest"] is None
    assert row["single_log_bytes"] is None and result["args"]["cases"] == []


def test_the_bench_leaves_no_cache_behind(bench_run):
    """Each measured child has a cache folder of its own (a GB for a large run): removed after."""
    tmp = bench_run[0]
    assert not list((tmp / "tmp").glob("ingest_bench_cache_*"))


def test_coll_lines_are_in_the_run(bench_run):
    """--coll turns on NCCL's COLL subsystem: the generator writes each rank's first collectives."""
    tmp, _, result, _ = bench_run
    run_dir = tmp / "runs" / result["runs"][0]["key"]
    coll = [line for p in run_dir.rglob("*.log") for line in p.read_text(errors="replace").splitlines()
            if " NCCL INFO " in line and ": opCount " in line]
    assert len(coll) >= 8


def test_compare_and_reuse(bench_run):
    """A second run over the kept folder reuses the generated run and prints new/old per size."""
    tmp, old, _, _ = bench_run
    new = tmp / "again.json"
    proc = subprocess.run([sys.executable, "-m", "bench.ingest_bench", "--ranks", "8", "--iterations", "3",
                           "--coll", "--nsys", "--no-baseline", "--json", str(new), "--keep", str(tmp / "runs"),
                           "--compare", str(old)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = json.loads(new.read_text())["runs"][0]
    assert row["generated_reused"] is True and row["baseline_s"] is None and row["ratio_baseline_ingest"] is None
    assert "new / old" in proc.stdout and "8r-coll-nsys: ingest_s " in proc.stdout
    assert "the machine's speed probe: new/old " in proc.stdout


def test_baseline_parser_kinds(tmp_path):
    """The yardstick really parses: each main line kind is recognised."""
    (tmp_path / "rank0.log").write_text(
        "h20-node-01:3571778:3571778 [3] NCCL INFO cudaDriverVersion 12040\n"
        "h20-node-01:3571778:3571900 [3] NCCL WARN NET/IB : Got completion with error 12\n"
        "[rank3]:[E0724 08:32:56.001735206 ProcessGroupNCCL.cpp:758] [Rank 3] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=7219, OpType=_ALLGATHER_BASE)\n"
        " [2026-07-24 08:03:13] iteration        1/   50000 | consumed samples:          640 | lm loss: 9.9E+00 |\n"
        "Traceback (most recent call last):\n"
        '  File "/workspace/train.py", line 12, in <module>\n'
        "    main()\n"
        "torch.distributed.DistBackendError: NCCL error\n"
        "plain text\n")
    con, n = baseline_parse([tmp_path])
    kinds = [k for (k,) in con.execute("SELECT kind FROM lines ORDER BY line_no").fetchall()]
    assert n == 9
    assert kinds == ["nccl", "nccl", "c10d", "iteration", "traceback", "frame", "frame", "exception", "other"]
    assert con.execute("SELECT rank, iteration FROM lines WHERE line_no IN (3, 4) ORDER BY line_no").fetchall() == \
        [(3, None), (None, 1)]


def test_named_cases_have_the_issue_sizes():
    """--case names the runs issue 26 measures: many small files, a long COLL trace, one large log."""
    cases = ingest_bench.parse_cases("plain-1024,coll-64-871MB,c10d-535MB")
    plain, coll, single = cases
    assert (plain.ranks, plain.coll, plain.single_log_bytes) == (1024, False, 0)
    assert (coll.ranks, coll.coll) == (64, True) and coll.iterations > 40
    assert (single.single_log_bytes, single.coll) == (535_000_000, False)
    with pytest.raises(argparse.ArgumentTypeError):
        ingest_bench.parse_cases("plain-1024,nope")


def test_single_log_case(tmp_path):
    """A one-log case at a small size: written by memory_bench's writer, then measured like a run."""
    case = ingest_bench.Case("c10d-small", ranks=1, single_log_bytes=300_000)
    row = ingest_bench.bench_one(tmp_path / case.key, case, repeats=1, baseline=True, log=lambda _: None)
    assert [p.name for p in (tmp_path / case.key).iterdir()] == ["stderr.log"]
    assert row["files"] == 1 and 290_000 < row["bytes"] <= 300_000
    assert row["single_log_bytes"] == 300_000 and row["iterations"] is None
    assert row["spec"]["writer"] == "bench.memory_bench.write_plain"
    assert row["grep_lines"] == row["store_lines"] == row["baseline_rows"] > 1000
    # "lines" is wc -l: the writer stops at the size, mid-line, and that last line has no newline
    ends = (tmp_path / case.key / "stderr.log").read_bytes().endswith(b"\n")
    assert row["lines"] == row["grep_lines"] - (0 if ends else 1)
    if shutil.which("lnav") is None:
        assert row["lnav_s"] is None
    else:       # one file: lnav indexes all of it, so its time is a peer's
        assert row["lnav_files"] == 1 and row["lnav_lines"] >= row["lines"] and row["ratio_lnav_ingest"] > 0
    assert "one 0 MB training log" in ingest_bench.format_row(row)
    again = ingest_bench.generate(tmp_path / case.key, case)
    assert again == (0.0, True)                # the same spec: reused


def test_lnav_is_measured_only_when_installed(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert ingest_bench.measure_lnav(run_dir) is None
    fake = tmp_path / "bin" / "lnav"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" >> {tmp_path / 'args'}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake.parent))
    assert ingest_bench.measure_lnav(run_dir, repeats=2) > 0
    assert (tmp_path / "args").read_text().splitlines() == [f"-n -q -r {run_dir}"] * 2
    assert ingest_bench.lnav_coverage(run_dir) is None          # it printed no counts
    fake.write_text("#!/bin/sh\nprintf 'lines files\\n 39604   497 \\n'\n")
    assert ingest_bench.lnav_coverage(run_dir) == (39604, 497)  # lnav_file's sums, as lnav prints them


def _result(probe: float, commit: str, **row) -> dict:
    base = {"key": "plain-1024", "mb": 53.49, "lines": 322183, "files": 3201, "ingest_s": 3.94, "mb_per_s": 13.57,
            "report_s": 0.75, "second_report_s": 0.18, "ratio_ingest_grep": 82.1, "ratio_baseline_ingest": None,
            "peak_rss_all_mib": 1454.0, "lnav_s": 0.79, "lnav_lines": 37677}
    return {"machine": {"cpu_count": 2, "speed_probe_s": probe, "speed_probe_end_s": probe + 0.01,
                        "git_commit": commit}, "runs": [{**base, **row}]}


def test_table_is_the_readme_markdown_with_old_and_new(tmp_path):
    """``--table`` prints a saved result as the README's table: a row per run, units on the
    cells, lnav's share of the lines it indexed, "-" where nothing was measured; with
    ``--compare`` each measured cell reads old -> new and both speed probes are named."""
    new, old = _result(0.17, "abcdef0123"), _result(0.15, "0123456789", ingest_s=4.5, lnav_s=None)
    table = ingest_bench.markdown(new).splitlines()
    assert table[0] == "Measured: 2 cores, speed probe 0.170-0.180 s, commit abcdef0."
    header, rule, row = table[2:]
    assert header.count("|") == rule.count("|") == row.count("|")
    assert row == ("| plain-1024 | 53.5 | 322,183 | 3,201 | 3.94 s | 13.6 | 0.75 s | 0.18 s | 82x | - | 1,454 "
                   "| 0.79 s (12%) |")
    both = ingest_bench.markdown(new, old).splitlines()
    assert both[0].startswith("Old: 2 cores, speed probe 0.150-0.160 s, commit 0123456; new: ")
    assert "| 4.50 s -> 3.94 s |" in both[-1] and "| 53.5 | 322,183 |" in both[-1]   # sizes stay single
    (tmp_path / "new.json").write_text(json.dumps(new))
    (tmp_path / "old.json").write_text(json.dumps(old))
    proc = subprocess.run([sys.executable, "-m", "bench.ingest_bench", "--table", str(tmp_path / "new.json"),
                           "--compare", str(tmp_path / "old.json")], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "\n".join(both), proc.stderr[-2000:]
