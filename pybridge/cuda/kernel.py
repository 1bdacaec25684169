"""Kernels: checked arguments, prepared launches.

A :class:`Kernel` couples a PyCUDA function with its declaration
(:class:`~pybridge.cuda.signature.KernelSignature`). Every launch first runs :func:`bind_args`,
which checks each argument against the declaration without touching the GPU:

* scalars: type (no float for an integer, no bool for a number) and range of the C type;
* pointers: device memory only (a NumPy array is a TypeError that says to use ``to_device``),
  element dtype, C-contiguity, writability for non-const pointers, and the element count against
  the size expression evaluated with the bound scalars (``x[n]``, ``c[m*n]``);
* errors name the kernel and the parameter.

Then the launch makes the launch stream wait for every producer stream the arguments name (CAI
``stream`` / our arrays' pending streams: PyCUDA itself reads only the pointer), and launches
through the driver with the argument format computed once from the declaration.

**Launch overhead.** The checks run from a plan made once per declaration (:class:`_Plan`): one
converter per scalar with its range and dtype bound in, the size expressions compiled to a single
Python function, and a fast path for our own :class:`~pybridge.cuda.arrays.DeviceArray`
(``dtype is expected`` identity test, element count and contiguity cached on the array). Nothing
on the success path formats a name or a message: whenever a fast check fails, the original,
general check runs again for that argument and raises the documented error. Launches call
``cuLaunchKernel`` directly through a few lines of C compiled once in cffi API mode
(:mod:`pybridge.cuda._cshim`), with the arguments packed by a precompiled ``struct.Struct`` and the
CUfunction of the module loaded through the driver; on any stream (ours, a foreign one, the
default) with no proxy stream. Where that shim cannot be built (no C compiler), launches go
through PyCUDA's ``Function._launch_kernel`` (what ``prepared_async_call`` ends in, minus its
per-call Python); ``PYBRIDGE_CUDA_LAUNCH=pycuda`` forces that path, ``=prepared`` PyCUDA's own
``prepared_async_call``. :attr:`Kernel.launch_path` says which one a kernel uses.

**Prepared launches.** ``p = k.prepare(*args, grid=..., block=..., stream=s)`` checks the arguments
once, orders them after their producers once, keeps them alive, packs them, and ``p()`` replays
the launch with no per-call check (the documented fast form for loops that launch the same
arguments again and again: only the C call is left). The checks still hold on every replay: the
arrays are held by ``p`` (their pointers, sizes and dtypes cannot change), and replays queue on
the one stream ``s``, so stream order covers what the pending-stream tracking did per call; when one
of our DeviceArrays was used on another stream since, ``p()`` first waits for that stream (one
identity test per array otherwise). ``p.raw`` skips even that: keep such arrays on ``s``.
"""

from __future__ import annotations

import functools
import os
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..interop import ArrayInfo, cai_info, plain_cai
from . import _driver
from .arrays import DeviceArray
from .context import ensure_context
from .errors import CudaError, LaunchError, error_for_code, from_pycuda_error
from .launch_config import Dim3, LaunchConfig, shared_config
from .signature import KernelSignature, Param, parse_signature
from .streams import DEFAULT_STREAM, Stream, as_stream

__all__ = ["BoundArgs", "Kernel", "PreparedLaunch", "bind_args", "describe_array", "plan_for", "struct_format"]

# struct format character of each scalar type for PyCUDA's argument packing (native alignment
# matches the kernel parameter layout). float16 travels as its 16 bits.
_STRUCT_CHAR: dict[np.dtype, str] = {
    np.dtype(np.int8): "b",
    np.dtype(np.uint8): "B",
    np.dtype(np.int16): "h",
    np.dtype(np.uint16): "H",
    np.dtype(np.int32): "i",
    np.dtype(np.uint32): "I",
    np.dtype(np.int64): "q",
    np.dtype(np.uint64): "Q",
    np.dtype(np.float16): "H",
    np.dtype(np.float32): "f",
    np.dtype(np.float64): "d",
    np.dtype(np.bool_): "?",
}


def struct_format(signature: KernelSignature) -> str:
    """PyCUDA ``prepare`` format of a declaration: 'P' per pointer, a struct char per scalar."""
    return "".join("P" if p.is_pointer else _STRUCT_CHAR[p.dtype] for p in signature.params)


@dataclass
class BoundArgs:
    """Arguments checked against a declaration, ready to pack."""

    kernel: str
    values: tuple[Any, ...]  # Python ints/floats/bools in parameter order (pointers as ints)
    scalars: dict[str, Any]
    arrays: dict[str, ArrayInfo]
    producer_streams: tuple[int, ...]  # CAI stream values with possibly pending work
    device_arrays: tuple[Any, ...] = ()  # our DeviceArrays among the arguments
    keepalive: tuple[Any, ...] = field(default_factory=tuple)


