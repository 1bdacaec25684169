"""Issue 22, item 1: sizes whose byte count wraps around 2^64.

`iota n` with n = 2^61 computed 8 * n = 0 bytes, allocated nothing and wrote 2^61 elements
(SIGSEGV); `replicate n (replicate 4 x)` with n = -2^62 returned a handle of shape (-2^62, 4).
csource.py now computes every allocation size with a checked product (pb_szmul). Here hypothesis
draws sizes near the wrap points (2^31, 2^32, 2^61, 2^62, 2^63 - 1, -2^62, pairs whose product with
the element width is a multiple of 2^64 plus a little) for every allocation shape the
generated-interface fuzz draws (tests/reference/wrap.fut: 12 primitives x ranks 1-3, arrays of
records, an array of sums, a record of arrays, per-thread arrays), and calls them in child
processes: a crash is a test failure naming the signal and the call.

Each call must give what Futhark's semantics allow: a negative dimension a ProgramError (or an
OutOfMemoryError when another array of the call cannot exist), an array of more than 2^63 - 1 bytes
an OutOfMemoryError (or a ProgramError where a size the program computes, flatten's n * m, wraps
to a negative one), a small array the right shape and values; after every error the context
computes correctly. Sizes whose arrays could exist but are large (4 KiB .. 2^63 bytes) are not
drawn: with Linux overcommit, malloc succeeds and the kernel kills the process later.

Backends: c and multicore here; cuda on a GPU machine (`make futhark FUTHARK_BACKEND=cuda`, then
`pytest -m gpu tests/test_wrap_sizes.py`).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import pybridge.futhark as pf
from pybridge.futhark.build import compile_library, futhark_compiler
from pybridge.futhark.csource import MARK, _checked_product, harden
from pybridge.paths import find_build_file
from conftest import library_sources

import interface_gen as g

pytestmark = pytest.mark.slow  # left out of the quick subset (-m 'not slow')

ROOT = Path(__file__).resolve().parents[1]
WRAP = ROOT / "tests" / "reference" / "wrap.fut"
BACKENDS = ("c", "multicore", "cuda")
SMALL = 4096  # bytes: arrays up to this size are computed and compared
LIMIT = 2**63 - 1  # bytes: an array of this many cannot exist
EXAMPLES = int(os.environ.get("PYBRIDGE_WRAP_EXAMPLES", "8"))
CALLS = 25  # per child process


# ---------------------------------------------------------------- the entry points of wrap.fut
# name -> (size parameters, arrays: (which size parameters give its shape, bytes per element),
#          expected value of a small result from the sizes, may an empty result come back although
#          a size is negative: True when the first size is 0 (Futhark evaluates nothing for an empty
#          outer map), "product" when the product of the sizes is 0)


def _rep(width: int, rank: int, prim: str):
    def value(dims):
        return np.full(dims, True if prim == "bool" else 1, dtype=g.DTYPES[prim])
    return (rank, [(tuple(range(rank)), width)], value, False)


def _perthread(n: int, k: int) -> np.ndarray:
    out = []
    for i in range(n):
        a = np.cumsum(np.arange(k, dtype=np.int64) + i)
        out.append(int(np.sum(a * a[::-1])) if k else 0)
    return np.array(out, dtype=np.int64)


ENTRIES = {f"rep_{p}_{r}": _rep(g.DTYPES[p].itemsize, r, p) for p in g.PRIMS for r in (1, 2, 3)}
ENTRIES.update({
    "iot": (1, [((0,), 8)], lambda d: np.arange(d[0], dtype=np.int64), False),
    "recs1": (1, [((0,), 8)], None, False),
    "recs2": (2, [((0, 1), 4)], None, False),
    "sums": (1, [((0,), 8)], None, False),
    "parts": (2, [((0,), 1), ((1, 0), 8)], None, False),
    "perthread": (2, [((0,), 8), ((1,), 8), ((0, 1), 8)], lambda d: _perthread(*d), True),
    # flatten (replicate n (replicate m x)) is fused into replicate (n * m) x: nothing of size m exists
    "flat": (2, [((0, 1), 2)], lambda d: np.full(d[0] * d[1], 3, np.int16), "product"),
})


def test_wrap_program_covers_the_fuzzed_shapes() -> None:
    """Every primitive at every rank the generated-interface fuzz draws has an entry here."""
    text = WRAP.read_text()
    for p in g.PRIMS:
        for rank in (1, 2, 3):
            assert re.search(rf"^entry rep_{p}_{rank} .*: {re.escape('[]' * rank)}{p} =", text, re.M), (p, rank)
    for name in ENTRIES:
        assert re.search(rf"^entry {name} ", text, re.M), name


# ---------------------------------------------------------------- drawing sizes near the wrap points

NEAR = [2**31, 2**32, 2**33, 2**60, 2**61, 2**62, 2**63 - 1, 2**63 // 3, 3 * 2**61, 2**61 + 1, 2**62 - 1]
NEGATIVE = [-1, -2, -(2**31), -(2**62), -(2**63), -(2**61) - 3]


@st.composite
def wrapping_pair(draw, width: int) -> tuple[int, int]:
    """Two sizes whose product times ``width`` is a multiple of 2^64 plus a small remainder."""
    a = draw(st.sampled_from([2**k for k in range(1, 63)]) | st.integers(2, 2**40))
    target = 2**64 * draw(st.integers(1, 3)) + draw(st.integers(0, 64)) * width
    b = min(max(1, target // (a * width)), 2**63 - 1)
    return (a, b) if draw(st.booleans()) else (b, a)


def size() -> st.SearchStrategy[int]:
    return st.one_of(st.integers(0, 3), st.sampled_from(NEAR), st.sampled_from(NEGATIVE), st.integers(-(2**63), 2**63 - 1))


@st.composite
def call(draw) -> tuple[str, list[int]]:
    name = draw(st.sampled_from(sorted(ENTRIES)))
    nsizes, arrays, _, _ = ENTRIES[name]
    dims = [draw(size()) for _ in range(nsizes)]
    if nsizes >= 2 and draw(st.booleans()):
        i = draw(st.integers(0, nsizes - 2))
        dims[i], dims[i + 1] = draw(wrapping_pair(max(w for _, w in arrays)))
    assume(expected(name, dims) is not None)
    return name, dims


def _wrap64(v: int) -> int:
    return (v + 2**63) % 2**64 - 2**63


def expected(name: str, dims: list[int]) -> set[str] | None:
    """The outcomes Futhark's semantics allow; None for sizes not drawn (see the module's doc)."""
    nsizes, arrays, _, lenient = ENTRIES[name]
    sizes = [math.prod(dims[i] for i in axes) * w for axes, w in arrays]
    # flatten's n * m is the program's own i64 arithmetic, which wraps (Futhark's semantics): the
    # fused replicate (n * m) x makes an array of the wrapped size, if that is >= 0
    fused = lenient == "product" and 0 <= _wrap64(math.prod(dims)) * 2 <= SMALL
    if lenient == "product" and _wrap64(math.prod(dims)) * 2 > SMALL:
        return None  # the wrapped size is an array that may exist, but large: not drawn
    empty_ok = {"ok"} if (lenient is True and dims[0] == 0) or fused else set()
    if any(d < 0 for d in dims):
        return {"ProgramError", "OutOfMemoryError"} | empty_ok
    if any(s >= LIMIT for s in sizes):  # ProgramError: a size the program computes (flatten's n * m) wrapped
        return {"OutOfMemoryError", "ProgramError"} | empty_ok
    if all(s <= SMALL for s in sizes):
        # an empty array whose other dimensions are large: only when no loop runs over them
        first_zero = next((i for i, d in enumerate(dims) if d == 0), None)
        if first_zero is not None and any(d > SMALL for d in dims[:first_zero]):
            return None
        return {"ok", "OutOfMemoryError"} if any(d > SMALL for d in dims) else {"ok"}
    return None


# ---------------------------------------------------------------- the child process

CHILD = r"""
import json, sys, numpy as np, pybridge.futhark as pf
# cuda: NVRTC compiles the kernels at every context creation unless they are cached; plain device
# allocations (unified_memory=0), never managed memory, which these sizes would oversubscribe
lib = pf.load(sys.argv[1], **({"cache_file": sys.argv[1] + ".kernels", "unified_memory": 0} if "/cuda/" in sys.argv[1] else {}))
calls = json.loads(sys.stdin.read())
def sane():
    return lib.rep_i32_1(3).numpy().tolist() == [1, 1, 1] and lib.iot(4).numpy().tolist() == [0, 1, 2, 3]
