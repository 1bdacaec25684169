"""One task per block, each on the worker holding it: with one block per GPU, the shape of work that scales.

    out = pbd.spmd(step, x, y, comms=comms)          # step(comm, x_block, y_block) on every worker
    out = pbd.halo_map(jacobi, np.int32(100), grid, depth=100, comms=comms)

``spmd`` takes dask arrays split along their first axis only (any number of blocks along axis 0,
one along every other; several arrays must agree on that number) and runs ``fn`` once per block
index k, a *rank*, with block k of each array:

- with ``comms`` (a :class:`~pybridge.dask.comms.Comms`), the arrays have exactly one block per
  rank of the communicator (``comms.size``) and rank k's task runs on the communicator's worker k
  (``workers=[w]``), where ``pbd.random`` / ``pbd.from_function`` over those same workers put block k;
  ``fn`` gets that worker's communicator. Collectives need every rank running at once: so exactly
  one task per worker;
- without, ``fn`` gets a plain :class:`Rank` (k of n blocks) and each task runs where its block is
  (Dask's data locality: no block moves). An array of 2 blocks on a cluster of 4 GPUs runs 2 tasks
  on the 2 GPUs holding them; the other workers stay free.

All tasks of a call go to the scheduler in one message (one graph), so a call costs Dask one task
per block and one round trip, whatever the size. ``sync=True`` makes each task wait for the GPU
work it queued (its current CuPy stream) before it returns: the task's end then means its block is
computed (what a benchmark times; also where an asynchronous GPU error then surfaces).

``halo_map`` is ``spmd`` for a stencil: each rank's block is extended by ``depth`` rows of each
neighbour (GPU to GPU over NCCL, or over the host transport), the entry point runs on the extended
block, and the halo rows are cut from its result.

Wrong chunking is refused on the client, before any task runs: a ValueError names the argument,
its chunks, and what is needed.
"""

from __future__ import annotations

import contextlib
import math
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..futhark.types import PRIMITIVES
from .blocks import BlockCall, Shared, array_module, is_device_array, wait_for_device
from .plan import is_chunked


@dataclass(frozen=True)
class Rank:
    """What a task of ``spmd`` without communicators is told: its rank and how many there are."""

    rank: int
    size: int


def _check_layout(args: Sequence[Any], size: int | None, what: str) -> tuple[list[int], int]:
    """Indices of the chunked arguments and their number of blocks along axis 0, each checked: the
    same number for all (``size`` blocks when given: one per rank of a communicator), one block
    along every other axis."""
    chunked = [i for i, a in enumerate(args) if is_chunked(a)]
    if not chunked:
        raise TypeError(f"{what}: no argument is a dask array, so there is nothing to split over the workers")
    want = size if size is not None else args[chunked[0]].numblocks[0] if args[chunked[0]].ndim else 1
    per = "one block per worker of the communicator" if size is not None else "the same number of blocks"
    for i in chunked:
        a = args[i]
        nb = a.numblocks
        if a.ndim == 0 or nb[0] != want or any(n != 1 for n in nb[1:]):
            fix = ", ".join([str(math.ceil(a.shape[0] / want)) if a.ndim else "?"] + ["-1"] * (a.ndim - 1))
            raise ValueError(
                f"{what}: argument {i} has chunks {a.chunks} ({nb} blocks), but it needs {per}: "
                f"{want} along axis 0 and 1 along any other, e.g. .rechunk(({fix},)) or made with {want} blocks"
                + (f"; for fewer blocks than workers, make the Comms over the workers that hold them "
                   f"(pbd.Comms(client, workers=...))" if size is not None and a.ndim and nb[0] < size else "")
            )
    return chunked, want


def _block_futures(client: Any, a: Any) -> list[Any]:
    """The futures of ``a``'s blocks, in order (persisting it first if it is not held already)."""
    from distributed import futures_of

    held = {f.key: f for f in futures_of(a)}
    keys = [k for k in _flat_keys(a.__dask_keys__())]
    if not all(k in held for k in keys):
        a = client.persist(a)
        held = {f.key: f for f in futures_of(a)}
    return [held[k] for k in keys]


def _flat_keys(keys: Any) -> list[Any]:
    if isinstance(keys, list):
        return [k for sub in keys for k in _flat_keys(sub)]
    return [keys]


def run_rank(shared: Shared, session: str | None, rank: int, size: int, sync: bool, *args: Any) -> Any:
    """The task of one rank: its communicator (checked to be this worker's own rank), then the
    shared ``fn`` (and, with ``sync``, a wait for the device work it queued)."""
    fn = shared.value
    if session is None:
        out = fn(Rank(rank, size), *args)
    else:
        from .comms import CommsError, comm

        c = comm(session)
        if c.rank != rank:
            raise CommsError(
                f"the task of rank {rank} ran on the worker of rank {c.rank}: rank {rank}'s worker is gone "
                f"(died?) and its communicator with it; make a new Comms over the workers there are"
            )
        out = fn(c, *args)
    if sync:
        wait_for_device(out)
    return out


