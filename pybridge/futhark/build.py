"""Compile a user's ``.fut`` program into a loadable library: one call or one command.

    pybridge build myprog.fut --backend multicore        # command line
    lib = pybridge.futhark.load("myprog.fut", backend="c")  # from Python: builds if needed, loads

Runs ``futhark <backend> --library`` and the C compiler with the link flags each backend needs
(cuda: -lcuda -lcudart -lnvrtc, as measured with Futhark 0.25.34). Outputs are cached by a hash of
the program and every file it imports (transitively), the backend and the compiler, so an unchanged
program is not rebuilt and an edited module is. Builds are safe to run from many threads and
processes at once: one builds (under a file lock) into a temporary folder, and the outputs are
moved into place by atomic renames, so a reader never sees a half-written library.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from filelock import Timeout

from .. import cache, executables, toolchain
from ..paths import cache_dir
from ..backends import check_backend, choose_backend
from .csource import MARK, harden_file
from ..errors import PybridgeError


LINK_FLAGS = {  # one per backends.BACKENDS
    "c": ["-lm"],
    "multicore": ["-lm", "-lpthread"],
    "ispc": ["-lm", "-lpthread"],
    "cuda": ["-lcuda", "-lcudart", "-lnvrtc", "-lm"],
    "hip": ["-lamdhip64", "-lhiprtc", "-lm"],
    "opencl": ["-lOpenCL", "-lm"],
}

# The C compiler's flags for a library (the Makefile's rule says the same). -fPIC code may have its
# global functions replaced at load time (semantic interposition), so GCC neither inlines nor
# clones the generated C's own non-static functions (memblock_alloc, ...) into the entry points;
# nothing interposes them, and -fno-semantic-interposition gives back the executable's code: kmeans
# of benchmarks/programs ran 2.7% slower than `futhark c`'s executable as a plain -fPIC library,
# 0.3% faster with it (issue 23; averaged over 8 code layouts). Compilers without it build without.
LIB_CFLAGS = ["-O3", "-fPIC", "-fno-semantic-interposition"]
OPTIONAL_CFLAGS = {"-fno-semantic-interposition"}

INSTALL_HINT = (
    "Run `pybridge install-futhark` (Debian/Ubuntu x86-64: installs Debian's package for this user), or get the Futhark compiler from the official release tarball at https://futhark-lang.org/releases/ "
    "(unpack it and put its bin/ on PATH), or set FUTHARK=/path/to/futhark."
)


log = logging.getLogger(__name__)


class BuildError(PybridgeError, RuntimeError):
    """The Futhark compiler or the C compiler failed; the message holds their output."""


def futhark_compiler() -> str | None:
    """$FUTHARK, else ``futhark`` on PATH, else the checkout pybridge is imported from, else the
    per-user install (:mod:`pybridge.toolchain`, the one lookup)."""
    return toolchain.futhark_compiler()


def c_compiler(cc: str | None = None) -> str:
    """``cc`` (a name on PATH or a path), else $CC, else ``cc`` on PATH (absolute folders only:
    :mod:`pybridge.executables`); BuildError if it is not there."""
    found = executables.find(cc) if cc else executables.configured("CC", "cc")
    if found is None:
        raise BuildError(f"C compiler not found: {cc or os.environ.get('CC') or 'cc'} (set $CC, or put one on PATH)")
    return found


def cuda_home() -> Path:
    """The CUDA toolkit: $CUDA_HOME, else where nvcc is (when cuda.h is there: /usr/local/bin/nvcc may
    be a wrapper script), else /usr/local/cuda."""
    if os.environ.get("CUDA_HOME"):
        return Path(os.environ["CUDA_HOME"])
    nvcc = executables.configured("NVCC", "nvcc")
    home = Path(nvcc).resolve().parent.parent if nvcc else None
    return home if home is not None and (home / "include" / "cuda.h").is_file() else Path("/usr/local/cuda")


def cuda_toolkit() -> tuple[bool, str]:
    """Whether the cuda backend can be built here: nvcc and the toolkit's cuda.h and nvrtc.h."""
    if executables.configured("NVCC", "nvcc") is None:
        return False, "nvcc not found"
    for header in ("cuda.h", "nvrtc.h"):  # Futhark's cuda backend includes both
        if not (cuda_home() / "include" / header).is_file():
            return False, f"no {header} in {cuda_home() / 'include'} (set CUDA_HOME to the toolkit)"
    return True, ""


