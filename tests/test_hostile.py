"""Issue 23: safe to run as the scheduler's user on a folder the job's user controls.

Each attack of the issue, reproduced (docs/security.md names the test that holds each guarantee):
outputs through links, inputs through links, hostile pickles, memory that grew with the input,
the TUI with workers, crashes on odd names and dates, inputs read wrong quietly, commands built
from log text, SQL that reached the file system, and what a signal left behind.
"""
from __future__ import annotations

import errno
import gzip
import io
import json
import os
import pickle
import pwd
import random
import shutil
import signal
import struct
import subprocess
import sys
import tarfile
import time
import tracemalloc
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postmortem.analyzer import cache, safeio
from postmortem.cli import main
from postmortem.analyzer.pipeline import analyze
from postmortem.rules.report import build_report
from postmortem.parsers import flight_recorder
from tests.conftest import ROOT
from tests.scenario import write_scenario

SECRET = "TOPSECRET-7f3a9c"
CUDA = b"RuntimeError: CUDA error: an illegal memory access was encountered\n"


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    return write_scenario(tmp_path_factory.mktemp("hostile") / "job", ranks=4, culprit=2)


def _copy(job: Path, tmp_path: Path) -> Path:
    target = tmp_path / "job"
    shutil.copytree(job, target)
    return target


