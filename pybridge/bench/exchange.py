"""``pybridge bench exchange``: handing arrays between pybridge and CuPy / PyTorch / numba.

Rows, per call, data resident on the GPU (n f32 elements):

* pybridge's side alone: ``handle.__cuda_array_interface__`` / ``__dlpack__`` of a Futhark cuda
  handle and of a pybridge.cuda DeviceArray, and ``ArrayKind.from_cuda(x).free()`` /
  ``cuda.as_device_array(x)`` for a CuPy, PyTorch and numba array;
* the whole exchange as a user writes it (``cupy.asarray(h)``, ``torch.as_tensor(h,
  device="cuda")``, ``numba.cuda.as_cuda_array(h)``, ``cupy.from_dlpack``/``torch.from_dlpack``),
  and ``torch.from_dlpack(cupy_array)`` as the two libraries' own cost for comparison;
* the copying path (through host memory), which zero-copy exchange replaces, beside the published
  110–350 µs per call.

The per-call rows of a section are measured together, their batches taken in turn, so pybridge's
side and the references subtracted from it (report.py) see the same host.

Without a GPU only the copying path runs (c backend: NumPy in, NumPy out).
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

import numpy as np

from .common import gpu_status, optional, positive_int, probe_library, pycuda_status, row, skipped
from .timing import Progress, measure, measure_interleaved

HELP = "zero-copy exchange with CuPy / PyTorch / numba (CAI, DLPack) vs the copying path"

# impl names used by the targets in report.py (pybridge's side of each exchange, and references)
PYBRIDGE_SIDE = "pybridge side"
DRIVER_PAIR = "reference: cuEventRecord + cuStreamWaitEvent (bare cffi)"
CUPY_CAI = "reference: CuPy's own c.__cuda_array_interface__"
NEW_RAW_FREE = "reference: Futhark's new_raw + free alone (bare cffi)"
NUMBA_CAI = "reference: numba's own na.__cuda_array_interface__"
TORCH_READS = "reference: PyTorch's own answers to what interop.torch_plain asks of a tensor"
TORCH_STREAM = "reference: PyTorch's current stream, as interop._torch_stream asks it"


def torch_reads(t: Any) -> tuple[Any, ...]:
    """What interop.torch_plain asks of a plain tensor, and nothing else: PyTorch's own part of
    ``cuda.as_device_array(t)`` and ``from_cuda(t)`` (tests/test_bench_report_targets.py checks
    that the two ask the same)."""
    return (t.dtype, t.is_cuda, t.requires_grad, t.is_sparse, t.is_contiguous(), t.is_conj(), t.is_neg(), t.shape,
            t.numel(), t.data_ptr())


def torch_stream(torch: Any, t: Any) -> Any:
    """What interop._torch_stream asks PyTorch for a tensor on a device with an index."""
    return torch._C._cuda_getCurrentRawStream(t.device.index)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=positive_int, default=1 << 20, help="elements per array (f32)")


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    quick = getattr(args, "quick", False)
    calls, repeat = (200, 3) if quick else (2000, 7)
    n = min(args.n, 1 << 12) if quick else args.n
    gpu, why = gpu_status()
    rows: list[dict[str, Any]] = []
    with Progress(3, "exchange", enabled=not quick) as bar:
        rows += copy_rows(n, gpu, quick)
        bar.step("copy")
        if gpu:
            rows += futhark_rows(n, calls, repeat)
            bar.step("futhark")
            rows += cuda_rows(n, calls, repeat)
            bar.step("pybridge.cuda")
        else:
            for b in ("exchange: Futhark handle", "exchange: pybridge.cuda DeviceArray"):
                rows.append(skipped(b, "all", why, n))
    return rows


class _Sides:
    """The per-call rows of one section, measured together (:func:`measure_interleaved`): each
    pybridge side is compared with references (a library's own read, the driver's pair) measured
    in the same rounds, so a host whose speed drifts during the run moves both alike."""

    def __init__(self, b: str, n: int) -> None:
        self.b, self.n = b, n
        self.fns: dict[str, tuple[Callable[[], Any], Callable[[], Any] | None]] = {}
        self.extra: dict[str, dict[str, Any]] = {}
        self.order: list[str | dict[str, Any]] = []  # impl names, or rows made already (skipped ones)

    def add(self, what: str, fn: Any, **extra: Any) -> None:
        self.fns[what], self.extra[what] = (fn, None), extra
        self.order.append(what)

    def put(self, made: dict[str, Any] | list[dict[str, Any]]) -> None:
        self.order += made if isinstance(made, list) else [made]

    def rows(self, calls: int, repeat: int) -> list[dict[str, Any]]:
        timed = measure_interleaved(self.fns, calls=calls, repeat=repeat) if self.fns else {}
        return [row(self.b, k, self.n, timed[k], **self.extra[k]) if isinstance(k, str) else k for k in self.order]


def futhark_rows(n: int, calls: int, repeat: int) -> list[dict[str, Any]]:
    import pybridge.futhark as pf

    b = "exchange: Futhark handle"
    so = probe_library("cuda")
    if so is None:
        return [skipped(b, "all", "no cuda probe library: make futhark FUTHARK_BACKEND=cuda", n)]
    lib = pf.load(so)
    t = lib.types["[]f32"]
    x = np.random.default_rng(0).random(n, dtype=np.float32)
    h = t.new(x)
    sides = _Sides(b, n)
    sides.add(f"{PYBRIDGE_SIDE}: h.__cuda_array_interface__", lambda: h.__cuda_array_interface__)
    sides.add(f"{PYBRIDGE_SIDE}: h.__dlpack__() (capsule dropped)", lambda: h.__dlpack__(stream=1))
    sides.put([  # with a sync each batch: measured apart
        row(b, "export of a fresh result: lib.saxpy(2, h, h).__cuda_array_interface__", n,
            measure(lambda: lib.saxpy(2.0, h, h).__cuda_array_interface__, lib.sync, calls=calls // 4, repeat=repeat),
            note="the call and its export; the CAI names Futhark's stream, no host sync"),
        row(b, "reference: lib.saxpy(2, h, h) alone", n,
            measure(lambda: lib.saxpy(2.0, h, h), lib.sync, calls=calls // 4, repeat=repeat)),
    ])
    # What Futhark's own C functions cost for a wrap + free (part of from_cuda, not pybridge's side).
    new_raw, free, ctx = lib.lib.futhark_new_raw_f32_1d, lib.lib.futhark_free_f32_1d, lib.context.ptr
    ptr = h.data_pointer()
    sides.add(NEW_RAW_FREE, lambda: free(ctx, new_raw(ctx, ptr, n)), note="inside from_cuda(...).free()")
    driver_rows(sides, lib)
    cp, cwhy = optional("cupy")
    torch, twhy = optional("torch")
    nb, nwhy = optional("numba.cuda")
    if cp is not None:
        c = cp.asarray(x)
        sides.add(CUPY_CAI, lambda: c.__cuda_array_interface__, note="inside from_cuda(cupy)")
        sides.add("to CuPy: cupy.asarray(h)", lambda: cp.asarray(h))
        sides.add("to CuPy: cupy.from_dlpack(h)", lambda: cp.from_dlpack(h))
        sides.add(f"{PYBRIDGE_SIDE}: from_cuda(cupy).free()", lambda: t.from_cuda(c).free())
    else:
        sides.put(skipped(b, "CuPy", cwhy, n))
    if torch is not None:
        tt = torch.from_numpy(x).cuda()
        sides.add("to PyTorch: torch.as_tensor(h, device='cuda')", lambda: torch.as_tensor(h, device="cuda"))
        sides.add("to PyTorch: torch.from_dlpack(h)", lambda: torch.from_dlpack(h))
        sides.add(f"{PYBRIDGE_SIDE}: from_cuda(torch).free()", lambda: t.from_cuda(tt).free())
        sides.add("reference: PyTorch's own tensor.__cuda_array_interface__", lambda: tt.__cuda_array_interface__,
                  note="not read by from_cuda(torch), which asks the tensor directly")
        sides.add(TORCH_READS, lambda: torch_reads(tt), note="inside from_cuda(torch)")
        sides.add(TORCH_STREAM, lambda: torch_stream(torch, tt), note="inside from_cuda(torch)")
        if cp is not None:
            sides.add("reference: torch.from_dlpack(cupy array)", lambda: torch.from_dlpack(c),
                      note="the two libraries' own exchange, no pybridge")
    else:
        sides.put(skipped(b, "PyTorch", twhy, n))
    if nb is not None:
        try:
            na = nb.to_device(x)
            nb.as_cuda_array(h)  # numba-cuda may not work with this NumPy: found here, not while timing
            sides.add("to numba: numba.cuda.as_cuda_array(h)", lambda: nb.as_cuda_array(h))
            sides.add(f"{PYBRIDGE_SIDE}: from_cuda(numba).free()", lambda: t.from_cuda(na).free())
            sides.add(NUMBA_CAI, lambda: na.__cuda_array_interface__, note="inside from_cuda(numba)")
        except Exception as e:  # noqa: BLE001 - numba-cuda may not work with this NumPy
            sides.put(skipped(b, "numba", f"{type(e).__name__}: {str(e)[:100]}", n))
    else:
        sides.put(skipped(b, "numba", nwhy, n))
    rows = sides.rows(calls, repeat)
    h.free()
    lib.close()
    return rows


def driver_rows(sides: _Sides, lib: Any) -> None:
    """The driver's part of an ordered exchange, bare: the event record on Futhark's stream and
    the legacy stream's wait for it (what ``h.__dlpack__(stream=1)`` and ``from_cuda`` make)."""
    from .. import cudriver
    from ..futhark.gpustream import futhark_stream

    fs = futhark_stream(lib)
    if fs is None:
        sides.put(skipped(sides.b, DRIVER_PAIR, "the library has no stream accessors (no ordering to time)", sides.n))
        return
    cu, ev, stream = cudriver.driver(), fs.slot.ev, fs.stream

    def pair() -> tuple[int, int]:
        return cu.cuEventRecord(ev, stream), cu.cuStreamWaitEvent(1, ev, 0)

    codes = pair()
    if codes != (0, 0):  # timing calls that fail would time nothing real
        sides.put(skipped(sides.b, DRIVER_PAIR, f"cuEventRecord / cuStreamWaitEvent returned {codes}", sides.n))
        return
    sides.add(DRIVER_PAIR, pair, note="libcuda through cffi, no pybridge code")


