"""pybridge.cuda without a GPU: declarations, argument checks, launch configurations, errors,
CAI / DLPack plumbing, image choice, the host-launcher libraries' CPU-side behaviour, and the
NumPy references the GPU tests compare against. Runs in CI (no PyCUDA, no driver needed)."""

from __future__ import annotations

import ast
import math
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pybridge import interop as P
from pybridge.cuda.arrays import DeviceArray
from pybridge.cuda.errors import (
    CudaError,
    LaunchError,
    StickyCudaError,
    classify,
    error_for_code,
    from_pycuda_error,
)
from pybridge.cuda.kernel import bind_args, struct_format
from pybridge.cuda.launch_config import LaunchConfig, grid_2d, grid_for
from pybridge.cuda.module import Images, choose_image, cubin_arch, cubin_runs_on
from pybridge.cuda.signature import (
    C_KEYWORDS,
    SCALAR_TYPES,
    KernelSignature,
    Param,
    SignatureError,
    parse_signature,
    parse_size_expr,
)
from pybridge.cuda.launcher_sidecar import read_host_functions
from pybridge.cuda.streams import Stream
from pybridge.demo import catalog
from pybridge.demo import examples as E

ROOT = Path(__file__).resolve().parents[1]
MODULES = ["saxpy", "reduce", "scan", "matmul", "histogram", "mandelbrot", "chain"]

# ------------------------------------------------------------------------------ declarations


def test_design_doc_example() -> None:
    sig = parse_signature("saxpy(float a, const float* x[n], const float* y[n], float* out[n], int64 n)")
    assert sig == KernelSignature(
        "saxpy",
        (
            Param("a", np.dtype(np.float32), False, False, None),
            Param("x", np.dtype(np.float32), True, True, "n"),
            Param("y", np.dtype(np.float32), True, True, "n"),
            Param("out", np.dtype(np.float32), True, False, "n"),
            Param("n", np.dtype(np.int64), False, False, None),
        ),
    )
    assert sig.sizes({"n": 7}) == {"x": 7, "y": 7, "out": 7}
    assert str(sig) == "saxpy(float a, const float* x[n], const float* y[n], float* out[n], int64 n)"


@pytest.mark.parametrize("module", MODULES)
def test_catalog_declarations_parse(module: str) -> None:
    entry = catalog.MODULES[module]
    for name, decl in entry.kernels.items():
        sig = parse_signature(decl)
        assert sig.name == name
        assert parse_signature(str(sig)) == sig  # printing is faithful


def test_c_prototype_is_accepted() -> None:
    sig = parse_signature(
        'extern "C" __global__ void k(const float* __restrict__ x[n], unsigned long long* __restrict__ o, '
        "long long n, size_t m, unsigned int u, signed char c, __half h, _Bool b);"
    )
    assert [p.dtype for p in sig.params] == [
        np.dtype(t) for t in ("f4", "u8", "i8", "u8", "u4", "i1", "f2", "?")
    ]
    assert sig.params[0].is_const and not sig.params[1].is_const


def test_const_after_star_is_not_element_const() -> None:
    sig = parse_signature("k(float* const p, const float* const q)")
    assert not sig.params[0].is_const and sig.params[1].is_const


def test_scalar_spellings() -> None:
    for spelling, dtype in SCALAR_TYPES.items():
        sig = parse_signature(f"k({spelling} v, {spelling}* p)")
        assert sig.params[0].dtype == dtype and sig.params[1].dtype == dtype and sig.params[1].is_pointer


def test_empty_parameter_lists() -> None:
    assert parse_signature("k()").params == ()
    assert parse_signature("k(void)").params == ()


def test_size_expressions() -> None:
    sig = parse_signature(
        "k(float* a[m*k], float* b[(n + 2047) / 2048], float* c[min((n + 255) / 256, 1024)], "
        "float* d[max(m, 3) - 1], float* e[n % 7 + 2], float* f[4], int32 m, int64 n, int32 k)"
    )
    assert sig.sizes({"m": 3, "n": 5000, "k": 4}) == {
        "a": 12, "b": 3, "c": 20, "d": 2, "e": 2 + 5000 % 7, "f": 4,
    }
    assert sig.sizes({"m": 3, "n": 10**9, "k": 4})["c"] == 1024
    assert sig.size_names() == {"m", "n", "k"}
    with pytest.raises(ValueError, match="negative"):
        parse_signature("k(float* x[n - 5], int n)").sizes({"n": 2})
    with pytest.raises(KeyError):
        sig.sizes({"m": 1})


# Bad declarations: (text, a fragment of the message, the text under the caret).
BAD = [
    ("saxpy(float a, const float* x[m], int64 n)", "names 'm', which is not a parameter", "m"),
    ("f(float* x[n], float n)", "not an integer scalar parameter", "n"),
    ("f(float* x[y], float* y)", "not an integer scalar parameter", "y"),
    ("f(unsigned int)", "has a type but no name", "i"),
    ("f(float)", "has a type but no name", "f"),
    ("f(foo x)", "unknown type 'foo'", "f"),
    ("f(unsigned float x)", "unknown type 'unsigned float'", "u"),
    ("f(float** x)", "pointer to pointer", "x"),
    ("f(int a, int a)", "duplicate parameter name 'a'", "a"),
    ("f(float x[n], int n)", "scalar parameter 'x' cannot have a size", "["),
    ("f(void* p)", "give the element type", "v"),
    ("f(float* x[n+], int n)", "expected a number, a name or '('", "]"),
    ("f(float* x[], int n)", "empty size expression", "]"),
    ("f(float* x[(n], int n)", "mismatched ']'", "]"),
    ("f(float* x[n)], int n)", "mismatched", ")"),
    ("f(float* x[n] y, int n)", "after the size", "y"),
    ("f(float* x[n], int n", "missing ')'", None),
    ("f(int n) extra", "after the parameter list", "e"),
    ("(int n)", "expected the kernel name", "("),
    ("f int n", "expected '('", "i"),
    ("f(int n,)", "empty parameter", None),
    ("f(float* x[min(n)], int n)", "takes two arguments", ")"),
    ("f(float* x[n $ 2], int n)", "unexpected '$'", "$"),
    ('extern "D" f(int n)', 'expected extern "C"', "e"),
]


