"""Re-parse only the new tail of a growing log (a live hang): the parse cache.

The store cache (``postmortem.analyzer.cache``) answers only when no input changed. A job that is still
hanging keeps appending to a few of its logs (watchdog lines, periodic work updates) while the
engineer runs ``postmortem`` again and again. So after every parse the parse-level result is
kept too, one entry per set of input paths: the frames ``parse_all`` gave (``lines``, every
table), the COLL trace bulk's files, and per input its size, mtime and a checksum of its bytes.

On the next analysis of the same paths, when every input is unchanged or has only *grown*
(larger, its old bytes unchanged, an uncompressed log), the old frames are reused and each grown log is parsed again from a restart line
``BACK_OFF`` lines before its old end (so that a record being written at that moment, a
traceback or a py-spy dump, is read whole), at the first line there that starts a record.
The old rows from that line on are dropped, the tail's rows added; identity, the models and
the rules then run over the whole run as always. Logs that per-file parsers read (kernel logs,
scheduler records, tool output: their state is the whole file) are parsed again whole.

Limits: a record longer than ``BACK_OFF`` lines that spans the old end is read in two parts;
the launcher-prefix decisions of ``postmortem.parsers.lines`` (pdsh host tags, ``[N]`` rank tags) are taken
on the tail alone. tests/test_tails.py holds the result to a full parse.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

import duckdb
import polars as pl

from postmortem import parsers
from postmortem.analyzer import bulk, store
from postmortem.analyzer.discover import InputFile, open_input, path_text
from postmortem.analyzer.ingest import ChunkResult, Parsed, Piece, _combine, parse_chunk

BACK_OFF = 2000
_PER_FILE = {m.NAME for m in parsers.PER_FILE} | {m.NAME for m in parsers.ENV_PARSERS}


def paths_key(items: list[InputFile], code_version: str) -> str:
    digest = hashlib.sha256(code_version.encode())
    for item in items:
        digest.update(f"{item.display}\0{path_text(item.source or item.path)}\n".encode())
    return digest.hexdigest()[:32]


def fingerprint(item: InputFile, size: int) -> str | None:
    """A CRC-32 of the file's first ``size`` bytes, read a block at a time (a few GB/s: cheap
    beside parsing); None for what cannot be read back by offset (compressed files, archive
    members) and for inputs that are not logs."""
    return _crc(item.path, size) if _read_back(item) else None


def _read_back(item: InputFile) -> bool:
    """Whether ``fingerprint`` reads the input: a plain log, not compressed, not an archive member."""
    return item.compression is None and not item.source and item.kind == "log"


def _crc(path: Path, size: int) -> str | None:
    """``fingerprint`` of the file at ``path`` (a log input)."""
    crc, left = 0, size
    try:
        with open_input(path) as handle:
            while left > 0 and (block := handle.read(min(left, 8 << 20))):
                crc = zlib.crc32(block, crc)
                left -= len(block)
    except OSError:
        return None
    return f"{crc:08x}" if left == 0 else None


def _link_or_copy(source, target) -> None:
    """A bulk file into the cache or back: a hard link where both are on one file system (a
    bulk file is never written again once made; removing the spool removes only its name),
    else a copy."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def save(folder: Path, key: str, parsed: Parsed, sink: bulk.Sink, start: bool = True) -> threading.Thread | None:
    """Keep ``parsed`` and the bulk ``sink`` staged as the parse entry of ``key``.

    The bulk files and the manifest are taken here; the frames are written, and the entry put in
    place, by the thread returned (the caller joins it): writing the 1,024-rank run's frames
    takes about half a second, while the models run beside it. ``start`` False: the thread is
    returned unstarted, for the caller to start when it has a core to spare (the TUI, once its
    first screen is up); it holds the parsed frames until then."""
    if sink.skim_files:     # a skimmed run is parsed again in full next time (its frames are partial)
        return None
    entry = folder / f"{key}.parsed"
    part = folder / f".{key}.{uuid.uuid4().hex}.parsed-part"
    try:
        part.mkdir(parents=True)
        kept = []
        if sink.con is not None and bulk.staged(sink.con):
            (part / "bulk").mkdir()
            if sink.old_files:   # an old parse's files, some rows left out: what the view shows, as one
                sink.con.execute(f"COPY {bulk.TABLE} TO '{store.sql_path(part / 'bulk' / '0.parquet')}' "
                                 "(FORMAT parquet, COMPRESSION zstd)")
                kept = ["0.parquet"]
            else:
                for n, path in enumerate(sink.files):
                    _link_or_copy(path, part / "bulk" / f"{n}.parquet")
                kept = [f"{n}.parquet" for n in range(len(sink.files))]
        manifest = {"items": [{"display": i.display, "path": str(i.path), "source": i.source, "size": i.size,
                               "mtime": i.mtime, "compression": i.compression, "kind": i.kind,
                               "problems": list(i.problems), "error": e, "fingerprint": None}
                              for i, e in zip(parsed.items, parsed.errors)],
                    "tables": sorted(parsed.tables), "bulk": kept}
        # the logs' fingerprints are read by the thread (a read of every log: 0.3 s at 10,000 ranks)
        logs = [(n, i.path, i.size) for n, i in enumerate(parsed.items) if _read_back(i)]
    except (OSError, duckdb.Error):
        shutil.rmtree(part, ignore_errors=True)   # costs speed next time, never the report
        return None
    frames = {"lines.arrow": parsed.lines, **{f"table.{name}.arrow": frame for name, frame in parsed.tables.items()}}
    writer = threading.Thread(target=_write_entry, args=(part, entry, frames, manifest, logs),
                              name="postmortem-parse-entry")
    if start:
        writer.start()
    return writer


