"""What one Dask task does with one block: run an entry point on it in this worker's context.

Chunk types: a NumPy chunk goes into Futhark by copy and the result comes back as NumPy. A device
chunk (CuPy, or anything with ``__cuda_array_interface__``) goes into a cuda-backend library without
a copy (``from_cuda``) and the result comes back as a CuPy array over Futhark's own memory, also
without a copy: chunks stay on the GPU between steps. A parameter the entry point consumes (``*[]``,
which Futhark may update in place) gets a copy of its block, which stays as Dask holds it; a result
that is an argument returned as it is (a non-unique result lying in a block's memory) keeps that
block alive. A device chunk given to a CPU backend is
copied to the host first (the only place data changes sides without being asked).

A Futhark failure in a block is raised again as the same class (``ProgramError``,
``OutOfMemoryError``, ``FutharkError``) with the entry point and the block in its message and as
attributes ``entry`` and ``block``, so the client sees which chunk failed.

No dask import here: the functions take plain arguments and are tested without a cluster.
"""

from __future__ import annotations

import functools
import math
import os
import pickle
from typing import Any, Sequence

import numpy as np

from ..futhark import ArrayHandle, ArrayKind, FutharkError, Library
from ..futhark.gpustream import futhark_stream
from ..futhark.types import PRIMITIVES
from ..ordering import LEGACY
from . import phases
from .refs import GPU_BACKENDS, EntryRef
from .workers import DEVICE_ENV, Slot, device_ordinal, worker_label, worker_slot


#: Types whose every instance is (True) or is not (False) a device array, decided without reading
#: ``__cuda_array_interface__``: CuPy builds that dictionary anew at each read, and a task asks for
#: each of its blocks several times. Other types (PyTorch's: a CPU tensor has the attribute's
#: property but raises) are asked each time.
_DEVICE_TYPES: dict[type, bool] = {np.ndarray: False}


def is_device_array(x: Any) -> bool:
    known = _DEVICE_TYPES.get(type(x))
    if known is not None:
        return known
    found = hasattr(x, "__cuda_array_interface__") and not isinstance(x, ArrayHandle)
    if found and type(x).__module__.partition(".")[0] == "cupy" and type(x).__name__ == "ndarray":
        _DEVICE_TYPES[type(x)] = True  # a CuPy array is always in device memory
    return found


def array_module(x: Any) -> Any:
    """``cupy`` for a device array, ``numpy`` otherwise: code that runs on both kinds of block."""
    return _cupy() if is_device_array(x) else np


def _cupy() -> Any:
    try:
        import cupy
    except ImportError as e:  # only reached with device chunks, which CuPy (or similar) made
        raise ImportError("device chunks come back as CuPy arrays: pip install cupy-cuda12x (or -cuda13x)") from e
    return cupy


def to_host_array(x: Any) -> np.ndarray:
    get = getattr(x, "get", None)  # CuPy
    if callable(get):
        return np.asarray(get())
    return np.asarray(x)


def wait_for_device(value: Any) -> None:
    """Wait until the GPU work that made ``value`` (a device array, or a tuple/list holding some)
    is done: its thread's current CuPy stream, which Futhark's results and the kernels a task
    launched are ordered on. Nothing to wait for on host values."""
    parts = value if isinstance(value, (tuple, list)) else (value,)
    if any(is_device_array(v) for v in parts):
        _cupy().cuda.get_current_stream().synchronize()


def to_device_array(x: Any) -> Any:
    """A block copied to this worker's GPU as a CuPy array (its ``PYBRIDGE_DASK_DEVICE``, else 0)."""
    cupy = _cupy()
    with cupy.cuda.Device(device_ordinal(os.environ.get(DEVICE_ENV) or None)):
        return cupy.asarray(x)