@pytest.mark.parametrize("text,fragment,under_caret", BAD, ids=[b[0] for b in BAD])
def test_bad_declarations(text: str, fragment: str, under_caret: str | None) -> None:
    with pytest.raises(SignatureError) as info:
        parse_signature(text)
    err = info.value
    assert isinstance(err, ValueError)
    assert fragment in str(err)
    assert err.text == text and err.pos is not None
    # The message repeats the declaration and puts a caret under the bad part.
    lines = str(err).splitlines()
    assert lines[-2].strip() == text.strip() and lines[-1].strip() == "^"
    if under_caret is not None:
        assert text[err.pos] == under_caret, (text, err.pos)


def test_not_a_string() -> None:
    with pytest.raises(TypeError):
        parse_signature(None)  # type: ignore[arg-type]


# Hypothesis: random well-formed declarations, written with random spacing, parse back exactly.
# C keywords (`if`, `for` ...) cannot name a parameter: declarations are read as C (pycparser).
_IDENTS = st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True).filter(
    lambda s: s not in {"const", "restrict", "volatile", "int", "char", "short", "long", "unsigned",
                        "signed", "float", "double", "bool", "void", "half", "min", "max"}
    and s not in SCALAR_TYPES and s not in C_KEYWORDS
)


@st.composite
def declarations(draw: st.DrawFn) -> tuple[str, KernelSignature]:
    names = draw(st.lists(_IDENTS, min_size=0, max_size=7, unique=True))
    kname = draw(_IDENTS)
    spellings = sorted(SCALAR_TYPES)
    int_spellings = [s for s in spellings if SCALAR_TYPES[s].kind in "iu"]
    # Decide which parameters are integer scalars first, so sizes can refer to them.
    kinds = [draw(st.sampled_from(["int", "scalar", "pointer"])) for _ in names]
    int_names = [n for n, k in zip(names, kinds) if k == "int"]
    ws = st.sampled_from(["", " ", "  ", "\t", "\n "])
    params: list[Param] = []
    parts: list[str] = []
    for name, kind in zip(names, kinds):
        if kind == "int":
            sp = draw(st.sampled_from(int_spellings))
            params.append(Param(name, SCALAR_TYPES[sp], False, False, None))
            parts.append(f"{draw(ws)}{sp} {name}{draw(ws)}")
        elif kind == "scalar":
            sp = draw(st.sampled_from(spellings))
            params.append(Param(name, SCALAR_TYPES[sp], False, False, None))
            parts.append(f"{draw(ws)}{sp} {name}{draw(ws)}")
        else:
            sp = draw(st.sampled_from(spellings))
            const = draw(st.booleans())
            size = None
            if draw(st.booleans()):
                atoms = int_names + ["1", "2", "64"]
                a, b = draw(st.sampled_from(atoms)), draw(st.sampled_from(atoms))
                op = draw(st.sampled_from(["+", "*", "-"]))
                size = draw(st.sampled_from([a, f"{a} {op} {b}", f"({a} {op} {b}) / 2"]))
            params.append(Param(name, SCALAR_TYPES[sp], True, const, parse_size_expr(size).text if size else None))
            parts.append(
                f"{draw(ws)}{'const ' if const else ''}{sp}{draw(ws)}*{draw(ws)}{name}"
                + (f"[{size}]" if size else "")
            )
    return f"{kname}{draw(ws)}({','.join(parts)})", KernelSignature(kname, tuple(params))


@given(declarations())
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_random_declarations_round_trip(case: tuple[str, KernelSignature]) -> None:
    text, expected = case
    sig = parse_signature(text)
    assert sig == expected
    assert parse_signature(str(sig)) == sig


@given(st.text(alphabet="abfloatint*[]()+-/,;nmk 0123456789_constvoid", max_size=60))
@settings(max_examples=500)
@example("f(float* x[n*], int n)")
@example("f(((")
def test_arbitrary_text_fails_only_with_signature_error(text: str) -> None:
    try:
        parse_signature(text)
    except SignatureError as e:
        assert e.pos is None or 0 <= e.pos <= len(text)


# Size expressions agree with Python integer arithmetic (floor division) on random trees.
@st.composite
def int_exprs(draw: st.DrawFn, depth: int = 0) -> str:
    if depth > 3 or draw(st.booleans()):
        return draw(st.sampled_from(["n", "m", str(draw(st.integers(0, 99)))]))
    op = draw(st.sampled_from(["+", "-", "*", "/", "%", "min", "max"]))
    a, b = draw(int_exprs(depth + 1)), draw(int_exprs(depth + 1))
    if op in ("min", "max"):
        return f"{op}({a}, {b})"
    return f"({a} {op} {b})"


