"""Adversarial CPU checks of kernel argument checking (fast plan vs general check) and launch
configurations: what a hostile caller can hand over must be refused with an error naming the
argument, never accepted into a launch that then fails in ``struct`` / cffi, never silently changed.
"""

from __future__ import annotations

import struct
import threading
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pybridge.cuda.errors import LaunchError
from pybridge.cuda.kernel import bind_args, plan_for
from pybridge.cuda.launch_config import LaunchConfig
from pybridge.cuda.signature import parse_signature
from pybridge.interop import cai_info, plain_cai

SAXPY = parse_signature("saxpy(float a, const float* x[n], const float* y[n], float* out[n], int64 n)")
FMT = "@fPPPq"


class CAI:
    """A CAI producer with every field under the test's control."""

    def __init__(self, **fields: Any) -> None:
        cai = {"shape": (4,), "typestr": "<f4", "data": (256, False), "version": 3, "strides": None, "stream": None}
        cai.update(fields)
        self.__cuda_array_interface__ = cai

    def __repr__(self) -> str:
        return f"CAI({self.__cuda_array_interface__})"


OK = CAI()


def _outcome(fn: Any) -> Any:
    try:
        return fn()
    except (TypeError, ValueError) as e:
        return e


# ------------------------------------------------------------------ pointers that are no address


@pytest.mark.parametrize("ptr", [-256, 2**64, 2**64 + 256, 256.5, 256.0, "256"])
def test_a_pointer_that_is_no_address_is_refused_by_every_path(ptr: Any) -> None:
    """Found: a CAI pointer < 0 or >= 2**64 passed the fast plan, the CAI shortcut and the general
    check alike, then failed in struct.pack ('P') with no parameter named; a float pointer was
    silently truncated (256.5 -> 256)."""
    bad = CAI(data=(ptr, False))
    plan = plan_for(SAXPY)
    args = (1.0, bad, OK, OK, 4)
    assert plan.fast(args) is None
    for bind in (lambda: plan.bind(args), lambda: plan.bind(args, full=True)):
        with pytest.raises((TypeError, ValueError), match=r"kernel saxpy, parameter x .*pointer"):
            bind()
    assert plain_cai(bad, "<f4") is None
    with pytest.raises((TypeError, ValueError), match="pointer"):
        cai_info(bad)


@pytest.mark.parametrize("shape", [(-2, -2), (4.5,), (-4,)])
def test_a_shape_that_is_no_shape_is_refused(shape: tuple) -> None:
    """Found: shape (-2, -2) was read as 4 elements ("not C-contiguous"), (4.5,) as 4."""
    with pytest.raises((TypeError, ValueError), match="shape"):
        cai_info(CAI(shape=shape))


def test_a_malformed_interface_names_the_kernel_parameter() -> None:
    """Found: errors from reading a malformed CAI did not say which argument carried it."""
    for bad in (CAI(strides=(4, 4)), CAI(typestr="not a type"), CAI(data=None)):
        with pytest.raises((TypeError, ValueError), match=r"kernel saxpy, parameter y "):
            bind_args(SAXPY, (1.0, OK, bad, OK, 4))


# ------------------------------------------------------------------ scalars


@pytest.mark.parametrize("sig", ["k(float a)", "k(double a)", "k(half a)"])
def test_an_integer_too_large_for_a_float_parameter_names_it(sig: str) -> None:
    """Found: 10**400 for a float parameter raised a bare OverflowError ('int too large to convert
    to float'), naming neither kernel nor parameter."""
    with pytest.raises(ValueError, match=r"kernel k, parameter a .*overflows"):
        bind_args(parse_signature(sig), (10**400,))


@pytest.mark.parametrize("sig", ["k(int64 n)", "k(float a)"])
def test_time_values_are_not_numbers(sig: str) -> None:
    """Found: np.timedelta64 is an np.integer subclass: it reached int() and failed there with a
    TypeError about datetime.timedelta that named no parameter."""
    with pytest.raises(TypeError, match=r"kernel k, parameter"):
        bind_args(parse_signature(sig), (np.timedelta64(4, "s"),))


# ------------------------------------------------------------------ the fast plan against the full check

_scalars = st.one_of(st.integers(-2**65, 2**65), st.floats(width=64), st.booleans(), st.just(np.int32(3)),
                     st.just(np.float32(2.5)), st.just(None))


def _mostly(valid: Any, *odd: Any) -> st.SearchStrategy[Any]:
    """``valid`` three times in four, else one of ``odd``: most drawn arrays differ in one field."""
    return st.one_of(st.just(valid), st.just(valid), st.just(valid), st.sampled_from(odd))


@st.composite
def _cai(draw: st.DrawFn, n: int) -> CAI:
    fields: dict[str, Any] = {"shape": draw(_mostly((n,), (n, 1), (1, n), (), (True,), (-n,), (float(n),)))}
    fields["data"] = (draw(_mostly(256, 0, -256, 2**64, 2**63, 256.0, 2**64 - 1)), draw(_mostly(False, True, 0)))
    fields["typestr"] = draw(_mostly("<f4", "=f4", "f4", "<f8", ">f4", "|f4"))
    fields["version"] = draw(_mostly(3, 1, 2, 4))
    fields["stream"] = draw(_mostly(None, 1, 2, 0, 0x5000))
    fields["strides"] = draw(_mostly(None, (4,), (8,), (4, 4)))
    return CAI(**fields)


