"""Issue 12: evidence is read-only. ``postmortem report`` (every format, to stdout) and
``postmortem ingest --db`` elsewhere, with the cache off and on, run from inside a read-only copy
of a sample (plus a compressed file, an archive, an nsys export and a Flight Recorder dump), leave
every input byte for byte and mtime for mtime as it was, and write nothing inside the folder.

The tests run as root, where ``chmod a-w`` stops nothing: a full snapshot (paths, types, sizes,
modes, mtimes, sha256) is compared before and after instead of relying on permission errors."""

from __future__ import annotations

import gzip
import hashlib
import os
import pickle
import shutil
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_logs" / "rendezvous-missing-node"


def _snapshot(root: Path) -> dict:
    """Every entry under root (folders too): type, size, mode, mtime in ns and the sha256 of files."""
    out = {}
    for path in sorted([root, *root.rglob("*")]):
        st = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if stat.S_ISREG(st.st_mode) else None
        out[str(path.relative_to(root))] = (stat.S_IFMT(st.st_mode), st.st_size if digest else None,
                                            stat.S_IMODE(st.st_mode), st.st_mtime_ns, digest)
    return out


@pytest.fixture(scope="module")
def evidence(tmp_path_factory) -> Path:
    from postmortem.generator.rungen.nsys import write_nsys_export

    job = tmp_path_factory.mktemp("evidence") / "job"
    shutil.copytree(SAMPLE, job)
    log = job / "slurm-4242.out"
    (job / "slurm-4242.out.1.gz").write_bytes(gzip.compress(log.read_bytes()))
    with tarfile.open(job / "slurm.tar.gz", "w:gz") as tar:
        tar.add(job / "slurm", arcname="slurm")
    write_nsys_export(job / "nsys" / "rank_0.sqlite", 0, world=2, steps=2)
    (job / "fr_rank_0.pkl").write_bytes(pickle.dumps({"version": "2.4", "pg_config": {}, "entries": []}))
    for path in [job, *job.rglob("*")]:
        path.chmod(path.stat().st_mode & ~0o222)  # chmod -R a-w
    yield job
    for path in [job, *job.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)  # so that pytest can remove it


def _cli(args: list[str], cwd: Path, env_extra: dict) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSTMORTEM_")}
    env.update(env_extra)
    return subprocess.run([sys.executable, "-m", "postmortem.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.mark.parametrize("cache", ["off", "on"])
def test_report_and_ingest_leave_the_evidence_as_it_was(evidence, tmp_path, cache):
    before = _snapshot(evidence)
    scratch, home, cache_dir = tmp_path / "tmp", tmp_path / "home", tmp_path / "cache"
    scratch.mkdir()
    home.mkdir()
    env = {"POSTMORTEM_CACHE": cache, "POSTMORTEM_CACHE_DIR": str(cache_dir), "TMPDIR": str(scratch),
           "HOME": str(home), "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(ROOT)}
    # run from inside the evidence folder: a default path relative to the working directory would land there
    runs = [["report", str(evidence), "--format", "md,json,html"],
            ["ingest", str(evidence), "--db", str(tmp_path / "store.duckdb")]]
    if cache == "on":
        runs.insert(1, ["report", str(evidence), "--format", "text"])  # a cache hit, not a second parse
    outputs = []
    for args in runs:
        proc = _cli(args, evidence, env)
        assert proc.returncode in (0, 1), proc.stderr
        assert _snapshot(evidence) == before, args
        outputs.append(proc)
    first = outputs[0]
    assert '"schema": "postmortem.report/1"' in first.stdout and "<!DOCTYPE html>" in first.stdout
    assert "rank_0.sqlite" in first.stdout and "slurm.tar.gz!/slurm/sacct.txt" in first.stdout
    assert (tmp_path / "store.duckdb").is_file()
    assert list(scratch.iterdir()) == []  # the archive's scratch copy is gone
    if cache == "on":
        assert cache_dir.is_dir() and any(cache_dir.iterdir())  # the cache lives here, outside the evidence
        assert evidence not in cache_dir.parents and cache_dir not in evidence.parents
    else:
        assert not cache_dir.exists()
    assert _snapshot(evidence) == before


def test_the_nsys_export_is_opened_immutable(evidence, monkeypatch):
    """SQLite leaves no journal or -wal/-shm beside an export it only reads (in-process, so a
    change to how parsers.nsys opens the file fails here first)."""
    from postmortem.analyzer.pipeline import analyze

    monkeypatch.setenv("POSTMORTEM_CACHE", "off")
    before = _snapshot(evidence)
    run = analyze([evidence / "nsys" / "rank_0.sqlite"])
    assert run.frame("SELECT kind FROM inputs")["kind"].to_list() == ["nsys"]
    assert _snapshot(evidence) == before