def _write_entry(part: Path, entry: Path, frames: dict[str, pl.DataFrame], manifest: dict,
                 logs: list[tuple[int, Path, int]]) -> None:
    """The frames and the manifest, with the fingerprints of its ``logs`` (the item's place in
    the manifest, its path and the size parsed), into ``part``, then ``part`` renamed to ``entry``."""
    try:
        for n, path, size in logs:
            manifest["items"][n]["fingerprint"] = _crc(path, size)
        for name, frame in frames.items():
            # LZ4: the 1,024-rank run's entry 315 -> 21 MB, in the same time (0.15 s more CPU)
            frame.write_ipc(part / name, compression="lz4")
        (part / "manifest.json").write_text(json.dumps(manifest))
        if entry.exists():
            shutil.rmtree(entry, ignore_errors=True)
        part.rename(entry)
    except (OSError, pl.exceptions.PolarsError):
        shutil.rmtree(part, ignore_errors=True)   # costs speed next time, never the report


@dataclass
class Plan:
    entry: Path
    manifest: dict
    grown: dict[int, int]          # input_id -> old size


def plan(folder: Path, key: str, items: list[InputFile]) -> Plan | None:
    """The parse entry of these paths, when every input is unchanged or has only grown (and at
    least one grew); else None."""
    entry = folder / f"{key}.parsed"
    try:
        manifest = json.loads((entry / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    old = manifest["items"]
    if len(old) != len(items) or any(o["display"] != i.display for o, i in zip(old, items)):
        return None
    grown = {}
    for input_id, (o, item) in enumerate(zip(old, items)):
        if (o["size"], o["mtime"]) == (item.size, item.mtime):
            continue
        if not (item.size > o["size"] and o["kind"] == "log" and o["fingerprint"]
                and fingerprint(item, o["size"]) == o["fingerprint"]):
            return None
        grown[input_id] = o["size"]
    return Plan(entry, manifest, grown) if grown else None


def reparse(plan_: Plan, items: list[InputFile], sink) -> tuple[Parsed, dict]:
    """The cached frames with each grown log's tail parsed again (see the module doc); the COLL
    bulk of both goes to ``sink``'s store. Returns the ``Parsed`` and what was re-read."""
    entry, manifest = plan_.entry, plan_.manifest
    lines = pl.read_ipc(entry / "lines.arrow")
    tables = {name: pl.read_ipc(entry / f"table.{name}.arrow") for name in manifest["tables"]}
    for item, old in zip(items, manifest["items"]):
        item.kind, item.problems = old["kind"], list(old["problems"])
    if manifest["bulk"]:   # linked or copied: the entry is replaced (``save``) before the store reads them
        Path(sink.spool).mkdir(parents=True, exist_ok=True)
        for name in manifest["bulk"]:
            _link_or_copy(entry / "bulk" / name, Path(sink.spool) / f"old-{name}")
            sink.old_files.append(str(Path(sink.spool) / f"old-{name}"))
    pieces = []
    for input_id, old_size in sorted(plan_.grown.items()):
        restart, offset = _restart(lines, tables, input_id)
        pieces.append(Piece(input_id, items[input_id], offset, items[input_id].size, restart - 1))
        lines = lines.filter((pl.col("input_id") != input_id) | (pl.col("line_no") < restart))
        tables = {name: _before(frame, input_id, restart) for name, frame in tables.items()}
        sink.dropped.append((input_id, restart))
    tail = parse_chunk(pieces, sink.spool)
    for path in tail.bulk_files:
        sink.add(path)
    sink.stage()
    counts: dict[int, int] = {}
    if sink.rows:   # the bulk left of the old parse and the tails' (counted once, here)
        counts = dict(sink.con.execute(f"SELECT input_id, count(*) FROM {bulk.TABLE} GROUP BY 1").fetchall())
        lines = _reweighted(lines, sink.con, list(plan_.grown))
    tail.bulk_counts = {}
    old = ChunkResult(list(range(len(items))), items, lines, tables,
                      [o["error"] for o in manifest["items"]], bulk_counts=counts)
    for input_id, theirs in zip(tail.ids, tail.items):
        items[input_id].problems = list(dict.fromkeys(items[input_id].problems + theirs.problems))
    parsed = _combine([old, tail], items)
    parsed.lines = parsed.lines.sort("input_id", "line_no", maintain_order=True)
    parsed.tables = {name: frame.sort("input_id", maintain_order=True) if "input_id" in frame.columns else frame
                     for name, frame in parsed.tables.items()}
    return parsed, {"tail_inputs": len(pieces), "tail_bytes": sum(p.size for p in pieces)}


def _restart(lines: pl.DataFrame, tables: dict[str, pl.DataFrame], input_id: int) -> tuple[int, int]:
    """(line, byte offset) to parse a grown log again from: ``BACK_OFF`` lines before its old
    last line, at a line that starts a record; line 1 when a per-file parser read the log."""
    for frame in tables.values():
        if "parser" in frame.columns and "input_id" in frame.columns:
            mine = frame.filter(pl.col("input_id") == input_id)
            if not mine.is_empty() and (mine["parser"].is_in(list(_PER_FILE)).any() or "line_no" not in frame.columns):
                return 1, 0
    mine = lines.filter(pl.col("input_id") == input_id)
    if mine.is_empty():
        return 1, 0
    last = int(mine["line_no"].max())
    starts = mine.filter((pl.col("line_no") <= last - BACK_OFF)
                         & (pl.col("text").is_null() | ~pl.col("text").str.contains(r"^\s")))
    if starts.is_empty():
        return 1, 0
    row = starts.sort("line_no").tail(1)
    return int(row["line_no"][0]), int(row["offset"][0])


def _before(frame: pl.DataFrame, input_id: int, restart: int) -> pl.DataFrame:
    if "input_id" not in frame.columns or "line_no" not in frame.columns:
        return frame
    return frame.filter((pl.col("input_id") != input_id) | (pl.col("line_no") < restart))


def _reweighted(lines: pl.DataFrame, con: duckdb.DuckDBPyConnection, inputs: list[int]) -> pl.DataFrame:
    """``_w`` of the first lines of runs in grown logs: what is left of their runs."""
    if "_w" not in lines.columns or not bulk.staged(con):
        return lines
    left = con.sql(f"SELECT input_id, run_line, count(*) + 1 FROM {bulk.TABLE} WHERE input_id IN "
                   f"({','.join(map(str, inputs))}) GROUP BY ALL").pl()
    left.columns = ["input_id", "line_no", "_left"]
    left = left.with_columns(pl.col("input_id").cast(pl.UInt32), pl.col("line_no").cast(pl.UInt32),
                             pl.col("_left").cast(pl.UInt32))
    grown = pl.col("input_id").is_in(inputs) & (pl.col("_w") > 1)
    return lines.join(left, on=["input_id", "line_no"], how="left", maintain_order="left").with_columns(
        _w=pl.when(grown).then(pl.col("_left").fill_null(1)).otherwise(pl.col("_w"))).drop("_left")
