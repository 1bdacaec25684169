"""Loading compiled kernels (cubin, PTX or fatbin) through PyCUDA.

``load_module("saxpy")`` looks for ``cuda/saxpy.cubin`` / ``.ptx`` / ``.fatbin`` in the build
directories (:mod:`pybridge.paths`) and takes the cubin when its architecture runs on this GPU (same
major version, minor not above the device's), else the PTX, which the driver compiles for the GPU
at hand. A path loads that file. Modules are cached per file and device.

Your own CUDA C: ``load_module("my_kernels.cu")`` and ``compile_source(text)`` (``cuda.compile``)
compile through :mod:`pybridge.cuda.compiler` (cached) and load the result; such a module knows the
kernels its source declares (:mod:`pybridge.cuda.declarations`), so ``mod.kernel("saxpy")`` is
enough, and a hand-written declaration is checked against the source.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import paths
from .compiler import CompiledSource, build_source
from .context import compute_capability, ensure_context, pycuda_driver
from .declarations import SourceDeclarations
from .errors import CudaError, from_pycuda_error
from .kernel import Kernel
from .launch_config import LaunchConfig
from .signature import KernelSignature, parse_signature

__all__ = ["Module", "choose_image", "compile_source", "cubin_arch", "find_images", "load_compiled", "load_module"]

_SUFFIXES = (".cubin", ".ptx", ".fatbin")
_SOURCE_SUFFIXES = (".cu",)  # compiled first (pybridge.cuda.compiler)


def cubin_arch(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """The SM version (major, minor) a cubin was built for, from its ELF header; None if unknown.

    CUDA ELF files (OS ABI 0x33 or 0x41) keep the SM number in e_flags: bits 0-7 in the older ABI,
    bits 8-15 from ABI version 8 (CUDA 12.8+), e.g. 90 for sm_90.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return None
    if len(head) < 52 or head[:4] != b"\x7fELF":
        return None
    is64 = head[4] == 2
    osabi, abiversion = head[7], head[8]
    flags_at = 48 if is64 else 36
    (e_flags,) = struct.unpack_from("<I", head, flags_at)
    if osabi not in (0x33, 0x41):
        return None
    sm = (e_flags >> 8) & 0xFF if abiversion >= 8 else e_flags & 0xFF
    if sm < 10:
        return None
    major, minor = divmod(sm, 10)
    return int(major), int(minor)


def cubin_runs_on(cubin: tuple[int, int], device: tuple[int, int]) -> bool:
    """SASS is binary-compatible within a major version, from its minor upwards."""
    return cubin[0] == device[0] and cubin[1] <= device[1]


@dataclass(frozen=True)
class Images:
    cubin: Path | None
    ptx: Path | None
    fatbin: Path | None


def find_images(name: str) -> Images:
    """Built images of module ``name`` in the build directories."""
    def find(suffix: str) -> Path | None:
        return paths.find_build_file(f"cuda/{name}{suffix}")

    return Images(find(".cubin"), find(".ptx"), find(".fatbin"))


def choose_image(images: Images, device_cc: tuple[int, int] | None, prefer: str = "auto") -> Path:
    """Which file to load: see the module docstring. ``prefer`` is "auto", "cubin", "ptx" or "fatbin"."""
    if prefer not in ("auto", "cubin", "ptx", "fatbin"):
        raise ValueError(f"prefer must be 'auto', 'cubin', 'ptx' or 'fatbin', got {prefer!r}")
    if prefer != "auto":
        chosen: Path | None = getattr(images, prefer)
        if chosen is None:
            raise FileNotFoundError(f"no {prefer} built for this module; run `make cuda`")
        return chosen
    if images.cubin is not None and device_cc is not None:
        arch = cubin_arch(images.cubin)
        if arch is not None and cubin_runs_on(arch, device_cc):
            return images.cubin
    if images.fatbin is not None:
        return images.fatbin
    if images.ptx is not None:
        return images.ptx
    if images.cubin is not None:
        return images.cubin  # architecture unknown: let the driver decide
    raise FileNotFoundError(
        "no cubin, PTX or fatbin found; build the kernels with `make cuda` (needs nvcc) "
        f"or set $PYBRIDGE_BUILD (searched: {', '.join(str(d) for d in paths.build_dirs()) or 'nothing'})"
    )


