"""Issue 12: broken and hostile files mixed into a good run. Each gives one clear message naming
the file and the reason, the good run is still analysed (its H001 verdict comes out), the report
(JSON, text, Markdown) lists what was skipped and why, nothing in a pickle runs, and the exit
code is 2 only when nothing at all is readable.

One folder holds every case beside a small hand-written run (tests/scenario.py) and is analysed
once; the cases are then checked one by one against that run."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
import pickle
import re
import sqlite3
import tarfile
import time
import zipfile
from pathlib import Path

import pytest
import zstandard

from postmortem.cli import main
from postmortem.analyzer.pipeline import analyze
from postmortem.rules.report import build_report
from tests.scenario import write_scenario

ROOT = Path(__file__).resolve().parents[1]
# Content of the compressed inputs: lines no rule cares about, so the verdict stays the good run's.
FILLER = b"".join(b"INFO:root:step %d loss 2.%03d\n" % (i, i % 997) for i in range(4000))
FILLER_LINES = FILLER.count(b"\n")
# zstd and bz2 decompress whole blocks (128 KB; 100 KB for bz2 -1): torn inputs need a few of them
LONG = b"".join(b"INFO:root:step %d loss 2.%06d\n" % (i, i * 7919 % 999983) for i in range(16000))


def _torn(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(data)


class _Touch:
    """A pickle payload: unpickling it opens (creates) the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


