"""Unit tests of the example catalog itself (pybridge/demo/examples.py): the NumPy references, the
tolerance rules and the input makers, and the catalog's agreement with futhark/*.fut and the
reference probe program.  Needs neither Futhark nor a GPU."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pybridge.demo import examples as E

ROOT = Path(__file__).resolve().parents[1]
FUTHARK_DIR = ROOT / "futhark"
REFERENCE_DIR = ROOT / "tests" / "reference"

f32 = np.float32
SETTINGS = settings(max_examples=60, deadline=None)


# ------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------


def fma32(a, b, c):
    """f32 fused multiply-add, emulated: the f32*f32 product is exact in f64."""
    return (np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)).astype(f32)


def f32_arrays(min_size=0, max_size=200, lo=-1e3, hi=1e3):
    return hnp.arrays(
        np.float32,
        st.integers(min_size, max_size),
        elements=st.floats(lo, hi, width=32, allow_nan=False, allow_infinity=False),
    )


@st.composite
def f32_pairs(draw, max_size=200, lo=-1e3, hi=1e3):
    n = draw(st.integers(0, max_size))
    el = st.floats(lo, hi, width=32, allow_nan=False, allow_infinity=False)
    return draw(hnp.arrays(np.float32, n, elements=el)), draw(hnp.arrays(np.float32, n, elements=el))


def sequential_sum32(xs):
    acc = f32(0)
    for x in xs:
        acc = f32(acc + x)
    return acc


def tree_sum32(xs):
    """Pairwise (tree) summation in f32, as a parallel reduction does."""
    v = np.asarray(xs, dtype=f32)
    if v.size == 0:
        return f32(0)
    while v.size > 1:
        if v.size % 2:
            v = np.append(v, f32(0))
        v = (v[0::2] + v[1::2]).astype(f32)
    return v[0]


def mandel_pixel(cr, ci, max_iter):
    """A scalar f32 implementation of the shared definition, independent of the vectorised one."""
    zr = zi = f32(0)
    count = 0
    while count < max_iter and f32(zr * zr + zi * zi) <= f32(4):
        zr, zi = f32(f32(zr * zr - zi * zi) + cr), f32(f32(f32(2) * zr) * zi + ci)
        count += 1
    return count


def mandelbrot_fma(w, h, x0, y0, dx, dy, max_iter):
    """The mandelbrot definition with FMA contraction where nvcc would contract."""
    cr_row = fma32(np.arange(w, dtype=f32), f32(dx), f32(x0))
    ci_col = fma32(np.arange(h, dtype=f32), f32(dy), f32(y0))
    cr, ci = np.meshgrid(cr_row, ci_col)
    zr = np.zeros_like(cr)
    zi = np.zeros_like(cr)
    count = np.zeros(cr.shape, np.int32)
    with np.errstate(over="ignore", invalid="ignore"):
        for _ in range(max_iter):
            act = fma32(zr, zr, fma32(zi, zi, f32(0))) <= f32(4)
            if not act.any():
                break
            nzr = (fma32(zr, zr, -(zi * zi)) + cr).astype(f32)
            nzi = fma32(f32(2) * zr, zi, ci)
            zr = np.where(act, nzr, zr)
            zi = np.where(act, nzi, zi)
            count += act
    return count


def one_pixel(cr, ci, max_iter):
    return int(E.mandelbrot_reference(1, 1, f32(cr), f32(ci), f32(0), f32(0), max_iter)[0, 0])


# ------------------------------------------------------------------------------------------------
# the catalog's shape
# ------------------------------------------------------------------------------------------------


def test_catalog_names_ops_and_sources():
    assert len(set(E.EXAMPLES)) == len(E.EXAMPLES)
    for name, ex in E.EXAMPLES.items():
        assert ex.name == name
        assert ex.sources, name
        assert ex.cuda_op is None or ex.cuda_op in E.CUDA_OPS
        assert ex.tolerance.rule
        for src in ex.sources:
            assert src.kind in ("futhark", "reference")
    # Every CUDA catalog operation has at least one example.
    assert {e.cuda_op for e in E.EXAMPLES.values()} - {None} == set(E.CUDA_OPS)
    assert [e.name for e in E.by_cuda_op("chain")] == [f"chain{n}" for n in range(1, 31)]
    assert E.get("chain7").params["nops"] == 7
    assert set(E.DEMO_EXAMPLES) <= set(E.EXAMPLES)
    with pytest.raises(KeyError, match="no example"):
        E.get("nope")


def test_source_preference_and_paths():
    sax = E.get("saxpy")
    assert [(s.kind, s.library, s.entry) for s in sax.sources] == [
        ("futhark", "saxpy", "saxpy"),
        ("reference", "probe", "saxpy"),
    ]
    assert sax.sources[0].library_relpath("c") == "futhark/c/libsaxpy.so"
    assert sax.sources[1].library_relpath("cuda") == "reference/cuda/libprobe.so"
    assert sax.sources[1].manifest_relpath("c") == "reference/c/probe.json"
    assert E.get("stats").source("reference").fields == {"mean": "mean", "std": "sd"}
    with pytest.raises(ValueError):
        E.LibrarySource("opencl", "x", "y")


def test_find_library_uses_build_dirs(tmp_path, monkeypatch):
    from pybridge import paths

    monkeypatch.setattr(paths, "build_dirs", lambda: [tmp_path])  # ignore any real build/
    assert E.find_library("saxpy", "c") is None
    # The test program only: found when asked for ("reference"), never by default (the demo).
    (tmp_path / "reference" / "c").mkdir(parents=True)
    (tmp_path / "reference" / "c" / "libprobe.so").write_bytes(b"")
    assert E.find_library("saxpy", "c") is None
    src, path = E.find_library("saxpy", "c", kinds=("futhark", "reference"))
    assert src.kind == "reference" and path == tmp_path / "reference" / "c" / "libprobe.so"
    (tmp_path / "futhark" / "c").mkdir(parents=True)
    (tmp_path / "futhark" / "c" / "libsaxpy.so").write_bytes(b"")
    src, path = E.find_library("saxpy", "c", kinds=("futhark", "reference"))
    assert src.kind == "futhark" and path == tmp_path / "futhark" / "c" / "libsaxpy.so"
    assert E.find_library("saxpy", "c", kinds=("reference",))[0].kind == "reference"
    assert E.find_library("matmul", "c", kinds=("reference",)) is None
    assert E.find_library("saxpy", "multicore") is None


def test_import_does_not_pull_in_futhark_or_cuda():
    code = (
        "import sys, pybridge.demo.examples\n"
        "bad = [m for m in sys.modules if m.startswith(('pybridge.futhark', 'pybridge.cuda'))]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


# --- agreement with the Futhark sources --------------------------------------------------------

_PARAM = re.compile(r"\((\w+)\s*:\s*([^)]*)\)")


def _entries(fut_text: str) -> dict[str, list[tuple[str, str]]]:
    """entry name -> [(param name, type)], for one-line entry headers."""
    out = {}
    for line in fut_text.splitlines():
        m = re.match(r"entry\s+(\w+)\s*((?:\[\w+\]\s*)*)(.*)", line)
        if m:
            head = m.group(3).split("=", 1)[0]
            # Drop the return type: the last ':' at parenthesis depth 0.
            depth, cut = 0, len(head)
            for i, ch in enumerate(head):
                depth += ch == "("
                depth -= ch == ")"
                if ch == ":" and depth == 0:
                    cut = i
            out[m.group(1)] = _PARAM.findall(head[:cut])
    return out


def _type_of(value) -> tuple[int, str]:
    a = np.asarray(value)
    names = {"float16": "f16", "float32": "f32", "float64": "f64", "bool": "bool"}
    elem = names.get(a.dtype.name) or a.dtype.name.replace("int", "i").replace("ui", "u")
    return a.ndim, elem


def _parse_type(t: str) -> tuple[int, str]:
    t = t.strip().lstrip("*")
    rank = len(re.findall(r"\[[^\]]*\]", t))
    return rank, re.sub(r"\[[^\]]*\]", "", t).strip()


def test_futhark_sources_exist_with_matching_parameters():
    for ex in E.EXAMPLES.values():
        for src in ex.sources:
            if src.kind != "futhark":
                continue
            path = FUTHARK_DIR / f"{src.library}.fut"
            assert path.exists(), f"{ex.name}: {path} missing"
            entries = _entries(path.read_text())
            assert src.entry in entries, f"{ex.name}: no entry {src.entry} in {path.name}"
            params = entries[src.entry]
            assert tuple(p for p, _ in params) == ex.arg_names, (ex.name, params)
            args = ex.inputs(size=5)
            assert [_type_of(a) for a in args] == [_parse_type(t) for _, t in params], ex.name


def test_every_futhark_entry_is_in_the_catalog():
    catalogued = {(s.library, s.entry) for e in E.EXAMPLES.values() for s in e.sources if s.kind == "futhark"}
    for path in sorted(FUTHARK_DIR.glob("*.fut")):
        for entry in _entries(path.read_text()):
            assert (path.stem, entry) in catalogued, f"{path.name}: entry {entry} has no example"


def test_chain_fut_has_all_thirty_and_matches_probe():
    text = (FUTHARK_DIR / "chain.fut").read_text()
    entries = re.findall(r"^entry (chain\d+) .*$", text, flags=re.M)
    assert entries == [f"chain{n}" for n in range(1, 31)]
    for n in range(1, 31):
        line = re.search(rf"^entry chain{n} .*$", text, flags=re.M).group(0)
        assert line.endswith(" |> ".join(f"map (op {k})" for k in range(1, n + 1)))
    probe = (REFERENCE_DIR / "probe.fut").read_text()
    op = "def op (k: i32) (x: f32) : f32 = x * 1.0001f32 + f32.i32 k * 0.001f32"
    assert op in probe and op in text
    for n in E.PROBE_CHAIN_LENGTHS:
        pat = rf"^entry chain{n} .*$"
        assert re.search(pat, probe, re.M).group(0) == re.search(pat, text, re.M).group(0)


def test_reference_sources_match_the_probe_manifest():
    manifest = json.loads((REFERENCE_DIR / "probe.c.json").read_text())
    eps = manifest["entry_points"]
    for ex in E.EXAMPLES.values():
        for src in ex.sources:
            if src.kind != "reference":
                continue
            assert src.library == "probe"
            assert src.entry in eps, f"{ex.name}: probe has no entry {src.entry}"
            inputs = eps[src.entry]["inputs"]
            assert tuple(i["name"] for i in inputs) == ex.arg_names, ex.name
            args = ex.inputs(size=5)
            assert [_type_of(a) for a in args] == [_parse_type(i["type"]) for i in inputs], ex.name
            if src.fields:
                out_type = eps[src.entry]["outputs"][0]["type"]
                names = {f["name"] for f in manifest["types"][out_type]["record"]["fields"]}
                assert set(src.fields.values()) <= names


# --- inputs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(E.EXAMPLES))
def test_inputs_are_deterministic_and_reference_checks_itself(name):
    ex = E.get(name)
    a1, a2 = ex.inputs(size=300, seed=7), ex.inputs(size=300, seed=7)
    assert len(a1) == len(ex.arg_names)
    for x, y in zip(a1, a2):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        assert np.asarray(x).dtype == np.asarray(y).dtype
    expected = ex.expected(a1)
    result = ex.check(a1, expected)
    assert result.ok, result.message
    if ex.make_bad_inputs is not None:
        bad = ex.make_bad_inputs(np.random.default_rng(1), 300)
        with pytest.raises((IndexError, ValueError)):
            ex.expected(bad)
        assert ex.error_substring


def test_input_sizes():
    assert E.get("saxpy").inputs(1000)[1].shape == (1000,)
    a, b = E.get("matmul").inputs(100 * 100)
    assert a.shape == b.shape == (100, 100) and a.dtype == np.float32
    w, h, *_ = E.get("mandelbrot").inputs(64 * 64)
    assert (int(w), int(h)) == (64, 64)
    nbins, xs = E.get("histogram").inputs(10_000)
    assert ((xs < 0) | (xs >= nbins)).any() and ((xs >= 0) & (xs < nbins)).any()


# ------------------------------------------------------------------------------------------------
# references and tolerances, one computation at a time
# ------------------------------------------------------------------------------------------------


@SETTINGS
@given(a=st.floats(-1e3, 1e3, width=32), pair=f32_pairs())
def test_saxpy_tolerance_accepts_f32_and_fma(a, pair):
    xs, ys = pair
    ex = E.get("saxpy")
    args = (f32(a), xs, ys)
    plain = (f32(a) * xs + ys).astype(f32)
    assert ex.check(args, plain).ok
    assert ex.check(args, fma32(f32(a), xs, ys)).ok


def test_saxpy_tolerance_rejects_wrong_results():
    ex = E.get("saxpy")
    args = ex.inputs(1000)
    good = ex.expected(args)
    bad = good.copy()
    bad[17] = np.nextafter(bad[17], f32(np.inf)) * f32(1.001)
    r = ex.check(args, bad)
    assert not r.ok and r.mismatches == 1 and "(17,)" in r.message
    assert not ex.check(args, good.astype(np.float64)).ok  # wrong dtype
    assert not ex.check(args, good[:-1]).ok  # wrong shape


@SETTINGS
@given(xs=f32_arrays(max_size=300))
def test_sum_reference_and_tolerance(xs):
    ex = E.get("sum")
    ref = ex.expected((xs,))
    assert isinstance(ref, np.float32)
    assert ref == f32(math.fsum(xs.astype(np.float64).tolist()))
    for impl in (sequential_sum32(xs), tree_sum32(xs), np.sum(xs, dtype=np.float32)):
        r = ex.check((xs,), f32(impl))
        assert r.ok, r.message


@SETTINGS
@given(xs=hnp.arrays(np.float32, st.integers(1, 300), elements=st.integers(-100, 100).map(float)))
def test_sum_tolerance_catches_a_dropped_element(xs):
    # Integer-valued inputs: any summation order is exact, and the bound stays below 1.
    assume(np.any(xs != 0))
    ex = E.get("sum")
    i = int(np.flatnonzero(xs)[0])
    dropped = np.delete(xs, i)
    assert ex.check((xs,), sequential_sum32(xs)).ok
    assert not ex.check((xs,), sequential_sum32(dropped)).ok


@SETTINGS
@given(pair=f32_pairs())
def test_dot_reference_and_tolerance(pair):
    xs, ys = pair
    ex = E.get("dot")
    ref = ex.expected((xs, ys))
    assert ref == f32(math.fsum((xs.astype(np.float64) * ys.astype(np.float64)).tolist()))
    assert ex.check((xs, ys), sequential_sum32((xs * ys).astype(f32))).ok
    assert ex.check((xs, ys), tree_sum32((xs * ys).astype(f32))).ok
    acc = f32(0)
    for x, y in zip(xs, ys):  # the FMA-contracted sequential loop
        acc = fma32(x, y, acc)
    assert ex.check((xs, ys), f32(acc)).ok


@SETTINGS
@given(n=st.integers(0, 200), data=st.data())
def test_dot_f64_reference_and_tolerance(n, data):
    el = st.floats(-1e6, 1e6, allow_nan=False)
    xs = data.draw(hnp.arrays(np.float64, n, elements=el))
    ys = data.draw(hnp.arrays(np.float64, n, elements=el))
    ex = E.get("dot_f64")
    acc = 0.0
    for x, y in zip(xs.tolist(), ys.tolist()):
        acc += x * y
    assert ex.check((xs, ys), np.float64(acc)).ok
    assert ex.check((xs, ys), np.float64(np.dot(xs, ys))).ok


def _numpy_stats(x, ddof=0):
    return {"sum": np.sum(x), "mean": np.mean(x), "std": np.std(x, ddof=ddof)}


def _futhark_like_stats(x):
    """The c backend's order: sequential sums."""
    n = x.size
    s = np.cumsum(x)[-1] if n else 0.0
    m = s / n if n else math.nan
    ss = np.cumsum((x - m) * (x - m))[-1] if n else 0.0
    return {"sum": np.float64(s), "mean": np.float64(m), "std": np.float64(math.sqrt(ss / n) if n else math.nan)}


