"""Atomic file writes: every file symjac writes is complete or absent, never torn.

A file is written to a temporary file in the same folder (so the rename stays on one file
system), flushed and synced, then renamed over the final path with :func:`os.replace`, and
the folder synced so the rename itself survives a crash. An interrupt (SIGINT, SIGKILL), a
full disk or an exception while writing leaves the previous file as it was (or no file),
and the temporary file is removed where the process lives to remove it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


_WRITE_MODES = ("w", "wb")


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w", **kwargs: Any) -> Iterator[IO[Any]]:
    """Open ``path`` for writing through a temporary file that replaces it on success.

    Args:
      path: the final path.
      mode: ``"w"`` (text; ``encoding``/``newline`` as for :func:`open`) or ``"wb"``.

    Yields:
      The open temporary file. If the block raises, the final path is left untouched.
    """
    if mode not in _WRITE_MODES:  # a file mode (open's), not an operator's
        raise ValueError(f"atomic_open writes whole files: mode {mode!r}, give 'w' or 'wb'")
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        _keep_mode(target, tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _sync_folder(folder)


def write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically (``newline="\\n"``: the same bytes on every system)."""
    with atomic_open(path, "w", encoding=encoding, newline="\n") as f:
        f.write(text)


def write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_open(path, "wb") as f:
        f.write(data)


@contextlib.contextmanager
def interrupt_held() -> Iterator[None]:
    """SIGINT held pending while the block runs (POSIX, main thread): a file written and the record
    that it was (what an interrupted run lists) go together; a Ctrl-C takes effect as the block ends."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def atomic_folder(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A folder of files that replaces ``path`` whole on success (a golden ``bin`` case).

    The files go into a temporary folder beside ``path``; on success the old folder (if any) is
    renamed aside, the new one renamed into place and the old one removed, so a reader sees the
    old folder, the new one, or (for an instant) none, never a mix of the two runs' files. If
    the block raises, ``path`` is left untouched and the temporary folder removed.
    """
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    tmp = Path(tempfile.mkdtemp(dir=parent, prefix=f".{target.name}.", suffix=".tmp"))
    try:
        yield tmp
        for f in tmp.iterdir():
            if f.is_file():
                _sync_file(f)
        _sync_folder(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's folder is 0700
        old = None
        if target.exists():
            old = Path(tempfile.mkdtemp(dir=parent, prefix=f".{target.name}.", suffix=".old"))
            os.replace(target, old / target.name)
        os.replace(tmp, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _sync_folder(parent)


@contextlib.contextmanager
def made_folder(path: str | os.PathLike[str]) -> Iterator[Path]:
    """``path`` with its missing parents, created for the block. If the block raises, each folder
    it created that is still empty is removed again (deepest first): a failed run leaves no empty
    output folder behind, and keeps every file it did write (and the folders holding them)."""
    target = Path(path)
    missing = [p for p in (target, *target.parents) if not p.exists()]  # deepest first
    target.mkdir(parents=True, exist_ok=True)
    try:
        yield target
    except BaseException:
        for folder in missing:
            with contextlib.suppress(OSError):  # not empty (a file was written), or gone
                folder.rmdir()
        raise


def _sync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _keep_mode(target: Path, tmp: str) -> None:
    """mkstemp creates 0600 files: give the new file the old one's mode, or the umask's default."""
    try:
        mode = target.stat().st_mode & 0o777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    os.chmod(tmp, mode)


def _sync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every file system lets a folder be opened or synced
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