@given(int_exprs(), st.integers(0, 10**6), st.integers(0, 10**6))
@settings(max_examples=300)
def test_size_expression_evaluation(text: str, n: int, m: int) -> None:
    py = text.replace("/", "//")
    try:
        code = compile(ast.parse(py, mode="eval"), "<expr>", "eval")
        expected = eval(code, {"min": min, "max": max}, {"n": n, "m": m})
    except ZeroDivisionError:
        with pytest.raises(ZeroDivisionError):
            parse_size_expr(text).evaluate({"n": n, "m": m})
        return
    assert parse_size_expr(text).evaluate({"n": n, "m": m}) == expected


def test_c_declaration_for_cffi() -> None:
    sig = parse_signature(read_host_functions((ROOT / "kernels_cu" / "reduce.cu").read_text())["launchers"][0])
    assert sig.c_declaration(return_type="int", extra=("void* stream",)) == (
        "int launch_sum(const float* x, float* out, int64_t n, float* scratch, void* stream);"
    )


# ------------------------------------------------------------------------------ argument checks


class FakeDeviceArray:
    """A stand-in CAI producer: no memory behind it, which bind_args never needs."""

    def __init__(self, shape: tuple[int, ...], dtype: Any, *, ptr: int = 0x7F0000000000, strides: Any = None,
                 readonly: bool = False, stream: int | None = None, version: int = 3) -> None:
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": np.dtype(dtype).str, "data": (ptr, readonly), "version": version,
            "strides": strides, "stream": stream,
        }


SAXPY = parse_signature(catalog.MODULES["saxpy"].kernels["saxpy"])


def f32(n: int, **kw: Any) -> FakeDeviceArray:
    return FakeDeviceArray((n,), np.float32, **kw)


def test_bind_good_arguments() -> None:
    x, y, out = f32(10, ptr=0x1000), f32(10, ptr=0x2000, stream=0x55), f32(10, ptr=0x3000)
    b = bind_args(SAXPY, (2.5, x, y, out, 10))
    assert b.values == (2.5, 0x1000, 0x2000, 0x3000, 10)
    assert b.producer_streams == (0x55,)
    assert set(b.arrays) == {"x", "y", "out"}
    assert struct_format(SAXPY) == "fPPPq"


def test_host_array_is_rejected_with_kernel_and_parameter() -> None:
    with pytest.raises(TypeError, match=r"kernel saxpy, parameter x .*NumPy array.*to_device"):
        bind_args(SAXPY, (2.0, np.zeros(4, np.float32), f32(4), f32(4), 4))


def test_wrong_dtype() -> None:
    with pytest.raises(TypeError, match=r"kernel saxpy, parameter y .*expected float32.*int32"):
        bind_args(SAXPY, (2.0, f32(4), FakeDeviceArray((4,), np.int32), f32(4), 4))


def test_size_mismatch() -> None:
    with pytest.raises(ValueError, match=r"kernel saxpy, parameter out .*3 elements.*needs n = 4 \(with n=4\)"):
        bind_args(SAXPY, (2.0, f32(4), f32(4), f32(3), 4))
    mm = parse_signature(catalog.MODULES["matmul"].kernels["matmul"])
    a = FakeDeviceArray((2, 3), np.float32)
    b = FakeDeviceArray((3, 5), np.float32)
    bind_args(mm, (a, b, FakeDeviceArray((2, 5), np.float32), 2, 5, 3))
    with pytest.raises(ValueError, match=r"parameter c .*needs m\*n = 10 \(with m=2, n=5\)"):
        bind_args(mm, (a, b, FakeDeviceArray((3, 3), np.float32), 2, 5, 3))


def test_non_contiguous_and_readonly() -> None:
    strided = FakeDeviceArray((4,), np.float32, strides=(8,))
    with pytest.raises(ValueError, match=r"parameter x .*not C-contiguous"):
        bind_args(SAXPY, (2.0, strided, f32(4), f32(4), 4))
    with pytest.raises(ValueError, match=r"parameter out .*read-only"):
        bind_args(SAXPY, (2.0, f32(4), f32(4), f32(4, readonly=True), 4))
    bind_args(SAXPY, (2.0, f32(4, readonly=True), f32(4), f32(4), 4))  # const may be read-only
    # Axes of extent 1 may carry any stride; 2-D C-order is contiguous.
    bind_args(SAXPY, (2.0, FakeDeviceArray((4, 1), np.float32, strides=(4, 999)), f32(4), f32(4), 4))


def test_scalar_checks() -> None:
    x = f32(4)
    with pytest.raises(TypeError, match="parameter n .*expected an integer"):
        bind_args(SAXPY, (2.0, x, x, x, 4.0))
    with pytest.raises(TypeError, match="parameter n .*bool"):
        bind_args(SAXPY, (2.0, x, x, x, True))
    with pytest.raises(TypeError, match="parameter a .*expected a real number"):
        bind_args(SAXPY, ("2", x, x, x, 4))
    with pytest.raises(ValueError, match="parameter a .*overflows float32"):
        bind_args(SAXPY, (1e39, x, x, x, 4))
    with pytest.raises(TypeError, match="parameter a .*expected a scalar"):
        bind_args(SAXPY, (x, x, x, x, 4))
    sig = parse_signature("k(int8 a, uint32 b, half h, bool flag, double d)")
    with pytest.raises(ValueError, match=r"parameter a .*200 does not fit in int8"):
        bind_args(sig, (200, 0, 0.0, True, 0.0))
    with pytest.raises(ValueError, match="parameter b .*-1 does not fit in uint32"):
        bind_args(sig, (0, -1, 0.0, True, 0.0))
    with pytest.raises(TypeError, match="parameter flag .*expected a bool"):
        bind_args(sig, (0, 0, 0.0, 1, 0.0))
    b = bind_args(sig, (np.int8(-3), np.uint64(7), 1.5, np.bool_(False), np.float32(0.1)))
    assert b.values == (-3, 7, int(np.float16(1.5).view(np.uint16)), False, float(np.float32(0.1)))
    assert struct_format(sig) == "bIH?d"
    # float32 parameters get the float32-rounded value (what the kernel will see).
    assert bind_args(SAXPY, (0.1, x, x, x, 4)).values[0] == float(np.float32(0.1))


