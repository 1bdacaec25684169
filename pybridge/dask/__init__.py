"""pybridge.dask: Futhark entry points (and pybridge CUDA kernels) over the blocks of dask arrays.

    import dask.array as da
    from distributed import Client
    import pybridge.dask as pbd

    client = Client(pbd.local_cluster(n_workers=2))          # or devices=[0, 1]: one worker per GPU
    xs = da.random.random(10**7, chunks=10**6).astype("f4")
    out = pbd.map_blocks(pbd.entry("saxpy", "saxpy"), 2.0, xs, xs)       # elementwise, per block
    dot = pbd.reduction(pbd.entry("dot", "dot"), xs, xs, combine=pbd.entry("dot", "sum"))

Many GPUs (docs/scale-out.md): data made on the workers (``random``, ``from_function``), one task
per worker (``spmd``, ``halo_map``), GPU-to-GPU collectives inside tasks (``Comms``: NCCL, or TCP
between CPU workers), libraries loaded once per worker (``PybridgeWorker``), results reported
without Dask's batching delay (``low_latency(client)``).

Layers: ``refs`` (picklable library / entry references) -> ``workers`` (one context per library per
worker process, calls serialised) -> ``blocks`` (one task: chunks in, entry point, chunks out,
errors naming the block and worker) -> ``plan`` (argument and chunk checks, the tied-size rule) ->
``array`` (map_blocks, reduction) and ``kernels`` (CUDA kernels, same mechanism); ``cluster`` makes
one worker per GPU and ``batching`` turns a client's message batching off; ``placement`` ranks workers and places blocks; ``born`` makes blocks on the
workers; ``comms`` / ``nccl`` are the communicators; ``spmd`` runs one task per worker;
``resident`` is the worker plugin. Needs dask and distributed: ``pip install 'dask[array]' distributed``.
"""

from __future__ import annotations

from ..distribution import install_hint

try:
    import dask.array  # noqa: F401
    import distributed  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised where dask is absent
    raise ImportError(f"pybridge.dask needs dask and distributed: {install_hint('dask')} [{e}]") from e

from .array import entry, map_blocks, reduction, scatter, to_device, to_host
from .batching import low_latency
from .born import BlockInfo, from_function, random
from .cluster import WorkerDevices, cpu_affinity_report, local_cluster
from .comms import Comms, CommsError, CommsTimeoutError, comm
from .kernels import KernelRef, kernel, map_kernel
from .plan import Whole
from .refs import EntryRef, LibraryRef
from .resident import PybridgeWorker, worker_state
from .spmd import Rank, extend_rows, halo_map, spmd
from .workers import DEVICE_ENV, WorkerLibraryError, close_all, stats

__all__ = [
    "DEVICE_ENV",
    "BlockInfo",
    "Comms",
    "CommsError",
    "CommsTimeoutError",
    "EntryRef",
    "KernelRef",
    "LibraryRef",
    "PybridgeWorker",
    "Rank",
    "Whole",
    "WorkerDevices",
    "WorkerLibraryError",
    "close_all",
    "comm",
    "cpu_affinity_report",
    "entry",
    "extend_rows",
    "from_function",
    "halo_map",
    "kernel",
    "local_cluster",
    "low_latency",
    "map_blocks",
    "map_kernel",
    "random",
    "reduction",
    "scatter",
    "spmd",
    "stats",
    "to_device",
    "to_host",
    "worker_state",
]
