"""Archives as inputs (postmortem.analyzer.archives) and progress on stderr (postmortem.analyzer.ingest.Progress).

A small hand-written run (tests/scenario.py) packed as .tar.gz and .zip must give the same
report as the folder; hostile and damaged archives give a message naming the archive (and the
member), write nothing outside the private temporary directory, and leave the other inputs
analysed."""

from __future__ import annotations

import io
import os
import re
import stat
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import pytest

from postmortem.analyzer import archives
from postmortem.analyzer.pipeline import NothingReadable, analyze
from postmortem.rules.report import build_report
from tests.scenario import write_scenario

GOOD = ("[rank0]:[E0724 09:12:00.1 ProcessGroupNCCL.cpp:1] [PG ID 0 PG GUID 0(default_pg) Rank 0] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=10, OpType=ALLREDUCE, NumelIn=5, NumelOut=5, "
        "Timeout(ms)=600000) ran for 600010 milliseconds before timing out.\n").encode()


def _cli(*args, env_extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSTMORTEM_")}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "postmortem.cli", *args], capture_output=True, text=True, env=env)


def _tree(root: Path) -> dict:
    """Every file under root with its bytes and mtime (to prove nothing was written or changed)."""
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def _add(tar: tarfile.TarFile, name: str, data: bytes = b"", **fields) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 1_753_340_000
    for key, value in fields.items():
        setattr(info, key, value)
    tar.addfile(info, io.BytesIO(data) if data else None)


def _summary(report: dict) -> dict:
    """What must not change when the same run is packed: verdict, findings with evidence, inputs
    (paths compared inside the archive)."""
    inner = re.compile(r"^[^!]*!/(run/)?")

    def path(p):
        return inner.sub("", p)
    return {
        "verdict": report["verdict"]["sentence"],
        "findings": [(f["code"], f["severity"], f["ranks"], f["nodes"],
                      [(path(e["path"]), e["line"], e["text"]) for e in f["evidence"]]) for f in report["findings"]],
        "inputs": [(path(i["path"]), i["kind"], i["lines"], i["parsed_lines"]) for i in report["inputs"]["files"]],
        "messages": report["messages"],
    }


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    root = tmp_path_factory.mktemp("packed")
    run = write_scenario(root / "run", culprit=2)
    with tarfile.open(root / "run.tar.gz", "w:gz") as tar:
        tar.add(run, arcname="run")
    with zipfile.ZipFile(root / "run.zip", "w", zipfile.ZIP_DEFLATED) as z:
        for p in sorted(run.rglob("*")):
            z.write(p, p.relative_to(root).as_posix())
    return root


@pytest.fixture(scope="module")
def folder_report(packed):
    return build_report(analyze([packed / "run"]))


@pytest.mark.parametrize("name", ["run.tar.gz", "run.zip"])
def test_a_packed_job_folder_gives_the_same_report_as_the_folder(packed, folder_report, name, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the scratch directory goes here
    before = _tree(packed)
    run = analyze([packed / name])
    assert list(tmp_path.iterdir()) == []  # the scratch directory is gone once the inputs are parsed
    report = build_report(run)  # rules read evidence back from the archive itself
    assert _summary(report) == _summary(folder_report)
    assert report["verdict"]["culprit"]["ranks"] == [2]
    evidence = report["findings"][0]["evidence"][0]
    assert evidence["path"] == f"{name}!/run/node-02/rank2.log"
    assert "Received a dump signal" in evidence["text"]
    abs_paths = run.frame("SELECT abs_path FROM inputs")["abs_path"].to_list()
    assert all(p.startswith(f"{packed / name}!/run/") for p in abs_paths)
    assert _tree(packed) == before  # inputs are never written


@pytest.mark.parametrize("suffix", [".tar", ".tgz", ".tar.bz2", ".tar.xz", ".tar.zst"])
def test_every_tar_compression_is_read(tmp_path, suffix):
    data = {"logs/rank0.log": GOOD, "logs/rank1.log.gz": __import__("gzip").compress(GOOD * 2)}
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, content in data.items():
            _add(tar, name, content)
    payload = raw.getvalue()
    if suffix in (".tgz",):
        payload = __import__("gzip").compress(payload)
    elif suffix == ".tar.bz2":
        payload = __import__("bz2").compress(payload)
    elif suffix == ".tar.xz":
        payload = __import__("lzma").compress(payload)
    elif suffix == ".tar.zst":
        import zstandard
        payload = zstandard.ZstdCompressor().compress(payload)
    path = tmp_path / f"job{suffix}"
    path.write_bytes(payload)
    with archives.Scratch() as scratch:
        items, messages = archives.expand(path, path.name, scratch)
        assert messages == []
        assert [i.display for i in items] == [f"job{suffix}!/logs/rank0.log", f"job{suffix}!/logs/rank1.log.gz"]
        assert [i.compression for i in items] == [None, "gzip"]
        assert all(scratch.path in i.path.parents for i in items)
    assert not scratch.path
    # evidence read back from the archive, a compressed member decompressed
    assert archives.read_member(f"{path}!/logs/rank1.log.gz") == GOOD * 2


def test_an_archive_inside_a_job_folder_sits_beside_the_loose_files(tmp_path):
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "loose.log").write_bytes(GOOD)
    with tarfile.open(tmp_path / "job" / "node-logs.tar.gz", "w:gz") as tar:
        _add(tar, "./node-01/rank0.log", GOOD)
    run = analyze([tmp_path / "job"])
    paths = run.frame("SELECT path, parsed_lines FROM inputs ORDER BY input_id").rows()
    assert paths == [("loose.log", 1), ("node-logs.tar.gz!/node-01/rank0.log", 1)]


# -- hostile and damaged archives ------------------------------------------------------------------

@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    job = root / "job"
    job.mkdir()
    (job / "good.log").write_bytes(GOOD)  # a loose input that must still be analysed
    outside = root / "outside"
    with tarfile.open(job / "evil.tar.gz", "w:gz") as tar:
        _add(tar, "inner.log", GOOD)
        _add(tar, "../escaped.log", GOOD)
        _add(tar, "../../escaped2.log", GOOD)
        _add(tar, str(outside / "absolute.log"), GOOD)
        _add(tar, "passwd", type=tarfile.SYMTYPE, linkname="/etc/passwd")
        _add(tar, "hard", type=tarfile.LNKTYPE, linkname="../../etc/passwd")
        _add(tar, "null", type=tarfile.CHRTYPE, devmajor=1, devminor=3)
        _add(tar, "pipe", type=tarfile.FIFOTYPE)
    with zipfile.ZipFile(job / "evil.zip", "w") as z:
        z.writestr("zinner.log", GOOD)
        z.writestr("../zescaped.log", GOOD)
        z.writestr("..\\zescaped-win.log", GOOD)
        z.writestr(str(outside / "zabsolute.log"), GOOD)
        link = zipfile.ZipInfo("zpasswd")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        z.writestr(link, "/etc/passwd")
    # a truncated .tar.gz: the member before the damage is read, the torn one keeps what was readable
    with tarfile.open(job / "torn.tar.gz", "w:gz") as tar:
        _add(tar, "a-first.log", GOOD)
        _add(tar, "b-torn.log", GOOD * 4000)
        _add(tar, "c-lost.log", GOOD)
    whole = (job / "torn.tar.gz").read_bytes()
    (job / "torn.tar.gz").write_bytes(whole[: len(whole) // 2])
    # a zip whose member has a bad CRC (one byte of stored data changed)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("crc.log", GOOD * 3)
    data = bytearray(buf.getvalue())
    data[data.index(b"Watchdog caught")] = ord("w")
    (job / "badcrc.zip").write_bytes(bytes(data))
    (job / "not-a.zip").write_bytes(b"this is not a zip archive\n" * 10)
    return root


def test_hostile_archives_are_named_and_nothing_escapes(hostile, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = _tree(hostile)
    run = analyze([hostile / "job"])
    text = "\n".join(run.messages)
    assert "evil.tar.gz: skipped 3 member(s) whose path leaves the archive" in text
    assert "../escaped.log" in text and str(hostile / "outside" / "absolute.log") in text
    assert "evil.tar.gz: skipped 2 link(s) (links are never followed): passwd -> /etc/passwd, hard -> " in text
    assert "evil.tar.gz: skipped 2 device file(s) or FIFO(s): null, pipe" in text
    assert "evil.zip: skipped 3 member(s) whose path leaves the archive" in text
    assert "evil.zip: skipped 1 link(s) (links are never followed): zpasswd -> /etc/passwd" in text
    assert "torn.tar.gz: truncated or corrupt archive: reading stopped in member b-torn.log" in text
    assert "badcrc.zip!/crc.log: bad CRC-32" in text
    assert "not-a.zip: not a readable zip archive" in text
    inputs = {r["path"]: r for r in run.frame("SELECT * FROM inputs").to_dicts()}
    assert set(inputs) == {"good.log", "evil.tar.gz!/inner.log", "evil.zip!/zinner.log", "torn.tar.gz!/a-first.log",
                           "torn.tar.gz!/b-torn.log", "badcrc.zip!/crc.log"}
    assert all(inputs[p]["parsed_lines"] == 1 for p in ("good.log", "evil.tar.gz!/inner.log", "evil.zip!/zinner.log",
                                                         "torn.tar.gz!/a-first.log"))
    torn = inputs["torn.tar.gz!/b-torn.log"]
    assert torn["parsed_lines"] > 0 and "kept the" in torn["problem"]
    assert inputs["badcrc.zip!/crc.log"]["lines"] == 3
    # evidence is read back from the archive with the same bytes the analysis saw
    for path in ("torn.tar.gz!/b-torn.log", "badcrc.zip!/crc.log", "evil.zip!/zinner.log"):
        assert len(archives.read_member(inputs[path]["abs_path"])) == inputs[path]["bytes"]
    # nothing was written outside the scratch directory, which is gone; the inputs are untouched
    assert _tree(hostile) == before
    assert not (hostile / "outside").exists() and not (hostile / "escaped.log").exists()
    assert not Path("/etc/escaped.log").exists()
    assert list(tmp_path.iterdir()) == []


def test_caps_stop_a_bomb_and_name_the_member(tmp_path, monkeypatch):
    monkeypatch.setenv("POSTMORTEM_ARCHIVE_MAX_BYTES", str(1 << 20))
    monkeypatch.setenv("POSTMORTEM_ARCHIVE_MAX_MEMBERS", "5")
    with zipfile.ZipFile(tmp_path / "bomb.zip", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("a.log", GOOD)
        z.writestr("zeros.log", b"\0" * (2 << 20))  # 2 MiB of zeros: a few KiB packed
        z.writestr("z.log", GOOD)
    with tarfile.open(tmp_path / "many.tar.gz", "w:gz") as tar:
        for i in range(8):
            _add(tar, f"m/{i:03d}.log", GOOD)
    run = analyze([tmp_path])
    text = "\n".join(run.messages)
    assert "bomb.zip: member zeros.log takes the extracted total past 1 MiB" in text
    assert "many.tar.gz: more than 5 members" in text and "stopped at member m/005.log" in text
    paths = run.frame("SELECT path FROM inputs")["path"].to_list()
    assert "bomb.zip!/a.log" in paths and "bomb.zip!/zeros.log" not in paths and "bomb.zip!/z.log" not in paths
    assert sum(p.startswith("many.tar.gz!/") for p in paths) == 5


def test_exit_codes_with_hostile_archives(hostile, tmp_path, capsys):
    # hostile and damaged archives beside a real run (whose H001 error makes the exit code 1)
    job = tmp_path / "job"
    write_scenario(job, culprit=2)
    for name in ("evil.tar.gz", "torn.tar.gz", "not-a.zip"):
        (job / name).write_bytes((hostile / "job" / name).read_bytes())
    (tmp_path / "scratch").mkdir()
    proc = _cli("report", str(job), "--format", "json", env_extra={"TMPDIR": str(tmp_path / "scratch")})
    assert proc.returncode == 1, proc.stderr  # the run's H001 error: hostile archives do not change it
    assert "postmortem: evil.tar.gz: skipped 2 link(s)" in proc.stderr
    assert "postmortem: not-a.zip: not a readable zip archive" in proc.stderr
    assert "parsed " not in proc.stderr  # stderr is not a terminal: no progress
    assert list((tmp_path / "scratch").iterdir()) == []
    # an archive with nothing readable in it, alone: exit 2 and the archive named
    only = tmp_path / "only"
    only.mkdir()
    with tarfile.open(only / "links.tar", "w") as tar:
        _add(tar, "passwd", type=tarfile.SYMTYPE, linkname="/etc/passwd")
    from postmortem.cli import main

    assert main(["report", str(only / "links.tar")]) == 2
    assert "links.tar: skipped 1 link(s)" in capsys.readouterr().err
    with pytest.raises(NothingReadable, match="not-a.zip: not a readable zip archive"):
        analyze([hostile / "job" / "not-a.zip"])


# -- progress --------------------------------------------------------------------------------------

def test_progress_is_forced_by_the_environment_and_silenced_by_quiet(packed, capsys, monkeypatch):
    from postmortem.cli import main

    monkeypatch.setenv("POSTMORTEM_PROGRESS", "1")  # stderr is not a terminal here: forced on
    assert main(["report", str(packed / "run.tar.gz"), "--format", "json"]) == 1
    forced = capsys.readouterr()
    assert re.search(r"postmortem: parsed 4/4 files, [\d.]+/[\d.]+ MB, [\d.]+ MB/s\s*\n", forced.err), forced.err
    # then the later phases on one redrawn line, cleared at the end
    assert "postmortem: identifying ranks" in forced.err and "postmortem: running the rules" in forced.err
    assert forced.err.endswith("\r")
    assert main(["report", str(packed / "run.tar.gz"), "--format", "json", "--quiet"]) == 1
    quiet = capsys.readouterr()
    assert quiet.err == ""
    assert quiet.out == forced.out.replace(_timings(forced.out), _timings(quiet.out))  # progress never on stdout


def _timings(report_json: str) -> str:
    return re.search(r'"timings": \{[^}]*\}', report_json).group(0)


def test_progress_line_counts(monkeypatch):
    from postmortem.analyzer.ingest import Progress, progress_wanted

    out = io.StringIO()
    meter = Progress(True, stream=out, every=0)
    meter.start(3, 3_000_000)
    for _ in range(3):
        meter.advance(1_000_000)
    meter.finish()
    lines = out.getvalue().split("\r")
    assert lines[-1].startswith("postmortem: parsed 3/3 files, 3.0/3.0 MB, ") and lines[-1].endswith("MB/s\n")
    assert [line.split(",")[0] for line in lines[1:]] == [f"postmortem: parsed {i}/3 files" for i in (1, 2, 3)]
    silent = io.StringIO()
    meter = Progress(False, stream=silent, every=0)
    meter.start(1, 1)
    meter.advance(1)
    meter.finish()
    assert silent.getvalue() == ""
    monkeypatch.setenv("POSTMORTEM_PROGRESS", "1")
    assert progress_wanted() and not progress_wanted(quiet=True)
    monkeypatch.setenv("POSTMORTEM_PROGRESS", "0")
    assert not progress_wanted(stream=_Tty())
    monkeypatch.delenv("POSTMORTEM_PROGRESS")
    assert progress_wanted(stream=_Tty()) and not progress_wanted(stream=io.StringIO())


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_report_folder_inside_the_job_folder_is_not_read_back(tmp_path):
    from postmortem.analyzer.discover import discover

    (tmp_path / "rank0.log").write_bytes(GOOD)
    (tmp_path / "postmortem").mkdir()
    (tmp_path / "postmortem" / "report.txt").write_text("an earlier report\n")
    items, _ = discover([tmp_path], exclude={tmp_path / "postmortem"})
    assert [i.display for i in items] == ["rank0.log"]
    # --out naming the job folder itself (or a folder above it) excludes nothing
    items, _ = discover([tmp_path / "postmortem"], exclude={tmp_path})
    assert [i.display for i in items] == ["report.txt"]
