import gzip
import subprocess
import sys

from postmortem.analyzer.pipeline import analyze

GOOD = ("[rank0]:[E0724 09:12:00.1 ProcessGroupNCCL.cpp:1] [PG ID 0 PG GUID 0(default_pg) Rank 0] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=10, OpType=ALLREDUCE, NumelIn=5, NumelOut=5, "
        "Timeout(ms)=600000) ran for 600010 milliseconds before timing out.\n")


def test_bad_files_are_named_and_the_rest_is_analysed(tmp_path):
    (tmp_path / "good.log").write_text(GOOD)
    (tmp_path / "empty.log").write_bytes(b"")
    (tmp_path / "core.bin").write_bytes(bytes(range(256)) * 64)
    whole = gzip.compress((GOOD * 50).encode())
    (tmp_path / "torn.log.gz").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "fr_rank_0.pkl").write_bytes(b"\x80\x04\x95" + b"\x00" * 40)
    before = {p.name: (p.read_bytes(), p.stat().st_mtime) for p in tmp_path.iterdir()}
    run = analyze([tmp_path])
    text = "\n".join(run.messages)
    assert "empty.log: empty file" in text
    assert "core.bin: binary file" in text
    assert "torn.log.gz: truncated gzip" in text
    assert "fr_rank_0.pkl: Python pickle" in text and "never unpickled" in text
    inputs = run.frame("SELECT path, kind, lines, parsed_lines, unparsed_lines FROM inputs ORDER BY path")
    good = inputs.filter(inputs["path"] == "good.log").row(0, named=True)
    assert good["parsed_lines"] == 1
    torn = inputs.filter(inputs["path"] == "torn.log.gz").row(0, named=True)
    assert torn["lines"] > 0 and torn["lines"] == torn["parsed_lines"] + torn["unparsed_lines"]
    # inputs are never written
    assert before == {p.name: (p.read_bytes(), p.stat().st_mtime) for p in tmp_path.iterdir()}


def test_nothing_readable_exits_2(tmp_path):
    (tmp_path / "empty.log").write_bytes(b"")
    proc = subprocess.run([sys.executable, "-m", "postmortem.cli", "report", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "empty.log" in proc.stderr
    missing = subprocess.run([sys.executable, "-m", "postmortem.cli", "report", str(tmp_path / "nope")],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "no such file" in missing.stderr


def test_compressed_inputs_are_read_as_they_are(tmp_path):
    import bz2
    import lzma

    import zstandard

    data = (GOOD * 3).encode()
    (tmp_path / "a.log.gz").write_bytes(gzip.compress(data))
    (tmp_path / "b.log.bz2").write_bytes(bz2.compress(data))
    (tmp_path / "c.log.xz").write_bytes(lzma.compress(data))
    (tmp_path / "d.log.zst").write_bytes(zstandard.ZstdCompressor().compress(data))
    run = analyze([tmp_path])
    inputs = run.frame("SELECT path, compression, lines, parsed_lines FROM inputs ORDER BY path")
    assert inputs["compression"].to_list() == ["gzip", "bz2", "xz", "zstd"]
    assert inputs["parsed_lines"].to_list() == [3, 3, 3, 3]
    assert not run.messages
    # evidence is read back from inside the compressed input
    from postmortem.rules.base import Context

    ev = Context(run, 0).evidence(0, 2)
    assert ev.path == "a.log.gz" and ev.text == GOOD.strip()


def test_a_file_still_being_written_keeps_its_torn_last_line(tmp_path):
    (tmp_path / "live.log").write_bytes((GOOD + GOOD[:80]).encode())  # no trailing newline
    run = analyze([tmp_path])
    row = run.frame("SELECT lines, parsed_lines, unparsed_lines FROM inputs").row(0)
    assert row == (2, 1, 1)
