"""Futhark entry points over the blocks of dask arrays: ``map_blocks`` and tree ``reduction``.

    import dask.array as da, pybridge.dask as pbd
    saxpy = pbd.entry("saxpy", "saxpy", backend="c")        # or pbd.entry(lib.saxpy)
    out = pbd.map_blocks(saxpy, 2.0, xs, ys)                 # a dask array, block k = saxpy(2, xs_k, ys_k)
    total = pbd.reduction(pbd.entry("dot", "dot"), xs, ys, combine=pbd.entry("dot", "sum"))
    total.compute()                                          # sum over blocks of dot(xs_k, ys_k)

The graph holds picklable references (``EntryRef``); each worker process runs them in its own
context (``workers.py``), one per library, created on its first task.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import numpy as np

import dask
import dask.array as da
from dask.base import tokenize
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph

from ..futhark import EntryPoint
from ..futhark.manifest import ArrayInfo
from . import blocks
from .graph import BlockCalls, array_from_graph
from .plan import Chunks, Plan, Whole, is_chunked, plan_blocks, result_chunks, result_dtype, result_shape, result_type
from .refs import EntryRef, LibraryRef


def entry(target: Any, name: str | None = None, backend: str | None = None, **config: Any) -> EntryRef:
    """A reference to an entry point that workers can load.

    ``target``: an entry point of a loaded library (``lib.saxpy``: the workers load the same file
    with the same options), an ``EntryRef``, or a library name / ``lib<prog>.so`` / ``<prog>.json``
    / ``.fut`` path with the entry's ``name`` (``backend`` and ``pf.load`` options as for ``load``).
    """
    if isinstance(target, EntryRef):
        return target
    if isinstance(target, EntryPoint):
        if name is not None and name != target.name:
            raise ValueError(f"entry: got the entry point {target.name!r} and name={name!r}")
        return EntryRef(LibraryRef.of(target.library), target.name)
    if isinstance(target, (str, os.PathLike)):
        if name is None:
            raise TypeError("entry: name the entry point: pbd.entry('saxpy', 'saxpy')")
        ref = EntryRef(LibraryRef.find(target, backend, **config), name)
        ref.info  # noqa: B018 - a missing entry point fails here, naming the ones there are
        return ref
    raise TypeError(f"entry: expected a Futhark entry point, an EntryRef or a library path, got {type(target).__name__}")


def _meta(entry_ref: EntryRef, args: Sequence[Any], ndim: int, dtype: np.dtype) -> Any:
    """An empty array of the chunk type the blocks will have (CuPy for device chunks on cuda)."""
    first = next((a for a in args if is_chunked(a)), None)
    if entry_ref.library.backend == "cuda" and first is not None:
        return da.utils.meta_from_array(first._meta, ndim=ndim, dtype=dtype)
    return np.empty((0,) * ndim, dtype=dtype)


def _whole(a: Any) -> Any:
    """A whole (unchunked) array argument (NumPy or CuPy) goes into the graph once, not once per
    task: each worker receives it once and keeps it for all its blocks."""
    if isinstance(a, Whole):
        return dask.delayed(a.future)  # on the workers already: the graph names it
    return dask.delayed(a) if getattr(a, "ndim", 0) > 0 and not is_chunked(a) else a


def scatter(client: Any, x: Any) -> Whole:
    """Put a whole array argument on every worker once (``client.scatter(x, broadcast=True)``), for
    graphs that use it many times: ``pbd.map_blocks(matmul, a_blocks, pbd.scatter(client, b))``."""
    shape, dtype = tuple(int(d) for d in x.shape), np.dtype(x.dtype)
    return Whole(client.scatter(x, broadcast=True, hash=False), shape, dtype)


def map_blocks(target: Any, *args: Any, chunks: Sequence[Sequence[int]] | None = None,
               name: str | None = None, sync: bool = False) -> da.Array:
    """Call an entry point once per block; the results are the blocks of a new dask array.

    Dask arrays among ``args`` are split into blocks (block k of each goes to call k); NumPy arrays
    and scalars go whole to every call. Sizes the entry ties together must be chunked alike (see
    ``pybridge.dask.plan``), else a ValueError names both arguments. The result's chunks come from
    the result type's size names or, failing that, the first dask argument; ``chunks=`` overrides.
    ``name``: the result's key prefix, as in dask's own ``map_blocks`` (default: a hash of the
    arguments, so the same call gives the same keys). ``sync=True``: each task waits for its GPU
    work before it returns (GPU calls are asynchronous otherwise), so a finished task means a
    computed block, and an error of that work names its block.
    """
    ref = entry(target)
    plan = plan_blocks(ref, args)
    out_chunks = _given_chunks(ref, plan, chunks) if chunks is not None else result_chunks(plan, args)
    dtype = result_dtype(ref)
    given = [_whole(a) for a in args]  # whole arrays as graph nodes (a Delayed), the rest as they are
    if name is None:  # a Delayed tokenizes as its key: a whole array is not hashed on every call
        name = f"pybridge-{ref.name}-{tokenize(ref, out_chunks, sync, *given)}"
    meta = _meta(ref, args, len(out_chunks), dtype)
    return array_from_graph(_block_graph(name, ref, given, plan, out_chunks, sync), name, out_chunks, dtype, meta)


def _block_graph(name: str, ref: EntryRef, args: Sequence[Any], plan: Plan, out_chunks: Chunks, sync: bool) -> HighLevelGraph:
    """``map_blocks``'s graph: one task per block (``graph.BlockCalls``: why not Dask's own).

    ``args``: the entry point's arguments, dask arrays (``plan.chunked``: block k of each goes to
    task k) and whole arrays as ``Delayed`` graph nodes (every task names the one node), the rest
    (scalars) as they are."""
    nodes = [i for i, a in enumerate(args) if i in plan.chunked or isinstance(a, Delayed)]
    call = blocks.BlockCall(ref, [None if i in nodes else a for i, a in enumerate(args)], nodes, plan.numblocks, sync)
    spans = []  # per result axis, each block's (first, end) element
    for c in out_chunks:
        ends = np.cumsum(c).tolist()
        spans.append(list(zip([0] + ends[:-1], ends)))
    inputs = [(True, args[i].name) if i in plan.chunked else (False, args[i].key) for i in nodes]
    layer = BlockCalls(name, call, plan.numblocks, len(out_chunks), spans, inputs)
    return HighLevelGraph.from_collections(name, layer, dependencies=[args[i] for i in nodes])


def _given_chunks(ref: EntryRef, plan: Plan, chunks: Sequence[Sequence[int]]) -> Chunks:
    """``chunks=`` checked against the blocks: one block of the result per block of the arguments
    (a lower-rank result drops trailing axes that are one block)."""
    out = tuple(tuple(int(n) for n in c) for c in chunks)
    rank = len(out)
    if rank > len(plan.numblocks) or any(len(c) != n for c, n in zip(out, plan.numblocks)) or any(
            n != 1 for n in plan.numblocks[rank:]):
        raise ValueError(
            f"{ref.name}: chunks={out} gives the result {tuple(len(c) for c in out)} blocks, but the arguments are "
            f"split {plan.numblocks}: one result block per call, so the same number of blocks along each axis "
            f"(a result of lower rank drops trailing axes that are one block)"
        )
    return out


def _combine_ref(combine: Any, partial_type: ArrayInfo | str, default: EntryRef) -> EntryRef | Callable[[Any], Any]:
    """The combine step: a callable as is; an entry point checked to take the stacked partials."""
    if combine is None:
        combine = default
    if callable(combine) and not isinstance(combine, (EntryPoint, EntryRef)):
        return combine
    ref = entry(combine)
    elem = partial_type if isinstance(partial_type, str) else partial_type.elemtype
    rank = 0 if isinstance(partial_type, str) else partial_type.rank
    want = "[]" * (rank + 1) + elem
    ins = ref.info.inputs
    outs = ref.info.outputs
    ok_in = len(ins) == 1 and ins[0].type == want
    ok_out = len(outs) == 1 and outs[0].type == (elem if rank == 0 else "[]" * rank + elem)
    if not (ok_in and ok_out):
        sig = ", ".join(p.type for p in ins) + " -> " + ", ".join(o.type for o in outs)
        what = "the reducing entry point itself" if ref == default else f"combine {ref.name}"
        raise TypeError(
            f"reduction: {what} ({sig}) cannot combine partials: the combine step takes the partial results "
            f"stacked ({want}) and returns one ({outs[0].type if outs else elem}); pass combine= an entry "
            f"point of that type (e.g. a sum) or a Python function"
        )
    return ref


def reduction(target: Any, *args: Any, combine: Any = None, split_every: int = 8,
              shape: Sequence[int] | None = None) -> da.Array:
    """Reduce dask arrays with an entry point: one call per block gives a partial result, then a
    tree of ``combine`` steps (at most ``split_every`` partials each) gives one. Returns a dask array
    of the partial's shape (0-d for a scalar: ``.compute()`` gives a NumPy scalar array).

    ``combine``: an entry point taking the partials stacked on a new first axis (``[k]f32 -> f32``,
    ``[k][nbins]i32 -> [nbins]i32``), or a Python function doing the same; by default the reducing
    entry point itself, when it has that type (``sum``). The tied-size rule is map_blocks's.
    ``shape``: the partial's shape, when the source does not tell (an array result sized by data).
    """
    ref = entry(target)
    if split_every < 2:
        raise ValueError(f"reduction: split_every must be at least 2, got {split_every}")
    plan = plan_blocks(ref, args)
    ptype = result_type(ref)
    step = _combine_ref(combine, ptype, ref)
    pshape = tuple(shape) if shape is not None else result_shape(ref, args)
    if pshape is None:
        raise ValueError(f"reduction: the shape of {ref.name}'s result is not known before the call; pass shape=")
    dtype = result_dtype(ref)
    per_arg = [a.to_delayed(optimize_graph=False) if is_chunked(a) else _whole(a) for a in args]
    nblocks = plan.numblocks
    level = [
        dask.delayed(blocks.reduce_block, pure=True)(
            ref, idx, nblocks, *(p[idx] if is_chunked(a) else p for p, a in zip(per_arg, args))
        )
        for idx in np.ndindex(*nblocks)
    ]
    while len(level) > 1:
        level = [
            dask.delayed(blocks.combine_partials, pure=True)(step, *level[i : i + split_every])
            for i in range(0, len(level), split_every)
        ]
    # Scalar partials come back to the host (a Futhark scalar result is read after a sync); array
    # partials keep the chunk type.
    meta = _meta(ref, args, len(pshape), dtype) if pshape else np.empty((), dtype)
    return da.from_delayed(level[0], shape=pshape, dtype=dtype, meta=meta)


def to_device(x: da.Array) -> da.Array:
    """Blocks copied to each worker's GPU as CuPy arrays (the host-to-device edge of a pipeline)."""
    import cupy

    return da.map_blocks(blocks.to_device_array, x, dtype=x.dtype, meta=cupy.empty((0,) * x.ndim, x.dtype))


def to_host(x: da.Array) -> da.Array:
    """Blocks copied back to NumPy (the device-to-host edge)."""
    return da.map_blocks(blocks.to_host_array, x, dtype=x.dtype, meta=np.empty((0,) * x.ndim, x.dtype))

