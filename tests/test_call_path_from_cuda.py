"""``ArrayKind.from_cuda`` in C (``_callpath.FromCuda``) against the Python method it replaces
(``ArrayKind._from_cuda``), in one process, without a GPU.

The wrap does not depend on where the memory lives, so a c-backend library stands in for a cuda
one: the library is told it is cuda, its context is given a stand-in Futhark stream, and
``ordering.order`` and the driver's event pair (ctypes callbacks, as the C code calls them) log
what each path asks. Producers are fakes of CuPy (CAI v3 on the legacy or its own stream), numba
(stream None), PyTorch (a plain ``torch.Tensor`` read directly; CAI v2) and broken ones, with
interface dictionaries drawn by hypothesis over a real host buffer. Both paths must give the same
handle (contents, shape, producer kept, live-value count) or the same exception with the same
message, and the same stream orders. tests/gpu/test_callpath_exchange.py runs the real thing.
"""

from __future__ import annotations

import ctypes
import threading
import types

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import fake_producers
import pybridge.futhark as pf
from conftest import built_library
from fake_producers import F32, U8, Producer
from pybridge import interop, ordering
from pybridge.futhark import InvalidHandleError, callpath, gpustream

pytestmark = [
    pytest.mark.futhark,
    pytest.mark.skipif(callpath.compiled is None, reason=f"the compiled call path is not in use: {callpath.DESCRIPTION}"),
]

WAITER, EVENT, OTHER_CONTEXT = 0xF0, 0xE1, 0x0C7
_RECORD = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t)
_WAIT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_uint)


class Driver:
    """cuEventRecord / cuStreamWaitEvent (ctypes callbacks) and ordering.order, logging the orders
    made. A producer stream of "another context" (OTHER_CONTEXT) makes the record fail (400), as
    the driver does for an event of another context; ordering.order then orders it itself."""

    def __init__(self, fail_order: bool = False) -> None:
        self.orders: list[tuple] = []  # (waiter, producer) of each order made
        self.failed_records = 0
        self.fail_order = fail_order

        def record(ev, stream):
            if stream == OTHER_CONTEXT or ev != EVENT:
                self.failed_records += 1
                return 400
            self.pending = stream
            return 0

        def wait(stream, ev, flags):
            self.orders.append((stream, self.pending))
            return 0

        self.record, self.wait = _RECORD(record), _WAIT(wait)
        self.module = types.SimpleNamespace(order=self.order, _last=[])

    def order(self, waiter, producer):
        if self.fail_order:
            raise ordering.CudaCallError(1, "cuStreamWaitEvent")
        if waiter != producer:
            self.orders.append((waiter, producer))
            self.module._last[:] = [types.SimpleNamespace(ev=EVENT)]

    def addresses(self) -> tuple[int, int]:
        return (ctypes.cast(self.record, ctypes.c_void_p).value, ctypes.cast(self.wait, ctypes.c_void_p).value)


class FakeStream:
    """gpustream.FutharkStream's wait_for, through the (patched) ordering module."""

    stream = WAITER

    def wait_for(self, producer: int) -> None:
        ordering.order(self.stream, producer)


def _from_cuda_in_c(kind, drv):
    """_callpath.FromCuda for ``kind`` as kinds.py makes it, ordering through the fake driver."""
    return callpath.compiled.FromCuda(kind._compiled_raw_new(), kind.dtype, type(kind).from_cuda.__get__(kind),
                                      kind._from_cuda, drv.module, interop, WAITER, *drv.addresses())


@pytest.fixture(scope="module")
def library():
    lib = pf.load(built_library("probe"))
    yield lib
    lib.close()


