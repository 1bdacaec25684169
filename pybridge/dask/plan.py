"""Client-side checks of a blockwise call: which arguments are chunked, whether their chunks agree
where the entry point ties sizes together, and the chunks and dtype of the result.

**The rule for tied sizes.** Dask arrays among the arguments are *chunked*: call k gets block k of
each, so they must have the same rank and the same number of blocks along every axis. Anything
else (a NumPy array, a scalar) is *whole*: every call gets all of it. Where the entry point's
source gives two dimensions one size name (``entry saxpy [n] (a: f32) (xs: [n]f32) (ys: [n]f32)``):

- two chunked dimensions named alike must have identical chunks (else: a ValueError naming both
  arguments, their chunks, and the ``rechunk`` that fixes it — never a silent rechunk);
- a chunked dimension named like a whole one must be one chunk of that size.

Without the source (a library whose ``.fut`` is not beside it or in the checkout), or without
``pybridge.testing`` (which parses it) installed, the strict rule applies: all chunked arguments must
have identical chunks. The result's chunks follow from the result type's size names (bound to a
chunked or whole dimension, or to a scalar parameter's value); otherwise from the first chunked
argument (the elementwise case), unless ``chunks=`` is given.

No dask import: this module looks at ``.chunks``, ``.shape``, ``.dtype`` and ``.ndim`` only.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..futhark.manifest import ArrayInfo
from ..futhark.types import PRIMITIVES, scalar_to_numpy
from .refs import EntryRef, manifest_of

Chunks = tuple[tuple[int, ...], ...]


def is_chunked(x: Any) -> bool:
    """A dask array (duck-typed, so this module needs no dask)."""
    return hasattr(x, "chunks") and hasattr(x, "__dask_graph__")


@dataclass(frozen=True)
class Whole:
    """A whole (unchunked) array argument already on the workers (:func:`pybridge.dask.scatter`):
    its shape and dtype for the checks, and the future the tasks receive. A NumPy or CuPy array
    passed as is goes into each graph, so every run ships it from the client again."""

    future: Any
    shape: tuple[int, ...]
    dtype: Any

    @property
    def ndim(self) -> int:
        return len(self.shape)


@dataclass(frozen=True)
class Plan:
    entry: EntryRef
    chunked: tuple[int, ...]  # indices of the chunked arguments
    numblocks: tuple[int, ...]
    result_dims: tuple[Any, ...] | None  # the result type's size names, when the source says


@lru_cache(maxsize=256)
def _source_dims(entry: EntryRef) -> tuple[list[tuple[Any, ...] | None], tuple[Any, ...] | None, list[str | None]] | None:
    """(dims per parameter, dims of the result, parameter names) from the ``.fut`` source; None
    when the source or the parser is not available."""
    try:
        from ..futhark.source import load_source, resolve
        from ..testing.strategies import find_source
    except ImportError:
        return None
    src = find_source(Path(entry.library.path))
    if src is None:
        return None
    info = load_source(src)
    decl = info.entries.get(entry.name)
    if decl is None or len(decl.params) != len(entry.info.inputs):
        return None
    dims = [resolve(p.type, info.types).dims if p.type.kind != "unknown" else None for p in decl.params]
    result = resolve(decl.result, info.types).dims if decl.result is not None and decl.result.kind != "unknown" else None
    return dims, result, [p.name for p in decl.params]


def _param_name(entry: EntryRef, i: int) -> str:
    return entry.info.inputs[i].name


def check_arguments(entry: EntryRef, args: Sequence[Any]) -> None:
    """Each argument against its parameter's manifest type (count, dtype, rank, scalar range)."""
    info = entry.info
    if len(args) != len(info.inputs):
        sig = ", ".join(f"{p.name}: {p.type}" for p in info.inputs)
        raise TypeError(f"{entry.name}({sig}) takes {len(info.inputs)} argument(s), got {len(args)}")
    types = manifest_of(entry.library).types
    for p, a in zip(info.inputs, args):
        what = f"{entry.name}: parameter {p.name!r}"
        prim = PRIMITIVES.get(p.type)
        if prim is not None:
            if is_chunked(a) or (isinstance(a, np.ndarray) and a.ndim > 0):
                raise TypeError(f"{what} is a scalar ({p.type}): pass a number, not an array")
            scalar_to_numpy(prim, a, what)  # range and kind checked here, not in every task
            continue
        t = types.get(p.type)
        if not isinstance(t, ArrayInfo):
            raise TypeError(f"{what} has the opaque type {p.type}, which pybridge.dask cannot split into blocks")
        if not (is_chunked(a) or isinstance(a, (np.ndarray, Whole)) or hasattr(a, "__cuda_array_interface__")):
            raise TypeError(f"{what}: expected a dask array or a NumPy/CuPy array ({p.type}), got {type(a).__name__}")
        dtype = PRIMITIVES[t.elemtype].dtype
        if np.dtype(a.dtype) != dtype:
            raise TypeError(f"{what}: expected dtype {dtype} ({p.type}), got {a.dtype}; convert with .astype(np.{dtype.name})")
        if a.ndim != t.rank:
            raise TypeError(f"{what}: expected a {t.rank}-d array ({p.type}), got {a.ndim}-d")