def _where(kernel: str, p: Param) -> str:
    return f"kernel {kernel}, parameter {p.name} ({p})"


def _convert_scalar(kernel: str, p: Param, value: Any) -> Any:
    where = _where(kernel, p)
    if isinstance(value, np.ndarray):
        if value.ndim != 0:
            raise TypeError(f"{where}: expected a scalar, got an array of shape {value.shape}")
        value = value[()]
    if hasattr(value, "__cuda_array_interface__") or hasattr(value, "__dlpack__") and not isinstance(value, np.generic):
        raise TypeError(f"{where}: expected a scalar, got {type(value).__name__}")
    if isinstance(value, (np.timedelta64, np.datetime64)):  # np.timedelta64 is an np.integer
        raise TypeError(f"{where}: expected a number, got {type(value).__name__} {value!r}")
    dt = p.dtype
    if dt.kind == "b":
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{where}: expected a bool, got {type(value).__name__} {value!r}")
        return bool(value)
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{where}: expected a number, got the bool {value!r}")
    if dt.kind in "iu":
        if not isinstance(value, (int, np.integer)):
            raise TypeError(f"{where}: expected an integer, got {type(value).__name__} {value!r}")
        v = int(value)
        info = np.iinfo(dt)
        if not info.min <= v <= info.max:
            raise ValueError(f"{where}: {v} does not fit in {dt.name} [{info.min}, {info.max}]")
        return v
    if dt.kind == "f":
        if not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(f"{where}: expected a real number, got {type(value).__name__} {value!r}")
        try:
            with np.errstate(over="ignore"):
                converted = dt.type(value)
            overflows = bool(np.isinf(converted)) and bool(np.isfinite(float(value)))
        except OverflowError:  # an int beyond any float ("int too large to convert to float")
            overflows = True
        if overflows:
            raise ValueError(f"{where}: {value!r} overflows {dt.name}")
        if dt == np.float16:
            return int(np.asarray(converted).view(np.uint16))
        return float(converted)
    raise TypeError(f"{where}: unsupported scalar type {dt}")  # pragma: no cover


def describe_array(obj: Any) -> tuple[ArrayInfo, Any] | None:
    """An argument's array description and the object to keep alive, or None if it is no device array.

    Our DeviceArray and CAI producers are read directly; a DLPack-only producer is imported
    (needs the GPU). NumPy arrays are not device arrays.
    """
    if isinstance(obj, DeviceArray):
        return obj.info, obj
    if isinstance(obj, np.ndarray):
        return None
    info = cai_info(obj)
    if info is not None:
        return info, obj
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__") and not isinstance(obj, np.generic):
        from .arrays import from_dlpack

        arr = from_dlpack(obj)
        return arr.info, arr
    return None


def _check_pointer(plan: _Plan, p: Param, a: Any, expected: int | None, values: list[Any]) -> tuple[ArrayInfo, Any]:
    """The general check of one pointer argument: its description and the object to keep alive,
    or the documented TypeError / ValueError. ``expected`` is the declared element count (None
    for an unsized pointer); ``values`` the arguments with the scalars bound."""
    signature = plan.signature

    def where() -> str:  # formatted only for an error
        return _where(signature.name, p)

    if isinstance(a, np.ndarray):
        raise TypeError(
            f"{where()}: got a NumPy array, which lives in host memory; pointer parameters need device "
            "memory: pass pybridge.cuda.to_device(array) (or a CuPy/PyTorch/numba device array)"
        )
    if a is None or isinstance(a, (int, float, bool, np.generic)):
        raise TypeError(f"{where()}: expected a device array, got {type(a).__name__} {a!r}")
    try:
        described = describe_array(a)
    except (TypeError, ValueError) as e:  # a malformed interface: say which argument carried it
        raise type(e)(f"{where()}: {e}") from e
    if described is None:
        raise TypeError(
            f"{where()}: expected a device array (__cuda_array_interface__ or DLPack), got {type(a).__name__}"
        )
    info, keepalive = described
    if info.dtype != p.dtype:
        raise TypeError(f"{where()}: expected {p.dtype.name} elements, got an array of {info.dtype.name}")
    if not info.c_contiguous:
        raise ValueError(
            f"{where()}: the array is not C-contiguous (shape {info.shape}, strides {info.strides}); "
            "kernels get only a pointer, so pass a contiguous copy"
        )
    if info.readonly and not p.is_const:
        raise ValueError(f"{where()}: the array is read-only but the kernel may write it (non-const pointer)")
    size = info.size
    if expected is not None and size != expected:
        used = sorted(signature.param(p.name).size_expr.names) if p.size else []  # type: ignore[union-attr]
        scalars = plan._scalar_dict(values)
        bound = ", ".join(f"{k}={scalars[k]}" for k in used)
        raise ValueError(
            f"{where()}: the array has {size} elements but the declaration needs {p.size} = "
            f"{expected}" + (f" (with {bound})" if bound else "")
        )
    if info.ptr == 0 and size != 0:
        raise ValueError(f"{where()}: null device pointer for a non-empty array")
    return info, keepalive