@st.composite
def _args(draw: st.DrawFn) -> tuple[Any, ...]:
    n = draw(st.integers(0, 12))
    return (draw(st.one_of(st.floats(width=64), _scalars)), draw(_cai(n)), draw(_cai(n)), draw(_cai(n)),
            draw(st.one_of(st.just(n), st.integers(-2, 12), _scalars)))


@settings(max_examples=500, deadline=None)
@given(args=_args())
def test_the_fast_plan_never_accepts_what_the_full_check_refuses(args: tuple[Any, ...]) -> None:
    """The existing agreement test compares the fast plan with ``bind`` (which shares the plain-CAI
    shortcut); this one compares it, and the shortcut, with the full check (``bind_args``)."""
    plan = plan_for(SAXPY)
    fast = plan.fast(args)
    short = _outcome(lambda: plan.bind(args))
    full = _outcome(lambda: bind_args(SAXPY, args))
    for got in (fast, short):
        if got is None or isinstance(got, Exception):
            continue
        assert not isinstance(full, Exception), f"accepted {args} which the full check refuses: {full}"
        assert struct.pack(FMT, *got[0]) == struct.pack(FMT, *full.values)
        assert list(got[1]) == list(full.producer_streams)
    if not isinstance(full, Exception):
        struct.pack(FMT, *full.values)  # whatever is accepted can be packed for the launch
        assert not isinstance(short, Exception), f"bind refused what bind_args accepts: {short}"


def test_plans_built_by_many_threads_agree() -> None:
    sigs = [parse_signature(f"k{i}(float a, const float* x[n * {i + 1}], int64 n)") for i in range(20)]
    plans: list[list[Any]] = [[] for _ in range(8)]

    def work(slot: int) -> None:
        for sig in sigs:
            plans[slot].append(plan_for(sig))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, sig in enumerate(sigs):
        x = CAI(shape=(3 * (i + 1),))
        for slot in range(8):
            assert plans[slot][i].bind((1.0, x, 3))[0][2] == 3


# ------------------------------------------------------------------ launch configurations


@pytest.mark.parametrize("kwargs", [dict(grid=(2.5,), block=1), dict(grid=1, block=(32.9,)), dict(grid=1, block=1, shared_mem=1.5),
                                    dict(grid=1, block=1, shared_mem=2**32), dict(grid=1, block=1, shared_mem="64")])
def test_a_launch_configuration_is_never_truncated_or_a_struct_error(kwargs: dict) -> None:
    """Found: (2.5,) became grid 2 and shared_mem=1.5 became 1 silently; shared_mem=2**32 passed
    the checks and failed in struct.pack; "64" was accepted as 64."""
    with pytest.raises(LaunchError, match="grid|block|shared_mem"):
        LaunchConfig(**kwargs)


def test_numpy_integers_still_make_a_configuration() -> None:
    c = LaunchConfig(grid=np.int64(3), block=(np.int32(32), 2), shared_mem=np.uint32(128))
    assert (c.grid, c.block, c.shared_mem) == ((3, 1, 1), (32, 2, 1), 128)
    assert LaunchConfig(grid=np.array([4, 2]), block=np.array(32)).grid == (4, 2, 1)


# ------------------------------------------------------------------ pybridge bench inputs


def test_timing_refuses_an_empty_or_negative_batch() -> None:
    """Found: measure(calls=-5) reported a negative median (time / -5); calls=0 a ZeroDivisionError."""
    from pybridge.bench.timing import measure

    for calls, repeat in ((-5, 3), (0, 3), (10, 0)):
        with pytest.raises(ValueError, match="at least 1"):
            measure(lambda: None, calls=calls, repeat=repeat)


@pytest.mark.parametrize("argv", [["overhead", "--calls", "-5"], ["overhead", "--calls", "0"], ["overhead", "--n", "0"],
                                  ["exchange", "--n", "-1"], ["fusion", "--sizes", "0", "1024"],
                                  ["bandwidth", "--sizes", "-5"], ["matmul", "--repeat", "0"]])