@SETTINGS
@given(xs=hnp.arrays(np.float64, st.integers(1, 200), elements=st.floats(-1e6, 1e6)))
def test_stats_reference_and_tolerance(xs):
    ex = E.get("stats")
    ref = ex.expected((xs,))
    assert set(ref) == {"sum", "mean", "std"}
    assert all(isinstance(v, np.float64) for v in ref.values())
    assert ref["std"] >= 0
    np.testing.assert_allclose(ref["std"], np.std(xs), rtol=1e-9, atol=1e-9 * (1 + np.max(np.abs(xs))))
    r = ex.check((xs,), _numpy_stats(xs))
    assert r.ok, r.message
    r = ex.check((xs,), _futhark_like_stats(xs))
    assert r.ok, r.message
    # The probe's record: only mean and sd, read under its own names.
    probe = SimpleNamespace(mean=ref["mean"], sd=ref["std"])
    assert ex.check((xs,), probe, source=ex.source("reference")).ok


@SETTINGS
@given(xs=hnp.arrays(np.float64, st.integers(2, 100), elements=st.floats(-1e3, 1e3)))
def test_stats_tolerance_rejects_sample_std(xs):
    assume(np.std(xs) > 1e-3)
    ex = E.get("stats")
    assert not ex.check((xs,), _numpy_stats(xs, ddof=1)).ok


