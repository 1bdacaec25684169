"""Loading a Futhark library: find it, read its manifest, bind it with cffi, create its context.

``load("saxpy")`` finds ``build/futhark/<backend>/libsaxpy.so`` (the programs of ``futhark/``),
``load("path/libprog.so")`` / ``load("path/prog.json")`` take the files Futhark wrote, and
``load("prog.fut", backend="c")`` compiles a user's program first (see ``build.py``).
"""

from __future__ import annotations

import copyreg
import ctypes
import difflib
import logging
import os
import subprocess
import threading
import time
import uuid
import warnings
import weakref
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import Any, Iterator

import cffi

from .. import backends
from ..backends import BACKENDS, check_backend, choose_backend
from ..executables import child_env, python_command
from ..paths import build_dirs, find_build_file, source_checkout
from .binding import LINK_PROBE, LINKED_FUNCTION, api_module_key, bind_abi, bind_api, bind_prebuilt
from .build import cuda_home
from .cdef import RAW_POINTER_CTYPE, cdef_for
from .context import Config, Context
from .conversion import Codec
from .entry import EntryPoint
from .header import check as check_header
from .errors import FutharkError
from .handles import ArrayHandle, OpaqueHandle
from .kinds import ArrayKind, OpaqueKind
from .manifest import ArrayInfo, Manifest, ManifestError, load_manifest
from .shims import shims_for
from .names import name_lookup, python_names
from .source import SourceInfo, load_source

log = logging.getLogger(__name__)

_open_libraries: "weakref.WeakValueDictionary[str, Library]" = weakref.WeakValueDictionary()  # by key, latest
_libraries_by_instance: "weakref.WeakValueDictionary[str, Library]" = weakref.WeakValueDictionary()
_open_lock = threading.Lock()


def built_programs(kind: str = "futhark") -> dict[str, list[str]]:
    """backend -> program names built in ``<build dir>/<kind>/<backend>/lib<prog>.so`` (the first
    build directory that has a backend wins, as lookups do)."""
    found: dict[str, list[str]] = {}
    for d in build_dirs():
        for b in sorted((d / kind).iterdir()) if (d / kind).is_dir() else ():
            libs = sorted(p.stem.removeprefix("lib") for p in b.glob("lib*.so"))
            if libs and b.is_dir():
                found.setdefault(b.name, libs)
    return found


def resolve(name_or_path: str | os.PathLike[str], backend: str | None = None) -> tuple[Path, Path]:
    """(shared library, manifest) for a name, a .so path or a .json path. A name without a
    ``backend`` takes the best one built (backends.choose_backend)."""
    p = Path(name_or_path)
    if p.suffix == ".json":
        so = p.with_name(f"lib{p.stem}.so")
        return so, p
    if p.suffix == ".so":
        stem = p.stem.removeprefix("lib")
        return p, p.with_name(f"{stem}.json")
    if os.sep in str(name_or_path) or p.suffix:
        raise FileNotFoundError(f"{name_or_path}: expected a library name, a lib<prog>.so, a <prog>.json or a <prog>.fut")
    if backend is not None:
        check_backend(backend)
    found = {b: f for b in BACKENDS if (f := find_build_file(Path("futhark") / b / f"lib{p.name}.so")) is not None}
    if backend in found or (backend is None and found):
        chosen = backend or choose_backend(found, logger=log, name=p.name)
        return found[chosen], found[chosen].with_name(f"{p.name}.json")
    raise FileNotFoundError(_not_built(p.name, backend, found))


