"""Find the inputs under the paths a user gave, read their bytes, and sniff what they are.

Inputs are only ever opened for reading. Compressed files (.gz, .zst, .bz2, .xz) are read
as they are; a truncated stream keeps what could be decompressed and says so. Binary files,
Nsight Systems SQLite exports and Kineto JSON traces go to their readers (``analyzer.ingest``);
other SQLite databases are not logs: they are listed with a reason and skipped. Pickles and
FR-shaped JSON are offered to the Flight Recorder reader (never ``pickle.load``; see
``parsers.flight_recorder``).
"""

from __future__ import annotations

import bz2
import io
import lzma
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import zstandard

COMPRESSED = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2", ".xz": "xz"}
# Decompressed size above which we stop: protects a login node from a compression bomb.
MAX_DECOMPRESSED = 8 << 30


@dataclass
class InputFile:
    path: Path                      # absolute path
    display: str                    # path as shown in reports: relative to the root it was found under
    size: int
    mtime: float
    compression: str | None = None
    kind: str = "log"               # log | pyspy | env | flight_recorder | nsys | kineto | skipped
    problems: list[str] = field(default_factory=list)
    source: str | None = None       # archive members: "<absolute archive path>!/<member>" (analyzer.archives)


# Files that describe a job folder rather than record it: a README, Markdown notes, the expected
# findings or ground truth a test fixture carries. Found inside a folder (or an archive) they are
# not evidence -- a README that quotes an Xid line must not become an Xid -- and are left out;
# named on the command line they are read like any other file.
_DOC_FILES = re.compile(r"^(readme([._-].*)?|.*\.(md|markdown|rst)|expected\.json|truth\.json|case\.json)$", re.I)


def is_documentation(name: str) -> bool:
    """A file name (no folder) that ``discover`` leaves out of a folder: README*, *.md, *.rst,
    expected.json, truth.json, CASE.json."""
    return bool(_DOC_FILES.match(name))


def discover(paths: list[str | Path], exclude: set[Path] | None = None, scratch=None,
             progress=None) -> tuple[list[InputFile], list[str]]:
    """Every readable file under ``paths`` (recursively, sorted), plus messages for bad paths.

    Archives (``analyzer.archives``) are expanded in place of themselves: their members are
    copied into ``scratch`` (an ``archives.Scratch``; the caller removes it) and listed as
    ``archive!/member``. ``progress`` (a callable taking one status line) hears about long
    extractions. Documentation files (``is_documentation``) inside a folder or an archive are
    left out; a path that names one is read."""
    from analyzer import archives

    exclude = {p.resolve() for p in (exclude or set())}
    found: list[InputFile] = []
    errors: list[str] = []
    for given in paths:
        root = Path(given)
        if not root.exists():
            errors.append(f"{given}: no such file or directory")
            continue
        # excluded folders strictly inside this root (the report's --out folder in the job folder)
        inside = {e for e in exclude if root.resolve() in e.parents}
        if root.is_file():
            candidates = [(root.name, str(root), str(root.resolve()))]
        else:
            candidates = _files_under(root)
        for display, path, resolved in candidates:
            real = Path(resolved)
            if real in exclude or display.endswith((".duckdb", ".duckdb.wal")) or \
                    (inside and any(p in inside for p in real.parents)):
                continue
            if not root.is_file() and is_documentation(os.path.basename(display)):
                continue  # a README or expected.json in a job folder is not evidence
            try:
                stat = os.stat(path)
            except OSError as exc:      # gone or unreadable since it was listed
                errors.append(f"{path}: {exc.strerror or exc}")
                continue
            if archives.is_archive(path):
                if scratch is None:
                    scratch = archives.Scratch()  # removed at exit
                members, problems = archives.expand(Path(path), display, scratch, progress)
                found.extend(members)
                errors.extend(problems)
                continue
            found.append(InputFile(real, display, stat.st_size, stat.st_mtime,
                                   COMPRESSED.get(os.path.splitext(path)[1].lower())))
    return found, errors


