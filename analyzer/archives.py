"""Archives as inputs: ``.tar`` (plain, ``.gz``/``.tgz``, ``.bz2``, ``.xz``, ``.zst``) and ``.zip``.

A job folder often arrives packed. Each archive is read once, front to back, and every regular
member is copied into a private temporary directory (``Scratch``: mode 0700, made with
``tempfile.mkdtemp``, never next to the inputs, removed when the analysis ends). From there a
member is an input like any other file: compressed members (``rank3.log.gz``) are decompressed,
SQLite exports and Kineto traces go to their readers. The archive itself is only ever opened
for reading.

Member names never become paths on disk: a member is written as ``<scratch>/a<N>/<index>_<base
name>``, so no name can reach outside the scratch directory, collide with another member, or
need a directory another member is a file in. Names are still checked, because a name that
tries to leave the archive is a sign of a hostile or broken archive and the user is told:

- absolute names (``/etc/passwd``, ``C:\\x``), names with a ``..`` component, NUL bytes: skipped;
- symbolic and hard links: skipped, never followed, counted in one message per archive;
- device files, FIFOs: skipped, counted;
- hidden members (a component starting with ``.``, ``__MACOSX/``) are left out, as they are in
  folders;
- archives inside archives are not opened (one message each);
- a cap on members (``MAX_MEMBERS``) and on extracted bytes (``MAX_BYTES``, counted while the
  data is copied, not taken from the headers) per archive: the message names the archive and the
  member at which reading stopped; what was read before it is analysed;
- a truncated or corrupt archive keeps the members read before the damage (the member being read
  keeps the bytes that were readable, with a problem saying so); a zip member with a bad CRC is
  kept as read, with a problem saying its content is damaged.

Each member's display path (``inputs.path``) is ``<archive as given>!/<member name>``, e.g.
``job.tar.gz!/logs/rank3.log``, and its ``inputs.abs_path`` is the absolute archive path with the
same suffix; ``read_member`` reads a line's evidence back from the archive itself, so evidence
still resolves after the scratch directory is gone (``postmortem.analyzer.store.line_text``).
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import stat
import tarfile
import tempfile
import time
import zipfile
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from postmortem.analyzer.discover import COMPRESSED, InputFile, display_name, is_documentation, path_text, real_path

SEP = "!/"
TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tbz", ".tar.xz", ".txz", ".tar.zst",
                ".tar.zstd", ".tzst")
ZIP_SUFFIXES = (".zip",)
SUFFIXES = TAR_SUFFIXES + ZIP_SUFFIXES
# Per archive. Overridable by environment for sites with a small /tmp (and for tests).
MAX_BYTES = 8 << 30
MAX_MEMBERS = 200_000
CHUNK = 1 << 16   # small reads: a member torn by truncation keeps all but its last chunk


def is_archive(path: str | Path) -> bool:
    return str(path).lower().endswith(SUFFIXES)


def _limits() -> tuple[int, int]:
    return (int(os.environ.get("POSTMORTEM_ARCHIVE_MAX_BYTES", MAX_BYTES)),
            int(os.environ.get("POSTMORTEM_ARCHIVE_MAX_MEMBERS", MAX_MEMBERS)))


class ScratchFull(Exception):
    """The run's scratch folder reached its cap (``POSTMORTEM_ARCHIVE_MAX_BYTES``, per run)."""