@pytest.fixture
def paths(library, monkeypatch):
    """(driver, {"c": FromCuda, "python": ArrayKind._from_cuda}) for the library's []f32 and []f64."""
    drv = Driver()
    monkeypatch.setattr(library, "backend", "cuda")
    monkeypatch.setattr(library, "raw_ctype", "CUdeviceptr")  # _from_cuda's branch on cuda: RawNew, as FromCuda
    monkeypatch.setattr(library.context, "_gpu_stream", FakeStream(), raising=False)
    monkeypatch.setattr(ordering, "order", drv.order)
    monkeypatch.setattr(interop, "_torch_dtypes", {F32: np.dtype(np.float32), U8: np.dtype(np.uint8)})
    monkeypatch.setattr(interop, "_torch_streams", (None, lambda index: {0: 0, 1: 0x5EED}[index]))
    made = {}
    for name in ("[]f32", "[]f64"):
        kind = library.types[name]
        assert isinstance(kind._compiled_raw_new(), callpath.compiled.RawNew)
        made[name] = {"c": _from_cuda_in_c(kind, drv), "python": kind._from_cuda}
        monkeypatch.setattr(kind, "_from_cuda_c", made[name]["c"])  # what the public method finds
    yield drv, made
    for name in made:
        vars(library.types[name]).pop("from_cuda", None)  # the public method put the C one there


BUFFER = np.arange(128, dtype=np.float32) * 1.5 - 7


class Tensor(fake_producers.Tensor):
    """A fake PyTorch tensor over BUFFER."""

    def __init__(self, shape=(8,), ptr=None, **kw) -> None:
        super().__init__(shape=shape, ptr=BUFFER.ctypes.data if ptr is None else ptr, **kw)


Tensor.__module__ = "torch"


class Parameter(Tensor):
    pass


Parameter.__module__ = "torch"


class Other:
    pass


def _outcome(fn, name, obj, drv, library):
    drv.orders.clear()
    before = library.live_values()
    try:
        h = fn(obj)
    except Exception as e:  # noqa: BLE001 - compared: type and message
        return (type(e).__name__, str(e)), list(drv.orders), library.live_values() - before
    try:
        shape = h.shape
        # contents only where the handle views BUFFER (other pointers are never read)
        data = h.numpy().tolist() if h.data_pointer() == BUFFER.ctypes.data else None
        got = ("ok", h._keep is obj, shape, data)
    finally:
        live = library.live_values() - before
        h.free()
    return got, list(drv.orders), live


def both(paths, library, name, make):
    """The outcome of each path on a fresh producer (make()), and its interface reads."""
    drv, made = paths
    seen = []
    for path in ("c", "python"):
        obj = make()
        seen.append((_outcome(made[name][path], name, obj, drv, library), getattr(obj, "reads", None)))
    return seen


def _cai_values():
    """Interface dictionaries over BUFFER, plain and otherwise."""
    ptr = BUFFER.ctypes.data
    ints = st.sampled_from([0, 1, 2, 3, 8, -1, 2**63, 2**64, True, 1.0, np.int64(3), "3", None])
    shape = st.one_of(st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple), st.tuples(ints),
                      st.lists(st.integers(0, 4), max_size=2), ints)
    data = st.one_of(st.just((ptr, False)), st.just((ptr, True)), st.tuples(st.sampled_from([ptr, 0]), st.booleans()),
                     st.tuples(ints, st.booleans()), st.lists(st.just(ptr), max_size=3), ints)
    stream = st.one_of(st.sampled_from([None, 1, 2, 0x5EED, WAITER, OTHER_CONTEXT]), ints)
    return st.fixed_dictionaries(
        {"data": data},
        optional={"version": st.one_of(st.sampled_from([3, 2]), ints), "shape": shape, "stream": stream,
                  "typestr": st.sampled_from(["<f4", "<f4", "|u1", ">f4", "<f8", 4, None]),
                  "strides": st.sampled_from([None, (4,), (16, 4), ()]), "mask": st.sampled_from([None, 0]),
                  "descr": st.just([("", "<f4")])})


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cai=_cai_values(), name=st.sampled_from(["[]f32", "[]f64"]))
def test_from_cuda_of_any_interface_in_c_and_in_python_agree(paths, library, cai, name) -> None:
    fast, slow = both(paths, library, name, lambda: Producer(cai))
    assert fast == slow
    assert fast[1] in (0, 1)  # the interface read once


