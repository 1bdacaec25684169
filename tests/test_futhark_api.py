"""pybridge.futhark against the reference programs (tests/reference/types.fut, probe.fut).

Every test runs on the real compiler's output (build/reference/, marker `futhark`) for the c and
multicore backends (cuda: marker `gpu`). Expected values come from NumPy or from the .fut source, never from the library under test.
"""

from __future__ import annotations

import gc
import inspect
import pickle
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import pybridge.futhark as pf
from conftest import built_library, library_sources

# The library fixture is safe to share between examples: entry points keep no state.
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module", params=library_sources("types"))
def types_lib(request):
    lib = pf.load(request.param)
    yield lib
    lib.close()


@pytest.fixture(params=library_sources("probe"))
def probe_lib(request):
    lib = pf.load(request.param)
    yield lib
    lib.close()


# ---------------------------------------------------------------- signatures and scalars


def test_signature_shows_futhark_names_and_types(types_lib):
    sig = inspect.signature(types_lib.fill)
    assert list(sig.parameters) == ["xs", "v"]
    assert sig.parameters["xs"].annotation == "*[]i32"
    assert sig.parameters["v"].annotation == "i32"
    assert sig.return_annotation == "*[]i32"
    assert "Consumes xs" in types_lib.fill.__doc__


def test_every_primitive_round_trips(types_lib):
    out = types_lib.prims(-128, 2, 3, 2**62, 255, 6, 7, 2**64 - 2, 1.5, 2.5, 3.5, True)
    expected = (np.int8(-127), np.int16(3), np.int32(4), np.int64(2**62 + 1), np.uint8(0), np.uint16(7),
                np.uint32(8), np.uint64(2**64 - 1), np.float16(2.5), np.float32(3.5), np.float64(4.5), np.False_)
    assert len(out) == 12
    for got, want in zip(out, expected):
        assert type(got) is type(want), (got, want)
        assert got == want


@pytest.mark.parametrize("bad, exc", [(128, OverflowError), (1.5, TypeError), (True, TypeError), ("1", TypeError)])
def test_integer_scalars_are_checked(types_lib, bad, exc):
    with pytest.raises(exc, match="parameter 'a'"):
        types_lib.prims(bad, 2, 3, 4, 5, 6, 7, 8, 1.5, 2.5, 3.5, True)


def test_keyword_arguments_and_missing_arguments(types_lib):
    assert types_lib.checked_div(b=2, a=9) == 4
    with pytest.raises(TypeError, match="checked_div"):
        types_lib.checked_div(1)


# ---------------------------------------------------------------- arrays


@SETTINGS
@given(
    a=hnp.arrays(np.float64, hnp.array_shapes(min_dims=2, max_dims=2, min_side=0, max_side=6),
                 elements=st.floats(-1e6, 1e6)),
    b=hnp.arrays(np.uint8, hnp.array_shapes(min_dims=3, max_dims=3, min_side=0, max_side=4)),
    c=hnp.arrays(np.bool_, st.integers(0, 9)),
)
def test_ranks_match_numpy(types_lib, a, b, c):
    if types_lib.backend == "multicore":
        assume(not empty_map_nest(a.shape) and not empty_map_nest(b.shape))  # see the test below
    x, y, z = types_lib.ranks(a, b, c)
    np.testing.assert_array_equal(x.numpy(), a * 2)
    np.testing.assert_array_equal(y.numpy(), (b + np.uint8(1)).astype(np.uint8))
    np.testing.assert_array_equal(z.numpy(), ~c)
    assert (x.shape, x.dtype, x.ndim, x.size, x.nbytes) == (a.shape, np.dtype(np.float64), 2, a.size, a.nbytes)
    for h in (x, y, z):
        h.free()


def empty_map_nest(shape: tuple[int, ...]) -> bool:
    """A nested map over this shape runs zero iterations of a map that has an inner map."""
    return 0 in shape[:-1]


HANG_PROGRAM = """
import sys, numpy as np, pybridge.futhark as pf
lib = pf.load(sys.argv[1])
x, y, z = lib.ranks(np.zeros((0, 3)), np.zeros((1, 1, 1), np.uint8), np.zeros(1, bool))
for h in (x, y, z):
    h.free()
lib.close()
"""


