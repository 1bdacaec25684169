"""pybridge.cuda's exchange steps in C (``_callpath.plain_cai_of``, ``cuda_import_cai``,
``cuda_dlpack``) against the Python functions that define them, in one process, without a GPU.

Fake producers stand in for CuPy (CAI v3 naming the legacy stream or another one, with ``descr``),
PyTorch (a plain ``torch.Tensor`` read directly, and CAI v2), numba (stream None) and for broken
ones (hypothesis draws the interface dictionaries: keys missing, values of the wrong type, sizes
past 64 bits, stream 0); the driver's side (``ensure_context``, ``_driver.stream_wait``) is
replaced by recorders. Both paths must give the same DeviceArray (every slot, the producer kept as
owner, the pending stream), the same calls of the driver's side in the same order, or the same
exception with the same message. tests/gpu/test_exchange_order.py runs the real thing on a GPU.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from fake_producers import F32, U8, FakeTorchDtype, Producer, Tensor
from pybridge import interop
from pybridge.cuda import DeviceArray, arrays, as_device_array
from pybridge.cuda import context as cuda_context
from pybridge.cuda.streams import DEFAULT_STREAM, Stream
from pybridge.futhark import callpath
from pybridge.interop import ArrayInfo

pytestmark = pytest.mark.skipif(callpath.compiled is None, reason=f"the compiled call path is not in use: {callpath.DESCRIPTION}")

PYTHON = (arrays._import_preferring_cai, arrays._dlpack_python)


def compiled_exchange() -> tuple:
    arrays._compiled_exchange = None
    got = arrays._exchange()
    assert got == (callpath.compiled.cuda_import_cai, callpath.compiled.cuda_dlpack)
    return got


class Recorder:
    """ensure_context and _driver.stream_wait, logged: what each path asked of the driver's side."""

    def __init__(self, monkeypatch, *, fail_wait: bool = False, patch_ensure: bool = False) -> None:
        self.calls: list[tuple] = []
        self.fail_wait = fail_wait

        def stream_wait(waiter, producer, *, what=None):
            self.calls.append(("wait", waiter, producer, what))
            if self.fail_wait:
                raise RuntimeError(f"wait {waiter} {producer} failed")

        monkeypatch.setattr(arrays._driver, "stream_wait", stream_wait)
        if patch_ensure:
            monkeypatch.setattr(arrays, "ensure_context", lambda device=0: self.calls.append(("ensure", device)))
        else:  # context.ensure_context's fast path holds: this thread pushed device 0's primary context
            pushed = cuda_context._Pushed(False)
            pushed.devices.add(0)
            monkeypatch.setattr(cuda_context, "_tls", threading.local())
            cuda_context._tls.pushed = pushed
            monkeypatch.setattr(cuda_context, "_primary", {0: "primary context"})


def describe(a, producer=None) -> tuple:
    """Everything a DeviceArray holds, as comparable data (the owner: whether it is the producer;
    the pending stream by identity)."""
    slots = {}
    for name in DeviceArray.__slots__:
        if name == "__weakref__":
            continue
        slots[name] = getattr(a, name)  # AttributeError: a slot the C code left unset
    info = slots.pop("_info")
    fields = tuple((f, getattr(info, f), type(getattr(info, f))) for f in
                   ("ptr", "shape", "strides", "dtype", "readonly", "stream", "device_type", "device_id"))
    owner, pending = slots.pop("_owner"), slots.pop("_pending")
    return (type(a), type(info), fields, vars(info) == dict((f, v) for f, v, _ in fields), owner is producer, pending,
            slots)


def outcome(fn):
    """``fn()`` returns (array, the producer it was made of)."""
    try:
        return "ok", describe(*fn())
    except Exception as e:  # noqa: BLE001 - compared: type and message
        return type(e).__name__, str(e)