PRODUCERS = {
    "cupy, legacy stream": lambda: Producer({"shape": (8,), "typestr": "<f4", "version": 3, "stream": 1,
                                             "strides": None, "data": (BUFFER.ctypes.data, False)}),
    "cupy, Futhark's own stream": lambda: Producer({"shape": (8,), "typestr": "<f4", "version": 3, "stream": WAITER,
                                                    "data": (BUFFER.ctypes.data, False)}),
    "cupy, another context's stream": lambda: Producer({"shape": (8,), "typestr": "<f4", "version": 3,
                                                        "stream": OTHER_CONTEXT, "data": (BUFFER.ctypes.data, False)}),
    "numba": lambda: Producer({"shape": (8,), "typestr": "<f4", "version": 3, "stream": None,
                               "data": (BUFFER.ctypes.data, False)}),
    "empty": lambda: Producer({"shape": (0,), "typestr": "<f4", "version": 3, "stream": 1, "data": (0, False)}),
    "torch": lambda: Tensor(),
    "torch Parameter": lambda: Parameter(),
    "torch on device 1 (its own stream)": lambda: Tensor(device=1),
    "torch empty": lambda: Tensor(shape=(0,)),
    "torch uint8 (its CAI: wrong dtype)": lambda: Tensor(dtype=U8),
    "torch 2-d (its CAI: wrong rank)": lambda: Tensor(shape=(2, 4)),
    "torch with grad (its CAI refuses)": lambda: Tensor(grad=True),
    "torch not contiguous": lambda: Tensor(contiguous=False),
    "torch sparse": lambda: Tensor(sparse=True),
    "torch on the CPU": lambda: Tensor(cuda=False),
    "torch, index None": lambda: Tensor(device=None),
    "cai raises AttributeError": lambda: Producer(AttributeError("no CAI for a grad tensor")),
    "cai raises RuntimeError": lambda: Producer(RuntimeError("the producer broke")),
    "cai not a dict": lambda: Producer([("shape", (3,))]),
    "cai None": lambda: Producer(None),
    "neither": lambda: Other(),
    "numpy": lambda: np.zeros(3, np.float32),
}


@pytest.mark.parametrize("name", sorted(PRODUCERS))
def test_from_cuda_of_each_producer_in_c_and_in_python_agree(paths, library, name, monkeypatch) -> None:
    if name == "torch, index None":  # the current device, asked of PyTorch (interop._torch_stream)
        fake = types.SimpleNamespace(cuda=types.SimpleNamespace(current_device=lambda: 1))
        monkeypatch.setattr(interop, "_torch_streams", (fake, lambda index: {0: 0, 1: 0x5EED}[index]))
    for rank_name in ("[]f32", "[]f64"):
        for _ in range(2):  # the second time with the event ordering.order used
            fast, slow = both(paths, library, rank_name, PRODUCERS[name])
            assert fast == slow, (name, rank_name)


def test_the_event_used_last_is_tried_first(paths, library) -> None:
    """The first order goes through ordering.order; later ones record and wait in C, and a producer
    of another context (the record fails) goes through ordering.order again."""
    drv, made = paths
    c = made["[]f32"]["c"]
    for stream, failed in ((0x5EED, 0), (0x5EED, 0), (OTHER_CONTEXT, 1), (WAITER, 1), (0x5EED, 1)):
        drv.orders.clear()
        c(Producer({"shape": (8,), "typestr": "<f4", "version": 3, "stream": stream,
                    "data": (BUFFER.ctypes.data, False)})).free()
        # Futhark's own stream: nothing to order
        assert drv.orders == ([] if stream == WAITER else [(WAITER, stream)]) and drv.failed_records == failed


def test_an_order_that_fails_raises_and_makes_no_handle(paths, library) -> None:
    drv, made = paths
    drv.fail_order = True
    before = library.live_values()
    for path in ("c", "python"):
        with pytest.raises(ordering.CudaCallError, match="cuStreamWaitEvent"):
            made["[]f32"][path](PRODUCERS["cupy, legacy stream"]())
    assert library.live_values() == before


def test_keywords_and_arguments_as_the_method_takes_them(paths, library) -> None:
    drv, made = paths
    kind = library.types["[]f32"]
    c = made["[]f32"]["c"]
    h = c(obj=PRODUCERS["numba"]())
    assert h.shape == (8,)
    h.free()
    assert vars(kind)["from_cuda"] is c  # the method's first call put the C one on the instance
    for args, kw in (((), {}), ((1, 2), {}), ((), {"x": 1})):
        with pytest.raises(TypeError) as fast:
            c(*args, **kw)
        with pytest.raises(TypeError) as slow:
            type(kind).from_cuda(kind, *args, **kw)
        assert str(fast.value) == str(slow.value)


