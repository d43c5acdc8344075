"""Find the inputs under the paths a user gave, read their bytes, and sniff what they are.

Inputs are only ever opened for reading. Compressed files (.gz, .zst, .bz2, .xz) are read
as they are; a truncated stream keeps what could be decompressed and says so. Formats read as
one document (profiles, dumps) are claimed by their parsers' ``sniff`` hooks
(``postmortem.parsers.WHOLE_FILE``) and read whole by ``postmortem.analyzer.ingest``; other
binary files are not logs: they are listed with a reason and skipped.
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

from postmortem import parsers

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
    kind: str = "log"               # log | pyspy | env | skipped | a whole-file parser's NAME (parsers.WHOLE_FILE)
    problems: list[str] = field(default_factory=list)
    source: str | None = None       # archive members: "<absolute archive path>!/<member>" (postmortem.analyzer.archives);
                                    # a decoded copy (``materialize``): the file it was decoded from
    line_end: bytes = b"\n"         # b"\r": a file with carriage returns and no newline (old Mac line ends)
    disk_size: int | None = None    # a decoded copy: the size of the file as stored (inputs.bytes)
    failure: str | None = None      # why it cannot be read, found before parsing (``materialize``)


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
             progress=None, follow_symlinks: bool = False) -> tuple[list[InputFile], list[str]]:
    """Every readable file under ``paths`` (recursively, sorted), plus messages for bad paths.

    Archives (``postmortem.analyzer.archives``) are expanded in place of themselves: their members are
    copied into ``scratch`` (an ``archives.Scratch``; the caller removes it) and listed as
    ``archive!/member``. ``progress`` (a callable taking one status line) hears about long
    extractions. Documentation files (``is_documentation``) inside a folder or an archive are
    left out; a path that names one is read.

    Inputs stay inside the roots the user named (docs/security.md): a link (to a file or a
    folder) whose target lies outside every root is skipped and counted in one message, and so
    is a file with several hard links owned by someone other than the root folder's owner when
    this process runs as root or as another user than that owner. ``follow_symlinks`` reads them
    (and follows links to folders, each real folder once)."""
    from postmortem.analyzer import archives

    exclude = {p.resolve() for p in (exclude or set())}
    found: list[InputFile] = []
    errors: list[str] = []
    fences = [Path(os.path.realpath(g)) for g in paths]
    fences = [f if f.is_dir() else f.parent for f in fences]
    walk = _Walk(fences, follow_symlinks)
    for given in paths:
        root = Path(given)
        if not root.exists():
            errors.append(f"{display_name(str(given))}: no such file or directory")
            continue
        # excluded folders strictly inside this root (the report's --out folder in the job folder)
        inside = {e for e in exclude if root.resolve() in e.parents}
        owner = _owner(root if root.is_dir() else root.parent)
        # asked once, not per file: a stat each, and Path hashing for an exclude set that is
        # usually empty, were about a quarter of the time for a 10,000-rank run's 31,000 files
        given_file = root.is_file()
        if given_file:
            candidates = [(root.name, str(root), str(root.resolve()))]
        else:
            candidates = walk.files_under(root)
        for display, path, resolved in candidates:
            if display.endswith((".duckdb", ".duckdb.wal")):
                continue
            if not given_file and is_documentation(os.path.basename(display)):
                continue  # a README or expected.json in a job folder is not evidence
            real = Path(resolved)
            if exclude and (real in exclude or (inside and any(p in inside for p in real.parents))):
                continue
            try:
                stat = os.stat(path)
            except OSError as exc:      # gone or unreadable since it was listed
                errors.append(f"{display_name(path)}: {exc.strerror or exc}")
                continue
            if not follow_symlinks and _foreign_hard_link(stat, owner):
                walk.hard_links.append(display)
                continue
            if archives.is_archive(path):
                if scratch is None:
                    scratch = archives.Scratch()  # removed at exit
                members, problems = archives.expand(Path(path), display_name(display), scratch, progress)
                found.extend(members)
                errors.extend(problems)
                continue
            found.append(InputFile(real, display_name(display), stat.st_size, stat.st_mtime,
                                   COMPRESSED.get(os.path.splitext(path)[1].lower())))
    errors.extend(walk.messages())
    return found, errors


def _owner(folder: Path) -> int | None:
    try:
        return folder.stat().st_uid
    except OSError:
        return None


def _foreign_hard_link(st: os.stat_result, owner: int | None) -> bool:
    """A file with several names owned by another user than the job folder's, read by root or by
    someone other than the folder's owner: a hard link the job's user made to a file that is
    not theirs (a link made to read it through us)."""
    if st.st_nlink < 2 or owner is None or not hasattr(os, "geteuid"):
        return False
    me = os.geteuid()
    return (me == 0 or me != owner) and st.st_uid != owner


def display_name(name: str) -> str:
    """A file or member name for every report format: control characters, newlines and bidi
    controls as visible escapes, bytes that are not UTF-8 (``surrogateescape``) as ``\\xNN``."""
    if name.isprintable() and name.isascii():
        return name
    out = []
    for ch in name:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:        # an undecodable byte of a POSIX file name
            out.append(f"\\x{code - 0xDC00:02x}")
        elif code < 0x20 or 0x7F <= code < 0xA0:
            out.append(f"\\x{code:02x}")
        elif code in _BIDI or 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def path_text(path: str | Path) -> str:
    """A path as text a store can hold (UTF-8): bytes of a name that are not UTF-8 as ``\\xNN``
    (``real_path`` reverses it)."""
    text = os.fspath(path)
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return os.fsencode(text).decode("utf-8", "backslashreplace")


def real_path(text: str) -> str:
    """The file ``path_text`` named: ``\\xNN`` escapes of non-UTF-8 bytes back to those bytes."""
    if "\\x" not in text or os.path.lexists(text):
        return text
    return re.sub(r"\\x([89a-f][0-9a-f])", lambda m: chr(0xDC00 + int(m.group(1), 16)), text)


_BIDI = {0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029}


class _Walk:
    """The folder walk of ``discover``: what it skipped (links out of the roots, unreadable
    folders) is counted for the messages."""

    def __init__(self, fences: list[Path], follow: bool) -> None:
        self.fences, self.follow = fences, follow
        self.outside: list[str] = []
        self.unreadable: list[tuple[str, str]] = []
        self.hard_links: list[str] = []
        self.seen: set[str] = set()

    def inside(self, real: str) -> bool:
        path = Path(real)
        return any(path == f or f in path.parents for f in self.fences)

    def files_under(self, root: Path) -> list[tuple[str, str, str]]:
        """Every file under ``root``, recursively, sorted as paths sort (part by part): its path
        relative to ``root`` (what reports show), its path, its resolved path. Hidden files and
        folders (a name starting with ".") are skipped; a link to a file is listed when its
        target is inside the roots; a link to a folder is not followed (as ``Path.rglob`` does)
        unless ``follow``; a broken link is left out; an unreadable folder is named.

        One ``scandir`` per folder, and a file's resolved path is its folder's plus its name unless
        it is a link: ``rglob`` with ``is_file`` and ``resolve`` per file took 5 s for the 31,000
        files of a 10,000-rank run."""
        found: list[tuple[tuple[str, ...], str, str]] = []
        top = os.path.realpath(root)
        self.seen.add(top)
        pending: list[tuple[str, str, tuple[str, ...]]] = [(str(root), top, ())]
        while pending:
            folder, real, parts = pending.pop()
            try:
                with os.scandir(folder) as entries:
                    for entry in entries:
                        if entry.name.startswith("."):
                            continue
                        try:
                            self._entry(entry, real, parts, pending, found)
                        except OSError:
                            continue
            except OSError as exc:
                self.unreadable.append((display_name(folder), exc.strerror or str(exc)))
                continue
        found.sort(key=lambda f: f[0])
        return [(os.path.join(*parts), path, resolved) for parts, path, resolved in found]

    def _entry(self, entry, real, parts, pending, found) -> None:
        name = (*parts, entry.name)
        if entry.is_dir(follow_symlinks=False):     # a folder, not a link to one
            pending.append((entry.path, os.path.join(real, entry.name), name))
        elif entry.is_symlink():
            target = os.path.realpath(entry.path)
            if not self.follow and not self.inside(target):
                if os.path.exists(target):
                    self.outside.append(os.path.join(*name))
                return
            if entry.is_file():
                found.append((name, entry.path, target))
            elif self.follow and entry.is_dir() and target not in self.seen:
                self.seen.add(target)
                pending.append((entry.path, target, name))
        elif entry.is_file():
            found.append((name, entry.path, os.path.join(real, entry.name)))

    def messages(self) -> list[str]:
        out = []
        if self.outside:
            out.append(f"skipped {len(self.outside)} link(s) to files or folders outside the input folders "
                       f"(--follow-symlinks reads them): {_few(self.outside)}")
        if self.hard_links:
            out.append(f"skipped {len(self.hard_links)} file(s) with several hard links owned by another user "
                       f"than the input folder's owner (--follow-symlinks reads them): {_few(self.hard_links)}")
        for folder, why in self.unreadable:
            out.append(f"{folder}: cannot read this folder ({why}); the files in it are not analysed")
        return out


def _few(names: list[str], keep: int = 3) -> str:
    shown = ", ".join(display_name(n) for n in names[:keep])
    return shown + (f" and {len(names) - keep} more" if len(names) > keep else "")


def open_input(path: str | Path):
    """An input opened for reading, never through a link swapped in for it since it was found
    (``O_NOFOLLOW`` on the last part of its resolved path)."""
    return os.fdopen(open_input_fd(path), "rb")


def open_input_fd(path: str | Path) -> int:
    """``open_input``'s file descriptor alone, for a caller that reads a small file in a call or
    two (a file object costs more than such a read: 18 against 11 us a file, thousands a run)."""
    return os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))


def read_fd(fd: int, count: int) -> bytes:
    """Up to ``count`` bytes of ``fd`` from its position: fewer only at its end (``os.read`` may
    return less than asked for)."""
    parts, left = [], count
    while left > 0:
        part = os.read(fd, left)
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def read_bytes(item: InputFile) -> bytes:
    """The decompressed content. Problems (truncation) are appended to ``item.problems``."""
    if item.compression is None:
        with open_input(item.path) as handle:
            return handle.read()
    with open_input(item.path) as handle:
        return _decompress_from(handle, item)


# -- bounded reading: long lines, leading NULs, CR line ends ------------------------------------

MAX_LINE = 1 << 20    # bytes of one line kept; the rest of a longer line is skipped (counted)
BLOCK = 4 << 20       # bytes read at a time
WHOLE_READ = 48 << 20  # a range up to this size is read at once (a segment is 32 MB and a line)


def max_line() -> int:
    """The line cap (``POSTMORTEM_MAX_LINE_BYTES``, default 1 MiB): a longer line keeps its first
    bytes up to the cap as evidence, the rest is skipped and counted."""
    try:
        return max(256, int(os.environ.get("POSTMORTEM_MAX_LINE_BYTES", MAX_LINE)))
    except ValueError:
        return MAX_LINE


@dataclass
class Capped:
    """What ``read_capped`` read: the bytes (each line at most the cap), where lines were cut
    (``cuts``: position in ``data`` of the cut line's end, bytes skipped there) and where the
    bytes start in the input (``start``: past leading NUL bytes)."""
    data: bytes
    cuts: list[tuple[int, int]] = field(default_factory=list)
    start: int = 0
    nuls: int = 0


def _blocks(handle, left: int | None):
    while left is None or left > 0:
        block = handle.read(BLOCK if left is None else min(BLOCK, left))
        if not block:
            return
        if left is not None:
            left -= len(block)
        yield block


def leading_nuls(handle, start: int = 0) -> int:
    """How many NUL bytes the input starts with (what logrotate's copytruncate leaves: the file
    was truncated while the writer kept its offset). Reads past them a block at a time."""
    handle.seek(start)
    # a small look first: nearly every input starts with text, and a block is 4 MB to copy
    probe = handle.read(1 << 12)
    stripped = probe.lstrip(b"\0")
    count = len(probe) - len(stripped)
    if stripped or not probe:
        return count
    for block in _blocks(handle, None):
        stripped = block.lstrip(b"\0")
        count += len(block) - len(stripped)
        if stripped:
            break
    return count


def _within_cap(block: bytes, pos: int, line: int, cap: int, sep: bytes) -> bool:
    """Whether no line of ``block[pos:]`` passes ``cap`` (``line``: bytes of the first line read
    before ``pos``), found by jumping from separator to separator at most ``cap`` bytes apart
    (a search from the end of each window), not by splitting the block into its lines."""
    n = len(block)
    while n - pos + line > cap:
        last = block.rfind(sep, pos, pos + cap - line + 1)
        if last < 0:
            return False
        pos, line = last + 1, 0
    return True


def _range_size(handle, start: int, end: int | None) -> int | None:
    """Bytes from ``start`` to ``end``, or to the end of the file (None where that is unknown)."""
    if end is not None:
        return max(0, end - start)
    try:
        return max(0, os.fstat(handle.fileno()).st_size - start)
    except (OSError, AttributeError, io.UnsupportedOperation):
        return None


def read_capped(handle, start: int = 0, end: int | None = None, cap: int | None = None, sep: bytes = b"\n",
                skip_nuls: bool = False) -> Capped:
    """The bytes from ``start`` to ``end`` (or the end) with every line longer than ``cap`` cut at
    the cap: memory stays at about the bytes kept, whatever the lines. ``skip_nuls``: leading NUL
    bytes are skipped (``Capped.start`` says where the bytes begin)."""
    cap = cap or max_line()
    nuls = leading_nuls(handle, start) if skip_nuls else 0
    start += nuls
    handle.seek(start)
    # Nearly always no line passes the cap: then a range of at most WHOLE_READ bytes is one read,
    # with no copy into a growing buffer and out of it again (871 MB in 32 MB chunks: 0.5 s,
    # under the GIL). Larger ranges, and those with a longer line, go a block at a time.
    size = _range_size(handle, start, end)
    if size is not None and size <= WHOLE_READ:
        whole = handle.read() if end is None else handle.read(size)
        if _within_cap(whole, 0, 0, cap, sep):
            return Capped(whole, [], start, nuls)
        del whole
        handle.seek(start)
    out = bytearray()
    cuts: list[tuple[int, int]] = []
    line = 0            # length of the line being read, already in ``out``
    skipping = False
    skipped = 0
    for block in _blocks(handle, None if end is None else end - start):
        pos, n = 0, len(block)
        while pos < n:
            if skipping:
                at = block.find(sep, pos)
                if at < 0:
                    skipped += n - pos
                    break
                skipped += at - pos
                cuts.append((len(out), skipped))
                skipping, skipped, line, pos = False, 0, 0, at
                continue
            if _within_cap(block, pos, line, cap, sep):
                last = block.rfind(sep, pos)
                out += block[pos:] if pos else block
                line = line + n - pos if last < 0 else n - last - 1
                break
            piece = block[pos:] if pos else block
            parts = piece.split(sep)
            first = line + len(parts[0])
            if first <= cap and (len(parts) == 1 or max(map(len, parts[1:])) <= cap):
                # only if the jumps were wrong: without this check such a block would loop here
                out += piece
                line = first if len(parts) == 1 else len(parts[-1])
                break
            # the first line in this block that passes the cap: keep up to the cap, skip the rest
            at, used = pos, line
            for i, part in enumerate(parts):
                if used + len(part) > cap:
                    keep = cap - used
                    out += block[pos:at + keep]
                    skipping, skipped, pos = True, 0, at + keep
                    break
                at += len(part) + 1
                used = 0
            del parts, piece
    if skipping:
        cuts.append((len(out), skipped))
    return Capped(bytes(out), cuts, start, nuls)


def capped_bytes(data: bytes, cap: int | None = None, sep: bytes = b"\n", skip_nuls: bool = False) -> Capped:
    """``read_capped`` of bytes in memory (a small decompressed input)."""
    cap = cap or max_line()
    plain = not skip_nuls or data[:1] != b"\0"    # no leading NULs to skip
    if plain and len(data) <= cap:
        return Capped(data)
    if plain and max(map(len, data.split(sep))) <= cap:
        return Capped(data)
    return read_capped(io.BytesIO(data), cap=cap, sep=sep, skip_nuls=skip_nuls)


def cut_message(cuts: list[tuple[int, int]], cap: int | None = None) -> str:
    cap = cap or max_line()
    skipped = sum(n for _, n in cuts)
    return (f"{len(cuts)} line(s) longer than {_size(cap)} (the cap, POSTMORTEM_MAX_LINE_BYTES) were cut at the cap "
            f"and kept up to it as evidence; {_size(skipped)} skipped")


# -- decoded copies: large compressed inputs and UTF-16 text, read like plain files -------------

# Compressed inputs at least this large on disk are decompressed into the run's scratch folder
# before parsing (a stream, a block at a time), then cut into segments like plain logs; smaller
# ones are decompressed in memory by the worker that parses them, up to ``SMALL_DECOMPRESSED``.
SPILL_COMPRESSED = 64 << 10
SMALL_DECOMPRESSED = 64 << 20
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def is_utf16(head: bytes) -> bool:
    return head[:2] in _UTF16_BOMS and not head.startswith(b"\xff\xfe\x00\x00")


def decode_to(source, sink, kind: str | None, utf16: bool, limit: int, charge=None) -> tuple[int, list[str]]:
    """Stream ``source`` (a binary file) into ``sink``, decompressing ``kind`` and transcoding
    UTF-16 to UTF-8; at most ``limit`` bytes out (``InputError`` beyond). ``charge(n)`` is told of
    every block written (the run's scratch cap). Returns the bytes written and the problems."""
    import codecs

    stream = Decompressed(source, kind) if kind else source
    problems: list[str] = []
    decoder = None
    total = 0
    first = True
    try:
        while True:
            chunk = stream.read(STEP)
            if not chunk:
                break
            if first and utf16 is None:
                utf16 = is_utf16(chunk[:4])
            first = False
            if utf16:
                decoder = decoder or codecs.getincrementaldecoder("utf-16")("replace")
                chunk = decoder.decode(chunk).encode("utf-8", "surrogatepass")
            total += len(chunk)
            if total > limit:
                raise InputError(f"decompresses to more than {_size(limit)} (the cap, POSTMORTEM_MAX_DECOMPRESSED: "
                                 "a compression bomb?); skipped")
            if charge is not None:
                charge(len(chunk))
            sink.write(chunk)
    except DECODE_ERRORS as exc:
        if not total:
            raise InputError(f"corrupt {kind} data ({_why(exc)}); skipped") from exc
        problems.append(f"corrupt {kind} data after {total} bytes ({_why(exc)}); kept what was readable")
    if decoder is not None:
        tail = decoder.decode(b"", final=True).encode("utf-8", "surrogatepass")
        sink.write(tail)
        total += len(tail)
        problems.append("UTF-16 text: read as UTF-8 (offsets refer to the UTF-8 text)")
    if kind and stream.truncated:
        if not total:
            raise InputError(f"truncated {kind} file: the stream ends before anything could be decompressed; skipped")
        problems.append(f"truncated {kind} file: the stream ends early; kept the {total} bytes that were readable")
    if kind and stream.trailing:
        problems.append(f"{stream.trailing} bytes after the last {kind} stream are not {kind} data; ignored")
    return total, problems


def materialize(items: list[InputFile], scratch, segment_bytes: int) -> None:
    """Give large compressed inputs and UTF-16 text a plain UTF-8 copy in ``scratch`` (an
    ``archives.Scratch``, whose cap counts these bytes too), so that they are cut into segments
    and read a block at a time like any plain log (memory does not grow with their size).
    ``item.source`` keeps the file it came from (evidence is read back from it); a failure (a
    bomb past the cap, a corrupt stream, a full scratch disk) is ``item.failure``."""
    for item in items:
        if item.failure:
            continue
        try:
            if item.compression is not None:
                if item.size < SPILL_COMPRESSED:
                    continue
                utf16 = None
            else:
                if item.size <= segment_bytes:
                    continue
                with open_input(item.path) as handle:
                    head = handle.read(4)
                if not is_utf16(head):
                    continue
                utf16 = True
            _copy_decoded(item, scratch, utf16)
        except InputError as exc:
            item.failure = f"{item.display}: {exc}"
        except OSError as exc:
            item.failure = f"{item.display}: cannot decode into the temporary folder ({exc.strerror or exc}); skipped"


def _copy_decoded(item: InputFile, scratch, utf16) -> None:
    target = scratch.new_file(Path(item.path).name)
    with open_input(item.path) as source, open(target, "xb") as sink:
        try:
            size, problems = decode_to(source, sink, item.compression, utf16, max_decompressed(), scratch.charge)
        except BaseException:
            sink.close()
            target.unlink(missing_ok=True)
            raise
    item.problems.extend(problems)
    item.source = item.source or path_text(item.path)
    item.disk_size = item.size
    item.path, item.size, item.compression = target, size, None


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
    """Classify an input by content: the ``NAME`` of the whole-file parser that claims it
    (``postmortem.parsers.WHOLE_FILE``, asked in order), pyspy, log, or raise InputError for
    non-logs."""
    head = data[:65536]
    if not data:
        raise InputError(f"{item.display}: empty file")
    if head[:1] == b"\0":   # logrotate's copytruncate leaves NULs in front of the log: judge what follows
        head = data.lstrip(b"\0")[:65536]
        if not head:
            raise InputError(f"{item.display}: only NUL bytes (a log truncated while its writer kept writing?); "
                             "skipped")
    name = item.display.rsplit("/", 1)[-1]
    for module in parsers.WHOLE_FILE:
        if module.sniff(name, head, data):
            return module.NAME
    if item.path.name.endswith(("-journal", "-wal", "-shm")) and (head.startswith(_SQLITE_SIDE) or _looks_binary(head)):
        # a SQLite rollback journal, write-ahead log or its index, left by a writer of the database beside it
        raise InputError(f"{item.display}: SQLite {item.path.name.rsplit('-', 1)[1]} file of "
                         f"{item.path.name.rsplit('-', 1)[0]} (another process is writing that database, or "
                         "was when it stopped); not a log; skipped")
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


def path_parts(path: str) -> tuple[str, ...]:
    """``PurePosixPath(path).parts`` without making a path object (a job folder of 31,000 inputs
    asks it of each): empty and ``.`` parts dropped, a root of one slash (``//`` kept: POSIX
    leaves its meaning open) as the first part."""
    parts = tuple(p for p in path.split("/") if p and p != ".")
    if not path.startswith("/"):
        return parts
    return ("//" if path.startswith("//") and not path.startswith("///") else "/", *parts)