# ------------------------------------------------------------------ the per-declaration check plan

_F32 = struct.Struct("=f")
# Doubles at or beyond this magnitude round to inf in float32: 2**128 - 2**103, halfway between
# FLT_MAX and 2**128 (ties to even go up).
_F32_OVERFLOW = float(2**128 - 2**103)


def _scalar_converter(kernel: str, p: Param) -> Callable[[Any], Any]:
    """``_convert_scalar(kernel, p, value)`` with the common exact-type cases answered inline
    (same result); anything else, errors included, goes to ``_convert_scalar`` itself."""
    dt = p.dtype
    kind = dt.kind

    def general(value: Any) -> Any:
        return _convert_scalar(kernel, p, value)

    if kind in "iu":
        info = np.iinfo(dt)
        lo, hi = int(info.min), int(info.max)

        def convert_int(value: Any) -> Any:
            if type(value) is int and lo <= value <= hi:
                return value
            return _convert_scalar(kernel, p, value)

        return convert_int
    if kind == "b":

        def convert_bool(value: Any) -> Any:
            if type(value) is bool:
                return value
            return _convert_scalar(kernel, p, value)

        return convert_bool
    if dt == np.float32:
        pack, unpack = _F32.pack, _F32.unpack

        def convert_f32(value: Any) -> Any:
            if type(value) is float:
                # Rounds like np.float32(value) (a C cast, to nearest); OverflowError exactly when
                # that cast gives inf from a finite value, which _convert_scalar reports.
                try:
                    return unpack(pack(value))[0]
                except OverflowError:
                    pass
            return _convert_scalar(kernel, p, value)

        return convert_f32
    if dt == np.float64:

        def convert_f64(value: Any) -> Any:
            if type(value) is float:
                return value
            return _convert_scalar(kernel, p, value)

        return convert_f64
    return general  # float16: rare, its bits need NumPy anyway


def _compile_sizes(signature: KernelSignature) -> Callable[[list[Any]], tuple[int, ...]] | None:
    """One function computing every sized pointer's element count from the argument list (bound
    scalars at their positions), or None when some size names something other than an integer
    scalar parameter (only possible for a hand-built KernelSignature: the general path handles it)."""
    index = {p.name: i for i, p in enumerate(signature.params) if not p.is_pointer and p.dtype.kind in "iu"}
    parts = []
    for p in signature.params:
        expr = p.size_expr
        if expr is None:
            continue
        if not expr.names <= index.keys():
            return None
        parts.append(expr.python_source({name: f"v[{i}]" for name, i in index.items()}))
    source = f"lambda v: ({', '.join(parts)},)"
    # The source is built from the parsed tree: integer literals, v[i], operators, min and max.
    fn: Callable[[list[Any]], tuple[int, ...]] = eval(source, {"__builtins__": {}, "min": min, "max": max})
    return fn


# Checked before any CAI is read (the general check refuses host arrays and scalars first; our
# own arrays, subclasses included, are tracked as DeviceArrays).
_NOT_FOREIGN = (DeviceArray, np.ndarray, np.generic, int, float)


def _plain_cai_pointer(obj: Any, typestr: str, writes: bool, expected: int | None) -> tuple[int, int | None] | None:
    """(pointer, producer stream) of a CAI producer in the plain form (:func:`interop.plain_cai`)
    that passes every check of a pointer parameter; None sends it to the general check."""
    found = plain_cai(obj, typestr)
    if found is None:
        return None
    ptr, readonly, _, size, stream = found
    if (readonly and writes) or (expected is not None and size != expected):
        return None
    return ptr, stream


def _foreign_pointer(obj: Any, typestr: str, writes: bool, expected: int | None) -> tuple[int, int | None] | None:
    """The CAI shortcut of :meth:`_Plan.bind` for one argument that is not our DeviceArray."""
    if isinstance(obj, _NOT_FOREIGN):
        return None
    return _plain_cai_pointer(obj, typestr, writes, expected)