class _System:
    """A pickle payload: unpickling it runs a shell command that creates the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _fr_shaped(payload) -> dict:
    """A Flight Recorder-shaped dump with the payload inside an entry (the reader must not run it)."""
    return {"version": "2.4", "pg_config": {}, "entries": [{"record_id": 0, "frames": [payload]}]}


def _tar(entries: list[tuple[str, bytes, dict]], mode: str = "w:gz") -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode=mode) as tar:
        for name, data, fields in entries:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 1_753_340_000
            for key, value in fields.items():
                setattr(info, key, value)
            tar.addfile(info, io.BytesIO(data) if data else None)
    return raw.getvalue()


def _nsys_export(path: Path) -> Path:
    from postmortem.generator.rungen.nsys import write_nsys_export

    return write_nsys_export(path, 0, world=2, steps=2)


# name in the folder -> (kind expected in inputs, substring of the message naming the reason)
SKIPPED = {
    "empty.log": "empty file",
    "core.bin": "binary file, not a text log",
    "nothing.log.gz": "truncated gzip file: the stream ends before anything could be decompressed",
    "nothing.log.zst": "truncated zstd file: the stream ends before anything could be decompressed",
    "garbage.log.gz": "corrupt gzip data",
    "garbage.log.bz2": "corrupt bz2 data",
    "garbage.log.xz": "corrupt xz data",
    "garbage.log.zst": "corrupt zstd data",
    "bomb.log.gz": "decompresses to more than 1 MiB",
    "corrupt.sqlite": "corrupt or truncated SQLite database",
    "nsys/rank_0.sqlite-journal": "SQLite journal file of rank_0.sqlite",
    "profile.pt.trace.json": "not valid JSON",
    "fr_list_rank_3.pkl": "Python pickle holding a list without Flight Recorder keys",
    "fr_torn_rank_4.pkl": "Python pickle that is truncated or corrupt",
    "fr_open_rank_5.pkl": "refused to load the global io.open",
    "fr_system_rank_6.pkl": "refused to load the global posix.system" if os.name == "posix" else "refused",
    "fr_reduce2_rank_7.pkl": "refused to load the global",
}
# read, with what could be read kept and a problem saying what was lost
DAMAGED = {
    "torn.log.gz": "truncated gzip file: the stream ends early; kept the",
    "torn.log.bz2": "truncated bz2 file: the stream ends early; kept the",
    "torn.log.xz": "truncated xz file: the stream ends early; kept the",
    "torn.log.zst": "truncated zstd file: the stream ends early; kept the",
    "trailing.log.gz": "bytes after the last gzip stream are not gzip data; ignored",
}
# several members / streams / frames in one file (cat a.gz b.gz, bgzip, pbzip2, pzstd): every line read
MULTI = ["multi.log.gz", "multi.log.bz2", "multi.log.xz", "multi.log.zst"]
# archive messages (the archives' own members are covered in tests/test_archives.py)
ARCHIVE = {
    "evil.tar.gz": ["evil.tar.gz: skipped 2 member(s) whose path leaves the archive (absolute or with ..): "
                    "../escaped.log, /tmp/pm-absolute.log",
                    "evil.tar.gz: skipped 2 link(s) (links are never followed): passwd -> /etc/passwd, "
                    "hard -> ../../etc/shadow"],
    "bomb.zip": ["bomb.zip: member zeros.log takes the extracted total past 1 MiB (the cap of the run's temporary "
                 "copies, POSTMORTEM_ARCHIVE_MAX_BYTES: a compression bomb?)"],
    "many.tar.gz": ["many.tar.gz: more than 50 members (the per-archive cap, POSTMORTEM_ARCHIVE_MAX_MEMBERS); "
                    "stopped at member m/0050.log"],
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("broken")
    job = write_scenario(root / "job", ranks=4, culprit=2)
    markers = root / "markers"
    markers.mkdir()
    w = {}
    w["empty.log"] = b""
    w["core.bin"] = bytes(range(256)) * 64
    gz, xz, zs = gzip.compress(FILLER), lzma.compress(FILLER), _zstd(FILLER)
    w["torn.log.gz"], w["torn.log.xz"] = _torn(gz), _torn(xz)
    w["torn.log.bz2"] = _torn(bz2.compress(LONG, compresslevel=1))
    w["torn.log.zst"] = _torn(_zstd(LONG))
    w["nothing.log.gz"] = gz[:10]
    w["nothing.log.zst"] = zs[:10]
    for suffix in ("gz", "bz2", "xz", "zst"):
        w[f"garbage.log.{suffix}"] = b"this was never compressed\n" * 20
    w["trailing.log.gz"] = gz + b"\n\x00junk"
    half = len(FILLER) // 2
    for name, pack in zip(MULTI, (gzip.compress, bz2.compress, lzma.compress, _zstd)):
        w[name] = pack(FILLER[:half]) + pack(FILLER[half:])
    w["bomb.log.gz"] = gzip.compress(b"\0" * (8 << 20))  # 8 KiB that decompress to 8 MiB, past the 1 MiB cap
    w["corrupt.sqlite"] = b"SQLite format 3\x00" + bytes((i * 7919) % 251 for i in range(4000))
    trace = json.dumps({"schemaVersion": 1, "distributedInfo": {"rank": 0}, "traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0, "tid": 7,
         "ts": 1000.0 + i, "dur": 1.0, "args": {}} for i in range(200)]}).encode()
    w["profile.pt.trace.json"] = _torn(trace)
    w["fr_list_rank_3.pkl"] = pickle.dumps([1, 2, {"a": 3}], protocol=4)
    fr = pickle.dumps({"version": "2.4", "pg_config": {}, "entries": [{"record_id": i} for i in range(50)]},
                      protocol=4)
    w["fr_torn_rank_4.pkl"] = fr[:9]
    w["fr_open_rank_5.pkl"] = pickle.dumps(_fr_shaped(_Touch(markers / "open")), protocol=4)
    w["fr_system_rank_6.pkl"] = pickle.dumps(_fr_shaped(_System(markers / "system")), protocol=4)
    w["fr_reduce2_rank_7.pkl"] = pickle.dumps(_fr_shaped(_Touch(markers / "reduce2")), protocol=2)
    # protocol 0 is text: sniffed as a log, never unpickled either
    w["fr_proto0_rank_8.pkl"] = pickle.dumps(_fr_shaped(_Touch(markers / "proto0")), protocol=0)
    w["evil.tar.gz"] = _tar([("inner.log", FILLER[:200], {}), ("../escaped.log", FILLER[:200], {}),
                             ("/tmp/pm-absolute.log", FILLER[:200], {}),
                             ("passwd", b"", {"type": tarfile.SYMTYPE, "linkname": "/etc/passwd"}),
                             ("hard", b"", {"type": tarfile.LNKTYPE, "linkname": "../../etc/shadow"})])
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("a.log", FILLER[:200])
        z.writestr("zeros.log", b"\0" * (16 << 20))  # 16 MiB of zeros in about 16 KiB
    w["bomb.zip"] = buf.getvalue()
    w["many.tar.gz"] = _tar([(f"m/{i:04d}.log", b"INFO:root:x\n", {}) for i in range(80)])
    for name, data in w.items():
        (job / name).write_bytes(data)
    # a multi-stream .tar.bz2 (pbzip2 writes one stream per block): every member read
    tar = _tar([(f"node/{i}.log", FILLER[:3000], {}) for i in range(6)], mode="w")
    (job / "pbzip2.tar.bz2").write_bytes(bz2.compress(tar[:len(tar) // 2]) + bz2.compress(tar[len(tar) // 2:]))
    # an nsys export held under an exclusive lock by another connection, with its hot journal beside it
    _nsys_export(job / "nsys" / "rank_0.sqlite")
    return job


@pytest.fixture(scope="module")
def analysed(folder, tmp_path_factory):
    """The folder analysed once (with small caps), while another connection holds the export locked;
    the reports in every format, and the CLI's exit code and stderr."""
    export = folder / "nsys" / "rank_0.sqlite"
    holder = sqlite3.connect(export, timeout=0)
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("CREATE TABLE pending_write (x INTEGER)")
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            sqlite3.connect(export, timeout=0).execute("SELECT count(*) FROM sqlite_master").fetchall()
        assert (folder / "nsys" / "rank_0.sqlite-journal").exists()
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("POSTMORTEM_MAX_DECOMPRESSED", str(1 << 20))
            mp.setenv("POSTMORTEM_ARCHIVE_MAX_BYTES", str(1 << 20))
            mp.setenv("POSTMORTEM_ARCHIVE_MAX_MEMBERS", "50")
            started = time.perf_counter()
            run = analyze([folder])
            elapsed = time.perf_counter() - started
            report = build_report(run)
            out = tmp_path_factory.mktemp("out")
            capture = io.StringIO()
            import contextlib

            with contextlib.redirect_stderr(capture):
                code = main(["report", str(folder), "--format", "md,json,text", "--out", str(out), "--quiet"])
    finally:
        holder.rollback()
        holder.close()
    return {"run": run, "report": report, "elapsed": elapsed, "code": code, "stderr": capture.getvalue(),
            "json": json.loads((out / "report.json").read_text()), "md": (out / "report.md").read_text(),
            "text": (out / "report.txt").read_text(), "markers": folder.parent / "markers"}


