"""The exchange steps that the compiled call path does in C, against the Python code they replace.

- ``ArrayKind.new_raw`` (and ``from_cuda``'s wrap of a device pointer) through ``_callpath.RawNew``:
  the same handle (contents, owner kept, registered once), the same errors, on the c backend
  here (the wrap does not depend on where the memory lives; tests/gpu/test_exchange_order.py runs
  ``from_cuda`` on the GPU).
- ``ordering.EventSlot.try_order`` through ``_callpath.order_streams``: the two driver calls, in
  order, with the arguments given, the wait skipped when the record fails; a fake driver (ctypes
  callbacks) stands in for libcuda.
"""

from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import pybridge.futhark as pf
from conftest import built_library
from pybridge import ordering
from pybridge.futhark import InvalidHandleError, callpath

pytestmark = [
    pytest.mark.futhark,
    pytest.mark.skipif(callpath.compiled is None, reason=f"the compiled call path is not in use: {callpath.DESCRIPTION}"),
]


@pytest.fixture(scope="module")
def both():
    so = built_library("probe")
    fast = pf.load(so)
    with callpath.python_plans():
        slow = pf.load(so)
    assert isinstance(fast.types["[]f32"]._compiled_raw_new(), callpath.compiled.RawNew)
    assert slow.types["[]f32"]._compiled_raw_new() is None
    yield fast, slow
    fast.close()
    slow.close()


def _outcome(fn):
    try:
        return "ok", fn()
    except Exception as e:  # noqa: BLE001 - compared: type and message
        return type(e).__name__, str(e)


@settings(max_examples=40, deadline=None)
@given(data=hnp.arrays(np.float32, st.integers(0, 40), elements=st.floats(-1e6, 1e6, width=32)),
       bad_shape=st.sampled_from([None, (-1,), (1, 2), (2**63,), ()]))
def test_new_raw_compiled_and_python_agree(both, data: np.ndarray, bad_shape) -> None:
    seen = []
    for lib in both:
        t = lib.types["[]f32"]
        owner = data.copy()
        h = t.new_raw(owner.ctypes.data, owner.shape, owner=owner)
        assert h._keep is owner  # the memory's owner lives as long as the handle
        np.testing.assert_array_equal(h.numpy(), data)
        live = lib.live_values()
        bad = _outcome(lambda: t.new_raw(owner.ctypes.data, bad_shape, owner=owner)) if bad_shape is not None else None
        h.free()
        seen.append((live, bad, lib.live_values()))
    assert seen[0] == seen[1]  # live counts, and the same error word for word


def test_new_raw_on_a_closed_context_and_a_dropped_handle(both) -> None:
    fast, slow = both
    so = fast.path
    outcomes = []
    for plans in (False, True):
        if plans:
            with callpath.python_plans():
                lib = pf.load(so)
        else:
            lib = pf.load(so)
        owner = np.arange(3, dtype=np.float32)
        t = lib.types["[]f32"]
        h = t.new_raw(owner.ctypes.data, (3,), owner=owner)
        before = lib.live_values()
        del h
        gc.collect()
        after = lib.live_values()  # the finaliser freed it
        lib.close()
        outcomes.append((before, after, _outcome(lambda: t.new_raw(owner.ctypes.data, (3,), owner=owner))))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][2][0] == InvalidHandleError.__name__ and "closed" in outcomes[0][2][1]


# ---------------------------------------------------------------- stream order in C

_RECORD = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t)
_WAIT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_uint)


class FakeDriver:
    """cuEventRecord and cuStreamWaitEvent as ctypes callbacks that log their calls."""

    def __init__(self, record_rc: int = 0, wait_rc: int = 0) -> None:
        self.calls: list[tuple] = []
        self.record = _RECORD(lambda ev, stream: self.calls.append(("record", ev, stream)) or record_rc)
        self.wait = _WAIT(lambda stream, ev, flags: self.calls.append(("wait", stream, ev, flags)) or wait_rc)

    def slot(self) -> ordering.EventSlot:
        slot = object.__new__(ordering.EventSlot)  # no libcuda here: the fields try_order reads
        slot.ev = 0xE1
        slot._in_c = (callpath.compiled.order_streams, ctypes.cast(self.record, ctypes.c_void_p).value,
                      ctypes.cast(self.wait, ctypes.c_void_p).value)
        return slot


@pytest.mark.parametrize("record_rc,wait_rc", [(0, 0), (400, 0), (0, 1)])
def test_order_streams_records_then_waits(record_rc: int, wait_rc: int) -> None:
    drv = FakeDriver(record_rc, wait_rc)
    slot = drv.slot()
    if wait_rc:
        with pytest.raises(ordering.CudaCallError, match=r"cuStreamWaitEvent failed with CUDA error 1") as e:
            slot.try_order(0xA, 0xB)
        assert e.value.code == 1
    else:
        assert slot.try_order(0xA, 0xB) == record_rc  # 400: the producer is of another context
    want = [("record", 0xE1, 0xB)] + ([("wait", 0xA, 0xE1, 0)] if record_rc == 0 else [])
    assert drv.calls == want
    if record_rc:
        with pytest.raises(ordering.CudaCallError, match="cuEventRecord failed with CUDA error 400"):
            slot.order(0xA, 0xB)