def _compile_fast_bind(signature: KernelSignature) -> Callable[[Sequence[Any]], Any] | None:
    """One Python function, generated from the declaration, that runs :meth:`_Plan.bind`'s checks
    for the common argument types straight through (exact int / float / bool scalars in range, our
    DeviceArrays with their cached metadata, plain CAI producers), or returns None as soon as any
    argument is anything else, so that the general path checks it and raises the documented error.
    Accepts exactly what the general path accepts with the same result; it only skips the loops
    and lookups the general path needs to handle every case. None for declarations it does not
    cover (float16 scalars, sizes the general path evaluates)."""
    params = signature.params
    n = len(params)
    index = {p.name: i for i, p in enumerate(params) if not p.is_pointer and p.dtype.kind in "iu"}
    env: dict[str, Any] = {"_DA": DeviceArray, "_foreign": _foreign_pointer, "_f32": _F32.pack,
                           "_f32u": _F32.unpack, "_ZeroDivisionError": ZeroDivisionError,
                           "_OverflowError": OverflowError, "min": min, "max": max}
    body = [f"    if len(args) != {n}:", "        return None"]
    if n:
        body.append(f"    ({', '.join(f'a{i}' for i in range(n))},) = args")
    for i, p in enumerate(params):
        if p.is_pointer:
            continue
        kind = p.dtype.kind
        if kind in "iu":
            info = np.iinfo(p.dtype)
            body += [f"    if type(a{i}) is not int or not ({int(info.min)} <= a{i} <= {int(info.max)}):",
                     "        return None"]
        elif kind == "b":
            body += [f"    if type(a{i}) is not bool:", "        return None"]
        elif p.dtype == np.float32:
            # Finite and below the float32 overflow threshold (FLT_MAX + half an ulp, exact in a
            # double): converting to float32 (struct 'f', a C cast) rounds to nearest and cannot
            # give inf. NaN, inf and anything else take the general path.
            body += [f"    if type(a{i}) is not float or not (-{_F32_OVERFLOW!r} < a{i} < {_F32_OVERFLOW!r}):",
                     "        return None"]
        elif p.dtype == np.float64:
            body += [f"    if type(a{i}) is not float:", "        return None"]
        else:
            return None  # float16: the general path
    sized = [p for p in params if p.is_pointer and p.size is not None]
    size_var: dict[str, str] = {}  # each distinct size expression computed and checked once
    if sized:
        for p in sized:
            expr = p.size_expr
            if expr is None or not expr.names <= index.keys():
                return None
            src = expr.python_source({name: f"a{i}" for name, i in index.items()})
            size_var.setdefault(src, f"e{len(size_var)}")
        body += ["    try:"] + [f"        {var} = {src}" for src, var in size_var.items()]
        body += ["    except _ZeroDivisionError:", "        return None"]
        body += [f"    if {var} < 0:\n        return None" for var in size_var.values()]
    body += ["    streams = []", "    ours = []", "    keep = []"]
    for i, p in enumerate(params):
        if not p.is_pointer:
            continue
        env[f"_DT{i}"] = p.dtype
        expected = None
        if p.size is not None:
            expr = p.size_expr
            assert expr is not None
            expected = size_var[expr.python_source({name: f"a{i}" for name, i in index.items()})]
        writes = not p.is_const
        cond = ["m is None", f"m[3] is not _DT{i}"]  # see DeviceArray._launch_meta
        if writes:
            cond.append("m[4]")
        if expected:
            cond.append(f"m[0] != {expected}")
        body += [
            f"    if type(a{i}) is _DA:",
            f"        m = a{i}._meta",
            f"        if {' or '.join(cond)}:",
            "            return None",
            f"        pend = a{i}._pending",
            "        if pend is not None:",
            "            cs = pend._handle or 1",  # Stream.cai_stream, inlined
            "            if cs not in streams:",
            "                streams.append(cs)",
            f"        ours.append(a{i})",
            f"        a{i} = m[2]",
            "    else:",
            f"        r = _foreign(a{i}, {p.dtype.str!r}, {writes}, {expected or 'None'})",
            "        if r is None:",
            "            return None",
            "        if r[1] is not None and r[1] not in streams:",
            "            streams.append(r[1])",
            f"        keep.append(a{i})",
            f"        a{i} = r[0]",
        ]
    body.append(f"    return [{', '.join(f'a{i}' for i in range(n))}], streams, ours, keep")
    source = "def fast_bind(args):\n" + "\n".join(body) + "\n"
    # Generated from the parsed declaration only: identifiers a<i>/e<j>, int literals, operators.
    exec(compile(source, f"<fast bind of {signature.name}>", "exec"), env)
    fn: Callable[[Sequence[Any]], Any] = env["fast_bind"]
    return fn


