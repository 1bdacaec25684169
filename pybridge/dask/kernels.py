"""pybridge CUDA kernels over the blocks of dask arrays: the same mechanism as for Futhark.

    saxpy = pbd.kernel("saxpy", "saxpy(float a, const float* x[n], const float* y[n], float* out[n], int64 n)")
    out = pbd.map_kernel(saxpy, 2.0, xs, ys)    # xs, ys: dask arrays (CuPy blocks stay on the GPU)

The caller passes the kernel's *inputs* in declaration order: every scalar that is not a size, and
every ``const`` pointer. The rest is filled in per block: a scalar that is the bare size of an input
pointer (``n`` in ``x[n]``) from that block's length, and each non-const pointer (an output) newly
allocated with the size its expression gives. The block's result is the output named ``out=``
(default: the only or first one). The launch is 1-D, ``grid_for(largest size, block)`` threads
(right for elementwise and grid-stride kernels), unless ``config=`` (a function of the sizes dict
returning a ``LaunchConfig``) says otherwise.

Each worker loads the module once (``pybridge.cuda.load_module`` caches per process and device) and
launches in device 0's primary context, so a worker must see its GPU as device 0: use
``local_cluster(devices=..., pin="visible")`` or dask-cuda. NumPy blocks are copied to the device
and the result back (the host edges); device blocks (CuPy) give CuPy results.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Sequence

import numpy as np

import dask.array as da

from ..cuda.signature import KernelSignature, Param, parse_signature
from .plan import is_chunked


@dataclass(frozen=True)
class KernelRef:
    """A kernel of a pybridge CUDA module, as workers load it: the module (a name from build/cuda, a
    cubin/PTX path, or a ``.cu`` source that each worker compiles once, cached) + the declaration."""

    module: str
    declaration: str

    @cached_property
    def signature(self) -> KernelSignature:
        return parse_signature(self.declaration)

    def derived_sizes(self) -> dict[str, str]:
        """Scalar name -> the input pointer whose element count it is (``n`` -> ``x`` for ``x[n]``)."""
        out: dict[str, str] = {}
        for p in self.signature.params:
            if p.is_pointer and p.is_const and p.size is not None and p.size.strip().isidentifier():
                out.setdefault(p.size.strip(), p.name)
        return out

    def inputs(self) -> list[Param]:
        """The parameters the caller passes (see the module docstring)."""
        derived = self.derived_sizes()
        return [p for p in self.signature.params if (p.is_pointer and p.is_const) or (not p.is_pointer and p.name not in derived)]

    def outputs(self) -> list[Param]:
        return [p for p in self.signature.params if p.is_pointer and not p.is_const]


def kernel(module: str, declaration: str) -> KernelRef:
    """A kernel reference; the declaration is parsed here, so a typo fails on the client."""
    ref = KernelRef(str(module), declaration)
    if not ref.outputs():
        raise ValueError(f"{ref.signature.name}: no output (non-const pointer) parameter to return as the block's result")
    return ref


def block_env(ref: KernelRef, args: Sequence[Any], shapes: Sequence[tuple[int, ...] | None]) -> dict[str, int]:
    """Scalar values of one block: the caller's integers plus the sizes read off the input shapes."""
    env: dict[str, int] = {}
    by_name = dict(zip((p.name for p in ref.inputs()), zip(args, shapes)))
    for p in ref.inputs():
        if not p.is_pointer and np.issubdtype(p.dtype, np.integer):
            env[p.name] = int(by_name[p.name][0])
    for size, pointer in ref.derived_sizes().items():
        shape = by_name[pointer][1]
        env[size] = int(np.prod(shape)) if shape is not None else 0
    return env


def _output(ref: KernelRef, out: str | None) -> Param:
    outs = ref.outputs()
    if out is None:
        return outs[0]
    for p in outs:
        if p.name == out:
            return p
    raise ValueError(f"{ref.signature.name}: out={out!r} is not an output; outputs are {[p.name for p in outs]}")