def cuda_rows(n: int, calls: int, repeat: int) -> list[dict[str, Any]]:
    b = "exchange: pybridge.cuda DeviceArray"
    ok, why = pycuda_status()
    if not ok:
        return [skipped(b, "all", why, n)]
    from pybridge import cuda

    x = cuda.to_device(np.random.default_rng(0).random(n, dtype=np.float32))
    sides = _Sides(b, n)
    sides.add(f"{PYBRIDGE_SIDE}: x.__cuda_array_interface__", lambda: x.__cuda_array_interface__)
    sides.add(f"{PYBRIDGE_SIDE}: x.__dlpack__() (capsule dropped)", lambda: x.__dlpack__(stream=1))
    cp, cwhy = optional("cupy")
    torch, twhy = optional("torch")
    if cp is not None:
        c = cp.asarray(x)
        sides.add(CUPY_CAI, lambda: c.__cuda_array_interface__, note="inside cuda.as_device_array(cupy)")
        sides.add("to CuPy: cupy.asarray(x)", lambda: cp.asarray(x))
        sides.add(f"{PYBRIDGE_SIDE}: cuda.as_device_array(cupy)", lambda: cuda.as_device_array(c))
    else:
        sides.put(skipped(b, "CuPy", cwhy, n))
    if torch is not None:
        tt = torch.empty(n, device="cuda")
        sides.add("to PyTorch: torch.as_tensor(x, device='cuda')", lambda: torch.as_tensor(x, device="cuda"))
        sides.add(f"{PYBRIDGE_SIDE}: cuda.as_device_array(torch)", lambda: cuda.as_device_array(tt))
        sides.add(TORCH_READS, lambda: torch_reads(tt), note="inside cuda.as_device_array(torch)")
    else:
        sides.put(skipped(b, "PyTorch", twhy, n))
    return sides.rows(calls, repeat)


