"""One task per worker, each on the block that worker holds: the shape of work that scales.

    out = pbd.spmd(step, x, y, comms=comms)          # step(comm, x_block, y_block) on every worker
    out = pbd.halo_map(jacobi, np.int32(100), grid, depth=100, comms=comms)

``spmd`` takes dask arrays split along their first axis into one block per worker (rank k's block is
block k: what ``pbd.random`` / ``pbd.from_function`` make with as many blocks as workers) and submits
one task per rank to the worker holding its blocks (``workers=[w]``, ``pure=False``), so a graph
costs Dask one task per GPU, whatever the size. Each task gets the communicator of ``comms`` (or a
plain :class:`Rank` without one) and its blocks; what it returns is its block of the result.

``halo_map`` is ``spmd`` for a stencil: each rank's block is extended by ``depth`` rows of each
neighbour (GPU to GPU over NCCL, or over the host transport), the entry point runs on the extended
block, and the halo rows are cut from its result.

Wrong chunking is refused on the client, before any task runs: a ValueError names the argument,
its chunks, and what is needed.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .blocks import array_module
from .plan import is_chunked
from .placement import worker_order


@dataclass(frozen=True)
class Rank:
    """What a task of ``spmd`` without communicators is told: its rank and how many there are."""

    rank: int
    size: int


def _check_layout(args: Sequence[Any], size: int, what: str) -> list[int]:
    """Indices of the chunked arguments, each checked: one block per worker along axis 0, one
    block along every other axis."""
    chunked = [i for i, a in enumerate(args) if is_chunked(a)]
    if not chunked:
        raise TypeError(f"{what}: no argument is a dask array, so there is nothing to split over the workers")
    for i in chunked:
        a = args[i]
        nb = a.numblocks
        if a.ndim == 0 or nb[0] != size or any(n != 1 for n in nb[1:]):
            fix = ", ".join([str(math.ceil(a.shape[0] / size)) if a.ndim else "?"] + ["-1"] * (a.ndim - 1))
            raise ValueError(
                f"{what}: argument {i} has chunks {a.chunks} ({nb} blocks), but it needs one block per worker: "
                f"{size} along axis 0 and 1 along any other, e.g. .rechunk(({fix},)) or made with {size} blocks"
            )
    return chunked


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


def run_rank(fn: Callable[..., Any], session: str | None, rank: int, size: int, *args: Any) -> Any:
    """The task of one rank: its communicator (checked to be this worker's own rank), then ``fn``."""
    if session is None:
        return fn(Rank(rank, size), *args)
    from .comms import CommsError, comm

    c = comm(session)
    if c.rank != rank:
        raise CommsError(
            f"the task of rank {rank} ran on the worker of rank {c.rank}: rank {rank}'s worker is gone "
            f"(died?) and its communicator with it; make a new Comms over the workers there are"
        )
    return fn(c, *args)


def spmd(fn: Callable[..., Any], *args: Any, comms: Any = None, client: Any = None, chunks: Any = None,
         dtype: Any = None, meta: Any = None, name: str | None = None) -> Any:
    """Run ``fn(comm, *blocks)`` once per worker (see the module docstring); a dask array of the
    results, block k from rank k. ``chunks``/``dtype``/``meta``: the result's (default: those of the
    first dask argument, the elementwise case)."""
    import dask.array as da
    from distributed import default_client

    client = client or (comms.client if comms is not None else default_client())
    order = comms.workers if comms is not None else worker_order(client)
    size = len(order)
    chunked = _check_layout(args, size, getattr(fn, "__name__", "spmd"))
    if comms is not None and not comms.initialized:
        raise ValueError("spmd: the Comms is not initialised: comms.init() (or use it in a with block)")
    first = args[chunked[0]]
    per_arg = {i: _block_futures(client, args[i]) for i in chunked}
    name = name or f"pybridge-spmd-{getattr(fn, '__name__', 'fn')}-{uuid.uuid4().hex}"  # a fresh key: pure=False
    session = comms.session if comms is not None else None
    futures = {}
    for r, w in enumerate(order):
        call = [per_arg[i][r] if i in per_arg else a for i, a in enumerate(args)]
        key = (name, r) + (0,) * (len(chunks) - 1 if chunks is not None else first.ndim - 1)
        # allow_other_workers: if rank r's worker died, the task runs elsewhere and says so
        # (run_rank's check) instead of waiting forever for a worker that will not come back.
        futures[key] = client.submit(run_rank, fn, session, r, size, *call, key=key, workers=[w],
                                     allow_other_workers=True, pure=False)
    out_chunks = tuple(tuple(c) for c in chunks) if chunks is not None else first.chunks
    out_dtype = np.dtype(dtype) if dtype is not None else first.dtype
    if meta is None:
        meta = da.utils.meta_from_array(first._meta, ndim=len(out_chunks), dtype=out_dtype)
    return da.Array(futures, name, out_chunks, dtype=out_dtype, meta=meta)


# ---------------------------------------------------------------- halos


def extend_rows(comm: Any, block: Any, depth: int) -> tuple[Any, int, int]:
    """``block`` with ``depth`` rows of each neighbouring rank's block above and below (none past
    the first and last rank): (extended block, rows added above, rows added below)."""
    if depth == 0 or comm.size == 1:
        return block, 0, 0
    r, n = comm.rank, comm.size
    shape = (depth,) + tuple(block.shape[1:])
    sends, recvs = {}, {}
    if r > 0:
        sends[r - 1], recvs[r - 1] = block[:depth], (shape, block.dtype)
    if r < n - 1:
        sends[r + 1], recvs[r + 1] = block[-depth:], (shape, block.dtype)
    got = comm.exchange(sends, recvs)
    xp = array_module(block)
    parts = ([got[r - 1]] if r > 0 else []) + [block] + ([got[r + 1]] if r < n - 1 else [])
    return xp.concatenate(parts, axis=0), (depth if r > 0 else 0), (depth if r < n - 1 else 0)


def _halo_task(comm: Any, entry: Any, index: int, depth: int, *args: Any) -> Any:
    from .blocks import call_entry

    ext, top, bottom = extend_rows(comm, args[index], depth)
    call = list(args)
    call[index] = ext
    out = call_entry(entry, call, block=(comm.rank,), nblocks=(comm.size,))
    if out.shape[0] != ext.shape[0]:
        raise ValueError(
            f"halo_map: {entry.name} returned {out.shape[0]} rows for an extended block of {ext.shape[0]}; "
            f"the entry point must keep the rows of its halo argument"
        )
    if not (top or bottom):
        return out
    xp = array_module(out)
    return xp.ascontiguousarray(out[top : out.shape[0] - bottom])


def halo_map(target: Any, *args: Any, depth: int, comms: Any, name: str | None = None) -> Any:
    """Call an entry point once per worker on its block extended by ``depth`` rows of each
    neighbour; the result has the blocks' rows (see the module docstring). Exactly one argument is a
    dask array (one block per worker, as for ``spmd``); the rest go whole to every call."""
    from .array import entry as entry_ref
    from .plan import check_arguments

    ref = entry_ref(target)
    check_arguments(ref, args)
    chunked = _check_layout(args, comms.size, f"halo_map({ref.name})")
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
    return spmd(_halo_task, ref, index, int(depth), *args, comms=comms, chunks=args[index].chunks,
                dtype=args[index].dtype, name=name)
