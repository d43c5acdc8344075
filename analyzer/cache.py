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
``--no-cache``) turns it off. A run whose logs only grew since (a live hang) re-parses just their
tails (``postmortem.analyzer.tails``).

Safety (docs/security.md): the folder must be the invoking user's alone (made 0700; one that
another user owns or can write turns the cache off); every entry carries a SHA-256 of its files,
checked while the entry is copied out, so a damaged entry (any table, any byte) is a miss, never
an error later; a cached report must be a whole report; parts left by a process that died
(``.*`` of any name) are pruned after an hour; nothing is saved when it would leave the disk
with less than ``FREE_MARGIN`` free.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import duckdb

from postmortem.analyzer import store
from postmortem.analyzer.discover import InputFile, path_text

KEEP = 10
_META = "_postmortem_cache"


def enabled() -> bool:
    return os.environ.get("POSTMORTEM_CACHE", "on").strip().lower() not in ("0", "off", "no", "false")


def root() -> Path:
    if os.environ.get("POSTMORTEM_CACHE_DIR"):
        return Path(os.environ["POSTMORTEM_CACHE_DIR"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "postmortem"


def usable() -> str | None:
    """None when the cache folder can be used (made 0700 if missing), else why not: it must be
    this user's alone, or another user could plant entries or links in it."""
    folder = root()
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = os.lstat(folder)
    except OSError as exc:
        return f"cache folder {folder}: {exc.strerror or exc}; the cache is off"
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        return f"cache folder {folder} is a link or not a folder; the cache is off"
    if hasattr(os, "geteuid") and (st.st_uid != os.geteuid() or st.st_mode & 0o022):
        return (f"cache folder {folder} is not this user's alone (owner or group/other write); the cache is off "
                "(POSTMORTEM_CACHE_DIR chooses another)")
    return None


# Nothing is saved into the cache when the disk would have less than this left afterwards.
FREE_MARGIN = 2 << 30


def _room_for(folder: Path, nbytes: int) -> bool:
    try:
        return shutil.disk_usage(folder).free - nbytes >= FREE_MARGIN
    except OSError:
        return False


def _digest_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(4 << 20):
            digest.update(block)
    return digest.hexdigest()


def _copy_checked(source: Path, target: Path, expected: str | None) -> bool:
    """Copy ``source`` to the new file ``target`` (``O_EXCL``, ``O_NOFOLLOW``); False (and no
    target) when the copy's SHA-256 is not ``expected`` (None: not checked). The copy is hashed,
    not the source: what is checked is what will be opened."""
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    _copy_bytes(source, fd)
    if expected is not None and _digest_file(target) != expected:
        target.unlink(missing_ok=True)
        return False
    return True


def _copy_bytes(source: Path, fd: int) -> None:
    """``source``'s bytes into the open file ``fd`` (closed after), in the kernel where it can:
    a 345 MB store took 0.6-1.3 s through Python's buffers (hashed as it went), 0.1-0.2 s by
    ``sendfile``; hashing the copy after adds 0.25 s."""
    with open(source, "rb") as handle, os.fdopen(fd, "wb") as sink:
        size, done = os.fstat(handle.fileno()).st_size, 0
        try:
            while done < size and (sent := os.sendfile(sink.fileno(), handle.fileno(), done, size - done)):
                done += sent
        except (OSError, AttributeError):   # no sendfile between files here: the rest through Python
            pass
        handle.seek(done)
        sink.seek(done)
        shutil.copyfileobj(handle, sink, 4 << 20)


@cache
def code_version() -> str:
    """A hash of the sources that decide what a store holds."""
    digest = hashlib.sha256()
    here = Path(__file__).resolve().parents[1]
    for folder in ("parsers", "analyzer"):   # the folders beside this one, in a checkout or installed
        for path in sorted((here / folder).rglob("*.py")) + sorted((here / folder).rglob("*.toml")):
            digest.update(str(path.relative_to(here)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


@cache
def rules_version() -> str:
    """A hash of the rules' sources (the report dict is built in ``rules/report.py``)."""
    digest = hashlib.sha256(code_version().encode())
    here = Path(__file__).resolve().parents[1]
    for path in sorted((here / "rules").rglob("*.py")):
        digest.update(str(path.relative_to(here)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def report_key(run_key: str, info: dict, options: dict) -> str:
    """The key of the report on a store of key ``run_key`` with ``info`` (``Run.info``) and the
    user's ``options`` (``--gpu`` and the like, ``postmortem.rules.base.Options``)."""
    asked = json.dumps({"info": info, "options": options}, sort_keys=True, default=str)
    return hashlib.sha256(f"{run_key}\0{rules_version()}\0{asked}".encode()).hexdigest()[:32]


def key(items: list[InputFile]) -> str:
    digest = hashlib.sha256(code_version().encode())
    for item in sorted(items, key=lambda i: i.display):
        where = path_text(item.source or item.path)
        digest.update(f"{item.display}\0{where}\0{item.size}\0{item.mtime!r}\n".encode())
    return digest.hexdigest()[:32]


def load(run_key: str, db_path: str | Path | None):
    """The cached store as a new connection (in memory, or copied to ``db_path``) with the
    run's info and messages, or None on a miss (a damaged entry is one: checked before use)."""
    entry = root() / f"{run_key}.duckdb"
    if not entry.is_file() or usable():
        return None
    target = Path(db_path) if db_path is not None else store.private_dir() / f"cached-{uuid.uuid4().hex[:12]}.duckdb"
    try:
        expected = (root() / f"{run_key}.duckdb.sha256").read_text().strip()
        # A copy of the entry's file (the caller may write to the store: the report table):
        # a file copy costs far less than loading every table into memory.
        if not _copy_checked(entry, target, expected):
            _remove(entry)
            return None
        con = duckdb.connect(str(target), config=store.file_config())
        meta = json.loads(con.execute(f"SELECT json FROM {_META}").fetchall()[0][0])
        con.execute(f"DROP TABLE {_META}")
        if not isinstance(meta, dict) or not isinstance(meta.get("info"), dict) or \
                not isinstance(meta.get("messages"), list):
            raise ValueError("damaged cache metadata")
    except (duckdb.Error, OSError, IndexError, ValueError, TypeError):
        return None  # a damaged or half-written entry: parse again
    os.utime(entry)  # recently used: kept longest
    return con, meta


def save(run_key: str, con: duckdb.DuckDBPyConnection, meta: dict, background: bool = False,
         start: bool = True) -> threading.Thread | None:
    """Copy the store into the cache (written aside, then renamed: readers never see half), with
    the SHA-256 of the entry beside it. ``background``: an in-memory store's rows are copied by a
    thread, returned, while the caller goes on (the report: on the 1,024-rank run the copy takes
    about 1 s); the entry holds the tables that existed when ``save`` was called. ``start``
    False: the thread is returned unstarted, for the caller to start when it has a core to
    spare (the TUI, once its first screen is up). The entry file is attached here, so the
    thread still runs after ``store.lock_down``. The caller must start and join the thread
    before it closes ``con``. A store on disk is copied at once: its file must not change while
    it is read."""
    if usable():
        return None
    folder = root()
    part = folder / f".{run_key}.{uuid.uuid4().hex}.part"
    try:
        source = con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchall()
        source = source[0] if source else None
        if source and source[0]:
            # A store on disk: its file, checkpointed, is the entry (no table is read or rewritten).
            con.execute("CHECKPOINT")
            if not _room_for(folder, 2 * os.path.getsize(source[0])):
                return None
            _copy_checked(Path(source[0]), part, None)    # a new file of ours (O_EXCL, O_NOFOLLOW)
            with duckdb.connect(str(part)) as copy:
                copy.execute(f"CREATE TABLE {_META} AS SELECT ? AS json", [json.dumps(meta, default=str)])
            _publish(folder, run_key, part)
            return None
        if not _room_for(folder, 2 * _in_memory_bytes(con)):
            return None
    except (duckdb.Error, OSError):
        _remove_part(part)
        return None  # a cache that cannot be written costs speed, never the report
    # a copy started later runs beside an interactive screen: one table at a time
    copy = _MemoryCopy(con, folder, run_key, part, meta, writers=store.WRITERS if start else 1)
    if not copy.begin():
        return None
    if not background:
        copy.finish()
        return None
    thread = threading.Thread(target=copy.finish, name="postmortem-cache-save")
    if start:
        thread.start()
    return thread


class _MemoryCopy:
    """An in-memory store copied into a new database file, through a connection of its own (a
    cursor: the caller's connection stays free for the report). ``begin`` attaches the file and
    copies the schema, which fixes the tables copied; ``finish`` copies their rows, ``store.WRITERS``
    tables at a time, the largest first (COPY FROM DATABASE copies one table after another on
    one core: the 1,024-rank run's store 1.35 s, against about 1 s this way), and publishes."""

    def __init__(self, con: duckdb.DuckDBPyConnection, folder: Path, run_key: str, part: Path, meta: dict,
                 writers: int = store.WRITERS):
        self.con, self.folder, self.run_key, self.part, self.meta = con, folder, run_key, part, meta
        self.writers = writers
        self.alias = f"c{uuid.uuid4().hex[:8]}"
        self.work: duckdb.DuckDBPyConnection | None = None
        self.current = ""           # the store's database name
        self.names: list[str] = []  # its tables, fixed by begin

    def begin(self) -> bool:
        try:
            self.work = self.con.cursor()
            self.current = self.work.execute("SELECT current_database()").fetchall()[0][0]
            self.work.execute(f"ATTACH '{store.sql_path(self.part)}' AS {self.alias}")
            self.work.execute(f"COPY FROM DATABASE {self.current} TO {self.alias} (SCHEMA)")
            self.names = [name for (name,) in self.work.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() AND NOT temporary "
                "ORDER BY estimated_size DESC").fetchall()]
            return True
        except (duckdb.Error, OSError):
            self._abandon()
            return False

    def finish(self) -> None:
        try:
            with ThreadPoolExecutor(self.writers) as pool:
                list(pool.map(self._copy_rows, self.names))
            self.work.execute(f"CREATE TABLE {self.alias}.{_META} AS SELECT ? AS json",
                              [json.dumps(self.meta, default=str)])
            self.work.execute(f"DETACH {self.alias}")
            self.work.close()
            _publish(self.folder, self.run_key, self.part)
        except Exception:  # noqa: BLE001 -- in a thread too: a cache that cannot be written costs speed, never the report
            self._abandon()

    def _copy_rows(self, name: str) -> None:
        cursor = self.work.cursor()
        try:
            cursor.execute(f'INSERT INTO {self.alias}."{name}" SELECT * FROM {self.current}."{name}"')
        finally:
            cursor.close()

    def _abandon(self) -> None:
        if self.work is not None:
            try:
                self.work.execute(f"DETACH DATABASE IF EXISTS {self.alias}")
                self.work.close()
            except duckdb.Error:
                pass
        _remove_part(self.part)


def _publish(folder: Path, run_key: str, part: Path) -> None:
    """The finished entry file ``part``, with its checksum, under its key."""
    try:
        _write_small(folder / f"{run_key}.duckdb.sha256", _digest_file(part) + "\n")
        os.replace(part, folder / f"{run_key}.duckdb")
        _prune(folder)
    except OSError:
        _remove_part(part)


def _remove_part(part: Path) -> None:
    _remove(part)
    _remove(part.with_name(part.name + ".wal"))


def _in_memory_bytes(con) -> int:
    try:
        return int(con.execute("SELECT sum(memory_usage_bytes) FROM duckdb_memory()").fetchall()[0][0] or 0)
    except duckdb.Error:
        return 0


def _write_small(path: Path, text: str) -> None:
    """A small file written aside and renamed into place."""
    from postmortem.analyzer.safeio import write_file

    write_file(path, text, what="cache entry")


def load_report(report_key_: str, con: duckdb.DuckDBPyConnection) -> dict | None:
    """The cached report, its ``findings`` table copied into ``con``'s store; None on a miss (a
    damaged entry, or a report that is not whole, is one)."""
    entry = root() / f"{report_key_}.report"
    if usable():
        return None
    try:
        sums = json.loads((entry / "sha256.json").read_text(encoding="utf-8"))
        text = (entry / "report.json").read_bytes()
        if hashlib.sha256(text).hexdigest() != sums.get("report.json") or \
                _digest_file(entry / "findings.parquet") != sums.get("findings.parquet"):
            raise ValueError("damaged report entry")
        report = json.loads(text.decode("utf-8"))
        if not _whole_report(report):
            raise ValueError("not a whole report")
        con.execute("CREATE OR REPLACE TABLE findings AS SELECT * FROM read_parquet(?)",
                    [str(entry / "findings.parquet")])
    except (duckdb.Error, OSError, ValueError, AttributeError, TypeError):
        return None   # no entry, or a damaged one: the rules run again
    os.utime(entry)
    return report


_REPORT_KEYS = {"schema", "verdict", "outcome", "findings", "actions", "missing_evidence", "inputs", "run"}


def _whole_report(report) -> bool:
    return isinstance(report, dict) and _REPORT_KEYS <= set(report) and \
        str(report.get("schema", "")).startswith("postmortem.report/") and isinstance(report.get("findings"), list) \
        and isinstance(report.get("verdict"), dict)


def save_report(report_key_: str, con: duckdb.DuckDBPyConnection, report: dict) -> None:
    """Keep ``report`` and the store's ``findings`` table (written in a folder aside, then renamed)."""
    if usable():
        return
    folder = root()
    part = folder / f".{report_key_}.{uuid.uuid4().hex}.part"
    try:
        part.mkdir(mode=0o700)
        con.execute(f"COPY findings TO '{store.sql_path(part / 'findings.parquet')}' (FORMAT parquet)")
        text = json.dumps(report, default=str).encode("utf-8")
        (part / "report.json").write_bytes(text)
        (part / "sha256.json").write_text(json.dumps({"report.json": hashlib.sha256(text).hexdigest(),
                                                      "findings.parquet": _digest_file(part / "findings.parquet")}))
        final = folder / f"{report_key_}.report"
        shutil.rmtree(final, ignore_errors=True)
        os.replace(part, final)
        _prune(folder)
    except (duckdb.Error, OSError):
        shutil.rmtree(part, ignore_errors=True)   # costs speed next time, never this report


# A part (``.<key>.<uuid>.part``, ``.parsed-part``, a WAL, ...) this old was left by a process
# that died while writing it.
STALE_PART_S = 3600


def _prune(folder: Path) -> None:
    # stores; parse entries of analyzer.tails; reports, a few per store (--gpu and the like)
    for pattern, keep in (("*.duckdb", KEEP), ("*.parsed", KEEP), ("*.report", 3 * KEEP)):
        entries = sorted(folder.glob(pattern), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in entries[keep:]:
            _remove(old)
            _remove(old.with_name(old.name + ".sha256"))
    for sums in folder.glob("*.duckdb.sha256"):    # a checksum whose store is gone
        if not sums.with_name(sums.name.removesuffix(".sha256")).exists():
            _remove(sums)
    now = time.time()
    for part in folder.glob(".*"):  # parts of any name left by a process that died while writing
        try:
            if now - part.lstat().st_mtime > STALE_PART_S:
                _remove(part)
        except OSError:
            continue


def _remove(path: Path) -> None:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    except OSError:
        pass
