"""Exit codes scripts can trust, and no Python traceback whatever goes wrong: bad usage and
unusable paths exit 2 with one clear line, a bug exits 4 with one line (the traceback only with
POSTMORTEM_DEBUG=1), --out creates missing folders, --version and every --help work."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from postmortem.rules import report
from postmortem.cli import _CODES, main
from tests.scenario import write_scenario


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return write_scenario(tmp_path_factory.mktemp("cli") / "run", ranks=4, culprit=2)


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "postmortem.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})


def test_version_is_the_generator_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"postmortem {report.VERSION}\n"


@pytest.mark.parametrize("command", ["report", "ingest", "query", "transports", "hw", "diff", "tui", "explain",
                                     "export", "export perfetto", "export parquet", "fleet"])
def test_every_command_help_lists_its_exit_codes(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([*command.split(), "--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and "exit codes" in out
    if command == "report":
        assert all(f"  {code}  " in out for code in "01234") and "POSTMORTEM_DEBUG=1" in out


def test_top_level_help_documents_every_code(capsys):
    assert main([]) == 2  # no command: the help, as a usage error
    out = capsys.readouterr().out
    assert "exit codes:" in out and "3  the report was written but is partial" in out and "4  internal error" in out
    assert set(_CODES) >= {"ingest", "query", "transports", "hw", "diff", "tui", "explain", "export", "fleet"}


@pytest.mark.parametrize("argv", [["bogus"], ["report"], ["report", "x", "--fail-on", "sometimes"],
                                  ["query", "SELECT 1"], ["explain"], ["hw", "--format", "yaml"]])
def test_bad_usage_exits_2_with_a_usage_line(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and "usage:" in capsys.readouterr().err


def test_unreadable_inputs_and_stores_exit_2(tmp_path, capsys):
    assert main(["report", str(tmp_path / "missing"), "--quiet"]) == 2
    assert "nothing readable" in capsys.readouterr().err
    for argv in (["query", "--db", str(tmp_path / "x.duckdb"), "SELECT 1"],
                 ["transports", "--db", str(tmp_path / "x.duckdb")],
                 ["export", "perfetto", "--db", str(tmp_path / "x.duckdb"), "--out", str(tmp_path / "t.json")],
                 ["explain", "Z999"], ["hw", "no-such-gpu"], ["transports"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("postmortem") and "Traceback" not in err


def test_out_to_an_existing_folder_writes_report_files_in_it(folder, tmp_path, capsys):
    out = tmp_path / "existing"
    out.mkdir()
    assert main(["report", str(folder), "--format", "md", "--out", str(out), "--quiet"]) == 1
    assert (out / "report.md").read_text().startswith("# postmortem report")
    assert main(["report", str(folder), "--format", "md,json", "--out", str(out), "--quiet"]) == 1
    assert sorted(p.name for p in out.iterdir()) == ["report.json", "report.md"]


def test_out_with_missing_parents_creates_them(folder, tmp_path, capsys):
    single = tmp_path / "a" / "b" / "report.txt"
    assert main(["report", str(folder), "--out", str(single), "--quiet"]) == 1
    assert single.read_text().startswith("OUTCOME: ") and "\nVERDICT (" in single.read_text()
    several = tmp_path / "c" / "d" / "pm"
    assert main(["report", str(folder), "--format", "json,html", "--out", str(several), "--quiet"]) == 1
    assert json.loads((several / "report.json").read_text())["schema"] == "postmortem.report/1"
    db = tmp_path / "e" / "f" / "run.duckdb"
    assert main(["ingest", str(folder), "--db", str(db), "--quiet"]) == 0 and db.exists()


def test_an_unwritable_out_exits_2_before_the_analysis(folder, tmp_path, capsys, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    analysed = []
    monkeypatch.setattr("postmortem.analyzer.pipeline.analyze", lambda *a, **k: analysed.append(1))
    for argv in (["report", str(folder), "--out", str(blocker / "sub" / "report.txt")],
                 ["report", str(folder), "--format", "md,json", "--out", str(blocker)],
                 ["report", str(folder), "--db", str(blocker / "run.duckdb")],
                 ["ingest", str(folder), "--db", str(blocker / "x" / "run.duckdb")]):
        assert main([*argv, "--quiet"]) == 2, argv
        err = capsys.readouterr().err
        assert f"{blocker}" in err and ("is a file" in err or "a folder" in err) and "Traceback" not in err
    assert not analysed  # said before minutes of parsing, not after


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes anywhere")
def test_a_read_only_folder_exits_2(folder, tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        assert main(["report", str(folder), "--out", str(locked / "r.txt"), "--quiet"]) == 2
        assert "not writable" in capsys.readouterr().err
    finally:
        locked.chmod(0o700)


def test_an_unwritable_export_out_exits_2(folder, tmp_path, capsys):
    db = tmp_path / "run.duckdb"
    assert main(["ingest", str(folder), "--db", str(db), "--quiet"]) == 0
    capsys.readouterr()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["export", "perfetto", "--db", str(db), "--out", str(blocker / "trace.json")]) == 2
    err = capsys.readouterr().err
    assert f"{blocker / 'trace.json'}:" in err and "Traceback" not in err


def _explode(*args, **kwargs):
    raise ValueError("kaput\nsecond line")


def test_a_bug_is_one_line_and_exit_4(folder, monkeypatch, capsys):
    monkeypatch.setattr(report, "build_report", _explode)
    monkeypatch.delenv("POSTMORTEM_DEBUG", raising=False)
    assert main(["report", str(folder), "--quiet"]) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("postmortem: internal error: ValueError: kaput second line")
    assert "POSTMORTEM_DEBUG=1" in err[-1] and not any("Traceback" in line for line in err)


def test_postmortem_debug_shows_the_traceback(folder, monkeypatch, capsys):
    monkeypatch.setattr(report, "build_report", _explode)
    monkeypatch.setenv("POSTMORTEM_DEBUG", "1")
    assert main(["report", str(folder), "--quiet"]) == 4
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "_explode" in err
    assert "postmortem: internal error: ValueError" in err


def test_a_bug_in_a_real_process_prints_no_traceback(folder):
    """End to end, as a script sees it: the process's exit status and stderr."""
    code = ("import sys, postmortem.rules.report, postmortem.cli\n"
            "def boom(*a, **k): raise KeyError('x')\n"
            "postmortem.rules.report.build_report = boom\n"
            f"sys.exit(postmortem.cli.main(['report', {str(folder)!r}, '--quiet']))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "POSTMORTEM_DEBUG"})
    assert proc.returncode == 4 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("postmortem: internal error: KeyError")


def test_version_and_help_from_the_command_line():
    proc = _cli("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("postmortem ")
    proc = _cli("report", "--help")
    assert proc.returncode == 0 and "exit codes:" in proc.stdout and "Traceback" not in proc.stderr


def test_the_process_ends_at_once_with_its_output_whole_and_no_temporary_file_left(folder, tmp_path):
    """``entry`` ends the process without the interpreter's teardown (``os._exit``): stdout is
    flushed first, the temporary files are removed first (a store kept with --db is built in
    a private folder), and the exit code is the report's."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {"TMPDIR": str(temp)}
    proc = _cli("report", str(folder), "--format", "json", "--db", str(tmp_path / "store.duckdb"), env=env)
    report_ = json.loads(proc.stdout)
    assert proc.returncode == 1 and any(f["severity"] == "error" for f in report_["findings"])   # a finding at error
    assert (tmp_path / "store.duckdb").is_file() and not list(temp.iterdir())
    lines = _cli("query", "--db", str(tmp_path / "store.duckdb"), "SELECT count(*) > 0 AS any_lines FROM lines",
                 "--format", "csv", env=env)
    assert lines.returncode == 0 and lines.stdout.split() == ["any_lines", "True"]
    assert not list(temp.iterdir())