def _inputs(analysed) -> dict:
    return {f["path"]: f for f in analysed["json"]["inputs"]["files"]}


def test_the_good_run_is_still_analysed(analysed):
    report = analysed["report"]
    assert report["verdict"]["status"] == "culprit" and report["verdict"]["culprit"]["ranks"] == [2]
    assert report["findings"][0]["code"] == "H001"
    assert analysed["json"]["verdict"] == report["verdict"]
    assert analysed["code"] == 1  # H001 is an error; broken inputs do not change the exit code
    assert analysed["elapsed"] < 60  # the locked export is not waited for


@pytest.mark.parametrize("name", sorted(SKIPPED))
def test_a_skipped_file_is_named_with_its_reason_everywhere(analysed, name):
    reason = SKIPPED[name]
    message = [m for m in analysed["run"].messages if m.startswith(f"{name}: ")]
    assert len(message) == 1 and reason in message[0], (name, analysed["run"].messages)
    row = _inputs(analysed)[name]
    assert row["kind"] == "skipped" and reason in row["problem"] and row["lines"] == 0
    # the text and Markdown reports list the file and the reason, not only a count
    assert f"  ! {message[0]}" in analysed["text"]
    md_line = next((line for line in analysed["md"].splitlines() if _md_plain(line).startswith(f"- ! {name}: ")),
                   None)
    assert md_line is not None and reason in _md_plain(md_line)
    assert f"postmortem: {message[0]}" in analysed["stderr"]