def test_stats_empty_and_constant():
    ex = E.get("stats")
    empty = np.zeros(0)
    ref = ex.expected((empty,))
    assert ref["sum"] == 0 and math.isnan(ref["mean"]) and math.isnan(ref["std"])
    assert ex.check((empty,), _futhark_like_stats(empty)).ok
    assert not ex.check((empty,), {"sum": 0.0, "mean": 0.0, "std": 0.0}).ok
    const = np.full(1000, 0.1)
    assert ex.check((const,), _futhark_like_stats(const)).ok
    assert ex.expected((const,))["std"] < 1e-15


@SETTINGS
@given(xs=f32_arrays(max_size=300))
def test_prefix_sum_reference_is_cumsum_in_f64(xs):
    ex = E.get("prefix_sum")
    ref = ex.expected((xs,))
    assert ref.dtype == np.float32 and ref.shape == xs.shape
    np.testing.assert_array_equal(ref, np.cumsum(xs.astype(np.float64)).astype(np.float32))
    assert ex.check((xs,), np.cumsum(xs, dtype=np.float32)).ok  # sequential f32
    # A Hillis-Steele scan in f32 (a parallel order).
    v = xs.copy()
    step = 1
    while step < v.size:
        v = np.concatenate([v[:step], (v[step:] + v[:-step]).astype(f32)])
        step *= 2
    assert ex.check((xs,), v).ok