def default_backend() -> str:
    """The backend a source is built for when none is named: the best this machine can build and
    run (backends.choose_backend: cuda where a GPU is usable and the CUDA toolkit is here, else
    multicore)."""
    buildable = ["c", "multicore"] + (["cuda"] if cuda_toolkit()[0] else [])
    return choose_backend(buildable)


def _cuda_dirs() -> tuple[list[str], list[str]]:
    home = cuda_home()
    lib = home / "lib64"
    return [f"-I{home / 'include'}"], [f"-L{lib}", f"-Wl,-rpath,{lib}"]


def build_program(
    source: str | os.PathLike[str],
    backend: str | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    futhark: str | None = None,
    cc: str | None = None,
) -> Path:
    """Compile ``source`` for ``backend`` (default: :func:`default_backend`); return the path of
    ``lib<prog>.so`` (manifest beside it)."""
    src = Path(source).resolve()
    if not src.is_file():
        raise FileNotFoundError(f"source: {src} does not exist")
    backend = default_backend() if backend is None else check_backend(backend)
    if out_dir is not None and Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise ValueError(f"out_dir: {out_dir} exists and is not a directory")
    compiler = executables.find(futhark) if futhark else futhark_compiler()
    if compiler is None:
        why = f"futhark: {futhark} is not an executable file or a program on PATH" if futhark else toolchain.not_found_reason()
        raise BuildError(f"the Futhark compiler was not found ({why}). {INSTALL_HINT}")
    stem = src.stem
    digest = _digest(src, backend, compiler)
    # The cache folder's name: the program's name in portable characters (the compilers see this
    # path: GCC fails on a carriage return in it), the digest keeps it apart from others.
    out = Path(out_dir) if out_dir else cache_dir() / "programs" / backend / f"{re.sub(r'[^A-Za-z0-9_+-]', '_', stem)[:60]}-{digest}"
    so = out / f"lib{stem}.so"
    cached = out_dir is None
    if cached:
        cache.register_use(out)  # from now on no bound or `pybridge cache clear` removes it
    out.parent.mkdir(parents=True, exist_ok=True)
    # Checked under the entry's lock: a removal in progress finishes first (then this rebuilds).
    with cache.entry_lock(out):
        if _is_built(out, so, digest):  # built before, or by another thread or process meanwhile
            log.debug("%s (%s): cached in %s", src, backend, out)
            _touch(out / _STAMP)
            return so
        _sweep_stale_builds(out.parent)  # folders of builds that were killed or interrupted
        log.info("compiling %s for the %s backend with %s (%s)", src, backend, compiler, (_compiler_version(compiler).splitlines() or ["?"])[0])
        start = time.perf_counter()
        tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp"))
        try:
            # Futhark names its outputs after -o: a fixed name there, renamed to the program's own
            # after, so no file name (".", "-x", "a\rb") reaches a path the compilers build on.
            _run([compiler, backend, "--library", "-o", str(tmp / _OUT), str(src)], "futhark")
            _escape_carriage_returns(tmp / f"{_OUT}.c")
            harden_file(tmp / f"{_OUT}.c")  # OOM and negative sizes: errors instead of a dead process
            compile_library(tmp / f"{_OUT}.c", backend, tmp / so.name, cc)
            for ext in (".c", ".h", ".json"):
                os.replace(tmp / f"{_OUT}{ext}", tmp / f"{stem}{ext}")
            shutil.copy2(src, tmp / src.name)  # keep the source beside the library (Library.source_path)
            (tmp / _STAMP).write_text(digest)
            _publish(tmp, out, last=(so.name, _STAMP))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        log.info("compiled %s in %.1f s: %s", src.name, time.perf_counter() - start, so)
    if cached:
        cache.enforce_bound()
    return so