def test_threads_share_one_from_cuda(paths, library) -> None:
    drv, made = paths
    c = made["[]f32"]["c"]
    before = library.live_values()
    errors: list[BaseException] = []

    def work():
        try:
            for _ in range(300):
                h = c(PRODUCERS["cupy, legacy stream"]())
                assert h.numpy()[3] == BUFFER[3]
                h.free()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and library.live_values() == before
    assert all(o == (WAITER, 1) for o in drv.orders) and len(drv.orders) == 1200


def test_a_closed_library_orders_nothing() -> None:
    so = built_library("probe")
    outcomes = []
    for path in ("c", "python"):
        lib = pf.load(so)
        drv = Driver()
        kind = lib.types["[]f32"]
        fn = _from_cuda_in_c(kind, drv) if path == "c" else kind._from_cuda
        lib.backend = "cuda"
        lib.context._gpu_stream = FakeStream()
        lib.close()
        with pytest.raises(InvalidHandleError) as e:
            fn(PRODUCERS["cupy, legacy stream"]())
        outcomes.append((str(e.value), drv.orders))
    assert outcomes[0] == outcomes[1] == ("the Futhark context is closed", [])


def test_from_cuda_refuses_bad_construction(library) -> None:
    kind = library.types["[]f32"]
    raw_new = kind._compiled_raw_new()
    with pytest.raises(ValueError, match="null driver function"):
        callpath.compiled.FromCuda(raw_new, kind.dtype, kind._from_cuda, kind._from_cuda, ordering, interop, 1, 0, 0)
    with pytest.raises(TypeError):
        callpath.compiled.FromCuda(object(), kind.dtype, kind._from_cuda, kind._from_cuda, ordering, interop, 1, 1, 1)


def test_a_c_library_keeps_the_python_method(library) -> None:
    """Not cuda: no FromCuda, and from_cuda's error is the Python method's."""
    kind = library.types["[]f32"]
    assert kind._compiled_from_cuda() is None
    with pytest.raises(TypeError, match="from_cuda needs a cuda-backend library, this one is c"):
        kind.from_cuda(PRODUCERS["numba"]())
    assert "from_cuda" not in vars(kind)


# -- review4: adversarial cases (each failed before its fix)


def _fresh_library_for(path, drv, monkeypatch):
    """A library of its own (it gets closed) and the path under test for its []f32."""
    so = built_library("probe")
    lib = pf.load(so)
    kind = lib.types["[]f32"]
    lib.backend = "cuda"
    stream = gpustream.FutharkStream.__new__(gpustream.FutharkStream)  # the real wait_for, no driver
    stream.stream, stream._state = WAITER, lib.context._state
    lib.context._gpu_stream = stream
    if path == "c":
        return lib, _from_cuda_in_c(kind, drv)
    return lib, kind._from_cuda


@pytest.mark.parametrize("path", ["c", "python"])
def test_a_producer_that_closes_the_library_orders_nothing(path, monkeypatch) -> None:
    """The interface is read after the closed check: a producer whose property closes the library
    (or another thread closing it meanwhile) must not get Futhark's freed stream ordered."""
    drv = Driver()
    monkeypatch.setattr(ordering, "order", drv.order)
    lib, fn = _fresh_library_for(path, drv, monkeypatch)

    class Closing:
        @property
        def __cuda_array_interface__(self):
            lib.close()
            return {"shape": (8,), "typestr": "<f4", "version": 3, "stream": 1, "data": (BUFFER.ctypes.data, False)}

    with pytest.raises(InvalidHandleError, match="the Futhark context is closed"):
        fn(Closing())
    assert drv.orders == []


