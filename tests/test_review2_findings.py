"""Adversarial review of issue 15's shared vocabulary, converter and handle layout: each test here
failed before its fix."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pybridge.cuda.signature import SignatureError, parse_signature
from pybridge.sizeexpr import SizeExprError, evaluate_size, parse_size


@settings(max_examples=20, deadline=None)
@given(digits=st.integers(min_value=4400, max_value=20000))
def test_huge_integer_literal_is_a_size_error_not_a_raw_valueerror(digits: int) -> None:
    # int() refuses more than 4300 digits (Python's str->int limit) with a message about
    # sys.set_int_max_str_digits; the user must get the size-expression error with a caret instead.
    text = "1" * digits
    with pytest.raises(SizeExprError, match="integer literal") as info:
        parse_size(text)
    assert info.value.pos == 0
    with pytest.raises(SignatureError, match="parameter 'x'.*integer literal"):
        parse_signature(f"k(float* x[n + {text}], int n)")


@pytest.mark.parametrize("bad", [3.5, None, b"n", ["n"]])
def test_evaluate_size_names_what_it_expected(bad: object) -> None:
    with pytest.raises(TypeError, match="size expression is a str or an int"):
        evaluate_size(bad, {"n": 1})  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [3.5, None, b"n"])
def test_parse_size_names_what_it_expected(bad: object) -> None:
    with pytest.raises(TypeError, match="size expression is a str, not"):
        parse_size(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("opener", ["[", '{"a":'])
def test_deeply_nested_sidecar_is_a_sidecar_error(tmp_path, opener: str) -> None:
    # A corrupt lib<m>.launchers.json: json raises RecursionError (no ValueError) past ~1000 levels.
    from pybridge.cuda.launchers import SidecarError, read_sidecar

    path = tmp_path / "libk.launchers.json"
    path.write_text(opener * 100_000)
    with pytest.raises(SidecarError, match="libk.launchers.json: not a launcher declaration file"):
        read_sidecar(path)


def test_launch_configuration_names_still_import_from_pybridge_cuda_launch() -> None:
    # a7203f8 exported them from pybridge.cuda.launch (its __all__); issue 15 moved them to
    # launch_config "behaviour otherwise unchanged": the old import path must keep working.
    import importlib

    launch = importlib.import_module("pybridge.cuda.launch")  # the module (the package's `launch` is the function)
    launch_config = importlib.import_module("pybridge.cuda.launch_config")
    for name in ("Dim3", "LaunchConfig", "grid_2d", "grid_for"):
        assert getattr(launch, name) is getattr(launch_config, name)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"extra_sizes": 5}, r"InputOptions\(extra_sizes=\.\.\.\).*int"),
        ({"ranges": 5}, r"InputOptions\(ranges=\.\.\.\).*mapping"),
        ({"elements": "abc"}, r"InputOptions\(elements=\.\.\.\).*mapping"),
        ({"values": [1, 2]}, r"InputOptions\(values=\.\.\.\).*mapping"),
    ],
)
def test_input_options_name_the_bad_field(kwargs: dict, match: str) -> None:
    from pybridge.testing import InputOptions

    with pytest.raises(TypeError, match=match):
        InputOptions(**kwargs)


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"rtol": "1e-3"}, TypeError),
        ({"atol": [1e-3]}, TypeError),
        ({"ulps": "2"}, TypeError),
        ({"rtol": True}, TypeError),
        ({"ulps": -1}, ValueError),
        ({"rtol": -1e-3}, ValueError),
        ({"atol": float("nan")}, ValueError),
    ],
)
def test_tolerance_names_the_bad_field(kwargs: dict, error: type) -> None:
    # Before: Tolerance(rtol="1e-3") was accepted and failed deep in NumPy at the first compare
    # (UFuncTypeError); ulps=-1 raised OverflowError; a NaN or negative bound failed every case.
    from pybridge.testing import Tolerance

    (name,) = kwargs
    with pytest.raises(error, match=rf"Tolerance\({name}="):
        Tolerance(**kwargs)


@settings(max_examples=50, deadline=None)
@given(rtol=st.none() | st.floats(0, 1e3), atol=st.none() | st.floats(0, float("inf")), ulps=st.none() | st.integers(0, 2**40))
def test_tolerance_accepts_every_non_negative_bound(rtol, atol, ulps) -> None:
    import numpy as np

    from pybridge.testing import Tolerance, compare

    tol = Tolerance(rtol=rtol, atol=atol, ulps=ulps)
    a = np.arange(4, dtype=np.float32)
    assert compare(a, a.copy(), tol) == []


@pytest.mark.parametrize("kwargs, name", [({"batch": 0}, "batch"), ({"batch": -5}, "batch"), ({"jobs": 0}, "jobs"),
                                          ({"sequences": -1}, "sequences")])
def test_lifecycle_run_refuses_counts_that_run_nothing(kwargs: dict, name: str) -> None:
    # batch=-5 ran no batch and reported success (0 sequences, exit 0); batch=0 gave range()'s error.
    from pybridge.testing import lifecycle_run

    args = {"programs": ["never-opened.fut"], "backend": "c", "sequences": 10, **kwargs}
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        lifecycle_run.run(**args)
    with pytest.raises(SystemExit) as exit_info:
        lifecycle_run.main([f"--{name}", str(kwargs[name]), "never-opened.fut"])
    assert exit_info.value.code == 2


@pytest.mark.parametrize("value", [2.7, 3.0, "5", None, [1]])
def test_size_names_take_integers_only(value: object) -> None:
    # Was int(value): 2.7 silently became 2 and "5" became 5 (KernelSignature.sizes, evaluate_size).
    sig = parse_signature("k(float* x[n/m], int n, int m)")
    with pytest.raises(TypeError, match=r"'n/m'.*'n' must be an integer"):
        sig.sizes({"n": value, "m": 1})
    with pytest.raises(TypeError, match=r"'n' must be an integer"):
        evaluate_size("n + 1", {"n": value})  # type: ignore[dict-item]


def test_size_names_take_numpy_integers() -> None:
    import numpy as np

    sig = parse_signature("k(float* x[n/m], int n, int m)")
    assert sig.sizes({"n": np.int64(7), "m": np.uint8(2)}) == {"x": 3}


def test_cai_v2_stream_is_ignored_by_the_full_check_as_by_the_fast_one() -> None:
    # Found by tests/test_argument_check_edges.py's fast-vs-full property: a CAI v2 dict carrying
    # "stream": 0 was refused by cai_info ("CAI v3 forbids stream 0") yet accepted by plain_cai;
    # v2 has no stream field (both read it as "the producer has synchronised").
    from pybridge.interop import cai_info, plain_cai_of

    cai = {"shape": (0,), "typestr": "<f4", "data": (256, False), "version": 2, "strides": None, "stream": 0}

    class V2:
        __cuda_array_interface__ = cai

    assert plain_cai_of(cai, "<f4") is not None
    info = cai_info(V2())
    assert info is not None and info.stream is None and info.shape == (0,)


@pytest.mark.parametrize("block", [0, -1, (16, 0), (4, -2, 1)])
def test_grid_for_refuses_empty_or_negative_blocks(block: object) -> None:
    # block=0 raised a bare ZeroDivisionError; block=-1 silently gave 1 block.
    from pybridge.cuda.launch_config import grid_for

    with pytest.raises(ValueError, match=r"grid_for: block"):
        grid_for(10, block)  # type: ignore[arg-type]


@pytest.mark.parametrize("n", [10.5, "10", None])
def test_grid_for_takes_an_integer_count(n: object) -> None:
    # 10.5 was int()-ed to 10: too few threads for 10.5 "items" is a caller's bug, not data.
    import numpy as np

    from pybridge.cuda.launch_config import grid_for

    with pytest.raises(TypeError, match=r"grid_for: n must be an integer"):
        grid_for(n, 256)  # type: ignore[arg-type]
    assert grid_for(np.int64(257), 256) == 2


@settings(max_examples=200, deadline=None)
@given(a=st.integers(-50, 50), b=st.integers(-7, 7).filter(bool))
def test_futhark_quot_in_sizes_rounds_towards_zero(a: int, b: int) -> None:
    # Futhark's // truncates (its / and % round down); the shared grammar read it as /.
    import math

    e = parse_size("a // b", futhark=True)
    assert e.evaluate({"a": a, "b": b}) == math.trunc(a / b)
    assert parse_size("a // b").evaluate({"a": a, "b": b}) == a // b  # kernel declarations: unchanged


def test_futhark_size_with_quot_is_drawn_where_futhark_accepts_it(tmp_path) -> None:
    # `[(n-1)//2]` is 0 for n = 0 in Futhark; pybridge computed -1 and never drew n = 0 at all.
    import numpy as np
    from hypothesis import find

    import pybridge.futhark as pf
    from pybridge.testing import entry_spec, inputs

    src = tmp_path / "quotsize.fut"
    src.write_text("entry f [n] (ys: [n]f32) (xs: [(n-1)//2]f32) : f32 = f32.sum xs + f32.sum ys\n")
    lib = pf.load(str(src), backend="c")
    try:
        case = find(inputs(entry_spec(lib.f), max_size=3), lambda c: c.args[0].shape == (0,),
                    settings=settings(database=None, max_examples=500))
        assert case.args[1].shape == (0,)
        assert lib.f(*case.args) == np.float32(0)  # Futhark agrees with the drawn shapes
    finally:
        lib.close()