class _HandleOwner:
    """Keeps a Futhark result alive while a CuPy array views its memory, and frees it when the
    view dies: under the context's call lock if it is free at once, else (a view collected while
    another thread calls, which could deadlock two contexts' locks) by the next call on the context.
    ``inputs``: the device blocks whose memory the result lies in (a result that is an argument
    returned as it is: Futhark's value is then a view of the block, which only this keeps alive)."""

    __slots__ = ("handle", "slot", "inputs")

    def __init__(self, handle: ArrayHandle, slot: Slot, inputs: tuple[Any, ...] = ()):
        self.handle, self.slot, self.inputs = handle, slot, inputs

    def __del__(self) -> None:
        lock = self.slot.lock
        if not lock.acquire(blocking=False):
            self.slot.pending_frees.append(self.handle)
            return
        try:
            self.handle.free()
        except Exception:  # a closed context already freed it
            pass
        finally:
            lock.release()


class _Inputs(list):  # type: ignore[type-arg]
    """A call's device arguments as Futhark views them: ``temps`` the handles to free after the call,
    and for each its block's (start, end) addresses and the block itself."""

    def __init__(self) -> None:
        super().__init__()
        self.temps: list[ArrayHandle] = []

    def add(self, handle: ArrayHandle, block: Any) -> ArrayHandle:
        self.temps.append(handle)
        start = int(block.data.ptr)
        self.append((start, start + int(block.nbytes), block))
        return handle

    def holding(self, ptr: int) -> tuple[Any, ...]:
        return tuple(b for start, end, b in self if start <= ptr < end)


def _device_view(handle: ArrayHandle, slot: Slot, device: int, settled: bool, inputs: _Inputs) -> Any:
    """A CuPy array over a Futhark result's device memory, which it frees when it dies.

    Made from the pointer, not through ``__cuda_array_interface__``: a result is exported once, and
    the export's first-time work (the pointer's device asked of the driver, the state cached for
    later exports) and CuPy's reading of the dictionary cost a task more than its call. The order is
    the export's: unless the context was synchronised after the call (``settled``), the stream
    CuPy uses next waits on the device for Futhark's stream, or, where the context's work may
    still fail (a kernel's bounds check) or the library has no stream accessors, the context is
    synchronised so that the error is raised here instead of its data handed on."""
    cupy = _cupy()
    shape, dtype = handle.shape, handle.dtype
    if not settled:
        fs = futhark_stream(handle.library)
        with handle._ctx.lock:
            if fs is not None and not fs.may_fail():
                with cupy.cuda.Device(device):  # the stream CuPy uses next on this block's GPU
                    fs.signal(cupy.cuda.get_current_stream().ptr or LEGACY)
            else:
                handle._ctx.sync()
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes == 0:  # nothing to view (Futhark may give no pointer for it)
        handle.free()
        with cupy.cuda.Device(device):
            return cupy.empty(shape, dtype)
    ptr = handle.data_pointer()
    memory = cupy.cuda.UnownedMemory(ptr, nbytes, _HandleOwner(handle, slot, inputs.holding(ptr)), device)
    return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(memory, 0))


def _argument(lib: Library, param: Any, value: Any, device: int, inputs: _Inputs) -> Any:
    if param.type in PRIMITIVES or not is_device_array(value):
        return value  # scalars and host arrays: the entry point converts (host arrays copied in)
    if lib.backend != "cuda":
        return to_host_array(value)
    ready = _DEVICE_TYPES.get(type(value)) and value.flags.c_contiguous and value.data.device_id == device
    if param.unique or not ready:
        cupy = _cupy()  # else a CuPy array as it is: the common case, without switching devices
        with cupy.cuda.Device(device):
            # A consumed parameter may be updated in place: Futhark gets a copy, so the block (which
            # Dask may hand to other tasks) stays as it was. A chunk on another GPU: peer copy.
            if param.unique or getattr(getattr(value, "device", None), "id", device) != device:
                value = cupy.array(value, copy=True)
            value = cupy.ascontiguousarray(value)
    kind = lib.types[param.type]
    assert isinstance(kind, ArrayKind)  # plan.check_arguments let only array types through
    return inputs.add(kind.from_cuda(value), value)


