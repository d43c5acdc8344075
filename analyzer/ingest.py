"""Parse every input into frames: the per-line index and the parsers' tables.

Inputs are cut into chunks of about ``CHUNK_BYTES`` (a large log into segments at line
starts); each chunk goes bytes -> envelope -> the per-file parsers, and a few consecutive
chunks (a job) then go through the batched parsers together -> tables stamped with
``input_id``, in worker processes for large runs. A chunk's COLL trace bulk is written to a
Parquet file the store reads at the end (``postmortem.analyzer.bulk``); the rest is combined in input
order, so the result does not depend on how the run was cut or how many workers parsed it.
Nothing here decides ranks or attempts (``postmortem.analyzer.identity`` does, over all inputs at once).
A file that cannot be read yields a message naming it and the reason; the others are still
analysed.
"""

from __future__ import annotations

import functools
import io
import os
import re
import sys
import time
import types
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from itertools import islice
from pathlib import Path

import polars as pl

from postmortem import parsers
from postmortem.analyzer import bulk
from postmortem.analyzer import budget
from postmortem.analyzer.discover import (SMALL_DECOMPRESSED, Capped, InputError, InputFile, capped_bytes, cut_message,
                               decode_to, is_utf16, leading_nuls, max_decompressed, open_input, open_input_fd, path_text,
                               read_capped, read_fd, sniff)
from postmortem.parsers.ascii_text import all_ascii, reading
from postmortem.parsers.base import ParseResult, Unreadable, WholeFile, among, collect_each
from postmortem.parsers.lines import by_input, envelope_frame, input_bounds


@dataclass
class FileResult:
    input_id: int
    item: InputFile
    text: bool = False      # read as text: its lines are in its chunk's (``_Prepared.whole``)
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    error: str | None = None
    # What the per-file parsers understood: frames of (input_id, line_no, parser), see _claims.
    claims: list[pl.DataFrame] = field(default_factory=list)
    capped: Capped | None = None    # how a text input's bytes were read (cut lines, leading NULs)


@dataclass
class Batched:
    """What the batched parsers gave for all inputs at once: their tables (input_id and
    line_no already mapped back) and the lines they understood, kept whole for ``_combine``."""
    tables: dict[str, list[pl.DataFrame]] = field(default_factory=dict)
    claims: list[pl.LazyFrame] = field(default_factory=list)     # plans: ``_Numbered.claims``

    def take(self, other: "Batched") -> "Batched":
        for name, frames in other.tables.items():
            self.tables.setdefault(name, []).extend(frames)
        self.claims.extend(other.claims)
        return self


@dataclass
class Parsed:
    inputs: pl.DataFrame
    lines: pl.DataFrame
    tables: dict[str, pl.DataFrame]
    messages: list[str]
    items: list[InputFile]
    errors: list[str | None] = field(default_factory=list)   # per input: why it was skipped


def read_input(input_id: int, item: InputFile, piece=None) -> tuple[FileResult, bytes | None, tuple | None]:
    """Read and sniff one input. For a text input the bytes come back, to be enveloped with the
    others (lines longer than the cap cut, leading NULs skipped, CR line ends read as lines:
    ``result.capped`` says where); for a whole-file format (``parsers.WHOLE_FILE``) the (reader,
    source) of the parser that claimed it, for ``_read_wholes`` to read (no ``lines`` rows).
    ``piece``: a segment of a large log (``Piece``), read from its byte range; its kind is known."""
    result = FileResult(input_id, item)
    if item.failure:
        item.kind = "skipped"
        result.error = item.failure
        return result, None, None
    try:
        if piece is not None and piece.end is not None:
            return result, _text(result, item, piece.start, piece.end), None
        if item.compression is None:
            whole = _small_plain(item)
            if whole is not None:
                nuls = len(whole) - len(whole.lstrip(b"\0")) if whole[:1] == b"\0" else 0
                head = whole[nuls:nuls + SNIFF_BYTES]
            else:
                with open_input(item.path) as handle:
                    nuls = leading_nuls(handle)
                    handle.seek(nuls)
                    head = handle.read(SNIFF_BYTES)
            if nuls and not head:
                raise InputError(f"{item.display}: only NUL bytes (a log truncated while its writer kept writing?); "
                                 "skipped")
            if is_utf16(head):
                if whole is None:
                    whole = item.path.read_bytes() if item.size <= SMALL_DECOMPRESSED else b""
                data = _utf16(item, whole)
                item.kind = sniff(item, data)
                return result, _text_of(result, item, data), None
            item.kind = sniff(item, head)
            if (reader := _whole_file_parser(item.kind)) is None:
                return result, _text(result, item, 0, None) if whole is None else _text_of(result, item, whole), None
            source = WholeFile(item.display, head, item.path, lambda: _whole(item))
        else:
            data = _small_decompressed(item)
            if is_utf16(data[:4]):
                data = _utf16(item, data)
            item.kind = sniff(item, data)
            if (reader := _whole_file_parser(item.kind)) is None:
                return result, _text_of(result, item, data), None
            source = WholeFile(item.display, data.lstrip(b"\0") if data[:1] == b"\0" else data, None, lambda: data)
    except (InputError, OSError) as exc:
        _skip(result, exc)
        return result, None, None
    return result, None, (reader, source)


def _read_wholes(claimed: list[tuple[FileResult, tuple]]) -> None:
    """``_read_whole`` of each claimed input of a chunk (``read_input``), side by side in threads
    (as many as ``worker_count`` gives parsing; one when ``$POSTMORTEM_WORKERS`` asks for
    processes), each into its own result and item, so that nothing depends on which ends first.
    A run's per-rank profiler exports cost about 0.1 s each, mostly small Polars calls that let
    go of the GIL (the straggler sample's 16: parse 1.75-2.1 -> 1.35-1.7 s). Memory stays a
    chunk's: several inputs share a chunk only when they are smaller than one together
    (``plan_chunks``), and their tables are kept until the chunk is done either way."""
    count, processes = worker_count([])
    count = 1 if processes else min(count, len(claimed))
    if count <= 1:
        for result, claim in claimed:
            _read_whole(result, *claim)
        return
    with ThreadPoolExecutor(count, thread_name_prefix="postmortem-whole") as pool:
        list(pool.map(lambda one: _read_whole(one[0], *one[1]), claimed))


# What sniffing reads of a plain input (a whole-file parser may look that deep for its key).
SNIFF_BYTES = 4 << 20
# A plain input up to this size is read in one call and handled in memory: a run of thousands of
# small per-rank logs would otherwise open each twice and read it four times (NULs, sniff, text).
SMALL_PLAIN = 4 << 20


def _small_plain(item: InputFile) -> bytes | None:
    """The whole of a small plain input (``SMALL_PLAIN``), else None (read it a block at a
    time). A file that grew past the limit since it was found is None too."""
    if item.size > SMALL_PLAIN:
        return None
    fd = open_input_fd(item.path)
    try:
        # as many bytes as the file holds (and one more), not the limit: a read of 4 MiB
        # allocates 4 MiB first, 48 us a file against 17 (31,251 inputs: 1 s of the parse's CPU)
        size = os.fstat(fd).st_size
        data = read_fd(fd, min(size, SMALL_PLAIN) + 1)
        if len(data) > size:    # it grew since: the rest, up to the limit
            data += read_fd(fd, SMALL_PLAIN + 1 - len(data))
    finally:
        os.close(fd)
    return data if len(data) <= SMALL_PLAIN else None


def _whole_file_parser(kind: str):
    """The whole-file parser (``parsers.WHOLE_FILE``) whose ``NAME`` is ``kind``, if any."""
    return next((module for module in parsers.WHOLE_FILE if module.NAME == kind), None)


def _skip(result: FileResult, exc: InputError | OSError) -> None:
    result.item.kind = "skipped"
    result.error = _why_skipped(result.item, exc)


def _why_skipped(item: InputFile, exc: InputError | OSError) -> str:
    """Why an input is skipped, naming it."""
    if isinstance(exc, OSError):
        return f"{item.display}: cannot read: {exc.strerror or exc}"
    return str(exc) if str(exc).startswith(item.display) else f"{item.display}: {exc}"


def _whole(item: InputFile) -> bytes:
    """A whole-file input, at most ``budget.whole_file_bytes``; a larger or unreadable one is
    ``Unreadable`` (its reader asks for the bytes: ``WholeFile.data``)."""
    limit = budget.whole_file_bytes()
    try:
        if item.size > limit:
            raise InputError(f"{_mb_text(item.size)} {item.kind.replace('_', ' ')} file, more than the "
                             f"{_mb_text(limit)} one file may take whole (a sixteenth of POSTMORTEM_MEMORY); skipped")
        with open_input(item.path) as handle:
            return handle.read(limit + 1)
    except (InputError, OSError) as exc:
        raise Unreadable(_why_skipped(item, exc)) from None


def _small_decompressed(item: InputFile) -> bytes:
    """A small compressed input decompressed in memory (large ones were decompressed into the
    scratch folder before parsing: ``discover.materialize``)."""
    limit = max_decompressed()
    with open_input(item.path) as handle:
        buffer = io.BytesIO()
        if limit <= SMALL_DECOMPRESSED:
            _size, problems = decode_to(handle, buffer, item.compression, False, limit)
        else:
            try:
                _size, problems = decode_to(handle, buffer, item.compression, False, SMALL_DECOMPRESSED)
            except InputError as exc:
                if "decompresses to more than" not in str(exc):
                    raise
                raise InputError(f"decompresses to more than {_mb_text(SMALL_DECOMPRESSED)} from {item.size} bytes "
                                 "(a ratio over 1000: a compression bomb?); skipped") from None
    item.problems.extend(problems)
    return buffer.getvalue()