def test_prefix_sum_tolerance_is_per_prefix():
    # Early prefixes have small terms, so their bound is small even though later ones are large.
    xs = np.array([1.0, 2.0, 1e6, -1e6], dtype=f32)
    ex = E.get("prefix_sum")
    good = np.array([1.0, 3.0, 1000003.0, 3.0], dtype=f32)
    assert ex.check((xs,), good).ok
    assert ex.check((xs,), np.array([1.0, 3.0, 1000003.0, 3.25], dtype=f32)).ok  # within 4*eps*2e6
    r = ex.check((xs,), np.array([1.0, 3.001, 1000003.0, 3.0], dtype=f32))
    assert not r.ok and "(1,)" in r.message


@SETTINGS
@given(xs=hnp.arrays(np.int64, st.integers(0, 200)))
def test_prefix_sum_i64_wraps(xs):
    ex = E.get("prefix_sum_i64")
    ref = ex.expected((xs,))
    acc, want = 0, []
    for x in xs.tolist():
        acc = (acc + x + 2**63) % 2**64 - 2**63
        want.append(acc)
    np.testing.assert_array_equal(ref, np.array(want, dtype=np.int64))
    assert ex.check((xs,), ref.copy()).ok
    if xs.size:
        off = ref.copy()
        off[-1] ^= 1
        assert not ex.check((xs,), off).ok