class _Plan:
    """What checking one declaration's arguments needs, computed once (see the module docstring)."""

    __slots__ = ("fast", "general_sizes", "name", "nparams", "pointers", "scalars", "signature", "sized", "sizes_fn")

    def __init__(self, signature: KernelSignature) -> None:
        self.signature = signature
        self.name = signature.name
        params = signature.params
        self.nparams = len(params)
        self.scalars = tuple(
            (i, _scalar_converter(signature.name, p)) for i, p in enumerate(params) if not p.is_pointer
        )
        pointers = []
        sized: list[Param] = []
        for i, p in enumerate(params):
            if p.is_pointer:
                slot = None
                if p.size is not None:
                    slot = len(sized)
                    sized.append(p)
                pointers.append((i, p, p.dtype, not p.is_const, slot, p.dtype.str))
        self.pointers = tuple(pointers)
        self.sized = tuple(sized)
        self.sizes_fn = _compile_sizes(signature) if sized else None
        self.general_sizes = bool(sized) and self.sizes_fn is None
        self.fast = _compile_fast_bind(signature)

    def _scalar_dict(self, values: list[Any]) -> dict[str, Any]:
        params = self.signature.params
        return {params[i].name: values[i] for i, _ in self.scalars}

    def _sizes_general(self, values: list[Any]) -> tuple[int, ...]:
        """KernelSignature.sizes, as before: its KeyError / ValueError (negative, division by zero)."""
        scalars = self._scalar_dict(values)
        got = self.signature.sizes({k: v for k, v in scalars.items() if isinstance(v, int)})
        return tuple(got[p.name] for p in self.sized)

    def bind(self, args: Sequence[Any], full: bool = False) -> Any:
        """Check ``args``. Returns (values, producer streams, our DeviceArrays, keep-alive list),
        or with ``full`` the :class:`BoundArgs`."""
        if not full:
            fast = self.fast
            if fast is not None:
                got = fast(args)
                if got is not None:
                    return got
        if len(args) != self.nparams:
            params = self.signature.params
            raise TypeError(
                f"kernel {self.name} takes {len(params)} arguments ({', '.join(p.name for p in params)}), "
                f"got {len(args)}"
            )
        values = list(args)
        for i, convert in self.scalars:
            values[i] = convert(values[i])

        sizes: tuple[int, ...] = ()
        if self.sizes_fn is not None:
            try:
                sizes = self.sizes_fn(values)
                if min(sizes) < 0:
                    sizes = self._sizes_general(values)  # raises the "negative" ValueError
            except ZeroDivisionError:
                sizes = self._sizes_general(values)  # raises with the expression in the message
        elif self.general_sizes:
            sizes = self._sizes_general(values)

        streams: list[int] = []
        ours: list[Any] = []
        keep: list[Any] = []
        arrays: dict[str, ArrayInfo] = {}
        for i, p, dtype, writes, slot, typestr in self.pointers:
            a = values[i]
            if not full and type(a) is not DeviceArray and not isinstance(a, _NOT_FOREIGN):
                ptr = _plain_cai_pointer(a, typestr, writes, None if slot is None else sizes[slot])
                if ptr is not None:
                    values[i] = ptr[0]
                    if ptr[1] is not None and ptr[1] not in streams:
                        streams.append(ptr[1])
                    keep.append(a)
                    continue
            if type(a) is DeviceArray:
                info = a._info
                meta = a._meta
                if meta is None:
                    meta = a._launch_meta()
                dt = info.dtype
                if (
                    (dt is dtype or dt == dtype)
                    and meta[1]
                    and not (writes and info.readonly)
                    and (slot is None or meta[0] == sizes[slot])
                    and (meta[2] != 0 or meta[0] == 0)
                ):
                    values[i] = meta[2]
                    pending = a._pending
                    if pending is not None:
                        cs = pending.cai_stream
                        if cs not in streams:
                            streams.append(cs)
                    ours.append(a)
                    if full:
                        arrays[p.name] = a.info
                        keep.append(a)
                    continue
            # Anything else, and any failed fast check: the general check (which raises the error).
            info, keepalive = _check_pointer(self, p, a, None if slot is None else sizes[slot], values)
            values[i] = int(info.ptr)
            if info.stream is not None and info.stream not in streams:
                streams.append(info.stream)
            if isinstance(keepalive, DeviceArray) and keepalive is a:
                ours.append(a)
            keep.append(keepalive)
            if full:
                arrays[p.name] = info
        if full:
            return BoundArgs(self.name, tuple(values), self._scalar_dict(values), arrays, tuple(streams),
                             tuple(ours), tuple(keep))
        return values, streams, ours, keep


_plans: dict[int, tuple[KernelSignature, _Plan]] = {}
_plans_lock = threading.Lock()


def plan_for(signature: KernelSignature) -> _Plan:
    """The check plan of ``signature`` (cached by identity: a KernelSignature is immutable)."""
    entry = _plans.get(id(signature))
    if entry is not None and entry[0] is signature:
        return entry[1]
    plan = _Plan(signature)
    with _plans_lock:
        if len(_plans) >= 1024:
            _plans.clear()
        _plans[id(signature)] = (signature, plan)  # holding the signature keeps its id unique
    return plan


