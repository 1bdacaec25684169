"""The build cache (:func:`pybridge.paths.cache_dir`): what it holds, clearing it, a size bound.

What is cached, one *entry* each:

- ``programs/<backend>/<name>-<digest>/``: a user's ``.fut`` compiled by ``pybridge build`` or
  ``pf.load("x.fut")`` (:mod:`pybridge.futhark.build`);
- ``cuda/<key>/``: a user's CUDA C compiled to cubin + PTX (:mod:`pybridge.cuda.compiler`);
- ``ffi/<module>``: a generated cffi module binding a Futhark library (:mod:`pybridge.futhark.binding`).

**Only pybridge's own** (:mod:`pybridge.ownership`). The cache folder carries pybridge's
``CACHEDIR.TAG`` (a foreign folder is refused); an entry is listed, and may be removed, only when
it carries pybridge's mark (a program's stamp holding the digest its name ends in, a CUDA entry's
record, the name of a generated module), and no symbolic link is followed: a user's folder or
file in the cache is left alone. Removal renames an entry to a trash folder first, so an
interrupted ``pybridge cache clear`` leaves every entry whole or absent (the trash goes at the next
clear or build).

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

import hashlib
import logging
import os
import re
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from .errors import PybridgeError
from .ownership import MARK, discard, is_real_dir, is_regular, lock, real_folder, sweep
from .paths import cache_dir

__all__ = [
    "DEFAULT_MAX_BYTES",
    "CacheEntry",
    "clear",
    "entries",
    "enforce_bound",
    "entry_lock",
    "folders",
    "output_lock",
    "max_bytes",
    "parse_size",
    "register_use",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 2 * 1024**3
_USERS = ".users"
_USER_LOCK = re.compile(r"\d+\.lock")  # <pid>.lock in .<entry>.users/
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
    return lock(entry.parent / f".{entry.name}.lock", timeout=timeout)


def output_lock(out_dir: Path) -> FileLock:
    """The lock of an output folder a build copies into (``pybridge build -o DIR``): in the cache,
    keyed by the folder's resolved path, so nothing of pybridge's lands beside the user's folder."""
    key = hashlib.sha256(os.fsencode(Path(out_dir).resolve())).hexdigest()[:16]
    return lock(cache_dir("programs") / f".output-{key}.lock")


def register_use(entry: Path) -> None:
    """Mark ``entry`` in use by this process until it exits (called before its files are read)."""
    with _held_guard:
        if entry in _held:
            return
        users = real_folder(entry.parent, f".{entry.name}{_USERS}")
        mine = lock(users / f"{os.getpid()}.lock", thread_local=False)
        mine.acquire()
        _held[entry] = mine


def _in_use(entry: Path) -> bool:
    users = entry.parent / f".{entry.name}{_USERS}"
    if not is_real_dir(users):
        return False
    try:
        files = [users / name for name in os.listdir(users) if _USER_LOCK.fullmatch(name)]
    except OSError:
        return False
    busy = False
    for f in files:
        if entry in _held and _held[entry].lock_file == str(f):
            busy = True
            continue
        if not is_regular(f):
            continue  # not a lock pybridge made: neither used nor removed
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

PROGRAM_STAMP = ".source-hash"  # a program entry's digest (the end of its folder name): pybridge's mark of old
CUDA_RECORD = "entry.json"  # a CUDA entry's record: its mark before MARK existed
_PROGRAM_ENTRY = re.compile(r"[A-Za-z0-9_+-]{0,60}-([0-9a-f]{12})")
_CUDA_ENTRY = re.compile(r"[0-9a-f]{40}")
# generated cffi modules (binding.py, cuda/_cshim.py): _pybridge_<abi|api|shim>_<name>_<hash>.py / .so
_FFI_MODULE = re.compile(r"_pybridge_(?:abi|api|shim)_\w*_[0-9a-f]{16}(?:\.py|\.so|\.[\w.-]+\.so)")


def _size(path: Path) -> int:
    if not path.is_dir() or path.is_symlink():
        return path.lstat().st_size
    total = 0
    for root, _, files in os.walk(path):  # links are not followed
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def _last_used(path: Path) -> float:
    """Newest mtime of the entry or its files (a build or use touches them)."""
    try:
        newest = path.lstat().st_mtime
    except OSError:
        return 0.0
    if stat.S_ISDIR(path.lstat().st_mode):
        for p in path.iterdir():
            try:
                newest = max(newest, p.lstat().st_mtime)
            except OSError:
                pass
    return newest