def _files_under(root: Path) -> list[tuple[str, str, str]]:
    """Every file under ``root``, recursively, sorted as paths sort (part by part): its path
    relative to ``root`` (what reports show), its path, its resolved path. Hidden files and
    folders (a name starting with ".") are skipped; a link to a file is listed, a link to a
    folder is not followed (as ``Path.rglob`` does), a broken link and an unreadable folder are
    left out.

    One ``scandir`` per folder, and a file's resolved path is its folder's plus its name unless
    it is a link: ``rglob`` with ``is_file`` and ``resolve`` per file took 5 s for the 31,000
    files of a 10,000-rank run."""
    found: list[tuple[tuple[str, ...], str, str]] = []
    pending: list[tuple[str, str, tuple[str, ...]]] = [(str(root), os.path.realpath(root), ())]
    while pending:
        folder, real, parts = pending.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    if entry.name.startswith("."):
                        continue
                    try:
                        if entry.is_dir(follow_symlinks=False):     # a folder, not a link to one
                            pending.append((entry.path, os.path.join(real, entry.name), (*parts, entry.name)))
                        elif entry.is_file():   # follows a link: a link to a file counts
                            resolved = os.path.realpath(entry.path) if entry.is_symlink() else \
                                os.path.join(real, entry.name)
                            found.append(((*parts, entry.name), entry.path, resolved))
                    except OSError:
                        continue
        except OSError:     # unreadable folder: as rglob, skipped
            continue
    found.sort(key=lambda f: f[0])
    return [(os.path.join(*parts), path, resolved) for parts, path, resolved in found]


def read_bytes(item: InputFile) -> bytes:
    """The decompressed content. Problems (truncation) are appended to ``item.problems``."""
    if item.compression is None:
        with open(item.path, "rb") as handle:
            return handle.read()
    with open(item.path, "rb") as handle:
        return _decompress_from(handle, item)


def _decompress(data: bytes, item: InputFile) -> bytes:
    return _decompress_from(io.BytesIO(data), item)


def max_decompressed() -> int:
    """Decompressed size above which one input is skipped (``POSTMORTEM_MAX_DECOMPRESSED``, bytes)."""
    try:
        return int(os.environ.get("POSTMORTEM_MAX_DECOMPRESSED", MAX_DECOMPRESSED))
    except ValueError:
        return MAX_DECOMPRESSED


def _decompress_from(source, item: InputFile) -> bytes:
    """Every member of a compressed input (``Decompressed``), as far as the data goes: a torn or
    damaged stream keeps the part that was readable and says so in ``item.problems``."""
    kind = item.compression
    if kind not in DECODERS:
        raise InputError(f"{item.display}: unknown compression {kind}")
    limit = max_decompressed()
    stream = Decompressed(source, kind)
    out: list[bytes] = []
    total = 0
    try:
        while chunk := stream.read(STEP):
            total += len(chunk)
            if total > limit:
                raise InputError(f"{item.display}: decompresses to more than {_size(limit)} (the cap, "
                                 "POSTMORTEM_MAX_DECOMPRESSED: a compression bomb?); skipped")
            out.append(chunk)
    except DECODE_ERRORS as exc:
        if not total:
            raise InputError(f"{item.display}: corrupt {kind} data ({_why(exc)}); skipped") from exc
        item.problems.append(f"corrupt {kind} data after {total} bytes ({_why(exc)}); kept what was readable")
        return b"".join(out)
    if stream.truncated:
        if not total:
            raise InputError(f"{item.display}: truncated {kind} file: the stream ends before anything could be "
                             "decompressed; skipped")
        item.problems.append(f"truncated {kind} file: the stream ends early; kept the {total} bytes that were "
                             "readable")
    if stream.trailing:
        item.problems.append(f"{stream.trailing} bytes after the last {kind} stream are not {kind} data; ignored")
    return b"".join(out)


def _gzip():
    return zlib.decompressobj(16 + zlib.MAX_WBITS)


def _zstd():
    return zstandard.ZstdDecompressor().decompressobj()


DECODERS = {"gzip": _gzip, "bz2": bz2.BZ2Decompressor, "xz": lzma.LZMADecompressor, "zstd": _zstd}
DECODE_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError, zstandard.ZstdError, ValueError)
STEP = 4 << 20        # decompressed bytes per read: a bomb is stopped at the cap, not in memory
_FEED = 1 << 16       # compressed bytes read at a time
_ZSTD_FEED = 1 << 13  # zstd has no output bound per call: small inputs keep each call's output small (<= 256 MiB)


