"""The project's own demo: its examples and its kernels as whole operations, used by ``pybridge demo``,
the tests and the benchmarks. Not part of the generic library: nothing in pybridge.cuda,
pybridge.futhark, pybridge.testing, pybridge.interop or pybridge.dask imports it.

- :mod:`pybridge.demo.examples`: each computation's inputs, NumPy reference and tolerance bound;
- :mod:`pybridge.demo.catalog`: kernels_cu/*.cu's declarations, launch configurations and
  operations (``cuda_saxpy``, ``cuda_sum``, ...), on pybridge.cuda;
- :mod:`pybridge.demo.run`: the ``pybridge demo`` table.

Submodules are imported on demand (``catalog`` needs nothing from a GPU to import, but the
examples need only NumPy).
"""