def _real_dirs(folder: Path) -> list[Path]:
    """The folders in ``folder`` (sorted), links left out; none when ``folder`` is itself a link."""
    if not is_real_dir(folder):
        return []
    try:
        return sorted(Path(e.path) for e in os.scandir(folder) if e.is_dir(follow_symlinks=False))
    except OSError:
        return []


def _program_mark(entry: Path) -> bool:
    """pybridge's mark, or the stamp an older pybridge wrote: the digest its folder name ends in."""
    m = _PROGRAM_ENTRY.fullmatch(entry.name)
    if m is None:
        return False
    if is_regular(entry / MARK):
        return True
    try:
        return is_regular(entry / PROGRAM_STAMP) and (entry / PROGRAM_STAMP).read_text() == m[1]
    except (OSError, UnicodeDecodeError):
        return False


def _cuda_mark(entry: Path) -> bool:
    return bool(_CUDA_ENTRY.fullmatch(entry.name)) and (is_regular(entry / MARK) or is_regular(entry / CUDA_RECORD))


def entries(root: Path | None = None) -> list[CacheEntry]:
    """Every entry of the cache, least recently used first: only what carries pybridge's mark (a
    user's folder or file placed in the cache is no entry), never through a symbolic link."""
    root = root or cache_dir()
    found: list[CacheEntry] = []
    for backend in _real_dirs(root / "programs"):
        for e in _real_dirs(backend):
            if _program_mark(e):
                found.append(CacheEntry("program", f"programs/{backend.name}/{e.name}", e, _size(e), _last_used(e)))
    for e in _real_dirs(root / "cuda"):
        if _cuda_mark(e):
            found.append(CacheEntry("cuda", f"cuda/{e.name}", e, _size(e), _last_used(e)))
    ffi = root / "ffi"
    if is_real_dir(ffi):
        for name in sorted(os.listdir(ffi)):
            e = ffi / name
            if _FFI_MODULE.fullmatch(name) and is_regular(e):
                found.append(CacheEntry("ffi", f"ffi/{name}", e, _size(e), _last_used(e)))
    found.sort(key=lambda c: c.last_used)
    return found


def folders(root: Path | None = None) -> list[Path]:
    """The folders of the cache where builds make temporary folders (and removals trash)."""
    root = root or cache_dir()
    return [*_real_dirs(root / "programs"), *(f for f in (root / "cuda", root / "ffi") if is_real_dir(f))]


# ---------------------------------------------------------------- removal


def _remove(entry: CacheEntry) -> bool:
    """Remove one entry unless it is in use; whether it was removed. A program or CUDA entry is
    renamed to trash first (ownership.discard): whole or absent, also when interrupted."""
    if entry.kind == "program":
        build_lock = entry_lock(entry.path, timeout=0)
        try:
            build_lock.acquire()
        except Timeout:
            return False  # being built
        try:
            if _in_use(entry.path):
                return False
            gone = discard(entry.path, (MARK, PROGRAM_STAMP))
            try:  # empty once _in_use removed the files of exited users; one registering now keeps it
                (entry.path.parent / f".{entry.path.name}{_USERS}").rmdir()
            except OSError:
                pass
        finally:
            build_lock.release()
        return gone
    if entry.kind == "cuda":
        cuda_lock = lock(entry.path.parent / f"{entry.path.name}.lock", timeout=0)
        try:
            cuda_lock.acquire()
        except Timeout:
            return False
        try:
            return discard(entry.path, (MARK, CUDA_RECORD))
        finally:
            cuda_lock.release()
    entry.path.unlink(missing_ok=True)
    stem = entry.path.name.split(".", 1)[0]
    pycache = entry.path.parent / "__pycache__"
    if is_real_dir(pycache):  # the bytecode Python wrote of an ABI-mode module
        for f in pycache.glob(f"{stem}.*.pyc"):
            if is_regular(f):
                f.unlink(missing_ok=True)
    return True


def clear(older_than: float | None = None, root: Path | None = None) -> tuple[list[CacheEntry], list[CacheEntry]]:
    """Remove every entry (or those not used for ``older_than`` seconds) that is not in use;
    (removed, kept because in use)."""
    now = time.time()
    removed: list[CacheEntry] = []
    kept: list[CacheEntry] = []
    for folder in folders(root):
        sweep(folder)  # temporary and trash folders no process uses
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
