"""A cache of parsed runs, so a second report or the TUI on the same folder opens at once.

Key: every input's path (an archive member's ``archive!/member``), size and mtime, plus a hash
of the code that parses and models (``parsers/``, ``analyzer/``, ``hardware.toml``): a changed,
added or removed input, or a new postmortem, misses. Value: the store as it stands after
ingest, before the rules, with what ``analyze`` knew about the run (``Run.info``, messages):
its tables as Parquet files (``<key>.store/``), which a hit reads through views; a store with a
file of its own (``--db``) as its DuckDB file.

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
import itertools
import json
import os
import re
import shutil
import stat
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from functools import cache
from pathlib import Path

import duckdb

from postmortem.analyzer import bulk, store
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
    """The cached store as a new connection (in memory, or copied to ``db_path``), the run's info
    and messages, and the Parquet files of the tables a query would read back as they are
    (``Run.stored_frames``); or None on a miss (a damaged entry is one: checked before use)."""
    if usable():
        return None
    parquet = root() / f"{run_key}{STORE_SUFFIX}"
    if parquet.is_dir() and not parquet.is_symlink():
        return _load_parquet(parquet, db_path)
    entry = root() / f"{run_key}.duckdb"
    if not entry.is_file():
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
    return con, meta, {}


def save(run_key: str, con: duckdb.DuckDBPyConnection, meta: dict, background: bool = False,
         start: bool = True, frames: dict | None = None, files: dict | None = None,
         derived: dict | None = None) -> threading.Thread | None:
    """Copy the store into the cache (written aside, then renamed: readers never see half), with
    the SHA-256 of the entry beside it. ``background``: an in-memory store's rows are copied by a
    thread, returned, while the caller goes on (the report: on the 1,024-rank run the copy takes
    about 1 s); the entry holds the tables that existed when ``save`` was called. ``start``
    False: the thread is returned unstarted, for the caller to start when it has a core to
    spare (the TUI, once its first screen is up). The entry file is attached here, so the
    thread still runs after ``store.lock_down``. The caller must start and join the thread
    before it closes ``con``. A store on disk is copied at once: its file must not change while
    it is read.

    ``frames``: the Polars frames the store's tables were written from (``store.write_all``).
    Where they are every table of an in-memory store, the entry is those frames as Parquet
    files (``_ParquetEntry``), which a hit reads through views (``load``): Polars writes the
    1,024-rank run's tables in 0.4 s, where DuckDB copies them into its own file in 1.5 s and
    2.5 s of CPU. ``files``: the Parquet files of each table that is a view over them
    (``store.write_files``, a COLL trace's bulk rows): the entry holds a copy of them.
    ``derived``: the views ``postmortem.analyzer.bulk.show`` made (each one's parts), made again
    on a hit."""
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
        columns = _parquet_columns(con, frames, not start, files, derived)
        as_read = sorted(store.read_back_unchanged(con, frames)) if columns is not None else []
    except (duckdb.Error, OSError):
        _remove_part(part)
        return None  # a cache that cannot be written costs speed, never the report
    if columns is None and files:
        return None     # views over this process's own files: no copy of the store can hold them
    if columns is not None:
        # a table with its file written needs no frame held until the entry is written (the TUI's)
        unwritten = {name: frame for name, frame in frames.items() if name not in (files or {})}
        copy = _ParquetEntry(folder, run_key, {**meta, "as_read": as_read}, columns, unwritten, files,
                             derived)
    else:
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


# -- entries of Parquet files: a store's tables as the frames they were written from --

STORE_SUFFIX = ".store"     # the entry: a folder of <n>.parquet, the manifest and their SHA-256s
_MANIFEST = "manifest.json"
_SUMS = "sha256.json"
_ENTRY_FILE = re.compile(r"[0-9]{1,6}\.parquet|manifest\.json")
# A column's DuckDB type as the manifest keeps it (it is put into SQL unquoted, so only these
# shapes): VARCHAR, BIGINT[], TIMESTAMP_NS, TIMESTAMP WITH TIME ZONE, DECIMAL(18,3).
_TYPE = re.compile(r"[A-Z][A-Z0-9_]*(?: [A-Z][A-Z0-9_]*)*(?:\([0-9]+(?:, ?[0-9]+)?\))?(?:\[\])*")


def _parquet_columns(con: duckdb.DuckDBPyConnection, frames: dict | None, held: bool, files: dict | None = None,
                     derived: dict | None = None) -> dict[str, list[tuple[str, str]]] | None:
    """Each table's (column, DuckDB type) pairs where the store's tables are ``frames`` (each
    with its columns in order), views over ``files`` and the views ``derived`` names (made again
    from them on a hit), of types a manifest may hold; else None (the store is copied by DuckDB).
    ``held``: the entry is written later (the TUI's), holding the frames without a file until
    then: only where they fit in ``budget.held_tables_bytes``."""
    from postmortem.analyzer import budget

    files, derived = files or {}, derived or {}
    if not frames or (held and sum(frame.estimated_size() for name, frame in frames.items() if name not in files)
                      > budget.held_tables_bytes()):
        return None
    stored = store.columns_by_table(con)
    if set(stored) != set(frames) | set(files) | set(derived):
        return None
    kept = {name: columns for name, columns in stored.items() if name not in derived}
    for name, columns in kept.items():
        if name in frames and [c for c, _ in columns] != frames[name].columns:
            return None
        if not all(_TYPE.fullmatch(t) for _, t in columns):
            return None
    return kept


class _ParquetEntry:
    """A store's tables (``columns``: each one's DuckDB column types) as a cache entry: Parquet
    files (one a table, or a view's several), a manifest (each table's files and column types,
    the views ``derived`` from them, the run's info and messages) and the SHA-256 of each file,
    written in a folder aside and renamed into place. A table's files are copies of ``files``'
    where it has them (``store.write_files``, bulk rows), else its frame in ``frames`` written by
    Polars (zstd)."""

    def __init__(self, folder: Path, run_key: str, meta: dict, columns: dict, frames: dict,
                 files: dict | None = None, derived: dict | None = None):
        self.folder, self.run_key, self.meta = folder, run_key, meta
        self.columns, self.frames, self.files, self.derived = columns, frames, files or {}, derived or {}

    def finish(self) -> None:
        part = self.folder / f".{self.run_key}.{uuid.uuid4().hex}.store-part"
        try:
            part.mkdir(mode=0o700)
            tables, numbers = [], itertools.count()
            for name in sorted(self.columns):
                names = []
                for source in self.files.get(name) or [None]:
                    names.append(f"{next(numbers)}.parquet")
                    if source is not None:
                        _copy_checked(Path(source), part / names[-1], None)
                    else:
                        self.frames[name].write_parquet(part / names[-1], compression="zstd")
                tables.append({"name": name, "files": names, "columns": self.columns[name]})
            (part / _MANIFEST).write_text(json.dumps({"meta": self.meta, "tables": tables, "derived": self.derived},
                                                     default=str))
            sums = {path.name: _digest_file(path) for path in sorted(part.iterdir())}
            (part / _SUMS).write_text(json.dumps(sums))
            final = self.folder / f"{self.run_key}{STORE_SUFFIX}"
            _remove(final)  # the same key written by another process meanwhile
            os.replace(part, final)
            _prune(self.folder)
        except Exception:  # noqa: BLE001 -- in a thread too: a cache that cannot be written costs speed, never the report
            _remove(part)
        finally:
            self.frames = {}


def _load_parquet(entry: Path, db_path: str | Path | None):
    """A Parquet entry (``_ParquetEntry``) as a store: its files copied into this process's
    private folder, each checked against its SHA-256 (what is checked is what is read), then a
    view per table over its copy (in memory: a hit costs the copy, not a load), or with
    ``db_path`` the tables written into that file; then the views ``bulk.show`` makes over them
    (``derived``). The views cast each column to the type the store had, and read their files
    after ``store.lock_down`` too (``store.allow``).
    The manifest's ``as_read``: the tables whose frame is what a ``SELECT *`` gives (Polars
    reads such a file three to four times as fast as a query of its view)."""
    copy = store.private_dir() / f"cached-{uuid.uuid4().hex[:12]}"
    con = None
    try:
        copy.mkdir(mode=0o700)
        sums = json.loads((entry / _SUMS).read_text(encoding="utf-8"))
        if not isinstance(sums, dict) or _MANIFEST not in sums:
            raise ValueError("damaged cache entry")
        for name, digest in sums.items():
            if not _ENTRY_FILE.fullmatch(name) or not isinstance(digest, str) or \
                    not _copy_checked(entry / name, copy / name, digest):
                raise ValueError("damaged cache entry")
        manifest = json.loads((copy / _MANIFEST).read_text(encoding="utf-8"))
        meta, tables, derived = manifest["meta"], manifest["tables"], manifest["derived"]
        if not isinstance(meta, dict) or not isinstance(meta.get("info"), dict) or \
                not isinstance(meta.get("messages"), list) or not isinstance(meta.get("as_read"), list):
            raise ValueError("damaged cache metadata")
        con = store.connect(db_path, capped=True)
        if db_path is None:
            store.allow(con, [copy])
        for table in tables:
            con.execute(_table_sql(table, copy, sums, "TABLE" if db_path is not None else "VIEW"))
        for table, parts in derived.items():
            bulk.show(con, table, parts)
    except (duckdb.Error, OSError, KeyError, IndexError, ValueError, TypeError, AttributeError):
        if con is not None:
            con.close()
        _remove(copy)
        return None  # a damaged or half-written entry: parse again
    os.utime(entry)  # recently used: kept longest
    if db_path is not None:
        _remove(copy)
        return con, meta, {}
    as_read = set(meta["as_read"])
    return con, meta, {t["name"]: copy / t["files"][0] for t in tables if t["name"] in as_read and len(t["files"]) == 1}


def _table_sql(table: dict, copy: Path, sums: dict, kind: str) -> str:
    """``CREATE VIEW|TABLE name AS SELECT CAST(c AS type) AS c, ... FROM read_parquet(files)``
    for one table of a manifest; ValueError for a file the entry's sums do not hold or a type
    of another shape than ``_TYPE``."""
    name, files, columns = table["name"], table["files"], table["columns"]
    if not isinstance(name, str) or not isinstance(files, list) or not files or not columns or \
            any(file not in sums or file == _MANIFEST for file in files):
        raise ValueError("damaged cache manifest")
    for column, dtype in columns:
        if not isinstance(column, str) or not isinstance(dtype, str) or not _TYPE.fullmatch(dtype):
            raise ValueError("damaged cache manifest")
    return store.over_parquet(name, columns, [copy / file for file in files], kind)


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
        report = json.loads(text.decode("utf-8"), object_hook=_decoded)
        if not _whole_report(report):
            raise ValueError("not a whole report")
        con.execute("CREATE OR REPLACE TABLE findings AS SELECT * FROM read_parquet(?)",
                    [str(entry / "findings.parquet")])
    except (duckdb.Error, OSError, ValueError, AttributeError, TypeError):
        return None   # no entry, or a damaged one: the rules run again
    os.utime(entry)
    return report


_REPORT_KEYS = {"schema", "verdict", "outcome", "findings", "actions", "missing_evidence", "inputs", "run"}
# A time in a report (an outcome sign's ``ts``) is kept as a time: each format writes its own way
# (JSON ``2025-11-24T11:20:21``, Markdown ``2025-11-24 11:20:21``), so a cached report must give
# it back as the datetime the rules made, not as the text of one.
_DATETIME = "$datetime"


def _encoded(value):
    if isinstance(value, datetime):
        return {_DATETIME: value.isoformat()}
    return str(value)


def _decoded(obj: dict):
    if len(obj) == 1 and isinstance(obj.get(_DATETIME), str):
        try:
            return datetime.fromisoformat(obj[_DATETIME])
        except ValueError:
            return obj
    return obj


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
        text = json.dumps(report, default=_encoded).encode("utf-8")
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


def entries(folder: Path | None = None) -> list[Path]:
    """The stores kept in the cache folder (``root()``): folders of Parquet files
    (``_ParquetEntry``) and DuckDB files (a store with a file of its own, or a COLL trace's bulk)."""
    folder = folder or root()
    return sorted([*folder.glob("*.duckdb"), *folder.glob(f"*{STORE_SUFFIX}")])


def _prune(folder: Path) -> None:
    # stores; parse entries of analyzer.tails; reports, a few per store (--gpu and the like)
    for found, keep in ((entries(folder), KEEP), (list(folder.glob("*.parsed")), KEEP),
                        (list(folder.glob("*.report")), 3 * KEEP)):
        for old in sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)[keep:]:
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