class Decompressed(io.RawIOBase):
    """The decompressed bytes of ``source`` (a binary file object holding ``kind`` data: gzip, bz2,
    xz or zstd) as a readable stream, every member in turn: ``cat a.gz b.gz``, bgzip, pbzip2 and
    pzstd write several members (streams, frames), each of which ends the decoder that read it.
    Zero padding between or after members is skipped. Each read returns at most about ``size``
    bytes, so a compression bomb costs no more memory than one read.

    After the last byte: ``truncated`` (the data ends inside a member) and ``trailing`` (the
    number of bytes after the last member that are not another member). Damage inside a member
    raises the decoder's error (``DECODE_ERRORS``)."""

    def __init__(self, source, kind: str) -> None:
        super().__init__()
        self.source, self.kind = source, kind
        self.truncated = False
        self.trailing = 0
        self.members = 0
        self._fed = 0
        self._pieces = self._decode()
        self._buffer = b""
        self._pos = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if size is not None and 0 <= size <= len(self._buffer) - self._pos:
            self._pos += size
            return self._buffer[self._pos - size:self._pos]
        rest = self._buffer[self._pos:] if self._pos else self._buffer
        if size is None or size < 0:
            self._buffer, self._pos = b"", 0
            return rest + b"".join(self._pieces)
        parts, have = [rest], len(rest)
        while have < size:
            piece = next(self._pieces, None)
            if piece is None:
                break
            parts.append(piece)
            have += len(piece)
        self._buffer = b"".join(parts)
        self._pos = min(size, len(self._buffer))
        return self._buffer[:size]

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def _more(self) -> bytes:
        data = self.source.read(_ZSTD_FEED if self.kind == "zstd" else _FEED)
        self._fed += len(data)
        return data

    def _decode(self):
        data = b""
        while True:
            # the start of the next member, past any zero padding (tape blocks, xz stream padding)
            while True:
                data = data or self._more()
                if not data:
                    return
                if self.members:
                    data = data.lstrip(b"\0")
                    if not data:
                        continue
                break
            decoder = DECODERS[self.kind]()
            began = self._fed - len(data)
            produced = 0
            pieces = self._step(decoder, data)
            try:
                out = next(pieces)
            except DECODE_ERRORS:
                if not self.members:
                    raise
                self._rest(began)  # not another member: trailing bytes
                return
            self.members += 1
            while True:
                if out:
                    produced += len(out)
                    yield out
                try:
                    out = next(pieces)
                except StopIteration as stop:
                    data = stop.value
                    break
            if data is None:  # the input ended inside this member
                if self.members > 1 and not produced:
                    self._rest(began)  # a few stray bytes after the last member, not a torn one
                    self.members -= 1
                else:
                    self.truncated = True
                return

    def _rest(self, began: int) -> None:
        """Everything from ``began`` (a count of compressed bytes) to the end is trailing bytes."""
        while self._more():
            pass
        self.trailing = self._fed - began

    def _step(self, decoder, data: bytes):
        """Feed one member's decoder from ``data`` on; yields its output in pieces and returns the
        input left after the member (None when the input ended before the member did)."""
        step = STEP
        if self.kind == "gzip":
            while True:
                out = decoder.decompress(data, step)
                data = decoder.unconsumed_tail
                yield out
                if decoder.eof:
                    return decoder.unused_data + data
                if not data:
                    data = self._more()
                    if not data:
                        tail = decoder.flush()
                        if tail:
                            yield tail
                        return b"" if decoder.eof else None
        if self.kind == "zstd":
            while True:
                piece, data = data[:_ZSTD_FEED], data[_ZSTD_FEED:]
                out = decoder.decompress(piece)
                yield out
                if decoder.eof:
                    return decoder.unused_data + data
                if not data:
                    data = self._more()
                    if not data:
                        return None
        while True:  # bz2, xz: the decoder keeps unread input itself
            out = decoder.decompress(data, step)
            data = b""
            yield out
            if decoder.eof:
                return decoder.unused_data
            if decoder.needs_input:
                data = self._more()
                if not data:
                    return None


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n} bytes"


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class InputError(Exception):
    """An input that cannot be read as a log; the message names the file and the reason."""