def copy_rows(n: int, gpu: bool, quick: bool) -> list[dict[str, Any]]:
    """The path zero-copy replaces: data through host memory (published: 110-350 µs per call)."""
    import pybridge.futhark as pf

    backend = "cuda" if gpu and probe_library("cuda") else "c"
    b = f"exchange: copying path ({backend})"
    so = probe_library(backend)
    if so is None:
        return [skipped(b, "all", f"no probe library for {backend}", n)]
    lib = pf.load(so)
    t = lib.types["[]f32"]
    x = np.random.default_rng(0).random(n, dtype=np.float32)
    h = t.new(x)
    calls, repeat = (20, 3) if quick else (200, 7)
    rows = [
        row(b, "Futhark -> host: h.numpy()", n, measure(h.numpy, calls=calls, repeat=repeat),
            note="published copying path: 110-350 µs per call"),
        row(b, "host -> Futhark: t.new(x).free()", n, measure(lambda: t.new(x).free(), lib.sync, calls=calls, repeat=repeat)),
    ]
    cp, _ = optional("cupy") if gpu else (None, "")
    if cp is not None:
        c = cp.asarray(x)
        rows.append(row(b, "CuPy -> Futhark via host: t.new(cupy.asnumpy(c)).free()", n,
                        measure(lambda: t.new(cp.asnumpy(c)).free(), lib.sync, calls=calls, repeat=repeat)))
        rows.append(row(b, "Futhark -> CuPy via host: cupy.asarray(h.numpy())", n,
                        measure(lambda: cp.asarray(h.numpy()), calls=calls, repeat=repeat)))
    h.free()
    lib.close()
    return rows
