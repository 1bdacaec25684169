"""DLPack export of Futhark handles on the host backends (c, multicore): ``np.from_dlpack(h)`` is a
zero-copy view of Futhark's memory that keeps the handle's value alive, for every array type of the
reference libraries and generated contents; misuse gets a clear error; no export is leaked whether
the capsule is consumed or dropped. (On cuda the same code path runs in tests/gpu.)"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

import pybridge.futhark as pf
from pybridge import interop
from pybridge.futhark import InvalidHandleError
from conftest import library_sources

pytestmark = pytest.mark.slow  # left out of the quick subset (-m 'not slow')

LIBS = library_sources("types", ("c", "multicore"))


@pytest.fixture(scope="module", params=LIBS)
def types_lib(request):
    lib = pf.load(request.param)
    yield lib
    lib.close()


def _array_kinds(lib):
    return [k for k in lib.types.values() if type(k).__name__ == "ArrayKind"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_from_dlpack_is_a_zero_copy_view_that_keeps_the_value_alive(types_lib, data) -> None:
    kind = data.draw(st.sampled_from(_array_kinds(types_lib)), label="type")
    shape = data.draw(array_shapes(min_dims=kind.rank, max_dims=kind.rank, min_side=0, max_side=7), label="shape")
    x = data.draw(arrays(kind.dtype, shape), label="x")
    gc.collect()  # exports an earlier example's garbage still holds
    before = interop.exports_alive()
    h = kind.new(x)
    how = data.draw(st.sampled_from(["as is", "versioned", "legacy"]), label="capsule")
    view = np.from_dlpack({"as is": h, "versioned": _Versioned(h), "legacy": _Legacy(h)}[how])
    np.testing.assert_array_equal(view, x)
    assert view.dtype == kind.dtype and view.shape == x.shape
    if x.size:
        assert view.__array_interface__["data"][0] == h.data_pointer()  # Futhark's memory, no copy
    del h
    gc.collect()
    np.testing.assert_array_equal(view, x)  # the view keeps the value alive
    del view
    gc.collect()
    assert interop.exports_alive() == before


class _Versioned:
    """Asks for a DLPack 1.0 capsule, as a consumer that passes max_version does."""

    def __init__(self, h):
        self.h = h

    def __dlpack__(self, **kw):
        return self.h.__dlpack__(max_version=(1, 0), **{k: v for k, v in kw.items() if k != "max_version"})

    def __dlpack_device__(self):
        return self.h.__dlpack_device__()


class _Legacy:
    """A consumer of DLPack before 1.0: no max_version (NumPy then takes an unversioned capsule)."""

    def __init__(self, h):
        self.h = h

    def __dlpack__(self, stream=None):
        return self.h.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.h.__dlpack_device__()


@pytest.mark.parametrize("so", LIBS)
def test_dlpack_misuse_is_refused_and_a_dropped_capsule_releases(so) -> None:
    with pf.load(so) as lib:
        h = lib.types["[]i32"].new(np.arange(5, dtype=np.int32))
        assert h.__dlpack_device__() == (interop.KDLCPU, 0)
        gc.collect()
        before = interop.exports_alive()
        cap = h.__dlpack__()
        assert interop.exports_alive() == before + 1
        del cap  # never consumed: its destructor releases the export
        assert interop.exports_alive() == before
        with pytest.raises(ValueError, match="stream 0"):
            h.__dlpack__(stream=0)
        with pytest.raises(BufferError, match="without a copy"):
            h.__dlpack__(copy=True)
        with pytest.raises(BufferError, match="lives on"):
            h.__dlpack__(dl_device=(interop.KDLCUDA, 0))
        np.testing.assert_array_equal(np.from_dlpack(h), np.arange(5))
        h.free()
        with pytest.raises(InvalidHandleError):
            h.__dlpack__()
        assert interop.exports_alive() == before
