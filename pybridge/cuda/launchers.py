"""cffi bindings of the host launchers in ``build/cuda/lib<mod>.so``.

Each ``kernels_cu/<mod>.cu`` also builds into a shared library of ``extern "C" int launch_*(...,
void* stream)`` functions (cudart, launch configuration chosen in C, ``cudaError_t`` returned as an
int). Their declarations come from the ``.cu`` file itself: ``make`` writes them beside the library
as ``lib<mod>.launchers.json`` (:mod:`~pybridge.cuda.launcher_sidecar`), in the same syntax as
kernels (without the trailing stream), so one declaration gives both the cffi ``cdef`` and the
argument checks; declarations passed by hand take precedence::

    lib = load_launchers("saxpy")
    lib.launch_saxpy(2.0, x, y, out, n, stream=s)

Arguments take the same device handles as kernels (our DeviceArray, CuPy, PyTorch, numba, any
CAI producer). The stream may be ours or foreign (anything :func:`~pybridge.cuda.streams.as_stream`
accepts): cudart launches on the raw handle in the primary context, which it shares with us.
A non-zero return raises :class:`~pybridge.cuda.errors.CudaError` (or its sticky / launch
subclasses) with cudart's error string.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .. import paths
from ..errors import PybridgeError
from .context import ensure_context
from .errors import error_for_code
from .kernel import order_after_producers, order_before, plan_for, reorder_replay
from .launcher_sidecar import FORMAT, sidecar_path
from .signature import KernelSignature, SignatureError, parse_signature
from .streams import DEFAULT_STREAM, as_stream

__all__ = ["Launcher", "Launchers", "SidecarError", "cdef_for", "load_launchers", "read_sidecar"]

CFFI_HINT = "the host launchers need cffi: pip install cffi"

# Exported by every launcher library (kernels_cu/common.cuh).
_COMMON_CDEF = """
const char* pybridge_error_string(int code);
const char* pybridge_error_name(int code);
"""


def cdef_for(declarations: Sequence[KernelSignature], extra: str = "") -> str:
    """The cffi cdef of launchers declared in our syntax: ``int name(<params>, void* stream);``."""
    lines = [sig.c_declaration(return_type="int", extra=("void* stream",)) for sig in declarations]
    return "\n".join(lines) + "\n" + _COMMON_CDEF + extra


def _int_params(sig: KernelSignature) -> str:
    """Parameters with every pointer (and the stream) as ``uintptr_t``: cffi converts a Python int
    straight into one, where a pointer type needs an ``ffi.cast`` per argument per call."""
    parts = [f"{'uintptr_t' if p.is_pointer else p.c_type} {p.name}" for p in sig.params] + ["uintptr_t stream"]
    return ", ".join(parts)


def fast_source_for(declarations: Sequence[KernelSignature], extra: str = "") -> str:
    """C of the API-mode shim (the launchers' own prototypes, called by cffi for ``raw()``, and
    ``pbi_<name>`` over integer pointers): each ``pbi_<name>`` casts its integers back to the declared pointer
    types and calls the launcher (declared here with its real prototype)."""
    out = ["#include <stdint.h>", "#include <stdbool.h>", _COMMON_CDEF, extra]
    for sig in declarations:
        out.append(sig.c_declaration(return_type="int", extra=("void* stream",)))
        args = ", ".join(f"({p.c_type}){p.name}" if p.is_pointer else p.name for p in sig.params)
        out.append(f"int pbi_{sig.name}({_int_params(sig)}) "
                   f"{{ return {sig.name}({args}{', ' if args else ''}(void*)stream); }}")
    return "\n".join(out) + "\n"


class Launcher:
    """One host launcher: checks its arguments, then calls the C function.

    The C call takes pointers and the stream as plain integers (``pbi_<name>``, compiled once in
    cffi API mode when a C compiler is present, else the same prototype through ABI mode: on the
    64-bit ABIs CUDA supports a pointer and a ``uintptr_t`` travel identically), so no per-call
    ``ffi.cast`` is left; the checks are the kernel plan's (:func:`~pybridge.cuda.kernel.plan_for`).
    """

    def __init__(self, owner: Launchers, signature: KernelSignature, cfunc: Any) -> None:
        self._owner = owner
        self.signature = signature
        self._cfunc = cfunc
        self.__name__ = signature.name
        self.__doc__ = f"{signature}  (+ stream=...)"
        self._plan = plan_for(signature)

    def __repr__(self) -> str:
        return f"<pybridge.cuda launcher {self.signature}>"

    def _raise(self, rc: int) -> None:
        raise error_for_code(
            rc, kernel=self.signature.name, operation="host launcher", cuda_message=self._owner.error_string(rc),
        )

    def __call__(self, *args: Any, stream: Any = None) -> None:
        ensure_context()
        plan = self._plan
        fast = plan.fast  # the generated check (kernel.py), else the general one
        got = fast(args) if fast is not None else None
        values, producers, ours, keep = got if got is not None else plan.bind(args)
        s = DEFAULT_STREAM if stream is None else as_stream(stream)
        if producers:
            order_after_producers(s._handle or 1, producers, self.signature.name)
        rc = self._cfunc(*values, s._handle)
        if rc:
            self._raise(rc)
        for arr in ours:
            arr._pending = s
        del keep

    def prepare(self, *args: Any, stream: Any = None) -> Callable[[], None]:
        """Check ``args`` once; the returned callable replays the call with no per-call check
        (arrays kept alive, replays queued on the one ``stream``; see
        :class:`~pybridge.cuda.kernel.PreparedLaunch`). Its ``raw`` attribute is the bare C call."""
        ensure_context()
        s = DEFAULT_STREAM if stream is None else as_stream(stream)
        bound = self._plan.bind(args, full=True)
        order_before(s.cai_stream, bound.producer_streams, self.signature.name)
        for arr in bound.device_arrays:
            arr._pending = s
        raw = functools.partial(self._cfunc, *bound.values, s._handle)
        keep = (args, bound.keepalive)
        fail = self._raise
        ours, name = bound.device_arrays, self.signature.name

        def replay() -> None:
            for arr in ours:
                if arr._pending is not s:  # used on another stream since (see PreparedLaunch)
                    reorder_replay(ours, s, name)
                    break
            rc = raw()
            if rc:
                fail(rc)

        replay.raw = raw  # type: ignore[attr-defined]
        replay.keepalive = keep  # type: ignore[attr-defined]
        return replay


class Launchers:
    """The launchers of one library, as attributes (``lib.launch_saxpy``) and by name."""

    def __init__(self, path: Path, declarations: Sequence[KernelSignature], extra_cdef: str = "") -> None:
        try:
            import cffi
        except ImportError as e:
            raise ImportError(f"{CFFI_HINT} [{e}]") from e
        self.path = path
        self.mode = "api"
        int_decls = "\n".join(f"int pbi_{sig.name}({_int_params(sig)});" for sig in declarations)
        try:
            from ._cshim import compile_shim

            libdir = str(path.parent)
            self.ffi, self.lib = compile_shim(
                f"launchers_{path.stem}",
                cdef_for(declarations, extra_cdef) + int_decls,
                fast_source_for(declarations, extra_cdef) + f"/* {path} */\n",
                extra_link_args=[str(path), f"-Wl,-rpath,{libdir}"],
            )
            fast_lib, prefix = self.lib, "pbi_"
        except ImportError as e:  # no C compiler here: the same integer prototypes through ABI mode
            self.mode = f"abi ({e})"
            self.ffi = cffi.FFI()
            self.ffi.cdef(cdef_for(declarations, extra_cdef))
            self.lib = self.ffi.dlopen(str(path))
            int_ffi = cffi.FFI()
            int_ffi.cdef(int_decls.replace("int pbi_", "int "))
            fast_lib, prefix = int_ffi.dlopen(str(path)), ""
            self._int_ffi = int_ffi  # keeps the library of fast_lib's functions loaded
        self._launchers: dict[str, Launcher] = {}
        for sig in declarations:
            self._launchers[sig.name] = Launcher(self, sig, getattr(fast_lib, prefix + sig.name))

    def error_string(self, code: int) -> str:
        try:
            return str(self.ffi.string(self.lib.pybridge_error_string(code)).decode(errors="replace"))
        except Exception:  # noqa: BLE001 - an explanation is best effort
            return "unknown CUDA error"

    def __getattr__(self, name: str) -> Launcher:
        launchers = self.__dict__.get("_launchers", {})
        if name in launchers:
            found: Launcher = launchers[name]
            return found
        raise AttributeError(f"{self.path.name} has no launcher {name!r} (known: {', '.join(launchers)})")

    def __getitem__(self, name: str) -> Launcher:
        return self._launchers[name]

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._launchers))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._launchers)

    def raw(self, name: str) -> Callable[..., Any]:
        """A C function of the library without checks (e.g. ``sum_num_partials``)."""
        fn: Callable[..., Any] = getattr(self.lib, name)
        return fn


_cache: dict[str, Launchers] = {}
_lock = threading.Lock()


class SidecarError(PybridgeError, ValueError):
    """A ``lib<mod>.launchers.json`` that cannot be used; the message names the file."""


def read_sidecar(path: Path) -> tuple[list[KernelSignature], str]:
    """The launcher declarations and extra cdef that ``make`` wrote to ``path``."""
    import json

    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:  # corrupt: nested too deep
        raise SidecarError(f"{path}: not a launcher declaration file ({e}); rebuild it with `make cuda`") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        got = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise SidecarError(f"{path}: expected format {FORMAT!r}, got {got!r}; rebuild it with `make cuda`")
    lists = {}
    for key in ("launchers", "cdef"):
        value = data.get(key)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise SidecarError(f"{path}: {key!r} must be a list of strings, got {value!r:.80}")
        lists[key] = value
    sigs = []
    for text in lists["launchers"]:
        try:
            sigs.append(parse_signature(text))
        except SignatureError as e:
            raise SidecarError(f"{path}: launcher declaration {text!r}: {e.reason}") from None
    return sigs, "\n".join(lists["cdef"])


def load_launchers(
    name_or_path: str | os.PathLike[str],
    declarations: Sequence[str | KernelSignature] | None = None,
    *,
    extra_cdef: str | None = None,
) -> Launchers:
    """Bind ``lib<name>.so`` from the build directories (or a path).

    ``declarations`` and ``extra_cdef`` (prototypes of the library's other C functions) default to
    the ``lib<name>.launchers.json`` that ``make`` wrote beside it; given ones are used instead.
    """
    spec = os.fspath(name_or_path)
    if isinstance(name_or_path, Path) or "/" in spec or spec.endswith(".so"):
        path = Path(spec).resolve()
        mod_name = path.stem[3:] if path.stem.startswith("lib") else path.stem
    else:
        found = paths.find_build_file(f"cuda/lib{spec}.so")
        if found is None:
            raise FileNotFoundError(
                f"build/cuda/lib{spec}.so not found; build it with `make cuda` (needs nvcc) or set $PYBRIDGE_BUILD"
            )
        path, mod_name = found.resolve(), spec
    if not path.is_file():
        raise FileNotFoundError(f"no such launcher library: {path}")
    if declarations is None or extra_cdef is None:
        sidecar = sidecar_path(path)
        if declarations is None and not sidecar.is_file():
            raise FileNotFoundError(
                f"{sidecar}: no launcher declarations beside {path.name} (make writes them from "
                f"kernels_cu/{mod_name}.cu: `make cuda`); or pass declarations=[...]"
            )
        if sidecar.is_file():
            from_file, file_cdef = read_sidecar(sidecar)
            declarations = from_file if declarations is None else declarations
            extra_cdef = file_cdef if extra_cdef is None else extra_cdef
        extra_cdef = extra_cdef or ""
    sigs = [parse_signature(d) if isinstance(d, str) else d for d in declarations]
    key = f"{path}|{'|'.join(str(s) for s in sigs)}|{extra_cdef}"
    with _lock:
        if key not in _cache:
            _cache[key] = Launchers(path, sigs, extra_cdef)
        return _cache[key]