for i, (name, dims) in enumerate(calls):
    print(json.dumps({"calling": i}), flush=True)
    out = {"i": i}
    try:
        r = lib[name](*[np.int64(d) for d in dims])
        out["outcome"] = "ok"
        if isinstance(r, pf.ArrayHandle):
            out["shape"] = list(r.shape)
            if max(r.shape) <= 4096:
                out["data"] = r.numpy().ravel().tolist()
        elif r.otype.info.record_array or r.otype.info.opaque_array:
            out["shape"] = list(r.shape)
        else:
            out["shape"] = [list(r.field(f).shape) for f in r.field_names]
    except Exception as e:
        out["outcome"] = type(e).__name__
        out["message"] = str(e)[:300]
    out["sane"] = sane()
    print(json.dumps(out), flush=True)
print(json.dumps({"done": True}), flush=True)
"""


def run_calls(so: Path, calls: list[tuple[str, list[int]]]) -> list[dict]:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(so)], input=json.dumps(calls), capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])},
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines or not lines[-1].get("done"):
        last = next((c["calling"] for c in reversed(lines) if "calling" in c), None)
        what = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
        raise AssertionError(
            f"child died ({what}) during call {last}: {calls[last] if last is not None else None}\n{proc.stderr[-3000:]}"
        )
    return [c for c in lines if "outcome" in c]


def check(calls: list[tuple[str, list[int]]], results: list[dict]) -> None:
    for (name, dims), r in zip(calls, results):
        where = f"{name}({', '.join(map(str, dims))})"
        allowed = expected(name, dims)
        assert allowed is not None
        assert r["outcome"] in allowed, f"{where}: {r['outcome']} {r.get('message', '')!r}, expected one of {sorted(allowed)}"
        assert r["sane"], f"{where}: the context computes wrongly after {r['outcome']}"
        if r["outcome"] != "ok":
            continue
        _, arrays, value, _ = ENTRIES[name]
        shape = r["shape"]
        if name == "parts":
            assert shape == [[dims[0]], [dims[1], dims[0]]], f"{where}: shapes {shape}"
        elif name in ("recs1", "sums"):
            assert shape == dims[:1], f"{where}: shape {shape}"
        elif name == "recs2":
            assert shape == dims, f"{where}: shape {shape}"
        elif name == "flat":
            assert shape == [_wrap64(dims[0] * dims[1])] and shape[0] >= 0, f"{where}: shape {shape}"
            assert r.get("data", []) == [3] * shape[0], f"{where}: values"
        else:
            want = list(value(dims).shape) if max(dims) <= SMALL else None
            if want is not None:
                assert shape == want, f"{where}: shape {shape}, expected {want}"
            assert all(d >= 0 for d in shape), f"{where}: negative shape {shape}"
            if "data" in r:
                got = np.array(r["data"], dtype=value(dims).dtype if value(dims).dtype != np.float16 else np.float64)
                np.testing.assert_array_equal(got, value(dims).ravel().astype(got.dtype), err_msg=where)


@pytest.mark.parametrize("so", library_sources("wrap", BACKENDS))
@given(calls=st.lists(call(), min_size=CALLS, max_size=CALLS))
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_sizes_near_the_wrap_points(so: Path, calls) -> None:
    check(calls, run_calls(so, calls))


WRAP_POINTS = [  # the reproductions and the pure wrap points, every time
    ("iot", [2**61]), ("rep_i64_2", [2**61, 8]), ("rep_i64_2", [-(2**62), 4]), ("rep_i64_2", [-1, -1]),
    ("rep_i64_2", [-5, 0]), ("rep_i64_2", [0, -5]), ("perthread", [4, 2**61]), ("perthread", [2**61, 4]),
    ("rep_u8_3", [2**32, 2**32, 1]), ("rep_u8_3", [2**22, 2**21, 2**21]), ("rep_f32_2", [2**31, 2**31]),
    ("rep_bool_1", [2**63 - 1]), ("rep_i16_1", [2**63 - 1]), ("recs2", [2**31, 2**31]), ("recs1", [2**61]),
    ("sums", [2**61]), ("parts", [2**32, 2**29]), ("flat", [2**32, 2**31]), ("rep_f16_3", [-(2**62), -(2**62), 4]),
    ("rep_u64_3", [2**20, 2**20, 2**21]), ("rep_i8_2", [2**62, 4]), ("rep_i8_1", [3]), ("rep_f64_3", [2, 0, 2**62]),
]


@pytest.mark.parametrize("so", library_sources("wrap", BACKENDS))
def test_the_named_wrap_points(so: Path) -> None:
    check(WRAP_POINTS, run_calls(so, WRAP_POINTS))


# ---------------------------------------------------------------- arrays no device can hold (cuda)

DEVICE_LIMIT = 2**44  # bytes (16 TiB): more than any GPU's memory, managed or not


@st.composite
def too_large_for_a_device(draw) -> tuple[str, list[int]]:
    """A call whose largest array needs 2^44 .. 2^63 - 1 bytes (its byte count does not wrap)."""
    name = draw(st.sampled_from(sorted(n for n in ENTRIES if n != "flat")))
    nsizes, arrays, _, _ = ENTRIES[name]
    dims = [draw(st.integers(1, 2**12)) for _ in range(nsizes)]
    axes, width = arrays[-1]  # the array over every size parameter
    i = draw(st.sampled_from(axes))
    rest = math.prod(dims[j] for j in axes if j != i) * width
    low, high = -(-DEVICE_LIMIT // rest), (2**63 - 1) // rest
    assume(low <= high)
    dims[i] = draw(st.integers(low, high) | st.sampled_from([low, high]))
    return name, dims


def check_refused(calls: list[tuple[str, list[int]]], results: list[dict]) -> None:
    for (name, dims), r in zip(calls, results):
        where = f"{name}({', '.join(map(str, dims))})"
        assert r["outcome"] == "OutOfMemoryError", f"{where}: {r['outcome']} {r.get('shape', r.get('message', ''))!r}"
        assert r["sane"], f"{where}: the context computes wrongly after the refusal"


@pytest.mark.parametrize("so", library_sources("wrap", ("cuda",)))
@given(calls=st.lists(too_large_for_a_device(), min_size=CALLS, max_size=CALLS))
@settings(max_examples=max(2, EXAMPLES // 2), deadline=None, suppress_health_check=list(HealthCheck))
def test_arrays_larger_than_the_device_are_refused(so: Path, calls) -> None:
    """cuda, plain device allocations: `iota (2**58)` (2^61 bytes) and `rep_u8_3(2**40, 2**10, 2**10)`
    returned handles with no error, and after `sums(2**61)` every call failed (cuMemAlloc's
    out-of-memory was ignored: pybridge.futhark.csource, "gpu-alloc-error")."""
    named = [("iot", [2**58]), ("rep_u8_3", [2**40, 2**10, 2**10]), ("sums", [2**58]), ("parts", [2**40, 2**4])]
    check_refused(named + calls, run_calls(so, named + calls))


def test_a_refused_device_allocation_is_an_error_in_the_c() -> None:
    ignored = "    (void) gpu_alloc(ctx, ctx->log, (size_t) size, desc, &block->mem, (size_t *) &size);\n"
    text, applied = harden("int x;\n" + ignored + "int y;\n")
    assert "gpu-alloc-error" in applied and "(void) gpu_alloc" not in text
    assert "!= FUTHARK_SUCCESS && ctx->error == NULL" in text and harden(text) == (text, [])
    for f in _generated_c():  # cuda's where make futhark FUTHARK_BACKEND=cuda generated it
        body = f.read_text()
        if "int memblock_alloc_device(" in body:
            assert "(void) gpu_alloc(" not in body and "pybridge: gpu-alloc-error" in body, f


def _program(name: str, backend: str) -> Path | None:
    return find_build_file(Path("futhark") / backend / f"lib{name}.so")


@pytest.mark.parametrize("backend", [pytest.param(b, marks=[pytest.mark.gpu] if b == "cuda" else []) for b in BACKENDS])
def test_the_projects_programs_at_wrapping_sizes(backend: str) -> None:
    """histogram(2**62, xs) returned shape (2**62,) on c and crashed on multicore;
    mandelbrot(2**31, 2**31, ...) crashed."""
    hist, mandel = _program("histogram", backend), _program("mandelbrot", backend)
    if hist is None or mandel is None:
        pytest.skip(f"build/futhark/{backend}/libhistogram.so or libmandelbrot.so not built (make futhark FUTHARK_BACKEND={backend})")
    code = f"""
        import numpy as np, pybridge.futhark as pf
        h, m = pf.load({str(hist)!r}), pf.load({str(mandel)!r})
        xs = np.array([0, 2, 2, 7], np.int32)
        for call in (lambda: h.histogram(2**62, xs), lambda: h.histogram(2**63 - 1, xs),
                     lambda: m.mandelbrot(2**31, 2**31, 0, 0, 0.1, 0.1, 10), lambda: m.mandelbrot(2**62, 2, 0, 0, 0.1, 0.1, 10)):
            try:
                r = call()
                print("returned", r.shape)
            except Exception as e:
                print("raised", type(e).__name__)
            print("usable", h.histogram(3, xs).numpy().tolist(), m.mandelbrot(2, 1, 0, 0, 0.1, 0.1, 5).numpy().tolist())
    """
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"child died with status {proc.returncode}: {proc.stderr[-2000:]}"
    lines = proc.stdout.splitlines()
    assert lines[0::2] == ["raised OutOfMemoryError"] * 4, proc.stdout
    assert lines[1::2] == ["usable [1, 0, 2] [[5, 5]]"] * 4, proc.stdout


# ---------------------------------------------------------------- the C text and the Python side


def _generated_c() -> list[Path]:
    # what make built (build/package-gpu holds raw C that `pybridge package` hardens when it builds)
    found = [p for d in ("futhark", "reference") for p in (ROOT / "build" / d).glob("*/*.c")]
    return sorted(p for p in found if p.with_suffix(".json").exists())


def test_every_allocation_size_in_the_built_c_is_checked() -> None:
    """In the hardened C of every built library (c, multicore, and cuda where generated): no
    allocation size and no bytes_/binop_/total_sizze definition multiplies unchecked."""
    files = _generated_c()
    if not files:
        pytest.skip("nothing built: run make")
    size_line = re.compile(r"memblock_alloc\w*\(ctx, [^;]*\*|lexical_realloc\(ctx, [^;]*\*|int64_t (?:bytes|binop_x|binop_y|total_sizze)_\d+ = [^;]*\*")
    bare = re.compile(r"(?:memblock_alloc\w*\(ctx, &[\w>-]+, |lexical_realloc\(ctx, &\w+, &\w+, )([A-Za-z_]\w*)(?:, \"|\);)")
    unchecked = []
    for f in files:
        text = f.read_text()
        passed = set(bare.findall(text))  # sizes passed as a variable: their definitions count too
        for n, line in enumerate(text.splitlines(), 1):
            m = re.match(r"\s*int64_t (\w+) = ([^;]*\*[^;]*);", line)
            if m and _checked_product(m.group(2)) is None:
                m = None  # not a product of variables and constants (sdiv_up64(n * k, ...)): out of scope
            if line.lstrip().startswith('"'):
                continue  # a GPU kernel's source, embedded as a string
            if (size_line.search(line) or (m and m.group(1) in passed)) and "pb_szmul" not in line and "struct memblock" not in line:
                unchecked.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not unchecked, "\n".join(unchecked[:20])


def test_checked_product_rewrites_only_products() -> None:
    assert _checked_product("(int64_t) 8 * n_5") == "pb_szmul((int64_t) 8, n_5)"
    assert _checked_product("a_1 * b_2 * (int64_t) 4") == "pb_szmul(pb_szmul(a_1, b_2), (int64_t) 4)"
    assert _checked_product("(int64_t) 4 * (nsubtasks_1 * nbins_2)") == "pb_szmul((int64_t) 4, pb_szmul(nsubtasks_1, nbins_2))"
    for other in ("n_1 + m_2", "sdiv_up64(n_1, 8) * 8", "n_1 * m_2 - 1", "n_1", "(int64_t) 8", "x->y * 2"):
        assert _checked_product(other) is None, other


def test_harden_is_idempotent_and_marks_the_version() -> None:
    files = _generated_c()
    if not files:
        pytest.skip("nothing built: run make")
    text = files[0].read_text()
    assert text.startswith(MARK + "\n")  # the current hardening version, written once
    again, applied = harden(text)
    assert again == text and applied == []


@pytest.mark.skipif(futhark_compiler() is None, reason="no Futhark compiler")
def test_a_negative_shape_from_an_unhardened_library_is_an_error(tmp_path: Path) -> None:
    """pybridge's own check where a shape is read: a library compiled without csource.py (by hand)
    returns shape (-1, -1) for replicate (-1) (replicate (-1) 0) (8 bytes: -1 * -8)."""
    (tmp_path / "neg.fut").write_text("entry rep2 (n: i64) (m: i64) : [][]i64 = replicate n (replicate m 1)\n")
    subprocess.run([futhark_compiler(), "c", "--library", "-o", str(tmp_path / "neg"), str(tmp_path / "neg.fut")], check=True)
    compile_library(tmp_path / "neg.c", "c", tmp_path / "libneg.so")
    with pf.load(tmp_path / "libneg.so") as lib:
        h = lib.rep2(-1, -1)
        with pytest.raises(pf.ProgramError, match="negative dimension"):
            h.shape
        with pytest.raises(pf.ProgramError, match="negative dimension"):
            h.numpy()
        h.free()
        assert lib.rep2(2, 1).numpy().tolist() == [[1], [1]]