def _touch(path: Path) -> None:
    try:
        os.utime(path)  # least recently used first when the cache is over its bound
    except OSError:
        pass


@functools.lru_cache(maxsize=16)
def _version_of(compiler: str, mtime_ns: int) -> str:
    try:
        return subprocess.run([compiler, "--version"], capture_output=True, text=True, env=executables.child_env()).stdout
    except OSError as e:
        raise BuildError(f"futhark not runnable: {compiler}: {e}") from None


def _compiler_version(compiler: str) -> str:
    """``futhark --version`` (run once per compiler binary and process)."""
    try:
        mtime = os.stat(compiler).st_mtime_ns
    except OSError:
        mtime = 0
    return _version_of(compiler, mtime)


_STAMP = ".source-hash"
_OUT = "pybridge_futhark_out"


def _escape_carriage_returns(c_file: Path) -> None:
    """Futhark copies the source's path into comments and string literals of the C as it is; a
    carriage return there ends a C line (a build error). Spelled as the escape ``\\r`` it is text in
    a comment and the same character in a string literal (Futhark writes no other raw CR)."""
    data = c_file.read_bytes()
    if b"\r" in data:
        c_file.write_bytes(data.replace(b"\r", b"\\r"))


STALE_TMP_S = 60.0  # a build's temporary folder this old, whose build lock is free, is swept


def _sweep_stale_builds(parent: Path) -> None:
    """Remove ``.<name>.tmp*`` folders that no build uses: an interrupted build removes its own
    folder on the way out (``finally``), but a killed process (SIGKILL, a second Ctrl-C during the
    removal) cannot. A folder is in use exactly while its build holds ``.<name>.lock`` (flock, this
    process's threads included), so one is removed only when that lock is free at once, and only
    after ``STALE_TMP_S`` seconds, never a folder a build is writing."""
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    now = time.time()
    for e in entries:
        name, sep, _ = e.name.partition(".tmp")
        if not (sep and name.startswith(".") and e.is_dir(follow_symlinks=False)):
            continue
        try:
            if now - e.stat(follow_symlinks=False).st_mtime < STALE_TMP_S:
                continue
        except OSError:
            continue
        lock = cache.entry_lock(parent / name[1:], timeout=0)  # the entry's build lock, free at once or skipped
        try:
            with lock:
                shutil.rmtree(e.path, ignore_errors=True)
                log.info("removed the stale build folder %s", e.path)
        except Timeout:
            continue
_IMPORT = re.compile(r'^\s*(?:open\s+|local\s+)*import\s+"([^"]+)"', re.MULTILINE)


def source_files(src: str | os.PathLike[str]) -> list[Path]:
    """``src`` and every file it imports, transitively, in first-seen order. Imports are relative to
    the importing file (``import "x"`` -> x.fut; lib/ packages are imported the same way); the
    compiler's own ``/prelude`` and imports that do not exist (futhark reports those) are left out."""
    first = Path(src).resolve()
    seen = {first: None}
    todo = [first]
    while todo:
        f = todo.pop(0)
        try:
            text = f.read_text(errors="replace")
        except OSError:
            continue
        text = re.sub(r"--[^\n]*", "", text)  # comments
        for name in _IMPORT.findall(text):
            if name.startswith("/"):
                continue
            dep = (f.parent / f"{name}.fut").resolve()
            if dep not in seen and dep.is_file():
                seen[dep] = None
                todo.append(dep)
    return list(seen)


