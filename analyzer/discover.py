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
import lzma
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


def discover(paths: list[str | Path], exclude: set[Path] | None = None, scratch=None,
             progress=None) -> tuple[list[InputFile], list[str]]:
    """Every readable file under ``paths`` (recursively, sorted), plus messages for bad paths.

    Archives (``analyzer.archives``) are expanded in place of themselves: their members are
    copied into ``scratch`` (an ``archives.Scratch``; the caller removes it) and listed as
    ``archive!/member``. ``progress`` (a callable taking one status line) hears about long
    extractions."""
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
            candidates = [root]
            base = root.parent
        else:
            candidates = sorted(p for p in root.rglob("*") if p.is_file() and not _hidden(p, root))
            base = root
        for path in candidates:
            resolved = path.resolve()
            if resolved in exclude or path.name.endswith((".duckdb", ".duckdb.wal")) or \
                    (inside and any(p in inside for p in resolved.parents)):
                continue
            stat = path.stat()
            display = str(path.relative_to(base)) if path != root else path.name
            if archives.is_archive(path):
                if scratch is None:
                    scratch = archives.Scratch()  # removed at exit
                members, problems = archives.expand(path, display, scratch, progress)
                found.extend(members)
                errors.extend(problems)
                continue
            found.append(InputFile(resolved, display, stat.st_size, stat.st_mtime,
                                   COMPRESSED.get(path.suffix.lower())))
    return found, errors


def _hidden(path: Path, root: Path) -> bool:
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def read_bytes(item: InputFile) -> bytes:
    """The decompressed content. Problems (truncation) are appended to ``item.problems``."""
    with open(item.path, "rb") as handle:
        data = handle.read()
    if item.compression is None:
        return data
    return _decompress(data, item)


def _decompress(data: bytes, item: InputFile) -> bytes:
    kind = item.compression
    try:
        if kind == "gzip":
            return _stream(zlib.decompressobj(16 + zlib.MAX_WBITS), data, item)
        if kind == "zstd":
            return _zstd(data, item)
        if kind == "bz2":
            return _stream(bz2.BZ2Decompressor(), data, item)
        if kind == "xz":
            return _stream(lzma.LZMADecompressor(), data, item)
    except (OSError, EOFError, zlib.error, lzma.LZMAError, zstandard.ZstdError, ValueError) as exc:
        raise InputError(f"{item.display}: cannot decompress {kind}: {exc}") from exc
    raise InputError(f"{item.display}: unknown compression {kind}")


def _stream(decoder, data: bytes, item: InputFile) -> bytes:
    """Decompress as far as the data goes; a torn stream keeps the part that was readable."""
    out = []
    total = 0
    view = memoryview(data)
    step = 1 << 20
    try:
        for start in range(0, len(data), step):
            chunk = decoder.decompress(view[start:start + step])
            total += len(chunk)
            if total > MAX_DECOMPRESSED:
                raise InputError(f"{item.display}: decompresses to more than {MAX_DECOMPRESSED >> 30} GiB; skipped")
            out.append(chunk)
            if getattr(decoder, "eof", False):
                break
    except (OSError, EOFError, zlib.error, lzma.LZMAError) as exc:
        if not out:
            raise InputError(f"{item.display}: corrupt {item.compression} data: {exc}") from exc
        item.problems.append(f"corrupt {item.compression} data after {total} bytes; kept what was readable")
        return b"".join(out)
    if not getattr(decoder, "eof", True):
        item.problems.append(
            f"truncated {item.compression} file: the stream ends early; kept the {total} bytes that were readable")
    return b"".join(out)


def _zstd(data: bytes, item: InputFile) -> bytes:
    decoder = zstandard.ZstdDecompressor().decompressobj()
    try:
        out = decoder.decompress(data)
    except zstandard.ZstdError as exc:
        raise InputError(f"{item.display}: corrupt zstd data: {exc}") from exc
    if len(out) > MAX_DECOMPRESSED:
        raise InputError(f"{item.display}: decompresses to more than {MAX_DECOMPRESSED >> 30} GiB; skipped")
    if not decoder.eof:
        item.problems.append(f"truncated zstd file: kept the {len(out)} bytes that were readable")
    return out


class InputError(Exception):
    """An input that cannot be read as a log; the message names the file and the reason."""


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


def _looks_binary(head: bytes) -> bool:
    if b"\x00" in head[:8192] and head[:8192].count(b"\x00") > len(head[:8192]) // 100:
        return True
    controls = sum(1 for b in head[:4096] if b < 9 or 13 < b < 32 and b != 27)
    return controls > len(head[:4096]) // 10


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
