"""What the screens read: the store (a ``Run``) and its report, loaded without Textual.

``open_store`` opens a store written by ``postmortem ingest`` or ``report --db`` read-only and
takes the report saved in it; ``analyze_paths`` ingests log folders (progress lines go to a
callback, which the loading screen shows) and runs the rules. Screens query through
``Session.frame``; long queries run in worker threads on their own cursor (``cursor``),
because one DuckDB connection must not be used by two threads at once.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import polars as pl

from postmortem.analyzer.pipeline import Run


# What the Timeline and Logs screens say when asked for a moment (``moment_of``) the run lacks.
NO_MOMENT = {"hang": "No hang in this run: progress did not stop before the first failure or the end of the logs",
             "failure": "No failure in this run: no rank logged a timeout or an error"}


class StoreError(Exception):
    """The store cannot be opened or holds no report (message names the file and the reason)."""


@dataclass
class Session:
    run: Run
    report: dict
    title: str
    _moments: list = field(default_factory=list, repr=False)   # [Moments | None] once read
    _moments_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def frame(self, sql: str, params: list | None = None) -> pl.DataFrame:
        return self.run.frame(sql, params)

    def columns(self, table: str) -> list[str]:
        return self.run.columns(table)

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A connection for one worker thread over the same database."""
        return self.run.con.cursor()

    def moments(self):
        """The hang's start and the first failure (``postmortem.views.timeline.Moments``, what the
        HTML report's per-rank picture centres on, or None when nothing has a time): read once,
        on a cursor of its own, because the Timeline and Logs screens ask from worker threads."""
        from postmortem.views.timeline import moments

        with self._moments_lock:
            if not self._moments:
                con = self.cursor()
                try:
                    self._moments.append(moments(Run(con, info=dict(self.run.info), db_path=self.run.db_path)))
                finally:
                    con.close()
            return self._moments[0]

    @property
    def culprit_ranks(self) -> list[int]:
        return list(self.report["verdict"].get("culprit", {}).get("ranks") or [])

    @property
    def culprit_nodes(self) -> list[str]:
        return list(self.report["verdict"].get("culprit", {}).get("nodes") or [])


def open_store(db: str | Path, allow_file_access: bool = False) -> Session:
    """A store read-only; its SQL cannot reach the file system unless ``allow_file_access``
    (``postmortem.analyzer.store.lock_down``)."""
    path = Path(db)
    if not path.exists():
        raise StoreError(f"{db}: no such database")
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:
        raise StoreError(f"{db}: cannot open: {exc}") from None
    from postmortem.rules.report import stored_report
    from postmortem.analyzer.store import lock_down

    report = stored_report(con)
    if report is None:
        con.close()
        raise StoreError(f"{db}: no report in this store (written by an older postmortem?); "
                         "run `postmortem ingest PATH --db FILE` again")
    if not allow_file_access:
        lock_down(con)
    return Session(Run(con, db_path=str(path)), report, _title_of(path.name.removesuffix(".duckdb")))


def analyze_paths(paths: list[str], progress: Callable[[str], None] | None = None,
                  db: str | None = None, allow_file_access: bool = False, follow_symlinks: bool = False,
                  cache_later: bool = False) -> Session:
    """Ingest ``paths`` and run the rules; ``progress`` receives each progress line (files, MB,
    MB/s, then the later phases). Once the report is made, the store's SQL cannot reach the
    file system unless ``allow_file_access``. The cache entry is written while the rules run
    and finished here; ``cache_later``: it is written only once the caller calls
    ``session.run.start_cache()`` (the app: after its first screen), and the caller joins it
    (``Run.cache_written``) before the store is closed."""
    from postmortem.analyzer.budget import held_tables_bytes
    from postmortem.analyzer.pipeline import analyze
    from postmortem.rules.report import build_report
    from postmortem.analyzer.store import lock_down

    run = analyze(paths, db_path=db, progress_stream=_LineStream(progress) if progress else None,
                  follow_symlinks=follow_symlinks, background_cache=True, start_cache=not cache_later)
    if progress:
        progress("running the rules")
    report = build_report(run)
    run.keep_at_most(held_tables_bytes())   # the rules read most tables once; the screens few
    if not cache_later:
        run.cache_written()
    elif run.pending_cache is not None:
        # The entry is copied while the first screen is drawn and read: DuckDB on one core, the
        # other left to the screen (the screens' queries take as long on one DuckDB thread:
        # 1,024-rank run, measured). Set before lock_down, which locks every setting.
        run.con.execute("SET threads = 1")
    if not allow_file_access:
        lock_down(run.con)
    names = sorted({Path(p).name for p in paths})
    return Session(run, report, _title_of(", ".join(names)))


def _title_of(name: str) -> str:
    return name[:60] + ("…" if len(name) > 60 else "")


class _LineStream(io.TextIOBase):
    """A text stream that hands each redrawn progress line (``\\r``-separated) to a callback."""

    def __init__(self, callback: Callable[[str], None]):
        self.callback = callback

    def write(self, text: str) -> int:
        for part in text.replace("\n", "\r").split("\r"):
            if part.strip():
                self.callback(part.strip())
        return len(text)

    def flush(self) -> None:
        pass


def moment_of(moments, which: str) -> tuple | None:
    """(time as logged, (input_id, line_no) or None, rank or None, words for the notification) of
    the hang's start or the first failure in ``moments`` (``postmortem.views.timeline.Moments``);
    None when the run has none. The Timeline and Logs screens go to them (keys H and F)."""
    if moments is None:
        return None
    if which == "hang":
        if moments.hang_start is None:
            return None
        how = "the last step" if moments.last_step and moments.last_step[0] == moments.hang_start \
            else "collectives last completed"
        return moments.hang_start, None, None, f"Hang's start {moments.hang_start:%H:%M:%S}: {how}, then no progress"
    fail = moments.first_failure
    if fail is None:
        return None
    who = f"rank {fail.rank}" if fail.rank is not None else fail.node or "the job"
    return fail.ts, fail.line, fail.rank, f"First failure {fail.ts:%H:%M:%S}: a {fail.kind} of {who}"
