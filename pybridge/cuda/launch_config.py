"""Launch configurations: grid and block sizes and dynamic shared memory, checked before CUDA sees them.

    cfg = LaunchConfig(grid=grid_for(n, 256), block=256)

:class:`LaunchConfig` normalises ints to 3-tuples and rejects what no NVIDIA GPU accepts (zero or
negative sizes, more than 1024 threads per block, grid.y or grid.z above 65535) with a
:class:`~pybridge.cuda.errors.LaunchError` before CUDA sees it. Pure Python: testable without CUDA.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Union

from .errors import LaunchError

__all__ = ["Dim3", "LaunchConfig", "grid_for", "grid_2d", "shared_config"]

Dim3 = Union[int, Sequence[int]]

MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = (2**31 - 1, 65535, 65535)
# Dynamic shared memory beyond 48 KiB needs a per-kernel opt-in; Hopper allows up to 227 KiB.
DEFAULT_MAX_SHARED = 48 * 1024
MAX_SHARED_MEM = 2**32 - 1  # what fits cuLaunchKernel's unsigned int (the device refuses far less)

_LAUNCH_STRUCT = struct.Struct("=7I")


def _dim3(value: Dim3, what: str) -> tuple[int, int, int]:
    if isinstance(value, (bool, str, bytes)):
        raise LaunchError(f"{what} must be an int or a tuple of up to 3 ints, not {type(value).__name__}")
    try:
        # operator.index, not int(): a float such as 2.5 is refused, not truncated. A NumPy
        # array has __index__ too, which only 0-d ones honour: the others are sequences.
        try:
            dims = [operator.index(value)]  # type: ignore[arg-type]
        except TypeError:
            dims = [operator.index(v) for v in value]  # type: ignore[union-attr]
    except TypeError:
        raise LaunchError(f"{what} must be an int or a tuple of up to 3 ints, got {value!r}") from None
    if not 1 <= len(dims) <= 3:
        raise LaunchError(f"{what} must have 1 to 3 dimensions, got {value!r}")
    dims += [1] * (3 - len(dims))
    return dims[0], dims[1], dims[2]


@dataclass(frozen=True)
class LaunchConfig:
    """Grid and block sizes (1 to 3 dimensions) and dynamic shared memory in bytes."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int = 0

    def __init__(self, grid: Dim3, block: Dim3, shared_mem: int = 0) -> None:
        g = _dim3(grid, "grid")
        b = _dim3(block, "block")
        for axis, (v, hi) in enumerate(zip(g, MAX_GRID)):
            if v < 1:
                raise LaunchError(f"grid dimension {'xyz'[axis]} is {v}; every dimension must be at least 1 "
                                  "(for empty inputs, skip the launch or use grid_for, which never returns 0)")
            if v > hi:
                raise LaunchError(f"grid dimension {'xyz'[axis]} is {v}, above the limit {hi}")
        for axis, (v, hi) in enumerate(zip(b, MAX_BLOCK)):
            if v < 1:
                raise LaunchError(f"block dimension {'xyz'[axis]} is {v}; every dimension must be at least 1")
            if v > hi:
                raise LaunchError(f"block dimension {'xyz'[axis]} is {v}, above the limit {hi}")
        threads = b[0] * b[1] * b[2]
        if threads > MAX_THREADS_PER_BLOCK:
            raise LaunchError(f"block {b} has {threads} threads, above the limit {MAX_THREADS_PER_BLOCK}")
        try:
            shared = -1 if isinstance(shared_mem, bool) else operator.index(shared_mem)
        except TypeError:
            shared = -1
        if not 0 <= shared <= MAX_SHARED_MEM:  # cuLaunchKernel takes an unsigned int
            raise LaunchError(f"shared_mem must be a whole number of bytes in [0, {MAX_SHARED_MEM}], got {shared_mem!r}")
        object.__setattr__(self, "grid", g)
        object.__setattr__(self, "block", b)
        object.__setattr__(self, "shared_mem", shared)
        # What cuLaunchKernel takes, in its order, flattened once, and as 7 native unsigned ints
        # (the direct launch path hands these bytes to C: pybridge.cuda._cshim.pb_launch_cfg).
        object.__setattr__(self, "launch_args", (*g, *b, shared))
        object.__setattr__(self, "launch_bytes", _LAUNCH_STRUCT.pack(*g, *b, shared))

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def total_threads(self) -> int:
        return self.threads_per_block * self.grid[0] * self.grid[1] * self.grid[2]


def grid_for(n: int, block: Dim3 = 256, *, max_blocks: int | None = None) -> int:
    """Blocks of ``block`` threads covering ``n`` items, at least 1 (a 0-block launch is an error;
    kernels bound-check, so one block with nothing to do is fine), at most ``max_blocks``
    (for grid-stride loops)."""
    try:
        n = operator.index(n)  # NumPy ints too; a float count is a caller's bug, not truncated
    except TypeError:
        raise TypeError(f"grid_for: n must be an integer, got {n!r} ({type(n).__name__})") from None
    if n < 0:
        raise ValueError(f"grid_for: n must be >= 0, got {n}")
    b = _dim3(block, "block")
    if min(b) < 1:
        raise ValueError(f"grid_for: block dimensions must be at least 1, got {block!r}")
    per_block = b[0] * b[1] * b[2]
    blocks = max(1, -(-n // per_block))
    if max_blocks is not None:
        blocks = min(blocks, max(1, int(max_blocks)))
    return blocks


def grid_2d(width: int, height: int, block: tuple[int, int] = (16, 16)) -> tuple[int, int]:
    """Blocks covering a width x height image with 2-D blocks (x along width), each at least 1."""
    bx, by = block
    return max(1, -(-int(width) // bx)), max(1, -(-int(height) // by))


# One LaunchConfig per distinct plain configuration (see shared_config).
_configs: dict[tuple[Any, ...], LaunchConfig] = {}

def shared_config(grid: Dim3, block: Dim3, shared_mem: int) -> LaunchConfig:
    """``LaunchConfig(grid, block, shared_mem)``, one object per distinct configuration of plain ints
    / tuples of ints (a LaunchConfig is immutable, so the checks run once); anything else is built
    (and checked) each time."""
    key = None
    tg, tb = type(grid), type(block)
    if (
        type(shared_mem) is int
        and (tg is int or (tg is tuple and all(type(v) is int for v in grid)))  # type: ignore[union-attr]
        and (tb is int or (tb is tuple and all(type(v) is int for v in block)))  # type: ignore[union-attr]
    ):
        key = (grid, block, shared_mem)
        config = _configs.get(key)
        if config is not None:
            return config
    config = LaunchConfig(grid=grid, block=block, shared_mem=shared_mem)
    if key is not None:
        if len(_configs) >= 4096:
            _configs.clear()
        _configs[key] = config
    return config
