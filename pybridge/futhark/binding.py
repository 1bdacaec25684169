"""cffi out-of-line bindings for a Futhark library, built from the manifest's C declarations.

Two modes, both cffi "out-of-line" (the cdef is parsed once, when the module is generated, not at
every load):
- ``abi``: a pure-Python cffi module (``set_source(name, None)``) that ``dlopen``s the library. Needs
  no C compiler at load time, works for any library the manifest describes. The fallback.
- ``api``: a compiled CPython extension calling the library's functions directly (needs a C compiler
  and the header ``<prog>.h`` next to the library), with pybridge's call shims (shims.py). Lower
  per-call overhead (`pybridge bench overhead`); the default where it can be built.
Generated modules are cached by a hash of (mode, declarations, library path, cffi version), and
written under a temporary name then renamed into place, so processes generating the same module at
once never import a half-written one.

Prebuilt API mode (``pybridge package``): ``build_api_module`` compiles the extension ahead of time
next to a library it links by file name (``$ORIGIN`` rpath, so the pair can move together), with its
key — a hash of the declarations and shims — compiled in; ``bind_prebuilt`` imports it with no C
compiler and refuses one whose key is not the expected one (another program or version).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import importlib.util
import logging
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import cffi

from ..errors import PybridgeError
from ..ownership import temporary_folder
from ..paths import cache_dir

_lock = threading.Lock()
log = logging.getLogger(__name__)


def _import_from(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import generated cffi module {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]")
# The header's name as the generated C includes it: a copy under this name, never the program's own
# file name (which may hold '"', '\\' or a newline, none of which an #include can spell).
_HEADER_COPY = "pybridge_futhark_library.h"


def _touch(path: Path) -> None:
    try:
        os.utime(path)  # used now: pybridge.cache removes the least recently used first
    except OSError:
        pass


def _import_fresh(path: Path, name: str, make: Any) -> ModuleType:
    """Import the cached module at ``path`` (``make()`` first when it is missing): once more, made
    anew, when it disappears between finding and importing it (``pybridge cache clear`` or the
    cache's size bound may remove a module at any time; a process that imported it keeps it)."""
    if not path.exists():
        path = make()
    else:
        log.debug("%s: cached bindings %s", name, path)
        _touch(path)
    try:
        return _import_from(path, name)
    except (OSError, ImportError):
        if path.exists():
            raise
        sys.modules.pop(name, None)
        return _import_from(make(), name)


def _generate_abi(name: str, cdef: str, library: Path, py: Path, out: Path) -> Path:
    log.info("%s: generating its ABI-mode bindings (cffi)", library.name)
    builder = cffi.FFI()
    builder.cdef(cdef)
    builder.set_source(name, None)
    with temporary_folder(out, name) as tmp:
        with contextlib.redirect_stdout(io.StringIO()):  # cffi prints 'generating ...'
            builder.emit_python_code(str(tmp / py.name))
        os.replace(tmp / py.name, py)
    return py


def _module_name(mode: str, cdef: str, library: Path) -> str:
    """A module name that is a C identifier (cffi names ``PyInit_<name>`` after it and writes it into
    Python source) whatever the program's file name holds (Futhark accepts '-', spaces, quotes,
    newlines, non-ASCII): other characters become '_', and the hash of the full path keeps it unique."""
    digest = hashlib.sha256(f"{mode}\0{cdef}\0{library}\0{cffi.__version__}".encode("utf-8", "surrogateescape")).hexdigest()[:16]
    stem = _NOT_IDENTIFIER.sub("_", library.stem.removeprefix("lib"))[:40]
    return f"_pybridge_{mode}_{stem}_{digest}"


def bind_abi(cdef: str, library: Path) -> tuple[Any, Any]:
    """(ffi, lib) through an out-of-line ABI-mode module, generated once and cached."""
    name = _module_name("abi", cdef, library)
    out = cache_dir("ffi")
    with _lock:
        module = sys.modules.get(name)
        if module is None:
            py = out / f"{name}.py"
            module = _import_fresh(py, name, lambda: _generate_abi(name, cdef, library, py, out))
    ffi = module.ffi
    try:
        lib = ffi.dlopen(str(library))
    except OSError as e:
        raise OSError(f"cannot load Futhark library {library}: {e}") from None
    return ffi, lib


def bind_api(
    cdef: str, library: Path, header: Path, include_dirs: Sequence[str] = (), extra_cdef: str = "", extra_source: str = ""
) -> tuple[Any, Any]:
    """(ffi, lib) through an out-of-line API-mode extension compiled against ``header``
    (``include_dirs``: where the headers it includes are, e.g. cuda.h and nvrtc.h); ``extra_cdef`` /
    ``extra_source`` add C functions of pybridge's own (the call shims)."""
    name = _module_name("api", cdef + extra_cdef + extra_source, library)
    out = cache_dir("ffi")
    with _lock:
        module = sys.modules.get(name)
        if module is None:
            def find() -> Path | None:
                found = sorted(out.glob(f"{name}.*.so")) + sorted(out.glob(f"{name}.so"))
                return found[0] if found else None

            def make() -> Path:
                log.info("%s: compiling its API-mode bindings (cffi, C compiler)", library.name)
                start = time.perf_counter()
                built = _compile_api(name, cdef + extra_cdef, library, header, include_dirs, extra_source, out)
                log.info("%s: API-mode bindings compiled in %.1f s: %s", library.name, time.perf_counter() - start, built)
                return built

            module = _import_fresh(find() or out / f"{name}.so", name, make)
    return module.ffi, module.lib


def _compile_api(
    name: str, cdef: str, library: Path, header: Path, include_dirs: Sequence[str], extra_source: str, out: Path
) -> Path:
    builder = cffi.FFI()
    # The header declares CUdeviceptr (through cuda.h): let the C compiler size it.
    builder.cdef(cdef.replace("typedef unsigned long long CUdeviceptr;", "typedef int... CUdeviceptr;"))
    # Build in a private folder of pybridge's and rename into place: another process may be loading
    # the cache. cffi compiles there by relative names (GCC fails on a carriage return in __FILE__):
    # the header copy beside the C file is found by its quoted #include, no -I of the cache's path.
    with temporary_folder(out, name) as tmp:
        shutil.copyfile(header, tmp / _HEADER_COPY)
        builder.set_source(
            name,
            f'#include "{_HEADER_COPY}"\n{extra_source}',
            include_dirs=[*include_dirs],
            # By full path: linked as -lprobe, two libprobe.so of different directories would resolve
            # to whichever the process loaded first (the loader matches the needed name).
            extra_link_args=[str(library.resolve())],
        )
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            built = Path(builder.compile(tmpdir=str(tmp), verbose=False))
        target = out / built.name
        os.replace(built, target)
    return target


KEY_FUNCTION = "pybridge_module_key"
# The address of this library function as the module's linked library has it (checked against the
# library a caller means: the loader might have found another file of the same name).
LINKED_FUNCTION = "pybridge_linked_function"
LINK_PROBE = "futhark_context_config_new"


def api_module_key(cdef: str, extra_cdef: str = "", extra_source: str = "") -> str:
    """What a prebuilt API-mode module must have been built from: a hash of its declarations and
    shims (not of any path: the module moves with its library)."""
    return hashlib.sha256(f"api\0{cdef}\0{extra_cdef}\0{extra_source}".encode()).hexdigest()[:32]


class PrebuiltModuleError(PybridgeError, ImportError):
    """A prebuilt API-mode module is missing, cannot be imported, or was built for other declarations."""


def build_api_module(
    name: str,
    cdef: str,
    library: Path,
    header: Path,
    out_dir: Path,
    include_dirs: Sequence[str] = (),
    extra_cdef: str = "",
    extra_source: str = "",
) -> Path:
    """Compile the API-mode extension ``name`` into ``out_dir``, which must already hold ``library``:
    the extension needs it by file name, found through an ``$ORIGIN`` rpath (no absolute path), and
    returns its key from ``pybridge_module_key()`` (see ``bind_prebuilt``). The library's file name
    must be unique among the libraries a process loads this way (the loader matches needed names)."""
    if library.parent.resolve() != Path(out_dir).resolve():
        raise ValueError(f"library: {library} must be in out_dir {out_dir}")
    key = api_module_key(cdef, extra_cdef, extra_source)
    builder = cffi.FFI()
    builder.cdef(cdef.replace("typedef unsigned long long CUdeviceptr;", "typedef int... CUdeviceptr;"))
    builder.cdef(extra_cdef + f"const char *{KEY_FUNCTION}(void);\nvoid *{LINKED_FUNCTION}(void);\n")
    source = (
        f'#include "{header.name}"\n{extra_source}\n'
        f'const char *{KEY_FUNCTION}(void) {{ return "{key}"; }}\n'
        f"void *{LINKED_FUNCTION}(void) {{ return (void *){LINK_PROBE}; }}\n"
    )
    builder.set_source(
        name,
        source,
        include_dirs=[str(header.parent), *include_dirs],
        library_dirs=[str(out_dir)],
        libraries=[f":{library.name}"],
        extra_link_args=["-Wl,-rpath,$ORIGIN", "-Wl,--enable-new-dtags"],
    )
    with tempfile.TemporaryDirectory() as tmp:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            built = Path(builder.compile(tmpdir=tmp, verbose=False))
        target = Path(out_dir) / built.name
        shutil.copyfile(built, target)
    return target


def bind_prebuilt(path: str | os.PathLike[str], key: str) -> tuple[Any, Any]:
    """(ffi, lib) of a prebuilt API-mode module (``build_api_module``), refused unless it reports
    ``key``. Needs no C compiler. Raises PrebuiltModuleError saying why it cannot be used."""
    p = Path(path)
    if not p.is_file():
        raise PrebuiltModuleError(f"prebuilt API module {p} does not exist")
    name = p.name.split(".", 1)[0]
    with _lock:
        module = sys.modules.get(name)
        if module is None or Path(getattr(module, "__file__", "") or "").resolve() != p.resolve():
            if module is not None:
                raise PrebuiltModuleError(f"a module named {name} is already loaded from {module.__file__}, not {p}")
            try:
                module = _import_from(p, name)
            except Exception as e:  # wrong interpreter ABI, missing library, not a cffi module
                sys.modules.pop(name, None)
                raise PrebuiltModuleError(f"cannot import prebuilt API module {p.name}: {e}") from None
    ffi: Any = getattr(module, "ffi", None)
    lib: Any = getattr(module, "lib", None)
    try:
        got = ffi.string(getattr(lib, KEY_FUNCTION)()).decode()
    except Exception:
        raise PrebuiltModuleError(f"{p.name} is not a pybridge prebuilt API module (no {KEY_FUNCTION})") from None
    if got != key:
        raise PrebuiltModuleError(f"{p.name} was built for other declarations (key {got}, expected {key}): it belongs to another program or version")
    return ffi, lib