def bind_args(signature: KernelSignature, args: Sequence[Any]) -> BoundArgs:
    """Check ``args`` against ``signature`` (see the module docstring). Touches no GPU for our
    arrays, CAI producers and scalars."""
    result: BoundArgs = plan_for(signature).bind(args, full=True)
    return result


_proxy = threading.local()


def proxy_stream() -> Stream:
    """A PyCUDA stream of ours, per thread, to launch on for a foreign stream (see Kernel.launch)."""
    s: Stream | None = getattr(_proxy, "stream", None)
    if s is None:
        s = Stream(non_blocking=True)
        _proxy.stream = s
    return s


def order_before(target_cai_stream: int, producer_streams: Sequence[int], what: str) -> None:
    """Make ``target`` wait for each producer stream (GPU-side)."""
    for ps in producer_streams:
        if ps != target_cai_stream:
            _driver.stream_wait(target_cai_stream, ps, what=what)


def order_after_producers(target: int, producers: Sequence[int], what: str,
                          make_current: Callable[[], Any] | None = None) -> None:
    """:func:`order_before` when some producer stream differs from ``target`` (a CAI stream
    value), after ``make_current()``; nothing at all (no context call) when all of them are
    ``target`` itself, the common case of arrays last written on the launch stream."""
    for ps in producers:
        if ps != target:
            if make_current is not None:
                make_current()
            order_before(target, producers, what)
            return


def reorder_replay(ours: Sequence[Any], stream: Any, what: str) -> None:
    """Before replaying a prepared launch on ``stream``: wait for the streams its DeviceArrays
    were used on since (pending elsewhere), then mark them pending on ``stream`` again, exactly
    what a checked launch does per call. Prepared replays call it only when some array's pending
    stream is not ``stream``, so a loop that replays alone pays one identity test per array."""
    target = stream._handle or 1
    producers = []
    for arr in ours:
        pending = arr._pending
        if pending is not None and pending is not stream:
            cs = pending._handle or 1
            if cs not in producers:
                producers.append(cs)
        arr._pending = stream
    order_after_producers(target, producers, what, ensure_context)


def _direct_launch(function: Any) -> Callable[..., Any] | None:
    """``launch(grid, block, stream, values, shared_mem)`` through PyCUDA's ``_launch_kernel``, or
    None where that is not certain to be what ``prepared_async_call`` would do (not a PyCUDA
    function, texture references to bind, no CUDA 4+ launch, or PYBRIDGE_CUDA_LAUNCH=prepared)."""
    if os.environ.get("PYBRIDGE_CUDA_LAUNCH", "").strip().lower() == "prepared":
        return None
    if not type(function).__module__.startswith("pycuda"):
        return None
    try:
        raw = function._launch_kernel
        texrefs = function.texrefs
        fmt = function.arg_format
        from pycuda._pvt_struct import pack
    except (AttributeError, ImportError):
        return None
    if texrefs or not isinstance(fmt, str):
        return None

    def launch(grid: tuple[int, int, int], block: tuple[int, int, int], stream: Any, values: list[Any],
               shared_mem: int) -> None:
        # prepared_async_call(grid, block, stream, *values, shared_size=shared_mem) minus its
        # _set_block_shape (cuFuncSetBlockShape, which cuLaunchKernel's explicit block ignores).
        raw(grid, block, pack(fmt, *values), shared_mem, stream)

    return launch


def _prepared_launch(function: Any) -> Callable[..., Any]:
    call = function.prepared_async_call

    def launch(grid: tuple[int, int, int], block: tuple[int, int, int], stream: Any, values: list[Any],
               shared_mem: int) -> None:
        call(grid, block, stream, *values, shared_size=shared_mem)

    return launch


# cuLaunchKernel's answers when the calling thread has no usable context current (not initialised,
# invalid context, a function handle of another context): retry once after ensure_context().
_NO_CONTEXT_CODES = frozenset({3, 201, 400})


