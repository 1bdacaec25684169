"""The build cache (:func:`pybridge.paths.cache_dir`): what it holds, clearing it, a size bound.

What is cached, one *entry* each:

- ``programs/<backend>/<name>-<digest>/``: a user's ``.fut`` compiled by ``pybridge build`` or
  ``pf.load("x.fut")`` (:mod:`pybridge.futhark.build`);
- ``cuda/<key>/``: a user's CUDA C compiled to cubin + PTX (:mod:`pybridge.cuda.compiler`);
- ``ffi/<module>``: a generated cffi module binding a Futhark library (:mod:`pybridge.futhark.binding`).

**Size bound.** ``$PYBRIDGE_CACHE_MAX_BYTES`` (default 2 GiB; ``0`` for no bound; suffixes K, M, G
allowed). After each build the least recently used entries are removed until the cache fits.

**Never an entry in use.** Every program entry has a lock (``.<entry>.lock`` beside it, a
:class:`filelock.FileLock`): a build holds it, and a process that loads an entry registers itself
under ``.<entry>.users/`` with a lock of its own that it holds until it exits. Removal takes the
entry's lock without waiting (a build in progress: skipped), then skips the entry if any registered
process still holds its lock (a dead process's lock is free: its file is removed). A CUDA entry
is skipped while its ``<key>.lock`` is held. A cffi module may go at any time: a process that
imported it keeps it (the file is unlinked, not changed), and one that finds it gone between
looking and importing generates it again (:mod:`pybridge.futhark.binding`).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from .errors import PybridgeError
from .paths import cache_dir

__all__ = [
    "DEFAULT_MAX_BYTES",
    "CacheEntry",
    "clear",
    "entries",
    "enforce_bound",
    "entry_lock",
    "max_bytes",
    "parse_size",
    "register_use",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 2 * 1024**3
_USERS = ".users"
_held: dict[Path, FileLock] = {}  # entries this process uses: locks held until it exits
_held_guard = threading.Lock()


class CacheSettingError(PybridgeError, ValueError):
    """$PYBRIDGE_CACHE_MAX_BYTES (or a size given to ``pybridge cache``) is not a size."""


@dataclass(frozen=True)
class CacheEntry:
    kind: str  # "program", "cuda" or "ffi"
    name: str  # relative to the cache folder
    path: Path
    size: int  # bytes
    last_used: float  # seconds since the epoch


def parse_size(text: str) -> int:
    """``"500M"`` -> 524288000; plain numbers are bytes; K, M, G, T (powers of 1024, optional B/iB)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise CacheSettingError(f"expected a size in bytes such as 2000000000, 500M or 2G, got {text!r}")
    return int(float(m[1]) * 1024 ** " KMGT".index(m[2].upper() or " "))


def max_bytes() -> int:
    """The bound from $PYBRIDGE_CACHE_MAX_BYTES (0: none), else :data:`DEFAULT_MAX_BYTES`."""
    text = os.environ.get("PYBRIDGE_CACHE_MAX_BYTES")
    if text is None or not text.strip():
        return DEFAULT_MAX_BYTES
    try:
        return parse_size(text)
    except CacheSettingError as e:
        raise CacheSettingError(f"PYBRIDGE_CACHE_MAX_BYTES: {e}") from None


# ---------------------------------------------------------------- locks


def entry_lock(entry: Path, timeout: float = -1) -> FileLock:
    """The lock of a program entry (held while it is built, and to remove it)."""
    return FileLock(entry.parent / f".{entry.name}.lock", timeout=timeout)


def register_use(entry: Path) -> None:
    """Mark ``entry`` in use by this process until it exits (called before its files are read)."""
    with _held_guard:
        if entry in _held:
            return
        users = entry.parent / f".{entry.name}{_USERS}"
        users.mkdir(parents=True, exist_ok=True)
        lock = FileLock(users / f"{os.getpid()}.lock", thread_local=False)
        lock.acquire()
        _held[entry] = lock


def _in_use(entry: Path) -> bool:
    users = entry.parent / f".{entry.name}{_USERS}"
    try:
        files = list(users.iterdir())
    except OSError:
        return False
    busy = False
    for f in files:
        if entry in _held and _held[entry].lock_file == str(f):
            busy = True
            continue
        probe = FileLock(f, timeout=0)
        try:
            probe.acquire()
        except Timeout:
            busy = True  # a live process holds it
            continue
        try:
            f.unlink(missing_ok=True)  # its process exited
        finally:
            probe.release()
    return busy


