"""Reading and writing the files of kaio's on-disk caches without trusting them.

The kernel cache (:mod:`kaio.cache`) and the autotune cache (:mod:`kaio.ops_library.autotune`)
keep JSON files in a directory anyone may have touched: a file can be truncated, hand-edited,
nested deep enough to exhaust the parser's recursion, replaced by a FIFO (opening it for reading
would wait for a writer for ever) or by a symlink to ``/dev/zero`` (reading it never ends). Every
such file is an :class:`UnusableFile`, which the caches treat as a miss (build or measure again),
never a crash, a hang or an unbounded read:

- only regular files are read (symlinks are followed, then the target checked), and opening never
  blocks (``O_NONBLOCK``);
- at most ``limit`` bytes are read, whatever the file's recorded size claims;
- the text must be UTF-8 and JSON (deep nesting is a ``RecursionError`` inside the parser, caught).

Writes are atomic (a temporary file in the same folder, then ``os.replace``): a reader sees the
old file or the whole new one. A file that several processes update (read, merge, write) is
updated under :func:`exclusive`, a lock on a sibling ``.lock`` file, so no writer's keys are lost.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_READ_CHUNK = 1 << 20
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


class UnusableFile(Exception):
    """A cache file that is missing, not a regular file, too large, or not JSON."""


def read_text(path: Path, limit: int) -> str:
    """The UTF-8 text of the regular file at ``path``, at most ``limit`` bytes long."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # checked before opening: no device is opened
            raise UnusableFile(f"{path} is not a regular file")
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as e:
        raise UnusableFile(f"{path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # replaced between the stat and the open
            raise UnusableFile(f"{path} is not a regular file")
        if st.st_size > limit:
            raise UnusableFile(f"{path} is larger than {limit} bytes")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:  # the recorded size may lie (a file still growing): count the bytes
            chunk = os.read(fd, min(_READ_CHUNK, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as e:
        raise UnusableFile(f"{path}: {e.strerror}") from None
    finally:
        os.close(fd)
    if size > limit:
        raise UnusableFile(f"{path} is larger than {limit} bytes")
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError:
        raise UnusableFile(f"{path} is not UTF-8 text") from None


def parse_json(text: str) -> Any:
    """``json.loads(text)``; UnusableFile for anything that is not JSON, however malformed."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError, MemoryError) as e:  # RecursionError: nesting too deep
        raise UnusableFile(f"not JSON: {type(e).__name__}") from None


def read_json(path: Path, limit: int) -> Any:
    """The JSON value in the file at ``path`` (see :func:`read_text` and :func:`parse_json`)."""
    return parse_json(read_text(path, limit))


def write_atomic(path: Path, text: str) -> bool:
    """Replace ``path`` with ``text`` atomically; False (nothing written) when the folder is
    unusable. A symlink at ``path`` is replaced by the file, never written through."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        return False
    return True


@contextlib.contextmanager
def exclusive(path: Path, timeout_s: float = 10.0) -> Iterator[bool]:
    """Hold an exclusive lock on ``path`` + ``.lock`` for the ``with`` block; yields whether it is
    held. False when the lock cannot be taken within ``timeout_s`` (a writer that hangs must not
    hang every other process), or the ``.lock`` path is not a regular file: the caller then skips
    its update rather than risk losing another writer's. Where the platform has no ``flock``
    (Windows) the block runs unlocked and True is yielded: there, concurrent writers may lose
    entries, as before."""
    try:
        import fcntl
    except ImportError:
        yield True
        return
    lock = path.with_name(path.name + ".lock")
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(
            lock,
            os.O_RDWR | os.O_CREAT | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0),
            0o644,
        )
    except OSError:
        yield False
        return
    try:
        held = stat.S_ISREG(os.fstat(fd).st_mode) and _acquire(fd, fcntl, timeout_s)
        yield held
    finally:
        os.close(fd)  # closing releases the lock


def _acquire(fd: int, fcntl: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    delay = 0.001
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        except OSError:  # a filesystem without locks
            return False