@SETTINGS
@given(dims=st.tuples(st.integers(0, 12), st.integers(0, 12), st.integers(0, 12)), data=st.data())
def test_matmul_reference_and_tolerance(dims, data):
    n, m, p = dims
    el = st.floats(-100, 100, width=32)
    a = data.draw(hnp.arrays(np.float32, (n, m), elements=el))
    b = data.draw(hnp.arrays(np.float32, (m, p), elements=el))
    ex = E.get("matmul")
    ref = ex.expected((a, b))
    assert ref.shape == (n, p) and ref.dtype == np.float32
    np.testing.assert_allclose(ref, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-6, atol=1e-3)
    assert ex.check((a, b), (a @ b).astype(np.float32)).ok
    naive = np.zeros((n, p), np.float32)  # sequential f32 dot products
    for i in range(n):
        for k in range(p):
            naive[i, k] = sequential_sum32((a[i, :] * b[:, k]).astype(f32))
    assert ex.check((a, b), naive).ok


def test_matmul_tolerance_rejects_transposed_operand():
    ex = E.get("matmul")
    a, b = ex.inputs(16 * 16)
    assert not ex.check((a, b), (a @ b.T).astype(f32)).ok
    with pytest.raises(ValueError):
        ex.expected((a[:, :3], b))


