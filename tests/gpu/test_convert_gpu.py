"""pybridge.convert.to_numpy on device memory: an object that offers only __cuda_array_interface__
is copied to the host (pybridge.interop.copy_to_host), strided views included."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pybridge.convert import to_numpy

pytestmark = pytest.mark.gpu


class _OnlyCAI:
    """A producer with nothing but the CUDA array interface (no .get(), no .numpy())."""

    def __init__(self, owner: Any, cai: dict[str, Any]) -> None:
        self.owner = owner  # keeps the memory alive
        self.__cuda_array_interface__ = cai


@pytest.fixture(scope="module", autouse=True)
def _gpu() -> None:
    pytest.importorskip("pycuda.driver")
    from pybridge import cuda

    if cuda.device_count() == 0:
        pytest.skip("PyCUDA sees no CUDA device")
    cuda.ensure_context()


def test_cai_only_objects_are_copied_to_the_host() -> None:
    from pybridge import cuda

    host = np.arange(24, dtype=np.float32).reshape(4, 6)
    d = cuda.to_device(host)
    cai = dict(d.__cuda_array_interface__)
    got = to_numpy(_OnlyCAI(d, cai))
    assert isinstance(got, np.ndarray) and got.dtype == np.float32
    np.testing.assert_array_equal(got, host)
    # Every other column: a strided view of the same memory.
    ptr = cai["data"][0]
    view = dict(cai, shape=(4, 3), strides=(6 * 4, 2 * 4), data=(ptr, True))
    np.testing.assert_array_equal(to_numpy(_OnlyCAI(d, view)), host[:, ::2])
    empty = dict(cai, shape=(0, 6), strides=None)
    assert to_numpy(_OnlyCAI(d, empty)).shape == (0, 6)


def test_device_arrays_of_other_libraries_are_copied_to_the_host() -> None:
    """torch's .numpy() refuses a CUDA tensor and CuPy refuses implicit __array__: both are read
    through their CUDA array interface."""
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
    np.testing.assert_array_equal(to_numpy(t), host)
    np.testing.assert_array_equal(to_numpy({"t": (t.t(),)})["t"][0], host.T)  # a strided view
    cupy = pytest.importorskip("cupy")
    np.testing.assert_array_equal(to_numpy(cupy.asarray(host)), host)