def _md_plain(line: str) -> str:
    """A Markdown line with its backslash escapes removed (what a reader sees)."""
    return re.sub(r"\s+", " ", re.sub(r"\\(.)", r"\1", line)).strip()


def test_skipped_totals(analysed):
    totals = analysed["json"]["inputs"]["totals"]
    skipped = [p for p, f in _inputs(analysed).items() if f["kind"] == "skipped"]
    assert sorted(skipped) == sorted(SKIPPED)
    assert totals["skipped"] == len(SKIPPED)
    assert f"({len(SKIPPED)} skipped, 1 of them empty)" in analysed["text"]       # the empty file said once
    assert totals["empty"] == 1


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_a_damaged_file_keeps_what_was_readable(analysed, name):
    row = _inputs(analysed)[name]
    assert row["kind"] == "log" and 0 < row["lines"] < LONG.count(b"\n")
    assert row["lines"] == row["parsed_lines"] + row["unparsed_lines"]
    assert DAMAGED[name] in row["problem"]
    assert any(m.startswith(f"{name}: ") and DAMAGED[name] in m for m in analysed["run"].messages)
    assert DAMAGED[name] in analysed["text"] and name in analysed["text"]


@pytest.mark.parametrize("name", MULTI)
def test_every_member_of_a_multi_member_file_is_read(analysed, name):
    row = _inputs(analysed)[name]
    assert row["kind"] == "log" and row["lines"] == FILLER_LINES and row["problem"] is None


def test_a_multi_stream_tar_is_read_whole(analysed):
    paths = [p for p in _inputs(analysed) if p.startswith("pbzip2.tar.bz2!/")]
    assert len(paths) == 6
    assert not [m for m in analysed["run"].messages if m.startswith("pbzip2.tar.bz2")]


def test_the_locked_export_is_read_and_its_journal_is_named(analysed):
    row = _inputs(analysed)["nsys/rank_0.sqlite"]
    assert row["kind"] == "nsys"
    assert "SQLite -journal file is beside this export" in row["problem"]
    assert analysed["run"].frame("SELECT count(*) AS n FROM kernels")["n"][0] > 0


@pytest.mark.parametrize("name", sorted(ARCHIVE))
def test_hostile_archives_are_named(analysed, name):
    for expected in ARCHIVE[name]:
        assert any(expected in m for m in analysed["run"].messages), (expected, analysed["run"].messages)
        assert expected in analysed["text"]
    paths = set(_inputs(analysed))
    assert "evil.tar.gz!/inner.log" in paths and "bomb.zip!/a.log" in paths
    assert not {p for p in paths if "escaped" in p or "absolute" in p or p.endswith(("passwd", "hard"))}
    assert "bomb.zip!/zeros.log" not in paths
    assert sum(p.startswith("many.tar.gz!/") for p in paths) == 50
    assert not Path("/tmp/pm-absolute.log").exists()


def test_no_pickle_payload_ran(analysed, tmp_path):
    markers = analysed["markers"]
    assert list(markers.iterdir()) == []
    assert _inputs(analysed)["fr_proto0_rank_8.pkl"]["kind"] == "log"  # text: read as lines, never unpickled
    for name in ("fr_open_rank_5.pkl", "fr_system_rank_6.pkl", "fr_reduce2_rank_7.pkl"):
        assert "nothing in it was run" in _inputs(analysed)[name]["problem"]
    # the payloads are real: plain pickle.loads would have created the markers (so the test can fail)
    for payload in (_Touch(tmp_path / "open"), _System(tmp_path / "system")):
        result = pickle.loads(pickle.dumps(_fr_shaped(payload), protocol=4))
        if hasattr(result["entries"][0]["frames"][0], "close"):
            result["entries"][0]["frames"][0].close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["open", "system"]


