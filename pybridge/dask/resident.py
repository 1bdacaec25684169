"""Per-worker state that lives as long as the worker: libraries loaded once, closed at the end.

    client.register_plugin(pbd.PybridgeWorker([saxpy, pbd.entry("jacobi", "jacobi")]))

``setup`` (on every worker, and on every worker that joins later, a replacement included) loads
each named library into the worker's context cache (``workers.worker_slot``: one context per
library, device and configuration), so the first task does not pay for it; a library that cannot
load there fails the registration (or, on a replacement, the first task that needs it) with a
:class:`~pybridge.dask.workers.WorkerLibraryError` naming the worker and the file. Tasks find the
contexts by the small picklable references in the graph: nothing heavy is pickled per task.
``teardown`` closes the worker's communicators (``pbd.Comms``, each bounded by its deadline) and
Futhark contexts, and drops its loaded CUDA kernels.
"""

from __future__ import annotations

from typing import Any, Sequence

from distributed import WorkerPlugin

from .refs import LibraryRef
from .workers import close_all, stats, worker_slot


class PybridgeWorker(WorkerPlugin):
    name = "pybridge-worker"

    def __init__(self, preload: Sequence[Any] = ()):
        from .array import entry

        refs: list[LibraryRef] = []
        for p in preload:  # a LibraryRef, or anything pbd.entry takes (an EntryRef, lib.saxpy)
            ref = p if isinstance(p, LibraryRef) else entry(p).library
            if ref not in refs:
                refs.append(ref)
        self.libraries = tuple(refs)

    def setup(self, worker: Any) -> None:
        for ref in self.libraries:
            worker_slot(ref)
        worker._pybridge_preloaded = [ref.path for ref in self.libraries]

    def teardown(self, worker: Any) -> None:
        from .comms import destroy_all
        from .kernels import forget_kernels

        destroy_all(worker)
        close_all()
        forget_kernels()


def worker_state(dask_worker: Any = None) -> dict[str, Any]:
    """What a worker holds (for ``client.run(pbd.worker_state)``): contexts and calls per library,
    the libraries the plugin preloaded, the communicators' sessions."""
    from .comms import _STATE

    out = stats()
    out["preloaded"] = list(getattr(dask_worker, "_pybridge_preloaded", []))
    out["comms"] = sorted(getattr(dask_worker, _STATE, {}))
    return out
