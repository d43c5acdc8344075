"""Writing outputs where someone else may have planted links: atomically, never through a link.

``postmortem`` may run as the scheduler's user on a job folder the job's user controls
(docs/security.md). Every file it writes (``--out`` reports, the ``--db`` store, exports, cache
entries) goes through here:

* the folder is reached without following a symbolic link for any part of the path that lies
  inside a folder the run reads (``roots``: the user-named inputs, a folder the job's user may
  write); outside them the path is taken as the user gave it;
* the file is created in its target folder under a random temporary name with ``O_EXCL`` and
  ``O_NOFOLLOW`` (it is a new file of ours, never something planted there), written, flushed to
  disk and renamed over the target: readers see the old file or the whole new one, never a
  half; a link at the target is refused first (and a rename would replace the link itself, not
  what it points to);
* a target that is not a regular file, or that is one of the run's inputs (same device and
  inode), is refused;
* a failure (a full disk, a read-only folder) removes the temporary files: no empty or half
  file is left.

Refusals raise ``Refused`` (exit code 2 with its message); system errors raise ``OSError``.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
COPY_BLOCK = 4 << 20


class Refused(Exception):
    """A target that must not be written (a link, not a regular file, an input of the run)."""


def _abs(path: str | Path) -> Path:
    return Path(os.path.abspath(os.fspath(path)))


def _root_of(folder: Path, roots: Iterable[str | Path]) -> Path | None:
    """The input root (a folder) ``folder`` lies in or is, the deepest one; None when outside all."""
    best = None
    for root in roots:
        root = _abs(root)
        if not root.is_dir():
            root = root.parent   # a file given as input: its folder is the job's user's too
        if (folder == root or root in folder.parents) and (best is None or len(root.parts) > len(best.parts)):
            best = root
    return best


def open_folder(folder: str | Path, roots: Iterable[str | Path] = (), create: bool = True) -> int:
    """A file descriptor of ``folder`` (created with its parents when missing). Inside an input
    root, no part below the root may be a link (``Refused``); each is opened with
    ``O_NOFOLLOW`` relative to the one above, so a link swapped in meanwhile is refused too."""
    folder = _abs(folder)
    root = _root_of(folder, roots)
    if root is None:
        if create:
            folder.mkdir(parents=True, exist_ok=True)
        return os.open(folder, _DIR_FLAGS)
    fd = os.open(root, _DIR_FLAGS)
    at = root
    try:
        for part in folder.relative_to(root).parts:
            at = at / part
            try:
                child = os.open(part, _DIR_FLAGS | _NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass        # made meanwhile, or a dangling link: the open below decides
                child = _open_child(part, fd, at)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    _refuse_link_or_file(part, fd, at)
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_child(part: str, fd: int, at: Path) -> int:
    try:
        return os.open(part, _DIR_FLAGS | _NOFOLLOW, dir_fd=fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            _refuse_link_or_file(part, fd, at)
        raise


def _refuse_link_or_file(part: str, fd: int, at: Path) -> None:
    try:
        st = os.stat(part, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise Refused(f"{at} is a symbolic link inside the input folder; outputs are never written through "
                      "links (remove it or choose another place)")
    if not stat.S_ISDIR(st.st_mode):
        raise Refused(f"{at} is a file, not a folder")


def check_target(fd: int, name: str, path: Path, inputs: set[tuple[int, int]] = frozenset(),
                 what: str = "output") -> None:
    """``Refused`` when ``name`` in the folder ``fd`` is a link, not a regular file, or one of
    ``inputs`` (``(st_dev, st_ino)`` pairs)."""
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise Refused(f"{path} is a symbolic link; the {what} is never written through a link (remove it "
                      "or choose another place)")
    if not stat.S_ISREG(st.st_mode):
        raise Refused(f"{path} exists and is not a regular file; not replaced")
    if (st.st_dev, st.st_ino) in inputs:
        raise Refused(f"{path} is an input of this run; the {what} would replace it (choose another place)")


def identities(paths: Iterable[str | Path]) -> set[tuple[int, int]]:
    """``(st_dev, st_ino)`` of each path that exists (links followed: what was read)."""
    out = set()
    for path in paths:
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            continue
        out.add((st.st_dev, st.st_ino))
    return out


class _Pending:
    def __init__(self, fd: int, tmp: str, name: str, path: Path) -> None:
        self.fd, self.tmp, self.name, self.path = fd, tmp, name, path


def _create(fd: int, name: str) -> tuple[str, int]:
    for _ in range(8):
        tmp = f".{name[:80]}.{secrets.token_hex(8)}.tmp"
        try:
            return tmp, os.open(tmp, _NEW_FILE, 0o644, dir_fd=fd)
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "cannot create a temporary file", name)


def _write_all(out: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(out, view[:COPY_BLOCK])
        view = view[written:]


def write_files(targets: dict[str | Path, bytes | str | Path], roots: Iterable[str | Path] = (),
                inputs: set[tuple[int, int]] = frozenset(), what: str = "output") -> None:
    """Write each target (bytes, text as UTF-8, or a ``Path`` whose content is copied) under a
    temporary name in its folder, then rename them all into place. Any failure leaves no new
    file: the temporary ones are removed (targets already in place before stay as they were)."""
    roots = list(roots)
    pending: list[_Pending] = []
    folders: dict[Path, int] = {}
    try:
        for target, content in targets.items():
            path = _abs(target)
            if path.parent not in folders:
                folders[path.parent] = open_folder(path.parent, roots)
            fd = folders[path.parent]
            check_target(fd, path.name, path, inputs, what)
            tmp, out = _create(fd, path.name)
            pending.append(_Pending(fd, tmp, path.name, path))
            try:
                if isinstance(content, Path):
                    with open(content, "rb") as source:
                        while block := source.read(COPY_BLOCK):
                            _write_all(out, block)
                else:
                    _write_all(out, content.encode("utf-8") if isinstance(content, str) else content)
                os.fsync(out)
            finally:
                os.close(out)
        for p in pending:
            check_target(p.fd, p.name, p.path, inputs, what)     # planted meanwhile?
            os.rename(p.tmp, p.name, src_dir_fd=p.fd, dst_dir_fd=p.fd)
            p.tmp = None
    except BaseException:
        for p in pending:
            if p.tmp is not None:
                try:
                    os.unlink(p.tmp, dir_fd=p.fd)
                except OSError:
                    pass
        raise
    finally:
        for fd in folders.values():
            os.close(fd)


def write_file(target: str | Path, content: bytes | str | Path, roots: Iterable[str | Path] = (),
               inputs: set[tuple[int, int]] = frozenset(), what: str = "output") -> None:
    write_files({target: content}, roots, inputs, what)


def precheck(target: str | Path, roots: Iterable[str | Path] = (), what: str = "output") -> None:
    """Before minutes of analysis: ``Refused`` when ``target`` or a folder on its way inside an
    input root is a link, or the target is not a regular file. Creates the folders (safely)."""
    path = _abs(target)
    fd = open_folder(path.parent, roots)
    try:
        check_target(fd, path.name, path, what=what)
    finally:
        os.close(fd)


def why(exc: OSError) -> str:
    """One line for a system error while writing (a full disk, a read-only file system)."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    hints = {errno.ENOSPC: " (the disk is full)", errno.EROFS: " (a read-only file system)",
             errno.EDQUOT: " (over the disk quota)"}
    return reason + hints.get(exc.errno, "")
