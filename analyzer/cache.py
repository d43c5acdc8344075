"""A cache of parsed runs, so a second report or the TUI on the same folder opens at once.

Key: every input's path (an archive member's ``archive!/member``), size and mtime, plus a hash
of the code that parses and models (``parsers/``, ``analyzer/``, ``hardware.toml``): a changed,
added or removed input, or a new postmortem, misses. Value: the store as it stands after
ingest, before the rules, with what ``analyze`` knew about the run (``Run.info``, messages).

The report too: a second report on unchanged inputs would run the same rules on the same store,
so its findings and report (``save_report``) are kept beside the store, keyed by the store's key,
a hash of ``rules/`` and ``Run.info`` (where ``--gpu`` and the like go): another ``--gpu``, or
a changed rule, runs the rules again.

Where: ``$POSTMORTEM_CACHE_DIR``, else ``$XDG_CACHE_HOME/postmortem``, else
``~/.cache/postmortem``; the newest ``KEEP`` entries are kept. ``POSTMORTEM_CACHE=off`` (or
``--no-cache``) turns it off. A damaged entry is a miss, never an error. A run whose logs only
grew since (a live hang) re-parses just their tails (``analyzer.tails``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from functools import cache
from pathlib import Path

import duckdb

from analyzer import store
from analyzer.discover import InputFile

KEEP = 10
_META = "_postmortem_cache"


def enabled() -> bool:
    return os.environ.get("POSTMORTEM_CACHE", "on").strip().lower() not in ("0", "off", "no", "false")


def root() -> Path:
    if os.environ.get("POSTMORTEM_CACHE_DIR"):
        return Path(os.environ["POSTMORTEM_CACHE_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "postmortem"


@cache
def code_version() -> str:
    """A hash of the sources that decide what a store holds."""
    digest = hashlib.sha256()
    here = Path(__file__).resolve().parents[1]
    for folder in ("parsers", "analyzer"):
        for path in sorted((here / folder).glob("*.py")) + sorted((here / folder).glob("*.toml")):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


@cache
def rules_version() -> str:
    """A hash of the rules' sources (the report's code in ``analyzer/`` is in ``code_version``)."""
    digest = hashlib.sha256(code_version().encode())
    for path in sorted((Path(__file__).resolve().parents[1] / "rules").glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def report_key(run_key: str, info: dict) -> str:
    """The key of the report on a store of key ``run_key`` with ``info`` (``Run.info``)."""
    options = json.dumps(info, sort_keys=True, default=str)
    return hashlib.sha256(f"{run_key}\0{rules_version()}\0{options}".encode()).hexdigest()[:32]


def key(items: list[InputFile]) -> str:
    digest = hashlib.sha256(code_version().encode())
    for item in sorted(items, key=lambda i: i.display):
        where = item.source or str(item.path)
        digest.update(f"{item.display}\0{where}\0{item.size}\0{item.mtime!r}\n".encode())
    return digest.hexdigest()[:32]


def load(run_key: str, db_path: str | Path | None):
    """The cached store as a new connection (in memory, or copied to ``db_path``) with the
    run's info and messages, or None on a miss."""
    entry = root() / f"{run_key}.duckdb"
    if not entry.is_file():
        return None
    try:
        # A copy of the entry's file (the caller may write to the store: the report table):
        # a file copy costs far less than loading every table into memory.
        target = Path(db_path) if db_path is not None else store.private_dir() / f"cached-{uuid.uuid4().hex[:12]}.duckdb"
        shutil.copyfile(entry, target)
        con = duckdb.connect(str(target), config=store.file_config())
        meta = json.loads(con.execute(f"SELECT json FROM {_META}").fetchall()[0][0])
        con.execute(f"DROP TABLE {_META}")
    except (duckdb.Error, OSError, IndexError, ValueError):
        return None  # a damaged or half-written entry: parse again
    os.utime(entry)  # recently used: kept longest
    return con, meta


def save(run_key: str, con: duckdb.DuckDBPyConnection, meta: dict) -> None:
    """Copy the store into the cache (written aside, then renamed: readers never see half)."""
    folder = root()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        part = folder / f".{run_key}.{uuid.uuid4().hex}.part"
        source = con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchall()
        source = source[0] if source else None
        if source and source[0]:
            # A store on disk: its file, checkpointed, is the entry (no table is read or rewritten).
            con.execute("CHECKPOINT")
            shutil.copyfile(source[0], part)
            with duckdb.connect(str(part)) as copy:
                copy.execute(f"CREATE TABLE {_META} AS SELECT ? AS json", [json.dumps(meta, default=str)])
            os.replace(part, folder / f"{run_key}.duckdb")
            _prune(folder)
            return
        con.execute(f"CREATE OR REPLACE TEMP TABLE {_META} AS SELECT ? AS json", [json.dumps(meta, default=str)])
        alias = f"c{uuid.uuid4().hex[:8]}"
        con.execute(f"ATTACH '{store.sql_path(part)}' AS {alias}")
        try:
            current = con.execute("SELECT current_database()").fetchall()[0][0]
            con.execute(f"COPY FROM DATABASE {current} TO {alias}")
            con.execute(f"CREATE TABLE {alias}.{_META} AS SELECT * FROM temp.{_META}")
        finally:
            con.execute(f"DETACH {alias}")
            con.execute(f"DROP TABLE temp.{_META}")
        os.replace(part, folder / f"{run_key}.duckdb")
        _prune(folder)
    except (duckdb.Error, OSError):
        return  # a cache that cannot be written costs speed, never the report


def load_report(report_key_: str, con: duckdb.DuckDBPyConnection) -> dict | None:
    """The cached report, its ``findings`` table copied into ``con``'s store; None on a miss."""
    entry = root() / f"{report_key_}.report"
    try:
        report = json.loads((entry / "report.json").read_text(encoding="utf-8"))
        con.execute("CREATE OR REPLACE TABLE findings AS SELECT * FROM read_parquet(?)",
                    [str(entry / "findings.parquet")])
    except (duckdb.Error, OSError, ValueError):
        return None   # no entry, or a damaged one: the rules run again
    os.utime(entry)
    return report


def save_report(report_key_: str, con: duckdb.DuckDBPyConnection, report: dict) -> None:
    """Keep ``report`` and the store's ``findings`` table (written in a folder aside, then renamed)."""
    folder = root()
    part = folder / f".{report_key_}.{uuid.uuid4().hex}.part"
    try:
        part.mkdir(parents=True)
        con.execute(f"COPY findings TO '{store.sql_path(part / 'findings.parquet')}' (FORMAT parquet)")
        (part / "report.json").write_text(json.dumps(report, default=str), encoding="utf-8")
        final = folder / f"{report_key_}.report"
        shutil.rmtree(final, ignore_errors=True)
        os.replace(part, final)
        _prune(folder)
    except (duckdb.Error, OSError):
        shutil.rmtree(part, ignore_errors=True)   # costs speed next time, never this report


def _prune(folder: Path) -> None:
    # stores; parse entries of analyzer.tails; reports, a few per store (--gpu and the like)
    for pattern, keep in (("*.duckdb", KEEP), ("*.parsed", KEEP), ("*.report", 3 * KEEP)):
        entries = sorted(folder.glob(pattern), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in entries[keep:]:
            _remove(old)
    for part in folder.glob(".*.part"):  # left by a process that died while writing
        if time.time() - part.stat().st_mtime > 3600:
            _remove(part)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