class Kernel:
    """A CUDA kernel with a declaration.

    Call it like a function::

        k(2.0, x, y, out, n, grid=grid_for(n, 256), block=256, stream=s)
    """

    def __init__(self, function: Any, signature: KernelSignature | str, *, module: Any = None,
                 default_config: LaunchConfig | None = None) -> None:
        self.signature = parse_signature(signature) if isinstance(signature, str) else signature
        self.function = function
        self.module = module
        self.default_config = default_config
        self.arg_format = struct_format(self.signature)
        # Prepared once: later launches only pack the arguments (the low-overhead path).
        function.prepare(self.arg_format)
        self._plan = plan_for(self.signature)
        self._launch_fn: Callable[..., Any] | None = None  # chosen at the first launch
        # (pb_launch, CUfunction, Struct.pack, packed size) of the direct path; False: not usable.
        self._direct: tuple[Any, int, Callable[..., bytes], int] | None | bool = None
        self.launch_path = "not launched yet"

    @property
    def name(self) -> str:
        return self.signature.name

    def __repr__(self) -> str:
        return f"<pybridge.cuda.Kernel {self.signature}>"

    def bind(self, *args: Any) -> BoundArgs:
        """Check arguments without launching."""
        result: BoundArgs = self._plan.bind(args, full=True)
        return result

    def _config(self, grid: Dim3 | None, block: Dim3 | None, shared_mem: int) -> LaunchConfig:
        """The launch configuration of grid= / block= (or the kernel's default)."""
        if grid is None or block is None:
            default = self.default_config
            if default is None or grid is not None or block is not None:  # half a configuration
                raise LaunchError(f"kernel {self.name}: give grid= and block= (or config=)", kernel=self.name)
            if shared_mem != 0:  # the default grid and block with this launch's shared memory
                return shared_config(default.grid, default.block, shared_mem)
            return default
        return shared_config(grid, block, shared_mem)

    def __call__(self, *args: Any, grid: Dim3 | None = None, block: Dim3 | None = None,
                 shared_mem: int = 0, stream: Any = None, config: LaunchConfig | None = None) -> None:
        if config is None:
            config = self._config(grid, block, shared_mem)
        self._checked_launch(config, args, stream)

    def _checked_launch(self, config: LaunchConfig, args: Sequence[Any], stream: Any) -> None:
        """:meth:`launch` with the direct path inlined: the per-call cost of every checked launch
        (``k(...)`` and :func:`~pybridge.cuda.launch.launch`).

        The primary context is made current only when needed: before ordering after producer
        streams, and when the driver says no usable context is current (a new thread, or another
        context pushed), in which case the launch is retried once after ensure_context()."""
        direct = self._direct
        if not direct:  # first launch (chooses the path) or the PyCUDA path
            self.launch(config, args, stream=stream)
            return
        plan = self._plan
        fast = plan.fast
        got = fast(args) if fast is not None else None
        values, producers, ours, keep = got if got is not None else plan.bind(args)
        s = DEFAULT_STREAM if stream is None else as_stream(stream)
        if producers:
            order_after_producers(s._handle or 1, producers, self.name, ensure_context)
        launch_c, function, pack, size = direct  # type: ignore[misc]
        packed = pack(*values)
        rc = launch_c(function, config.launch_bytes, s._handle, packed, size)
        if rc:
            if rc in _NO_CONTEXT_CODES:
                ensure_context()
                rc = launch_c(function, config.launch_bytes, s._handle, packed, size)
            if rc:
                self._raise_launch(rc, config)
        for arr in ours:
            arr._pending = s
        del keep  # imported producers stayed alive until the launch was queued

    def _direct_path(self) -> tuple[Any, int, Callable[..., bytes], int] | bool:
        """Set up the direct cuLaunchKernel path once (see the module docstring), or False."""
        direct = self._direct
        if direct is None:
            direct = False
            mode = os.environ.get("PYBRIDGE_CUDA_LAUNCH", "").strip().lower()
            if mode in ("pycuda", "prepared"):
                self.launch_path = f"PyCUDA (PYBRIDGE_CUDA_LAUNCH={mode})"
            elif self.module is None or not hasattr(self.module, "raw_function"):
                self.launch_path = "PyCUDA (no module file to load through the driver)"
            else:
                try:
                    from ._cshim import launch_shim

                    shim = launch_shim()
                    packer = struct.Struct("@" + self.arg_format)
                    direct = (shim.pb_launch_cfg, self.module.raw_function(self.name), packer.pack, packer.size)
                    self.launch_path = "direct cuLaunchKernel (cffi API-mode shim)"
                except (ImportError, OSError, CudaError) as e:
                    self.launch_path = f"PyCUDA (direct path unavailable: {e})"
            self._direct = direct
        return direct

    def _raise_launch(self, rc: int, config: LaunchConfig) -> None:
        err = error_for_code(rc, kernel=self.name, operation="launch", cuda_message=_driver.error_string(rc))
        if isinstance(err, LaunchError) or (type(err) is CudaError and rc in (1, 9, 701)):
            raise LaunchError(
                f"{err.cuda_message}; grid={config.grid}, block={config.block}, shared_mem={config.shared_mem}",
                kernel=self.name, code=rc, operation="launch",
            )
        raise err

    def launch(self, config: LaunchConfig, args: Sequence[Any], stream: Any = None) -> None:
        ensure_context()
        values, producers, ours, keep = self._plan.bind(args)
        s = DEFAULT_STREAM if stream is None else as_stream(stream)
        direct = self._direct
        if direct is None:
            direct = self._direct_path()
        if direct:
            launch_c, function, pack, size = direct  # type: ignore[misc]
            if producers:
                order_before(s.cai_stream, producers, self.name)
            rc = launch_c(function, config.launch_bytes, s._handle, pack(*values), size)
            if rc:
                self._raise_launch(rc, config)
            for arr in ours:
                arr._pending = s
            del keep  # imported DLPack producers stayed alive until the launch was queued
            return
        run_on: Stream = s
        external = s._pycuda is None and s._handle not in (0, 1)
        if external:
            # PyCUDA launches only on its own streams: run on our proxy stream, fenced both ways,
            # which orders the kernel exactly as if it ran on the foreign stream.
            run_on = proxy_stream()
            _driver.stream_wait(run_on.cai_stream, s.cai_stream, what=self.name)
        if producers:
            order_before(run_on.cai_stream, producers, self.name)
        launch_fn = self._launch_fn
        if launch_fn is None:
            launch_fn = self._launch_fn = _direct_launch(self.function) or _prepared_launch(self.function)
        try:
            launch_fn(config.grid, config.block, run_on._pycuda, values, config.shared_mem)
        except Exception as e:
            if not type(e).__module__.startswith("pycuda"):
                raise
            err = from_pycuda_error(e, kernel=self.name, operation="launch")
            if isinstance(err, LaunchError) or (type(err) is CudaError and err.code in (1, 9, 701)):
                # Rejected at launch: the configuration (or shared memory size) is the problem.
                raise LaunchError(
                    f"{err.cuda_message}; grid={config.grid}, block={config.block}, "
                    f"shared_mem={config.shared_mem}",
                    kernel=self.name, code=err.code, operation="launch",
                ) from e
            raise err from e
        if external:
            _driver.stream_wait(s.cai_stream, run_on.cai_stream, what=self.name)
        for arr in ours:
            arr._pending = s
        del keep  # imported DLPack producers stayed alive until the launch was queued

    def prepare(self, *args: Any, grid: Dim3 | None = None, block: Dim3 | None = None, shared_mem: int = 0,
                stream: Any = None, config: LaunchConfig | None = None) -> PreparedLaunch:
        """Check ``args`` once and return a :class:`PreparedLaunch` that replays this launch."""
        if config is None:
            config = self._config(grid, block, shared_mem)
        return PreparedLaunch(self, config, args, stream)

    # Function attributes, handy when choosing a block size.
    def attribute(self, name: str) -> int:
        from .context import pycuda_driver

        drv = pycuda_driver()
        return int(self.function.get_attribute(getattr(drv.function_attribute, name.upper())))

    @property
    def max_threads_per_block(self) -> int:
        return self.attribute("max_threads_per_block")

    @property
    def num_regs(self) -> int:
        return self.attribute("num_regs")