def both_paths(monkeypatch, make, **recorder):
    """(outcome, driver-side calls) of ``make()`` through the compiled and the Python exchange."""
    seen = []
    for exchange in (compiled_exchange(), PYTHON):
        rec = Recorder(monkeypatch, **recorder)
        monkeypatch.setattr(arrays, "_compiled_exchange", exchange)
        seen.append((outcome(make), rec.calls))
    arrays._compiled_exchange = None
    return seen


# ------------------------------------------------------------------------- producers


def cupy_like(shape=(8,), typestr="<f4", stream=1, ptr=0x7F0000000000):
    return Producer({"shape": shape, "typestr": typestr, "descr": [("", typestr)], "stream": stream, "version": 3,
                     "strides": None, "data": (ptr, False)})


def numba_like(shape=(8,), typestr="<f4"):
    return Producer({"shape": shape, "strides": None, "data": (0x7F0000000000, False), "typestr": typestr,
                     "stream": None, "version": 3})




@pytest.fixture
def fake_torch(monkeypatch):
    monkeypatch.setattr(interop, "_torch_dtypes", {F32: np.dtype(np.float32), U8: np.dtype(np.uint8)})


class NoCai:
    def __dlpack_device__(self):
        return (1, 0)  # host memory: from_dlpack refuses it, with its message

    def __dlpack__(self, **kw):
        raise AssertionError("not reached")


class Other:
    pass


class BadModule:
    pass


BadModule.__module__ = 42  # type: ignore[assignment]  # torch_plain compares it, the C code must too

PRODUCERS = {
    "cupy, legacy stream": lambda: cupy_like(),
    "cupy, its own stream": lambda: cupy_like(stream=0x5EED),
    "cupy, per-thread stream": lambda: cupy_like(stream=2),
    "cupy 2-d uint8": lambda: cupy_like(shape=(3, 5), typestr="|u1"),
    "cupy empty": lambda: cupy_like(shape=(0, 3), ptr=0),
    "cupy bool, readonly": lambda: Producer({"shape": (2,), "typestr": "|b1", "version": 3, "stream": None,
                                             "data": (16, True)}),
    "cupy big-endian": lambda: cupy_like(typestr=">f4"),
    "cupy complex": lambda: cupy_like(typestr="<c8"),
    "cupy stream 0": lambda: cupy_like(stream=0),
    "cupy strided": lambda: Producer({"shape": (4,), "typestr": "<f4", "version": 3, "strides": (8,), "stream": 7,
                                      "data": (64, False)}),
    "cupy huge shape": lambda: cupy_like(shape=(2**40, 2**40)),
    "cupy past 64 bits": lambda: cupy_like(shape=(2**70,)),
    "cupy typestr <f3": lambda: cupy_like(typestr="<f3"),
    "cupy typestr <": lambda: cupy_like(typestr="<"),
    "numba": lambda: numba_like(),
    "torch v2 dict": lambda: Producer({"typestr": "<f4", "shape": (3,), "strides": None, "data": (32, False), "version": 2}),
    "cai raises AttributeError": lambda: Producer(AttributeError("no CAI for a grad tensor")),
    "cai raises RuntimeError": lambda: Producer(RuntimeError("the producer broke")),
    "cai not a dict": lambda: Producer([("shape", (3,))]),
    "no cai, dlpack on the host": lambda: NoCai(),
    "neither": lambda: Other(),
    "odd __module__": lambda: BadModule(),
    "numpy": lambda: np.zeros(3, np.float32),
    "ours": lambda: DeviceArray(ArrayInfo(64, (2,), (4,), np.dtype(np.float32))),
}


@pytest.mark.parametrize("name", sorted(PRODUCERS))
@pytest.mark.parametrize("patch_ensure", [False, True])
def test_as_device_array_in_c_and_in_python_agree(monkeypatch, name, patch_ensure) -> None:
    for stream in (None, 1, 0x5EED):
        for fail_wait in (False, True):
            made = []

            def make():
                made.append(PRODUCERS[name]())
                return as_device_array(made[-1], stream=stream), made[-1]

            fast, slow = both_paths(monkeypatch, make, fail_wait=fail_wait, patch_ensure=patch_ensure)
            assert fast == slow, (name, stream, fail_wait)
            reads = [getattr(p, "reads", None) for p in made]
            assert reads[0] == reads[1] and reads[0] in (None, 0, 1), reads  # the interface read once