def test_argument_count() -> None:
    with pytest.raises(TypeError, match=r"kernel saxpy takes 5 arguments \(a, x, y, out, n\), got 4"):
        bind_args(SAXPY, (2.0, f32(4), f32(4), f32(4)))


def test_other_things_as_pointers() -> None:
    for bad in (None, 0x1000, 1.5, [1.0, 2.0], "x"):
        with pytest.raises(TypeError, match="parameter x "):
            bind_args(SAXPY, (2.0, bad, f32(4), f32(4), 4))
    with pytest.raises(ValueError, match="null device pointer"):
        bind_args(SAXPY, (2.0, f32(4, ptr=0), f32(4), f32(4), 4))
    bind_args(SAXPY, (2.0, f32(0, ptr=0), f32(0, ptr=0), f32(0, ptr=0), 0))  # n = 0: null is fine


def test_device_array_pending_stream_is_a_producer_stream() -> None:
    info = P.ArrayInfo(0x5000, (4,), (4,), np.dtype(np.float32))
    d = DeviceArray(info, pending=Stream.external(0xABC))
    b = bind_args(SAXPY, (2.0, d, f32(4), d, 4))
    assert b.producer_streams == (0xABC,) and b.device_arrays == (d, d)
    assert d.__cuda_array_interface__["stream"] == 0xABC
    d._set_pending(Stream.default())
    assert d.__cuda_array_interface__["stream"] == 1  # never 0 (CAI v3)


# ------------------------------------------------------------------------------ launch configuration


def test_launch_config() -> None:
    c = LaunchConfig(grid=(10, 2), block=256, shared_mem=1024)
    assert c.grid == (10, 2, 1) and c.block == (256, 1, 1) and c.shared_mem == 1024
    assert c.threads_per_block == 256 and c.total_threads == 5120
    assert LaunchConfig(np.int64(3), (16, 16)).block == (16, 16, 1)
    for kwargs, fragment in [
        (dict(grid=0, block=256), "grid dimension x is 0"),
        (dict(grid=1, block=(32, 33)), "1056 threads"),
        (dict(grid=1, block=2048), "block dimension x is 2048"),
        (dict(grid=(1, 70000), block=1), "grid dimension y is 70000"),
        (dict(grid=2**31, block=1), "grid dimension x"),
        (dict(grid=1, block=(1, 1, 65)), "block dimension z"),
        (dict(grid=(1, 1, 1, 1), block=1), "1 to 3 dimensions"),
        (dict(grid=1, block=1, shared_mem=-1), "shared_mem"),
        (dict(grid="x", block=1), "grid"),
    ]:
        with pytest.raises(LaunchError, match=re.escape(fragment)) as e:
            LaunchConfig(**kwargs)
        assert isinstance(e.value, ValueError) and isinstance(e.value, CudaError)


@given(st.integers(0, 2**40), st.sampled_from([32, 64, 128, 256, 1024, (16, 16)]))
def test_grid_for_covers_and_is_never_zero(n: int, block: Any) -> None:
    g = grid_for(n, block)
    per = block if isinstance(block, int) else block[0] * block[1]
    assert g >= 1 and g * per >= n and (g - 1) * per < max(n, 1)
    assert grid_for(n, block, max_blocks=4096) == min(g, 4096)


def test_grid_helpers() -> None:
    assert grid_2d(0, 0) == (1, 1) and grid_2d(17, 16) == (2, 1)
    with pytest.raises(ValueError):
        grid_for(-1)
    assert catalog.grid_stride_config(0).grid == (1, 1, 1)
    assert catalog.matmul_config(129, 1).grid == (1, 2, 1) and catalog.matmul_config(128, 129).grid == (2, 1, 1)
    assert catalog.mandelbrot_config(33, 1).grid == (3, 1, 1)
    assert [catalog.sum_num_partials(n) for n in (0, 1, 256, 257, 10**9)] == [0, 1, 1, 2, 1024]
    assert [catalog.sum_scratch_floats(n) for n in (0, 1, 257, 10**9)] == [1, 2, 3, 1025]
    assert [catalog.scan_num_tiles(n) for n in (0, 1, 8192, 8193, 2**26)] == [0, 1, 1, 2, 8192]
    assert [catalog.scan_scratch_floats(n) for n in (0, 1, 8193)] == [2, 4, 6]
    assert [catalog.saxpy_config(n).grid[0] for n in (0, 1, 4096, 4097)] == [1, 1, 1, 2]
    assert catalog.histogram_config(10, 12288, 132)[0] == "histogram"  # 48 KiB of bins fit
    assert catalog.histogram_config(10, 12289, 132)[0] == "histogram_global"
    name, cfg = catalog.histogram_config(10**8, 100, 132)
    assert cfg.grid == (528, 1, 1) and cfg.shared_mem == 400