class Module:
    """A loaded CUDA module; ``kernel(declaration)`` gives a checked :class:`Kernel`.

    ``declarations`` holds what the module's source declares when pybridge compiled it (else None).
    """

    def __init__(self, handle: Any, path: Path, name: str, declarations: SourceDeclarations | None = None) -> None:
        self.handle = handle  # pycuda.driver.Module
        self.path = path
        self.name = name
        self.declarations = declarations
        self._functions: dict[str, Any] = {}
        self._kernels: dict[KernelSignature, Kernel] = {}
        self._lock = threading.Lock()
        self._raw_module: int | None = None  # CUmodule loaded by us for direct launches (see raw_function)

    def raw_function(self, name: str) -> int:
        """The CUfunction handle of kernel ``name`` in a copy of this module loaded through the
        driver (PyCUDA does not expose its handles). Kernels launch through it directly
        (:mod:`pybridge.cuda.kernel`); the image has no module-scope variables shared with
        PyCUDA's copy (kernels_cu uses none: globals would exist once per loaded copy)."""
        import ctypes

        from . import _driver

        ensure_context()
        with self._lock:
            if self._raw_module is None:
                mod = ctypes.c_void_p()
                _driver.check(_driver._fn("cuModuleLoad")(ctypes.byref(mod), str(self.path).encode()),
                              f"cuModuleLoad({self.path})")
                self._raw_module = int(mod.value or 0)
            fn = ctypes.c_void_p()
            _driver.check(
                _driver._fn("cuModuleGetFunction")(ctypes.byref(fn), ctypes.c_void_p(self._raw_module), name.encode()),
                f"cuModuleGetFunction({name})",
            )
            return int(fn.value or 0)

    @property
    def kind(self) -> str:
        return self.path.suffix.lstrip(".")

    def __repr__(self) -> str:
        return f"<pybridge.cuda.Module {self.name} from {self.path}>"

    def function(self, name: str) -> Any:
        """The raw PyCUDA function ``name``; KeyError if the module has none."""
        with self._lock:
            fn = self._functions.get(name)
            if fn is None:
                try:
                    fn = self.handle.get_function(name)
                except Exception as e:
                    if type(e).__module__.startswith("pycuda"):
                        raise KeyError(
                            f"module {self.name} ({self.path}) has no kernel named {name!r}; kernels must "
                            f'be extern "C" to keep their plain name ({e})'
                        ) from None
                    raise
                self._functions[name] = fn
            return fn

    def kernel(self, declaration: str | KernelSignature, *, default_config: LaunchConfig | None = None) -> Kernel:
        """A :class:`Kernel` for the declared function (the declaration's name picks the function).

        For a module compiled from source, a bare name (``"saxpy"``) takes the source's declaration,
        and a declaration is checked against it (:class:`~pybridge.cuda.declarations.DeclarationMismatchError`).
        """
        if self.declarations is not None:
            sig = self.declarations.resolve(declaration)
        elif isinstance(declaration, str) and declaration.strip().isidentifier():
            raise ValueError(
                f"module {self.name} ({self.path}) was not compiled from source by pybridge, so it has no "
                f"declarations: pass the whole declaration, e.g. mod.kernel(\"{declaration.strip()}(float* x[n], int64 n)\"), "
                "or load the .cu file with load_module"
            )
        else:
            sig = parse_signature(declaration) if isinstance(declaration, str) else declaration
        with self._lock:
            k = self._kernels.get(sig)
        if k is None:
            k = Kernel(self.function(sig.name), sig, module=self, default_config=default_config)
            with self._lock:
                k = self._kernels.setdefault(sig, k)
        return k