def test_order_streams_refuses_a_null_function() -> None:
    with pytest.raises(ValueError, match="null driver function"):
        callpath.compiled.order_streams(0, 0, 1, 2, 3)


# ---------------------------------------------------------------- __dlpack__ in C

_DLPACK_CALLS = [
    {}, {"stream": None}, {"stream": 1}, {"stream": -1}, {"stream": 0}, {"stream": 2**70}, {"stream": np.int64(5)},
    {"stream": "1"}, {"max_version": (1, 0)}, {"max_version": (0, 8)}, {"max_version": (2, 0)}, {"max_version": (1,)},
    {"max_version": [1, 0]}, {"max_version": (1, "0")}, {"dl_device": (1, 0)}, {"dl_device": (2, 0)},
    {"dl_device": None}, {"copy": False}, {"copy": None}, {"copy": True}, {"bogus": 1},
]


def _export(h, kwargs, positional=()):
    """The outcome of one export as data: the array a consumer sees (and its versioned flag), or
    the error's type and message."""
    try:
        cap = h.__dlpack__(*positional, **kwargs)
    except Exception as e:  # noqa: BLE001 - compared: type and message
        return type(e).__name__, str(e)
    from pybridge.interop import import_dlpack

    is_valid = ctypes.pythonapi.PyCapsule_IsValid
    is_valid.argtypes, is_valid.restype = [ctypes.py_object, ctypes.c_char_p], ctypes.c_int
    versioned = bool(is_valid(cap, b"dltensor_versioned"))
    info, owner = import_dlpack(cap)
    got = np.ctypeslib.as_array(ctypes.cast(info.ptr, ctypes.POINTER(ctypes.c_float)), info.shape).copy() \
        if info.size else np.zeros(0, np.float32)
    owner.release()
    return "ok", versioned, info.shape, info.dtype.str, info.device_type, info.readonly, got.tolist()


def test_dlpack_in_c_and_in_python_agree(both) -> None:
    """ArrayBase.__dlpack__ (C) against interop.futhark_dlpack (the Python export) on the same
    handle: every keyword form, first and later exports, then freed and on a closed context."""
    from pybridge import interop

    fast, _ = both
    h = fast.types["[]f32"].new(np.arange(5, dtype=np.float32))
    assert type(h).__dlpack__ is callpath.compiled.ArrayBase.__dlpack__
    alive = interop.exports_alive()
    for kwargs in _DLPACK_CALLS:
        assert _export(h, kwargs) == _export_python(h, kwargs), kwargs
    assert _export(h, {}, (1,)) == _export_python(h, {}, (1,))
    assert interop.exports_alive() == alive  # every capsule released
    h.free()
    assert _export(h, {}) == _export_python(h, {}) and _export(h, {})[0] == "InvalidHandleError"


def _export_python(h, kwargs, positional=()):
    from pybridge import interop

    class Python:
        def __dlpack__(self, *a, **k):
            return interop.futhark_dlpack(h, *a, **k)

    return _export(Python(), kwargs, positional)


def test_dlpack_in_c_orders_the_consumer_after_futharks_stream(both) -> None:
    """The ordering branch (cuda: Futhark's stream named in the export), with a fake driver: the
    consumer's stream waits for Futhark's; stream -1 or Futhark's own asks for nothing; a failed
    driver call goes to the Python export, which raises it."""
    from pybridge import interop

    fast, _ = both
    h = fast.types["[]f32"].new(np.arange(3, dtype=np.float32))
    h.__dlpack__()  # the first export makes the entry
    ref, state, cs = interop._futhark_exports[id(h)]
    drv = FakeDriver()
    futhark_stream = 0x5F
    rec, wait = (ctypes.cast(f, ctypes.c_void_p).value for f in (drv.record, drv.wait))
    interop._futhark_exports[id(h)] = (ref, state, cs[:6] + (futhark_stream, (rec, wait, 0xE1, futhark_stream)))
    try:
        for stream, want in [(None, [("record", 0xE1, 0x5F), ("wait", 1, 0xE1, 0)]),
                             (7, [("record", 0xE1, 0x5F), ("wait", 7, 0xE1, 0)]), (-1, []), (0x5F, [])]:
            drv.calls.clear()
            h.__dlpack__(stream=stream)
            assert drv.calls == want, stream
        failing = FakeDriver(record_rc=700)
        rec = ctypes.cast(failing.record, ctypes.c_void_p).value
        named = state[:4] + (futhark_stream,)  # as on cuda: the export names Futhark's stream
        interop._futhark_exports[id(h)] = (ref, named, cs[:6] + (futhark_stream, (rec, wait, 0xE1, futhark_stream)))
        got = _export(h, {"stream": 3})
        assert failing.calls == [("record", 0xE1, 0x5F)]  # tried in C, then the Python export ran
        assert got == _export_python(h, {"stream": 3}) and got[0] != "ok", got
    finally:
        interop._futhark_exports[id(h)] = (ref, state, cs)
        h.free()