def test_multicore_context_closes_after_an_empty_map_nest():
    """Futhark 0.25.32's multicore runtime leaves a subtask queued after a nested map over an empty
    outer dimension and futhark_context_free waited for it forever; pybridge.futhark.csource drops
    it once the workers are joined (make and pybridge build apply it)."""
    so = built_library("types", "multicore")
    try:
        proc = subprocess.run([sys.executable, "-c", HANG_PROGRAM, str(so)], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        raise AssertionError("closing the multicore context hung") from None
    assert proc.returncode == 0, proc.stderr


def test_handle_indexing_and_asarray(types_lib):
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    x, _, _ = types_lib.ranks(a, np.zeros((1, 1, 1), np.uint8), np.array([True]))
    assert x[1, 2] == 10.0 and x[-1, -1] == 10.0
    np.testing.assert_array_equal(np.asarray(x), a * 2)
    with pytest.raises(IndexError):
        x[2, 0]
    with pytest.raises(TypeError):
        x[0]


def test_handles_pass_between_calls_without_copy(types_lib):
    arr_t = types_lib.types["[]i32"]
    h = arr_t.new(np.arange(5, dtype=np.int32))
    out = types_lib.fill(h, 3)  # consumes h
    out2 = types_lib.fill(out, 4)
    np.testing.assert_array_equal(out2.numpy(), np.full(5, 4, np.int32))


def test_wrong_dtype_and_rank_name_the_parameter(types_lib):
    with pytest.raises(TypeError, match=r"parameter 'a'.*float64"):
        types_lib.ranks(np.ones((2, 2), np.float32), np.zeros((1, 1, 1), np.uint8), np.array([True]))
    with pytest.raises(TypeError, match=r"parameter 'c'.*1-d"):
        types_lib.ranks(np.ones((2, 2)), np.zeros((1, 1, 1), np.uint8), np.array([[True]]))


def test_non_contiguous_input_is_copied_in_order(types_lib):
    a = np.arange(12, dtype=np.float64).reshape(3, 4)[:, ::2]
    x, _, _ = types_lib.ranks(a, np.zeros((1, 1, 1), np.uint8), np.array([True]))
    np.testing.assert_array_equal(x.numpy(), a * 2)


def test_lists_convert_only_when_lossless(types_lib):
    assert types_lib.fill([1, 2, 3], 0).numpy().tolist() == [0, 0, 0]
    with pytest.raises(TypeError, match="change values"):
        types_lib.fill([1.5, 2.0], 0)


# ---------------------------------------------------------------- consumption


def test_consumed_handle_is_invalid_and_numpy_input_untouched(types_lib):
    data = np.arange(4, dtype=np.int32)
    out = types_lib.fill(data, 9)
    np.testing.assert_array_equal(data, np.arange(4))  # copied in, never changed
    h = types_lib.types["[]i32"].new(data)
    types_lib.fill(h, 1).free()
    with pytest.raises(pf.InvalidHandleError, match="consumed by entry point 'fill'"):
        h.numpy()
    with pytest.raises(pf.InvalidHandleError):
        types_lib.fill(h, 2)
    h.free()  # still allowed, and a no-op
    out.free()


# ---------------------------------------------------------------- records, tuples, sums, record arrays


def test_records(types_lib):
    p = types_lib.make_point(3.0, 4.0)
    assert (p.x, p.y) == (np.float32(3), np.float32(4))
    assert types_lib.norm(p) == np.float32(5)
    assert types_lib.norm({"x": 6.0, "y": 8.0}) == np.float32(10)
    q = types_lib.types["point"].new(y=1.0, x=0.0)
    assert pf.to_numpy(q) == {"x": 0.0, "y": 1.0}
    with pytest.raises(TypeError, match="missing"):
        types_lib.types["point"].new(x=1.0)


def test_tuples_in_and_several_results_out(types_lib):
    assert types_lib.pair_in((2.5, 4)) == np.float32(10)
    t = types_lib.types["(f32, i32)"].new(1.5, 2)
    assert t.is_tuple and len(t) == 2 and t[0] == np.float32(1.5) and t[1] == 2
    x, arr = types_lib.pair_out(7.0)
    assert x == np.float32(7) and arr.numpy().tolist() == [1, 2]


def test_sum_types(types_lib):
    c = types_lib.circle(2.0)
    assert c.variant == "circle" and c.payload == (2.0,)
    assert types_lib.area(c) == pytest.approx(3.14159 * 4)
    r = types_lib.types["shape"].construct("rect", 2.0, 3.0)
    assert r.variant == "rect" and types_lib.area(r) == 6.0
    assert types_lib.types["shape"].variants == ("circle", "rect")
    with pytest.raises(ValueError, match="no variant"):
        types_lib.types["shape"].construct("triangle", 1.0)


@SETTINGS
@given(xs=hnp.arrays(np.float32, st.integers(0, 20), elements=st.floats(-1e3, 1e3, width=32)))
def test_arrays_of_records(types_lib, xs):
    ys = xs[::-1].copy()
    pts = types_lib.points(xs, ys)
    assert pts.shape == (len(xs),) and len(pts) == len(xs)
    np.testing.assert_array_equal(pts.x.numpy(), xs)
    np.testing.assert_array_equal(pts.y.numpy(), ys)
    if len(xs):
        assert pts[-1].x == xs[-1]
    total = types_lib.sum_points(pts)
    np.testing.assert_allclose(total.x, xs.astype(np.float64).sum(), atol=1e-3 * (1 + np.abs(xs).sum()))
    zipped = types_lib.types["[]point"].zip(x=xs, y=ys)
    assert pf.to_numpy(zipped)["y"].tolist() == ys.tolist()


def test_store_restore_and_pickle(types_lib):
    p = types_lib.make_point(1.25, -2.0)
    blob = p.store()
    q = types_lib.types["point"].restore(blob)
    assert (q.x, q.y) == (1.25, -2.0)
    r = pickle.loads(pickle.dumps(types_lib.rect(3.0, 4.0)))
    assert r.variant == "rect" and types_lib.area(r) == 12.0
    with pytest.raises(pf.FutharkError):
        types_lib.types["point"].restore(b"\x00" * 8)


# ---------------------------------------------------------------- errors and lifecycle


def test_program_error_keeps_context_usable(probe_lib):
    xs = np.arange(4, dtype=np.float32)
    with pytest.raises(pf.ProgramError) as err:
        probe_lib.index_at(xs, 10)
    assert err.value.code == 2
    assert "Index [10] out of bounds for array of shape [4]" in str(err.value)
    assert probe_lib.index_at(xs, 3) == np.float32(3)
    probe_lib.sync()


def test_size_mismatch_is_a_program_error(probe_lib):
    """The generated entry point returns 1 (not the documented 2) with its message; still a ProgramError."""
    with pytest.raises(pf.ProgramError, match="invalid sizes") as err:
        probe_lib.saxpy(2.0, np.ones(3, np.float32), np.ones(2, np.float32))
    assert err.value.code == 1
    np.testing.assert_array_equal(probe_lib.saxpy(2.0, np.ones(2, np.float32), np.ones(2, np.float32)).numpy(), [3, 3])


def test_assertion_failure(types_lib):
    with pytest.raises(pf.ProgramError, match="Assertion is false"):
        types_lib.checked_div(1, 0)
    assert types_lib.checked_div(-7, 2) == -4  # Futhark's / rounds towards negative infinity


def test_f16_and_bool_scalars(probe_lib):
    x, y, z = probe_lib.pair(1.5, False, np.float16(0.25))
    assert (x, y, z) == (np.float32(3.0), np.True_, np.float16(0.5))
    assert type(z) is np.float16


def test_record_result_fields(probe_lib):
    xs = np.random.default_rng(1).normal(size=100)
    s = probe_lib.stats(xs)
    assert s.mean == pytest.approx(xs.mean()) and s.sd == pytest.approx(xs.std())


def test_free_is_idempotent_and_context_manager(probe_lib):
    with probe_lib.saxpy(2.0, np.ones(3, np.float32), np.ones(3, np.float32)) as h:
        assert h.numpy().tolist() == [3, 3, 3]
    with pytest.raises(pf.InvalidHandleError, match="freed"):
        h.numpy()
    h.free()


def test_close_frees_remaining_values_then_context(probe_lib):
    hs = [probe_lib.saxpy(1.0, np.ones(2, np.float32), np.ones(2, np.float32)) for _ in range(3)]
    assert probe_lib.live_values() >= 3  # the three above, and any an earlier test left
    probe_lib.close()
    assert probe_lib.live_values() == 0
    with pytest.raises(pf.InvalidHandleError, match="closed"):
        hs[0].numpy()
    probe_lib.close()  # idempotent


def test_garbage_collected_handles_are_freed(probe_lib):
    base = probe_lib.context.live_values
    for _ in range(50):
        probe_lib.saxpy(1.0, np.ones(8, np.float32), np.ones(8, np.float32))
    gc.collect()
    assert probe_lib.context.live_values == base
    n = probe_lib.live_values()
    if n is not None:
        assert n == base


def test_report_is_parsed(probe_lib):
    r = probe_lib.report()
    assert isinstance(r, dict) and "memory" in r


def test_bump_consumes(probe_lib):
    h = probe_lib.types["[]f32"].new(np.array([1.0, 5.0], np.float32))
    out = probe_lib.bump(h)
    assert out.numpy().tolist() == [2.0, 5.0]
    assert not h.valid


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 30])
def test_chains_match_stepwise_float32(probe_lib, n):
    xs = np.linspace(-2, 2, 33, dtype=np.float32)
    want = xs.copy()
    for k in range(1, n + 1):
        want = want * np.float32(1.0001) + np.float32(k) * np.float32(0.001)
    got = getattr(probe_lib, f"chain{n}")(xs).numpy()
    # Each op is two roundings; the compiler may fuse x*a+b into one FMA (one rounding), so allow
    # one ulp per op of drift.
    np.testing.assert_allclose(got, want, rtol=n * np.finfo(np.float32).eps, atol=n * 1e-7)