def _not_built(name: str, backend: str | None, found: dict[str, Path]) -> str:
    """Why ``load(name)`` found nothing, in words that fit where pybridge runs: what is built (and
    the closest name), how to load one's own program, and ``make`` only in a checkout."""
    if found:  # built, for other backends
        return f"{name!r} is not built for the {backend} backend; it is built for {', '.join(found)}"
    built = built_programs()
    names = sorted({n for ns in built.values() for n in ns})
    close = difflib.get_close_matches(name, names, n=3)
    head = f"no built Futhark library named {name!r}" + (f" for the {backend} backend" if backend else "")
    head += f" (looked in {', '.join(map(str, build_dirs())) or 'no build directory'})"
    head += f"; did you mean {' or '.join(map(repr, close))}?" if close else "."
    if names:
        head += f" Built programs ({', '.join(built)}): {', '.join(names)}."
    else:
        checkout = source_checkout()
        head += (f" Nothing is built in this checkout: run `make` in {checkout}." if checkout is not None else
                 " This installation holds no built programs (it was installed without running `make` first).")
    return head + f" For your own program, pass its source: pf.load('{name}.fut') compiles it (`pybridge build {name}.fut`)."


def _exports(ffi: Any, lib: Any, name: str) -> bool:
    try:
        getattr(lib, name)
    except (AttributeError, ffi.error):  # ffi.error: declared but not in the library (ABI mode)
        return False
    return True