def test_a_cupy_array_on_the_consumers_stream_needs_no_wait(monkeypatch) -> None:
    """CuPy names the legacy stream (its default): as_device_array's stream is that one, so no event
    pair; another stream is waited for, and the result records the consumer's stream as pending."""
    for exchange in (compiled_exchange(), PYTHON):
        monkeypatch.setattr(arrays, "_compiled_exchange", exchange)
        rec = Recorder(monkeypatch)
        c = cupy_like()
        a = as_device_array(c)
        assert rec.calls == [] and a.stream is DEFAULT_STREAM and a.owner is c and a.info.stream == 1
        other = as_device_array(cupy_like(stream=0x5EED))
        assert rec.calls == [("wait", 1, 0x5EED, "__cuda_array_interface__ import")] and other.stream is DEFAULT_STREAM
        assert as_device_array(numba_like()).stream is None
    arrays._compiled_exchange = None


TORCH = {
    "plain": lambda: Tensor(),
    "1-d uint8": lambda: Tensor(shape=(5,), dtype=U8),
    "empty": lambda: Tensor(shape=(0, 2)),
    "past 64 bits": lambda: Tensor(shape=(2**40, 2**40)),
    "not contiguous (its CAI dict)": lambda: Tensor(contiguous=False),
    "with grad (its CAI refuses)": lambda: Tensor(grad=True),
    "unknown dtype (its CAI dict)": lambda: Tensor(dtype=FakeTorchDtype()),
}


@pytest.mark.parametrize("name", sorted(TORCH))
def test_a_plain_torch_tensor_in_c_and_in_python_agree(monkeypatch, fake_torch, name) -> None:
    def make():
        t = TORCH[name]()
        return as_device_array(t), t

    fast, slow = both_paths(monkeypatch, make)
    assert fast == slow
    assert fast[0][0] == ("RuntimeError" if "refuses" in name else "ok")


def _cai_values():
    ints = st.sampled_from([0, 1, 2, 3, 8, -1, 2**63, 2**64 - 1, 2**64, 2**70, True, 1.0, np.int64(3), "3", None])
    shape = st.one_of(st.tuples(), st.lists(st.one_of(st.integers(0, 9), ints), max_size=4).map(tuple),
                      st.lists(st.integers(0, 5), max_size=3), ints)
    data = st.one_of(st.tuples(ints, st.sampled_from([True, False, 0, 1, None])), st.lists(ints, max_size=3),
                     st.tuples(ints, st.booleans(), st.booleans()), ints)
    typestr = st.sampled_from(["<f4", "|u1", "<i8", "|b1", "<f2", ">f4", "<c8", "<f3", "<", "|", "", "f4", "=f4", 4, None])
    return st.fixed_dictionaries({}, optional={
        "version": st.one_of(st.sampled_from([3, 2]), ints), "typestr": typestr, "shape": shape, "data": data,
        "strides": st.sampled_from([None, (4,), ()]), "mask": st.sampled_from([None, 0]),
        "stream": st.one_of(st.sampled_from([None, 1, 2, 0x5EED]), ints), "descr": st.just([("", "<f4")])})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cai=_cai_values(), typestr=st.sampled_from(["<f4", "|u1", "<i8", "|b1"]))
def test_plain_cai_of_in_c_and_in_python_agree(cai, typestr) -> None:
    def run(fn):
        try:
            return "ok", fn(cai, typestr)
        except Exception as e:  # noqa: BLE001
            return type(e).__name__, str(e)

    fast, slow = run(callpath.compiled.plain_cai_of), run(interop.plain_cai_of)
    assert fast == slow
    if fast[0] == "ok" and fast[1] is not None:  # the same objects, not only equal ones
        assert [type(v) for v in fast[1]] == [type(v) for v in slow[1]]
        assert fast[1][2] is cai["shape"] and fast[1][0] is cai["data"][0]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cai=_cai_values(), stream=st.sampled_from([None, 1]))
