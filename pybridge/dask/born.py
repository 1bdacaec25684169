"""Arrays whose blocks are made on the workers and stay there: nothing is generated on the client
and shipped.

    x = pbd.random((2**28 * 4,), chunks=2**28, seed=0, device=True)      # CuPy blocks, one per GPU
    g = pbd.from_function(lambda b, xp: xp.full(b.shape, b.index[0], "f4"), (8, 4), chunks=(2, 4))

Each block is one task, submitted to the worker that keeps it (``placement``: contiguous runs of
blocks per worker, in rank order) under the key ``(name, *index)``; the result is a dask array over
those futures, so the next step (``pbd.map_blocks``, ``pbd.spmd``) runs where the blocks are.
``device=True`` makes CuPy blocks on the worker's GPU (its ``PYBRIDGE_DASK_DEVICE``, else device
0: the worker's own GPU under ``local_cluster(devices=...)`` or dask-cuda); ``device=False`` NumPy
blocks. A block comes to the client only when asked (``.compute()``, ``pbd.to_host``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .placement import block_owner, worker_order


@dataclass(frozen=True)
class BlockInfo:
    """Where a block sits in its array: what a block function is given."""

    index: tuple[int, ...]  # the block's position in the grid of blocks
    shape: tuple[int, ...]  # its own shape
    start: tuple[int, ...]  # the array index of its first element
    nblocks: tuple[int, ...]

    @property
    def slices(self) -> tuple[slice, ...]:
        """The block's part of the whole array: ``whole[info.slices]`` (e.g. a memory-mapped file)."""
        return tuple(slice(s, s + n) for s, n in zip(self.start, self.shape))


def _array_module(device: bool) -> Any:
    if not device:
        return np
    import cupy

    return cupy


def _on_worker_device(device: bool) -> Any:
    """A context manager selecting this worker's GPU (a no-op for host blocks)."""
    import contextlib

    if not device:
        return contextlib.nullcontext()
    import os

    import cupy

    from .workers import DEVICE_ENV, device_ordinal

    return cupy.cuda.Device(device_ordinal(os.environ.get(DEVICE_ENV) or None))


def make_block(fn: Callable[[BlockInfo, Any], Any], info: BlockInfo, dtype: Any, device: bool) -> Any:
    """The task that makes one block on its worker (dtype and shape checked, device placement)."""
    xp = _array_module(device)
    with _on_worker_device(device):
        out = fn(info, xp)
        out = xp.asarray(out)  # a host array from a loader goes to the device here
        if out.shape != info.shape or out.dtype != np.dtype(dtype):
            raise ValueError(
                f"the block function made a {out.dtype} array of shape {out.shape} for block {info.index}, "
                f"but the array is {np.dtype(dtype)} and that block's shape is {info.shape}"
            )
        return out


def _seeded(seed: int, distribution: str, dtype: np.dtype) -> Callable[[BlockInfo, Any], Any]:
    """A block function drawing from a generator seeded by (seed, block index): the same array
    whatever the number of workers (for one kind of worker: CuPy and NumPy generators differ)."""

    def draw(info: BlockInfo, xp: Any) -> Any:
        state = np.random.SeedSequence(seed, spawn_key=info.index).generate_state(2, np.uint64)
        rng = xp.random.default_rng(int(state[0] >> np.uint64(1)))
        return getattr(rng, distribution)(size=info.shape, dtype=dtype.type)

    return draw


def from_function(fn: Callable[[BlockInfo, Any], Any], shape: Sequence[int], chunks: Any, dtype: Any = np.float32, *,
                  device: bool = False, client: Any = None, name: str | None = None,
                  workers: Sequence[str] | None = None) -> Any:
    """A dask array whose block ``b`` is ``fn(info, xp)``, made on the worker that keeps it.

    ``info``: a :class:`BlockInfo` (index, shape, start, slices); ``xp``: ``cupy`` when ``device``,
    else ``numpy``. ``fn`` may return a host array (a loader reading ``info.slices`` of a file):
    it is moved to the device there. ``chunks`` as for dask (``2**20``, ``(1000, 500)``, ...);
    ``workers`` limits the blocks to those workers (addresses or names)."""
    from dask.array.core import normalize_chunks
    from dask.base import tokenize
    from distributed import default_client

    from .graph import array_from_graph

    client = client or default_client()
    shape = tuple(int(s) for s in shape)
    dtype = np.dtype(dtype)
    chunks = normalize_chunks(chunks, shape, dtype=dtype)
    order = worker_order(client, workers)
    nblocks = tuple(len(c) for c in chunks)
    total = math.prod(nblocks)
    name = name or f"pybridge-born-{tokenize(fn, shape, chunks, dtype, device, order)}"
    starts = [np.concatenate([[0], np.cumsum(c)[:-1]]).astype(int) for c in chunks]
    futures = {}
    for flat, idx in enumerate(np.ndindex(*nblocks)):
        info = BlockInfo(tuple(idx), tuple(c[i] for c, i in zip(chunks, idx)),
                         tuple(int(s[i]) for s, i in zip(starts, idx)), nblocks)
        owner = order[block_owner(flat, total, len(order))]
        key = (name, *idx)
        # allow_other_workers: a block lost with its worker is made again on another, not waited for
        futures[key] = client.submit(make_block, fn, info, dtype, device, key=key, workers=[owner],
                                     allow_other_workers=True, pure=False)
    meta = _array_module(device).empty((0,) * len(shape), dtype)
    return array_from_graph(futures, name, chunks, dtype, meta)


def random(shape: Sequence[int], chunks: Any, *, seed: int = 0, dtype: Any = np.float32,
           distribution: str = "standard_normal", device: bool = False, client: Any = None,
           name: str | None = None, workers: Sequence[str] | None = None) -> Any:
    """Random blocks drawn on the workers (``standard_normal`` or ``random``: uniform on [0, 1)),
    each from its own generator seeded by ``(seed, block index)``."""
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"random: dtype must be float32 or float64, got {dtype}")
    if distribution not in ("standard_normal", "random"):
        raise ValueError(f"random: distribution must be 'standard_normal' or 'random', got {distribution!r}")
    return from_function(_seeded(int(seed), distribution, dtype), shape, chunks, dtype, device=device,
                         client=client, workers=workers, name=name)