def test_unknown_option_and_tuning_rejected(probe_lib):
    with pytest.raises(TypeError, match="unknown Futhark configuration"):
        pf.load(probe_lib.path, bogus=1)
    with pytest.raises(ValueError, match="tuning"):
        pf.load(probe_lib.path, tuning={"no_such_param": 4})


def test_manifest_is_the_compilers(probe_lib):
    m = probe_lib.manifest
    assert m.entry_points["bump"].inputs[0].unique
    assert "trivial" in probe_lib.entry_points
    assert probe_lib.trivial(41) == 42


# ---------------------------------------------------------------- configuration


def test_config_options_reach_the_library(probe_lib):
    path = probe_lib.path
    with pf.load(path, debugging=False, logging=False, profiling=True) as lib:
        lib.saxpy(1.0, np.ones(4, np.float32), np.ones(4, np.float32)).free()
        lib.context.pause_profiling()
        lib.context.unpause_profiling()
        lib.clear_caches()
        report = lib.report()
        assert "memory" in report and isinstance(report.get("events", []), list)
    if probe_lib.backend == "multicore":
        with pf.load(path, num_threads=2) as lib:
            assert lib.trivial(1) == 2
    elif probe_lib.backend == "c":
        with pytest.raises(TypeError, match="num_threads.*not supported by the c backend"):
            pf.load(path, num_threads=2)