class Scratch:
    """A private temporary directory, made on first use and removed by ``cleanup`` (at the end of
    the analysis, at exit, and on SIGTERM/SIGINT: ``postmortem.cli``). Everything written into it
    (archive members, decompressed and decoded copies) counts against one cap per run."""

    _live: list[Scratch] = []   # what a signal handler removes

    def __init__(self, limit: int | None = None) -> None:
        self._dir: Path | None = None
        self._count = 0
        self.limit = limit if limit is not None else _limits()[0]
        self.used = 0

    def _ensure(self) -> Path:
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="postmortem-archives-"))
            atexit.register(self.cleanup)
            Scratch._live.append(self)
        return self._dir

    def new_folder(self) -> Path:
        self._count += 1
        folder = self._ensure() / f"a{self._count}"
        folder.mkdir(mode=0o700)
        return folder

    def new_file(self, name: str) -> Path:
        """A path for a new file (decoded copies: ``postmortem.analyzer.discover.materialize``)."""
        self._count += 1
        return self._ensure() / f"d{self._count}_{_safe_base(name)}"

    def charge(self, nbytes: int) -> None:
        """Count ``nbytes`` written; ``ScratchFull`` past the run's cap."""
        self.used += nbytes
        if self.used > self.limit:
            raise ScratchFull(f"the temporary copies of this run passed {_size(self.limit)} (the per-run cap, "
                              "POSTMORTEM_ARCHIVE_MAX_BYTES)")

    @property
    def path(self) -> Path | None:
        return self._dir

    def cleanup(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        if self in Scratch._live:
            Scratch._live.remove(self)

    @classmethod
    def cleanup_all(cls) -> None:
        for scratch in list(cls._live):
            scratch.cleanup()

    def __enter__(self) -> Scratch:
        return self

    def __exit__(self, *exc) -> None:
        self.cleanup()


@dataclass
class _Tally:
    """What one archive held that was not read, for the messages."""
    links: list[str] = field(default_factory=list)
    special: list[str] = field(default_factory=list)
    unsafe: list[str] = field(default_factory=list)
    nested: list[str] = field(default_factory=list)
    duplicates: int = 0


def expand(path: Path, display: str, scratch: Scratch,
           progress: Callable[[str], None] | None = None) -> tuple[list[InputFile], list[str]]:
    """The members of the archive at ``path`` as inputs (copied into ``scratch``), and messages
    naming the archive (and the member) for everything that was not read."""
    name = path.name.lower()
    reader = _zip_members if name.endswith(ZIP_SUFFIXES) else _tar_members
    out = _Expansion(path.resolve(), display, scratch, progress)
    try:
        reader(out)
    except _Stop:
        pass
    return out.finish()


class _Stop(Exception):
    """Reading this archive ends here (cap reached, or damage); the message is already recorded."""


class _Expansion:
    def __init__(self, path: Path, display: str, scratch: Scratch, progress) -> None:
        self.path, self.display, self.scratch, self.progress = path, display, scratch, progress
        self.max_bytes, self.max_members = _limits()
        self.folder: Path | None = None
        self.items: dict[str, InputFile] = {}
        self.messages: list[str] = []
        self.tally = _Tally()
        self.total = 0
        self.entries = 0
        self._shown = 0.0

    # -- one entry ------------------------------------------------------------------------------
    def count_entry(self, raw: str) -> None:
        self.entries += 1
        if self.entries > self.max_members:
            self.messages.append(f"{self.display}: more than {self.max_members} members (the per-archive cap, "
                                 f"POSTMORTEM_ARCHIVE_MAX_MEMBERS); stopped at member {_show(raw)}; the rest "
                                 "is not read")
            raise _Stop

    def check_name(self, raw: str) -> str | None:
        """The member's normalised name, or None when it is to be left out (hostile names recorded)."""
        name = raw.replace("\\", "/") if "\\" in raw and self.path.name.lower().endswith(ZIP_SUFFIXES) else raw
        if "\x00" in name or name.startswith("/") or re.match(r"^[A-Za-z]:", name) or \
                ".." in name.split("/"):
            self.tally.unsafe.append(raw)
            return None
        parts = [p for p in name.split("/") if p not in ("", ".")]
        if not parts:
            return None
        if any(p.startswith(".") for p in parts) or parts[0] == "__MACOSX":
            return None  # hidden, as in folders
        clean = "/".join(parts)
        if clean.endswith((".duckdb", ".duckdb.wal")) or is_documentation(parts[-1]):
            return None  # a store, or a README / expected.json: not evidence (discover.is_documentation)
        if is_archive(clean):
            self.tally.nested.append(clean)
            return None
        return clean

    def add(self, name: str, source, size_hint: int, mtime: float, errors: tuple[type, ...],
            stream: bool, crc: int | None = None) -> None:
        """Copy one member from the file object ``source`` into the scratch folder, in chunks
        counted against the cap. ``errors`` raised while reading mean damage: in a ``stream``
        (tar) nothing after it can be read; in a zip only this member is damaged. ``crc``: the
        zip member's CRC-32, checked here so that a member with a bad CRC keeps its bytes."""
        if self.total + max(size_hint, 0) > self.max_bytes or \
                self.scratch.used + max(size_hint, 0) > self.scratch.limit:
            self._over_cap(name)
        if self.folder is None:
            self.folder = self.scratch.new_folder()
        target = self.folder / f"{self.entries:06d}_{_safe_base(name)}"
        written = 0
        check = 0
        problem = None
        with open(target, "xb") as sink:
            try:
                while chunk := source.read(CHUNK):
                    written += len(chunk)
                    if self.total + written > self.max_bytes or self.scratch.used + written > self.scratch.limit:
                        sink.close()
                        target.unlink()
                        self._over_cap(name)
                    try:
                        sink.write(chunk)
                    except OSError as exc:  # the scratch disk, not the archive
                        self.messages.append(f"{self.display}: cannot copy member {_show(name)} to the temporary "
                                             f"directory {self.folder.parent} ({_why(exc)}); set TMPDIR to a "
                                             "larger disk; the rest of this archive is not read")
                        raise _Stop from exc
                    if crc is not None:
                        check = zlib.crc32(chunk, check)
            except errors as exc:
                problem = f"the archive is damaged in this member ({_why(exc)}); kept the {written} bytes " \
                          "that were readable"
                why = _why(exc)
        if problem is None and crc is not None and check != crc:
            problem = "bad CRC-32 in the zip archive: the member's content is damaged; kept as read"
        self.total += written
        self.scratch.used += written
        if name in self.items:
            self.tally.duplicates += 1  # tar semantics: the later copy wins
            del self.items[name]
        if written or problem is None:
            shown = display_name(name)   # newlines, control characters, bytes that are not UTF-8: escaped
            item = InputFile(target, f"{self.display}{SEP}{shown}", written, mtime,
                             COMPRESSED.get(Path(name).suffix.lower()))
            item.source = f"{path_text(self.path)}{SEP}{shown}"
            if problem:
                item.problems.append(problem)
            self.items[name] = item
        elif not stream:
            self.messages.append(f"{self.display}{SEP}{_show(name)}: cannot read this zip member ({why}); skipped")
        self._show()
        if problem and stream and not problem.startswith("bad CRC"):
            self.messages.append(f"{self.display}: truncated or corrupt archive: reading stopped in member "
                                 f"{_show(name)} ({why}); the members before it are analysed")
            raise _Stop

    def _over_cap(self, name: str) -> None:
        self.messages.append(f"{self.display}: member {_show(name)} takes the extracted total past "
                             f"{_size(min(self.max_bytes, self.scratch.limit))} (the cap of the run's temporary "
                             "copies, POSTMORTEM_ARCHIVE_MAX_BYTES: a compression bomb?); it and the members after "
                             "it are not read")
        raise _Stop

    def _show(self) -> None:
        if self.progress is None:
            return
        now = time.monotonic()
        if now - self._shown >= 0.2:
            self._shown = now
            self.progress(f"extracting {_show(self.display)}: {len(self.items)} members, {self.total / 1e6:.1f} MB")

    def damaged(self, exc: Exception, after: str | None) -> None:
        if after is None and not self.items:
            self.messages.append(f"{self.display}: not a readable {self.kind()} archive ({_why(exc)}); skipped")
        else:
            where = f"after member {_show(after)}" if after else "at its start"
            self.messages.append(f"{self.display}: truncated or corrupt archive: reading stopped {where} "
                                 f"({_why(exc)}); the {len(self.items)} members before it are analysed")

    def kind(self) -> str:
        return "zip" if self.path.name.lower().endswith(ZIP_SUFFIXES) else "tar"

    # -- the result -----------------------------------------------------------------------------
    def finish(self) -> tuple[list[InputFile], list[str]]:
        t = self.tally
        if t.unsafe:
            self.messages.append(f"{self.display}: skipped {len(t.unsafe)} member(s) whose path leaves the archive "
                                 f"(absolute or with ..): {_few(t.unsafe)}; nothing was written outside the "
                                 "temporary directory")
        if t.links:
            self.messages.append(f"{self.display}: skipped {len(t.links)} link(s) (links are never followed): "
                                 f"{_few(t.links)}")
        if t.special:
            self.messages.append(f"{self.display}: skipped {len(t.special)} device file(s) or FIFO(s): "
                                 f"{_few(t.special)}")
        for name in t.nested:
            self.messages.append(f"{self.display}{SEP}{_show(name)}: archive inside an archive, not opened; extract it "
                                 "and give it as a path")
        if t.duplicates:
            self.messages.append(f"{self.display}: {t.duplicates} member name(s) appear more than once; the last "
                                 "copy of each is read")
        if not self.items and not self.messages:
            self.messages.append(f"{self.display}: empty archive (no regular files)")
        # In path order, as files of a folder are (so a packed folder reads like the folder).
        return [self.items[n] for n in sorted(self.items, key=lambda n: Path(n).parts)], self.messages


# -- tar ----------------------------------------------------------------------------------------

_TAR_DAMAGE = (tarfile.TarError, EOFError, OSError, zlib.error, ValueError)


def _tar_damage() -> tuple[type, ...]:
    import lzma

    import zstandard
    return _TAR_DAMAGE + (lzma.LZMAError, zstandard.ZstdError)


def _tar_members(out: _Expansion) -> None:
    damage = _tar_damage()
    last: str | None = None
    with open(out.path, "rb") as raw:
        try:
            archive = _open_tar_stream(out.path, raw)
        except damage as exc:
            out.damaged(exc, None)
            return
        with archive:
            while True:
                try:
                    member = archive.next()
                except damage as exc:
                    out.damaged(exc, last)
                    return
                if member is None:
                    return
                out.count_entry(member.name)
                if member.isdir():
                    continue
                name = out.check_name(member.name)
                if name is None:
                    continue
                if member.issym() or member.islnk():
                    out.tally.links.append(f"{name} -> {member.linkname}")
                    continue
                if not member.isreg():
                    out.tally.special.append(name)
                    continue
                source = archive.extractfile(member)
                out.add(name, source, member.size, float(member.mtime), damage, stream=True)
                last = name


_MAGIC = ((b"\x1f\x8b", "gzip"), (b"BZh", "bz2"), (b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zstd"))


def _open_tar_stream(path: Path, raw) -> tarfile.TarFile:
    """A streaming (one pass, no seeks) tar reader. Compressed tars are decompressed by
    ``discover.Decompressed``, which reads every member of the stream: pbzip2 and bgzip write
    several, and tarfile's own decompression stops after the first, calling the rest damage."""
    from postmortem.analyzer.discover import Decompressed

    head = raw.read(6)
    raw.seek(0)
    kind = next((k for magic, k in _MAGIC if head.startswith(magic)), None)
    if kind is None and path.name.lower().endswith((".zst", ".zstd", ".tzst")):
        kind = "zstd"  # a zstd file with a skippable frame first
    if kind is None:
        return tarfile.open(fileobj=raw, mode="r|")
    return tarfile.open(fileobj=Decompressed(raw, kind), mode="r|")


# -- zip ----------------------------------------------------------------------------------------

def _zip_members(out: _Expansion) -> None:
    try:
        archive = zipfile.ZipFile(out.path)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        out.damaged(exc, None)
        return
    with archive:
        for info in archive.infolist():
            out.count_entry(info.filename)
            if info.is_dir():
                continue
            name = out.check_name(info.filename)
            if name is None:
                continue
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                try:
                    target = archive.read(info)[:200].decode("utf-8", "replace") if info.file_size < 4096 else "?"
                except (zipfile.BadZipFile, NotImplementedError, RuntimeError, OSError, ValueError, EOFError):
                    target = "?"
                out.tally.links.append(f"{name} -> {target}")
                continue
            if mode and (stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
                out.tally.special.append(name)
                continue
            try:
                source = archive.open(info)
            except (zipfile.BadZipFile, NotImplementedError, RuntimeError, OSError, ValueError, EOFError) as exc:
                out.messages.append(f"{out.display}{SEP}{name}: cannot read this zip member ({_why(exc)}); skipped")
                continue
            if hasattr(source, "_expected_crc"):
                source._expected_crc = None  # checked by _Expansion.add, which keeps a damaged member's bytes
            with source:
                out.add(name, source, info.file_size, _zip_time(info),
                        (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, ValueError),
                        stream=False, crc=info.CRC)


def _zip_time(info: zipfile.ZipInfo) -> float:
    try:
        return time.mktime((*info.date_time, 0, 0, -1))
    except (OverflowError, ValueError):
        return 0.0


# -- reading evidence back ------------------------------------------------------------------------

def split_address(address: str) -> tuple[Path, str] | None:
    """``/abs/job.tar.gz!/logs/rank3.log`` -> (archive path, member name), or None."""
    start = 0
    while True:
        at = address.find(SEP, start)
        if at < 0:
            return None
        archive = Path(real_path(address[:at]))
        if is_archive(archive) and archive.is_file():
            return archive, address[at + len(SEP):]
        start = at + 1


def read_member(address: str) -> bytes:
    """The content of one archive member, decompressed when the member is a compressed file
    (``rank3.log.gz`` inside a tar). Raises ``FileNotFoundError`` when it is not there."""
    from postmortem.analyzer.store import readable

    return readable(address).read_bytes()


# Evidence of a run usually cites a few dozen members of one archive: a tar (one stream, no
# index) is read once and its members copied into the private folder then (up to the cap of
# temporary copies), so that reading evidence back neither decompresses the archive once per
# member nor holds a member in memory.
_MEMBERS: dict[tuple, dict[str, Path]] = {}


def member_copy(address: str) -> Path:
    """A private copy of the archive member at ``address`` (``/abs/job.tar.gz!/logs/rank3.log``),
    its bytes as stored in the archive."""
    split = split_address(address)
    if split is None:
        raise FileNotFoundError(address)
    archive, name = split
    st = archive.stat()
    key = (str(archive), st.st_size, st.st_mtime_ns)
    if key not in _MEMBERS or name not in _MEMBERS[key]:
        _MEMBERS[key] = _copy_members(archive, name)
    if name not in _MEMBERS[key]:
        raise FileNotFoundError(f"{archive}{SEP}{name}")
    return _MEMBERS[key][name]


def _copy_members(archive: Path, wanted: str) -> dict[str, Path]:
    """Every regular member of ``archive`` copied into a new private folder (the last copy of a
    name wins, as when reading), as far as the cap of temporary copies allows; ``wanted`` is
    always copied."""
    from postmortem.analyzer.store import private_dir

    folder = private_dir() / f"members-{uuid.uuid4().hex[:12]}"
    folder.mkdir(parents=True, exist_ok=True)
    budget = _limits()[0]
    copies: dict[str, Path] = {}

    def keep(name: str, source, size: int) -> None:
        nonlocal budget
        if name != wanted and size > budget:
            return
        target = folder / f"{len(copies):06d}_{_safe_base(name)}"
        with open(target, "wb") as sink:
            try:
                while chunk := source.read(CHUNK):
                    sink.write(chunk)
            except (zipfile.BadZipFile, EOFError, OSError, zlib.error, tarfile.TarError):
                pass  # as when reading: keep what was readable
        budget -= target.stat().st_size
        copies[name] = target

    if archive.name.lower().endswith(ZIP_SUFFIXES):
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                if info.is_dir():
                    continue
                name = display_name(_normal(info.filename.replace("\\", "/")))
                source = z.open(info)
                if hasattr(source, "_expected_crc"):
                    source._expected_crc = None  # a bad CRC keeps its bytes, as when reading
                with source:
                    keep(name, source, info.file_size)
        return copies
    with open(archive, "rb") as raw:
        try:
            with _open_tar_stream(archive, raw) as tar:
                for member in tar:
                    if member.isreg():
                        keep(display_name(_normal(member.name)), tar.extractfile(member), member.size)
        except _tar_damage():
            pass
    return copies


def _normal(name: str) -> str:
    return "/".join(p for p in name.split("/") if p not in ("", "."))


# -- small helpers ------------------------------------------------------------------------------

def _safe_base(name: str) -> str:
    base = re.sub(r"[^A-Za-z0-9._+-]", "_", name.rsplit("/", 1)[-1]) or "member"
    return base[-120:]


def _show(name: str | None) -> str:
    text = repr(name)[1:-1] if name is not None else "?"
    return text if len(text) <= 200 else text[:200] + "..."


def _few(names: list[str], keep: int = 3) -> str:
    shown = ", ".join(_show(n) for n in names[:keep])
    return shown + (f" and {len(names) - keep} more" if len(names) > keep else "")


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n} bytes"