def _utf16(item: InputFile, data: bytes) -> bytes:
    """UTF-16 text (with its BOM) as UTF-8: decoded, not skipped as binary."""
    if not data:
        raise InputError("UTF-16 text too large to decode in memory; skipped")
    item.problems.append("UTF-16 text: read as UTF-8 (offsets refer to the UTF-8 text)")
    return data.decode("utf-16", "replace").encode("utf-8", "surrogatepass")


def _line_end(item: InputFile, head: bytes) -> bytes:
    """``\r`` for a text with carriage returns and no newline at all (old Mac line ends, a log
    of progress bars), else ``\n``."""
    if item.line_end == b"\n" and b"\r" in head and b"\n" not in head:
        item.line_end = b"\r"
    return item.line_end


def _text(result: FileResult, item: InputFile, start: int, end: int | None) -> bytes:
    """A plain text input's bytes from ``start`` to ``end``, a block at a time (``read_capped``)."""
    with open_input(item.path) as handle:
        if start == 0 and item.line_end == b"\n":
            handle.seek(leading_nuls(handle))
            _line_end(item, handle.read(1 << 16))
        capped = read_capped(handle, start, end, sep=item.line_end, skip_nuls=start == 0)
    return _kept(result, item, capped)


def _text_of(result: FileResult, item: InputFile, data: bytes) -> bytes:
    """``_text`` of an input already in memory (decompressed, decoded)."""
    sep = _line_end(item, data.lstrip(b"\0")[:1 << 16])
    return _kept(result, item, capped_bytes(data, sep=sep, skip_nuls=True))


def _kept(result: FileResult, item: InputFile, capped: Capped) -> bytes:
    if capped.cuts:
        item.problems.append(cut_message(capped.cuts))
    if capped.nuls:
        item.problems.append(f"starts with {capped.nuls} NUL bytes (what logrotate's copytruncate leaves); "
                             "skipped, line numbers count from the first line after them")
    result.capped = capped
    data = capped.data
    if item.line_end == b"\r":
        if capped.start == capped.nuls:
            item.problems.append("carriage returns and no newline (old Mac line ends): read as lines")
        data = data.replace(b"\r", b"\n")    # same length: offsets stay true
    return data