# ---------------------------------------------------------------- listing


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def _last_used(path: Path) -> float:
    """Newest mtime of the entry or its files (a build or use touches them)."""
    try:
        newest = path.stat().st_mtime
    except OSError:
        return 0.0
    if path.is_dir():
        for p in path.iterdir():
            try:
                newest = max(newest, p.stat().st_mtime)
            except OSError:
                pass
    return newest


def entries(root: Path | None = None) -> list[CacheEntry]:
    """Every entry of the cache, least recently used first."""
    root = root or cache_dir()
    found: list[CacheEntry] = []
    programs = root / "programs"
    for backend in sorted(programs.iterdir()) if programs.is_dir() else ():
        for e in sorted(backend.iterdir()) if backend.is_dir() else ():
            if e.is_dir() and not e.name.startswith("."):
                found.append(CacheEntry("program", f"programs/{backend.name}/{e.name}", e, _size(e), _last_used(e)))
    cuda = root / "cuda"
    for e in sorted(cuda.iterdir()) if cuda.is_dir() else ():
        if e.is_dir() and not e.name.startswith("."):
            found.append(CacheEntry("cuda", f"cuda/{e.name}", e, _size(e), _last_used(e)))
    ffi = root / "ffi"
    for e in sorted(ffi.iterdir()) if ffi.is_dir() else ():
        if e.is_file() and not e.name.startswith(".") and e.suffix in (".py", ".so"):
            found.append(CacheEntry("ffi", f"ffi/{e.name}", e, _size(e), _last_used(e)))
    found.sort(key=lambda c: c.last_used)
    return found


# ---------------------------------------------------------------- removal


def _remove(entry: CacheEntry) -> bool:
    """Remove one entry unless it is in use; whether it was removed."""
    if entry.kind == "program":
        lock = entry_lock(entry.path, timeout=0)
        try:
            lock.acquire()
        except Timeout:
            return False  # being built
        try:
            if _in_use(entry.path):
                return False
            shutil.rmtree(entry.path, ignore_errors=True)
            shutil.rmtree(entry.path.parent / f".{entry.path.name}{_USERS}", ignore_errors=True)
        finally:
            lock.release()
        return not entry.path.exists()
    if entry.kind == "cuda":
        lock = FileLock(entry.path.parent / f"{entry.path.name}.lock", timeout=0)
        try:
            lock.acquire()
        except Timeout:
            return False
        try:
            shutil.rmtree(entry.path, ignore_errors=True)
        finally:
            lock.release()
        return not entry.path.exists()
    entry.path.unlink(missing_ok=True)
    return True


def clear(older_than: float | None = None, root: Path | None = None) -> tuple[list[CacheEntry], list[CacheEntry]]:
    """Remove every entry (or those not used for ``older_than`` seconds) that is not in use;
    (removed, kept because in use)."""
    now = time.time()
    removed: list[CacheEntry] = []
    kept: list[CacheEntry] = []
    for e in entries(root):
        if older_than is not None and now - e.last_used < older_than:
            continue
        (removed if _remove(e) else kept).append(e)
    for e in removed:
        log.debug("removed %s (%d bytes)", e.name, e.size)
    return removed, kept


def enforce_bound(limit: int | None = None, root: Path | None = None) -> list[CacheEntry]:
    """Remove least recently used entries (never one in use) until the cache holds at most
    ``limit`` bytes (default :func:`max_bytes`; 0: no bound); the removed entries."""
    limit = max_bytes() if limit is None else limit
    if limit <= 0:
        return []
    found = entries(root)
    total = sum(e.size for e in found)
    removed: list[CacheEntry] = []
    for e in found:
        if total <= limit:
            break
        if _remove(e):
            total -= e.size
            removed.append(e)
    if removed:
        log.info("cache over its bound (%d bytes): removed %d least recently used entries", limit, len(removed))
    if total > limit:
        log.debug("cache still holds %d bytes (bound %d): the rest is in use", total, limit)
    return removed