# ------------------------------------------------------------------------------ errors


class FakePycudaError(Exception):
    pass


FakePycudaError.__module__ = "pycuda._driver"


def test_error_classes() -> None:
    assert classify(700) is StickyCudaError and classify(719) is StickyCudaError
    assert classify(701) is LaunchError and classify(9) is LaunchError
    assert classify(2) is CudaError
    assert classify(None, "an illegal memory access was encountered") is StickyCudaError
    e = error_for_code(700, kernel="bad_write", operation="synchronize")
    assert isinstance(e, StickyCudaError) and e.code == 700 and e.kernel == "bad_write"
    assert "kernel bad_write" in str(e) and "illegal memory access" in str(e) and "restart" in str(e)
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in str(e)
    e = from_pycuda_error(FakePycudaError("cuCtxSynchronize failed: an illegal memory access was encountered"),
                          kernel="k")
    assert isinstance(e, StickyCudaError) and e.code == 700 and e.operation == "cuCtxSynchronize"
    e = from_pycuda_error(FakePycudaError("cuLaunchKernel failed: too many resources requested for launch"))
    assert isinstance(e, LaunchError) and e.code == 701
    e = from_pycuda_error(FakePycudaError("cuMemAlloc failed: out of memory"), kernel="k")
    assert type(e) is CudaError and e.code == 2 and not e.is_sticky


# ------------------------------------------------------------------------------ CAI and DLPack


def test_cai_reading() -> None:
    info = P.cai_info(FakeDeviceArray((2, 3), "<i4", ptr=64, stream=2))
    assert info == P.ArrayInfo(64, (2, 3), (12, 4), np.dtype(np.int32), False, 2)
    assert P.cai_info(object()) is None
    with pytest.raises(ValueError, match="stream 0"):
        P.cai_info(FakeDeviceArray((2,), "<f4", stream=0))
    assert P.cai_info(FakeDeviceArray((2,), "<f4", stream=5, version=2)).stream is None  # v2: no stream
    bad = FakeDeviceArray((2,), "<f4")
    bad.__cuda_array_interface__["mask"] = object()
    with pytest.raises(TypeError, match="masked"):
        P.cai_info(bad)
    with pytest.raises(TypeError, match="big-endian"):
        P.cai_info(FakeDeviceArray((2,), ">f4"))
    cai = P.make_cai(64, (2, 3), np.float32, strides=(12, 4), stream=None)
    assert cai["strides"] is None and cai["version"] == 3 and cai["data"] == (64, False)
    with pytest.raises(ValueError):
        P.make_cai(64, (2,), np.float32, stream=0)


class CpuProducer:
    """Exports a NumPy array's memory through our DLPack exporter (as a CPU tensor)."""

    def __init__(self, arr: np.ndarray) -> None:
        self.arr = arr

    def __dlpack_device__(self) -> tuple[int, int]:
        return (P.KDLCPU, 0)

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Any = None) -> Any:
        versioned = max_version is not None and tuple(max_version) >= (1, 0)
        return P.export_dlpack(self.arr.ctypes.data, self.arr.shape, self.arr.dtype, strides=self.arr.strides,
                               device_type=P.KDLCPU, owner=self.arr, versioned=versioned)


@pytest.mark.parametrize("dtype", ["f4", "f8", "i1", "u2", "i8", "?", "f2"])
def test_dlpack_export_is_zero_copy_for_numpy(dtype: str) -> None:
    import gc

    before = P.exports_alive()
    a = (np.arange(24) % 3).astype(dtype).reshape(4, 6)
    for view in (a, a[:, ::2], a[1:3]):
        b = np.from_dlpack(CpuProducer(view))
        assert b.ctypes.data == view.ctypes.data and b.strides == view.strides and b.dtype == view.dtype
        np.testing.assert_array_equal(b, view)
        del b
    gc.collect()
    assert P.exports_alive() == before  # numpy called our deleter for each
    cap = CpuProducer(a).__dlpack__()
    assert P.exports_alive() == before + 1
    del cap  # never consumed: the capsule's destructor releases it
    gc.collect()
    assert P.exports_alive() == before


@pytest.mark.parametrize("versioned", [False, True])
def test_dlpack_import_from_numpy(versioned: bool) -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)[:, 1:]
    cap = a.__dlpack__(max_version=(1, 0)) if versioned else a.__dlpack__()
    info, owner = P.import_dlpack(cap)
    assert (info.ptr, info.shape, info.strides, info.dtype) == (a.ctypes.data, a.shape, a.strides, a.dtype)
    assert info.device_type == P.KDLCPU and not info.c_contiguous
    with pytest.raises(BufferError):
        P.import_dlpack(cap)  # consumed: renamed "used_..."
    owner.release()
    owner.release()  # idempotent
    ro = np.zeros(3, np.float32)
    ro.flags.writeable = False
    info, _owner = P.import_dlpack(ro.__dlpack__(max_version=(1, 0)))
    assert info.readonly


