"""Compile a user's ``.fut`` program into a loadable library: one call or one command.

    pybridge build myprog.fut --backend multicore        # command line
    lib = pybridge.futhark.load("myprog.fut", backend="c")  # from Python: builds if needed, loads

Runs ``futhark <backend> --library`` and the C compiler with the link flags each backend needs
(cuda: -lcuda -lcudart -lnvrtc, as measured with Futhark 0.25.34). Outputs are cached by a hash of
the program and every file it imports (transitively), the backend and the compiler, so an unchanged
program is not rebuilt and an edited module is. Builds are safe to run from many threads and
processes at once: one builds (under the entry's file lock) into a temporary folder of pybridge's
(:func:`pybridge.ownership.temporary_folder`) and renames the whole folder into place, so an entry
is complete or absent; a load that finds one incomplete (a file missing) builds it again.
``-o DIR`` copies the cached entry into DIR; nothing else is written outside the cache.
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

from .. import cache, executables, toolchain
from ..ownership import MARK as OWNED_MARK, TEMP_PREFIX, discard, is_regular, sweep, temporary_folder
from ..paths import cache_dir
from ..backends import check_backend, choose_backend
from .csource import MARK as HARDENING_MARK, harden_file
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
    ``lib<prog>.so`` (manifest beside it): in the cache, or copied from there into ``out_dir``."""
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
    # The entry's name: the program's name in portable characters, the digest keeps it apart.
    entry = cache_dir("programs", backend) / f"{re.sub(r'[^A-Za-z0-9_+-]', '_', stem)[:60]}-{digest}"
    files = _entry_files(stem, src.name)
    cache.register_use(entry)  # from now on no bound or `pybridge cache clear` removes it
    # Checked under the entry's lock: a removal in progress finishes first (then this rebuilds).
    with cache.entry_lock(entry):
        if _is_built(entry, files, digest):  # built before, or by another thread or process meanwhile
            log.debug("%s (%s): cached in %s", src, backend, entry)
            _touch(entry / cache.PROGRAM_STAMP)
        else:
            _build(src, backend, compiler, cc, entry, digest)
    so = entry / f"lib{stem}.so"
    if out_dir is not None:
        so = _copy_out(entry, Path(out_dir), files, src)
    cache.enforce_bound()
    return so


def _entry_files(stem: str, source_name: str) -> list[str]:
    """The files of a complete entry, the library and then the stamp last."""
    return [f"{stem}.c", f"{stem}.h", f"{stem}.json", source_name, f"lib{stem}.so", cache.PROGRAM_STAMP]


def _build(src: Path, backend: str, compiler: str, cc: str, entry: Path, digest: str) -> None:
    """Compile into a temporary folder of pybridge's beside ``entry``, then rename it into place:
    the entry is whole or absent, whatever interrupts the build (under the entry's lock)."""
    sweep(entry.parent)  # folders of builds that were killed, of removals that were interrupted
    log.info("compiling %s for the %s backend with %s (%s)", src, backend, compiler, (_compiler_version(compiler).splitlines() or ["?"])[0])
    start = time.perf_counter()
    stem = src.stem
    with temporary_folder(entry.parent, entry.name) as tmp:
        # Run in the folder, outputs named without their path: Futhark names its outputs after -o
        # (a fixed name here, the program's own after), and GCC writes the C file's path into
        # __FILE__, where a carriage return (in the cache's path) is an internal compiler error.
        _run([compiler, backend, "--library", "-o", _OUT, str(src)], "futhark", cwd=tmp)
        _escape_carriage_returns(tmp / f"{_OUT}.c")
        harden_file(tmp / f"{_OUT}.c")  # OOM and negative sizes: errors instead of a dead process
        compile_library(tmp / f"{_OUT}.c", backend, tmp / f"lib{stem}.so", cc)
        for ext in (".c", ".h", ".json"):
            os.replace(tmp / f"{_OUT}{ext}", tmp / f"{stem}{ext}")
        shutil.copy2(src, tmp / src.name)  # keep the source beside the library (Library.source_path)
        (tmp / cache.PROGRAM_STAMP).write_text(digest)
        if os.path.lexists(entry) and not discard(entry, (OWNED_MARK, cache.PROGRAM_STAMP)):  # an incomplete entry
            raise BuildError(f"{str(entry)!r} is in the way of this build and is not pybridge's (no mark in it): remove it")
        os.rename(tmp, entry)
    log.info("compiled %s in %.1f s: %s", src.name, time.perf_counter() - start, entry)


