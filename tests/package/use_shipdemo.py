"""Run inside a fresh virtual environment where the shipdemo wheel is installed, from a folder outside
the checkout, with neither futhark nor a C compiler on PATH: every entry point in fast (API) mode,
on every packaged backend and through the module functions, against NumPy. Prints OK at the end."""

import inspect
import io
import os
import pydoc
import shutil
import sys
from pathlib import Path

import numpy as np

import pybridge
import shipdemo
from pybridge.futhark import callpath

# SHIPDEMO_EXPECT: "<packaged backends>;<the backend load() picks>" (tests/gpu/test_package_cuda.py
# sets it, and runs with the wheel unpacked on PYTHONPATH rather than in a virtual environment).
expect_backends, expect_default = os.environ.get("SHIPDEMO_EXPECT", "c,multicore;multicore").split(";")
assert shutil.which("cc") is None and shutil.which("futhark") is None and "CC" not in os.environ, os.environ["PATH"]
if "SHIPDEMO_EXPECT" not in os.environ:
    for mod in (pybridge, shipdemo):  # imported from the virtual environment, not from a checkout
        assert Path(sys.prefix).resolve() in Path(mod.__file__).resolve().parents, (mod.__file__, sys.prefix)
assert shipdemo.BACKENDS == tuple(expect_backends.split(",")), shipdemo.BACKENDS

rng = np.random.default_rng(7)
a32 = rng.standard_normal((3, 4)).astype(np.float32)
b32 = rng.standard_normal((4, 5)).astype(np.float32)
a64 = rng.standard_normal((3, 4))
ints = rng.integers(-5, 6, size=(4, 3)).astype(np.int32)
xs, ys = rng.standard_normal(6).astype(np.float32), rng.standard_normal(6).astype(np.float32)


def check(lib) -> None:
    assert lib.mode == "api", lib.mode
    for sub in lib.libraries.values():
        assert sub.mode == "api" and sub.api_module is not None, (sub.mode, sub.mode_note)
        if callpath.compiled is not None:  # a packaged program's calls take the compiled path (issue 34)
            plans = {name: type(ep).__call__ for name, ep in sub.entry_points.items()}
            assert all(isinstance(p, callpath.compiled.Plan) for p in plans.values()), plans
    np.testing.assert_allclose(lib.scale(1.5, a32).numpy(), a32 * np.float32(1.5), rtol=1e-6)
    np.testing.assert_allclose(lib.row_sums(a64).numpy(), a64.sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(lib.matmul(a32, b32).numpy(), a32 @ b32, rtol=1e-4, atol=1e-5)
    c = lib.centroid(xs, ys)
    np.testing.assert_allclose([c.x, c.y], [xs.mean(), ys.mean()], rtol=1e-5)
    p = lib.shift({"x": 1.0, "y": 2.0}, 0.5, -1.0)
    assert (p.x, p.y) == (np.float32(1.5), np.float32(1.0)), p.numpy()
    q = lib.shift(c, 1.0, 1.0)  # a record handle back in
    np.testing.assert_allclose([q.x, q.y], [xs.mean() + 1, ys.mean() + 1], rtol=1e-5)
    acc = lib.acc_new(0)
    assert lib.acc_mean(acc) == 0.0
    acc = lib.acc_add(acc, a64)
    acc = lib.acc_add(acc, a64[:2] * 2)
    both = np.concatenate([a64.ravel(), (a64[:2] * 2).ravel()])
    np.testing.assert_allclose(lib.acc_mean(acc), both.mean(), rtol=1e-12)
    sq = lib.square(3.0)
    assert sq.variant == "rect" and sq.payload == (np.float32(3.0), np.float32(3.0))
    assert lib.area(sq) == np.float32(9.0)
    circle = lib.libraries["shipdemo"].types["shape"].construct("circle", 2.0)
    np.testing.assert_allclose(lib.area(circle), np.pi * 4, rtol=1e-6)
    n, s = lib.count_pos(ints)
    assert (n, s) == ((ints > 0).sum(), ints[ints > 0].sum()), (n, s)
    # A handle result goes back in without a copy, and a wrong dtype is refused with a clear error.
    np.testing.assert_allclose(lib.scale(2.0, lib.scale(1.5, a32)).numpy(), a32 * np.float32(3.0), rtol=1e-6)
    try:
        lib.scale(1.0, a64)
    except TypeError as e:
        assert "float32" in str(e)
    else:
        raise AssertionError("a float64 array was accepted for [][]f32")


for backend in shipdemo.BACKENDS:
    with shipdemo.load(backend) as lib:
        assert lib.backend == backend
        check(lib)

# The module functions: the best backend present (cuda only where a GPU is usable).
scaled = shipdemo.scale(2.0, a32)
np.testing.assert_allclose(scaled.numpy(), a32 * 2, rtol=1e-6)
np.testing.assert_allclose(shipdemo.matmul(a32, b32).numpy(), a32 @ b32, rtol=1e-4, atol=1e-5)
assert (scaled.library.backend, scaled.library.mode) == (expect_default, "api"), scaled.library

# help() shows the signature and the -- | doc comment.
text = pydoc.render_doc(shipdemo.matmul, renderer=pydoc.plaintext)
assert "matmul(a: 'F32Array2D | np.ndarray[tuple[int, int], np.dtype[np.float32]]" in text, text
assert "Matrix product of an n×k and a k×m matrix." in text, text
assert list(inspect.signature(shipdemo.acc_new).parameters) == ["_0"]
text = pydoc.render_doc(shipdemo.Library.count_pos, renderer=pydoc.plaintext)
assert "-> 'tuple[np.int64, np.int32]'" in text and "Count and sum of the positive elements" in text, text

# Nothing was compiled: no cffi module in pybridge's cache.
cache = Path(os.environ["PYBRIDGE_CACHE"])
assert not (cache / "ffi").exists() or not any((cache / "ffi").iterdir()), list((cache / "ffi").iterdir())
print("OK")