@SETTINGS
@given(
    nbins=st.integers(0, 40),
    xs=hnp.arrays(
        np.int32,
        st.integers(0, 300),
        elements=st.one_of(st.integers(-5, 45), st.integers(-(2**31), 2**31 - 1)),
    ),
)
def test_histogram_ignores_out_of_range_values(nbins, xs):
    ex = E.get("histogram")
    ref = ex.expected((np.int64(nbins), xs))
    want = [0] * nbins
    for v in xs.tolist():
        if 0 <= v < nbins:
            want[v] += 1
    assert ref.dtype == np.int32
    assert ref.tolist() == want
    assert ref.sum() == np.count_nonzero((xs >= 0) & (xs < nbins))


def test_histogram_negative_nbins():
    with pytest.raises(ValueError):
        E.get("histogram").expected((np.int64(-1), np.zeros(3, np.int32)))


# --- mandelbrot --------------------------------------------------------------------------------


@pytest.mark.parametrize("c", [(0.0, 0.0), (-1.0, 0.0), (-0.1, 0.1), (-0.5, 0.3), (-2.0, 0.0), (0.0, 1.0)])
def test_mandelbrot_points_of_the_set_reach_max_iter(c):
    # -2: z = 0, -2, 2, 2, ...: |z|^2 == 4 never exceeds 4.  i: 0, i, -1+i, -i, -1+i, ... (period 2).
    assert one_pixel(*c, 500) == 500


@pytest.mark.parametrize("c", [(3.0, 0.0), (-2.5, 0.1), (0.0, 2.5), (1.5, 1.5), (-100.0, 100.0)])
def test_mandelbrot_far_points_escape_after_one_iteration(c):
    # z1 = c and |c|^2 > 4.
    assert one_pixel(*c, 100) == 1