# SQLite's rollback journal and write-ahead log headers
_SQLITE_SIDE = (b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7", b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83")
_PYSPY_HEAD = re.compile(rb"^Process \d+: ", re.M)


def sniff(item: InputFile, data: bytes) -> str:
    """Classify an input by content: log, pyspy, env, or raise InputError for non-logs."""
    head = data[:65536]
    if not data:
        raise InputError(f"{item.display}: empty file")
    if head.startswith(b"SQLite format 3\x00"):
        # Uncompressed nsys exports never get here (analyzer.ingest routes them to parsers.nsys).
        raise InputError(f"{item.display}: SQLite database that is not a readable Nsight Systems export "
                         "(compressed, or no nsys tables); skipped")
    if item.path.name.endswith(("-journal", "-wal", "-shm")) and (head.startswith(_SQLITE_SIDE) or _looks_binary(head)):
        # a SQLite rollback journal, write-ahead log or its index, left by a writer of the database beside it
        raise InputError(f"{item.display}: SQLite {item.path.name.rsplit('-', 1)[1]} file of "
                         f"{item.path.name.rsplit('-', 1)[0]} (another process is writing that database, or "
                         "was when it stopped); not a log; skipped")
    if item.path.suffix.lower() in (".nsys-rep", ".qdrep"):
        # Issue 8: the report itself is a proprietary format; the SQLite export is what we read.
        raise InputError(f"{item.display}: Nsight Systems report (needs nsys to read); export it with "
                         f"`nsys export --type sqlite {item.path.name}` and analyse the .sqlite; skipped")
    # PyTorch profiler / Kineto Chrome traces (issue 8): a JSON object with "traceEvents"
    # (before the Flight Recorder check: newer Kineto traces carry "pg_config" too).
    if head.lstrip()[:1] == b"{" and b'"traceEvents"' in data[:1 << 22]:
        return "kineto"
    # Pickles and FR-shaped JSON go to the Flight Recorder reader (parsers.flight_recorder),
    # which unpickles with a find_class that refuses every global and rejects anything that is
    # not FR-shaped with a message; plain pickle.load is never used.
    if head[:1] == b"\x80" and len(head) > 1 and head[1] in (2, 3, 4, 5):
        return "flight_recorder"
    if head.lstrip()[:1] == b"{" and (b'"entries"' in head or b'"pg_status"' in head or b'"pg_config"' in head):
        return "flight_recorder"
    if _looks_binary(head):
        raise InputError(f"{item.display}: binary file, not a text log; skipped")
    if _PYSPY_HEAD.match(head) and b"\nThread " in head:
        return "pyspy"
    return "log"


# Control bytes no text log has (tab, newlines, form feed and ESC of ANSI colours excepted).
_CONTROLS = bytes(b for b in range(32) if b < 9 or 13 < b < 32 and b != 27)


def _looks_binary(head: bytes) -> bool:
    if b"\x00" in head[:8192] and head[:8192].count(b"\x00") > len(head[:8192]) // 100:
        return True
    start = head[:4096]
    controls = len(start) - len(start.translate(None, _CONTROLS))   # counted in C, not per byte
    return controls > len(start) // 10


def path_hints(display: str) -> dict:
    """What a path says: torchrun's ``attempt_N/<local_rank>/`` and py-spy's pid file name."""
    hints: dict = {}
    display = display.rsplit("!/", 1)[-1]  # an archive member: its path inside the archive
    parts = Path(display).parts
    match = re.search(r"(?:^|/)attempt_(\d+)/(\d+)/(?:stdout|stderr)\.log", display)
    if match:
        hints["attempt"] = int(match.group(1))
        hints["local_rank"] = int(match.group(2))
    pid = re.search(r"py-?spy[-_]?(\d+)\.txt$", parts[-1]) if parts else None
    if pid:
        hints["pid"] = int(pid.group(1))
    hints["dirs"] = list(parts[:-1])
    return hints
