"""What pybridge may write and delete in its cache: its marks, and removal that honours them.

- **The cache root** carries ``CACHEDIR.TAG`` (the Cache Directory Tagging spec, which backup tools
  respect) whose text names pybridge. :func:`claim_root` writes it into a folder it creates or
  finds empty; a folder that exists, is not empty and has no such tag is refused
  (:class:`ForeignCacheError`, one line), unless everything in it has the exact shapes pybridge
  writes (a cache of an older pybridge, which wrote no tag: it is adopted).
- **Every folder pybridge builds in the cache** (an entry, a compiler's working folder) starts as a
  temporary folder (:func:`temporary_folder`: ``.pybridge-tmp-<name>-XXXXXXXX``, a prefix only
  pybridge uses) whose first file is the mark :data:`MARK`, flock'ed while the folder is in use.
  An entry is such a folder renamed into place, so it keeps the mark; removal renames an entry to
  ``.pybridge-trash-...`` first and deletes the mark last (:func:`remove_marked`), so an
  interruption leaves either the whole entry or a marked trash folder that :func:`sweep` removes.
- **No symbolic link is followed**: types come from ``lstat``; a link is never descended into,
  and a cache folder that is a link is refused (:func:`real_folder`).

Not defended: another process of the same user racing to swap a folder for a link between the
check and the removal (such a process can delete the files itself).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from .errors import PybridgeError

__all__ = [
    "MARK",
    "TAG",
    "TEMP_PREFIX",
    "TRASH_PREFIX",
    "ForeignCacheError",
    "claim_root",
    "discard",
    "is_real_dir",
    "is_regular",
    "lock",
    "real_folder",
    "remove_marked",
    "sweep",
    "temporary_folder",
]

TAG = "CACHEDIR.TAG"
_TAG_SIGNATURE = "Signature: 8a477f597d28d172789f06886806bc55"
_TAG_TEXT = (
    f"{_TAG_SIGNATURE}\n"
    "# This file is a cache directory tag created by pybridge (its build cache).\n"
    "# pybridge writes and deletes only in folders that carry it.\n"
    "# For information about cache directory tags see https://bford.info/cachedir/\n"
)
MARK = ".pybridge"  # the first file of every folder pybridge makes in its cache; deleted last
_MARK_TEXT = "made by pybridge; removed with this folder\n"
TEMP_PREFIX = ".pybridge-tmp-"
TRASH_PREFIX = ".pybridge-trash-"
STALE_S = 60.0  # an empty temporary folder this old was left by a build killed before its first write


class ForeignCacheError(PybridgeError, OSError):
    """The cache folder (or a folder in it) is not pybridge's: pybridge will not write or delete there."""


# ---------------------------------------------------------------- the root