class Library:
    """A loaded Futhark library with one context. Entry points are attributes: ``lib.saxpy(...)``."""

    # Its instance attributes (set in __init__; sync too). With the class's own names they make
    # OWN_NAMES: an entry point of such a name is not an attribute (lib["key"] reaches it), and
    # `pybridge stubs` leaves it out of the stub's methods.
    path: Path
    api_module: Path | None
    manifest: Manifest
    backend: str
    mode: str
    raw_ctype: str
    mode_note: str
    ffi: Any
    lib: Any
    source_path: Path | None
    source: SourceInfo | None
    context: Context
    codec: Codec
    types: dict[str, ArrayKind | OpaqueKind]
    entry_points: dict[str, EntryPoint]
    _entry_lookup: dict[str, str]
    key: str

    def __init__(
        self, so_path: Path, manifest: Manifest, mode: str = "auto", config: Config | None = None, api_module: Path | None = None
    ):
        self.path = Path(so_path).resolve()
        # A prebuilt API-mode extension (pybridge package): used instead of compiling one. Found
        # beside the library too (_pybridge_<stem>.<ext suffix>), so that a library of a package
        # loaded again by path (unpickling, Dask workers) still needs no compiler.
        if api_module is None:
            beside = self.path.with_name(f"_pybridge_{self.path.stem.removeprefix('lib')}{EXTENSION_SUFFIXES[0]}")
            api_module = beside if beside.is_file() else None
        self.api_module = Path(api_module) if api_module is not None else None
        self.manifest = manifest
        self.backend = manifest.backend
        self.mode = mode
        self.raw_ctype = RAW_POINTER_CTYPE.get(self.backend, "void *")
        where = manifest.source or "the manifest"
        try:
            cdef = cdef_for(manifest)
        except (ValueError, KeyError, TypeError) as e:
            raise ManifestError(f"{where}: cannot declare its C functions: {e}") from None
        header = self.path.with_name(f"{self.path.stem.removeprefix('lib')}.h")
        if header.exists():  # the true C types: a manifest that disagrees would crash the calls
            check_header(manifest, cdef, header)
        self.mode_note = ""
        if mode == "auto":
            try:
                self.ffi, self.lib = self._bind_api(cdef)
                self.mode = "api"
            except Exception as e:  # no header, no compiler, no setuptools, compile error
                self.mode_note = f"ABI mode (slower calls) because API mode could not be built: {_one_line(e)}"
                warnings.warn(f"{self.path.name}: {self.mode_note}", RuntimeWarning, stacklevel=3)
                self.ffi, self.lib = self._bind_abi(cdef, where)
                self.mode = "abi"
        elif mode == "abi":
            self.ffi, self.lib = self._bind_abi(cdef, where)
        elif mode == "api":
            self.ffi, self.lib = self._bind_api(cdef)
        else:
            raise ValueError(f"mode must be 'auto', 'api' or 'abi', got {mode!r}")
        if self.backend == "cuda":
            ok, why = backends.gpu_present()
            if not ok:
                raise FutharkError(f"cannot use the cuda backend library {self.path.name}: {why}")
        # The program's source, when it sits beside the library (pybridge build, make and the
        # installed package copy it): sizes the manifest leaves out (sizes.py, pybridge.testing).
        src = self.path.with_name(f"{self.path.stem.removeprefix('lib')}.fut")
        self.source_path: Path | None = src if src.exists() else None
        self.source: SourceInfo | None = None
        if self.source_path is not None:
            try:
                self.source = load_source(self.source_path)
            except (OSError, UnicodeDecodeError):
                self.source = None
        tuning = {t for e in manifest.entry_points.values() for t in e.tuning_params}
        self.context = Context(self.ffi, self.lib, self.backend, config or Config(), tuning)
        self.sync = self.context.sync  # lib.sync() is one call, not two (it follows most calls)
        self.codec = Codec(self)
        self.types = {}
        for name, info in manifest.types.items():
            self.types[name] = ArrayKind(self, info) if isinstance(info, ArrayInfo) else OpaqueKind(self, info)
        self.entry_points = {name: EntryPoint(self, e) for name, e in manifest.entry_points.items()}
        names = list(self.entry_points)
        self._entry_lookup = {k: names[i] for k, i in name_lookup(names).items()}
        # Entry points as instance attributes under their Python spelling: found by the ordinary
        # lookup, not by __getattr__ after a failed one (which costs more than the call itself).
        # Library's own names win (those entry points stay reachable as lib["close"]).
        for spelling, exact in self._entry_lookup.items():
            if spelling.isidentifier() and spelling not in OWN_NAMES:
                self.__dict__[spelling] = self.entry_points[exact]
        self.key = f"{self.path}::{self.backend}"
        self.instance = uuid.uuid4().hex  # this Library among others of the same file (pickling, copies)
        with _open_lock:
            _open_libraries[self.key] = self
            _libraries_by_instance[self.instance] = self

    def _bind_abi(self, cdef: str, where: object) -> tuple[Any, Any]:
        """ABI mode, refusing a manifest that names functions the library does not export (a
        manifest of another program or version) before any call."""
        try:
            ffi, lib = bind_abi(cdef, self.path)
        except (cffi.CDefError, cffi.FFIError) as e:
            raise ManifestError(f"{where}: its C declarations are invalid: {e}") from None
        missing = [n for n in self.manifest.c_functions() if not _exports(ffi, lib, n)]
        if missing:
            raise ManifestError(f"{where} does not match {self.path.name}: it names {missing[:5]}, which the library does not export")
        return ffi, lib

    def _bind_api(self, cdef: str) -> tuple[Any, Any]:
        shim_cdef, shim_source = shims_for(self.manifest)
        if self.api_module is not None:
            ffi, lib = bind_prebuilt(self.api_module, api_module_key(cdef, shim_cdef, shim_source))
            self._check_linked_library(ffi, lib)
            return ffi, lib
        header = self.path.with_name(f"{self.path.stem.removeprefix('lib')}.h")
        if not header.exists():
            raise FileNotFoundError(f"API mode needs the header {header} next to the library")
        # The cuda backend's header includes cuda.h and nvrtc.h.
        includes = [str(cuda_home() / "include")] if self.backend == "cuda" else []
        return bind_api(cdef, self.path, header, includes, shim_cdef, shim_source)

    def _check_linked_library(self, ffi: Any, lib: Any) -> None:
        """A prebuilt module calls the library the loader found for it: refuse it unless that is the
        file at ``self.path`` (same function address as a dlopen of that file)."""
        try:
            theirs = int(ffi.cast("uintptr_t", getattr(lib, LINKED_FUNCTION)()))
            ours = ctypes.cast(getattr(ctypes.CDLL(str(self.path)), LINK_PROBE), ctypes.c_void_p).value
        except (OSError, AttributeError, ffi.error) as e:
            raise ManifestError(f"{self.api_module}: cannot check which library it calls: {e}") from None
        if theirs != ours:
            raise ManifestError(f"{self.api_module} calls another copy of the library than {self.path}")

    def fn(self, name: str) -> Any:
        """The C function ``name``; a clear error if the library does not export it."""
        try:
            return getattr(self.lib, name)
        except (AttributeError, self.ffi.error):
            raise FutharkError(f"{self.path.name} does not export {name}, which its manifest names") from None

    # Entry points as attributes, by their Python spelling (names.python_names: `f'` -> `f_1`).
    # One that shares a name with this class's own attributes (close, sync, report, types, ...)
    # is reached with lib["close"] or lib.entry("close"); those take the exact Futhark name too.
    def entry(self, name: str) -> EntryPoint:
        """The entry point ``name``: its exact Futhark name or its Python spelling."""
        exact = self.__dict__.get("_entry_lookup", {}).get(name)
        if exact is None:
            raise KeyError(f"{self.path.name} has no entry point {name!r}; entry points: {list(self.entry_points)}")
        return self.entry_points[exact]

    def __getitem__(self, name: str) -> EntryPoint:
        return self.entry(name)

    def __getattr__(self, name: str) -> EntryPoint:
        exact = self.__dict__.get("_entry_lookup", {}).get(name)
        if exact is not None:
            return self.entry_points[exact]
        raise AttributeError(f"{type(self).__name__} has no attribute or entry point {name!r}")

    def __dir__(self) -> list[str]:
        # the entry points set as instance attributes are in super().__dir__() already
        return sorted(set(super().__dir__()) | set(python_names(list(self.entry_points))))

    def __iter__(self) -> Iterator[str]:
        return iter(self.entry_points)

    # context pass-throughs
    def sync(self) -> None:
        self.context.sync()

    def report(self) -> dict[str, Any]:
        return self.context.report()

    def clear_caches(self) -> None:
        """Give back the memory Futhark keeps for reuse: the blocks of 1 MiB and more that freed
        values left in the context's host free list (libraries built by pybridge; Futhark 0.25.32
        itself kept them until close() on c and multicore) and, on GPU backends, the device free
        list. glibc may keep what was freed in its heap: ``ctypes.CDLL(None).malloc_trim(0)``
        returns that (RELIABILITY.md, "Memory after many calls")."""
        self.context.clear_caches()

    def close(self) -> None:
        self.context.close()

    @property
    def closed(self) -> bool:
        return self.context.closed

    def __enter__(self) -> "Library":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def live_values(self) -> int:
        """Values this library's context holds for Python: handles made and not yet freed or consumed."""
        return self.context.live_values

    def tuning_params(self) -> dict[str, str]:
        """Tuning parameter name -> class, as the library reports them."""
        n = self.lib.futhark_get_tuning_param_count()
        s = self.ffi.string
        return {
            s(self.lib.futhark_get_tuning_param_name(i)).decode(): s(self.lib.futhark_get_tuning_param_class(i)).decode()
            for i in range(n)
        }

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<Futhark library {self.path.name} backend={self.backend} entry points={list(self.entry_points)} {state}>"