def test_mandelbrot_escape_edges():
    assert one_pixel(2.0, 0.0, 100) == 2  # z1 = 2 (|z|^2 == 4 does not escape), z2 = 6
    assert 2 < one_pixel(0.3, 0.0, 1000) < 1000  # outside, escapes slowly
    for max_iter in (0, -3):
        img = E.mandelbrot_reference(7, 5, f32(-2), f32(-1), f32(0.5), f32(0.5), max_iter)
        assert img.shape == (5, 7) and img.dtype == np.int32 and not img.any()
    assert E.mandelbrot_reference(0, 3, f32(0), f32(0), f32(1), f32(1), 10).shape == (3, 0)


@settings(max_examples=30, deadline=None)
@given(
    w=st.integers(0, 9), h=st.integers(0, 9),
    x0=st.floats(-2.5, 1.0, width=32), y0=st.floats(-1.5, 1.5, width=32),
    dx=st.floats(-0.375, 0.375, width=32), dy=st.floats(-0.375, 0.375, width=32),
    max_iter=st.integers(0, 60),
)
def test_mandelbrot_reference_matches_scalar_definition(w, h, x0, y0, dx, dy, max_iter):
    img = E.mandelbrot_reference(np.int64(w), np.int64(h), f32(x0), f32(y0), f32(dx), f32(dy), np.int32(max_iter))
    assert img.shape == (h, w) and img.dtype == np.int32
    for i in range(h):
        for j in range(w):
            cr = f32(f32(x0) + f32(f32(j) * f32(dx)))
            ci = f32(f32(y0) + f32(f32(i) * f32(dy)))
            assert img[i, j] == mandel_pixel(cr, ci, max_iter), (i, j)


def test_mandelbrot_tolerance_accepts_fma_and_rejects_a_shifted_image():
    ex = E.get("mandelbrot")
    args = ex.inputs(256 * 256)
    ref = ex.expected(args)
    fma = mandelbrot_fma(int(args[0]), int(args[1]), *args[2:6], int(args[6]))
    assert (fma != ref).any()  # contraction does change some boundary pixels ...
    r = ex.check(args, fma)
    assert r.ok, r.message  # ... few enough
    assert not ex.check(args, np.roll(ref, 1, axis=1)).ok
    too_big = ref.copy()
    too_big[0, 0] = int(args[6]) + 1
    assert not ex.check(args, too_big).ok  # counts can't exceed max_iter


def test_mismatch_fraction_counts():
    tol = E.MismatchFraction(0.01, 2, "test")
    ref = np.zeros((20, 20), np.int32)  # 400 pixels: 4 may differ
    got = ref.copy()
    got.flat[:4] = 7
    assert tol.check((), ref, got).ok
    got.flat[4] = 7
    assert not tol.check((), ref, got).ok
    small = np.zeros(3, np.int32)
    assert tol.check((), small, np.array([1, 1, 0], np.int32)).ok  # min_allowed = 2


# --- chains ------------------------------------------------------------------------------------


@SETTINGS
@given(xs=f32_arrays(max_size=20, lo=-100, hi=100), n=st.integers(1, 30))
def test_chain_reference_is_a_step_by_step_f32_loop(xs, n):
    ex = E.get(f"chain{n}")
    ref = ex.expected((xs,))
    assert ref.dtype == np.float32
    for x, r in zip(xs.tolist(), ref.tolist()):
        y = f32(x)
        for k in range(1, n + 1):
            y = f32(f32(y * f32(1.0001)) + f32(f32(k) * f32(0.001)))
        assert y == f32(r)
    # fma contraction of each step stays within the bound
    y = xs.copy()
    for k in range(1, n + 1):
        y = fma32(y, f32(1.0001), f32(k) * f32(0.001))
    assert ex.check((xs,), y).ok
    np.testing.assert_array_equal(xs, xs.copy())  # input untouched


def test_chain_constants_are_the_f32_literals():
    assert f32(1.0001) == f32(np.float64("1.0001"))
    assert float(f32(1.0001)).hex() == "0x1.00068e0000000p+0"
    assert float(f32(0.001)).hex() == "0x1.0624de0000000p-10"