def test_bench_refuses_counts_below_one_by_name(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Found: --calls -5 timed nothing and printed negative figures; --calls 0 silently meant the default."""
    from pybridge.bench.cli import main

    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and "expected a number >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("rows", [[1, "x"], [{"benchmark": "x"}], [{"impl": 3, "benchmark": "x"}]])
def test_bench_report_refuses_rows_that_are_no_rows(rows: list, tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Found: a JSON file whose rows were not benchmark rows crashed `pybridge bench report` with a
    traceback (TypeError / KeyError) instead of the one-line refusal other bad files get."""
    import json

    from pybridge.bench.cli import main

    bad = tmp_path / "rows.json"
    bad.write_text(json.dumps({"rows": rows}))
    assert main(["report", str(bad)]) == 2
    assert "row 0 is not a benchmark row" in capsys.readouterr().err


# ------------------------------------------------------------------ prepared launches and stream order


def _arrays(n: int) -> list[Any]:
    from pybridge.cuda.arrays import DeviceArray
    from pybridge.interop import ArrayInfo

    return [DeviceArray(ArrayInfo(256 * (i + 1), (n,), (4,), np.dtype(np.float32)), owner=None) for i in range(3)]


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """cuStreamWaitEvent ordering recorded instead of run (no GPU here); launches recorded as 0."""
    from pybridge.cuda import _driver
    import pybridge.cuda.kernel as kmod
    import pybridge.cuda.launchers as lmod

    got: list[tuple[int, int]] = []
    monkeypatch.setattr(_driver, "stream_wait", lambda target, producer, what="": got.append((target, producer)))
    monkeypatch.setattr(kmod, "ensure_context", lambda device=0: None)
    monkeypatch.setattr(lmod, "ensure_context", lambda device=0: None)
    return got


def test_a_prepared_launch_waits_for_work_queued_on_its_arrays_since(waits: list, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found: p() replayed with no ordering at all, so when an array it uses was written on another
    stream after prepare(), the replay raced with that work (a checked launch waits for it), and
    the array's pending stream was left pointing past the replay."""
    from pybridge.cuda.kernel import Kernel
    from pybridge.cuda.launchers import Launcher
    from pybridge.cuda.streams import Stream

    class Fn:
        def prepare(self, fmt: str) -> None:
            pass

    launched: list[int] = []
    k = Kernel(Fn(), SAXPY)  # no module: the checked PyCUDA path, which p() must match in ordering
    monkeypatch.setattr(k, "launch", lambda config, args, stream=None: launched.append(1))
    s1, s2 = Stream.external(0x1000), Stream.external(0x2000)
    x, y, out = _arrays(8)
    k._direct = (lambda *a: launched.append(2) or 0, 0xF00D, struct.Struct("@fPPPq").pack, 40)
    p = k.prepare(2.0, x, y, out, 8, grid=1, block=32, stream=s1)
    out._pending = s2  # another launch wrote `out` on s2 since (what a checked launch on s2 leaves)
    waits.clear()
    p()
    assert (s1.cai_stream, s2.cai_stream) in waits and launched[-1] == 2
    assert out._pending is s1  # a later consumer on s2 now waits for the replay
    waits.clear()
    p()
    assert waits == []  # nothing changed since: the replay costs no ordering

    class LauncherOwner:
        def error_string(self, rc: int) -> str:
            return "?"

    lz = Launcher(LauncherOwner(), SAXPY, lambda *a: 0)
    replay = lz.prepare(2.0, x, y, out, 8, stream=s1)
    out._pending = s2
    waits.clear()
    replay()
    assert (s1.cai_stream, s2.cai_stream) in waits and out._pending is s1


def test_half_a_launch_configuration_is_not_silently_replaced_by_the_default() -> None:
    """Found: with a default_config, k(..., grid=100) (block forgotten) launched the default grid,
    and shared_mem= alone was dropped, with no word."""
    from pybridge.cuda.kernel import Kernel

    class Fn:
        def prepare(self, fmt: str) -> None:
            pass

    k = Kernel(Fn(), SAXPY, default_config=LaunchConfig(grid=4, block=128))
    for kwargs in (dict(grid=100), dict(block=64)):
        with pytest.raises(LaunchError, match="grid= and block="):
            k._config(kwargs.get("grid"), kwargs.get("block"), 0)
    c = k._config(None, None, 512)
    assert (c.grid, c.block, c.shared_mem) == ((4, 1, 1), (128, 1, 1), 512)
    assert k._config(None, None, 0) is k.default_config


@pytest.mark.parametrize("shape", [(2.5,), 2.5, (3, 1.0), "ab", None])
def test_empty_refuses_a_shape_of_floats_before_touching_the_gpu(shape: Any) -> None:
    """Found: cuda.empty((2.5,)) allocated 2 elements (int() truncation)."""
    from pybridge.cuda.arrays import _shape_tuple, empty

    with pytest.raises(TypeError, match="shape"):
        empty(shape)
    assert _shape_tuple(np.array([2, 3])) == (2, 3) and _shape_tuple(np.int64(4)) == (4,) == _shape_tuple(np.array(4))


def test_a_size_divided_by_zero_names_kernel_parameter_and_values() -> None:
    """Found: 'division by zero in size expression 'n / m'' named neither kernel nor parameter."""
    sig = parse_signature("k(float* x[n / m], int n, int m)")
    with pytest.raises(ZeroDivisionError, match=r"kernel k, parameter x: .*'n / m' \(with m=0, n=4\)"):
        bind_args(sig, (CAI(shape=(4,)), 4, 0))
    assert plan_for(sig).fast((CAI(shape=(4,)), 4, 0)) is None