_cache: dict[tuple[str, int], Module] = {}
_cache_lock = threading.Lock()


def _looks_like_path(s: str) -> bool:
    return os.sep in s or "/" in s or s.endswith(_SUFFIXES) or Path(s).is_file()


def _load_file(path: Path, name: str, declarations: SourceDeclarations | None = None) -> Module:
    drv = pycuda_driver()
    try:
        handle = drv.module_from_file(str(path))
    except Exception as e:
        if type(e).__module__.startswith("pycuda"):
            raise from_pycuda_error(e, kernel=None, operation=f"loading {path}") from e
        raise
    return Module(handle, path, name, declarations)


def load_compiled(built: CompiledSource, *, prefer: str = "auto", device: int = 0) -> Module:
    """Load what :func:`~pybridge.cuda.compiler.build_source` made (cubin, else its PTX)."""
    ensure_context(device)
    images = Images(built.cubin, built.ptx, None)
    return _load_chosen(images, compute_capability(device), prefer, built.name, device, built.declarations)


def compile_source(
    source: str | os.PathLike[str],
    *,
    options: Sequence[str] = (),
    include_dirs: Sequence[str | os.PathLike[str]] = (),
    name: str | None = None,
    prefer: str = "auto",
    device: int = 0,
) -> Module:
    """Compile CUDA C text (or a .cu path: a ``Path``, or a one-line str ending in .cu naming an
    existing file) for this GPU and load it: ``pybridge.cuda.compile``.

    Flags, caching and errors: :mod:`pybridge.cuda.compiler` (nvcc's message in a
    :class:`~pybridge.cuda.compiler.CompileError`).
    """
    ensure_context(device)
    built = build_source(source, options=options, include_dirs=include_dirs, name=name,
                         arch=compute_capability(device))
    return load_compiled(built, prefer=prefer, device=device)


def load_module(
    name_or_path: str | os.PathLike[str],
    *,
    prefer: str = "auto",
    device: int = 0,
    options: Sequence[str] = (),
    include_dirs: Sequence[str | os.PathLike[str]] = (),
) -> Module:
    """Load a module by name (``"saxpy"`` -> build/cuda/saxpy.*), from an image file, or from a
    ``.cu`` source, compiled first (``options`` / ``include_dirs``: see :func:`compile_source`)."""
    spec = os.fspath(name_or_path)
    if spec.endswith(_SOURCE_SUFFIXES):
        return compile_source(Path(spec), options=options, include_dirs=include_dirs, prefer=prefer, device=device)
    if options or include_dirs:
        raise ValueError(f"options / include_dirs apply to .cu sources, not to {spec!r}")
    ensure_context(device)
    if isinstance(name_or_path, Path) or _looks_like_path(spec):
        path = Path(spec).resolve()
        if not path.is_file():
            raise FileNotFoundError(f"no such module file: {path}")
        key = (str(path), device)
        with _cache_lock:
            if key in _cache:
                return _cache[key]
        mod = _load_file(path, path.stem)
        with _cache_lock:
            return _cache.setdefault(key, mod)

    return _load_chosen(find_images(spec), compute_capability(device), prefer, spec, device)


def _load_chosen(
    images: Images, cc: tuple[int, int], prefer: str, name: str, device: int,
    declarations: SourceDeclarations | None = None,
) -> Module:
    path = choose_image(images, cc, prefer)
    key = (str(path), device)
    with _cache_lock:
        if key in _cache:
            return _cache[key]
    try:
        mod = _load_file(path, name, declarations)
    except CudaError as e:
        # A cubin the driver refuses (wrong architecture, newer toolkit): fall back to the PTX.
        if path.suffix == ".cubin" and images.ptx is not None and e.code in (200, 209, 222, None):
            mod = _load_file(images.ptx, name, declarations)
            path = images.ptx
            key = (str(path), device)
        else:
            raise
    with _cache_lock:
        return _cache.setdefault(key, mod)