def spmd(fn: Callable[..., Any], *args: Any, comms: Any = None, client: Any = None, chunks: Any = None,
         dtype: Any = None, meta: Any = None, name: str | None = None, sync: bool = False) -> Any:
    """Run ``fn(comm, *blocks)`` once per block index (see the module docstring); a dask array of
    the results, block k from rank k. ``chunks``/``dtype``/``meta``: the result's (default: those of
    the first dask argument, the elementwise case)."""
    import dask
    import dask.array as da
    from distributed import default_client, futures_of

    from .graph import array_from_graph

    client = client or (comms.client if comms is not None else default_client())
    chunked, size = _check_layout(args, comms.size if comms is not None else None, getattr(fn, "__name__", "spmd"))
    if comms is not None and not comms.initialized:
        raise ValueError("spmd: the Comms is not initialised: comms.init() (or use it in a with block)")
    first = args[chunked[0]]
    per_arg = {i: _block_futures(client, args[i]) for i in chunked}
    name = name or f"pybridge-spmd-{getattr(fn, '__name__', 'fn')}-{uuid.uuid4().hex}"  # a fresh key: pure=False
    session = comms.session if comms is not None else None
    trailing = (0,) * (len(chunks) - 1 if chunks is not None else first.ndim - 1)
    shared = Shared(fn)  # pickled once for all ranks, not once per task (a closure by cloudpickle)
    tasks = []
    for r in range(size):
        call = [per_arg[i][r] if i in per_arg else a for i, a in enumerate(args)]
        key = (name, r) + trailing
        if comms is None:
            tasks.append(dask.delayed(run_rank, pure=False)(shared, None, r, size, sync, *call, dask_key_name=key))
            continue
        # allow_other_workers: if rank r's worker died, the task runs elsewhere and says so
        # (run_rank's check) instead of waiting forever for a worker that will not come back.
        with dask.annotate(workers=[comms.workers[r]], allow_other_workers=True):
            tasks.append(dask.delayed(run_rank, pure=False)(shared, session, r, size, sync, *call, dask_key_name=key))
    futures = {f.key: f for f in futures_of(client.persist(tasks, optimize_graph=False))}  # one message
    out_chunks = tuple(tuple(c) for c in chunks) if chunks is not None else first.chunks
    out_dtype = np.dtype(dtype) if dtype is not None else first.dtype
    if meta is None:
        meta = da.utils.meta_from_array(first._meta, ndim=len(out_chunks), dtype=out_dtype)
    return array_from_graph(futures, name, out_chunks, out_dtype, meta)


# ---------------------------------------------------------------- halos


def extend_rows(comm: Any, block: Any, depth: int, clock: Any = None) -> tuple[Any, int, int]:
    """``block`` with ``depth`` rows of each neighbouring rank's block above and below (none past
    the first and last rank): (extended block, rows added above, rows added below). The extended
    block is made once: the neighbours' rows are received straight into its ends (no halo arrays,
    no concatenation) while the block is copied into its middle (on GPUs beside the exchange, on a
    stream of its own: the copy of a large block takes longer than the exchange of its halos)."""
    if depth == 0 or comm.size == 1:
        return block, 0, 0
    r, n = comm.rank, comm.size
    top, bottom = (depth if r > 0 else 0), (depth if r < n - 1 else 0)
    rows = block.shape[0]
    xp = array_module(block)
    with block.device if xp is not np else contextlib.nullcontext():  # on the block's GPU, with its current stream
        ext = xp.empty((top + rows + bottom,) + tuple(block.shape[1:]), block.dtype)
        copied = _copy_into(ext[top : top + rows], block, clock)
        if clock is not None:
            clock.mark("assemble")
        sends, recvs = {}, {}
        if top:
            sends[r - 1], recvs[r - 1] = block[:depth], ext[:top]
        if bottom:
            sends[r + 1], recvs[r + 1] = block[rows - depth :], ext[top + rows :]
        try:
            comm.exchange(sends, recvs)
        finally:  # what comes next on this thread's stream (``ext`` freed too, on a failure) waits for the copy
            if copied is not None:
                xp.cuda.get_current_stream().wait_event(copied)
        if clock is not None:
            clock.mark("exchange")
    return ext, top, bottom


_copy_streams: dict[int, Any] = {}  # device ordinal -> the stream extend_rows copies blocks on