def test_as_device_array_of_any_interface_in_c_and_in_python_agree(monkeypatch, cai, stream) -> None:
    def make():
        p = Producer(cai)
        return as_device_array(p, stream=stream), p

    fast, slow = both_paths(monkeypatch, make)
    assert fast == slow


# ------------------------------------------------------------------------- DeviceArray.__dlpack__

DLPACK_CALLS = [
    {}, {"stream": None}, {"stream": 1}, {"stream": -1}, {"stream": 0}, {"stream": 7}, {"stream": 2**70},
    {"stream": np.int64(5)}, {"stream": "1"}, {"max_version": (1, 0)}, {"max_version": (0, 8)}, {"max_version": (2, 0)},
    {"max_version": (1,)}, {"max_version": [1, 0]}, {"max_version": (1, "0")}, {"dl_device": (2, 0)},
    {"dl_device": (1, 0)}, {"dl_device": None}, {"copy": False}, {"copy": None}, {"copy": True}, {"copy": 0},
]
F4 = np.dtype(np.float32)
ARRAYS = {
    "1-d": lambda: ArrayInfo(0x7F0000000000, (8,), (4,), F4),
    "2-d": lambda: ArrayInfo(0x7F0000000000, (3, 5), (20, 4), F4),
    "0-d": lambda: ArrayInfo(64, (), (), F4),
    "empty": lambda: ArrayInfo(0, (0, 3), (12, 4), F4),
    "transposed": lambda: ArrayInfo(64, (5, 3), (4, 20), F4),
    "extent 1, any stride": lambda: ArrayInfo(64, (1, 4), (100, 4), F4),
    "readonly f16": lambda: ArrayInfo(64, (4,), (2,), np.dtype(np.float16), readonly=True),
    "bool": lambda: ArrayInfo(64, (4,), (1,), np.dtype(np.bool_)),
    "int64 on device 1": lambda: ArrayInfo(64, (2,), (8,), np.dtype(np.int64), device_id=1),
    "managed": lambda: ArrayInfo(64, (2,), (4,), F4, device_type=interop.KDLCUDAMANAGED),
    "complex": lambda: ArrayInfo(64, (2,), (8,), np.dtype(np.complex64)),
    "odd stride": lambda: ArrayInfo(64, (2,), (6,), F4),
    "past 64 bits": lambda: ArrayInfo(64, (2**40, 2**40), (2**42, 4), F4),
}


def exported(a: DeviceArray, kwargs: dict):
    """What a consumer reads of ``a.__dlpack__(**kwargs)``, or the error."""
    try:
        cap = a.__dlpack__(**kwargs)
    except Exception as e:  # noqa: BLE001 - compared: type and message
        return type(e).__name__, str(e)
    is_valid = ctypes.pythonapi.PyCapsule_IsValid
    is_valid.argtypes, is_valid.restype = [ctypes.py_object, ctypes.c_char_p], ctypes.c_int
    versioned = bool(is_valid(cap, b"dltensor_versioned"))
    info, owner = interop.import_dlpack(cap)
    kept = owner  # the capsule keeps the array alive until the consumer releases it
    owner.release()
    del kept
    return "ok", versioned, info


@pytest.mark.parametrize("name", sorted(ARRAYS))
@pytest.mark.parametrize("pending", [None, DEFAULT_STREAM, Stream.external(0x5EED)])
def test_dlpack_in_c_and_in_python_agree(monkeypatch, name, pending) -> None:
    alive = interop.exports_alive()
    for kwargs in DLPACK_CALLS:
        seen = []
        for exchange in (compiled_exchange(), PYTHON):
            rec = Recorder(monkeypatch)
            monkeypatch.setattr(arrays, "_compiled_exchange", exchange)
            a = DeviceArray(ARRAYS[name](), owner=object(), pending=pending)
            for _ in range(2):  # the first export of a dtype fills interop's cache: the second is in C
                seen.append((exported(a, kwargs), rec.calls))
        assert seen[0] == seen[2] and seen[1] == seen[3], (name, kwargs)
    arrays._compiled_exchange = None
    assert interop.exports_alive() == alive  # every capsule released, by either path


