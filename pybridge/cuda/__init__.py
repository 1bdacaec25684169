"""pybridge.cuda: hand-written CUDA C kernels called from Python, checked and zero-copy::

    from pybridge import cuda
    mod = cuda.load_module("saxpy")                        # build/cuda/saxpy.cubin (PTX fallback)
    k = mod.kernel("saxpy(float a, const float* x[n], const float* y[n], float* out[n], int64 n)")
    k(2.0, x, y, out, n, grid=cuda.grid_for(n, 256), block=256, stream=s)
    cuda.launch(s, cuda.LaunchConfig(grid=..., block=...), k, *args)
    cuda.to_device(np_array); cuda.as_device_array(cupy_or_torch_or_numba_array)
    cuda.load_launchers("saxpy").launch_saxpy(2.0, x, y, out, n, stream=s)
    mod = cuda.compile(cuda_c_text, options=["-DBLOCK=128"])   # your own CUDA C (or load_module("k.cu"))
    mod.kernel("saxpy")                                    # declared in the source: see declarations

Layers (cuda.core's model: Program -> ObjectCode -> Kernel, ``launch(stream, config, kernel, *args)``):
signature (declarations) -> module (cubin/PTX via PyCUDA) -> kernel (checked, prepared launches)
-> launch; launch_config (grid/block sizes) sits below kernel. declarations (read from CUDA C
source) and compiler (nvcc, cached) feed module for your own sources. context says which CUDA
context owns what; streams and arrays (above it) handle ordering and memory; futhark_boundary
(above both) orders work across the boundary with Futhark's context. launchers binds the host
launchers of ``make``'s libraries, declared by the sidecar launcher_sidecar writes.
The project's own kernels as whole operations live in :mod:`pybridge.demo.catalog`, not here.

PyCUDA is optional at import time: ``import pybridge.cuda`` works without it (signatures, argument
checks, errors and launch configurations are pure Python); whatever needs the GPU raises an
ImportError saying ``pip install pycuda``.
"""

from __future__ import annotations

from .arrays import DeviceArray, as_device_array, empty, from_cai, from_dlpack, to_device, zeros
from .compiler import CompiledSource, CompileError, build_source
from .context import PYCUDA_HINT, device_count, ensure_context, have_pycuda
from .futhark_boundary import after_futhark, before_futhark
from .errors import CudaError, LaunchError, StickyCudaError
from .declarations import DeclarationMismatchError, SourceDeclarations, read_declarations
from .kernel import BoundArgs, Kernel, bind_args
from .launch import launch
from .launch_config import LaunchConfig, grid_2d, grid_for
from .launchers import Launchers, load_launchers
from .module import Module, load_compiled, load_module
from .module import compile_source as compile  # noqa: A001 - cuda.compile, as PyCUDA / CuPy users expect
from .signature import KernelSignature, Param, SignatureError, parse_signature
from .streams import Event, Stream, as_stream

__all__ = [
    "PYCUDA_HINT",
    "BoundArgs",
    "CompileError",
    "CompiledSource",
    "DeclarationMismatchError",
    "SourceDeclarations",
    "CudaError",
    "DeviceArray",
    "Event",
    "Kernel",
    "KernelSignature",
    "LaunchConfig",
    "LaunchError",
    "Launchers",
    "Module",
    "Param",
    "SignatureError",
    "StickyCudaError",
    "Stream",
    "after_futhark",
    "as_device_array",
    "as_stream",
    "before_futhark",
    "bind_args",
    "build_source",
    "compile",
    "device_count",
    "empty",
    "ensure_context",
    "from_cai",
    "from_dlpack",
    "grid_2d",
    "grid_for",
    "have_pycuda",
    "launch",
    "load_compiled",
    "load_launchers",
    "load_module",
    "parse_signature",
    "read_declarations",
    "to_device",
    "zeros",
]
