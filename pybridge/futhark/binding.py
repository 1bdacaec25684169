"""cffi out-of-line bindings for a Futhark library, built from the manifest's C declarations.

Two modes, both cffi "out-of-line" (the cdef is parsed once, when the module is generated, not at
every load):
- ``abi``: a pure-Python cffi module (``set_source(name, None)``) that ``dlopen``s the library. Needs
  no C compiler at load time, works for any library the manifest describes. The default.
- ``api``: a compiled CPython extension calling the library's functions directly (needs a C compiler
  and the header ``<prog>.h`` next to the library). Lower per-call overhead; see
  `pybridge bench overhead` for the measured difference.
Generated modules are cached by a hash of (mode, declarations, library path, cffi version), and
written under a temporary name then renamed into place, so processes generating the same module at
once never import a half-written one.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import importlib.util
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import cffi

from ..paths import cache_dir

_lock = threading.Lock()


def _import_from(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import generated cffi module {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _module_name(mode: str, cdef: str, library: Path) -> str:
    digest = hashlib.sha256(f"{mode}\0{cdef}\0{library}\0{cffi.__version__}".encode()).hexdigest()[:16]
    return f"_pybridge_{mode}_{library.stem.removeprefix('lib')}_{digest}"


def bind_abi(cdef: str, library: Path) -> tuple[Any, Any]:
    """(ffi, lib) through an out-of-line ABI-mode module, generated once and cached."""
    name = _module_name("abi", cdef, library)
    out = cache_dir() / "ffi"
    with _lock:
        module = sys.modules.get(name)
        if module is None:
            py = out / f"{name}.py"
            if not py.exists():
                builder = cffi.FFI()
                builder.cdef(cdef)
                builder.set_source(name, None)
                out.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=out, prefix=f".{name}", suffix=".py.tmp")
                os.close(fd)
                try:
                    with contextlib.redirect_stdout(io.StringIO()):  # cffi prints 'generating ...'
                        builder.emit_python_code(tmp)
                    os.replace(tmp, py)
                finally:
                    if os.path.exists(tmp):
                        os.remove(tmp)
            module = _import_from(py, name)
    ffi = module.ffi
    try:
        lib = ffi.dlopen(str(library))
    except OSError as e:
        raise OSError(f"cannot load Futhark library {library}: {e}") from None
    return ffi, lib


def bind_api(cdef: str, library: Path, header: Path, include_dirs: Sequence[str] = ()) -> tuple[Any, Any]:
    """(ffi, lib) through an out-of-line API-mode extension compiled against ``header``
    (``include_dirs``: where the headers it includes are, e.g. cuda.h and nvrtc.h)."""
    name = _module_name("api", cdef, library)
    out = cache_dir() / "ffi"
    with _lock:
        module = sys.modules.get(name)
        if module is None:
            found = sorted(out.glob(f"{name}.*.so")) + sorted(out.glob(f"{name}.so"))
            if not found:
                builder = cffi.FFI()
                # The header declares CUdeviceptr (through cuda.h): let the C compiler size it.
                builder.cdef(cdef.replace("typedef unsigned long long CUdeviceptr;", "typedef int... CUdeviceptr;"))
                libdir = str(library.parent)
                builder.set_source(
                    name,
                    f'#include "{header.name}"',
                    include_dirs=[str(header.parent), *include_dirs],
                    library_dirs=[libdir],
                    libraries=[library.stem.removeprefix("lib")],
                    extra_link_args=[f"-Wl,-rpath,{libdir}"],
                )
                out.mkdir(parents=True, exist_ok=True)
                tmp = tempfile.mkdtemp(dir=out, prefix=f".{name}.tmp")
                try:
                    built = Path(builder.compile(tmpdir=tmp, verbose=False))
                    os.replace(built, out / built.name)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
                found = [out / built.name]
            module = _import_from(found[0], name)
    return module.ffi, module.lib