def _copy_into(dst: Any, src: Any, clock: Any = None) -> Any:
    """``dst[...] = src``. Between C-contiguous CuPy arrays of one GPU: one device-to-device copy
    (cudaMemcpyAsync) on a stream of its own, ordered after the work queued so far on this thread's
    stream (which made ``src``); returns the event that marks its end (the caller's stream must wait
    for it). Otherwise a copy on this thread's stream (or on the host): None."""
    if not (is_device_array(dst) and type(src) is type(dst) and src.data.device_id == dst.data.device_id
            and src.flags.c_contiguous and dst.flags.c_contiguous and src.nbytes):
        dst[...] = src
        return None
    import cupy

    device = dst.data.device_id
    side = _copy_streams.get(device)
    if side is None:
        with cupy.cuda.Device(device):
            side = _copy_streams.setdefault(device, cupy.cuda.Stream(non_blocking=True))
    ready = cupy.cuda.Event(disable_timing=clock is None)
    ready.record(cupy.cuda.get_current_stream())
    side.wait_event(ready)
    dst.data.copy_from_device_async(src.data, src.nbytes, side)
    done = cupy.cuda.Event(disable_timing=clock is None)
    done.record(side)
    if clock is not None:
        clock.span("copy", ready, done)
    return done


class HaloCall:
    """``halo_map``'s function for ``spmd``, built once on the client and pickled once per graph
    (``spmd`` shares its function): the entry point and its scalar arguments (a ``BlockCall``
    template with gaps for the per-task values: the block, any whole arrays), which argument gets
    the halos, and their depth. The tasks then carry only their block, as any ``spmd`` task does."""

    __name__ = "halo_map"

    def __init__(self, call: Any, index: int, depth: int):
        self.call, self.index, self.depth = call, index, depth

    def __reduce__(self) -> tuple[Any, ...]:
        return (HaloCall, (self.call, self.index, self.depth))

    def __call__(self, comm: Any, *values: Any) -> Any:
        from . import phases
        from .blocks import call_entry

        args = self.call.arguments(values)
        entry = self.call.entry
        clock = phases.clock(is_device_array(args[self.index]))
        ext, top, bottom = extend_rows(comm, args[self.index], self.depth, clock)
        args[self.index] = ext
        out = call_entry(entry, args, block=(comm.rank,), nblocks=(comm.size,))
        if clock is not None:
            clock.mark("compute")
        if out.shape[0] != ext.shape[0]:
            raise ValueError(
                f"halo_map: {entry.name} returned {out.shape[0]} rows for an extended block of {ext.shape[0]}; "
                f"the entry point must keep the rows of its halo argument"
            )
        if top or bottom:  # the block's rows: a view (rows of a C-contiguous array are one C-contiguous run)
            out = array_module(out).ascontiguousarray(out[top : out.shape[0] - bottom])
        if clock is not None:
            clock.mark("trim")
            clock.finish(rank=comm.rank, size=comm.size)
        return out


def halo_map(target: Any, *args: Any, depth: int, comms: Any, name: str | None = None, sync: bool = False) -> Any:
    """Call an entry point once per worker on its block extended by ``depth`` rows of each
    neighbour; the result has the blocks' rows (see the module docstring). Exactly one argument is a
    dask array (one block per worker of ``comms``, as for ``spmd``); the rest go whole to every call."""
    from .array import entry as entry_ref
    from .plan import check_arguments

    ref = entry_ref(target)
    check_arguments(ref, args)
    chunked, _ = _check_layout(args, comms.size, f"halo_map({ref.name})")
    if len(chunked) != 1:
        raise ValueError(f"halo_map({ref.name}): exactly one argument may be a dask array (the one with halos), got {len(chunked)}")
    index = chunked[0]
    rows = args[index].chunks[0]
    if not isinstance(depth, (int, np.integer)) or depth < 0:
        raise ValueError(f"halo_map({ref.name}): depth must be a whole number of rows >= 0, got {depth!r}")
    if comms.size > 1 and depth > min(rows):
        raise ValueError(
            f"halo_map({ref.name}): depth {depth} is more rows than the smallest block has ({min(rows)}; chunks {rows}): "
            f"a neighbour cannot supply its halo; use fewer workers, bigger blocks or a smaller depth"
        )
    # Scalars go into the shared call; the block (and any whole array) into each task, as values.
    per_task = [i for i, p in enumerate(ref.info.inputs) if p.type not in PRIMITIVES]
    template = [None if i in per_task else a for i, a in enumerate(args)]
    call = BlockCall(ref, template, per_task, (comms.size,), sync)
    return spmd(HaloCall(call, index, int(depth)), *(args[i] for i in per_task), comms=comms,
                chunks=args[index].chunks, dtype=args[index].dtype, name=name, sync=sync)