def test_device_array_dlpack_export_describes_device_memory() -> None:
    info = P.ArrayInfo(0x7F00000000, (3, 5), (20, 4), np.dtype(np.float32))
    d = DeviceArray(info)
    assert d.__dlpack_device__() == (P.KDLCUDA, 0)
    got, owner = P.import_dlpack(d.__dlpack__(stream=-1, max_version=(1, 0)))
    assert (got.ptr, got.shape, got.strides, got.device_type) == (0x7F00000000, (3, 5), (20, 4), P.KDLCUDA)
    owner.release()
    with pytest.raises(BufferError):
        d.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        d.__dlpack__(dl_device=(P.KDLCPU, 0))
    with pytest.raises(ValueError):
        d.__dlpack__(stream=0)


# ------------------------------------------------------------------------------ modules and build


def test_image_choice(tmp_path: Path) -> None:
    cubin, ptx = tmp_path / "m.cubin", tmp_path / "m.ptx"
    # A minimal CUDA ELF header (ABI v8): sm_90 in bits 8-15 of e_flags.
    head = bytearray(64)
    head[:4] = b"\x7fELF"
    head[4], head[7], head[8] = 2, 0x41, 8
    head[48:52] = (0x5A04).to_bytes(4, "little")
    cubin.write_bytes(bytes(head))
    ptx.write_text("// ptx")
    assert cubin_arch(cubin) == (9, 0)
    imgs = Images(cubin, ptx, None)
    assert choose_image(imgs, (9, 0)) == cubin
    assert choose_image(imgs, (8, 9)) == ptx
    assert choose_image(imgs, (10, 0)) == ptx
    assert choose_image(imgs, (9, 0), "ptx") == ptx
    assert choose_image(Images(cubin, None, None), (8, 0)) == cubin  # nothing better: let the driver say
    with pytest.raises(FileNotFoundError, match="make cuda"):
        choose_image(Images(None, None, None), (9, 0))
    assert cubin_runs_on((8, 0), (8, 6)) and not cubin_runs_on((8, 6), (8, 0)) and not cubin_runs_on((9, 0), (10, 0))
    head[8] = 7  # older ABI: SM in bits 0-7
    head[48:52] = (0x500550).to_bytes(4, "little")
    cubin.write_bytes(bytes(head))
    assert cubin_arch(cubin) == (8, 0)
    assert cubin_arch(ptx) is None


NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH: `make cuda` cannot build the kernels here")