def _digest(src: Path, backend: str, compiler: str) -> str:
    """The cache key: every source file (path relative to the program, and content), backend,
    compiler, hardening version and C flags."""
    version = _compiler_version(compiler)
    h = hashlib.sha256(f"{backend}\0{version}\0{MARK}\0{' '.join(LIB_CFLAGS)}\0".encode())
    for f in source_files(src):
        h.update(os.fsencode(os.path.relpath(f, src.parent)) + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def _is_built(out: Path, so: Path, digest: str) -> bool:
    try:
        return so.is_file() and (out / _STAMP).read_text() == digest
    except OSError:
        return False


def _publish(tmp: Path, out: Path, last: tuple[str, ...]) -> None:
    """Move a finished build into ``out``: the whole folder by one rename when ``out`` is new, else
    file by file (each an atomic replace), ``last`` at the end, so the stamp appears only when all
    the rest is in place. A library a process already loaded keeps its old file (the inode)."""
    try:
        os.rename(tmp, out)
        return
    except OSError:
        pass  # out exists (an explicit out_dir, or a stale or broken earlier build)
    out.mkdir(parents=True, exist_ok=True)
    names = sorted(p.name for p in tmp.iterdir() if p.name not in last) + [n for n in last if (tmp / n).exists()]
    for name in names:
        os.replace(tmp / name, out / name)


def compile_library(c_file: str | os.PathLike[str], backend: str, so: str | os.PathLike[str], cc: str | None = None) -> Path:
    """The C compiler step alone: ``<prog>.c`` that ``futhark <backend> --library`` wrote ->
    ``lib<prog>.so`` (for C generated on another machine, e.g. where nvcc is but futhark is not)."""
    cc = c_compiler(cc)
    cflags, ldflags = _cuda_dirs() if backend == "cuda" else ([], [])
    if backend == "cuda":
        _cuda13_compat(Path(c_file), Path(cflags[0][2:]) / "cuda.h")
    flags = [f for f in LIB_CFLAGS if f not in OPTIONAL_CFLAGS or _accepts(cc, f)]
    _run([cc, *flags, "-shared", *cflags, "-o", str(so), str(c_file), *ldflags, *LINK_FLAGS[backend]], "C compiler")
    return Path(so)


@functools.lru_cache(maxsize=16)
def _accepts(cc: str, flag: str) -> bool:
    """Whether the C compiler ``cc`` takes ``flag`` (an older clang does not know
    -fno-semantic-interposition): one compile of an empty file, once per process."""
    with tempfile.TemporaryDirectory(prefix="pybridge-cc-") as tmp:
        src = Path(tmp) / "empty.c"
        src.write_text("int pybridge_empty;\n")
        try:
            proc = subprocess.run([cc, flag, "-Werror", "-c", "-o", str(Path(tmp) / "empty.o"), str(src)], capture_output=True,
                                  env=executables.child_env())
        except OSError:
            return False
        return proc.returncode == 0


def _cuda13_compat(c_file: Path, cuda_h: Path) -> None:
    """Futhark before 0.25.34 emits CUDA 12's cuCtxCreate(&ctx, 0, dev); CUDA 13 renamed it to the
    4-argument cuCtxCreate_v4. Rewrite that one call when the headers are CUDA 13's."""
    try:
        if "cuCtxCreate_v4" not in cuda_h.read_text(errors="replace").split("define cuCtxCreate ", 1)[-1][:40]:
            return
    except OSError:
        return
    text = c_file.read_text()
    c_file.write_text(text.replace("cuCtxCreate(&ctx->cu_ctx, 0, ctx->dev)", "cuCtxCreate(&ctx->cu_ctx, NULL, 0, ctx->dev)"))


def _run(cmd: list[str], what: str) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=executables.child_env())
    except FileNotFoundError:
        raise BuildError(f"{what} not found: {cmd[0]}") from None
    if proc.returncode != 0:
        raise BuildError(f"{what} failed ({' '.join(cmd)}):\n{proc.stdout}{proc.stderr}")