def _mismatch(entry: EntryRef, size: str, a: tuple[str, int, Any], b: tuple[str, int, Any], fix: str) -> ValueError:
    return ValueError(
        f"{entry.name}: parameters {a[0]!r} (axis {a[1]}) and {b[0]!r} (axis {b[1]}) share the size {size}, "
        f"but {a[0]!r} has chunks {a[2]} and {b[0]!r} has {b[2]} there; {fix}"
    )


def plan_blocks(entry: EntryRef, args: Sequence[Any]) -> Plan:
    """Check the arguments and their chunks (see the module docstring)."""
    check_arguments(entry, args)
    chunked = tuple(i for i, a in enumerate(args) if is_chunked(a))
    if not chunked:
        raise TypeError(f"{entry.name}: no argument is a dask array, so there are no blocks to map over")
    first = args[chunked[0]]
    source = _source_dims(entry)
    if source is None:
        for i in chunked[1:]:
            if args[i].chunks != first.chunks:
                p, q = _param_name(entry, chunked[0]), _param_name(entry, i)
                raise ValueError(
                    f"{entry.name}: chunked parameters {p!r} and {q!r} have different chunks ({first.chunks} vs "
                    f"{args[i].chunks}) and the program's source is not available to say which sizes they share; "
                    f"rechunk one like the other: {q}.rechunk({p}.chunks)"
                )
        return Plan(entry, chunked, tuple(first.numblocks), None)
    dims, result, _ = source
    seen: dict[str, tuple[str, int, Any, bool]] = {}  # size name -> (param, axis, chunks or size, chunked)
    for i, a in enumerate(args):
        for axis, d in enumerate(dims[i] or ()):
            if not isinstance(d, str):
                continue
            here = (_param_name(entry, i), axis, a.chunks[axis] if i in chunked else a.shape[axis], i in chunked)
            other = seen.setdefault(d, here)
            if other is not here:
                _check_tie(entry, d, other, here)
    for i in chunked[1:]:  # untied axes may differ in chunk sizes, not in the number of blocks
        a = args[i]
        if a.ndim != first.ndim or a.numblocks != first.numblocks:
            raise ValueError(
                f"{entry.name}: chunked parameters {_param_name(entry, chunked[0])!r} and {_param_name(entry, i)!r} "
                f"must have the same number of blocks along each axis, got {first.numblocks} and {a.numblocks}"
            )
    return Plan(entry, chunked, tuple(first.numblocks), tuple(result) if result is not None else None)


def _check_tie(entry: EntryRef, size: str, a: tuple[str, int, Any, bool], b: tuple[str, int, Any, bool]) -> None:
    (pa, xa, ca, chunked_a), (pb, xb, cb, chunked_b) = a, b
    if chunked_a and chunked_b:
        if ca != cb:
            raise _mismatch(entry, size, (pa, xa, ca), (pb, xb, cb), f"rechunk one like the other, e.g. {pb}.rechunk({{{xb}: {pa}.chunks[{xa}]}})")
        return
    if not chunked_a and not chunked_b:
        if ca != cb:
            raise ValueError(f"{entry.name}: parameters {pa!r} and {pb!r} share the size {size}, but it is {ca} in one and {cb} in the other")
        return
    (pc, xc, chunks), (pw, xw, whole) = ((pa, xa, ca), (pb, xb, cb)) if chunked_a else ((pb, xb, cb), (pa, xa, ca))
    if tuple(chunks) != (whole,):
        raise ValueError(
            f"{entry.name}: parameter {pc!r} (axis {xc}) shares the size {size} with the whole array {pw!r} "
            f"(axis {xw}, size {whole}), so it must be one chunk of {whole} there, but its chunks are {chunks}; "
            f"rechunk it: {pc}.rechunk({{{xc}: -1}})"
        )