@pytest.fixture(scope="module")
def cuda_build() -> Path:
    if NVCC is None:
        pytest.skip("nvcc not on PATH: `make cuda` cannot build the kernels here")
    if shutil.which("make") is None:
        pytest.skip("make not on PATH")
    r = subprocess.run(["make", "-s", "cuda"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"make cuda failed:\n{r.stdout}\n{r.stderr}"
    warnings = [line for line in (r.stdout + r.stderr).splitlines() if "warning" in line.lower()]
    assert not warnings, "make cuda printed warnings:\n" + "\n".join(warnings)
    return ROOT / "build" / "cuda"


@needs_nvcc
@pytest.mark.parametrize("module", MODULES)
def test_make_cuda_outputs(cuda_build: Path, module: str) -> None:
    for f in (f"{module}.cubin", f"{module}.ptx", f"lib{module}.so", f"lib{module}.launchers.json"):
        assert (cuda_build / f).is_file() and (cuda_build / f).stat().st_size > 0, f
    assert cubin_arch(cuda_build / f"{module}.cubin") == (9, 0)  # CUDA_ARCH defaults to sm_90
    ptx = (cuda_build / f"{module}.ptx").read_text()
    for kernel in catalog.MODULES[module].kernels:
        # extern "C": the PTX entry keeps the plain name PyCUDA looks up.
        assert re.search(rf"\.entry\s+{kernel}\s*\(", ptx), f"{kernel} missing from {module}.ptx"


@needs_nvcc
@pytest.mark.parametrize("module", MODULES)
def test_launcher_library_on_cpu(cuda_build: Path, module: str) -> None:
    """The launchers' argument checks in C run before any CUDA call, so they work without a GPU."""
    cffi = pytest.importorskip("cffi")
    from pybridge.cuda.launchers import Launchers, read_sidecar

    sigs, extra_cdef = read_sidecar(cuda_build / f"lib{module}.launchers.json")  # written by make
    lib = Launchers(cuda_build / f"lib{module}.so", sigs, extra_cdef)
    assert lib.error_string(700) == "an illegal memory access was encountered"
    assert lib.error_string(0) == "no error"
    for sig in sigs:
        raw = lib.raw(sig.name)
        null = cffi.FFI().NULL
        # Empty work returns success without touching CUDA; a negative size is cudaErrorInvalidValue.
        args_empty = [lib.ffi.NULL if p.is_pointer else (0 if p.dtype.kind in "iu" else 0.0) for p in sig.params]
        if sig.name != "launch_sum":  # the sum of nothing still writes out[0] = 0: that needs the GPU
            assert raw(*args_empty, null) == 0, sig.name
        first_int = next(i for i, p in enumerate(sig.params) if not p.is_pointer and p.dtype.kind in "iu")
        args_bad = list(args_empty)
        args_bad[first_int] = -1
        assert raw(*args_bad, null) == 1, sig.name
    if module == "reduce":
        assert [lib.raw("sum_num_partials")(n) for n in (0, 1, 257, 10**9)] == [
            catalog.sum_num_partials(n) for n in (0, 1, 257, 10**9)
        ]
        assert [lib.raw("sum_scratch_floats")(n) for n in (0, 1, 257, 10**9)] == [
            catalog.sum_scratch_floats(n) for n in (0, 1, 257, 10**9)
        ]
    if module == "scan":
        assert [lib.raw("scan_num_tiles")(n) for n in (0, 1, 8193, 2**26)] == [
            catalog.scan_num_tiles(n) for n in (0, 1, 8193, 2**26)
        ]
        assert [lib.raw("scan_scratch_floats")(n) for n in (0, 1, 8193, 2**26)] == [
            catalog.scan_scratch_floats(n) for n in (0, 1, 8193, 2**26)
        ]


def test_catalog_constants_match_the_kernels() -> None:
    src = {m: (ROOT / "kernels_cu" / f"{m}.cu").read_text() for m in MODULES}
    src["common"] = (ROOT / "kernels_cu" / "common.cuh").read_text()

    def define(module: str, name: str) -> int:
        m = re.search(rf"#define {name} (\d+)", src[module])
        assert m, f"#define {name} not found in {module}"
        return int(m.group(1))

    assert define("common", "PB_MAX_GRID_STRIDE_BLOCKS") == catalog.PB_MAX_GRID_STRIDE_BLOCKS
    assert define("saxpy", "SAXPY_BLOCK") == catalog.SAXPY_BLOCK
    assert define("saxpy", "SAXPY_UNROLL") == catalog.SAXPY_UNROLL
    assert define("reduce", "SUM_BLOCK") == catalog.SUM_BLOCK
    assert define("reduce", "SUM_MAX_PARTIALS") == catalog.SUM_MAX_PARTIALS
    assert define("scan", "SCAN_BLOCK") == catalog.SCAN_BLOCK
    assert define("scan", "SCAN_ITEMS") == catalog.SCAN_ITEMS
    assert define("matmul", "MM_BM") == catalog.MM_BM and define("matmul", "MM_BN") == catalog.MM_BN
    assert define("matmul", "MM_THREADS") == catalog.MM_THREADS
    assert define("histogram", "HIST_BLOCK") == catalog.HIST_BLOCK
    # The chain constants in hex are exactly np.float32(1.0001) and np.float32(0.001).
    assert float.fromhex("0x1.00068ep+0") == float(E.CHAIN_MUL)
    assert float.fromhex("0x1.0624dep-10") == float(E.CHAIN_ADD)
    assert "0x1.00068ep+0f" in src["chain"] and "0x1.0624dep-10f" in src["chain"]
    for module in MODULES:  # every kernel of the catalog is defined extern "C" in its .cu
        for kernel in catalog.MODULES[module].kernels:
            pattern = rf'extern "C" __global__ void(\s+__launch_bounds__\([\w, ]+\))?\s+{kernel}\('
            assert re.search(pattern, src[module]), kernel


# ------------------------------------------------------------------------------ NumPy references


def test_reference_mandelbrot_matches_a_scalar_loop() -> None:
    w, h, x0, y0, dx, dy, it = 23, 17, -2.1, -1.2, 0.13, 0.15, 40
    got = E.mandelbrot_reference(w, h, x0, y0, dx, dy, it, nan_stops=False)  # the kernel's rule
    f = np.float32
    for i in range(h):
        for j in range(w):
            cr = f(x0) + f(j) * f(dx)
            ci = f(y0) + f(i) * f(dy)
            zr = zi = f(0)
            n = 0
            while n < it:
                zr2, zi2 = zr * zr, zi * zi
                if zr2 + zi2 > f(4):
                    break
                zr, zi = (zr2 - zi2) + cr, (f(2) * zr) * zi + ci
                n += 1
            assert got[i, j] == n, (i, j)
    assert got.dtype == np.int32 and got.shape == (h, w)
    assert E.mandelbrot_reference(0, 3, 0, 0, 1, 1, 5, nan_stops=False).shape == (3, 0)
    # Only a NaN |z|^2 tells the two loops apart: Futhark's `while <= 4` stops, the kernel's `> 4` goes on.
    assert E.mandelbrot_reference(1, 1, np.nan, 0, 0, 0, 10)[0, 0] == 1
    assert E.mandelbrot_reference(1, 1, np.nan, 0, 0, 0, 10, nan_stops=False)[0, 0] == 10


def test_reference_chain_and_histogram() -> None:
    x = np.linspace(-3, 3, 50, dtype=np.float32)
    got = E.chain_reference(x, 5)
    for idx, v in enumerate(x):
        for k in range(1, 6):
            v = np.float32(v * np.float32(1.0001) + np.float32(k) * np.float32(0.001))
        assert got[idx] == v
    np.testing.assert_array_equal(E.chain_reference(x, 0), x)
    vals = np.array([0, 1, 1, -1, 5, 4, 4, 4, 2**31 - 1, -(2**31)], np.int32)
    c = Counter(int(v) for v in vals if 0 <= v < 5)
    np.testing.assert_array_equal(E.histogram_reference(5, vals), [c[i] for i in range(5)])
    assert E.sum_reference(np.array([1e8, 1.0, -1e8], np.float32)) == 1.0
    assert E.saxpy_reference(2.0, np.ones(3, np.float32), np.ones(3, np.float32)).tolist() == [3.0] * 3


# ------------------------------------------------------------------------------ import without PyCUDA


def test_import_without_pycuda() -> None:
    code = (
        "import sys; sys.modules['pycuda'] = None; sys.modules['pycuda.driver'] = None\n"
        "import pybridge.cuda as c\n"
        "assert not c.have_pycuda() and c.device_count() == 0\n"
        "for f, a in [(c.to_device, ([1.0],)), (c.load_module, ('saxpy',)), (c.Stream, ())]:\n"
        "    try:\n"
        "        f(*a)\n"
        "    except ImportError as e:\n"
        "        assert 'pip install pycuda' in str(e), e\n"
        "    else:\n"
        "        raise AssertionError(f'{f} did not raise ImportError')\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


@given(n=st.integers(0, 10**6), sizes=st.tuples(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6)))
@example(n=5, sizes=(5, 5, 5))
def test_size_check_fails_exactly_on_mismatch(n: int, sizes: tuple[int, int, int]) -> None:
    args = (1.0, f32(sizes[0]), f32(sizes[1]), f32(sizes[2]), n)
    if all(s == n for s in sizes):
        bind_args(SAXPY, args)
    else:
        first_bad = ("x", "y", "out")[next(i for i, s in enumerate(sizes) if s != n)]
        with pytest.raises(ValueError, match=rf"kernel saxpy, parameter {first_bad} "):
            bind_args(SAXPY, args)


# ------------------------------------------------------------------------------ issue 12.8: pathological sizes


@pytest.mark.parametrize(
    "size",
    [
        "+".join(["n"] * 300),  # hundreds of terms: SyntaxError in the compiled check before
        "(" * 400 + "n" + ")" * 400,  # nesting: RecursionError before
        "-" * 600 + "n",
        "min(" * 60 + "n" + ", 1)" * 60,
    ],
    ids=["terms", "parens", "unary", "min"],
)
def test_pathological_size_expressions_are_signature_errors(size: str) -> None:
    with pytest.raises(SignatureError, match="parameter 'x'") as info:
        parse_signature(f"k(float* x[{size}], int64 n)")
    assert "k(float* x[" in str(info.value)  # the kernel's text, with the spot marked


@given(depth=st.integers(1, 600), op=st.sampled_from(["(", "-", "min("]))
@settings(max_examples=60, deadline=None)
def test_any_nesting_depth_parses_or_is_a_signature_error(depth: int, op: str) -> None:
    close = {"(": ")", "-": "", "min(": ", 2)"}[op]
    text = f"k(float* x[{op * depth}n{close * depth}], int64 n)"
    try:
        sig = parse_signature(text)
    except SignatureError:
        return
    want = {"(": 4, "min(": 2, "-": (-1) ** depth * 4}[op]
    if want < 0:
        with pytest.raises(ValueError, match="negative"):
            bind_args(sig, (f32(4), 4))
        return
    b = bind_args(sig, (f32(want), 4))
    assert b.values[1] == 4


def test_size_division_by_zero_names_kernel_and_parameter() -> None:
    sig = parse_signature("tile(float* x[n/m], int64 n, int64 m)")
    with pytest.raises(ValueError, match=r"kernel tile, parameter x: division by zero in size expression 'n/m' \(with m=0, n=4\)"):
        sig.sizes({"n": 4, "m": 0})
    with pytest.raises(ValueError, match=r"kernel tile, parameter x: division by zero in size expression 'n/m' \(with m=0, n=4\)"):
        bind_args(sig, (f32(2), 4, 0))
    assert bind_args(sig, (f32(2), 4, 2)).values[1:] == (4, 2)


# ---------------------------------------------------------------- context stacks at thread exit


class _FakeDriver:
    """Stands in for pycuda.driver: a context stack per thread, as PyCUDA keeps one; records each
    push and pop with the thread that made it."""

    def __init__(self) -> None:
        import threading

        self.events: list[tuple[int, str]] = []
        lock = threading.Lock()
        serial = threading.get_ident
        events = self.events

        class Ctx:
            def push(self) -> None:
                with lock:
                    events.append((serial(), "push"))

        class Context:
            @staticmethod
            def pop() -> None:
                with lock:
                    events.append((serial(), "pop"))

        class Device:
            def __init__(self, n: int) -> None:
                pass

            def retain_primary_context(self) -> Ctx:
                return Ctx()

        self.Context, self.Device = Context, Device

    def init(self) -> None:
        pass


def test_threads_that_pushed_the_primary_context_pop_it_as_they_end(monkeypatch) -> None:
    """PyCUDA aborts the process (signal 6) when a thread ends with a context on its stack: every
    thread that pybridge.cuda made a context current on pops it as it finishes (thread pools,
    Dask's task threads), on that thread's own stack."""
    import concurrent.futures
    import threading

    from pybridge.cuda import context as cmod

    fake = _FakeDriver()
    monkeypatch.setattr(cmod, "pycuda_driver", lambda: fake)
    monkeypatch.setattr(cmod, "_initialised", False)
    monkeypatch.setattr(cmod, "_primary", {})
    together = threading.Barrier(3)

    def work(wait: bool) -> None:
        cmod.ensure_context(0)
        cmod.ensure_context(0)  # once per thread: the second call pushes nothing
        cmod.ensure_context(1)
        if wait:
            together.wait(timeout=30)  # three pool threads at once

    t = threading.Thread(target=work, args=(False,))
    t.start()
    t.join()
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        list(pool.map(work, [True] * 3))
    assert [what for _, what in fake.events].count("pop") == 8  # 4 threads, 2 devices each
    for n in {n for n, _ in fake.events}:  # popped by the thread that pushed, before it ended
        mine = [what for m, what in fake.events if m == n]  # (a later thread may reuse its id)
        assert mine == ["push", "push", "pop", "pop"] * (len(mine) // 4), f"thread {n}: {mine}"
