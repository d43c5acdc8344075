"""Parse every input (in parallel) into frames: the per-line index and the parsers' tables.

One input goes bytes -> envelope -> every applicable parser -> tables stamped with
``input_id``. Nothing here decides ranks or attempts (``analyzer.identity`` does, over all
inputs at once). A file that cannot be read yields a message naming it and the reason;
the others are still analysed.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field

import polars as pl

import parsers
from analyzer.discover import InputError, InputFile, read_bytes, sniff
from parsers.lines import envelope_frame, split_inputs


@dataclass
class FileResult:
    input_id: int
    item: InputFile
    lines: pl.DataFrame | None = None
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    error: str | None = None
    # What the per-file parsers understood: frames of (input_id, line_no, parser), see _claims.
    claims: list[pl.DataFrame] = field(default_factory=list)


@dataclass
class Batched:
    """What the batched parsers gave for all inputs at once: their tables (input_id and
    line_no already mapped back) and the lines they understood, kept whole for ``_combine``."""
    tables: dict[str, list[pl.DataFrame]] = field(default_factory=dict)
    claims: list[pl.DataFrame] = field(default_factory=list)


@dataclass
class Parsed:
    inputs: pl.DataFrame
    lines: pl.DataFrame
    tables: dict[str, pl.DataFrame]
    messages: list[str]
    items: list[InputFile]


def read_input(input_id: int, item: InputFile) -> tuple[FileResult, bytes | None]:
    """Read and sniff one input. Whole-file formats (nsys, Flight Recorder, Kineto) are parsed
    here; for a text input the bytes come back, to be enveloped with the others."""
    result = FileResult(input_id, item)
    if item.compression is None and _is_sqlite(item):
        # Nsight Systems SQLite exports (issue 8) are read from the file by parsers.nsys;
        # other SQLite files are skipped there with a message. No `lines` rows.
        return _parse_nsys(result), None
    try:
        data = read_bytes(item)
        item.kind = sniff(item, data)
    except InputError as exc:
        item.kind = "skipped"
        result.error = str(exc)
        return result, None
    except OSError as exc:
        item.kind = "skipped"
        result.error = f"{item.display}: cannot read: {exc.strerror or exc}"
        return result, None
    if item.kind == "flight_recorder":
        # Flight Recorder dumps (pickle or JSON) are not line logs: their tables come whole
        # from parsers.flight_recorder (safe unpickler); they have no `lines` rows.
        return _parse_flight_recorder(result, data), None
    if item.kind == "kineto":
        # PyTorch profiler / Kineto traces (issue 8): tables come whole from parsers.kineto.
        return _parse_kineto(result, data), None
    return result, data


def parse_text(result: FileResult, lines: pl.DataFrame, gates: dict[str, set[int]] | None = None) -> FileResult:
    """The per-file parsers over one text input's enveloped lines (the batched ones run later
    over all inputs at once: ``_parse_batched``). ``gates`` (``file_gates``): a gated parser
    runs only on the inputs listed for it."""
    item, input_id = result.item, result.input_id

    def passes(module) -> bool:
        return gates is None or module.NAME not in gates or input_id in gates[module.NAME]
    if item.kind == "log" and passes(parsers.envdump) and parsers.envdump.looks_like_env_dump(lines):
        item.kind = "env"
    chosen = parsers.ENV_PARSERS if item.kind == "env" else \
        [m for m in parsers.LOG_PARSERS if m not in parsers.BATCHED and passes(m)]
    for module in chosen:
        try:
            parsed = module.parse(lines)
        except Exception as exc:  # a parser bug must not cost the rest of the run
            item.problems.append(f"parser {module.NAME} failed ({type(exc).__name__}: {exc}); "
                                 "its lines are counted as unparsed")
            continue
        for name, frame in parsed.tables.items():
            if frame.is_empty():
                continue
            frame = frame.with_columns(input_id=pl.lit(input_id, dtype=pl.UInt32), parser=pl.lit(module.NAME))
            result.tables.setdefault(name, []).append(frame)
        if len(parsed.consumed):
            result.claims.append(_claims(module.NAME, pl.DataFrame({"line_no": parsed.consumed}), input_id))
    result.lines = lines.with_columns(input_id=pl.lit(input_id, dtype=pl.UInt32))
    result.tables = {name: pl.concat(frames, how="diagonal_relaxed") for name, frames in result.tables.items()}
    return result


def _read_whole(result: FileResult, name: str, label: str, read, refused: type[Exception],
                refusal_names_file: bool = True, problem_prefix: str = "") -> FileResult:
    """A whole-file input (no ``lines`` rows): its reader's tables stamped with the input, its
    problems kept. A refusal (not this format, damaged) or a reader bug skips the file with a
    message naming it; the rest of the run is still analysed."""
    item = result.item
    try:
        tables, problems = read()
    except refused as exc:
        item.kind = "skipped"
        result.error = str(exc) if refusal_names_file else f"{item.display}: {exc}"
        return result
    except Exception as exc:  # a reader bug must not cost the rest of the run
        item.kind = "skipped"
        result.error = f"{item.display}: {label} reader failed ({type(exc).__name__}: {exc}); skipped"
        return result
    item.problems.extend(f"{problem_prefix}{p}" for p in problems)
    for table, frame in tables.items():
        if not frame.is_empty():
            result.tables[table] = frame.with_columns(input_id=pl.lit(result.input_id, dtype=pl.UInt32),
                                                      parser=pl.lit(name))
    return result


def _parse_flight_recorder(result: FileResult, data: bytes) -> FileResult:
    """Flight Recorder dumps, pickle (safe unpickler) or JSON."""
    from parsers import flight_recorder

    def read():
        parsed, problems = flight_recorder.parse_dump(data, result.item.display)
        return parsed.tables, problems
    return _read_whole(result, flight_recorder.NAME, "Flight Recorder", read, flight_recorder.NotFlightRecorder,
                       refusal_names_file=False, problem_prefix="Flight Recorder dump: ")


def _is_sqlite(item: InputFile) -> bool:
    try:
        with open(item.path, "rb") as handle:
            return handle.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def _parse_nsys(result: FileResult) -> FileResult:
    """Issue 8: an nsys export -> kernels, nvtx, memcpy, gpu_memory, gpus, profile_* tables."""
    from parsers import nsys

    item = result.item
    ok, why = nsys.is_nsys_export(item.path)
    if not ok:
        item.kind, result.error = "skipped", f"{item.display}: {why}; skipped"
        return result
    result = _read_whole(result, nsys.NAME, "nsys", lambda: nsys.read(item.path, item.display), nsys.NsysError)
    if result.error is None:
        item.kind = "nsys"
    return result


def _parse_kineto(result: FileResult, data: bytes) -> FileResult:
    """Issue 8: a Kineto trace -> kernels, cpu_ops, profile_* tables."""
    from parsers import kineto

    return _read_whole(result, kineto.NAME, "Kineto", lambda: kineto.read(data, result.item.display),
                       kineto.KinetoError)


def _parse_batched(results: list[FileResult]) -> Batched:
    """Run the batched parsers once over the lines of every log input that mentions them.

    A job folder holds hundreds of small per-rank files; a parser that makes a few dozen
    Polars calls per input pays that overhead per file. These parsers get one frame of all
    inputs instead, with ``line_no`` renumbered to a global row; their rows are mapped back to
    (input_id, line_no) here, so to them and to everything after them nothing changes."""
    batched = Batched()
    texts = [r for r in results if r.lines is not None and r.item.kind in ("log", "pyspy")]
    for module in parsers.BATCHED:
        literal = getattr(module, "BATCH_LITERAL", None)
        # Parsers written for the batch (they declare a BATCH_LITERAL) read logs; the ones that
        # used to run per file read what they read there: logs and py-spy dumps.
        kinds = ("log",) if literal is not None else ("log", "pyspy")
        chosen = [r for r in texts if r.item.kind in kinds
                  and (not literal or r.lines["text"].str.contains(literal, literal=True).any())]
        if not chosen:
            continue
        combined = pl.concat([r.lines for r in chosen], how="vertical_relaxed")
        mapping = combined.select(_row=pl.int_range(1, pl.len() + 1, dtype=pl.UInt32), input_id="input_id", _line="line_no")
        try:
            parsed = module.parse(combined.with_columns(line_no=mapping["_row"]))
        except Exception as exc:  # a parser bug must not cost the rest of the run
            for r in chosen:
                r.item.problems.append(f"parser {module.NAME} failed ({type(exc).__name__}: {exc}); "
                                       "its lines are counted as unparsed")
            continue
        for name, frame in parsed.tables.items():
            if frame.is_empty():
                continue
            more = getattr(module, "LINE_NUMBER_COLUMNS", {}).get(name, ())
            frame = _unbatch(frame, mapping, more).with_columns(parser=pl.lit(module.NAME))
            batched.tables.setdefault(name, []).append(frame)
        consumed = mapping.filter(pl.col("_row").is_in(parsed.consumed.implode()))
        batched.claims.append(_claims(module.NAME, consumed.select("input_id", line_no="_line")))
    return batched


def _claims(parser: str, rows: pl.DataFrame, input_id: int | None = None) -> pl.DataFrame:
    """(input_id, line_no, parser) rows: the lines a parser understood."""
    if input_id is not None:
        rows = rows.with_columns(input_id=pl.lit(input_id, dtype=pl.UInt32))
    return rows.select(pl.col("input_id").cast(pl.UInt32), pl.col("line_no").cast(pl.UInt32),
                       parser=pl.lit(parser))


def _unbatch(frame: pl.DataFrame, mapping: pl.DataFrame, more: tuple[str, ...] = ()) -> pl.DataFrame:
    """Global rows back to (input_id, line_no) in every line-number column of a batched table:
    ``line_no``, ``table_line`` and the ones a parser lists in ``LINE_NUMBER_COLUMNS``."""
    out = frame.join(mapping, left_on="line_no", right_on="_row", how="left", maintain_order="left").with_columns(
        line_no=pl.col("_line")).drop("_line")
    for column in ("table_line", *more):
        if column in out.columns:
            back = mapping.select(pl.col("_row").alias(column), _t=pl.col("_line").cast(out.schema[column]))
            out = out.join(back, on=column, how="left", maintain_order="left").with_columns(
                pl.col("_t").alias(column)).drop("_t")
    return out


def _assign_kinds(lines: pl.DataFrame, claims: list[pl.DataFrame]) -> pl.DataFrame:
    """``kind``: the first parser in ``parsers.ALL_PARSERS`` order that understood the line
    (whether it ran per file or batched), else "blank" for a blank line (NCCL puts one before
    every WARN: understood), else null (unparsed)."""
    priority = {m.NAME: i for i, m in enumerate(parsers.ALL_PARSERS)}
    names = pl.DataFrame({"_p": list(priority.values()), "kind": list(priority)},
                         schema={"_p": pl.Int32, "kind": pl.String})
    if claims:
        ranked = pl.concat(claims).with_columns(_p=pl.col("parser").replace_strict(priority, return_dtype=pl.Int32))
        first = ranked.group_by("input_id", "line_no").agg(pl.col("_p").min()).join(names, on="_p")
        lines = lines.join(first.drop("_p"), on=["input_id", "line_no"], how="left", maintain_order="left")
    else:
        lines = lines.with_columns(kind=pl.lit(None, dtype=pl.String))
    blank = pl.col("text").str.strip_chars() == ""
    return lines.with_columns(kind=pl.when(pl.col("kind").is_null() & blank).then(pl.lit("blank"))
                              .otherwise(pl.col("kind")))


# Per-file parsers with a ``file_gate`` run only on inputs where some line passes it, decided
# for a whole chunk of inputs in one Polars call (a per-file parser costs a few ms per input
# even when it finds nothing; a job folder has thousands of inputs). Off only in the test that
# holds the gates to the ungated result.
USE_FILE_GATES = True


def file_gates(input_ids: list[int], frame: pl.DataFrame) -> dict[str, set[int]]:
    """Per gated parser (and the env-dump check): the inputs with a line it could start from.
    ``frame``: ``parsers.lines.envelope_frame`` of a chunk, whose ``_input`` indexes ``input_ids``."""
    modules = [m for m in (*parsers.LOG_PARSERS, parsers.envdump)
               if m not in parsers.BATCHED and hasattr(m, "file_gate")]
    hits = frame.group_by("_input").agg([m.file_gate(pl.col("text")).any().alias(m.NAME) for m in modules])
    return {m.NAME: {input_ids[i] for i in hits.filter(pl.col(m.NAME).fill_null(False))["_input"].to_list()}
            for m in modules}


# Text inputs are enveloped together up to this many bytes at a time: few Polars calls for a
# folder of small per-rank files, and the raw bytes held at once stay bounded.
CHUNK_BYTES = 64 * 2**20


def parse_all(items: list[InputFile], progress: bool | Progress = False) -> Parsed:
    """Parse inputs; results come back in input order.

    Inputs are read one after another; text inputs are enveloped in chunks of up to
    ``CHUNK_BYTES`` (``parsers.lines.envelope_frame``), and most line parsers then run once over
    all inputs (``_parse_batched``). Each Polars operation already uses every core. ``progress``:
    a ``Progress`` (or True for a new one) shows files, bytes and rate on one updating line.
    """
    meter = progress if isinstance(progress, Progress) else Progress(bool(progress))
    meter.start(len(items), sum(i.size for i in items))
    results: list[FileResult] = []
    pending: list[tuple[FileResult, bytes]] = []

    def envelope_pending() -> None:
        if not pending:
            return
        combined = envelope_frame([data for _, data in pending])
        gates = file_gates([result.input_id for result, _ in pending], combined) if USE_FILE_GATES else None
        for (result, _), lines in zip(pending, split_inputs(combined, len(pending))):
            parse_text(result, lines, gates)
            meter.advance(result.item.size)
        pending.clear()

    for input_id, item in enumerate(items):
        result, data = read_input(input_id, item)
        results.append(result)
        if data is None:
            meter.advance(item.size)
            continue
        pending.append((result, data))
        if sum(len(d) for _, d in pending) >= CHUNK_BYTES:
            envelope_pending()
    envelope_pending()
    meter.finish()
    return _combine(results, _parse_batched(results))


def progress_wanted(quiet: bool = False, stream=None) -> bool:
    """Progress goes to stderr when it is a terminal; never with ``--quiet``.
    ``POSTMORTEM_PROGRESS=1`` forces it on (tests, CI logs), ``=0`` off."""
    if quiet:
        return False
    forced = os.environ.get("POSTMORTEM_PROGRESS", "").strip().lower()
    if forced in ("1", "true", "yes", "on"):
        return True
    if forced in ("0", "false", "no", "off"):
        return False
    stream = stream if stream is not None else sys.stderr
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """One updating line on stderr: ``parsed 12/40 files, 85.3/120.0 MB, 42.1 MB/s``.

    Redrawn at most every ``every`` seconds (and always at the end); a disabled one does nothing."""

    def __init__(self, enabled: bool, stream=None, every: float = 0.1) -> None:
        self.enabled = enabled
        self.stream = stream
        self.every = every
        self.total_files = self.total_bytes = self.files = self.bytes = 0
        self._started = self._drawn = 0.0
        self._drawn_at = -1
        self._width = 0

    def start(self, total_files: int, total_bytes: int) -> None:
        self.total_files, self.total_bytes = total_files, total_bytes
        self.files = self.bytes = 0
        self._started = time.perf_counter()
        self._drawn = 0.0

    def advance(self, nbytes: int) -> None:
        self.files += 1
        self.bytes += nbytes
        if self.enabled and time.perf_counter() - self._drawn >= self.every:
            self._draw(self._line())

    def finish(self) -> None:
        """The final counts, and the line is ended."""
        if self.enabled and self.total_files:
            if self._drawn_at != self.files:
                self._draw(self._line())
            self._end()

    def status(self, text: str) -> None:
        """A free-form status on the same line (archive extraction, later phases)."""
        if self.enabled:
            self._draw(f"postmortem: {text}")

    def close(self) -> None:
        """Clear a status line that is still showing."""
        if self.enabled and self._width:
            stream = self.stream if self.stream is not None else sys.stderr
            stream.write("\r" + " " * self._width + "\r")
            stream.flush()
            self._width = 0

    def _line(self) -> str:
        elapsed = max(time.perf_counter() - self._started, 1e-6)
        return (f"postmortem: parsed {self.files}/{self.total_files} files, {_mb(self.bytes)}/"
                f"{_mb(self.total_bytes)} MB, {self.bytes / 1e6 / elapsed:.1f} MB/s")

    def _draw(self, text: str) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        pad = max(self._width - len(text), 0)
        stream.write("\r" + text + " " * pad)
        stream.flush()
        self._width = len(text)
        self._drawn = time.perf_counter()
        self._drawn_at = self.files

    def _end(self) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        if self._width:
            stream.write("\n")
            stream.flush()
        self._width = 0


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f}" if n >= 100_000 else f"{n / 1e6:.3f}"


def _combine(results: list[FileResult], batched: Batched) -> Parsed:
    messages = [r.error for r in results if r.error]
    for r in results:
        messages.extend(f"{r.item.display}: {p}" for p in r.item.problems)
    line_frames = [r.lines for r in results if r.lines is not None and not r.lines.is_empty()]
    claims = [c for r in results for c in r.claims] + batched.claims
    lines = _assign_kinds(pl.concat(line_frames, how="diagonal_relaxed"), claims) if line_frames else pl.DataFrame()
    tables: dict[str, list[pl.DataFrame]] = {}
    for r in results:
        for name, frame in r.tables.items():
            tables.setdefault(name, []).append(frame)
    merged = {}
    for name in tables.keys() | batched.tables.keys():
        frame = pl.concat(tables.get(name, []) + batched.tables.get(name, []), how="diagonal_relaxed")
        # per input: its per-file rows, then each batched parser's (a stable sort keeps that order)
        merged[name] = frame.sort("input_id", maintain_order=True) if name in batched.tables else frame
    return Parsed(_inputs_frame(results, lines), lines, merged, messages, [r.item for r in results])


def _inputs_frame(results: list[FileResult], lines: pl.DataFrame) -> pl.DataFrame:
    counts = {} if lines.is_empty() else {
        i: (n, p) for i, n, p in lines.group_by("input_id").agg(n=pl.len(), p=pl.col("kind").is_not_null().sum()).iter_rows()}
    rows = []
    for r in results:
        total, parsed = counts.get(r.input_id, (0, 0))
        rows.append({
            "input_id": r.input_id, "path": r.item.display, "abs_path": r.item.source or str(r.item.path),
            "kind": r.item.kind, "compression": r.item.compression, "bytes": r.item.size,
            "mtime": r.item.mtime, "lines": total, "parsed_lines": parsed,
            "unparsed_lines": total - parsed,
            "problem": "; ".join(([r.error] if r.error else []) + r.item.problems) or None,
        })
    schema = {"input_id": pl.UInt32, "path": pl.String, "abs_path": pl.String, "kind": pl.String,
              "compression": pl.String, "bytes": pl.Int64, "mtime": pl.Float64, "lines": pl.Int64,
              "parsed_lines": pl.Int64, "unparsed_lines": pl.Int64, "problem": pl.String}
    return pl.DataFrame(rows, schema=schema)