def test_cache_file_option(probe_lib, tmp_path):
    with pf.load(probe_lib.path, cache_file=str(tmp_path / "futhark.cache")) as lib:
        assert lib.trivial(0) == 1


def test_new_raw_wraps_host_memory_without_copy(probe_lib):
    if probe_lib.backend not in ("c", "multicore"):
        pytest.skip("host new_raw is for the CPU backends; cuda uses device pointers (tests/gpu)")
    data = np.arange(6, dtype=np.float32)
    h = probe_lib.types["[]f32"].new_raw(data.ctypes.data, data.shape, owner=data)
    assert h.data_pointer() == data.ctypes.data
    assert probe_lib.sum(h) == np.float32(15)
    data[:] = 1  # the array is a view of our memory
    assert probe_lib.sum(h) == np.float32(6)
    with pytest.raises(ValueError, match="shape"):
        probe_lib.types["[]f32"].new_raw(data.ctypes.data, (2, 3))


def test_sums_and_record_arrays_accept_plain_python(types_lib):
    assert types_lib.area(("rect", (2.0, 5.0))) == 10.0
    xs = np.array([1.0, 2.0], np.float32)
    assert pf.to_numpy(types_lib.sum_points({"x": xs, "y": xs})) == {"x": 3.0, "y": 3.0}


def test_freed_empty_array_still_raises(types_lib):
    h = types_lib.types["[]i32"].new(np.zeros(0, np.int32))
    assert h.shape == (0,)
    h.free()
    with pytest.raises(pf.InvalidHandleError):
        h.numpy()