def test_chain_tolerance_catches_a_skipped_op():
    xs = E.get("chain8").inputs(1000)[0]
    skipped = xs.copy()
    for k in [1, 2, 3, 5, 6, 7, 8]:
        skipped = E.chain_op(k, skipped)
    assert not E.get("chain8").check((xs,), skipped).ok
    assert not E.get("chain8").check((xs,), E.chain_reference(xs, 7)).ok


# --- bounds, probe-only entries ----------------------------------------------------------------


def test_index_at_and_checked_sqrt_references():
    xs = np.arange(4, dtype=f32)
    ia = E.get("index_at")
    assert ia.expected((xs, np.int64(3))) == f32(3)
    for bad in (4, 10, -1):
        with pytest.raises(IndexError, match="out of bounds"):
            ia.expected((xs, np.int64(bad)))
    cs = E.get("checked_sqrt")
    assert cs.expected((np.float64(2.25),)) == 1.5
    assert math.copysign(1, cs.expected((np.float64(-0.0),))) == -1
    for bad in (-1.0, math.nan, -math.inf):
        with pytest.raises(ValueError, match="Assertion is false"):
            cs.expected((np.float64(bad),))
    assert cs.check((np.float64(2.0),), np.float64(math.sqrt(2.0))).ok
    assert not cs.check((np.float64(2.0),), np.float64(1.4142)).ok


def test_trivial_bump_pair():
    tr = E.get("trivial")
    assert tr.expected((np.int32(41),)) == 42
    top = tr.expected((np.int32(2**31 - 1),))
    assert top == -(2**31) and top.dtype == np.int32
    xs = np.array([1.5, 2.0], f32)
    bumped = E.get("bump").expected((xs,))
    assert bumped.tolist() == [2.5, 2.0] and xs.tolist() == [1.5, 2.0]
    pair = E.get("pair")
    out = pair.expected((f32(1.5), np.bool_(True), np.float16(3.0)))
    assert out == (f32(3.0), np.False_, np.float16(6.0))
    assert [type(v) for v in out] == [np.float32, np.bool_, np.float16]
    assert pair.check((f32(1.5), np.bool_(True), np.float16(3.0)), out).ok
    wrong = (f32(3.0), np.True_, np.float16(6.0))
    assert not pair.check((f32(1.5), np.bool_(True), np.float16(3.0)), wrong).ok


# --- the generic pieces ------------------------------------------------------------------------


class FakeHandle:
    def __init__(self, value):
        self._value = value

    def numpy(self):
        return np.asarray(self._value)


def test_results_through_handles():
    ex = E.get("saxpy")
    args = ex.inputs(50)
    assert ex.check(args, FakeHandle(ex.expected(args))).ok
    rec = SimpleNamespace(sum=np.float64(1.0), mean=np.float64(0.5), std=np.float64(0.5))
    assert E.get_field(rec, "mean") == 0.5 and E.get_field({"mean": 1}, "mean") == 1
    stats = E.get("stats")
    xs = np.array([0.0, 1.0])
    assert stats.check((xs,), rec).ok
    assert not stats.check((xs,), SimpleNamespace(sum=1.0, mean=0.5)).ok  # no std field
    assert not stats.check((xs,), {"sum": np.float32(1), "mean": 0.5, "std": 0.5}).ok  # f32 field


def test_elementwise_bound_special_values():
    tol = E.ElementwiseBound(lambda args, e: 0.0, "exact-ish")
    e = np.array([np.inf, -np.inf, np.nan, 1.0], np.float32)
    assert tol.check((), e, e.copy()).ok
    assert not tol.check((), e, np.array([np.inf, np.inf, np.nan, 1.0], np.float32)).ok
    assert not tol.check((), e, np.array([np.inf, -np.inf, 0.0, 1.0], np.float32)).ok
    exact = E.Exact()
    assert exact.check((), e, e.copy()).ok
    assert not exact.check((), np.int32(3), np.int64(3)).ok