def test_a_capsule_keeps_its_array_alive() -> None:
    import gc
    import weakref

    compiled_exchange()
    a = DeviceArray(ArrayInfo(64, (4,), (4,), F4))
    a.__dlpack__()  # the dtype's first export: interop caches its DLPack code
    cap = a.__dlpack__(max_version=(1, 0))
    ref = weakref.ref(a)
    del a
    gc.collect()
    assert ref() is not None  # the capsule owns a reference
    del cap
    gc.collect()
    assert ref() is None
    arrays._compiled_exchange = None


# ------------------------------------------------------------------------- from_cuda's view


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cai=_cai_values(), rank=st.integers(0, 2), typestr=st.sampled_from(["<f4", "|u1"]))
def test_futhark_view_of_in_c_and_in_python_agree(monkeypatch, cai, rank, typestr) -> None:
    """interop.futhark_view_of (from_cuda's checks and ordering) with the C plain_cai_of and with
    the Python one: the same view or error, the same waits (the host's here: no Futhark stream)."""
    seen = []
    for compiled in (callpath.compiled, False):
        calls: list = []
        monkeypatch.setattr(interop, "_compiled", compiled)
        monkeypatch.setattr(interop, "stream_synchronize", lambda s: calls.append(("sync", s)))
        try:
            got = ("ok", interop.futhark_view_of(Producer(cai), np.dtype(typestr), rank, None))
        except Exception as e:  # noqa: BLE001 - compared: type and message
            got = (type(e).__name__, str(e))
        seen.append((got, calls))
    assert seen[0] == seen[1]


def test_plain_cai_of_works_before_anything_is_configured() -> None:
    """The C plain_cai_of is the first function of its section that from_cuda may call."""
    import subprocess
    import sys

    code = ("from pybridge.futhark import callpath\n"
            "c = {'shape': (2,), 'typestr': '<f4', 'data': (64, False), 'version': 3, 'stream': 5}\n"
            "print(callpath.compiled.plain_cai_of(c, '<f4'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "(64, False, (2,), 2, 5)", out


def test_python_call_path_takes_the_python_exchange() -> None:
    import os
    import subprocess
    import sys

    code = ("from pybridge.cuda import arrays\n"
            "assert arrays._exchange() == (arrays._import_preferring_cai, arrays._dlpack_python)\n"
            "print('python')")
    env = dict(os.environ, PYBRIDGE_CALL_PATH="python")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "python", out


def test_torch_stream_asks_the_current_raw_stream(monkeypatch) -> None:
    """interop._torch_stream (from_cuda(torch)'s ordering): PyTorch's current stream of the
    tensor's device (its current device for an index of None), 0 read as the legacy stream 1; with
    no raw getter, torch.cuda.current_stream(index).cuda_stream."""
    import sys
    import types

    asked: list = []
    fake = types.ModuleType("torch")
    fake._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda i: asked.append(("raw", i)) or {0: 0, 3: 0x77}[i])
    fake.cuda = types.SimpleNamespace(current_device=lambda: asked.append("current") or 3,
                                      current_stream=lambda i: types.SimpleNamespace(cuda_stream=0x99 + i))
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setattr(interop, "_torch_streams", None)

    class Dev:
        def __init__(self, index):
            self.device = types.SimpleNamespace(index=index)

    Dev.__module__ = "torch"
    assert interop._torch_stream(Dev(0)) == 1 and interop._torch_stream(Dev(None)) == 0x77
    assert asked == [("raw", 0), "current", ("raw", 3)]
    assert interop._torch_stream(Other()) is None
    fake._C = types.SimpleNamespace()  # an older PyTorch: no raw getter
    monkeypatch.setattr(interop, "_torch_streams", None)
    assert interop._torch_stream(Dev(2)) == 0x9B