# Names a Library keeps for itself: its methods and properties, and its instance attributes.
OWN_NAMES = frozenset(dir(Library)) | frozenset(Library.__annotations__)


def load(
    name_or_path: str | os.PathLike[str],
    backend: str | None = None,
    mode: str = "auto",
    api_module: str | os.PathLike[str] | None = None,
    **config: Any,
) -> Library:
    """Load a Futhark library and create its context.

    ``name_or_path``: a program name (searched in the build directories), ``lib<prog>.so``,
    ``<prog>.json``, or a ``.fut`` source (compiled first, cached).
    ``backend``: one of c, multicore, cuda, opencl, hip, ispc; default: the best present, as for
    packaged modules and ``pybridge demo`` (cuda where a GPU is usable, else multicore, else c:
    :func:`pybridge.backends.choose_backend`), among those built for a name and those this
    machine can build for a source.
    ``mode``: "auto" (API mode, compiled once and cached, where a C compiler and ``<prog>.h`` are
    present; else ABI mode with a RuntimeWarning saying why), "api" or "abi".
    ``config``: see ``Config`` (debugging, logging, profiling, tuning, cache_file, num_threads,
    device, unified_memory, platform, nvrtc_options, default_*_size).
    ``api_module``: a prebuilt API-mode extension for this library (``pybridge package`` ships
    them), used with no C compiler; one built for other declarations or another copy of the library
    is refused (with mode "auto": a RuntimeWarning and ABI mode).
    """
    cfg = Config.from_kwargs(**config)
    if backend is not None:
        check_backend(backend)
    start = time.perf_counter()
    if str(name_or_path).endswith(".fut"):
        from .build import build_program

        so = build_program(name_or_path, backend=backend)
        manifest_path = so.with_name(f"{so.stem.removeprefix('lib')}.json")
    else:
        so, manifest_path = resolve(name_or_path, backend)
    if not so.exists():
        raise FileNotFoundError(f"{so} does not exist (the manifest {manifest_path.name} has no library beside it)")
    if not manifest_path.exists():
        raise FileNotFoundError(f"{manifest_path} does not exist: Futhark writes it next to the library with --library")
    manifest = load_manifest(manifest_path)
    if backend and manifest.backend != backend:
        raise ValueError(f"{so.name} was compiled for the {manifest.backend} backend, not {backend}")
    lib = Library(so, manifest, mode, cfg, Path(api_module) if api_module is not None else None)
    log.debug("loaded %s (%s backend, %s mode) in %.3f s", so, lib.backend, lib.mode, time.perf_counter() - start)
    return lib


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:200]}"


