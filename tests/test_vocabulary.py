"""One vocabulary for the whole package: one size-expression evaluator (pybridge.sizeexpr) used by
kernel checks, hypothesis size draws and Futhark size rules; one primitive table
(pybridge.primitives) the Futhark and CUDA tables derive from; one value-to-NumPy converter
(pybridge.convert); check_against's option objects; pybridge.testing's documented API.
Everything here runs without a GPU.
"""

from __future__ import annotations

import ast
import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.database import ExampleDatabase

import pybridge
import pybridge.testing as testing
from pybridge.convert import to_numpy
from pybridge.cuda.signature import SCALAR_TYPES, SignatureError, c_type_name, parse_signature, parse_size_expr
from pybridge.futhark.sizes import SizeRules
from pybridge.futhark.source import parse_entry_header
from pybridge.futhark.types import BY_DTYPE as FUTHARK_BY_DTYPE
from pybridge.futhark.types import PRIMITIVES
from pybridge.primitives import BY_SPELLING, TABLE
from pybridge.sizeexpr import SizeExpr, SizeExprError, evaluate_size, parse_size
from pybridge.testing import InputOptions, KernelTarget, MismatchError, Tolerance, check_against, compare
from pybridge.testing.strategies import eval_size, size_names_in

ROOT = Path(__file__).resolve().parents[1]
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------- one size-expression evaluator


@st.composite
def size_exprs(draw: st.DrawFn, depth: int = 0) -> str:
    if depth > 3 or draw(st.booleans()):
        return draw(st.sampled_from(["n", "m", str(draw(st.integers(0, 99)))]))
    op = draw(st.sampled_from(["+", "-", "*", "/", "//", "%", "min", "max"]))
    a, b = draw(size_exprs(depth + 1)), draw(size_exprs(depth + 1))
    return f"{op}({a}, {b})" if op in ("min", "max") else f"({a} {op} {b})"


@FAST
@given(size_exprs(), st.integers(0, 10**6), st.integers(1, 10**6))
def test_the_three_users_evaluate_alike(text: str, n: int, m: int) -> None:
    """Kernel checks, strategies and Futhark headers read one grammar with one evaluator."""
    env = {"n": n, "m": m}
    try:
        want = parse_size(text).evaluate(env)
    except ZeroDivisionError:
        with pytest.raises(ZeroDivisionError):
            eval_size(text, env)
        return
    assert parse_size_expr(text).tree == parse_size(text).tree  # the kernel side parses the same tree
    assert eval_size(text, env) == want  # strategies
    assert evaluate_size(text, env) == want
    py = compile(ast.parse(text.replace("//", "/").replace("/", "//"), mode="eval"), "<e>", "eval")
    assert want == eval(py, {"min": min, "max": max}, dict(env))
    # A Futhark header with that size keeps the expression, and its value by Futhark's rules: there
    # `//` rounds towards zero, where a kernel's `/` and `//` round down (they differ only on a
    # negative intermediate, e.g. ((n - (n + n)) // 2) + n with n = 1).
    futhark_text = parse_size(text).text
    try:
        want = parse_size(futhark_text, futhark=True).evaluate(env)
    except ZeroDivisionError:  # rounding towards zero can make a divisor 0 (m // (m - n): 1 // -2 is 0)
        return  # Futhark's own evaluation fails the same way; there is no value to compare
    if "min" not in futhark_text and "max" not in futhark_text and "%" not in futhark_text:
        decl = parse_entry_header(f"entry f [n] [m] (xs: [{futhark_text}]f32) : f32")
        dim = decl.params[0].type.dims[0]
        if parse_size(text).names:  # a name, or an expression over names
            assert isinstance(dim, (str, SizeExpr)) and eval_size(dim, env) == want
        else:  # a constant expression is not a size the header shares
            assert dim is None or dim == want


