"""The graph of ``pybridge.dask.map_blocks``: one task per block, held as a few numbers until the
scheduler that runs it writes the tasks out.

Why not Dask's ``Blockwise``: the scheduler expands a ``Blockwise`` by substituting each argument
into each task in turn (a new task object per argument), and with the block index (``block_id``)
and the entry point's arguments pybridge's graph cost the scheduler 2-3 times what the same graph
in plain Dask did. Nor a dict of tasks built on the client: pickling 256 task objects there cost
the client more than the whole graph costs plain Dask. ``BlockCalls`` is a ``Layer`` (Dask's
interface for a symbolic part of a graph) that ships as its description (the shared
``blocks.BlockCall``, the block counts, each axis's block extents, the input keys) and builds each
task once, directly, where the graph is used: the task names its block and the block's elements,
so an error says which block failed. The price: Dask's graph optimisation does not fuse these
tasks with neighbouring blockwise operations.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any, Callable, Iterator, Sequence

import dask.array as da
from dask.highlevelgraph import Layer

from . import blocks

try:  # Dask's task objects (public as dask.task_spec since 2025); before that, tuple tasks
    from dask.task_spec import Task as _Task, TaskRef as _TaskRef

    _TASK_OBJECTS = True

    def _task(key: Any, fn: Callable[..., Any], *args: Any) -> Any:
        return _Task(key, fn, *args)
except ImportError:  # pragma: no cover - dask 2024.12
    _TASK_OBJECTS = False

    def _TaskRef(key: Any) -> Any:  # type: ignore[no-redef]
        return key

    def _task(key: Any, fn: Callable[..., Any], *args: Any) -> Any:
        return (fn, *args)

#: An input of every task: (True, name) for block k of the dask array ``name``; (False, key) for one
#: graph node every task reads (a whole array).
Input = tuple[bool, Any]


class BlockCalls(Layer):
    """The tasks ``(name, *block)`` of one ``map_blocks`` call (see the module docstring).

    ``nblocks``: the arguments' blocks along each axis; the result has the first ``rank`` of them
    (the axes a lower-rank result drops are one block). ``spans``: per result axis, each block's
    (first, end) element. ``only``: the argument block indices kept when the layer was culled."""

    def __init__(self, name: str, call: blocks.BlockCall, nblocks: Sequence[int], rank: int,
                 spans: Sequence[Sequence[tuple[int, int]]], inputs: Sequence[Input],
                 only: Sequence[tuple[int, ...]] | None = None, annotations: Any = None):
        super().__init__(annotations=annotations)
        self.name, self.call, self.rank = name, call, rank
        self.nblocks = tuple(nblocks)
        self.spans = tuple(tuple(s) for s in spans)
        self.inputs = tuple(inputs)
        self.only = None if only is None else tuple(only)

    def __reduce__(self) -> tuple[Any, ...]:  # the description travels, never the tasks
        return (BlockCalls, (self.name, self.call, self.nblocks, self.rank, self.spans, self.inputs, self.only,
                             self.annotations))

    def _indices(self) -> Iterator[tuple[int, ...]]:
        return iter(self.only) if self.only is not None else itertools.product(*(range(n) for n in self.nblocks))

    def _key(self, idx: tuple[int, ...]) -> tuple[Any, ...]:
        return (self.name, *idx[: self.rank])

    def _deps(self, idx: tuple[int, ...]) -> set[Any]:
        return {(k, *idx) if per_block else k for per_block, k in self.inputs}

    @functools.cached_property
    def _tasks(self) -> dict[Any, Any]:
        call, fn = self.call, blocks.map_block
        refs: list[tuple[bool, Any]] = [(per_block, k if per_block else _TaskRef(k)) for per_block, k in self.inputs]
        out = {}
        for idx in self._indices():
            block = idx[: self.rank]
            location = tuple(s[j] for s, j in zip(self.spans, block))
            key = (self.name, *block)
            args = [_TaskRef((k, *idx)) if per_block else k for per_block, k in refs]
            out[key] = _task(key, fn, call, block, location, *args)
        return out

    def __getitem__(self, key: Any) -> Any:
        return self._tasks[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._tasks)

    def __len__(self) -> int:
        return len(self.only) if self.only is not None else math.prod(self.nblocks)

    @property
    def has_legacy_tasks(self) -> bool:  # Dask's culling asks; the answer must not write the tasks out
        return not _TASK_OBJECTS

    def is_materialized(self) -> bool:
        return "_tasks" in self.__dict__

    def get_output_keys(self) -> set[Any]:
        return {self._key(idx) for idx in self._indices()}

    def get_dependencies(self, key: Any, all_hlg_keys: Any) -> set[Any]:
        return self._deps(tuple(key[1:]) + (0,) * (len(self.nblocks) - self.rank))

    def cull(self, keys: set[Any], all_hlg_keys: Any) -> tuple[Layer, dict[Any, set[Any]]]:
        kept = [idx for idx in self._indices() if self._key(idx) in keys]
        layer = self if len(kept) == len(self) else BlockCalls(
            self.name, self.call, self.nblocks, self.rank, self.spans, self.inputs, kept, self.annotations)
        return layer, {self._key(idx): self._deps(idx) for idx in kept}


def array_from_graph(graph: Any, name: str, chunks: Any, dtype: Any, meta: Any) -> da.Array:
    """A dask array over ``graph`` (a HighLevelGraph, or a dict of one future per block) whose
    blocks are the keys ``(name, *index)``. With Dask's array expressions switched on
    (``array.query-planning``), Dask names the blocks anew (aliases to these keys)."""
    if getattr(da, "_array_expr_enabled", lambda: False)():
        from dask.array._array_expr._collection import from_graph

        layer = dict(graph)
        keys = [k for k in layer if isinstance(k, tuple) and k[0] == name]
        return from_graph(layer, da.utils.meta_from_array(meta, dtype=dtype), chunks, keys, name)
    return da.Array(graph, name, chunks, dtype=dtype, meta=meta)