def result_type(entry: EntryRef, single: bool = True) -> ArrayInfo | str:
    """The (single) result's manifest type: an ArrayInfo, or a primitive's name."""
    outs = entry.info.outputs
    if single and len(outs) != 1:
        raise TypeError(f"{entry.name} returns {len(outs)} values; pybridge.dask maps entry points with one result")
    t = outs[0].type
    if t in PRIMITIVES:
        return t
    at = manifest_of(entry.library).types.get(t)
    if not isinstance(at, ArrayInfo):
        raise TypeError(f"{entry.name} returns the opaque type {t}, which pybridge.dask cannot assemble into an array")
    return at


def result_dtype(entry: EntryRef) -> np.dtype:
    t = result_type(entry)
    return PRIMITIVES[t if isinstance(t, str) else t.elemtype].dtype


def _bound_size(entry: EntryRef, plan: Plan, args: Sequence[Any], name: str, nblocks: int) -> tuple[int, ...] | None:
    """Chunks along a result axis whose size is ``name``: from a chunked or whole argument's dimension
    of that name, or from a scalar parameter of that name (the same in every block)."""
    source = _source_dims(entry)
    assert source is not None
    dims, _, pnames = source
    for i, a in enumerate(args):
        for axis, d in enumerate(dims[i] or ()):
            if d == name:
                if i in plan.chunked:
                    return tuple(a.chunks[axis])
                return (int(a.shape[axis]),) * nblocks
    for i, pname in enumerate(pnames):
        if pname == name and entry.info.inputs[i].type in PRIMITIVES:
            return (int(args[i]),) * nblocks
    return None


def result_chunks(plan: Plan, args: Sequence[Any]) -> Chunks:
    """The chunks of a map_blocks result (see the module docstring); ValueError when unknown."""
    entry = plan.entry
    t = result_type(entry)
    if isinstance(t, str):
        raise TypeError(f"{entry.name} returns a scalar ({t}) per block: use pybridge.dask.reduction to combine them")
    rank = len(plan.numblocks)
    if t.rank > rank or any(n != 1 for n in plan.numblocks[t.rank :]):
        raise ValueError(
            f"{entry.name} returns a {t.rank}-d array from {rank}-d blocks split {plan.numblocks}: a result may drop "
            f"trailing block axes only where they are one block; pass chunks= or rechunk"
        )
    first = args[plan.chunked[0]]
    if plan.result_dims is None:
        return tuple(first.chunks[: t.rank])  # the elementwise case, as dask's own map_blocks assumes
    out = []
    for axis, d in enumerate(plan.result_dims):
        c = _bound_size(entry, plan, args, d, plan.numblocks[axis]) if isinstance(d, str) else None
        if isinstance(d, int):
            c = (d,) * plan.numblocks[axis]
        if c is None:
            raise ValueError(f"{entry.name}: the size of result axis {axis} ({d}) is not known before the call; pass chunks=")
        if len(c) != plan.numblocks[axis]:
            raise ValueError(
                f"{entry.name}: result axis {axis} has size {d} from a whole argument, but the blocks are split "
                f"{plan.numblocks[axis]} ways along that axis; pass chunks= or make that axis one chunk"
            )
        out.append(c)
    return tuple(out)


def result_shape(entry: EntryRef, args: Sequence[Any]) -> tuple[int, ...] | None:
    """The shape of one result (a reduction's partial): () for a scalar; for an array, sizes bound
    to whole arguments or scalar parameters; None when not known before the call."""
    t = result_type(entry)
    if isinstance(t, str):
        return ()
    source = _source_dims(entry)
    if source is None or source[1] is None:
        return None
    plan = Plan(entry, tuple(i for i, a in enumerate(args) if is_chunked(a)), (), tuple(source[1]))
    shape = []
    for d in source[1]:
        c = _bound_size(entry, plan, args, d, 1) if isinstance(d, str) else ((d,) if isinstance(d, int) else None)
        if c is None or len(c) != 1:
            return None
        shape.append(c[0])
    return tuple(shape)
