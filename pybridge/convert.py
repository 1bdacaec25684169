"""Values to NumPy: the package's one converter from results (Futhark handles, device arrays,
structures of them) to plain NumPy data.

Generic on purpose, so it imports nothing of Futhark or CUDA. In this order: pybridge's own values
read themselves (``.numpy()``: Futhark array handles, opaque handles give their structured value,
device arrays); host array-likes go through ``numpy.asarray``; ``__cuda_array_interface__``
(CuPy, PyTorch, Numba, PyCUDA) is copied to the host with the driver; then ``.numpy()``,
``.get()`` and ``__dlpack__`` on the CPU; tuples, lists and dicts are converted element by element;
NumPy arrays, NumPy scalars and Python scalars pass through unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .interop import KDLCPU, cai_info, copy_to_host

__all__ = ["to_numpy"]

_PLAIN = (np.ndarray, np.generic, bool, int, float, complex, str, bytes)


def to_numpy(value: Any) -> Any:
    """``value`` as plain NumPy data, recursively through tuples, lists and dicts (see the module
    docstring). Objects it cannot read are given to ``numpy.asarray``."""
    if value is None or isinstance(value, _PLAIN):
        return value
    if isinstance(value, tuple):
        return tuple(to_numpy(v) for v in value)
    if isinstance(value, list):
        return [to_numpy(v) for v in value]
    if isinstance(value, Mapping):
        return {k: to_numpy(v) for k, v in value.items()}
    own = type(value).__module__.startswith("pybridge.")
    numpy_method = getattr(value, "numpy", None)
    if own and callable(numpy_method):  # pybridge's handles and device arrays read themselves
        out = numpy_method()
        return out if out is value else to_numpy(out)
    info = cai_info(value)
    if info is None and (hasattr(value, "__array_interface__") or hasattr(value, "__array__")):
        return np.asarray(value)  # host data (pandas, torch on the CPU, memoryview, ...)
    if info is not None:
        # Device memory of any producer (CuPy, PyTorch, Numba, PyCUDA): torch's .numpy() refuses
        # a CUDA tensor and CuPy's __array__ refuses implicit copies, so the interface is read.
        return copy_to_host(info)
    if callable(numpy_method):
        out = numpy_method()
        return out if out is value else to_numpy(out)
    get_method = getattr(value, "get", None)
    if callable(get_method):
        return get_method()
    dlpack_device = getattr(value, "__dlpack_device__", None)
    if callable(dlpack_device) and dlpack_device()[0] == KDLCPU:
        return np.from_dlpack(value)
    return np.asarray(value)