def _mb_text(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


def parse_text(result: FileResult, chosen: list, lines_of: Callable[[bool], pl.DataFrame],
               at_once: dict[str, dict[int, ParseResult]]) -> FileResult:
    """The ``chosen`` per-file parsers over one text input's enveloped lines (``_parse_per_file``;
    the batched parsers run later over all inputs at once: ``_parse_batched``), their rows
    stamped with its ``input_id``. ``lines_of(nccl)``: the input's lines, every one for the NCCL
    parser, else its ``others``: the lines without whole COLL trace lines, which only the NCCL
    parser reads (``parse_chunk``). ``at_once``: per parser that read the chunk's inputs at
    once (``_parse_at_once``), the rows it gave each input; this input's share is taken as if
    the parser had read it alone (the lines it understood are the chunk's claims already)."""
    item, input_id = result.item, result.input_id
    tables: dict[str, list[pl.LazyFrame]] = {}
    claims: list[pl.LazyFrame] = []
    for module in chosen:
        if module.NAME in at_once:
            parsed = at_once[module.NAME][input_id]
        else:
            try:
                parsed = module.parse(lines_of(module is parsers.nccl).drop("input_id"))
            except Exception as exc:  # a parser bug must not cost the rest of the run
                item.problems.append(f"parser {module.NAME} failed ({type(exc).__name__}: {exc}); "
                                     "its lines are counted as unparsed")
                continue
        for name, frame in parsed.tables.items():
            if frame.is_empty():
                continue
            stamped = frame.lazy().with_columns(input_id=pl.lit(input_id, dtype=pl.UInt32), parser=pl.lit(module.NAME))
            tables.setdefault(name, []).append(stamped)
        if len(parsed.consumed):
            claims.append(_claims(module.NAME, pl.LazyFrame({"line_no": parsed.consumed}), input_id))
    # the input's tables and claims in one Polars call (a call each cost more than the work)
    done = collect_each([pl.concat(frames, how="diagonal_relaxed") for frames in tables.values()] + claims)
    result.tables = dict(zip(tables, done))
    result.claims.extend(done[len(tables):])
    return result


def _gate_passes(gates: dict[str, set[int]] | None, module, input_id: int) -> bool:
    """Whether a per-file parser reads this input (``file_gates``; no gates: every input)."""
    return gates is None or module.NAME not in gates or input_id in gates[module.NAME]


def _parse_at_once(results: list[FileResult], others: pl.DataFrame, gates: dict[str, set[int]] | None,
                   dumps: set[int]) -> tuple[dict[str, dict[int, ParseResult]], Batched]:
    """The per-file parsers that can read many inputs at once (``parsers.AT_ONCE``), each once
    over the ``others`` of the chunk's inputs it would read one at a time (those its gate
    passes, no env dump). Its rows are handed back per input: ``parse_text`` takes each input's
    share as if the parser had read that input alone; the lines it understood are claimed for
    all of them at once (the ``Batched``). (Per file, a parser of tool output costs 10-20 ms
    however short the input: a job folder holds such outputs per node.) A parser that raises
    here is left out: ``parse_text`` runs it one input at a time, so that a failure costs only
    the input it fails on."""
    out: dict[str, dict[int, ParseResult]] = {}
    claims = Batched()
    for module in parsers.AT_ONCE:
        ids = [r.input_id for i, r in enumerate(results) if i not in dumps and _gate_passes(gates, module, r.input_id)]
        if not ids:     # no input to read (nor will parse_text read one)
            continue
        numbered = _Numbered.of(others.filter(pl.col("input_id").is_in(among(pl.Series(ids, dtype=pl.UInt32)))))
        try:
            parsed = module.parse(numbered.frame)
        except Exception:  # noqa: BLE001 -- one input at a time instead (parse_text)
            continue
        out[module.NAME] = _shares(module, parsed, numbered)
        claims.claims.append(numbered.claims(module.NAME, parsed.consumed))
    return out, claims


def _shares(module, parsed: ParseResult, numbered: _Numbered) -> dict[int, ParseResult]:
    """``parsed``'s tables, a parser's rows over several inputs, as each input's own: with their
    line numbers back in the input (``input_id`` dropped)."""
    # a line-number column holding 0 (no such line) keeps it
    mapping = pl.concat([numbered.mapping, pl.DataFrame({"_row": [0], "input_id": [None], "_line": [0]},
                                                        schema=numbered.mapping.schema)])
    shares: dict[int, ParseResult] = {}
    for name, frame in _unbatched(module, parsed.tables, mapping).items():
        if not frame["input_id"].is_sorted():
            frame = frame.sort("input_id", maintain_order=True)
        # each input's rows, in their order: a slice of the frame each. (Columns picked by name and
        # a struct unnested are plain Series work; `drop` and `struct.field` are Polars calls each.)
        runs = frame["input_id"].rle().struct.unnest()
        frame, at = frame[[c for c in frame.columns if c != "input_id"]], 0
        for length, input_id in zip(runs["len"].to_list(), runs["value"].to_list()):
            shares.setdefault(input_id, ParseResult()).tables[name] = frame.slice(at, length)
            at += length
    return shares


def _read_whole(result: FileResult, module, source: WholeFile) -> FileResult:
    """A whole-file input (no ``lines`` rows): ``module.read_whole``'s tables stamped with the
    input, its problems kept. A refusal (not this format, damaged, too large to take whole) or a
    reader bug skips the file with a message naming it; the rest of the run is still analysed."""
    item = result.item
    try:
        tables, problems = module.read_whole(source)
    except Unreadable as exc:
        item.kind = "skipped"
        result.error = str(exc)
        return result
    except Exception as exc:  # a reader bug must not cost the rest of the run
        item.kind = "skipped"
        result.error = f"{item.display}: {module.LABEL} reader failed ({type(exc).__name__}: {exc}); skipped"
        return result
    item.problems.extend(problems)
    stamped = {table: frame.lazy().with_columns(input_id=pl.lit(result.input_id, dtype=pl.UInt32),
                                                parser=pl.lit(module.NAME))
               for table, frame in tables.items() if not frame.is_empty()}
    result.tables.update(zip(stamped, collect_each(list(stamped.values()))))     # every table in one call
    return result


def _parse_batched(results: list[FileResult], whole: list[tuple[pl.DataFrame, pl.DataFrame]],
                   gates: dict[str, set[int]] | None = None) -> Batched:
    """Run the batched parsers once over the lines of every log input that mentions them.

    A job folder holds hundreds of small per-rank files; a parser that makes a few dozen
    Polars calls per input pays that overhead per file. These parsers get one frame of all
    inputs instead, with ``line_no`` renumbered to a global row; their rows are mapped back to
    (input_id, line_no) here, so to them and to everything after them nothing changes. Parsers
    that read the same lines share one renumbered frame. ``whole``: the results' lines and
    ``others`` as frames of many inputs each (``_Prepared.whole``). ``gates`` (``file_gates``): a
    parser that has one reads only the inputs it passes (``_Numbered.only``)."""
    batched = Batched()
    texts = [r for r in results if r.text and r.item.kind in ("log", "pyspy")]
    frames: dict[tuple, pl.DataFrame | None] = {}   # what a module reads, concatenated once
    numbered: dict[tuple, _Numbered | None] = {}     # and renumbered once, per set of inputs
    for module in parsers.BATCHED:
        literal = getattr(module, "BATCH_LITERAL", None)
        # Parsers written for the batch (they declare a BATCH_LITERAL) read logs; the ones that
        # used to run per file read what they read there: logs and py-spy dumps.
        kinds = ("log",) if literal is not None else ("log", "pyspy")
        source = (module is parsers.nccl, kinds)
        if source not in frames:
            frames[source] = _lines_read(results, [r for r in texts if r.item.kind in kinds],
                                         module is parsers.nccl, whole)
        key = (source, literal or None)
        if key not in numbered:
            combined = frames[source]
            if combined is not None and literal:   # only the inputs that mention the literal
                mention = combined.filter(pl.col("text").str.contains(literal, literal=True))["input_id"].unique()
                combined = combined.filter(pl.col("input_id").is_in(among(mention)))
            numbered[key] = _Numbered.of(combined) if combined is not None and not combined.is_empty() else None
        chosen = numbered[key]
        if chosen is not None and gates is not None and module.NAME in gates:
            chosen = chosen.only(gates[module.NAME])
        if chosen is not None:
            _batch_parse(module, chosen, texts, batched)
    return batched


def _lines_read(results: list[FileResult], chosen: list[FileResult], nccl: bool,
                whole: list[tuple[pl.DataFrame, pl.DataFrame]]) -> pl.DataFrame | None:
    """The lines of the ``chosen`` results (every line for the NCCL parser, else their ``others``)
    as one buffer, not one per input: every Polars call on a frame of 10,000 pieces (a chunk of
    py-spy dumps) pays per piece; torch_errors took 3.0 s on it instead of 0.8. Read from
    ``whole``, whose frames hold every result with lines (not put together again from thousands
    of slices): only a choice of fewer is filtered."""
    if not chosen:
        return None
    frame = pl.concat([lines if nccl else others for lines, others in whole], how="vertical_relaxed", rechunk=True)
    if len(chosen) < sum(r.text for r in results):
        ids = pl.Series([r.input_id for r in chosen], dtype=pl.UInt32)
        frame = frame.filter(pl.col("input_id").is_in(among(ids)))
    return frame


@dataclass(frozen=True)
class _Numbered:
    """Lines of several inputs as a batched parser reads them: ``frame`` with ``line_no``
    renumbered to a global row, and ``mapping`` from that row back to (input_id, line_no)."""
    frame: pl.DataFrame
    mapping: pl.DataFrame

    @classmethod
    def of(cls, combined: pl.DataFrame) -> "_Numbered":
        mapping = combined.select(_row=pl.int_range(1, pl.len() + 1, dtype=pl.UInt32), input_id="input_id",
                                  _line="line_no")
        frame = combined.clone()     # a new frame of the same columns (no copy), its line_no replaced in place
        frame.replace_column(frame.get_column_index("line_no"), mapping["_row"].alias("line_no"))
        return cls(frame, mapping)

    def only(self, inputs: set[int]) -> "_Numbered | None":
        """The lines of ``inputs`` alone (None: not one line), where they are at most half of
        the lines; else all of them, as before (a copy of most of the batch would cost memory
        for little: the 1,024-rank run's torch_errors passes 54-77% of it). Their global rows
        stay as they were, gaps and all, so that the last line of one input and the first of
        the next one kept are never made neighbours: the parser sees what it saw, less some
        inputs."""
        if not inputs:
            return None
        keep = pl.col("input_id").is_in(among(pl.Series(sorted(inputs), dtype=pl.UInt32)))
        kept = self.frame.select(keep.sum()).item()
        if 2 * kept > self.frame.height:
            return self
        return _Numbered(self.frame.filter(keep), self.mapping.filter(keep)) if kept else None

    def claims(self, parser: str, consumed: pl.Series) -> pl.LazyFrame:
        """The lines a parser understood (``consumed``: global rows) as ``_claims`` rows: a plan,
        run with the chunk's others (``_assign_kinds``)."""
        lines = self.mapping.lazy().filter(pl.col("_row").is_in(among(consumed)))
        return _claims(parser, lines.select("input_id", line_no="_line"))


def _batch_parse(module, numbered: _Numbered, texts: list[FileResult], batched: Batched) -> None:
    """``module.parse`` once over ``numbered``, the lines of several inputs (``input_id``); its
    rows are mapped back into ``batched``."""
    mapping = numbered.mapping
    try:
        parsed = module.parse(numbered.frame)
    except Exception as exc:  # a parser bug must not cost the rest of the run
        failed = set(numbered.frame["input_id"].unique().to_list())
        if len(failed) > 1:   # nor one input's lines the other inputs' rows: each alone, then
            original = numbered.frame.with_columns(line_no=mapping["_line"])
            for part in original.partition_by("input_id", maintain_order=True):
                _batch_parse(module, _Numbered.of(part), texts, batched)
            return
        for r in texts:
            if r.input_id in failed:
                r.item.problems.append(f"parser {module.NAME} failed ({type(exc).__name__}: {exc}); "
                                       "its lines are counted as unparsed")
        return
    for name, frame in _unbatched(module, parsed.tables, mapping, parser=True).items():
        batched.tables.setdefault(name, []).append(frame)
    batched.claims.append(numbered.claims(module.NAME, parsed.consumed))


def _env_dumps(results: list[FileResult], others: pl.DataFrame, gates: dict[str, set[int]] | None) -> set[int]:
    """Which of a chunk's text inputs (by ``_input``, their index in ``results``) are env dumps:
    one ``postmortem.parsers.envdump.env_dump_inputs`` over the logs that pass its gate."""
    candidates = [i for i, r in enumerate(results) if r.item.kind == "log"
                  and (gates is None or r.input_id in gates[parsers.envdump.NAME])]
    if not candidates:
        return set()
    lines = others.filter(pl.col("_input").is_in(candidates)).with_columns(input_id=pl.col("_input"))
    return parsers.envdump.env_dump_inputs(lines)


def _parse_env_dumps(dumps: list[FileResult], others: pl.DataFrame) -> Batched:
    """The env parsers once over a chunk's env dumps (``others``: their lines, in input order)."""
    batched = Batched()
    if dumps:
        for module in parsers.ENV_PARSERS:
            _batch_parse(module, _Numbered.of(others), dumps, batched)
    return batched


def _claims(parser: str, rows, input_id: int | None = None):
    """(input_id, line_no, parser) rows: the lines a parser understood (a frame, or a plan)."""
    if input_id is not None:
        rows = rows.with_columns(input_id=pl.lit(input_id, dtype=pl.UInt32))
    return rows.select(pl.col("input_id").cast(pl.UInt32), pl.col("line_no").cast(pl.UInt32),
                       parser=pl.lit(parser))


def _unbatch(frame: pl.DataFrame, mapping: pl.DataFrame, more: tuple[str, ...] = ()) -> pl.LazyFrame:
    """Global rows back to (input_id, line_no) in every line-number column of a batched table:
    ``line_no``, ``table_line`` and the ones a parser lists in ``LINE_NUMBER_COLUMNS``. A plan:
    ``_unbatched`` collects a parser's tables at once."""
    rows = mapping.lazy()
    out = frame.lazy().join(rows, left_on="line_no", right_on="_row", how="left", maintain_order="left").with_columns(
        line_no=pl.col("_line")).drop("_line")
    for column in ("table_line", *more):
        if column in frame.columns:
            back = rows.select(pl.col("_row").alias(column), _t=pl.col("_line").cast(frame.schema[column]))
            out = out.join(back, on=column, how="left", maintain_order="left").with_columns(
                pl.col("_t").alias(column)).drop("_t")
    return out


def _unbatched(module, tables: dict[str, pl.DataFrame], mapping: pl.DataFrame,
               parser: bool = False) -> dict[str, pl.DataFrame]:
    """``_unbatch`` of each non-empty table a parser gave, in one Polars call (a few calls per
    table were a tenth of a small run's calls), with the ``parser`` column where asked."""
    more = getattr(module, "LINE_NUMBER_COLUMNS", {})
    names = [name for name, frame in tables.items() if not frame.is_empty()]
    plans = [_unbatch(tables[name], mapping, more.get(name, ())) for name in names]
    if parser:
        plans = [plan.with_columns(parser=pl.lit(module.NAME)) for plan in plans]
    return dict(zip(names, collect_each(plans)))


def _assign_kinds(lines: pl.DataFrame, claims: list[pl.DataFrame | pl.LazyFrame]) -> pl.DataFrame:
    """``kind``: the first parser in ``postmortem.parsers.ALL_PARSERS`` order that understood the line
    (whether it ran per file or batched), else "blank" for a blank line (NCCL puts one before
    every WARN: understood), else null (unparsed). One plan, run in one call."""
    priority = {m.NAME: i for i, m in enumerate(parsers.ALL_PARSERS)}
    names = pl.LazyFrame({"_p": list(priority.values()), "kind": list(priority)},
                         schema={"_p": pl.Int32, "kind": pl.String})
    plan = lines.lazy()
    if claims:
        ranked = pl.concat([claim.lazy() for claim in claims], rechunk=True).with_columns(
            _p=pl.col("parser").replace_strict(priority, return_dtype=pl.Int32))
        first = ranked.group_by("input_id", "line_no").agg(pl.col("_p").min()).join(names, on="_p")
        plan = plan.join(first.drop("_p"), on=["input_id", "line_no"], how="left", maintain_order="left")
    else:
        plan = plan.with_columns(kind=pl.lit(None, dtype=pl.String))
    blank = pl.col("text").str.strip_chars() == ""
    return plan.with_columns(kind=pl.when(pl.col("kind").is_null() & blank).then(pl.lit("blank"))
                             .otherwise(pl.col("kind"))).collect(engine="in-memory")


# Parsers with a ``file_gate`` run only on inputs where some line passes it, decided for a whole
# chunk of inputs in one Polars call: a per-file parser costs a few ms per input even when it
# finds nothing (a job folder has thousands of inputs), and a batched one reads every line of
# the batch it is given (torchrun read the indented lines of the 6,170 py-spy dumps in a chunk
# of the 10,000-rank run: 0.36-0.43 s, 0.18-0.21 s without them; the chunk 2.1 -> 1.8 s).
# Batched parsers that declare a ``BATCH_LITERAL`` combine evidence across inputs and have none.
# Off only in the test that holds the gates to the ungated result.
USE_FILE_GATES = True


def file_gates(input_ids: list[int], frame: pl.DataFrame) -> dict[str, set[int]]:
    """Per gated parser (and the env-dump check): the inputs with a line it could start from.
    ``frame``: ``postmortem.parsers.lines.envelope_frame`` of a chunk, whose ``_input`` indexes ``input_ids``."""
    modules = [m for m in (*parsers.LOG_PARSERS, parsers.envdump)
               if hasattr(m, "file_gate") and not hasattr(m, "BATCH_LITERAL")]
    # every gate over the lines in one call (Polars runs them side by side), then the inputs of
    # the few lines that passed: most gates pass no line of a chunk, and need no group_by
    passed = frame.select("_input", *[m.file_gate(pl.col("text")).fill_null(False).alias(m.NAME) for m in modules])
    gates = {}
    for m in modules:
        column = passed[m.NAME]
        # (value_counts: the distinct inputs without a query)
        inputs = passed["_input"].filter(column).value_counts()["_input"].to_list() if column.any() else []
        gates[m.NAME] = {input_ids[i] for i in inputs}
    return gates


# Inputs are parsed in chunks of consecutive inputs of up to this many bytes: few Polars calls
# for a folder of small per-rank files, the raw bytes held at once stay bounded, and chunks are
# the unit of parallel work. Every chunk is parsed the same way whether it runs in a worker or
# here, so the result does not depend on the number of workers.
CHUNK_BYTES = 32 * 2**20


@dataclass
class Piece:
    """What one chunk parses of one input: all of it, or (an uncompressed log larger than
    ``SEGMENT_BYTES``) the byte range ``start``-``end`` whose first line is line ``line_base + 1``."""
    input_id: int
    item: InputFile
    start: int = 0
    end: int | None = None
    line_base: int = 0
    # skimmed (``plan_skim``): only its failure-like lines (up to ``hit_bytes``) are parsed
    skim: bool = False
    hit_bytes: int = 0

    @property
    def size(self) -> int:
        return (self.end if self.end is not None else self.item.size) - self.start


@dataclass
class ChunkResult:
    """What one chunk of pieces gave: their items (kinds and problems as parsing left them),
    the lines with their kinds, the tables and messages."""
    ids: list[int]                  # per piece: its input
    items: list[InputFile]
    lines: pl.DataFrame | None
    tables: dict[str, pl.DataFrame]
    errors: list[str | None]        # per piece: why it was skipped, or None
    # COLL trace lines past the first of each run (``postmortem.analyzer.bulk``), for the store, not the
    # models: the Parquet files they were written to, and how many each input had.
    bulk_files: list[str] = field(default_factory=list)
    bulk_counts: dict[int, int] = field(default_factory=dict)
    skim_counts: dict[int, int] = field(default_factory=dict)   # skimmed lines per input (unparsed)


# A log larger than this is parsed in segments of about this size (at line starts), so that no
# input is held whole in memory however large it is.
SEGMENT_BYTES = CHUNK_BYTES
# Below this many chunks per worker, plan_chunks evens out the workers' shares.
EVEN_CHUNKS_BELOW = 8
# With several workers, a run that fits one chunk is still cut into one chunk a worker from
# this size on (whole inputs, as ``_pack`` cuts them): one core would otherwise parse it alone.
# Measured on two cores (five alternating pairs): 256 ranks, 15 MB, parse 1.26-1.71 -> 1.27-1.35 s
# for 0.3 s more CPU; 64 ranks, 3.7 MB, no faster (each chunk runs every parser: a fixed cost
# the second core must repay).
SPLIT_FROM = 8 << 20
# What an input's fixed cost (opened, sniffed, enveloped, its rows sliced: about 0.16 ms on two
# busy cores) is worth in bytes parsed (about 46 ms a MB), when the chunks are evened out. The
# 10,000-rank run's last chunk held its 10,000 py-spy dumps and 270 logs (25 MB) and took 2.8 s,
# against 1.5-1.7 s for 25 MB of 2,840 logs, while the other thread waited (parse 8.5 -> 7.9 s).
# A chunk's memory is still bounded by its bytes.
FILE_COST_BYTES = 4 << 10
# A segment ends at a newline followed by a line that does not start with white space, so that
# the indented lines of a traceback or a py-spy stack stay with their first line.
_CUT = re.compile(rb"\n(?=[^\s])")


def plan_chunks(items: list[InputFile], chunk_bytes: int | None = None, workers: int = 1) -> list[list[Piece]]:
    """Consecutive pieces, up to ``chunk_bytes`` (on disk) per chunk; a larger piece is a chunk
    of its own. Large uncompressed logs are cut into segments (``segments``).

    With several ``workers`` and a few chunks, as many chunks of the same work as make every
    worker's share the same (``_pack``): with 7 chunks on 2 workers one of them parses 4 while
    the other waits a whole chunk's time at the end (a tenth of the 10,000-rank run's parse); 8
    smaller chunks take 4 rounds of less each. Two chunks of 32 and 20 MB (the 1,024-rank run)
    become two of 26 (parse 3.0-3.2 -> 2.4 s). With many chunks the last round matters little."""
    limit = chunk_bytes or CHUNK_BYTES
    pieces = [piece for input_id, item in enumerate(items) for piece in segments(input_id, item)]
    plan_skim(pieces)
    chunks = _pack(pieces, limit)
    if 1 < workers and (1 < len(chunks) or sum(p.size for p in pieces) >= SPLIT_FROM) \
            and len(chunks) < EVEN_CHUNKS_BELOW * workers:
        chunks = _pack(pieces, limit, -(-len(chunks) // workers) * workers)
    return chunks


# Skimming is on unless POSTMORTEM_SKIM=off (tests compare a skimmed run with a full one).
def skim_enabled() -> bool:
    return os.environ.get("POSTMORTEM_SKIM", "on").strip().lower() not in ("0", "off", "no", "false")


def plan_skim(pieces: list[Piece], full_bytes: int | None = None) -> list[Piece]:
    """Which segments of large logs are parsed in full: memory bounded by the budget, not by the
    inputs (``postmortem.analyzer.budget.full_parse_bytes``, a twentieth of ``POSTMORTEM_MEMORY``).

    When the bytes the models would hold (a segment's size less its COLL trace lines, which go
    to the store by position: ``_coll_share``) pass ``full_bytes``, the segments of logs cut into
    three or more are taken in full in this order until it is spent: each log's last segment
    (where a job ends), its first (its start: NCCL init, the launch), then those nearest the end;
    the rest are *skimmed*: every line is kept in the store, but only failure-like lines (and
    the lines after them, ``bulk.FAILURE``) are parsed, up to an equal share of a quarter of the
    budget. Logs of one or two segments are always parsed in full. The choice depends only on
    the inputs and the budget."""
    full_bytes = full_bytes or budget.full_parse_bytes()
    if not skim_enabled() or sum(p.size for p in pieces) <= full_bytes:
        return pieces
    by_input: dict[int, list[Piece]] = {}
    for piece in pieces:
        by_input.setdefault(piece.input_id, []).append(piece)
    cost = {id(p): _kept_estimate(p) for p in pieces}
    if sum(cost.values()) <= full_bytes:
        return pieces
    left = full_bytes - sum(cost[id(p)] for group in by_input.values() if len(group) < 3 for p in group)
    large = [group for group in by_input.values() if len(group) >= 3]
    order = [group[-1] for group in large] + [group[0] for group in large]
    depth = max((len(group) for group in large), default=0)
    order += [group[-1 - k] for k in range(1, depth) for group in large if 0 < len(group) - 1 - k]
    chosen: set[int] = set()
    for piece in order:
        if id(piece) in chosen:
            continue
        if cost[id(piece)] <= left:
            chosen.add(id(piece))
            left -= cost[id(piece)]
    skimmed = [p for group in large for p in group if id(p) not in chosen]
    share = max(256 << 10, full_bytes // 4 // max(1, len(skimmed)))
    for piece in skimmed:
        piece.skim, piece.hit_bytes = True, share
    return pieces


def _kept_estimate(piece: Piece) -> int:
    """The bytes of a segment the models would hold: its size less its share of COLL trace lines
    (a sample from its middle)."""
    return int(piece.size * (1 - _coll_share(piece)))


def _coll_share(piece: Piece) -> float:
    if piece.item.compression is not None or piece.size < SAMPLE_BYTES:
        return 0.0
    try:
        with open_input(piece.item.path) as handle:
            handle.seek(piece.start + max(0, piece.size - SAMPLE_BYTES) // 2)
            sample = handle.read(SAMPLE_BYTES)
    except OSError:
        return 0.0
    lines = sample.count(b"\n")
    return min(1.0, sample.count(b": opCount ") / lines) if lines else 0.0


def _pack(pieces: list[Piece], limit: int, count: int | None = None) -> list[list[Piece]]:
    """Pieces in order into chunks of at most ``limit`` bytes (or one piece); with ``count``,
    a new chunk also starts at each ``count``-th of the total work (bytes, and
    ``FILE_COST_BYTES`` a piece)."""
    step = sum(_work(p) for p in pieces) / count if count else None
    chunks: list[list[Piece]] = []
    current: list[Piece] = []
    size = done = 0
    for piece in pieces:
        at_step = step is not None and done >= step * (len(chunks) + 1)
        if current and (size + piece.size > limit or at_step):
            chunks.append(current)
            current, size = [], 0
        current.append(piece)
        size += piece.size
        done += _work(piece)
    if current:
        chunks.append(current)
    return chunks


def _work(piece: Piece) -> int:
    """What parsing ``piece`` costs, in bytes: its own and its input's fixed cost."""
    return piece.size + FILE_COST_BYTES


def segments(input_id: int, item: InputFile, target: int | None = None) -> list[Piece]:
    """The pieces of one input: itself, or for an uncompressed text log larger than ``target``
    (default ``SEGMENT_BYTES``) byte ranges of about that size cut at line starts, with the line
    count before each (one pass over the file, a block at a time: a line of any length, even a
    file without a single newline, is scanned, never held).

    Each segment is parsed as a file of its own: a record whose context spans a cut is read
    in two halves (a traceback's indented lines stay with it; NCCL's ``Connected all rings``
    marker 32 MB after its connection lines would not). Only logs larger than a segment are cut."""
    target = target or SEGMENT_BYTES
    if item.compression is not None or item.size <= target or item.failure or not _is_text_log(item):
        return [Piece(input_id, item)]
    sep = item.line_end
    cut = _CUT if sep == b"\n" else re.compile(rb"\r(?=[^\s])")
    pieces, start, base = [], 0, 0
    with open_input(item.path) as handle:
        while start < item.size:
            handle.seek(start)
            block = handle.read(target)
            if start + len(block) >= item.size:
                pieces.append(Piece(input_id, item, start, item.size, base))
                break
            ahead = handle.read(1 << 20)
            found = cut.search(ahead)
            if found is not None:
                end = start + len(block) + found.start() + 1
                lines = block.count(sep) + ahead[:found.start() + 1].count(sep)
            elif (last := block.rfind(sep)) >= 0:
                end = start + last + 1              # a megabyte of indented lines: cut at any line end
                lines = block[:last + 1].count(sep)
            else:                                   # one enormous line: to its end, scanned a block at a time
                end, lines = _line_after(handle, start + len(block) + len(ahead), ahead, sep), 1
                if end is None:
                    pieces.append(Piece(input_id, item, start, item.size, base))
                    break
            pieces.append(Piece(input_id, item, start, end, base))
            start, base = end, base + lines
            del block, ahead
    if len(pieces) > 1:
        item.kind = "log"
    return pieces


def _line_after(handle, at: int, ahead: bytes, sep: bytes) -> int | None:
    """The offset just past the first ``sep`` at or after the bytes read so far (``ahead`` ends
    at ``at``); None when the file ends first."""
    if (i := ahead.find(sep)) >= 0:
        return at - len(ahead) + i + 1
    handle.seek(at)
    while block := handle.read(4 << 20):
        if (i := block.find(sep)) >= 0:
            return at + i + 1
        at += len(block)
    return None


def _is_text_log(item: InputFile) -> bool:
    try:
        with open_input(item.path) as handle:
            handle.seek(leading_nuls(handle))
            head = handle.read(65536)
        if not head:
            return False
        if b"\r" in head and b"\n" not in head:
            item.line_end = b"\r"
        return sniff(item, head) == "log"
    except (OSError, InputError):
        return False


def parse_chunk(pieces: list[Piece], spool: str | None = None) -> ChunkResult:
    """One chunk of pieces: ``parse_chunks([pieces], spool)``."""
    return parse_chunks([pieces], spool)


def parse_chunks(chunks: list[list[Piece]], spool: str | None = None, batch_bytes: int | None = None) -> ChunkResult:
    """Read and parse consecutive chunks of pieces (a job, ``plan_jobs``): each chunk is read,
    enveloped, cut and given to the per-file parsers on its own (``_prepare``), so the raw bytes
    held stay one chunk's; the batched parsers then run once over the lines the chunks kept, as
    long as those stay under ``batch_bytes`` (default ``CHUNK_BYTES``; ``_finish``).

    A batched parser costs about as much for one chunk's lines of a COLL-traced run (a
    twentieth of them are left beside the bulk) as for four chunks'. ``spool``: a folder
    (``postmortem.analyzer.bulk.Sink``); COLL trace lines past the first of each run are written there,
    to ``ChunkResult.bulk_files``, instead of going through the parsers and the models."""
    limit = batch_bytes or CHUNK_BYTES
    done: list[ChunkResult] = []
    held: list[_Prepared] = []
    for pieces in chunks:
        held.append(_prepare(pieces, spool))
        if sum(p.kept_bytes for p in held) >= limit:
            done.append(_finish(held))
            held = []
    if held:
        done.append(_finish(held))
    return done[0] if len(done) == 1 else _joined(done)


@dataclass
class _Prepared:
    """A chunk read, enveloped, cut and through the per-file parsers (``_prepare``)."""
    results: list[FileResult]       # per piece, in order
    kept_bytes: int = 0
    weights: pl.DataFrame | None = None     # (input_id, line_no, _w): the first lines of runs
    bulk_file: str | None = None
    bulk_counts: dict[int, int] = field(default_factory=dict)
    env: Batched = field(default_factory=Batched)    # the env parsers' results (_parse_env_dumps)
    at_once: Batched = field(default_factory=Batched)   # the lines the parsers at once understood
    skim_file: str | None = None
    skim_counts: dict[int, int] = field(default_factory=dict)
    extra: pl.DataFrame | None = None   # (input_id, line_no, _x): skimmed lines a kept line stands for
    # every text input's lines and ``others`` as two frames, in input order: the batched parsers
    # read them whole (a parser that reads an input alone gets a slice: ``_parse_per_file``)
    whole: tuple[pl.DataFrame, pl.DataFrame] | None = None
    gates: dict[str, set[int]] | None = None     # ``file_gates`` of its text inputs
    ascii: bool = True      # every byte of its text inputs is ASCII (postmortem.parsers.ascii_text)


def _prepare(pieces: list[Piece], spool: str | None) -> _Prepared:
    """Whole-file readers, the envelope of all text pieces at once, the COLL cut, the gated
    per-file parsers. The text of understood NCCL INFO lines is dropped later (``_finish``; it
    is read back by offset, see ``postmortem.analyzer.store``): in a COLL-traced run they are nearly all
    the bytes."""
    prepared = _Prepared([])
    pending: list[tuple[FileResult, bytes, Piece]] = []
    claimed: list[tuple[FileResult, tuple]] = []
    for piece in pieces:
        result, data, claim = read_input(piece.input_id, piece.item, piece)
        prepared.results.append(result)
        if data is not None:
            pending.append((result, data, piece))
        elif claim is not None:
            claimed.append((result, claim))
    _read_wholes(claimed)
    if not pending:
        return prepared
    placed = [Piece(p.input_id, p.item, r.capped.start if r.capped else p.start, p.end, p.line_base)
              for r, _, p in pending]
    prepared.ascii = all_ascii(data for _, data, _ in pending)
    combined = _placed(_uncut(envelope_frame([data for _, data, _ in pending], ascii=prepared.ascii),
                              [r.capped for r, _, _ in pending]), placed)
    # Whole NCCL INFO lines (half the lines of an init log; COLL trace lines, nearly every
    # line of a COLL-traced log) mean nothing to the parsers but NCCL's: the others read
    # ``others``. With a ``spool`` only the first line of each run of COLL lines is parsed;
    # the rest are read by position (``postmortem.analyzer.bulk``).
    with reading(prepared.ascii):
        info, coll = parsers.nccl.plain_marks(combined["text"])
    ids = [result.input_id for result, _, _ in pending]
    if spool is not None and coll.any():
        combined, chunk_bulk, prepared.weights, kept, prepared.bulk_counts = bulk.cut(combined, coll, ids)
        info = info.filter(kept)
        name = f"{pieces[0].input_id:08d}-{pieces[0].start}-{os.getpid()}"
        prepared.bulk_file = bulk.write(chunk_bulk, spool, name)
    skimmed = {i: p.hit_bytes for i, (_, _, p) in enumerate(pending) if p.skim}
    if spool is not None and skimmed:
        combined, skim_frame, prepared.extra, kept, prepared.skim_counts = bulk.skim_cut(combined, skimmed, ids)
        info = info.filter(kept)
        name = f"{bulk.SKIM_PREFIX}{pieces[0].input_id:08d}-{pieces[0].start}-{os.getpid()}"
        prepared.skim_file = bulk.write(skim_frame, spool, name)
        del skim_frame
    prepared.kept_bytes = int(combined["length"].sum() or 0)
    others = combined.filter(~info) if info.any() else combined
    with reading(prepared.ascii):   # the parsers' patterns with ASCII classes where the text is ASCII
        _parse_per_file(prepared, pending, combined, others, ids)
    return prepared


def _parse_per_file(prepared: _Prepared, pending: list, combined: pl.DataFrame, others: pl.DataFrame,
                    ids: list[int]) -> None:
    """The gates, then the per-file parsers (at once where they can) over a chunk's lines."""
    gates = prepared.gates = file_gates(ids, others) if USE_FILE_GATES else None
    every_frame = by_input(combined, ids)
    others_frame = by_input(others, ids) if others is not combined else every_frame
    prepared.whole = (every_frame.drop("_input"), others_frame.drop("_input"))
    results = [result for result, _, _ in pending]
    dumps = _env_dumps(results, others, gates)
    at_once, prepared.at_once = _parse_at_once(results, prepared.whole[1], gates, dumps)
    per_file = [m for m in parsers.LOG_PARSERS if m not in parsers.BATCHED]
    # An input's lines are cut from the chunk's only for a parser that reads it alone: most
    # inputs have none (two slices for each of 10,000 ranks' 31,251 inputs: this step took
    # 1.9-2.2 s of the parse threads' time, 1.1-1.2 s without them).
    frames = {True: every_frame, False: others_frame}
    bounds: dict[bool, dict[int, tuple[int, int]]] = {}

    def lines_of(i: int, nccl: bool) -> pl.DataFrame:
        if nccl not in bounds:
            bounds[nccl] = input_bounds(frames[nccl])
        return frames[nccl].slice(*bounds[nccl].get(i, (0, 0))).drop("_input")

    for i, result in enumerate(results):
        result.text = True
        if i in dumps:      # the env parsers read the chunk's dumps at once (_parse_env_dumps)
            result.item.kind = "env"
            continue
        # a parser that read the chunk at once: only where it gave this input rows
        chosen = [m for m in per_file if (result.input_id in at_once[m.NAME] if m.NAME in at_once
                                          else _gate_passes(gates, m, result.input_id))]
        if chosen:
            parse_text(result, chosen, functools.partial(lines_of, i), at_once)
    dumped = others_frame.filter(pl.col("_input").is_in(sorted(dumps))).drop("_input") if dumps else None
    prepared.env = _parse_env_dumps([results[i] for i in sorted(dumps)], dumped)


def _finish(held: list[_Prepared]) -> ChunkResult:
    """The batched parsers over the prepared chunks' lines at once, then their lines and tables
    combined (``_combine_chunk``), with ``_w`` on the first lines of COLL runs."""
    results = [r for p in held for r in p.results]
    whole = [p.whole for p in held if p.whole is not None]
    with reading(all(p.ascii for p in held)):
        batched = _parse_batched(results, whole, _gates_of(held))
    for prepared in held:
        batched.take(prepared.env).take(prepared.at_once)
    chunk = _combine_chunk([r.input_id for r in results], results, batched, whole)
    chunk.bulk_files = [f for p in held for f in (p.bulk_file, p.skim_file) if f is not None]
    chunk.bulk_counts = _summed(p.bulk_counts for p in held)
    chunk.skim_counts = _summed(p.skim_counts for p in held)
    weights = [p.weights for p in held if p.weights is not None]
    extra = [p.extra for p in held if p.extra is not None and not p.extra.is_empty()]
    if weights:
        # _w: how many lines each row stands for (a run's first line: its run)
        chunk.lines = chunk.lines.join(pl.concat(weights), on=["input_id", "line_no"], how="left",
                                       maintain_order="left").with_columns(_w=pl.col("_w").fill_null(1))
    if extra and chunk.lines is not None:
        # and a kept line of a skimmed segment: the skimmed lines that take its attribution
        if "_w" not in chunk.lines.columns:
            chunk.lines = chunk.lines.with_columns(_w=pl.lit(1, dtype=pl.UInt32))
        chunk.lines = chunk.lines.join(pl.concat(extra), on=["input_id", "line_no"], how="left",
                                       maintain_order="left").with_columns(
            _w=(pl.col("_w") + pl.col("_x").fill_null(0)).cast(pl.UInt32)).drop("_x")
    return chunk


def _gates_of(held: list[_Prepared]) -> dict[str, set[int]] | None:
    """The gates of several prepared chunks as one: an input passes where any of its pieces does
    (the segments of one log may lie in several). None when they were not asked."""
    texts = [p for p in held if p.whole is not None]
    if not texts or any(p.gates is None for p in texts):
        return None
    return {name: set().union(*(p.gates[name] for p in texts)) for name in texts[0].gates}


def _joined(chunks: list[ChunkResult]) -> ChunkResult:
    """Consecutive chunks' results as one: a job's, when its kept lines were parsed in parts,
    and a whole run's (``_combine``)."""
    tables: dict[str, list[pl.DataFrame]] = {}
    for chunk in chunks:
        for name, frame in chunk.tables.items():
            tables.setdefault(name, []).append(frame)
    line_frames = [c.lines for c in chunks if c.lines is not None]
    return ChunkResult([i for c in chunks for i in c.ids], [item for c in chunks for item in c.items],
                       pl.concat(line_frames, how="diagonal_relaxed") if line_frames else None,
                       {name: pl.concat(frames, how="diagonal_relaxed") for name, frames in tables.items()},
                       [e for c in chunks for e in c.errors], [f for c in chunks for f in c.bulk_files],
                       _summed(c.bulk_counts for c in chunks), _summed(c.skim_counts for c in chunks))


def _summed(counts) -> dict[int, int]:
    """Bulk lines per input over several parts (a segmented input has bulk in several)."""
    out: dict[int, int] = {}
    for part in counts:
        for input_id, n in part.items():
            out[input_id] = out.get(input_id, 0) + n
    return out


def _uncut(frame: pl.DataFrame, capped: list[Capped | None]) -> pl.DataFrame:
    """Byte offsets past a line cut at the cap (``discover.read_capped``) moved by the bytes
    skipped before them, so that they point into the input again."""
    if not any(c is not None and c.cuts for c in capped):
        return frame
    parts = []
    for i, c in enumerate(capped):
        if c is None or not c.cuts:
            continue
        at = pl.Series([q for q, _ in c.cuts], dtype=pl.UInt64)
        skipped = pl.Series([0, *[n for _, n in c.cuts]], dtype=pl.UInt64).cum_sum()
        part = frame.filter(pl.col("_input") == i)
        moved = part["offset"] + skipped.gather(at.search_sorted(part["offset"], side="left"))
        parts.append((i, part.with_columns(offset=moved)))
    keep = frame.filter(~pl.col("_input").is_in([i for i, _ in parts]))
    return pl.concat([keep, *[part for _, part in parts]], how="vertical").sort("_input", "line_no")


def _placed(frame: pl.DataFrame, pieces: list[Piece]) -> pl.DataFrame:
    """Line numbers and byte offsets of segments moved to where the segment sits in its input."""
    if not any(p.start or p.line_base for p in pieces):
        return frame
    shift = pl.DataFrame({"_input": pl.Series(range(len(pieces)), dtype=pl.UInt32),
                          "_lines": pl.Series([p.line_base for p in pieces], dtype=pl.UInt32),
                          "_bytes": pl.Series([p.start for p in pieces], dtype=pl.UInt64)})
    return frame.join(shift, on="_input", how="left", maintain_order="left").with_columns(
        line_no=pl.col("line_no") + pl.col("_lines"), offset=pl.col("offset") + pl.col("_bytes")).drop("_lines", "_bytes")


# Chunks of COLL trace lines per job (``parse_chunks``): the batched parsers run once over the
# lines up to this many chunks kept. Other chunks are jobs of their own: they keep all their
# lines, and a job's results are held until it ends. So are the last chunks, so that the
# workers finish together.
JOB_CHUNKS = 4
# How much of the middle of a chunk's largest piece ``mostly_coll`` reads.
SAMPLE_BYTES = 64 * 1024

Job = tuple[list[list[Piece]], str | None, int | None]    # chunks, spool, batch_bytes


def plan_jobs(chunks: list[list[Piece]], workers: int, groupable=None) -> list[list[list[Piece]]]:
    """Consecutive ``groupable`` chunks (default ``mostly_coll``), up to ``JOB_CHUNKS`` a job;
    every other chunk, and with several workers each of the last ``2 * workers``, a job of its own."""
    groupable = groupable or mostly_coll
    alone = len(chunks) - (2 * workers if workers > 1 else 0)
    jobs: list[list[list[Piece]]] = []
    after_groupable = False
    for i, chunk in enumerate(chunks):
        joins = i < alone and groupable(chunk)
        if joins and after_groupable and len(jobs[-1]) < JOB_CHUNKS:
            jobs[-1].append(chunk)
        else:
            jobs.append([chunk])
        after_groupable = joins
    return jobs


def mostly_coll(chunk: list[Piece]) -> bool:
    """Whether most lines in the middle of the chunk's largest piece are COLL trace lines (the
    chunk will keep a small part of its lines, ``postmortem.analyzer.bulk``): a guess from ``SAMPLE_BYTES``
    of it. A wrong guess costs time or memory, never a different result."""
    piece = max(chunk, key=lambda p: p.size)
    if piece.item.compression is not None:
        return False
    try:
        with open_input(piece.item.path) as handle:
            handle.seek(piece.start + max(0, piece.size - SAMPLE_BYTES) // 2)
            sample = handle.read(min(SAMPLE_BYTES, piece.size))
    except OSError:
        return False
    return 2 * sample.count(b": opCount ") > sample.count(b"\n") > 0


def _parse_job(job: Job) -> ChunkResult:
    return parse_chunks(*job)


def worker_count(items: list[InputFile], workers: int | None = None) -> tuple[int, bool]:
    """How many jobs ``parse_all`` runs at once, and whether in worker processes.

    ``workers`` if given, else ``$POSTMORTEM_WORKERS``: that many worker processes (1 = one at a
    time, here). Otherwise threads of this process, one per core as the memory budget allows.
    The parsers spend their time in Polars, which lets go of the GIL; a thread needs no start
    (a worker process imports Polars and the parsers: about a second) and hands its results
    back without a copy. Measured on two cores against two worker processes (parse stage):
    1,024 ranks, 53 MB, 3.1 -> 2.3 s (processes did not pay at this size); 10,000 ranks
    15.3 -> 13.5 s; the 2 GB COLL run 26.3 -> 24.3 s; the 871 MB COLL run and the 535 MB log
    about the same."""
    if workers is None:
        text = os.environ.get("POSTMORTEM_WORKERS", "").strip()
        if text.isdigit():
            workers = int(text)
    if workers is not None:
        return max(1, workers), True
    return budget.workers(os.cpu_count() or 1), False


def parse_all(items: list[InputFile], progress: bool | Progress = False, workers: int | None = None,
              chunk_bytes: int | None = None, sink=None) -> Parsed:
    """Parse inputs; results come back in input order.

    Inputs are parsed in chunks (``plan_chunks``), a few consecutive ones a job (``plan_jobs``,
    ``parse_chunks``): several at once, in threads or worker processes (``worker_count``), when
    there are several chunks. Jobs come back in order, each with its own copies of its inputs,
    so the result is the same either way (tests/test_scale_ingest.py).
    ``progress``: a ``Progress`` (or True for a new one) shows files, bytes and rate.
    ``sink``: an ``postmortem.analyzer.bulk.Sink``, which gets each chunk's COLL trace bulk as a file, and
    stages them all at the end; without one every line stays in the result.
    """
    meter = progress if isinstance(progress, Progress) else Progress(bool(progress))
    meter.start(len(items), sum(i.size for i in items))
    count, processes = worker_count(items, workers)
    chunks = plan_chunks(items, chunk_bytes, count)
    count = min(count, len(chunks))
    # the batch limit decided here, as the chunks were: a worker reads its own CHUNK_BYTES
    jobs: list[Job] = [(group, sink.spool if sink is not None else None, chunk_bytes or CHUNK_BYTES)
                       for group in plan_jobs(chunks, count)]
    count = min(count, len(jobs))
    done: list[ChunkResult] = []
    for (group, _, _), chunk in zip(jobs, _run_jobs(jobs, count, processes)):
        for path in chunk.bulk_files if sink is not None else ():
            sink.add(path)
        done.append(chunk)
        pieces = [p for c in group for p in c]
        meter.advance(sum(p.size for p in pieces), files=sum(p.end in (None, p.item.size) for p in pieces))
    meter.finish()
    if sink is not None:
        sink.stage()
    # A worker's items are copies: the kinds and problems it found go back to the caller's (a
    # segmented input's problems are those of all its segments).
    problems: dict[int, list[str]] = {}
    for chunk in done:
        for input_id, theirs in zip(chunk.ids, chunk.items):
            items[input_id].kind = theirs.kind
            seen = problems.setdefault(input_id, [])
            seen.extend(p for p in theirs.problems if p not in seen)
    for input_id, found in problems.items():
        items[input_id].problems = found
    return _combine(done, items)


def _compacted(chunk: ChunkResult) -> ChunkResult:
    """The chunk's frames copied into buffers of their own. A Polars string keeps the whole
    buffer it was cut from alive: a few kept lines would hold a chunk's 32 MB of text each.
    (A worker's results are copied on their way back anyway.)"""
    names = list(chunk.tables)
    frames = _own_buffers([*chunk.tables.values(), *([chunk.lines] if chunk.lines is not None else [])])
    if chunk.lines is not None:
        chunk.lines = frames.pop()
    chunk.tables = dict(zip(names, frames))
    return chunk


def _own_buffers(frames: list[pl.DataFrame]) -> list[pl.DataFrame]:
    """Each frame with every string written anew. A string expression makes fresh buffers, three
    times as fast as a round trip through Arrow IPC, and copies every flat frame in one Polars
    call (a call per table was a fortieth of a small run's calls); a frame with strings inside
    other types (lists, structs, binary) takes the round trip."""
    flat = [i for i, frame in enumerate(frames) if not any(
        dtype.is_nested() or dtype in (pl.Binary, pl.Categorical, pl.Object) for dtype in frame.schema.values())]
    copies = dict(zip(flat, collect_each([frames[i].lazy().with_columns(pl.col(pl.String) + "") for i in flat])))
    return [copies[i] if i in copies else _through_ipc(frame) for i, frame in enumerate(frames)]


def _through_ipc(frame: pl.DataFrame) -> pl.DataFrame:
    buffer = io.BytesIO()
    frame.write_ipc(buffer)
    buffer.seek(0)
    return pl.read_ipc(buffer)


def _run_jobs(jobs: list[Job], count: int, processes: bool = False):
    """Each job's ``ChunkResult`` in job order: here, or ``count`` at a time in threads or (with
    ``processes``) worker processes.

    Workers are spawned (never forked: Polars' thread pool does not survive a fork) with one
    Polars thread each, since the processes already use the cores. A pool that breaks (a worker
    killed for memory) hands its remaining jobs back to this process."""
    if count <= 1:
        for job in jobs:
            yield _compacted(parse_chunks(*job))
        return
    if not processes:
        yield from _in_threads(jobs, count)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # Workers start at the first submissions, and these are set for them then (read at their
    # start): one Polars thread each; and a stand-in for the caller's main script, which spawned
    # workers would otherwise run again (multiprocessing re-imports __main__ unless a script
    # guards itself with `if __name__ == "__main__"`); they need nothing of it: the parse job is
    # importable by name. (They inherit the allocator setting the package made: postmortem/__init__.py.)
    settings = {"POLARS_MAX_THREADS": "1"}
    # A caller whose sys.stderr is no file (the TUI captures it): multiprocessing hands
    # sys.stderr's descriptor to its helper process, and a captured stream has none ("bad
    # value(s) in fds_to_keep"); the workers then write nothing to the terminal either.
    quiet = not _real_stream(sys.stderr)
    stderr = sys.stderr
    if quiet:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 -- closed below
    try:
        pool = ProcessPoolExecutor(count, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_worker_start, initargs=(quiet,))
    except BaseException:
        if quiet:
            sys.stderr.close()
            sys.stderr = stderr
        raise
    try:
        saved, main = {name: os.environ.get(name) for name in settings}, sys.modules.get("__main__")
        os.environ.update(settings)
        sys.modules["__main__"] = types.ModuleType("__main__")
        waiting = iter(jobs)
        pending: deque = deque()
        try:
            pending.extend((job, pool.submit(_parse_job, job)) for job in islice(waiting, count))
        finally:
            if quiet:
                sys.stderr.close()
                sys.stderr = stderr
            sys.modules["__main__"] = main
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        # At most two jobs per worker in flight: results that wait for this process would
        # otherwise pile up without bound.
        pending.extend((job, pool.submit(_parse_job, job)) for job in islice(waiting, count))
        yield from _results(pool, pending, waiting)
    except BaseException:
        _stop(pool)     # Ctrl-C, SIGTERM, an error here: the workers go now, not after their jobs
        raise
    pool.shutdown(wait=True)


POOL_STOPPED = False


def _stop(pool) -> None:
    """Kill a pool's workers and drop its queued jobs, without waiting for them (a pool whose
    workers were killed can keep ``shutdown(wait=True)`` waiting)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        try:
            process.kill()
        except (OSError, ValueError, AttributeError):
            pass
    try:
        pool.shutdown(wait=False, cancel_futures=True)
    except Exception:  # noqa: BLE001 -- on the way out
        pass
    # A worker killed while sending its result leaves the pool's manager thread waiting for the
    # rest of the message, and the interpreter would join that thread at exit for ever:
    # ``postmortem.cli.entry`` ends the process without that join once a pool was stopped.
    global POOL_STOPPED
    POOL_STOPPED = True
    for process in processes:
        try:
            process.join(timeout=5)
        except (OSError, ValueError, AssertionError):
            pass


def _in_threads(jobs: list[Job], count: int):
    """Each job's ``ChunkResult`` in job order, parsed ``count`` at a time in threads. Each job
    parses copies of its inputs (``_detached``), as a worker process does: a segmented input's
    kind and problems then come back per job, and are merged in job order by ``parse_all``,
    whichever thread finished first."""
    waiting = iter(jobs)
    # Ctrl-C, an error, a caller that stops early: the jobs queued are dropped, the ones running
    # (a thread cannot be stopped) finish first, a few seconds at most, so that none of them
    # writes to the scratch folder after it was removed.
    with ThreadPoolExecutor(count, thread_name_prefix="postmortem-parse") as pool:
        pending: deque = deque()
        try:
            # At most two jobs per thread in flight: results wait here in job order.
            pending.extend(pool.submit(_parse_detached, job) for job in islice(waiting, 2 * count))
            while pending:
                chunk = pending.popleft().result()
                following = next(waiting, None)
                if following is not None:
                    pending.append(pool.submit(_parse_detached, following))
                yield chunk
        finally:
            for future in pending:
                future.cancel()


def _parse_detached(job: Job) -> ChunkResult:
    return _compacted(parse_chunks(*_detached(job)))


def _detached(job: Job) -> Job:
    """``job`` with copies of its pieces' inputs (one copy per input, shared by its pieces)."""
    chunks, spool, batch_bytes = job
    copies: dict[int, InputFile] = {}
    for chunk in chunks:
        for piece in chunk:
            if id(piece.item) not in copies:
                copies[id(piece.item)] = replace(piece.item, problems=list(piece.item.problems))
    return [[replace(piece, item=copies[id(piece.item)]) for piece in chunk] for chunk in chunks], spool, batch_bytes


def _results(pool, pending: deque, waiting):
    """Each pending job's chunk in order, submitting the next job as one comes back. A pool that
    broke (a worker killed for memory) hands its remaining jobs back to this process."""
    from concurrent.futures.process import BrokenProcessPool

    broken = False
    while pending:
        job, future = pending.popleft()
        chunk = None
        if future is not None:
            try:
                chunk = future.result()
            except BrokenProcessPool:
                broken = True
        if chunk is None:    # the pool broke (a worker killed for memory): parse it here
            chunk = _compacted(parse_chunks(*job))
        following = next(waiting, None)
        if following is not None:
            pending.append((following, None if broken else pool.submit(_parse_job, following)))
        del future
        yield chunk


def _real_stream(stream) -> bool:
    """Whether ``stream`` is backed by an open file descriptor."""
    try:
        return stream is not None and stream.fileno() >= 0
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return False


def _worker_start(quiet: bool) -> None:
    """A worker ignores Ctrl-C (its parent stops it, on the one way out); with ``quiet`` its
    stdout and stderr go to /dev/null (its parent draws a terminal UI)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if quiet:
        _silence()


def _silence() -> None:
    """A worker's stdout and stderr to /dev/null."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)


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

    def advance(self, nbytes: int, files: int = 1) -> None:
        self.files += files
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


def _combine_chunk(ids: list[int], results: list[FileResult], batched: Batched,
                   whole: list[tuple[pl.DataFrame, pl.DataFrame]]) -> ChunkResult:
    """One chunk's lines (kinds assigned, understood NCCL INFO text dropped) and tables.
    ``whole``: the results' lines as frames of many inputs (``_Prepared.whole``)."""
    errors = [r.error for r in results]
    line_frames = [lines for lines, _ in whole if not lines.is_empty()]
    claims = [c for r in results for c in r.claims] + batched.claims
    tables: dict[str, list[pl.DataFrame]] = {}
    for r in results:
        for name, frame in r.tables.items():
            tables.setdefault(name, []).append(frame)
    plans = {}
    for name in tables.keys() | batched.tables.keys():
        frames = [frame.lazy() for frame in tables.get(name, []) + batched.tables.get(name, [])]
        plan = pl.concat(frames, how="diagonal_relaxed", rechunk=True)
        if name in batched.tables:
            # Rows of several parsers, each in its own order: put in the table's final order here,
            # by the chunk's thread (a stable sort keeps what the analysis would have; rows of one
            # line are never in two chunks). The analysis then finds them in order and leaves them,
            # where it gathered 55 columns of the 10,000-rank run's 0.5 M events again (0.35 s).
            plans[name] = plan.sort(row_order(plan.collect_schema().names()) or "input_id", maintain_order=True)
        else:
            plans[name] = plan
    merged = dict(zip(plans, collect_each(list(plans.values()))))    # every table in one call
    lines = None
    if line_frames:
        lines = _drop_nccl_info_text(_assign_kinds(pl.concat(line_frames, how="diagonal_relaxed", rechunk=True), claims),
                                     merged.get("nccl_lines"))
    return ChunkResult(ids, [r.item for r in results], lines, merged, errors)


def row_order(columns: list[str]) -> list[str] | None:
    """The columns a table's rows are ordered by (a stable sort), where it has lines: each input's
    lines in order, and the rows of one line by parser (one parser's in the order it wrote them),
    so that the order never depends on how the inputs were chunked, segmented or parallelised."""
    if "input_id" not in columns or "line_no" not in columns:
        return None
    return ["input_id", "line_no", *(["parser"] if "parser" in columns else [])]


def _drop_nccl_info_text(lines: pl.DataFrame, nccl_lines: pl.DataFrame | None) -> pl.DataFrame:
    """Understood NCCL INFO lines keep no text: the store reads it back by offset
    (``postmortem.analyzer.store``); lines the NCCL parser did not understand keep theirs."""
    if nccl_lines is None or nccl_lines.is_empty():
        return lines
    info = nccl_lines.filter((pl.col("level") == "INFO") & pl.col("kind").is_not_null()).select(
        "input_id", "line_no", _nccl_info=pl.lit(True))
    return lines.join(info, on=["input_id", "line_no"], how="left", maintain_order="left").with_columns(
        text=pl.when(pl.col("_nccl_info").fill_null(False)).then(None).otherwise(pl.col("text"))).drop("_nccl_info")


def _combine(chunks: list[ChunkResult], items: list[InputFile]) -> Parsed:
    whole = _joined(chunks)
    first_error: dict[int, str] = {}
    for input_id, error in zip(whole.ids, whole.errors):
        if error:
            first_error.setdefault(input_id, error)
    errors = [first_error.get(i) for i in range(len(items))]
    skimmed = whole.skim_counts
    for input_id, count in sorted(skimmed.items()):
        note = (f"{count} lines in the middle of this large log were skimmed: kept in the store but not parsed, "
                "except failure-like lines (the memory budget, POSTMORTEM_MEMORY, allows only part of the inputs "
                "to be parsed line by line)")
        items[input_id].problems = [p for p in items[input_id].problems if "were skimmed" not in p] + [note]
    messages = [e for e in errors if e]
    for item in items:
        messages.extend(f"{item.display}: {p}" for p in item.problems)
    lines = whole.lines if whole.lines is not None else pl.DataFrame()
    return Parsed(_inputs_frame(items, errors, lines, whole.bulk_counts, skimmed), lines, whole.tables, messages,
                  items, errors)


def _packed(item: InputFile) -> str | None:
    """The compression of an input parsed from its decoded copy (``discover.materialize``)."""
    if item.disk_size is None or not item.source:
        return None
    from postmortem.analyzer.discover import COMPRESSED

    return COMPRESSED.get(Path(item.source).suffix.lower())


_INPUT_SCHEMA = {"input_id": pl.UInt32, "path": pl.String, "abs_path": pl.String, "kind": pl.String,
                 "compression": pl.String, "bytes": pl.Int64, "mtime": pl.Float64, "lines": pl.Int64,
                 "parsed_lines": pl.Int64, "unparsed_lines": pl.Int64, "problem": pl.String}
_INPUT_COLUMNS = {name: dtype for name, dtype in _INPUT_SCHEMA.items() if "lines" not in name}


def _inputs_frame(items: list[InputFile], errors: list[str | None], lines: pl.DataFrame,
                  bulk_counts: dict[int, int], skim_counts: dict[int, int] | None = None) -> pl.DataFrame:
    """One row per input; ``bulk_counts``: its COLL trace lines held in the store's ``_bulk``
    rather than in ``lines`` (all of them understood); ``skim_counts``: its skimmed lines, in the
    store but not parsed. Built a column at a time (a row dict per input cost 0.17 s at 31,251)."""
    frame = pl.DataFrame({
        "input_id": range(len(items)), "path": [item.display for item in items],
        "abs_path": [path_text(item.source or item.path) for item in items], "kind": [item.kind for item in items],
        "compression": [item.compression or _packed(item) for item in items],
        "bytes": [item.disk_size or item.size for item in items], "mtime": [item.mtime for item in items],
        "problem": ["; ".join(([error] if error else []) + item.problems) or None for item, error in zip(items, errors)],
    }, schema=_INPUT_COLUMNS)
    # per input: its lines (n) and the parsed ones (p), from the lines, the bulk and the skimmed
    per_input = {"input_id": pl.UInt32, "n": pl.Int64, "p": pl.Int64}
    skimmed = skim_counts or {}
    counted = [pl.DataFrame({"input_id": list(bulk_counts), "n": list(bulk_counts.values()),
                             "p": list(bulk_counts.values())}, schema=per_input),
               pl.DataFrame({"input_id": list(skimmed), "n": list(skimmed.values()), "p": [0] * len(skimmed)},
                            schema=per_input)]
    if not lines.is_empty():
        counted.append(lines.group_by("input_id").agg(n=pl.len(), p=pl.col("kind").is_not_null().sum()).cast(per_input))
    totals = pl.concat(counted).group_by("input_id").agg(pl.col("n").sum(), pl.col("p").sum())
    frame = frame.join(totals, on="input_id", how="left", maintain_order="left").with_columns(
        lines=pl.col("n").fill_null(0), parsed_lines=pl.col("p").fill_null(0))
    return frame.with_columns(unparsed_lines=pl.col("lines") - pl.col("parsed_lines")).select(list(_INPUT_SCHEMA))