def library_for_key(key: str, instance: str | None = None) -> Library:
    """The library a pickled or copied value goes into: the very Library it came from (``instance``)
    while that is open in this process; else the most recently loaded open library of the same file
    and backend (``key``); else that file loaded again (default mode and configuration)."""
    with _open_lock:
        own = _libraries_by_instance.get(instance) if instance else None
        latest = _open_libraries.get(key)
    for lib in (own, latest):
        if lib is not None and lib.key == key and not lib.closed:
            return lib
    path, backend = key.rsplit("::", 1)
    return load(path, backend=backend)


# Pickling and copying handles: a handle pickles as (library key, type name, data, library instance)
# and unpickles into library_for_key's choice: copy.copy, copy.deepcopy and a round trip in one
# process give a value of the handle's own Library, another process (which knows only the path)
# the library of that path it has open, or loads. Registered here, the one layer that can load a
# library, so the handle module never imports this one (copyreg's table is consulted before
# __reduce_ex__). ``instance`` defaults to None: pickles made before it existed still load.
def _restore_array(key: str, type_name: str, data: Any, instance: str | None = None) -> ArrayHandle:
    return library_for_key(key, instance).types[type_name].new(data)


def _restore_opaque(key: str, type_name: str, data: bytes, instance: str | None = None) -> OpaqueHandle:
    return library_for_key(key, instance).types[type_name].restore(data)


def _reduce_array(h: ArrayHandle) -> tuple[Any, ...]:
    return (_restore_array, (h.library.key, h.type_name, h.numpy(), h.library.instance))


def _reduce_opaque(h: OpaqueHandle) -> tuple[Any, ...]:
    return (_restore_opaque, (h.library.key, h.type_name, h.store(), h.library.instance))


copyreg.pickle(ArrayHandle, _reduce_array)
copyreg.pickle(OpaqueHandle, _reduce_opaque)


def check_in_subprocess(name_or_path: str | os.PathLike[str], backend: str | None = None, timeout: float = 300, **config: Any) -> tuple[bool, str]:
    """Create the context in a child process first. The cuda backend aborts the whole process when
    its kernels fail to compile (NVRTC) or no device is found, which no Python code can catch."""
    code = (
        "import sys, pybridge.futhark as pf\n"
        f"lib = pf.load({str(name_or_path)!r}, backend={backend!r}, **{config!r})\n"
        "lib.close(); print('ok')\n"
    )
    # This pybridge in the child, never a pybridge/ of the current directory (python -c imports it first).
    proc = subprocess.run(python_command(code), capture_output=True, text=True, timeout=timeout, env=child_env())
    ok = proc.returncode == 0 and proc.stdout.strip().endswith("ok")
    return ok, (proc.stdout + proc.stderr).strip()