def is_regular(path: Path | str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def is_real_dir(path: Path | str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _tagged(root: Path) -> bool:
    tag = root / TAG
    if not is_regular(tag):
        return False
    try:
        with open(tag, "rb") as f:
            text = f.read(512).decode("utf-8", "replace")
    except OSError:
        return False
    return text.startswith(_TAG_SIGNATURE) and "created by pybridge" in text


def _write_tag(root: Path) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}tag-", dir=root)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(_TAG_TEXT)
        os.chmod(tmp, 0o644)
        os.replace(tmp, root / TAG)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def claim_root(root: Path, named_by: str) -> Path:
    """``root`` as pybridge's cache: created and tagged when new, tagged when empty or holding only
    what pybridge writes, else :class:`ForeignCacheError`. ``named_by`` says where the folder came
    from (``PYBRIDGE_CACHE=...``), for the message."""
    try:
        root.mkdir(parents=True)
    except FileExistsError:
        if _tagged(root):
            return root
        if not root.is_dir():
            raise ForeignCacheError(f"{named_by}: not a folder") from None
        stray = _first_foreign(root, _ROOT_SHAPES)
        if stray is not None:
            raise ForeignCacheError(
                f"{named_by}: this folder is not empty and is not pybridge's cache (no {TAG} written by pybridge, and "
                f"{str(stray.relative_to(root))!r} in it is nothing pybridge writes); pybridge writes and deletes only "
                "in its own cache: name a new or empty folder"
            ) from None
    except OSError as e:  # no permission, a file on the way: the builtin error, naming the variable
        raise type(e)(e.errno, f"{named_by}: cannot create the cache folder ({e.strerror})") from None
    _write_tag(root)  # new, empty, or written by a pybridge before tags
    return root


def real_folder(root: Path, *parts: str) -> Path:
    """``root/parts...``, each part created where missing and refused where it is a link or a file."""
    path = root
    for part in parts:
        path = path / part
        try:
            path.mkdir()
        except FileExistsError:
            if not is_real_dir(path):
                raise ForeignCacheError(
                    f"{str(path)!r} is a symbolic link or a file, not a folder pybridge made: pybridge writes only in "
                    "its own folders (remove it, or set PYBRIDGE_CACHE to another folder)"
                ) from None
    return path


# The shapes of everything pybridge (this version and earlier ones) writes in its cache: a name
# pattern, file or folder, and for a folder the shapes inside it (_FILES: regular files only;
# _TREE: any files and folders, a temporary folder of a compiler). Adoption needs all to match.
_FILES = "files"
_TREE = "tree"
_ENTRY = r"[A-Za-z0-9_+-]{0,60}-[0-9a-f]{12}"
_HEX40 = r"[0-9a-f]{40}"
_OURS = (rf"{re.escape(TEMP_PREFIX)}.+|{re.escape(TRASH_PREFIX)}.+", "dir", _TREE)
_ROOT_SHAPES: list[tuple[str, str, object]] = [
    (rf"{re.escape(TEMP_PREFIX)}.+", "file", None),  # the tag being written
    ("programs", "dir", [
        (r"\.output-[0-9a-f]{16}\.lock", "file", None),
        ("[a-z]+", "dir", [
            (_ENTRY, "dir", _FILES),
            (rf"\.{_ENTRY}\.lock", "file", None),
            (rf"\.{_ENTRY}\.users", "dir", [(r"\d+\.lock", "file", None)]),
            (rf"\.{_ENTRY}\.tmp[a-z0-9_]{{8}}", "dir", _TREE),  # before pybridge-tmp folders
            _OURS,
        ]),
    ]),
    ("cuda", "dir", [
        (_HEX40, "dir", _FILES),
        (rf"{_HEX40}\.lock", "file", None),
        ("direct", "dir", [(rf"{_HEX40}\.json", "file", None), (rf"\.{_HEX40}\.json\..+", "file", None)]),
        (r"\.tmp-[0-9a-f]{12}-.+|pybridge-deps-.+", "dir", _TREE),
        _OURS,
    ]),
    ("ffi", "dir", [
        (r"_pybridge_\w+\.(?:py|so|[\w.-]+\.so)", "file", None),
        (r"\._pybridge_\w+\.py\.tmp|\._pybridge_\w+", "file", None),
        (r"\._pybridge_\w+-.+|tmp[a-z0-9_]{8}", "dir", _TREE),
        ("__pycache__", "dir", [(r"_pybridge_\w+\..+", "file", None)]),
        _OURS,
    ]),
    ("bench", "dir", [(r"cdriver-[0-9a-f]{12}", "file", None)]),
]


def _first_foreign(folder: Path, shapes: object) -> Path | None:
    """The first path under ``folder`` (no link followed) that has none of ``shapes``; None if all do."""
    try:
        children = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return folder
    for child in children:
        path = Path(child.path)
        if child.is_symlink():
            return path
        is_dir = child.is_dir(follow_symlinks=False)
        if shapes == _TREE:
            found = _first_foreign(path, _TREE) if is_dir else None
        elif shapes == _FILES:
            found = path if is_dir or not child.is_file(follow_symlinks=False) else None
        else:
            found = path
            for pattern, kind, inner in shapes:  # type: ignore[attr-defined]
                if re.fullmatch(pattern, child.name) and (kind == "dir") == is_dir:
                    found = _first_foreign(path, inner) if is_dir else None
                    break
        if found is not None:
            return found
    return None


def lock(path: Path, timeout: float = -1, thread_local: bool = True) -> FileLock:
    """A :class:`filelock.FileLock` on ``path``, refused when ``path`` is a symbolic link (opening
    it would create or write the file it points to)."""
    if os.path.islink(path):
        raise ForeignCacheError(f"{str(path)!r} is a symbolic link, not a lock file pybridge made: remove it")
    return FileLock(path, timeout=timeout, thread_local=thread_local)


# ---------------------------------------------------------------- marked folders


@contextmanager
def temporary_folder(parent: Path, name: str) -> Iterator[Path]:
    """A new folder ``parent/.pybridge-tmp-<name>-XXXXXXXX`` whose mark is its first file, locked
    while the block runs (so no :func:`sweep` takes it); removed after, unless the block renamed
    it into place (an entry)."""
    tmp = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{name[:80]}-", dir=parent))
    # Locked before it is written: a sweep in another process takes a marked folder whose lock is
    # free, and one that ran between the two once removed the folder under this build.
    lock = FileLock(tmp / MARK, timeout=-1, thread_local=False)
    lock.acquire()
    try:
        (tmp / MARK).write_text(_MARK_TEXT)
        yield tmp
    finally:
        try:
            if is_real_dir(tmp):
                remove_marked(tmp)
        finally:
            lock.release()


def remove_marked(folder: Path, marks: tuple[str, ...] = (MARK,)) -> bool:
    """Delete ``folder`` if it is a real folder carrying one of ``marks`` (a regular file): its
    contents (links unlinked, never followed), then the marks, then the folder; whether it is gone.
    Interrupted, it keeps its mark, so the next sweep finishes it."""
    if not is_real_dir(folder):
        return not os.path.lexists(folder)
    present = tuple(m for m in marks if is_regular(folder / m))
    if not present:
        return False
    try:
        children = list(os.scandir(folder))
    except FileNotFoundError:
        return True
    for child in children:
        if child.name in present:
            continue
        if child.is_dir(follow_symlinks=False):
            shutil.rmtree(child.path, ignore_errors=True)  # rmtree unlinks links, never follows them
        else:
            _unlink(child.path)
    for m in present:
        _unlink(folder / m)
    try:
        folder.rmdir()
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


def _unlink(path: str | Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def discard(entry: Path, marks: tuple[str, ...] = (MARK,)) -> bool:
    """Remove an entry the caller may remove (its lock held, no user): renamed away to a marked
    trash folder first, so it is whole or absent at every moment, then deleted. Whether it is gone."""
    if not is_real_dir(entry):
        return not os.path.lexists(entry)
    if not is_regular(entry / MARK):
        if not any(is_regular(entry / m) for m in marks):
            return False  # not pybridge's
        (entry / MARK).write_text(_MARK_TEXT)  # an entry of an older pybridge: marked for its trash
    trash = entry.with_name(f"{TRASH_PREFIX}{entry.name[:80]}-{secrets.token_hex(4)}")
    try:
        os.rename(entry, trash)
    except FileNotFoundError:
        return True
    _remove_unused(trash)
    return True


def _remove_unused(folder: Path) -> bool:
    """Remove a temporary or trash folder unless a live process holds its mark's lock."""
    mark = folder / MARK
    if not is_regular(mark):
        # Empty: a removal interrupted after its last unlink; or (a temporary folder) one a build
        # is about to mark, so only an old one. Not empty: not pybridge's, kept.
        try:
            if folder.name.startswith(TRASH_PREFIX) or time.time() - os.lstat(folder).st_mtime > STALE_S:
                folder.rmdir()
                return True
        except OSError:
            pass
        return False
    lock = FileLock(mark, timeout=0, thread_local=False)
    try:
        lock.acquire()
    except Timeout:
        return False  # a build is writing it
    try:
        return remove_marked(folder)
    finally:
        lock.release()


def sweep(folder: Path) -> None:
    """Remove the temporary and trash folders in ``folder`` that no live process uses: folders of
    builds that were killed or of removals that were interrupted."""
    try:
        children = list(os.scandir(folder))
    except OSError:
        return
    for child in children:
        if child.name.startswith((TEMP_PREFIX, TRASH_PREFIX)) and child.is_dir(follow_symlinks=False):
            _remove_unused(Path(child.path))
