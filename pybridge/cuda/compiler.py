"""Compile your own CUDA C: cached, safe under concurrency, errors carrying the compiler's message.

    built = build_source("my_kernels.cu", arch="sm_90")   # no GPU needed: cubin + PTX on disk
    built.cubin, built.ptx, built.declarations["saxpy"]

(``pybridge.cuda.compile(text)`` and ``pybridge.cuda.load_module("my_kernels.cu")`` build and load;
``pybridge build my_kernels.cu`` builds from the command line.)

**Flags.** The Makefile's plus -lineinfo (:data:`NVCC_FLAGS`: ``-O3 -std=c++17 -lineinfo``: these
builds stay on this machine, where line tables help a profiler; the Makefile's ship in the wheel,
so they leave out the build folder's path) followed by the caller's
``options`` (an ``-O`` or ``-std`` there replaces the default one): machine code (cubin) for the
architecture and PTX of the same level, which the driver JIT-compiles where the cubin does not run.
The compile goes through PyCUDA's compiler (``pycuda.compiler.compile``, its own cache off) when
PyCUDA imports, else through nvcc directly. A ``#line`` directive makes diagnostics and -lineinfo
name the caller's file (``<string>`` for text).

**Cache.** ``$PYBRIDGE_CACHE/cuda/<key>/`` where the key hashes the source, the contents of every
header it includes (transitively, listed by ``nvcc -MM``; the toolkit's own headers are covered by
nvcc's version), the options, include directories, architecture, nvcc's version and the flags nvcc
takes from $NVCC_PREPEND_FLAGS / $NVCC_APPEND_FLAGS. A second, "direct" record per source (as in
ccache) remembers its header list, so a cache hit costs hashing
those headers instead of an nvcc run; a header *added* earlier on the include path, shadowing one
the record lists, is not seen by it: pass ``rebuild=True`` then.

**Concurrency.** One compile per key across threads and processes: a file lock (filelock) on
``<key>.lock``; the entry is written in a temporary directory and renamed into place (atomic), so
readers see a whole entry or none. An entry missing a file, or with a cubin that is not a CUDA ELF,
is rebuilt. ``pybridge cache`` lists and clears entries (:mod:`pybridge.cache`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import tempfile
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from ..executables import child_env, configured
from ..ownership import is_real_dir, is_regular, lock, real_folder, sweep, temporary_folder
from ..paths import cache_dir
from .context import compute_capability, have_pycuda
from .declarations import SourceDeclarations, read_declarations
from ..errors import PybridgeError

__all__ = [
    "NVCC_FLAGS",
    "CompileError",
    "CompiledSource",
    "Diagnostic",
    "build_source",
    "default_arch",
    "describe",
    "normalize_arch",
    "parse_diagnostics",
]

#: The Makefile's NVCCFLAGS plus -lineinfo (the module docstring says why).
NVCC_FLAGS: tuple[str, ...] = ("-O3", "-std=c++17", "-lineinfo")
_CACHE_VERSION = "pybridge-cuda-cache-1"  # bump when the entry layout or key changes
# Environment variables nvcc reads as extra flags: they change the output, so they are in the key.
_NVCC_ENV = ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")
_ENTRY_FILES = ("module.cubin", "module.ptx", "source.cu", "entry.json")
# Options that would fight with what build_source decides itself.
_OWN_OPTIONS = re.compile(
    r"^(-arch|--gpu-architecture|-code|--gpu-code|-gencode|--generate-code|-o|--output-file|-cubin|--cubin|"
    r"-ptx|--ptx|-fatbin|--fatbin|-c|--compile|-M|-MM|-E|--preprocess|--keep|-keep)(=.*)?$"
)


# ---------------------------------------------------------------------------- errors


@dataclass(frozen=True)
class Diagnostic:
    """One message of the compiler: file, line (None for ptxas and driver messages), severity, text."""

    file: str | None
    line: int | None
    severity: str  # "error", "warning", "fatal error", ...
    message: str

    def __str__(self) -> str:
        where = f"{self.file}({self.line})" if self.file and self.line else (self.file or "nvcc")
        return f"{where}: {self.severity}: {self.message}"


# nvcc's front end: `file(12): error: ...`; the host compiler: `file:12:5: error: ...`;
# ptxas / nvlink: `ptxas error   : ...`; nvcc itself: `nvcc fatal   : ...`.
_DIAG_PATTERNS = (
    re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<sev>error|warning|catastrophic error|remark)\s*(?:#\w+-\w+)?: (?P<msg>.*)$"),
    re.compile(r"^(?P<file>[^:\s][^:]*):(?P<line>\d+):(?:\d+:)? (?P<sev>error|warning|fatal error): (?P<msg>.*)$"),
    re.compile(r"^(?P<file>ptxas|nvlink|nvcc)\s*(?P<sev>error|fatal|warning)\s*: (?P<msg>.*)$"),
)


def parse_diagnostics(output: str) -> tuple[Diagnostic, ...]:
    found = []
    for raw in output.splitlines():
        for pat in _DIAG_PATTERNS:
            m = pat.match(raw.strip())
            if m:
                d = m.groupdict()
                line = int(d["line"]) if d.get("line") else None
                file = None if d["file"] in ("ptxas", "nvlink", "nvcc") else d["file"]
                found.append(Diagnostic(file, line, d["sev"], d["msg"].strip()))
                break
    return tuple(found)


class CompileError(PybridgeError, RuntimeError):
    """nvcc rejected the source (or could not run). ``output`` is the compiler's own text;
    ``diagnostics`` its parsed messages; ``file``/``line`` those of the first error; ``command``
    what ran."""

    def __init__(self, summary: str, output: str = "", command: Sequence[str] = ()) -> None:
        self.output = output
        self.command = tuple(command)
        self.diagnostics = parse_diagnostics(output)
        errors = [d for d in self.diagnostics if "error" in d.severity or d.severity == "fatal"]
        first = errors[0] if errors else None
        self.file = first.file if first else None
        self.line = first.line if first else None
        head = f"{summary}: {first}" if first else summary
        self.summary = summary  # without the compiler's text (pybridge build prints that once, after it)
        text = output.strip()
        super().__init__(f"{head}\n{text}" if text else head)


# ---------------------------------------------------------------------------- architecture


def normalize_arch(arch: str | int | tuple[int, int]) -> tuple[str, str]:
    """("sm_90", "compute_90") from "sm_90", "compute_90", "90", 90 or (9, 0); suffixes such as
    sm_90a are kept."""
    if isinstance(arch, tuple) and len(arch) == 2 and all(isinstance(v, int) for v in arch):
        level = f"{arch[0]}{arch[1]}"
    elif isinstance(arch, int) and not isinstance(arch, bool):
        level = str(arch)
    elif isinstance(arch, str):
        m = re.fullmatch(r"(?:sm_|compute_)?(\d{2,3}[a-z]?)", arch.strip())
        if m is None:
            raise ValueError(f"arch: expected e.g. 'sm_90', 90 or (9, 0), got {arch!r}")
        level = m.group(1)
    else:
        raise TypeError(f"arch: expected e.g. 'sm_90', 90 or (9, 0), got {type(arch).__name__} {arch!r}")
    if not re.fullmatch(r"\d{2,3}[a-z]?", level) or int(re.sub(r"\D", "", level)) < 50:
        raise ValueError(f"arch: {arch!r} is not a CUDA architecture (sm_50 and newer)")
    return f"sm_{level}", f"compute_{level}"


def default_arch(device: int = 0) -> str:
    """The GPU's own architecture when PyCUDA sees one, else $CUDA_ARCH, else the Makefile's sm_90."""
    if have_pycuda():
        try:
            major, minor = compute_capability(device)
            return f"sm_{major}{minor}"
        except Exception:  # noqa: BLE001 - no usable GPU: compile for the configured default
            pass
    return os.environ.get("CUDA_ARCH") or "sm_90"


# ---------------------------------------------------------------------------- the compiler


def _nvcc() -> str:
    exe = os.environ.get("NVCC") or "nvcc"
    found = configured("NVCC", "nvcc")  # PATH's absolute folders only (pybridge.executables)
    if found is None:
        raise CompileError(
            f"the CUDA compiler {exe!r} was not found: install the CUDA toolkit "
            "(https://developer.nvidia.com/cuda-downloads) and put its bin/ on PATH, or set $NVCC"
        )
    return found


_version_lock = threading.Lock()
_versions: dict[str, tuple[str, Path]] = {}


def _nvcc_identity(nvcc: str) -> tuple[str, Path]:
    """(nvcc --version text, the toolkit root whose headers the version covers), once per process."""
    with _version_lock:
        if nvcc not in _versions:
            proc = subprocess.run([nvcc, "--version"], capture_output=True, text=True, env=child_env())
            if proc.returncode != 0:
                raise CompileError(f"{nvcc} --version failed", proc.stdout + proc.stderr, [nvcc, "--version"])
            # /usr/local/bin/nvcc may be a wrapper script: the toolkit is where nvcc -MM finds
            # cuda_runtime.h, so ask it with an empty translation unit.
            root = _toolkit_root(nvcc)
            _versions[nvcc] = (proc.stdout, root)
        return _versions[nvcc]


def _toolkit_root(nvcc: str) -> Path:
    with tempfile.TemporaryDirectory(prefix="pybridge-nvcc-") as d:
        empty = Path(d) / "empty.cu"
        empty.write_text("")
        proc = subprocess.run([nvcc, "-MM", str(empty)], capture_output=True, text=True, env=child_env())
    for dep in _make_deps(proc.stdout):
        if dep.name == "cuda_runtime.h":
            return dep.resolve().parent.parent  # <toolkit>/targets/<triple>/include -> <toolkit>/targets/<triple>
    return Path(nvcc).resolve().parent.parent


def _make_deps(text: str) -> list[Path]:
    """The prerequisites of a make rule as nvcc -M writes it (``target : a b \\`` lines)."""
    joined = text.replace("\\\n", " ")
    _, _, prereqs = joined.partition(":")
    out: list[Path] = []
    for word in re.split(r"(?<!\\)\s+", prereqs.strip()):
        if word:
            out.append(Path(word.replace("\\ ", " ").replace("$$", "$")))
    return out


def _check_options(options: Sequence[str]) -> list[str]:
    if isinstance(options, (str, bytes)):
        raise TypeError(f"options: expected a list of str such as ['-DBLOCK=128'], got the str {options!r}")
    options = list(options)  # once, in case it is an iterator
    if not all(isinstance(o, str) for o in options):
        raise TypeError(f"options: expected a list of str such as ['-DBLOCK=128'], got {options!r}")
    for o in options:
        if _OWN_OPTIONS.match(o):
            raise ValueError(
                f"options: {o!r} is chosen by pybridge (cubin and PTX for arch=...): pass arch= instead"
            )
    # Relative include directories mean the caller's directory; PyCUDA compiles in a temporary one.
    # Spellings: -Idir, -I dir, --include-path=dir, --include-path dir, -isystem dir.
    user: list[str] = []
    takes_dir = False
    for o in options:
        if takes_dir:
            user.append(str(Path(o).resolve()))
            takes_dir = False
        elif o in ("-I", "--include-path", "-isystem"):
            user.append(o)
            takes_dir = True
        elif o.startswith("--include-path="):
            user.append(f"--include-path={Path(o.partition('=')[2]).resolve()}")
        elif o.startswith("-I") and len(o) > 2:
            user.append(f"-I{Path(o[2:]).resolve()}")
        else:
            user.append(o)
    base = [f for f in NVCC_FLAGS
            if not (f.startswith("-O") and any(o.startswith("-O") for o in user))
            and not (f.startswith("-std") and any(o.startswith(("-std", "--std")) for o in user))]
    return base + user


_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include", re.M)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------- the result


@dataclass(frozen=True)
class CompiledSource:
    """A compiled source: its cubin and PTX in the cache, and what it declares."""

    name: str  # the file's stem, or name= for text
    source_path: Path | None  # the caller's file, None for text
    directory: Path  # the cache entry
    arch: str
    options: tuple[str, ...]  # every nvcc flag used besides the architecture and output kind
    from_cache: bool  # False when this call ran the compiler
    log: str  # compiler warnings of the compile that made the entry
    compiled_by: str  # "pycuda" (pycuda.compiler) or "nvcc" (run directly)

    @property
    def cubin(self) -> Path:
        return self.directory / "module.cubin"

    @property
    def ptx(self) -> Path:
        return self.directory / "module.ptx"

    @property
    def source(self) -> str:
        return (self.directory / "source.cu").read_text()

    @property
    def key(self) -> str:
        return self.directory.name

    @cached_property
    def declarations(self) -> SourceDeclarations:
        return read_declarations(self.source, str(self.source_path) if self.source_path else self.name)


# ---------------------------------------------------------------------------- building


@dataclass(frozen=True)
class _Job:
    text: str  # the caller's source
    display: str  # the file name diagnostics use
    name: str
    source_path: Path | None
    include_dirs: tuple[str, ...]
    options: tuple[str, ...]
    sm: str
    compute: str
    nvcc: str
    nvcc_version: str
    toolkit: Path
    env_flags: tuple[str, ...] = ()  # NVCC_PREPEND_FLAGS / NVCC_APPEND_FLAGS: nvcc adds them itself

    @property
    def compile_text(self) -> str:
        quoted = self.display.replace("\\", "\\\\").replace('"', '\\"')  # a C string literal
        return f'#line 1 "{quoted}"\n{self.text}'

    @property
    def flags(self) -> list[str]:
        return [*self.options, *(f"-I{d}" for d in self.include_dirs)]

    def direct_key(self) -> str:
        parts = [_CACHE_VERSION, self.text, self.display, *self.options, "\0", *self.include_dirs,
                 self.sm, self.nvcc_version, *self.env_flags]
        return _sha("\0".join(parts).encode())


def build_source(
    source: str | os.PathLike[str],
    *,
    options: Sequence[str] = (),
    include_dirs: Sequence[str | os.PathLike[str]] = (),
    arch: str | int | tuple[int, int] | None = None,
    name: str | None = None,
    rebuild: bool = False,
) -> CompiledSource:
    """Compile CUDA C to cubin + PTX in the cache (or find it there); see the module docstring.

    ``source`` is the text of the code, or a path (``pathlib.Path``, or a str ending in .cu/.cuh
    naming an existing file): a file's directory is searched for its ``#include "..."`` headers.
    ``arch`` defaults to :func:`default_arch`. Raises :class:`CompileError` with nvcc's message.
    """
    if isinstance(source, os.PathLike) or (
        isinstance(source, str) and "\n" not in source and source.endswith((".cu", ".cuh")) and Path(source).is_file()
    ):
        path = Path(source).resolve()
        if not path.is_file():
            raise FileNotFoundError(f"source: no such file {path}")
        text, display, default_name = path.read_text(), str(path), path.stem
        dirs = [str(path.parent)]
    elif isinstance(source, str) and "\n" not in source and source.strip().endswith((".cu", ".cuh")):
        # One line naming a .cu file is never CUDA C: the file is missing (compiling the name as
        # source would report a syntax error in "<string>").
        raise FileNotFoundError(f"source: no such file {source!r} (a str ending in .cu names a file)")
    elif isinstance(source, str):
        text, display, default_name, path, dirs = source, "<string>", "source", None, []
    else:
        raise TypeError(f"source: expected CUDA C text or a path, got {type(source).__name__}")
    dirs += [str(Path(d).resolve()) for d in include_dirs]
    sm, compute = normalize_arch(arch if arch is not None else default_arch())
    checked_options = tuple(_check_options(options))  # bad arguments are named even where nvcc is missing
    nvcc = _nvcc()
    version, toolkit = _nvcc_identity(nvcc)
    env_flags = tuple(f"{v}={os.environ.get(v, '')}" for v in _NVCC_ENV)
    job = _Job(text, display, name or default_name, path, tuple(dirs), checked_options,
               sm, compute, nvcc, version, toolkit, env_flags)
    return _Cache(cache_dir("cuda")).build(job, rebuild)


class _Cache:
    def __init__(self, root: Path) -> None:
        self.root = root
        real_folder(root, "direct")

    # ---- keys
    def _headers(self, job: _Job) -> list[Path]:
        """Every non-toolkit header the source includes, transitively (nvcc -MM)."""
        if not _INCLUDE.search(job.text) and not any(o.startswith(("-include", "--pre-include")) for o in job.options):
            return []
        with temporary_folder(self.root, "deps") as d:
            (d / "source.cu").write_text(job.compile_text)
            # Named without its folder (in the cache: its path may hold a carriage return, which
            # nvcc's make rule would split); relative headers are found through -I of the caller's folder.
            cmd = [job.nvcc, "-MM", *job.flags, f"-arch={job.compute}", "source.cu"]
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=d, env=child_env())
            if proc.returncode != 0:
                raise CompileError(f"nvcc could not read the includes of {job.display}", proc.stdout + proc.stderr, cmd)
            deps = [dep if dep.is_absolute() else d / dep for dep in _make_deps(proc.stdout)]
            src_resolved = (d / "source.cu").resolve()
            toolkit = job.toolkit.resolve()
            found: list[Path] = []
            for dep in deps:
                r = dep.resolve()
                if r != src_resolved and not r.is_relative_to(toolkit) and r not in found:
                    found.append(r)
        return sorted(found)

    @staticmethod
    def _hash_headers(headers: Sequence[Path]) -> list[tuple[str, str]] | None:
        """[(path, sha256)], or None when one is gone."""
        out = []
        for h in headers:
            try:
                out.append((str(h), _sha(h.read_bytes())))
            except OSError:
                return None
        return out

    @staticmethod
    def _full_key(job: _Job, hashed: list[tuple[str, str]]) -> str:
        return _sha("\0".join([job.direct_key(), *(f"{p}\0{h}" for p, h in hashed)]).encode())[:40]

    def _key(self, job: _Job, rebuild: bool) -> str:
        direct = self.root / "direct" / f"{job.direct_key()[:40]}.json"
        if not rebuild:
            try:
                record = json.loads(direct.read_text())
                hashed = self._hash_headers([Path(p) for p, _ in record["headers"]])
                if hashed is not None and hashed == [tuple(x) for x in record["headers"]]:
                    return str(record["key"])
            except (OSError, ValueError, KeyError, TypeError):
                pass  # no record, or an unreadable one: ask nvcc
        headers = self._headers(job)
        hashed = self._hash_headers(headers)
        if hashed is None:
            missing = [str(h) for h in headers if not h.is_file()]
            raise CompileError(
                f"nvcc -MM lists headers of {job.display} that cannot be read: {', '.join(missing) or '?'} "
                "(removed meanwhile, or a path nvcc rewrote: it turns '\\' into '/'); try again, or rename the path"
            )
        key = self._full_key(job, hashed)
        _write_atomic(direct, json.dumps({"key": key, "headers": hashed}).encode())
        return key

    # ---- entries
    @staticmethod
    def _complete(entry: Path) -> bool:
        if not (is_real_dir(entry) and all(is_regular(entry / f) for f in _ENTRY_FILES)):
            return False
        with open(entry / "module.cubin", "rb") as f:
            return f.read(4) == b"\x7fELF"  # a truncated or foreign file is rebuilt

    def _result(self, job: _Job, entry: Path, from_cache: bool) -> CompiledSource:
        try:
            meta = json.loads((entry / "entry.json").read_text())
        except (OSError, ValueError):
            meta = {}
        return CompiledSource(job.name, job.source_path, entry, job.sm, job.options, from_cache,
                              str(meta.get("log", "")), str(meta.get("compiled_by", "?")))

    def build(self, job: _Job, rebuild: bool) -> CompiledSource:
        key = self._key(job, rebuild)
        entry = self.root / key
        if not rebuild and self._complete(entry):
            _touch(entry)
            return self._result(job, entry, True)
        with lock(self.root / f"{key}.lock"):
            if not rebuild and self._complete(entry):
                return self._result(job, entry, True)  # another thread or process made it meanwhile
            sweep(self.root)  # folders of compiles that were killed, of removals that were interrupted
            with temporary_folder(self.root, key[:12]) as tmp:
                log, compiled_by = _compile(job, tmp)
                (tmp / "source.cu").write_text(job.text)
                meta = {"name": job.name, "source": job.display, "arch": job.sm, "options": list(job.options),
                        "include_dirs": list(job.include_dirs), "nvcc": job.nvcc, "log": log, "compiled_by": compiled_by}
                (tmp / "entry.json").write_text(json.dumps(meta, indent=1))
                if is_real_dir(entry):
                    # Incomplete, or rebuild=True: replace it file by file (each rename atomic),
                    # never moving it away: readers that found it complete (they take no lock)
                    # may be reading its files right now. Same key, so old and new are equivalent.
                    for f in _ENTRY_FILES:
                        os.replace(tmp / f, entry / f)
                else:
                    if os.path.lexists(entry):
                        raise CompileError(f"{str(entry)!r} is in the way of the cache entry and is not pybridge's: remove it")
                    os.rename(tmp, entry)
        from .. import cache

        cache.enforce_bound()
        return self._result(job, entry, False)


def _touch(entry: Path) -> None:
    try:
        os.utime(entry)  # least recently used first when the cache is over its bound
    except OSError:
        pass


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _pycuda_compiler():  # type: ignore[no-untyped-def]
    try:
        import pycuda.compiler
        import pycuda.driver
    except ImportError:
        return None
    return pycuda.compiler, pycuda.driver


def _compile(job: _Job, out: Path) -> tuple[str, str]:
    """cubin and PTX of ``job`` into ``out``; returns the compiler's warnings ("" when quiet) and
    which compiler ran ("pycuda" or "nvcc")."""
    pycuda = _pycuda_compiler()
    logs = []
    for target, arch, filename in (("cubin", job.sm, "module.cubin"), ("ptx", job.compute, "module.ptx")):
        if pycuda is not None:
            data, log = _compile_pycuda(pycuda, job, target, arch)
        else:
            data, log = _compile_nvcc(job, target, arch, out)
        (out / filename).write_bytes(data)
        if log.strip():
            logs.append(log.strip())
    log = "\n".join(dict.fromkeys(logs))  # cubin and PTX usually say the same thing
    if log:
        warnings.warn(f"nvcc compiled {job.display} with warnings:\n{log}", stacklevel=4)
    return log, "nvcc" if pycuda is None else "pycuda"


def _compile_nvcc(job: _Job, target: str, arch: str, out: Path) -> tuple[bytes, str]:
    src = out / f"compile-{target}.cu"
    src.write_text(job.compile_text)
    dest = out / f"compile.{target}"
    cmd = [job.nvcc, f"--{target}", f"-arch={arch}", *job.flags, "-o", str(dest), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env())
    src.unlink(missing_ok=True)
    if proc.returncode != 0 or not dest.is_file():
        raise CompileError(f"nvcc could not compile {job.display} ({target} for {arch})", proc.stdout + proc.stderr, cmd)
    data = dest.read_bytes()
    dest.unlink()
    return data, proc.stdout + proc.stderr


# warnings.catch_warnings changes process-wide state: one PyCUDA compile at a time per process.
_pycuda_lock = threading.Lock()


def _compile_pycuda(pycuda, job: _Job, target: str, arch: str) -> tuple[bytes, str]:  # type: ignore[no-untyped-def]
    compiler, driver = pycuda
    with _pycuda_lock, warnings.catch_warnings(record=True) as caught:  # PyCUDA reports nvcc's warnings this way
        warnings.simplefilter("always")
        try:
            data = compiler.compile(
                job.compile_text, nvcc=job.nvcc, options=job.flags, no_extern_c=True, arch=arch,
                cache_dir=False, target=target,
            )
        except driver.CompileError as e:
            output = f"{e.stdout or ''}{e.stderr or ''}"
            raise CompileError(f"nvcc could not compile {job.display} ({target} for {arch}, through PyCUDA)",
                               output, list(e.command_line or ())) from None
    log = "\n".join(str(w.message).removeprefix("The CUDA compiler succeeded, but said the following:\n")
                    for w in caught)
    return data, log


def describe(built: CompiledSource) -> str:
    """What ``pybridge build x.cu`` prints: the images and each declared kernel (one whose declaration
    cannot be used is left out: ``pybridge build`` reports it as an error)."""
    lines = [f"cubin ({built.arch}): {built.cubin}", f"ptx: {built.ptx}",
             f"options: {shlex.join(built.options)}", f"{'cached' if built.from_cache else 'compiled'}: {built.key}"]
    decls = built.declarations
    for kname, sig in sorted(decls.kernels.items()):
        if not isinstance(sig, Exception):
            lines.append(f"kernel {sig}")
    for kname in sorted(decls.cpp_kernels):
        lines.append(f'kernel {kname}: C++ linkage (mangled name): declare it extern "C" to load it by name')
    return "\n".join(lines)