def test_kernel_sizes_and_strategies_share_the_evaluator() -> None:
    sig = parse_signature("k(const float* x[(n + 255) / 256], float* y[min(n, m) * 2], int64 n, int32 m)")
    assert sig.sizes({"n": 1000, "m": 7}) == {"x": 4, "y": 14}
    spec = testing.spec_from_kernel(sig)
    assert [p.spec.dims for p in spec.params[:2]] == [("(n + 255) / 256",), ("min(n, m) * 2",)]
    assert eval_size("(n + 255) / 256", {"n": 1000}) == 4 and eval_size("n // 2", {"n": 9}) == 4
    assert size_names_in("min(n, m) * 2 + n") == ["n", "m"]


def test_size_errors_are_one_error_type_with_a_caret() -> None:
    with pytest.raises(SizeExprError) as info:
        parse_size("n + * 2")
    assert info.value.pos == 4 and str(info.value).splitlines()[-1].strip() == "^"
    with pytest.raises(SignatureError):  # the kernel side gives its own subclass, same message
        parse_size_expr("n + * 2")
    assert issubclass(SignatureError, SizeExprError) and issubclass(SizeExprError, pybridge.PybridgeError)
    with pytest.raises(ValueError):  # strategies: still a ValueError for a bad expression
        eval_size("n $ 2", {"n": 1})
    with pytest.raises(KeyError, match="needs 'm'"):
        eval_size("n * m", {"n": 1})


def test_futhark_size_expressions_are_checked_and_drawn() -> None:
    header = "entry f [n] (k: i64) (xs: [n]f32) (ys: [n+k]f32) : [n*2]f32"
    rules = SizeRules.from_decl(parse_entry_header(header))
    assert rules.size_params == {"k"}
    assert rules.explain(["k", "xs", "ys"], [2, np.zeros(3), np.zeros(4)]) == (
        "sizes that must agree differ: [n + k]: ys has 4 (axis 0), n + k = 5 (with k = 2, n = 3)"
    )
    assert "differ" not in rules.explain(["k", "xs", "ys"], [2, np.zeros(3), np.zeros(5)])
    spec = testing.spec_from_decl(header)

    @FAST
    @given(testing.inputs(spec))
    def lengths_agree(case: testing.Inputs) -> None:
        k, xs, ys = case.args
        assert len(ys) == len(xs) + int(k) and case.sizes["k"] == int(k)

    lengths_agree()


@pytest.mark.parametrize(
    "text",
    ["k(float " + "*" * 5000 + " x)", "k(" + "unsigned " * 3000 + "x)", "k(float 3x)", "k(float x y)", "k(int if)",
     "k(const x)", "k(float struct)"],
)
def test_pathological_parameters_are_signature_errors(text: str) -> None:
    """pycparser reads the parameters: deep declarators, junk and keywords still give SignatureError."""
    with pytest.raises(SignatureError) as info:
        parse_signature(text)
    assert info.value.pos is not None and 0 <= info.value.pos <= len(text)


# ---------------------------------------------------------------- one primitive table


def test_the_primitive_tables_derive_from_one() -> None:
    assert [p.futhark for p in TABLE] == list(PRIMITIVES)
    for p in TABLE:
        assert PRIMITIVES[p.futhark].dtype == p.dtype and PRIMITIVES[p.futhark].ctype == p.ctype
        assert FUTHARK_BY_DTYPE[p.dtype].name == p.futhark
        assert c_type_name(p.dtype) == p.ctype
        for alias in p.aliases:
            assert SCALAR_TYPES[alias] == p.dtype
        # Every short name and alias declares a parameter of that dtype.
        assert parse_signature(f"k({p.short} a, const {p.aliases[0]}* x)").params[0].dtype == p.dtype
    assert SCALAR_TYPES == {s: p.dtype for s, p in BY_SPELLING.items()}
    assert c_type_name(np.float16) == "uint16_t"  # C has no half: its bits travel


# ---------------------------------------------------------------- one value-to-NumPy converter


class _HasNumpy:
    def __init__(self, v: Any) -> None:
        self.v = v

    def numpy(self) -> Any:
        return self.v


class _HasGet:
    def __init__(self, v: np.ndarray) -> None:
        self.v = v

    def get(self) -> np.ndarray:
        return self.v.copy()