def map_kernel(ref: KernelRef, *args: Any, out: str | None = None, block: int = 256,
               config: Callable[[dict[str, int]], Any] | None = None) -> da.Array:
    """Launch a kernel once per block; the output ``out`` of each launch is that block's result."""
    params = ref.inputs()
    name = ref.signature.name
    if len(args) != len(params):
        raise TypeError(f"{name}: pass {[p.name for p in params]} ({len(params)} values; outputs and sizes are filled in), got {len(args)}")
    chunked = [i for i, a in enumerate(args) if is_chunked(a)]
    if not chunked:
        raise TypeError(f"{name}: no argument is a dask array, so there are no blocks to map over")
    for p, a in zip(params, args):
        if p.is_pointer and np.dtype(a.dtype) != p.dtype:
            raise TypeError(f"{name}: parameter {p.name!r} is {p}, got dtype {a.dtype}")
    first = args[chunked[0]]
    for i in chunked[1:]:
        if args[i].chunks != first.chunks:
            raise ValueError(
                f"{name}: parameters {params[chunked[0]].name!r} and {params[i].name!r} must be chunked alike "
                f"(kernels see flat blocks), got {first.chunks} and {args[i].chunks}; rechunk one like the other"
            )
    result = _output(ref, out)
    sizes = []
    for idx in np.ndindex(*first.numblocks):
        shape = tuple(c[k] for c, k in zip(first.chunks, idx))
        shapes = [shape if is_chunked(a) else (np.shape(a) if p.is_pointer else None) for p, a in zip(params, args)]
        sizes.append(ref.signature.sizes(block_env(ref, args, shapes))[result.name])
    block_sizes = [int(np.prod(tuple(c[k] for c, k in zip(first.chunks, idx)))) for idx in np.ndindex(*first.numblocks)]
    if sizes == block_sizes:
        chunks: tuple[tuple[int, ...], ...] = first.chunks
    elif first.ndim == 1:
        chunks = (tuple(sizes),)
    else:
        raise ValueError(f"{name}: output {result.name}[{result.size}] differs from the {first.ndim}-d block sizes; only 1-d blocks may change size")
    meta = da.utils.meta_from_array(first._meta, ndim=len(chunks), dtype=result.dtype)
    return da.map_blocks(_kernel_block, *args, ref=ref, out=result.name, block_threads=block, config=config,
                         chunks=chunks, dtype=result.dtype, meta=meta, token=f"pybridge-cuda-{name}")


_kernels: dict[KernelRef, Any] = {}


def forget_kernels() -> None:
    """Drop this process's loaded kernels (the worker plugin's teardown): their modules go with
    the last reference, while the worker's CUDA context is still there to unload them from."""
    _kernels.clear()


def _worker_kernel(ref: KernelRef) -> Any:
    k = _kernels.get(ref)
    if k is None:
        from ..cuda import load_module

        k = _kernels.setdefault(ref, load_module(ref.module).kernel(ref.signature))
    return k


def _kernel_block(*args: Any, ref: KernelRef, out: str, block_threads: int,
                  config: Callable[[dict[str, int]], Any] | None) -> Any:
    """One task: inputs to the device (host blocks copied), outputs allocated, launch, sync."""
    import os

    from .. import cuda
    from .blocks import is_device_array
    from .workers import DEVICE_ENV

    if os.environ.get(DEVICE_ENV, "#0") != "#0":
        raise RuntimeError(
            f"{ref.signature.name}: CUDA kernels over Dask launch on device 0 of each worker, but this worker "
            f"is pinned to {os.environ[DEVICE_ENV]}; start it with CUDA_VISIBLE_DEVICES (local_cluster(pin='visible') or dask-cuda)"
        )
    on_device = any(is_device_array(a) for a in args)
    params = ref.inputs()
    shapes = [np.shape(a) if p.is_pointer else None for p, a in zip(params, args)]
    env = block_env(ref, args, shapes)
    sizes = ref.signature.sizes(env)
    cupy: Any = None
    if on_device:
        import cupy as cupy_module

        cupy = cupy_module
    given = {p.name: (cuda.to_device(a) if p.is_pointer and not is_device_array(a) else a) for p, a in zip(params, args)}
    values = []
    result: Any = None
    for p in ref.signature.params:
        if p.name in given:
            v = given[p.name]
            values.append(v.ravel() if p.is_pointer and is_device_array(v) and hasattr(v, "ravel") else v)
        elif p.is_pointer:
            buf = cupy.empty(sizes[p.name], p.dtype) if cupy is not None else cuda.empty(sizes[p.name], p.dtype)
            values.append(buf)
            if p.name == out:
                result = buf
        else:
            values.append(p.dtype.type(env[p.name]))
    launch = config(sizes) if config is not None else cuda.LaunchConfig(cuda.grid_for(max(sizes.values(), default=1), block_threads), block_threads)
    k = _worker_kernel(ref)
    k.launch(launch, values)
    cuda.streams.DEFAULT_STREAM.synchronize()
    first = next((s for s in shapes if s is not None and len(s)), None)
    host = result if cupy is not None else result.get()
    if first is not None and int(np.prod(first)) == sizes[out]:
        return host.reshape(first)
    return host