def _copy_out(entry: Path, out: Path, files: list[str], src: Path) -> Path:
    """Copy a built entry into the folder a user named: each file to a temporary name there and
    renamed over the old one (atomic per file), the stamp last; under a lock kept in the cache."""
    with cache.output_lock(out):
        out.mkdir(parents=True, exist_ok=True)
        for name in files:
            target = out / name
            if name == src.name and os.path.lexists(target) and os.path.samefile(target, src):
                continue  # -o names the source's own folder: it stays as it is
            fd, tmp = tempfile.mkstemp(dir=out, prefix=f"{TEMP_PREFIX}{name[:40]}-")
            os.close(fd)
            try:
                shutil.copy2(entry / name, tmp)
                os.replace(tmp, target)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
    return out / f"lib{src.stem}.so"


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


_OUT = "pybridge_futhark_out"


def _escape_carriage_returns(c_file: Path) -> None:
    """Futhark copies the source's path into comments and string literals of the C as it is; a
    carriage return there ends a C line (a build error). Spelled as the escape ``\\r`` it is text in
    a comment and the same character in a string literal (Futhark writes no other raw CR)."""
    data = c_file.read_bytes()
    if b"\r" in data:
        c_file.write_bytes(data.replace(b"\r", b"\\r"))


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
    h = hashlib.sha256(f"{backend}\0{version}\0{HARDENING_MARK}\0{' '.join(LIB_CFLAGS)}\0".encode())
    for f in source_files(src):
        h.update(os.fsencode(os.path.relpath(f, src.parent)) + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def _is_built(entry: Path, files: list[str], digest: str) -> bool:
    """Whether ``entry`` is complete: every file a load reads, none a link, the stamp this digest."""
    try:
        return all(is_regular(entry / f) for f in files) and (entry / cache.PROGRAM_STAMP).read_text() == digest
    except (OSError, UnicodeDecodeError):
        return False


def compile_library(c_file: str | os.PathLike[str], backend: str, so: str | os.PathLike[str], cc: str | None = None) -> Path:
    """The C compiler step alone: ``<prog>.c`` that ``futhark <backend> --library`` wrote ->
    ``lib<prog>.so`` (for C generated on another machine, e.g. where nvcc is but futhark is not)."""
    cc = c_compiler(cc)
    cflags, ldflags = _cuda_dirs() if backend == "cuda" else ([], [])
    if backend == "cuda":
        _cuda13_compat(Path(c_file), Path(cflags[0][2:]) / "cuda.h")
    flags = [f for f in LIB_CFLAGS if f not in OPTIONAL_CFLAGS or _accepts(cc, f)]
    # In the C file's folder and by its name alone: GCC writes the path it is given into __FILE__,
    # and fails with an internal compiler error where that holds a carriage return.
    c_file = Path(c_file)
    _run([cc, *flags, "-shared", *cflags, "-o", os.path.abspath(so), c_file.name, *ldflags, *LINK_FLAGS[backend]],
         "C compiler", cwd=c_file.parent)
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


def _run(cmd: list[str], what: str, cwd: Path | None = None) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=executables.child_env())
    except FileNotFoundError:
        raise BuildError(f"{what} not found: {cmd[0]}") from None
    if proc.returncode != 0:
        raise BuildError(f"{what} failed ({' '.join(cmd)}):\n{proc.stdout}{proc.stderr}")
