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
``stream`` / our arrays' pending streams: PyCUDA itself reads only the pointer), and calls
PyCUDA's ``prepared_async_call`` with the argument format computed once from the declaration.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..interop import ArrayInfo, cai_info
from . import _driver
from .errors import CudaError, LaunchError, from_pycuda_error
from .launch import Dim3, LaunchConfig
from .signature import KernelSignature, Param, parse_signature

__all__ = ["BoundArgs", "Kernel", "bind_args", "describe_array", "struct_format"]

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
        with np.errstate(over="ignore"):
            converted = dt.type(value)
        if np.isinf(converted) and np.isfinite(float(value)):
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
    from .arrays import DeviceArray  # local: arrays imports streams which imports context

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


def bind_args(signature: KernelSignature, args: Sequence[Any]) -> BoundArgs:
    """Check ``args`` against ``signature`` (see the module docstring). Touches no GPU for our
    arrays, CAI producers and scalars."""
    name = signature.name
    params = signature.params
    if len(args) != len(params):
        raise TypeError(
            f"kernel {name} takes {len(params)} arguments ({', '.join(p.name for p in params)}), got {len(args)}"
        )
    scalars: dict[str, Any] = {}
    for p, a in zip(params, args):
        if not p.is_pointer:
            scalars[p.name] = _convert_scalar(name, p, a)

    expected_sizes = signature.sizes({k: v for k, v in scalars.items() if isinstance(v, int)})
    arrays: dict[str, ArrayInfo] = {}
    streams: list[int] = []
    ours: list[Any] = []
    keep: list[Any] = []
    values: list[Any] = []
    from .arrays import DeviceArray

    for p, a in zip(params, args):
        if not p.is_pointer:
            values.append(scalars[p.name])
            continue
        where = _where(name, p)
        if isinstance(a, np.ndarray):
            raise TypeError(
                f"{where}: got a NumPy array, which lives in host memory; pointer parameters need device "
                "memory: pass pybridge.cuda.to_device(array) (or a CuPy/PyTorch/numba device array)"
            )
        if a is None or isinstance(a, (int, float, bool, np.generic)):
            raise TypeError(f"{where}: expected a device array, got {type(a).__name__} {a!r}")
        described = describe_array(a)
        if described is None:
            raise TypeError(
                f"{where}: expected a device array (__cuda_array_interface__ or DLPack), got {type(a).__name__}"
            )
        info, keepalive = described
        if info.dtype != p.dtype:
            raise TypeError(f"{where}: expected {p.dtype.name} elements, got an array of {info.dtype.name}")
        if not info.c_contiguous:
            raise ValueError(
                f"{where}: the array is not C-contiguous (shape {info.shape}, strides {info.strides}); "
                "kernels get only a pointer, so pass a contiguous copy"
            )
        if info.readonly and not p.is_const:
            raise ValueError(f"{where}: the array is read-only but the kernel may write it (non-const pointer)")
        if p.name in expected_sizes and info.size != expected_sizes[p.name]:
            used = sorted(signature.param(p.name).size_expr.names) if p.size else []  # type: ignore[union-attr]
            bound = ", ".join(f"{k}={scalars[k]}" for k in used)
            raise ValueError(
                f"{where}: the array has {info.size} elements but the declaration needs {p.size} = "
                f"{expected_sizes[p.name]}" + (f" (with {bound})" if bound else "")
            )
        if info.ptr == 0 and info.size != 0:
            raise ValueError(f"{where}: null device pointer for a non-empty array")
        arrays[p.name] = info
        if info.stream is not None and info.stream not in streams:
            streams.append(info.stream)
        if isinstance(keepalive, DeviceArray) and keepalive is a:
            ours.append(a)
        keep.append(keepalive)
        values.append(int(info.ptr))
    return BoundArgs(name, tuple(values), scalars, arrays, tuple(streams), tuple(ours), tuple(keep))


_proxy = threading.local()


def _proxy_stream() -> Any:
    """A PyCUDA stream of ours, per thread, to launch on for a foreign stream (see Kernel.launch)."""
    s = getattr(_proxy, "stream", None)
    if s is None:
        from .streams import Stream

        s = Stream(non_blocking=True)
        _proxy.stream = s
    return s


def order_before(target_cai_stream: int, producer_streams: Sequence[int], what: str) -> None:
    """Make ``target`` wait for each producer stream (GPU-side)."""
    for ps in producer_streams:
        if ps != target_cai_stream:
            _driver.stream_wait(target_cai_stream, ps, what=what)


class Kernel:
    """A CUDA kernel with a declaration; call it like a function::

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

    @property
    def name(self) -> str:
        return self.signature.name

    def __repr__(self) -> str:
        return f"<pybridge.cuda.Kernel {self.signature}>"

    def bind(self, *args: Any) -> BoundArgs:
        """Check arguments without launching."""
        return bind_args(self.signature, args)

    def __call__(self, *args: Any, grid: Dim3 | None = None, block: Dim3 | None = None,
                 shared_mem: int = 0, stream: Any = None, config: LaunchConfig | None = None) -> None:
        if config is None:
            if grid is None or block is None:
                if self.default_config is None:
                    raise LaunchError(f"kernel {self.name}: give grid= and block= (or config=)", kernel=self.name)
                config = self.default_config
            else:
                config = LaunchConfig(grid=grid, block=block, shared_mem=shared_mem)
        self.launch(config, args, stream=stream)

    def launch(self, config: LaunchConfig, args: Sequence[Any], stream: Any = None) -> None:
        from .context import ensure_context
        from .streams import Stream, as_stream

        ensure_context()
        bound = bind_args(self.signature, args)
        s = as_stream(stream)
        run_on: Stream = s
        if s.is_external:
            # PyCUDA launches only on its own streams: run on our proxy stream, fenced both ways,
            # which orders the kernel exactly as if it ran on the foreign stream.
            run_on = _proxy_stream()
            _driver.stream_wait(run_on.cai_stream, s.cai_stream, what=self.name)
        order_before(run_on.cai_stream, bound.producer_streams, self.name)
        try:
            self.function.prepared_async_call(
                config.grid, config.block, run_on.pycuda, *bound.values, shared_size=config.shared_mem
            )
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
        if s.is_external:
            _driver.stream_wait(s.cai_stream, run_on.cai_stream, what=self.name)
        for arr in bound.device_arrays:
            arr._set_pending(s)

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