def _cli(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "postmortem.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd)


def _report_of(paths, **kwargs) -> dict:
    return build_report(analyze(paths, **kwargs))


def _all_formats(job: Path, out: Path, *extra) -> tuple[int, str]:
    code = main(["report", str(job), "--format", "text,md,json,html", "--out", str(out), "--quiet", *extra])
    return code, "".join(p.read_text(errors="replace") for p in out.iterdir() if p.is_file()) if out.is_dir() else ""


# -- 1. outputs never follow links and are written atomically ----------------------------------------

def test_a_report_file_that_is_a_link_is_refused_and_its_target_untouched(job, tmp_path, capsys):
    job = _copy(job, tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (job / "postmortem").mkdir()
    (job / "postmortem" / "report.md").symlink_to(victim)
    assert main(["report", str(job), "--format", "md,json,html", "--out", str(job / "postmortem"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "is a symbolic link" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert victim.read_text() == "precious\n"
    assert sorted(p.name for p in (job / "postmortem").iterdir()) == ["report.md"]   # nothing half-written


def test_an_out_folder_that_is_a_link_inside_the_job_folder_is_refused(job, tmp_path, capsys):
    job = _copy(job, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (job / "postmortem").symlink_to(elsewhere)
    assert main(["report", str(job), "--format", "md,json", "--out", str(job / "postmortem"), "--quiet"]) == 2
    assert "symbolic link" in capsys.readouterr().err and list(elsewhere.iterdir()) == []


def test_db_or_out_equal_to_an_input_log_is_refused_and_the_input_kept(job, tmp_path, capsys):
    job = _copy(job, tmp_path)
    log = next(p for p in sorted(job.rglob("*.log")) if p.stat().st_size)
    before = log.read_bytes()
    assert main(["report", str(job), "--db", str(log), "--quiet"]) == 2
    assert "not a DuckDB store" in capsys.readouterr().err
    assert main(["report", str(job), "--out", str(log), "--quiet"]) == 2
    assert "not a postmortem report" in capsys.readouterr().err
    assert main(["ingest", str(job), "--db", str(log), "--quiet"]) == 2
    assert log.read_bytes() == before


def test_a_store_is_built_privately_and_renamed_into_place(job, tmp_path):
    db = tmp_path / "out" / "run.duckdb"
    assert main(["ingest", str(job), "--db", str(db), "--quiet"]) == 0
    assert sorted(p.name for p in db.parent.iterdir()) == ["run.duckdb"]    # no WAL, no temporary file
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM inputs").fetchall()[0][0] > 0
    # a second ingest replaces it (a store we wrote), never through a link
    db.unlink()
    db.symlink_to(tmp_path / "elsewhere.duckdb")
    assert main(["ingest", str(job), "--db", str(db), "--quiet"]) == 2 and not (tmp_path / "elsewhere.duckdb").exists()


@pytest.mark.parametrize("failure", [errno.ENOSPC, errno.EROFS])
def test_a_full_disk_or_read_only_target_is_one_line_exit_2_and_no_file(job, tmp_path, capsys, monkeypatch, failure):
    out = tmp_path / "out"
    real_write = os.write

    def broken(fd, data):
        if os.fstat(fd).st_size > 100:      # the first bytes go: a half file is what must not stay
            raise OSError(failure, os.strerror(failure))
        return real_write(fd, data[:64])
    monkeypatch.setattr(safeio.os, "write", broken)
    assert main(["report", str(job), "--format", "md,json,html", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ("disk is full" in err[0] or "read-only" in err[0]) and "no report file" in err[0]
    assert list(out.iterdir()) == []     # no empty, half or temporary files
    db = tmp_path / "db" / "run.duckdb"
    assert main(["report", str(job), "--db", str(db), "--quiet"]) == 2
    assert "cannot write the store" in capsys.readouterr().err and list(db.parent.iterdir()) == []


def test_writes_are_all_or_nothing(tmp_path, monkeypatch):
    real_rename = os.rename
    calls = []

    def rename(*args, **kwargs):
        calls.append(args)
        if len(calls) == 2:
            raise OSError(errno.EIO, "I/O error")
        return real_rename(*args, **kwargs)
    monkeypatch.setattr(safeio.os, "rename", rename)
    with pytest.raises(OSError):
        safeio.write_files({tmp_path / "a.txt": "a", tmp_path / "b.txt": "b"})
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]     # the first was in place; no temporary file left


def _fake_postmortem(tmp_path: Path) -> Path:
    stub = tmp_path / "bin" / "postmortem"
    stub.parent.mkdir()
    stub.write_text('#!/bin/sh\necho report-run "$@"\nexit 1\n')
    stub.chmod(0o755)
    return stub


@pytest.mark.skipif(not shutil.which("flock") or not shutil.which("timeout"), reason="needs flock and timeout")
def test_the_epilog_never_writes_through_links_planted_in_the_job_folder(tmp_path):
    job = tmp_path / "job"
    (job / "postmortem").mkdir(parents=True)
    victims = {name: tmp_path / f"victim-{name}" for name in ("postmortem.log", "exit_code", ".lock")}
    for name, victim in victims.items():
        victim.write_text("precious\n")
        (job / "postmortem" / name).symlink_to(victim)
    os.chmod(job / "postmortem", 0o777)      # the job's user can write it: not ours alone
    env = {"POSTMORTEM_BIN": str(_fake_postmortem(tmp_path)), "POSTMORTEM_FALLBACK_DIR": str(tmp_path / "spool"),
           "SLURM_SCRIPT_CONTEXT": "", "SLURM_JOB_USER": "someone-else"}
    env = {**{k: v for k, v in os.environ.items() if k != "POSTMORTEM_CACHE"}, **env}
    proc = subprocess.run(["bash", str(ROOT / "docs" / "postmortem-epilog.sh"), "42", str(job)], capture_output=True,
                          text=True, env=env)
    assert proc.returncode == 0
    assert all(v.read_text() == "precious\n" for v in victims.values())
    spool = tmp_path / "spool" / "42"
    assert (spool / "exit_code").read_text() == "1\n" and "report-run" in (spool / "postmortem.log").read_text()
    # run as another user than the job's (the controller's SlurmUser): no cache entries, which
    # nobody would open; run as the job's own user (a follow-up job): the cache is kept
    assert "--no-cache" in (spool / "postmortem.log").read_text().split()
    assert not any(p.name.startswith((".postmortem.log.", ".exit_code.")) for p in spool.iterdir())
    # a folder that is ours: written there, atomically
    job2 = tmp_path / "job2"
    job2.mkdir()
    proc = subprocess.run(["bash", str(ROOT / "docs" / "postmortem-epilog.sh"), "43", str(job2)], capture_output=True,
                          text=True, env={**env, "SLURM_JOB_USER": pwd.getpwuid(os.geteuid()).pw_name})
    assert (job2 / "postmortem" / "exit_code").read_text() == "1\n"
    assert "--no-cache" not in (job2 / "postmortem" / "postmortem.log").read_text().split()


# -- 2. inputs stay inside the roots the user named --------------------------------------------------

def _secret(tmp_path: Path) -> Path:
    secret = tmp_path / "secret" / "shadow"
    secret.parent.mkdir()
    secret.write_text(f"[rank2]: {SECRET} RuntimeError: CUDA error: an illegal memory access was encountered\n")
    secret.chmod(0o600)
    return secret


def test_a_link_out_of_the_job_folder_is_skipped_counted_and_never_reported(job, tmp_path, capsys):
    job = _copy(job, tmp_path)
    secret = _secret(tmp_path)
    victim_log = next(p for p in sorted(job.rglob("*.log")) if "stdout" in p.name or p.stat().st_size)
    victim_log.unlink()
    victim_log.symlink_to(secret)
    (job / "more").symlink_to(secret.parent, target_is_directory=True)
    code, text = _all_formats(job, tmp_path / "out")
    err = capsys.readouterr().err
    assert code in (0, 1) and SECRET not in text and SECRET not in err
    assert "skipped 2 link(s) to files or folders outside the input folders" in err
    # asked for: read
    code, text = _all_formats(job, tmp_path / "out2", "--follow-symlinks")
    assert SECRET in text


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to give a file away")
def test_a_hard_link_to_another_users_file_is_skipped(job, tmp_path):
    job = _copy(job, tmp_path)
    secret = _secret(tmp_path)
    os.chown(secret, 65534, 65534)
    os.link(secret, job / "hard.log")
    report = _report_of([job])
    assert "several hard links owned by another user" in " ".join(report["messages"])
    assert SECRET not in json.dumps(report)


def test_an_unreadable_folder_is_named(job, tmp_path, monkeypatch):
    job = _copy(job, tmp_path)
    (job / "locked").mkdir()
    (job / "locked" / "rank9.log").write_bytes(CUDA)
    real = os.scandir

    def scandir(path):
        if str(path).endswith("locked"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path)
    monkeypatch.setattr("postmortem.analyzer.discover.os.scandir", scandir)
    run = analyze([job])
    assert any("locked: cannot read this folder" in m and "Permission denied" in m for m in run.messages)


# -- 3. memory bounded by design ----------------------------------------------------------------------

def test_a_line_past_the_cap_is_cut_kept_up_to_it_and_counted(tmp_path, monkeypatch):
    monkeypatch.setenv("POSTMORTEM_MAX_LINE_BYTES", "4096")
    log = tmp_path / "long.log"
    log.write_bytes(b"start\n" + b"y" * (3 << 20) + b"\n" + CUDA)
    run = analyze([log])
    rows = run.frame("SELECT line_no, \"offset\", length, text FROM lines ORDER BY line_no").rows()
    assert [r[0] for r in rows] == [1, 2, 3] and rows[1][2] == 4096 and len(rows[1][3]) == 4096
    assert rows[2][1] == 6 + (3 << 20) + 1 and rows[2][3] == CUDA.decode().strip()   # offsets stay true
    assert "1 line(s) longer than 4 KiB" in " ".join(run.messages)


def test_a_file_without_newlines_is_scanned_not_held(tmp_path, monkeypatch):
    from postmortem.analyzer.discover import read_capped

    monkeypatch.setenv("POSTMORTEM_MAX_LINE_BYTES", "4096")
    log = tmp_path / "one-line.log"
    with open(log, "wb") as out:
        for _ in range(64):
            out.write(b"x" * (1 << 20))
    tracemalloc.start()
    with open(log, "rb") as handle:
        capped = read_capped(handle)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(capped.data) == 4096 and capped.cuts == [(4096, (64 << 20) - 4096)]
    assert peak < 5 * (4 << 20)          # a few blocks of 4 MiB, not the 64 MiB file
    run = analyze([log])
    assert run.frame("SELECT count(*) AS n, max(length) AS l FROM lines").row(0) == (1, 4096)


def _capped_by_splitting(data: bytes, start: int, end: int | None, cap: int, sep: bytes, skip_nuls: bool):
    """What ``read_capped`` must give, the slow and obvious way: every line cut at the cap."""
    rest = data[start:]
    nuls = len(rest) - len(rest.lstrip(b"\0")) if skip_nuls else 0     # NULs are looked for past the end
    out, cuts = b"", []
    for i, line in enumerate(data[start + nuls:end if end is None or end > start + nuls else start + nuls].split(sep)):
        out += (sep if i else b"") + line[:cap]
        if len(line) > cap:
            cuts.append((len(out), len(line) - cap))
    return out, cuts, start + nuls, nuls


def test_capped_reading_equals_cutting_every_line_at_the_cap(monkeypatch):
    """``read_capped`` checks blocks by jumping between separators and splits only a block with
    a line past the cap: lines exactly at, just under and just over the cap, across small blocks,
    with leading NULs, ``\r`` as the separator and a start and end inside the data."""
    from postmortem.analyzer import discover

    rnd = random.Random(7)
    for trial in range(600):
        monkeypatch.setattr(discover, "BLOCK", rnd.choice([7, 16, 64, 300]))
        cap, sep = rnd.choice([256, 300, 1000]), rnd.choice([b"\n", b"\r"])
        sizes = [rnd.choice([0, 1, 50, 255, 256, 257, 299, 300, 301, 999, 1000, 1001, 2500])
                 for _ in range(rnd.randint(0, 30))]
        data = b"\0" * rnd.choice([0, 0, 3, 5000]) + sep.join(bytes(rnd.choice(b"ab\0") for _ in range(n))
                                                              for n in sizes) + sep * rnd.randint(0, 1)
        start = rnd.choice([0, 0, rnd.randint(0, min(len(data), 50))])
        end = rnd.choice([None, None, max(start, len(data) - rnd.randint(0, 10))])
        skip = rnd.random() < 0.5
        got = discover.read_capped(io.BytesIO(data), start, end, cap, sep, skip)
        assert (got.data, got.cuts, got.start, got.nuls) == _capped_by_splitting(data, start, end, cap, sep, skip), trial


def test_a_large_gz_is_decoded_into_scratch_and_segmented_like_a_plain_log(job, tmp_path, monkeypatch):
    from postmortem.analyzer import ingest

    log = max(job.rglob("*.log"), key=lambda p: p.stat().st_size)
    plain = tmp_path / "plain" / "rank.log"
    plain.parent.mkdir()
    noise = b"".join(b"chatter %08x %s\n" % (i, os.urandom(12).hex().encode()) for i in range(6000))
    body = log.read_bytes() + noise + log.read_bytes()
    plain.write_bytes(body)
    packed = tmp_path / "packed" / "rank.log.gz"
    packed.parent.mkdir()
    packed.write_bytes(gzip.compress(body, compresslevel=1))
    assert packed.stat().st_size >= 64 << 10     # decoded into scratch, not in memory
    monkeypatch.setattr(ingest, "SEGMENT_BYTES", len(body) // 5)
    seen = []
    real = ingest.segments
    monkeypatch.setattr(ingest, "segments", lambda *a, **k: seen.append(real(*a, **k)) or seen[-1])
    a, b = analyze([plain]), analyze([packed])
    assert len(seen[-1]) > 1       # the .gz was cut into segments
    cols = "line_no, \"offset\", length, rank, text"
    assert a.frame(f"SELECT {cols} FROM lines ORDER BY line_no").equals(b.frame(f"SELECT {cols} FROM lines ORDER BY line_no"))
    assert b.frame("SELECT compression FROM inputs")["compression"].to_list() == ["gzip"]


def test_skimming_keeps_every_line_and_its_attribution_and_parses_the_failures(tmp_path, monkeypatch):
    from postmortem.analyzer import budget, ingest

    log = tmp_path / "job" / "rank0.log"
    log.parent.mkdir()
    chatter = b"".join(b"[rank0]: step %d ok, nothing to see here at all\n" % i for i in range(60000))
    middle = b"[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
    log.write_bytes(chatter + middle + chatter)
    monkeypatch.setattr(ingest, "SEGMENT_BYTES", len(chatter) // 6)
    full = analyze([log], use_cache=False)
    monkeypatch.setattr(budget, "full_parse_bytes", lambda: len(chatter) // 2)
    skimmed = analyze([log], use_cache=False)
    assert any("were skimmed" in m for m in skimmed.messages)
    cols = "line_no, \"offset\", length, rank, rank_source, node, attempt, text"
    q = f"SELECT {cols} FROM lines ORDER BY line_no"
    assert full.frame(q).equals(skimmed.frame(q))
    assert skimmed.frame("SELECT lines FROM inputs").item() == 120001
    assert skimmed.frame("SELECT count(*) FROM events WHERE message LIKE '%illegal memory access%'").item() >= 1


def test_a_small_input_growing_while_it_is_read_is_read_whole_or_left_to_the_block_reader(tmp_path, monkeypatch):
    """A small input is read in one call of its size (``ingest._small_plain``); one that grew
    between its size and its read gets the rest too, and one that grew past the limit is left
    to the block-at-a-time reader (None), as before."""
    import types

    from postmortem.analyzer import ingest
    from postmortem.analyzer.discover import discover

    log = tmp_path / "rank0.log"
    log.write_bytes(b"[rank0]: step 1\n" * 10)
    item = discover([log])[0][0]
    real_fstat = os.fstat
    monkeypatch.setattr(ingest.os, "fstat", lambda fd: types.SimpleNamespace(st_size=real_fstat(fd).st_size - 60))
    assert ingest._small_plain(item) == log.read_bytes()
    monkeypatch.setattr(ingest, "SMALL_PLAIN", 100)
    assert ingest._small_plain(item) is None


def test_skimmed_lines_are_shown_in_lines_as_a_full_parse_stores_them(tmp_path, monkeypatch):
    """A log too large to parse whole has its middle skimmed: the skimmed lines are written once
    (``bulk.SKIM_ROWS``) and ``lines`` is a view that shows them beside the lines kept (its own
    rows, ``_lines``, in file order), with the attribution of the kept line before them: the
    same lines, numbers, offsets, ranks and text as the full parse's ``lines``."""
    from postmortem.analyzer import budget, ingest

    log = tmp_path / "job" / "rank0.log"
    log.parent.mkdir()
    chatter = b"".join(b"[rank0]: step %d ok, nothing to see here at all\n" % i for i in range(60000))
    log.write_bytes(chatter + b"[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered\n" + chatter)
    monkeypatch.setattr(ingest, "SEGMENT_BYTES", len(chatter) // 6)
    full = analyze([log], use_cache=False)
    monkeypatch.setattr(budget, "full_parse_bytes", lambda: len(chatter) // 2)
    skimmed = analyze([log], use_cache=False)
    kept, skim = (skimmed.con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in ("_lines", "_skim_rows"))
    assert kept > 1000 and skim > 10000
    q = "SELECT line_no, \"offset\", length, rank, rank_source, node, attempt, text FROM lines ORDER BY input_id, line_no"
    assert full.frame(q).equals(skimmed.frame(q))
    assert skimmed.con.execute("SELECT count(*) FROM (SELECT rowid, row_number() OVER (ORDER BY line_no) - 1 AS place "
                               "FROM _lines) WHERE place <> rowid").fetchall()[0][0] == 0


# -- 4. a bounded pickle reader --------------------------------------------------------------------

ATTACKS = {
    "memo index 2^28": b"\x80\x02Nr" + struct.pack("<I", 1 << 28) + b".",
    "BYTEARRAY8 of 3 GiB": b"\x80\x05\x96" + struct.pack("<Q", 3 << 30) + b".",
    "BINBYTES8 of 2^60": b"\x80\x04\x8e" + struct.pack("<Q", 1 << 60) + b".",
    "shared-reference tuples as version": b"\x80\x02}q\x00X\x07\x00\x00\x00versionq\x01N" + b"2\x86" * 60 + b"s.",
    "a list that contains itself": b"\x80\x02}q\x00X\x07\x00\x00\x00versionq\x01]q\x02h\x02as.",
    "entries=[E]*n, frames=[F]*n": pickle.dumps({"version": "2.4", "entries": [
        {"record_id": 1, "frames": [{"name": "f" * 60, "filename": "g" * 90, "line": 3}] * 200}] * 20000}, protocol=4),
    "deep nesting": b"\x80\x02}X\x07\x00\x00\x00version" + b"]" * 5000 + b"a" * 4999 + b"s.",
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_hostile_pickles_are_refused_within_the_memory_bound(name):
    data = ATTACKS[name]
    tracemalloc.start()
    with pytest.raises(flight_recorder.NotFlightRecorder):
        flight_recorder.parse_dump(data, "nccl_trace_rank_0")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 16 << 20, peak     # the attacks took 3.2 to 8+ GB before


_OPS = st.sampled_from([b"(", b"}", b"]", b")", b"N", b"\x88", b"K\x05", b"J\xff\xff\xff\x7f", b"\x8c\x03abc",
                        b"X\xff\xff\xff\x7f", b"\x8e" + b"\xff" * 8, b"\x96" + b"\x00\x00\x00\xc0" + b"\x00" * 4,
                        b"q\x00", b"r\xff\xff\xff\x0f", b"h\x00", b"j\x10\x00\x00\x00", b"\x94", b"2", b"\x85",
                        b"\x86", b"\x87", b"t", b"l", b"d", b"a", b"e", b"s", b"u", b"0", b"1", b"\x8a\xff",
                        b"\x8b\xff\xff\xff\x7f", b"\x95\xff\xff\xff\xff\xff\xff\xff\x7f", b"G" + b"\x00" * 8,
                        b"c os\nsystem\n", b"\x93", b"R", b"b", b"\x81", b"."])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([b"\x80\x02", b"\x80\x04", b"\x80\x05"]), st.lists(_OPS, max_size=80))
def test_any_opcode_stream_stays_under_the_bound_and_runs_nothing(proto, ops):
    data = proto + b"".join(ops)
    tracemalloc.start()
    try:
        flight_recorder.parse_dump(data, "nccl_trace_rank_0")
    except flight_recorder.NotFlightRecorder:
        pass
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < flight_recorder.MAX_EXPANSION * 8 * len(data) + (8 << 20)


def test_a_pickle_without_a_dumps_name_or_shape_is_not_read_as_one(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "model.bin").write_bytes(pickle.dumps([1, 2, 3], protocol=4))
    (run_dir / "rank0.log").write_bytes(CUDA)
    run = analyze([run_dir])
    assert "model.bin: binary file, not a text log; skipped" in run.messages


def test_no_unpickler_anywhere():
    import re

    GENERATOR = ROOT / "postmortem" / "generator"
    code = re.compile(r"^\s*(?:import|from) (?:pickle|_pickle|cPickle)\b|\bpickle\.(?:loads?|_?Unpickler)\s*\(", re.M)
    for folder in ("analyzer", "parsers", "rules", "tui", "views", "postmortem"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            if GENERATOR in path.parents:   # writes Flight Recorder pickles for the tests, never reads one
                assert not re.search(r"\bpickle\.(?:loads?|_?Unpickler)\b", text), path
                continue
            assert not code.search(text), path


# -- 5. one exit path --------------------------------------------------------------------------------

def _slow_archive(path: Path) -> None:
    line = (b"[rank0]:[I0724 08:00:38.890594247 ProcessGroupNCCL.cpp:2401] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
            b"NCCL Work update periodically: last enqueued NCCL work: 3, last completed NCCL work: 3.\n")
    with tarfile.open(path, "w") as tar:
        for i in range(3):
            data = line * 300_000
            info = tarfile.TarInfo(f"logs/rank{i}.log")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize("workers", ["2", ""], ids=["processes", "threads"])
@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_workers_removes_scratch_and_exits_with_its_code(tmp_path, sig, code, workers):
    archive = tmp_path / "job.tar"
    _slow_archive(archive)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "postmortem.cli", "report", str(archive), "--quiet", "--no-cache"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(scratch), "POSTMORTEM_WORKERS": workers})
    for _ in range(600):       # until the archive's members are being copied (or the parse started)
        if any(p.name.startswith("postmortem-archives-") for p in scratch.iterdir()):
            break
        time.sleep(0.05)
    time.sleep(1.0)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert "temporary files removed" in err and "Traceback" not in err
    assert list(scratch.iterdir()) == []


def test_scratch_is_capped_per_run_not_per_archive(tmp_path, monkeypatch):
    monkeypatch.setenv("POSTMORTEM_ARCHIVE_MAX_BYTES", str(3 << 20))
    for name in ("a.tar", "b.tar"):
        with tarfile.open(tmp_path / name, "w") as tar:
            data = CUDA * ((2 << 20) // len(CUDA))
            info = tarfile.TarInfo(f"{name}.log")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    run = analyze([tmp_path / "a.tar", tmp_path / "b.tar"])
    assert any("b.tar: member b.tar.log takes the extracted total past 3 MiB" in m for m in run.messages)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("POSTMORTEM_CACHE", "on")
    monkeypatch.setenv("POSTMORTEM_CACHE_DIR", str(folder))
    return folder


def test_a_damaged_cache_entry_of_any_table_is_a_miss(job, cache_dir):
    first = _report_of([job])
    (entry,) = cache.entries(cache_dir)
    if entry.is_dir():  # an in-memory store's entry: a Parquet file a table, the largest damaged
        entry = max(entry.glob("*.parquet"), key=lambda path: path.stat().st_size)
    data = bytearray(entry.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 4096] = bytes(4096)     # the middle of the file: some table's blocks
    entry.write_bytes(bytes(data))
    for report in cache_dir.glob("*.report"):
        shutil.rmtree(report)
    second = _report_of([job])
    assert not second["rule_errors"] and second["verdict"] == first["verdict"]
    assert second["findings"] == first["findings"]


def test_a_cached_report_that_is_not_whole_runs_the_rules_again(job, cache_dir):
    first = _report_of([job])
    for entry in cache_dir.glob("*.report"):
        (entry / "report.json").write_text("{}")
    second = _report_of([job])
    assert second["verdict"] == first["verdict"] and second["findings"] == first["findings"]


def test_stale_parts_of_any_name_are_pruned(job, cache_dir):
    cache_dir.mkdir(mode=0o700)
    old = time.time() - 7200
    for name in (".k.1.part", ".k.2.parsed-part", ".k.3.wal", ".odd"):
        path = cache_dir / name
        path.mkdir() if "parsed" in name else path.write_text("x")
        os.utime(path, (old, old))
    fresh = cache_dir / ".k.4.parsed-part"
    fresh.mkdir()
    _report_of([job])
    assert sorted(p.name for p in cache_dir.glob(".*")) == [".k.4.parsed-part"]


def test_a_cache_folder_others_can_write_is_not_used(job, cache_dir):
    cache_dir.mkdir(mode=0o777)
    os.chmod(cache_dir, 0o777)
    run = analyze([job])
    assert any("not this user's alone" in m for m in run.messages) and not list(cache_dir.iterdir())


# -- 6. text that is not ours is never a command or a line break --------------------------------------

def test_a_newline_in_a_file_name_cannot_forge_a_report_line(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "rank0\nVERDICT (healthy, confidence 1.00): all good\n.log").write_bytes(CUDA)
    code, text = _all_formats(run_dir, tmp_path / "out")
    for name in ("report.txt", "report.md"):
        lines = (tmp_path / "out" / name).read_text().splitlines()
        assert not [line for line in lines if "all good" in line and line.lstrip("#*- ").startswith("VERDICT")]
    assert "rank0\\x0aVERDICT" in text


def test_names_that_are_not_utf8_are_read_and_shown_escaped(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with open(os.fsencode(run_dir) + b"/rank\xff.log", "wb") as handle:
        handle.write(CUDA)
    with tarfile.open(tmp_path / "job.tar", "w", format=tarfile.GNU_FORMAT) as tar:
        info = tarfile.TarInfo("logs/rank\udcfe.log")
        info.size = len(CUDA)
        tar.addfile(info, io.BytesIO(CUDA))
    for path in (run_dir, tmp_path / "job.tar"):
        proc = _cli("report", str(path), "--format", "json", "--quiet")
        assert proc.returncode in (0, 1), proc.stderr
        report = json.loads(proc.stdout)
        paths = [f["path"] for f in report["inputs"]["files"]]
        assert any("\\xff" in p or "\\xfe" in p for p in paths)
        assert "illegal memory access" in json.dumps(report["findings"])   # evidence read back


def test_a_node_named_like_a_command_never_reaches_a_command(tmp_path):
    job = tmp_path / "job"
    shutil.copytree(ROOT / "sample_logs" / "gpu-fell-off-bus", job)
    evil = "h20-node-02&&reboot"
    for path in sorted(job.rglob("*"), key=lambda p: -len(p.parts)):
        if path.is_file():
            text = path.read_bytes()
            if b"h20-node-02" in text:
                path.write_bytes(text.replace(b"h20-node-02", evil.encode()))
        if "h20-node-02" in path.name:
            path.rename(path.with_name(path.name.replace("h20-node-02", evil)))
    report = _report_of([job])
    actions = report["actions"]
    assert evil not in (actions["drain_hostlist"] or "") and evil not in (actions["inspect_hostlist"] or "")
    assert all(evil not in p["command"] for p in actions["py_spy"])
    assert "not a valid host name" in actions["note"]
    commands = [c for f in report["findings"] for c in (f.get("suggestion") or "").split("`")[1::2]]
    assert commands and not any("&&" in c for c in commands)
    g001 = next(f for f in report["findings"] if f["code"] == "G001")
    assert "NodeName=NODE" in g001["suggestion"]


def test_commands_quote_what_they_carry():
    from postmortem.analyzer import commands

    assert commands.sh("scontrol", "update", "NodeName=a", "Reason=Xid 79 GPU 1") == \
        "scontrol update NodeName=a 'Reason=Xid 79 GPU 1'"
    assert commands.host("h20-node-02") and not commands.host("h20-node-02&&reboot")
    assert not commands.host("a;b") and not commands.host("$(reboot)") and commands.host("10.0.0.1")
    assert commands.bus_id("0000:ab:00.0") and not commands.bus_id("0000:ab:00.0;id")


# -- 7. read-only SQL that cannot reach the file system ----------------------------------------------

FILE_SQL = {
    "COPY TO": "COPY (SELECT 1) TO '{target}'",
    "EXPORT DATABASE": "EXPORT DATABASE '{target}'",
    "read_text": "SELECT * FROM read_text('{secret}')",
    "glob": "SELECT * FROM glob('{folder}/*')",
    "ATTACH": "ATTACH '{target}' AS other",
    "INSTALL": "INSTALL httpfs",
    "LOAD": "LOAD httpfs",
    "read_csv": "SELECT * FROM read_csv('{secret}')",
    "SET back on": "SET enable_external_access = true",
}


@pytest.fixture(scope="module")
def store(job, tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("sql") / "run.duckdb"
    assert main(["ingest", str(job), "--db", str(db), "--quiet"]) == 0
    return db


@pytest.mark.parametrize("name", sorted(FILE_SQL))
def test_query_cannot_reach_the_file_system(store, tmp_path, name):
    secret = _secret(tmp_path)
    target = tmp_path / "written"
    sql = FILE_SQL[name].format(target=target, secret=secret, folder=secret.parent)
    proc = _cli("query", "--db", str(store), sql)
    assert proc.returncode == 2 and "query failed" in proc.stderr, (proc.stdout, proc.stderr)
    assert not target.exists() and SECRET not in proc.stdout


def test_allow_file_access_is_explicit(store, tmp_path):
    target = tmp_path / "out.csv"
    assert _cli("query", "--db", str(store), f"COPY (SELECT 1 AS x) TO '{target}'", "--allow-file-access").returncode == 0
    assert target.read_text().strip().splitlines() == ["x", "1"]


def test_the_tui_sql_screen_cannot_reach_the_file_system(store, tmp_path):
    from postmortem.tui.screens.sql import run_query
    from postmortem.tui.session import open_store

    secret = _secret(tmp_path)
    session = open_store(store)
    for sql in (f"SELECT * FROM read_text('{secret}')", f"SELECT * FROM glob('{secret.parent}/*')",
                f"SELECT * FROM read_csv('{secret}')"):
        result = run_query(session.cursor(), sql)
        assert result.error and SECRET not in str(result.rows)
    assert run_query(session.cursor(), "SELECT count(*) FROM inputs").rows[0][0] > 0


# -- 8. every reported crash -------------------------------------------------------------------------

def test_feb_29_in_a_year_without_one(tmp_path):
    log = tmp_path / "rank0.log"
    log.write_text("[rank19]:[E0229 09:52:59.442244568 ProcessGroupNCCL.cpp:758] [Rank 19] Watchdog caught collective "
                   "operation timeout: WorkNCCL(SeqNum=7219, OpType=_ALLGATHER_BASE, NumelIn=8069120, "
                   "NumelOut=258211840, Timeout(ms)=1800000) ran for 1800148 milliseconds before timing out.\n")
    stamp = time.mktime((2025, 6, 1, 0, 0, 0, 0, 0, -1))
    os.utime(log, (stamp, stamp))
    run = analyze([log])
    assert run.info["year"] == 2024 and "02-29" in run.info["time_source"]
    build_report(run)


def test_placeholder_years_are_replaced_and_a_lost_feb_29_has_no_time():
    """``timeline.fix_years`` over several tables at once: glog's placeholder year (2000) becomes
    the run's, in ``ts`` and ``time``; a placeholder 02-29 in a year without one loses its time;
    a real date is never moved (2024-02-29 stays in a run of 2023); other tables are the same."""
    from datetime import datetime

    import polars as pl

    from postmortem.analyzer import timeline

    stamps = [datetime(2000, 3, 1, 9), datetime(2000, 2, 29, 9), datetime(2024, 2, 29, 9), None]
    tables = {"events": pl.DataFrame({"ts": stamps, "line_no": [1, 2, 3, 4]}),
              "exits": pl.DataFrame({"time": stamps[:2]}),
              "settings": pl.DataFrame({"key": ["a"]})}
    for year, feb29 in ((2023, None), (2024, datetime(2024, 2, 29, 9))):
        fixed = timeline.fix_years(tables, year)
        assert fixed["events"]["ts"].to_list() == [datetime(year, 3, 1, 9), feb29, datetime(2024, 2, 29, 9), None]
        assert fixed["exits"]["time"].to_list() == [datetime(year, 3, 1, 9), feb29]
        assert fixed["settings"].equals(tables["settings"]) and list(fixed) == list(tables)


def test_cr_only_log_is_read_as_lines_and_not_healthy(tmp_path):
    log = tmp_path / "mac.log"
    log.write_bytes(b"step 1 ok\rstep 2 ok\rTraceback (most recent call last):\r  File \"train.py\", line 9, in "
                    b"<module>\r" + CUDA.replace(b"\n", b"\r"))
    proc = _cli("report", str(log), "--format", "json", "--quiet")
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and report["outcome"]["outcome"] == "failed"
    assert report["inputs"]["files"][0]["lines"] == 5


def test_leading_nuls_are_skipped_and_the_log_read(tmp_path):
    log = tmp_path / "rotated.log"
    log.write_bytes(b"\0" * (1 << 20) + CUDA)
    report = _report_of([log])
    assert report["outcome"]["outcome"] == "failed" and report["inputs"]["files"][0]["kind"] == "log"
    assert "NUL bytes" in report["inputs"]["files"][0]["problem"]


def test_utf16_with_a_bom_is_decoded_not_skipped(tmp_path):
    log = tmp_path / "windows.log"
    log.write_bytes(("Traceback (most recent call last):\n" + CUDA.decode()).encode("utf-16"))
    report = _report_of([log])
    assert report["outcome"]["outcome"] == "failed" and report["inputs"]["files"][0]["kind"] == "log"
    assert "illegal memory access" in json.dumps(report["findings"])      # evidence read back decoded


def test_the_tui_opens_a_run_with_worker_processes(job, monkeypatch):
    from tests.tui_helpers import drive
    from postmortem.tui.app import PostmortemApp

    monkeypatch.setenv("POSTMORTEM_WORKERS", "2")
    app = PostmortemApp(paths=[str(ROOT / "sample_logs" / "silent-deadlock-40r")])

    async def steps(pilot):
        for _ in range(2400):
            await pilot.pause(0.05)
            if app.failure or (app.session is not None and app.current_mode == "verdict"):
                break
        return app.failure
    assert drive(app, steps) is None and app.session.report["verdict"]["status"] == "culprit"