class PreparedLaunch:
    """One launch, checked once, replayed by ``p()`` (see the module docstring).

    ``p()`` queues the kernel again with the same arguments on the same stream; only the C call
    to ``cuLaunchKernel`` runs (on the direct path; elsewhere a checked launch). ``p.raw`` is that
    C call itself (returns the CUDA code instead of raising), for the tightest loops.
    """

    __slots__ = ("kernel", "config", "stream", "args", "raw", "_ours")

    def __init__(self, kernel: Kernel, config: LaunchConfig, args: Sequence[Any], stream: Any) -> None:
        ensure_context()
        self.kernel, self.config, self.args = kernel, config, tuple(args)
        s = self.stream = DEFAULT_STREAM if stream is None else as_stream(stream)
        bound: BoundArgs = kernel._plan.bind(self.args, full=True)  # every check, once
        self.args = self.args + bound.keepalive  # held: pointers, sizes and dtypes stay as checked
        self._ours = bound.device_arrays
        direct = kernel._direct if kernel._direct is not None else kernel._direct_path()
        if direct:
            order_before(s.cai_stream, bound.producer_streams, kernel.name)
            launch_c, function, pack, size = direct  # type: ignore[misc]
            self.raw = functools.partial(launch_c, function, config.launch_bytes, s._handle, pack(*bound.values),
                                         size)
        else:
            self.raw = None
        for arr in self._ours:
            arr._pending = s

    def __call__(self) -> None:
        raw = self.raw
        if raw is None:  # no direct path here: a checked launch of the same arguments
            self.kernel.launch(self.config, self.args[: self.kernel._plan.nparams], stream=self.stream)
            return
        s = self.stream
        for arr in self._ours:
            if arr._pending is not s:  # used on another stream since: order after it, as k(...) would
                reorder_replay(self._ours, s, self.kernel.name)
                break
        rc = raw()
        if rc:
            self.kernel._raise_launch(rc, self.config)

    def __repr__(self) -> str:
        return f"<PreparedLaunch {self.kernel.name} grid={self.config.grid} block={self.config.block}>"
