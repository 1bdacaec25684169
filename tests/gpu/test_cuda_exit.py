"""A process that used pybridge.cuda's kernel path exits cleanly (status 0), whichever threads
launched: PyCUDA aborts the process (signal 6, "PyCUDA ERROR: The context stack was not empty upon
module cleanup") when a thread ends with a context still pushed, which every Dask worker did at
shutdown (issue 32's 4-GPU run) and a plain script with a thread pool did too. Each case runs in a
fresh child interpreter, as a user's script would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

from conftest import GPU_OK  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

LAUNCH = '''
import numpy as np
import pybridge.cuda as cuda

DECL = "saxpy(float a, const float* x[n], const float* y[n], float* out[n], int64 n)"

def launch_once():
    k = cuda.load_module("saxpy").kernel(DECL)
    n = 1 << 16
    x = cuda.to_device(np.ones(n, np.float32))
    out = cuda.empty(n, np.float32)
    k.launch(cuda.LaunchConfig(cuda.grid_for(n, 256), 256), [np.float32(2.0), x, x, out, np.int64(n)])
    assert (out.get() == 3).all()
'''


def _run_child(body: str, timeout: float = 240) -> subprocess.CompletedProcess:
    if not GPU_OK:
        pytest.skip("no GPU")
    pytest.importorskip("pycuda.driver", reason="PyCUDA is not installed")
    from pybridge.paths import find_build_file

    if find_build_file("cuda/saxpy.cubin") is None and find_build_file("cuda/saxpy.ptx") is None:
        pytest.skip("kernels not built: run `make cuda` first")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    script = textwrap.dedent(LAUNCH) + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def _clean(proc: subprocess.CompletedProcess) -> None:
    out = proc.stdout + proc.stderr
    assert "PyCUDA ERROR" not in out, out[-3000:]
    assert "killed by signal 6" not in out, out[-3000:]  # the nanny's words for a worker PyCUDA aborted
    assert proc.returncode == 0, f"exit status {proc.returncode}:\n{out[-3000:]}"
    assert "done" in proc.stdout


def test_a_script_launching_from_the_main_thread_and_a_thread_pool_exits_with_status_0():
    _clean(_run_child('''
        import concurrent.futures, threading
        launch_once()                                    # the main thread
        t = threading.Thread(target=launch_once)         # a thread that ends before the process
        t.start(); t.join()
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            list(pool.map(lambda _: launch_once(), range(6)))
        print("done")
    '''))


def test_dask_workers_that_launched_kernels_shut_down_cleanly():
    """The workers' task threads launched pybridge CUDA kernels; closing the cluster must not kill
    them (the nanny logs "killed by signal 6" when PyCUDA aborts)."""
    pytest.importorskip("distributed", reason="distributed is not installed")
    pytest.importorskip("cupy", reason="CuPy is not installed")
    _clean(_run_child('''
        import dask.array as da
        from distributed import Client
        import pybridge.dask as pbd

        if __name__ == "__main__":
            k = pbd.kernel("saxpy", DECL)
            x = np.arange(1 << 18, dtype=np.float32)
            with pbd.local_cluster(devices=[0], threads_per_worker=2) as cluster, Client(cluster) as c:
                c.register_plugin(pbd.PybridgeWorker())
                got = c.compute(pbd.map_kernel(k, 3.0, da.from_array(x, chunks=1 << 15), da.from_array(x, chunks=1 << 15)), sync=True)
                assert (got == 4 * x).all()
            print("done")
    '''))