@pytest.mark.parametrize("path", ["c", "python"])
def test_a_torch_dtype_dropped_while_the_tensor_is_read_stays_alive(paths, library, path, monkeypatch) -> None:
    """torch_plain's dtype (a value of interop._torch_dtypes) is held while the tensor's attributes
    run Python code: a borrowed reference would be used after it is freed (a crash; here the value
    resurrects itself, so the test fails instead, naming when it was dropped)."""
    drv, made = paths
    log, kept = [], []

    class Dtype:  # a value only the dictionary holds
        def __eq__(self, other):
            return other == np.dtype(np.float32)

        __hash__ = object.__hash__

        def __del__(self):
            log.append("dropped")
            kept.append(self)  # its memory stays valid whatever the path does next

    monkeypatch.setattr(interop, "_torch_dtypes", {F32: Dtype()})

    class Dropping(Tensor):
        @property
        def is_cuda(self):
            interop._torch_dtypes.clear()  # the last reference to the Dtype, but for torch_plain's
            return True

        @is_cuda.setter
        def is_cuda(self, value):
            pass

        def data_ptr(self):
            log.append("data_ptr")
            return super().data_ptr()

    Dropping.__name__, Dropping.__module__ = "Tensor", "torch"
    made["[]f32"][path](Dropping()).free()
    assert log == ["data_ptr", "dropped"]


def test_a_torch_data_ptr_that_is_not_an_int_fails_as_in_python(paths, library, monkeypatch) -> None:
    """On cuda (raw_ctype CUdeviceptr) the Python path hands data_ptr() to RawNew: its TypeError."""
    monkeypatch.setattr(library, "raw_ctype", "CUdeviceptr")
    for ptr in (1.5, np.int64(BUFFER.ctypes.data), "7"):
        fast, slow = both(paths, library, "[]f32", lambda: Tensor(ptr=ptr))
        assert fast == slow, ptr


def test_no_interface_error_suppresses_its_context(paths, library) -> None:
    """`raise ... from None` in Python: the TypeError hides the AttributeError (and, inside an
    except block of the caller, does not chain the caller's exception either)."""
    drv, made = paths
    seen = []
    for path in ("c", "python"):
        try:
            raise KeyError("the caller's")
        except KeyError:
            with pytest.raises(TypeError, match="has no __cuda_array_interface__") as e:
                made["[]f32"][path](Other())
        seen.append((e.value.__suppress_context__, e.value.__cause__, type(e.value.__context__)))
    assert seen[0] == seen[1]


def test_a_torch_tensor_on_the_current_device_has_its_device_read_once(paths, library, monkeypatch) -> None:
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(current_device=lambda: 1))
    monkeypatch.setattr(interop, "_torch_streams", (fake, lambda index: {0: 0, 1: 0x5EED}[index]))

    class Counting(Tensor):
        reads = 0

        @property
        def device(self):
            self.reads += 1
            return types.SimpleNamespace(index=None)

        @device.setter
        def device(self, value):
            pass

    Counting.__name__, Counting.__module__ = "Tensor", "torch"
    fast, slow = both(paths, library, "[]f32", Counting)
    assert fast == slow


def test_a_failed_wait_after_the_cached_record_raises_as_ordering_does(paths, library, monkeypatch) -> None:
    """ordering.EventSlot.try_order raises CudaCallError(cuStreamWaitEvent) when the record worked
    but the wait did not: the C path must not retry it through ordering.order (a second record)."""
    drv, made = paths
    c = made["[]f32"]["c"]
    cupy = PRODUCERS["cupy, legacy stream"]
    waits = []

    def wait(stream, ev, flags):
        waits.append(stream)
        return 999 if len(waits) == 1 else 0

    failing = _WAIT(wait)
    monkeypatch.setattr(drv, "wait", failing)
    f = callpath.compiled.FromCuda(library.types["[]f32"]._compiled_raw_new(), np.dtype(np.float32),
                                   c, c, drv.module, interop, WAITER, drv.addresses()[0],
                                   ctypes.cast(failing, ctypes.c_void_p).value)
    f(cupy()).free()  # caches the event through ordering.order (drv.order: no wait callback)
    waits.clear()
    monkeypatch.setattr(drv.module, "_check", ordering._check, raising=False)
    with pytest.raises(ordering.CudaCallError, match="cuStreamWaitEvent"):
        f(cupy())
    assert len(waits) == 1