def test_the_flight_recorder_reader_refuses_payloads_directly(tmp_path):
    from postmortem.parsers import flight_recorder

    for payload in (_Touch(tmp_path / "a"), _System(tmp_path / "b")):
        for protocol in (2, 3, 4, 5):
            data = pickle.dumps(_fr_shaped(payload), protocol=protocol)
            with pytest.raises(flight_recorder.NotFlightRecorder, match="refused"):
                flight_recorder.parse_dump(data, "fr_rank_0.pkl")
            with pytest.raises(flight_recorder.NotFlightRecorder, match="refused"):
                flight_recorder.parse_dump(data[: len(data) * 2 // 3], "fr_rank_0.pkl")  # torn: salvage path
    assert list(tmp_path.iterdir()) == []


# Ways code could load a pickle (or other code-carrying format): none is allowed; Flight Recorder
# pickles are read by parsers.flight_recorder.read_pickle, which unpickles nothing.
UNSAFE = re.compile(r"\bpickle\.loads?\s*\(|\bpickle\.(?:_)?Unpickler\b|\b_pickle\b|^\s*import pickle\b|"
                    r"^\s*from pickle import|\bcPickle\b|"
                    r"\b(?:torch|joblib|dill|cloudpickle|pd|pandas)\.(?:load|read_pickle)\s*\(|"
                    r"\bshelve\.open\s*\(|\bmarshal\.loads?\s*\(|allow_pickle\s*=\s*True|"
                    r"\byaml\.(?:load|unsafe_load|full_load)\s*\(|(?<![.\w])(?:eval|exec)\s*\(")


def _writes_pickles_only(path, code: str) -> bool:
    """The run generator (installed as postmortem-generate) writes Flight Recorder pickles for the
    tests: it may import pickle, never load one."""
    return (ROOT / "postmortem" / "generator") in path.parents and code.strip() == "import pickle"


def test_no_source_loads_a_pickle_unsafely():
    hits = []
    for folder in ("analyzer", "parsers", "rules", "tui", "views", "postmortem"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                code = line.split("#", 1)[0]
                if UNSAFE.search(code) and not _writes_pickles_only(path, code):
                    hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not hits, hits
    # no unpickler at all: the Flight Recorder reader is a bounded pickle machine of its own (and
    # the check above is not blind)
    source = (ROOT / "parsers" / "flight_recorder.py").read_text()
    assert "def read_pickle(" in source and "import pickle" not in source
    assert UNSAFE.search("data = pickle.load(handle)") and UNSAFE.search("torch.load(path)")
    assert UNSAFE.search("class X(pickle.Unpickler):") and UNSAFE.search("import pickle")


def test_nothing_readable_exits_2_and_names_every_file(folder, tmp_path, capsys):
    only = tmp_path / "only-broken"
    only.mkdir()
    for name in ("empty.log", "core.bin", "garbage.log.gz", "corrupt.sqlite", "fr_open_rank_5.pkl",
                 "profile.pt.trace.json", "nothing.log.zst"):
        (only / name).write_bytes((folder / name).read_bytes())
    assert main(["report", str(only), "--format", "json"]) == 2
    err = capsys.readouterr().err
    for name in ("empty.log: empty file", "core.bin: binary file", "garbage.log.gz: corrupt gzip data",
                 "corrupt.sqlite: corrupt or truncated", "fr_open_rank_5.pkl: Python pickle",
                 "profile.pt.trace.json: not valid JSON", "nothing.log.zst: truncated zstd"):
        assert name in err, err
    # one readable file among them is enough for a report (exit 0: no finding at error)
    (only / "train.log").write_bytes(FILLER[:100])
    assert main(["report", str(only), "--format", "json", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["inputs"]["totals"]["skipped"] == 7