def _result(value: Any, on_device: bool, device: int, slot: Slot, settled: bool, inputs: _Inputs) -> Any:
    if isinstance(value, ArrayHandle):
        if on_device:
            return _device_view(value, slot, device, settled, inputs)
        out = value.numpy()
        value.free()
        return out
    if isinstance(value, np.generic):
        return np.asarray(value)  # a 0-d array: a chunk, or a partial of a reduction
    raise TypeError(f"pybridge.dask handles entry points that return arrays or scalars, got {type(value).__name__}")


def describe_block(block: Sequence[int] | None, nblocks: Sequence[int] | None, location: Any = None) -> str:
    if block is None:
        return "a combine step"
    where = f"block {tuple(block)}"
    if nblocks is not None:
        where += f" of {tuple(nblocks)}"
    if location:
        where += " (elements " + ", ".join(f"{a}:{b}" for a, b in location) + ")"
    return where


def named_error(e: FutharkError, entry: EntryRef, where: str, block: Sequence[int] | None) -> FutharkError:
    """The same kind of error, saying which entry point failed on which chunk, and on which worker
    (when it ran on one)."""
    worker = worker_label()
    on = f" on {worker}" if worker else ""
    new = type(e)(f"{entry.name} failed on {where}{on}: {e.message}", e.code, e.function)
    new.entry = entry.name  # type: ignore[attr-defined]
    new.block = None if block is None else tuple(block)  # type: ignore[attr-defined]
    new.worker = worker  # type: ignore[attr-defined]
    return new


def call_entry(entry: EntryRef, args: Sequence[Any], block: Sequence[int] | None = None,
               nblocks: Sequence[int] | None = None, location: Any = None, sync: bool = False,
               on_device: bool | None = None) -> Any:
    """Run ``entry`` on one block's arguments in this process's context; results as chunks.
    ``sync``: wait for the call's GPU work before returning (Futhark's context sync: an error of
    that work is raised here, naming the block). ``on_device``: on the cuda backend, results stay
    on the GPU as CuPy arrays (True) or are copied to NumPy (False); by default they stay when an
    argument is a device array. An entry point given only scalars (a frame rendered from its view)
    makes its result on the GPU all the same: ``on_device=True`` keeps it there."""
    while True:
        slot = worker_slot(entry.library)
        with slot.lock:
            if not slot.library.closed:  # else it was discarded while this thread waited
                return _call_locked(slot, entry, args, block, nblocks, location, sync, on_device)


def _call_locked(slot: Slot, entry: EntryRef, args: Sequence[Any], block: Sequence[int] | None,
                 nblocks: Sequence[int] | None, location: Any, sync: bool = False, on_device: bool | None = None) -> Any:
    lib = slot.library
    ep = lib.entry_points[entry.name]
    device = device_ordinal(slot.device) if lib.backend == "cuda" else 0
    if on_device is None:
        on_device = any(is_device_array(a) for a in args)
    on_device = on_device and lib.backend == "cuda"
    inputs = _Inputs()
    slot.calls += 1
    while slot.pending_frees:
        slot.pending_frees.pop().free()
    try:
        call_args = [_argument(lib, p, a, device, inputs) for p, a in zip(ep.info.inputs, args)]
        results = ep(*call_args)
        settled = sync and lib.backend in GPU_BACKENDS
        if settled:
            lib.context.sync()
        if isinstance(results, tuple):
            return tuple(_result(r, on_device, device, slot, settled, inputs) for r in results)
        return _result(results, on_device, device, slot, settled, inputs)
    except FutharkError as e:
        # The context stays usable: Futhark 0.25.32's multicore scheduler kept a failed call's
        # error flag, which csource.py now clears at every call (tests/test_multicore_errors.py).
        raise named_error(e, entry, describe_block(block, nblocks, location), block) from None
    finally:
        for h in inputs.temps:
            if h.valid:
                h.free()