class _CpuDLPack:
    """Only the DLPack protocol, on host memory."""

    def __init__(self, v: np.ndarray) -> None:
        self.v = v

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.v.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.v.__dlpack_device__()


def test_to_numpy_is_one_function() -> None:
    assert testing.to_numpy is to_numpy


def test_to_numpy_reads_every_kind_and_recurses() -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = to_numpy(
        {"t": (_HasNumpy(a), _HasGet(a)), "l": [_CpuDLPack(a), memoryview(a)], "s": np.float32(2), "n": None,
         "nested": _HasNumpy({"x": _HasGet(a)})}
    )
    for arr in (got["t"][0], got["t"][1], got["l"][0], got["l"][1], got["nested"]["x"]):
        assert isinstance(arr, np.ndarray)
        np.testing.assert_array_equal(arr, a)
    assert isinstance(got["t"], tuple) and isinstance(got["l"], list)
    assert got["s"] == np.float32(2) and type(got["s"]) is np.float32 and got["n"] is None
    assert to_numpy(a) is a  # NumPy passes through, no copy


# ---------------------------------------------------------------- check_against's option objects


def _saxpy(a: Any, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    return a * xs + ys


SAXPY = "entry saxpy [n] (a: f32) (xs: [n]f32) (ys: [n]f32) : [n]f32"


@pytest.mark.parametrize(
    "keywords,new_form",
    [
        (dict(max_size=4), r"inputs=InputOptions\(max_size=\.\.\.\)"),
        (dict(rtol=1e-3, min_value=0), r"inputs=InputOptions\(min_value=\.\.\.\) and tolerance=Tolerance\(rtol=\.\.\.\)"),
        (dict(reduction=True), r"tolerance=Tolerance\(reduction=\.\.\.\)"),
        (dict(grid=1, block=32), r"KernelTarget\(kernel, grid=\.\.\., block=\.\.\.\)"),
    ],
)
def test_old_keywords_name_the_new_form(keywords: dict[str, Any], new_form: str) -> None:
    with pytest.raises(TypeError, match=new_form):
        check_against(_saxpy, _saxpy, signature=SAXPY, **keywords)


def test_option_objects_are_checked() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument.*bogus"):
        check_against(_saxpy, _saxpy, signature=SAXPY, bogus=1)
    with pytest.raises(TypeError, match="tolerance= must be a Tolerance"):
        check_against(_saxpy, _saxpy, signature=SAXPY, tolerance=1e-3)
    with pytest.raises(TypeError, match="rule= replaces tolerance="):
        check_against(_saxpy, _saxpy, signature=SAXPY, tolerance=Tolerance(rtol=0), rule=lambda *a: True)
    with pytest.raises(TypeError, match="fields of InputOptions"):
        testing.inputs(testing.spec_from_text(SAXPY), max_sise=3)


def test_option_objects_reach_the_draws_and_the_comparison() -> None:
    seen: list[int] = []

    def ref(a: Any, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
        seen.append(len(xs))
        assert np.all(np.abs(xs) <= 2)
        return _saxpy(a, xs, ys)

    check_against(ref, _saxpy, signature=SAXPY, inputs=InputOptions(max_size=3, min_value=-2, max_value=2),
                  tolerance=Tolerance(ulps=0), max_examples=30)
    assert seen and max(seen) <= 3
    off = lambda a, xs, ys: _saxpy(a, xs, ys) + np.float32(1e-3)  # noqa: E731
    check_against(_saxpy, off, signature=SAXPY, inputs=InputOptions(min_value=-1, max_value=1),
                  tolerance=Tolerance(atol=1e-2))
    with pytest.raises(MismatchError):
        check_against(_saxpy, off, signature=SAXPY, inputs=InputOptions(min_size=1, min_value=-1, max_value=1),
                      tolerance=Tolerance(atol=1e-4), settings=settings(database=None, deadline=None))


def test_launch_options_live_on_the_kernel_target() -> None:
    class Fn:
        def prepare(self, arg_format: str) -> None:
            pass

    from pybridge.cuda import Kernel

    k = Kernel(Fn(), "saxpy(float a, const float* x[n], float* out[n], int64 n)")
    t = KernelTarget(k, grid=2, block=64, shared_mem=lambda s: 4 * s["n"])
    assert testing.as_target(t) is t and (t.grid, t.block) == (2, 64)


class _Recording(ExampleDatabase):
    def __init__(self) -> None:
        super().__init__()
        self.saved: dict[bytes, set[bytes]] = {}

    def save(self, key: bytes, value: bytes) -> None:
        self.saved.setdefault(key, set()).add(value)

    def fetch(self, key: bytes) -> Any:
        return iter(self.saved.get(key, ()))

    def delete(self, key: bytes, value: bytes) -> None:
        self.saved.get(key, set()).discard(value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.delete(src, value)
        self.save(dest, value)


def test_each_check_keeps_its_own_examples() -> None:
    """The failing cases of two checks (same check_against closure) land under different keys."""
    db = _Recording()
    cfg = settings(database=db, deadline=None, max_examples=50)
    keys = []

    def plus_one(a: Any, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
        return _saxpy(a, xs, ys) + np.float32(1)

    def just_xs(a: Any, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
        return xs

    for wrong in (plus_one, just_xs):
        db.saved.clear()
        with pytest.raises(MismatchError):
            check_against(_saxpy, wrong, signature=SAXPY, settings=cfg)
        keys.append({k for k, v in db.saved.items() if v})
    assert keys[0] and keys[1] and not keys[0] & keys[1]


def test_no_private_hypothesis_api() -> None:
    for path in (ROOT / "pybridge").rglob("*.py"):
        text = path.read_text()
        assert "hypothesis.internal" not in text and "_hypothesis" not in text, path


@FAST
@given(
    st.lists(st.floats(-1e6, 1e6, width=32), min_size=1, max_size=20),
    st.lists(st.floats(-1e3, 1e3, width=32), min_size=1, max_size=20),
    st.floats(0, 1e-2),
    st.floats(0, 1e-2),
)
def test_the_element_test_is_numpy_isclose(xs: list[float], noise: list[float], rtol: float, atol: float) -> None:
    e = np.array(xs, np.float64)
    g = e + np.resize(np.array(noise), e.shape) * 1e-5
    ok = not compare(g, e, Tolerance(rtol=rtol, atol=atol))
    assert ok == bool(np.isclose(g, e, rtol=rtol, atol=atol).all())


# ---------------------------------------------------------------- pybridge.testing's documented API


def test_every_public_testing_name_is_documented() -> None:
    doc = (ROOT / "docs" / "api" / "testing.md").read_text()
    documented = set(re.findall(r"^\| `(\w+)` \|", doc, re.M))
    missing = sorted(set(testing.__all__) - documented)
    assert not missing, f"docs/api/testing.md lacks {missing}"
    stale = sorted(documented - set(testing.__all__))
    assert not stale, f"docs/api/testing.md lists names not in pybridge.testing.__all__: {stale}"
    for name in testing.__all__:
        assert hasattr(testing, name), name


def test_input_options_are_the_inputs_keywords() -> None:
    """One set of generation options: inputs() keywords are InputOptions' fields."""
    spec = testing.spec_from_text(SAXPY)
    names = {f.name for f in fields(InputOptions)}
    assert {"min_size", "max_size", "extra_sizes", "ranges", "elements", "values"} <= names
    for name in names:
        testing.inputs(spec, **{name: getattr(InputOptions(), name)})  # each one is accepted


def test_to_numpy_reads_host_array_likes_without_calling_get() -> None:
    """An object with __array__ and a .get that needs arguments (pandas' Series has one) is read
    as an array; a .get() is never called on it."""

    class SeriesLike:
        def __init__(self, v: np.ndarray) -> None:
            self.v = v

        def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
            return self.v

        def get(self, key: Any, default: Any = None) -> Any:
            raise AssertionError("get() called")

    a = np.arange(3.0)
    np.testing.assert_array_equal(to_numpy(SeriesLike(a)), a)