class Shared:
    """A value every task of one graph carries (a ``BlockCall``, the function of ``pbd.spmd``),
    pickled once where it is made. The scheduler pickles each task on its own when it sends it to a
    worker: this pickles as those bytes (a copy per task, no pickling again), which each worker
    process unpickles once per graph (``_unshared``). A closure, which plain pickle refuses, is
    pickled by value with cloudpickle, as Dask would, but once instead of once per task (and the
    rest of the graph then pickles without falling back to cloudpickle). ``value``: the object."""

    __slots__ = ("value", "_pickled")

    def __init__(self, value: Any):
        self.value = value
        self._pickled: bytes | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        if self._pickled is None:
            import cloudpickle  # type: ignore[import-untyped]  # a dependency of Dask

            self._pickled = cloudpickle.dumps(self.value, protocol=5)
        return (_unshared, (self._pickled,))


#: Bigger than this, a shared value is unpickled per task instead of kept in ``_shared_cache``
#: (a closure holding a large array must not stay alive in the worker after its graph).
SHARED_CACHE_BYTES = 1 << 20


def _unshared(pickled: bytes) -> Shared:
    if len(pickled) > SHARED_CACHE_BYTES:
        return _load_shared(pickled)
    return _shared_cache(pickled)


def _load_shared(pickled: bytes) -> Shared:
    shared = Shared(pickle.loads(pickled))
    shared._pickled = pickled  # sent on as it came (a task given to another worker)
    return shared


_shared_cache = functools.lru_cache(maxsize=64)(_load_shared)  # one Shared per graph in this process


class BlockCall:
    """What every task of one ``pbd.map_blocks`` graph shares, made once on the client (and carried
    in a :class:`Shared`): the entry point, the arguments that are the same in every call (scalars)
    with a gap where each task's own values go (its blocks, the whole arrays the graph names), the
    grid's block counts, and ``sync``. A task carries this, its block index and its elements: small
    and fixed, whatever the number of blocks (a task that carried the whole grid would grow with it)."""

    __slots__ = ("entry", "template", "gaps", "nblocks", "sync")

    def __init__(self, entry: EntryRef, template: Sequence[Any], gaps: Sequence[int], nblocks: Sequence[int], sync: bool):
        self.entry, self.template, self.gaps = entry, tuple(template), tuple(gaps)
        self.nblocks, self.sync = tuple(int(n) for n in nblocks), bool(sync)

    def __reduce__(self) -> tuple[Any, ...]:
        return (BlockCall, (self.entry, self.template, self.gaps, self.nblocks, self.sync))

    def arguments(self, values: Sequence[Any]) -> list[Any]:
        args = list(self.template)
        for i, v in zip(self.gaps, values):
            args[i] = v
        return args


def map_block(shared: Shared, block: tuple[int, ...], location: tuple[tuple[int, int], ...], *values: Any) -> Any:
    """The task function of ``pybridge.dask.map_blocks``: ``values`` fill the gaps of the shared
    ``BlockCall``'s arguments; ``block`` and ``location`` (its elements along each axis), written
    into the task when the graph was built, name the block in an error."""
    call = shared.value
    clock = phases.clock(False)
    out = call_entry(call.entry, call.arguments(values), block, call.nblocks, location, call.sync)
    if clock is not None:
        clock.finish()
    return out


def reduce_block(entry: EntryRef, block: tuple[int, ...], nblocks: tuple[int, ...], *args: Any) -> Any:
    """First level of ``pybridge.dask.reduction``: one block's partial result."""
    return call_entry(entry, args, block, nblocks)


def stack_partials(partials: Sequence[Any]) -> Any:
    """Partials (0-d or n-d, host or device) stacked on a new leading axis."""
    if any(is_device_array(p) for p in partials):
        cupy = _cupy()
        return cupy.stack([cupy.asarray(p) for p in partials])
    return np.stack([np.asarray(p) for p in partials])


def combine_partials(combine: Any, *partials: Any) -> Any:
    """A tree step of ``pybridge.dask.reduction``: ``combine`` (an EntryRef or a callable) applied to
    the stacked partials, giving one partial of the same shape."""
    stacked = stack_partials(partials)
    if isinstance(combine, EntryRef):
        return call_entry(combine, (stacked,))
    return combine(stacked)
