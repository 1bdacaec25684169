"""The example catalog shared by ``pybridge demo``, the tests and the benchmarks.

Each :class:`Example` names one computation and says

* where to run it: Futhark libraries in order of preference (:class:`LibrarySource`: the programs
  in ``futhark/*.fut`` first, then the test program ``tests/reference/probe.fut``, which only the
  tests and benchmarks of a checkout use), and the name of the operation in the CUDA catalog (``pybridge/demo/catalog.py``) that computes the same thing;
* what the answer is: a NumPy reference (accumulating in float64 where that makes the reference
  better, then cast to the result's dtype);
* how to make inputs: ``make_inputs(rng, size)`` returns the entry point's positional arguments
  as NumPy values, deterministically from the generator; ``size`` is roughly the number of
  elements of the main array (for matmul and mandelbrot: of the output);
* how close is close enough: a :class:`Rule` (the example's own bound, judged by
  ``pybridge.testing.compare``) whose ``rule`` says it in words and whose comment in
  ``_build_catalog`` says why.

The CUDA operation of an example takes the same logical inputs as the Futhark entry point (plus the
example's ``params``, e.g. ``nops`` for ``chain``); the CUDA catalog maps them onto its kernels.

Shared definitions that the CUDA kernels follow:

* ``histogram``: counts the values in ``[0, nbins)``; other values (negative ones included) are
  ignored.
* ``mandelbrot``: pixel ``(i, j)`` (row ``i``, column ``j``) is ``c = (x0 + f32(j)*dx, y0 + f32(i)*dy)``;
  ``z`` starts at 0; while ``count < max_iter`` and ``zr*zr + zi*zi <= 4``:
  ``zr, zi = zr*zr - zi*zi + cr, 2*zr*zi + ci`` (all in f32) and ``count += 1``.  So a point with
  ``|c| > 2`` gives 1, a point of the set gives ``max_iter``, and ``max_iter <= 0`` gives 0.
* ``chain``: ``op k x = x * 1.0001f + f32(k) * 0.001f`` applied for ``k = 1 .. nops`` in order.

These references are the project's only NumPy definitions of its kernels: the demo, the tests and
the GPU tests all use them.  This module imports neither ``pybridge.futhark`` nor ``pybridge.cuda``;
checking a result uses ``pybridge.testing`` (hypothesis: ``pip install hypothesis``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

import numpy as np

__all__ = [
    "CUDA_OPS",
    "CHAIN_LENGTHS",
    "PROBE_CHAIN_LENGTHS",
    "DEMO_EXAMPLES",
    "EXAMPLES",
    "CheckResult",
    "Example",
    "LibrarySource",
    "Rule",
    "Exact",
    "ElementwiseBound",
    "MismatchFraction",
    "RecordBound",
    "TupleOf",
    "get_field",
    "get",
    "names",
    "by_cuda_op",
    "find_library",
    "CHAIN_ADD",
    "CHAIN_MUL",
    "chain_op",
    "chain_reference",
    "histogram_reference",
    "mandelbrot_reference",
    "matmul_reference",
    "prefix_sum_reference",
    "saxpy_reference",
    "saxpy_iter_reference",
    "jacobi_reference",
    "sum_reference",
]

#: The operation names of the CUDA catalog (pybridge/demo/catalog.py).
CUDA_OPS: frozenset[str] = frozenset(
    {"saxpy", "sum", "scan", "matmul", "histogram", "mandelbrot", "chain"}
)
#: futhark/chain.fut has chain1 ... chain30.
CHAIN_LENGTHS: tuple[int, ...] = tuple(range(1, 31))
#: tests/reference/probe.fut has only these chains.
PROBE_CHAIN_LENGTHS: tuple[int, ...] = (1, 2, 4, 8, 16, 30)

_F32 = np.float32
#: chain's operation ``op k x = x * CHAIN_MUL + f32(k) * CHAIN_ADD`` (futhark/chain.fut, kernels_cu/chain.cu).
CHAIN_MUL = np.float32(1.0001)
CHAIN_ADD = np.float32(0.001)
_F64 = np.float64
_EPS32 = float(np.finfo(np.float32).eps)  # 2**-23; unit roundoff u = eps/2
_EPS64 = float(np.finfo(np.float64).eps)  # 2**-52
_TINY32 = float(np.finfo(np.float32).tiny)  # smallest normal f32: covers flush-to-zero of subnormals
_TINY64 = float(np.finfo(np.float64).tiny)


# ------------------------------------------------------------------------------------------------
# Values coming back from either half
# ------------------------------------------------------------------------------------------------


def get_field(record: Any, name: str) -> Any:
    """Field ``name`` of a record result: a mapping's item or a handle's attribute."""
    if isinstance(record, Mapping):
        return record[name]
    return getattr(record, name)


def _get_part(value: Any, i: int) -> Any:
    """Part ``i`` of a result with several values: a tuple/list, something indexable, or an opaque
    tuple handle whose fields are named "0", "1", ... (Futhark >= 0.26)."""
    if isinstance(value, (tuple, list)):
        return value[i]
    try:
        return value[i]
    except (TypeError, KeyError, IndexError):
        return getattr(value, str(i))


# ------------------------------------------------------------------------------------------------
# Tolerances: each example's bound, judged by pybridge.testing's comparison
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckResult:
    """The outcome of comparing a result with the reference."""

    ok: bool
    message: str
    max_abs_err: float = 0.0
    mismatches: int = 0

    def __bool__(self) -> bool:
        return self.ok


class Rule(Protocol):
    """``rule`` says in words what is accepted; ``check`` compares ``actual`` with ``expected``
    (the reference's output for ``args``), the acceptance-rule shape ``check_against(rule=...)``
    takes.  ``fields`` maps a record's canonical field names to the names a particular library
    uses (None: the same names); only records look at it."""

    rule: str

    def check(
        self,
        args: Sequence[Any],
        expected: Any,
        actual: Any,
        fields: Mapping[str, str] | None = None,
    ) -> CheckResult: ...


def _judge(actual: Any, expected: Any, tolerance: Any, bound: Any = None, path: str = "result",
           allowed: int = 0) -> CheckResult:
    """pybridge.testing's element-wise comparison (dtype checked), summarised; up to ``allowed``
    differing elements pass."""
    from pybridge.testing import compare, to_numpy

    with np.errstate(invalid="ignore"):  # 0 * inf in the relative part, for infinite references
        found = compare(np.asarray(to_numpy(actual)), np.asarray(expected), tolerance, bound=bound, path=path)
    bad = sum(m.count for m in found)
    max_err = max((m.max_error for m in found if m.max_error is not None), default=0.0)
    if not found:
        return CheckResult(True, "match")
    whole = any(m.total == 0 for m in found)  # shape or dtype: no element-wise count
    message = "\n".join(m.format() for m in found)
    if not whole and bad <= allowed:
        return CheckResult(True, f"{bad} element(s) differ (allowed {allowed})", max_abs_err=max_err, mismatches=bad)
    return CheckResult(False, message, max_abs_err=max_err, mismatches=bad)


def _exact() -> Any:
    from pybridge.testing import Tolerance

    return Tolerance(rtol=0.0, atol=0.0, equal_nan=True, check_dtype=True)


@dataclass(frozen=True)
class Exact:
    """Equal shape, dtype and values (NaN matches NaN)."""

    rule: str = "exact: same shape, dtype and values"

    def check(self, args, expected, actual, fields=None) -> CheckResult:
        return _judge(actual, expected, _exact())


@dataclass(frozen=True)
class ElementwiseBound:
    """``|actual - expected| <= bound(args, expected)`` per element, computed in float64.  Where the
    reference is infinite the result must equal it; NaN must match NaN."""

    bound: Callable[[Sequence[Any], np.ndarray], Any]
    rule: str

    def check(self, args, expected, actual, fields=None) -> CheckResult:
        e = np.asarray(expected)
        return _judge(actual, e, _exact(), bound=np.asarray(self.bound(args, e), dtype=np.float64))


@dataclass(frozen=True)
class MismatchFraction:
    """Integer results where a few elements may differ by any amount: at most
    ``max(min_allowed, floor(max_fraction * size))`` mismatches, and every element must pass
    ``valid(args, actual)`` (e.g. lie in its possible range)."""

    max_fraction: float
    min_allowed: int
    rule: str
    valid: Callable[[Sequence[Any], np.ndarray], np.ndarray] | None = None

    def allowed(self, size: int) -> int:
        return max(self.min_allowed, int(math.floor(self.max_fraction * size)))

    def check(self, args, expected, actual, fields=None) -> CheckResult:
        from pybridge.testing import to_numpy

        e = np.asarray(expected)
        a = np.asarray(to_numpy(actual))
        if self.valid is not None and a.shape == e.shape:
            invalid = ~np.asarray(self.valid(args, a), dtype=bool)
            if invalid.any():
                where = tuple(int(i) for i in np.argwhere(invalid)[0])
                return CheckResult(False, f"{int(invalid.sum())} impossible value(s); first at {where}: {a[where]!r}")
        return _judge(a, e, _exact(), allowed=self.allowed(e.size))


@dataclass(frozen=True)
class RecordBound:
    """A record result: each canonical field within ``bounds(args, expected)[field]`` (absolute,
    NaN matches NaN).  With ``fields`` given, only the canonical fields it maps are compared, read
    under the library's names (the probe's ``stats`` has ``mean`` and ``sd`` only)."""

    field_names: tuple[str, ...]
    bounds: Callable[[Sequence[Any], Mapping[str, Any]], Mapping[str, float]]
    rule: str
    dtype: Any = np.float64

    def check(self, args, expected, actual, fields=None) -> CheckResult:
        mapping = dict(fields) if fields is not None else {f: f for f in self.field_names}
        bounds = self.bounds(args, expected)
        results = []
        for canonical, lib_name in mapping.items():
            try:
                raw = get_field(actual, lib_name)
            except (AttributeError, KeyError) as exc:
                return CheckResult(False, f"result has no field {lib_name!r} ({exc})")
            want = np.asarray(expected[canonical], dtype=self.dtype)
            results.append(_judge(raw, want, _exact(), bound=bounds[canonical], path=lib_name))
        bad = [r for r in results if not r.ok]
        return CheckResult(not bad, "; ".join(r.message for r in bad) or "every field within its bound",
                           max_abs_err=max((r.max_abs_err for r in results), default=0.0),
                           mismatches=sum(r.mismatches or 1 for r in bad))


@dataclass(frozen=True)
class TupleOf:
    """Several results (a tuple), each with its own tolerance."""

    parts: tuple[Any, ...]
    rule: str = "each part of the tuple by its own rule"

    def check(self, args, expected, actual, fields=None) -> CheckResult:
        msgs = []
        ok = True
        for i, tol in enumerate(self.parts):
            try:
                part = _get_part(actual, i)
            except Exception as exc:  # noqa: BLE001 - report, don't crash the comparison
                return CheckResult(False, f"result has no part {i} ({exc})")
            r = tol.check(args, expected[i], part)
            ok &= r.ok
            msgs.append(f"[{i}] {r.message}")
        return CheckResult(ok, "; ".join(msgs))


# ------------------------------------------------------------------------------------------------
# Catalog entries
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LibrarySource:
    """One Futhark library that implements an example.

    ``kind`` "futhark": ``build/futhark/<backend>/lib<library>.so`` from ``futhark/<library>.fut``;
    "reference": ``build/reference/<backend>/lib<library>.so`` from the test program
    ``tests/reference/<library>.fut`` (built by ``make`` in a checkout, never installed).  ``fields`` maps the example's
    canonical record fields to this library's field names (None: the same names).
    """

    kind: str
    library: str
    entry: str
    fields: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("futhark", "reference"):
            raise ValueError(f"unknown library kind {self.kind!r}")

    @property
    def build_subdir(self) -> str:
        return self.kind

    def library_relpath(self, backend: str) -> str:
        """Path of the shared library relative to a build directory."""
        return f"{self.build_subdir}/{backend}/lib{self.library}.so"

    def manifest_relpath(self, backend: str) -> str:
        return f"{self.build_subdir}/{backend}/{self.library}.json"


@dataclass(frozen=True, eq=False)
class Example:
    """One computation of the catalog (see the module docstring)."""

    name: str
    summary: str
    sources: tuple[LibrarySource, ...]
    cuda_op: str | None
    reference: Callable[..., Any]
    make_inputs: Callable[[np.random.Generator, int], tuple[Any, ...]]
    tolerance: Rule
    arg_names: tuple[str, ...]
    default_size: int = 1 << 16
    params: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    make_bad_inputs: Callable[[np.random.Generator, int], tuple[Any, ...]] | None = None
    error_substring: str | None = None
    tags: frozenset[str] = frozenset()

    def inputs(self, size: int | None = None, seed: int = 0) -> tuple[Any, ...]:
        """Deterministic inputs: ``make_inputs(np.random.default_rng(seed), size)``."""
        return self.make_inputs(np.random.default_rng(seed), self.default_size if size is None else size)

    def expected(self, args: Sequence[Any]) -> Any:
        return self.reference(*args)

    def check(
        self,
        args: Sequence[Any],
        actual: Any,
        *,
        expected: Any = None,
        source: LibrarySource | None = None,
    ) -> CheckResult:
        """Compare ``actual`` (what a library returned for ``args``) with the reference."""
        if expected is None:
            expected = self.reference(*args)
        fields = source.fields if source is not None else None
        return self.tolerance.check(tuple(args), expected, actual, fields)

    def source(self, kind: str) -> LibrarySource | None:
        """The first source of the given kind ("futhark" or "reference"), or None."""
        return next((s for s in self.sources if s.kind == kind), None)


# ------------------------------------------------------------------------------------------------
# References
# ------------------------------------------------------------------------------------------------


def saxpy_reference(a: Any, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """``a*x + y`` in f32, the product and the sum each rounded (NumPy's float32 arithmetic): what
    kernels_cu/saxpy.cu computes bit for bit, and the c backend without FMA contraction."""
    if xs.shape != ys.shape:
        raise ValueError("saxpy: xs and ys differ in length")
    with np.errstate(over="ignore", invalid="ignore"):
        return _F32(a) * np.asarray(xs, dtype=_F32) + np.asarray(ys, dtype=_F32)


def saxpy_iter_reference(iters: Any, a: Any, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """``iters`` rounds of ``ys = a*xs + ys`` (futhark/saxpy.fut's saxpy_iter)."""
    out = np.asarray(ys, _F32).copy()
    for _ in range(max(0, int(iters))):
        out = saxpy_reference(a, xs, out)
    return out


def jacobi_reference(steps: Any, g: np.ndarray) -> np.ndarray:
    """``steps`` 5-point Jacobi steps in f32, first and last rows and columns fixed (futhark/jacobi.fut),
    the terms added in the same order as the Futhark program."""
    g = np.array(g, _F32, copy=True)
    for _ in range(max(0, int(steps))):
        new = g.copy()
        new[1:-1, 1:-1] = _F32(0.25) * (g[:-2, 1:-1] + g[2:, 1:-1] + g[1:-1, :-2] + g[1:-1, 2:])
        g = new
    return g


def sum_reference(xs: np.ndarray) -> np.float32:
    """The sum of f32 values, accumulated in f64 and rounded once to f32."""
    # f32 values are exact in f64; pairwise f64 summation errs by ~log2(n)*2^-53*sum|x|, far below f32.
    return _F32(np.sum(xs.astype(_F64)))


def _dot_ref(xs: np.ndarray, ys: np.ndarray) -> np.float32:
    if xs.shape != ys.shape:
        raise ValueError("dot: xs and ys differ in length")
    # f32*f32 products are exact in f64 (48 <= 53 significant bits); fsum rounds their sum once,
    # where np.sum loses small terms to cancellation (1e-20 - 1 + 1 gives 0).
    return _F32(math.fsum((xs.astype(_F64) * ys.astype(_F64)).tolist()))


def _dot_f64_ref(xs: np.ndarray, ys: np.ndarray) -> np.float64:
    if xs.shape != ys.shape:
        raise ValueError("dot_f64: xs and ys differ in length")
    return _F64(math.fsum((xs.astype(_F64) * ys.astype(_F64)).tolist()))


def _stats_ref(xs: np.ndarray) -> dict[str, np.float64]:
    """Two-pass sum/mean/population std, with correctly rounded (fsum) sums."""
    x = xs.astype(_F64)
    n = x.size
    s = math.fsum(x.tolist())
    if n == 0:
        return {"sum": _F64(s), "mean": _F64(math.nan), "std": _F64(math.nan)}
    m = s / n
    ss = math.fsum(((x - m) * (x - m)).tolist())
    return {"sum": _F64(s), "mean": _F64(m), "std": _F64(math.sqrt(ss / n))}


def prefix_sum_reference(xs: np.ndarray) -> np.ndarray:
    """Inclusive prefix sums, accumulated in f64 (each f32 value is exact there), rounded to f32."""
    return np.cumsum(xs.astype(_F64)).astype(_F32)


def _prefix_sum_i64_ref(xs: np.ndarray) -> np.ndarray:
    # NumPy's int64 cumsum wraps on overflow, as Futhark's i64 addition does.
    return np.cumsum(xs.astype(np.int64), dtype=np.int64)


def matmul_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` in f64 (f32 products exact), rounded to f32."""
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not chain")
    return (a.astype(_F64) @ b.astype(_F64)).astype(_F32)


def histogram_reference(nbins: Any, xs: np.ndarray) -> np.ndarray:
    """Counts (int32) of the values of ``xs`` in ``[0, nbins)``; other values are ignored."""
    nbins = int(nbins)
    if nbins < 0:
        raise ValueError("histogram: negative nbins")
    x = xs.astype(np.int64)
    valid = x[(x >= 0) & (x < nbins)]
    return np.bincount(valid, minlength=nbins).astype(np.int32)[:nbins]


def mandelbrot_reference(
    w: Any, h: Any, x0: Any, y0: Any, dx: Any, dy: Any, max_iter: Any, *, nan_stops: bool = True
) -> np.ndarray:
    """Escape counts, with exactly the f32 operations of futhark/mandelbrot.fut and
    kernels_cu/mandelbrot.cu (no FMA).  The two differ only where ``zr*zr + zi*zi`` is NaN (an
    input such as an infinite ``c``): Futhark's loop runs while it is ``<= 4`` (NaN stops,
    ``nan_stops=True``), the kernel breaks when it is ``> 4`` (NaN goes on, ``nan_stops=False``)."""
    w, h, max_iter = int(w), int(h), int(max_iter)
    if w < 0 or h < 0:
        raise ValueError("mandelbrot: negative image size")
    x0, y0, dx, dy = _F32(x0), _F32(y0), _F32(dx), _F32(dy)
    cr_row = x0 + np.arange(w, dtype=_F32) * dx  # f32(j)*dx, then + x0, each rounded to f32
    ci_col = y0 + np.arange(h, dtype=_F32) * dy
    cr = np.broadcast_to(cr_row[None, :], (h, w)).ravel()
    ci = np.broadcast_to(ci_col[:, None], (h, w)).ravel()
    count = np.zeros(h * w, dtype=np.int32)
    active = np.arange(h * w)
    zr = np.zeros(active.size, dtype=_F32)
    zi = np.zeros(active.size, dtype=_F32)
    two, four = _F32(2), _F32(4)
    with np.errstate(over="ignore", invalid="ignore"):
        for _ in range(max(max_iter, 0)):
            mag = zr * zr + zi * zi
            keep = (mag <= four) if nan_stops else ~(mag > four)
            if not keep.all():
                active, zr, zi = active[keep], zr[keep], zi[keep]
            if active.size == 0:
                break
            acr, aci = cr[active], ci[active]
            zr, zi = zr * zr - zi * zi + acr, two * zr * zi + aci
            count[active] += 1
    return count.reshape(h, w)


def chain_op(k: int, x: np.ndarray) -> np.ndarray:
    """``op k x = x * 1.0001f32 + f32.i32 k * 0.001f32``, every operation rounded to f32."""
    x = np.asarray(x, dtype=_F32)
    return x * CHAIN_MUL + _F32(k) * CHAIN_ADD


def chain_reference(xs: np.ndarray, nops: int) -> np.ndarray:
    """``op 1``, ..., ``op nops`` applied in order, step by step in f32 (as the unfused maps)."""
    y = np.array(xs, dtype=_F32, copy=True)
    for k in range(1, nops + 1):
        y = chain_op(k, y)
    return y


def _index_at_ref(xs: np.ndarray, i: Any) -> np.float32:
    i = int(i)
    if not 0 <= i < xs.shape[0]:  # Futhark has no negative indexing: -1 is out of bounds
        raise IndexError(f"Index [{i}] out of bounds for array of shape [{xs.shape[0]}].")
    return _F32(xs[i])


def _checked_sqrt_ref(x: Any) -> np.float64:
    x = _F64(x)
    if not x >= 0:  # NaN fails the assertion too
        raise ValueError(f"Assertion is false: x >= 0 (x = {x!r})")
    return _F64(np.sqrt(x))


def _trivial_ref(x: Any) -> np.int32:
    return (np.asarray([x], dtype=np.int32) + np.int32(1))[0]  # wraps like Futhark's i32 +


def _bump_ref(xs: np.ndarray) -> np.ndarray:
    out = np.array(xs, dtype=_F32, copy=True)
    out[0] = out[0] + _F32(1)  # xs[0] out of bounds on an empty array: IndexError, as in Futhark
    return out


def _pair_ref(x: Any, y: Any, z: Any) -> tuple[np.float32, np.bool_, np.float16]:
    with np.errstate(over="ignore"):
        return _F32(x) * _F32(2), np.logical_not(np.bool_(y)), np.float16(z) + np.float16(z)


# ------------------------------------------------------------------------------------------------
# Inputs
# ------------------------------------------------------------------------------------------------


def _normal32(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.standard_normal(n).astype(_F32)


def _side(size: int) -> int:
    return max(1, int(round(math.sqrt(max(size, 1)))))


def _saxpy_inputs(rng, size):
    return _F32(rng.uniform(0.5, 2.0)), _normal32(rng, size), _normal32(rng, size)


def _saxpy_iter_inputs(rng, size):
    return np.int32(rng.integers(0, 6)), _F32(rng.uniform(-1.0, 1.0)), _normal32(rng, size), _normal32(rng, size)


def _jacobi_inputs(rng, size):
    s = _side(size)
    return np.int32(rng.integers(0, 5)), rng.random((s, s)).astype(_F32)


def _sum_inputs(rng, size):
    return (_normal32(rng, size),)


def _dot_inputs(rng, size):
    return _normal32(rng, size), _normal32(rng, size)


def _dot_f64_inputs(rng, size):
    return rng.standard_normal(size), rng.standard_normal(size)


def _stats_inputs(rng, size):
    return (rng.normal(10.0, 2.0, size),)


def _prefix_sum_inputs(rng, size):
    return (_normal32(rng, size),)


def _prefix_sum_i64_inputs(rng, size):
    return (rng.integers(-1000, 1000, size, dtype=np.int64),)


def _matmul_inputs(rng, size):
    s = _side(size)
    return _normal32(rng, s * s).reshape(s, s), _normal32(rng, s * s).reshape(s, s)


HISTOGRAM_BINS = 256


def _histogram_inputs(rng, size):
    # Some values fall outside [0, nbins) on both sides, to exercise the "ignored" rule.
    return np.int64(HISTOGRAM_BINS), rng.integers(-16, HISTOGRAM_BINS + 16, size, dtype=np.int32)


MANDELBROT_MAX_ITER = 256


def _mandelbrot_inputs(rng, size):
    # The classic full view [-2.25, 0.75] x [-1.5, 1.5]; the generator is not needed.
    s = _side(size)
    return (np.int64(s), np.int64(s), _F32(-2.25), _F32(-1.5), _F32(3.0 / s), _F32(3.0 / s),
            np.int32(MANDELBROT_MAX_ITER))


def _chain_inputs(rng, size):
    return (rng.uniform(-1.0, 1.0, size).astype(_F32),)


def _index_at_inputs(rng, size):
    n = max(size, 1)
    return _normal32(rng, n), np.int64(rng.integers(0, n))


def _index_at_bad_inputs(rng, size):
    n = max(size, 1)
    return _normal32(rng, n), np.int64(n + rng.integers(0, 8))


def _checked_sqrt_inputs(rng, size):
    return (_F64(rng.uniform(0.0, 100.0)),)


def _checked_sqrt_bad_inputs(rng, size):
    return (_F64(-rng.uniform(1.0, 100.0)),)


def _trivial_inputs(rng, size):
    return (np.int32(rng.integers(-1000, 1000)),)


def _bump_inputs(rng, size):
    return (_normal32(rng, max(size, 1)),)


def _pair_inputs(rng, size):
    return _F32(rng.uniform(-10, 10)), np.bool_(rng.integers(0, 2)), np.float16(rng.uniform(-10, 10))


# ------------------------------------------------------------------------------------------------
# Tolerance bounds (see the comments at each use in _build_catalog)
# ------------------------------------------------------------------------------------------------


def _saxpy_bound(args, expected):
    a, xs, ys = args
    ax = np.abs(_F64(a) * xs.astype(_F64))
    return 2.0 * _EPS32 * (ax + np.abs(ys.astype(_F64))) + 2.0 * _TINY32


def _saxpy_iter_bound(args, expected):
    iters, a, xs, ys = args
    k = max(0, int(iters))
    # |a| <= 1 in the catalog's inputs keeps every intermediate below |y| + k|a x|; each round's
    # FMA-or-not difference (see saxpy) is carried on unchanged (|a| <= 1 does not scale it up).
    big = np.abs(ys.astype(_F64)) + (k + 1) * np.abs(_F64(a) * xs.astype(_F64))
    return 4.0 * k * _EPS32 * big + 2.0 * (k + 1) * _TINY32


def _sum_bound(args, expected):
    (xs,) = args
    n = xs.size
    return (n + 2) * _EPS32 * float(np.sum(np.abs(xs.astype(_F64)))) + (n + 2) * _TINY32


def _dot_bound(args, expected):
    xs, ys = args
    n = xs.size
    s = float(np.sum(np.abs(xs.astype(_F64) * ys.astype(_F64))))
    return (n + 2) * _EPS32 * s + (n + 2) * _TINY32


def _dot_f64_bound(args, expected):
    xs, ys = args
    n = xs.size
    s = math.fsum(np.abs(xs.astype(_F64) * ys.astype(_F64)).tolist())
    return (n + 2) * _EPS64 * s + (n + 2) * _TINY64


def _stats_bounds(args, expected):
    (xs,) = args
    x = xs.astype(_F64)
    n = x.size
    if n == 0:
        return {"sum": 0.0, "mean": math.inf, "std": math.inf}  # sum must be exactly 0; others NaN
    eps = _EPS64
    abs_sum = math.fsum(np.abs(x).tolist())
    mean = float(expected["mean"])
    std = float(expected["std"])
    var = std * std
    tol_sum = (n + 1) * eps * abs_sum + n * _TINY64
    dm = tol_sum / n + eps * abs(mean)  # error of the computed mean
    # sum_i (x_i - m')^2 = S2 + n*dm^2 exactly (the cross term sum_i (x_i - m) vanishes); each
    # squared deviation has relative error <= 3u and summing n of them adds (n-1)u: use 2x that.
    tol_var = dm * dm + 2.0 * (n + 4) * eps * (var + dm * dm) + eps * var
    # |sqrt(a) - sqrt(b)| <= min(sqrt|a - b|, |a - b| / sqrt(a)), then the sqrt's own rounding.
    tol_std = math.sqrt(tol_var)
    if std > 0:
        tol_std = min(tol_std, tol_var / std)
    tol_std += eps * std + _TINY64
    return {"sum": tol_sum, "mean": dm + eps * abs(mean) + _TINY64, "std": tol_std}


def _prefix_sum_bound(args, expected):
    (xs,) = args
    n_terms = np.arange(1, xs.size + 1, dtype=_F64)
    prefix_abs = np.cumsum(np.abs(xs.astype(_F64)))
    return (n_terms + 1) * _EPS32 * prefix_abs + (n_terms + 1) * _TINY32


def _matmul_bound(args, expected):
    a, b = args
    k = a.shape[1]
    abs_prod = np.abs(a.astype(_F64)) @ np.abs(b.astype(_F64))
    return (k + 2) * _EPS32 * abs_prod + (k + 2) * _TINY32


def _chain_bound(nops: int) -> Callable[[Sequence[Any], np.ndarray], np.ndarray]:
    def bound(args, expected):
        (xs,) = args
        # Every intermediate satisfies |y_k| <= 1.0001^k |x| + sum_j 0.001 j 1.0001^(k-j)
        #                                   <= 1.01 (|x| + 0.0005 nops (nops+1)).
        max_abs = 1.01 * (np.abs(xs.astype(_F64)) + 0.0005 * nops * (nops + 1))
        return 2.0 * nops * _EPS32 * max_abs + 2.0 * nops * _TINY32

    return bound


def _checked_sqrt_bound(args, expected):
    return _EPS64 * np.abs(np.asarray(expected, dtype=_F64)) + _TINY64


def _mandelbrot_valid(args, actual):
    max_iter = max(int(args[6]), 0)
    return (actual >= 0) & (actual <= max_iter)


# ------------------------------------------------------------------------------------------------
# The catalog
# ------------------------------------------------------------------------------------------------


def _fut(library: str, entry: str, fields: Mapping[str, str] | None = None) -> LibrarySource:
    return LibrarySource("futhark", library, entry, fields)


def _probe(entry: str, fields: Mapping[str, str] | None = None) -> LibrarySource:
    return LibrarySource("reference", "probe", entry, fields)


def _build_catalog() -> dict[str, Example]:
    ex: list[Example] = []

    # saxpy: the reference rounds a*x and the sum in f32 (as the kernel and the c backend do); FMA
    # rounds once instead: each differs from the exact a*x+y by <= u|ax| + u|ax+y|, so from each
    # other by <= 2u|ax| + 2u|ax+y| <= eps(2|ax| + |y|).  Bound: twice that,
    # plus a couple of smallest normals in case subnormals are flushed to zero (GPU).
    ex.append(Example(
        name="saxpy", summary="a*x + y elementwise (f32)",
        sources=(_fut("saxpy", "saxpy"), _probe("saxpy")), cuda_op="saxpy",
        reference=saxpy_reference, make_inputs=_saxpy_inputs, arg_names=("a", "xs", "ys"),
        tolerance=ElementwiseBound(_saxpy_bound, "per element 2*eps32*(|a*x| + |y|)"),
        default_size=1 << 20, tags=frozenset({"demo", "probe"}),
    ))

    # saxpy_iter: saxpy's rule per round, the rounds' differences carried forward (|a| <= 1).
    ex.append(Example(
        name="saxpy_iter", summary="iters rounds of ys = a*xs + ys inside one call (f32)",
        sources=(_fut("saxpy", "saxpy_iter"),), cuda_op=None,
        reference=saxpy_iter_reference, make_inputs=_saxpy_iter_inputs, arg_names=("iters", "a", "xs", "ys"),
        tolerance=ElementwiseBound(_saxpy_iter_bound, "per element 4*iters*eps32*(|y| + (iters+1)|a*x|)"),
        default_size=1 << 20,
    ))
    # jacobi: (((up + down) + left) + right) * 0.25 in f32 in the program's order, with nothing an
    # FMA could contract: every backend gives the reference bit for bit.
    ex.append(Example(
        name="jacobi", summary="steps 5-point Jacobi steps on an n-by-m f32 grid, fixed boundary (size ~ n*m)",
        sources=(_fut("jacobi", "jacobi"),), cuda_op=None,
        reference=jacobi_reference, make_inputs=_jacobi_inputs, arg_names=("steps", "g"),
        tolerance=Exact(), default_size=256 * 256,
    ))

    # sum / dot: any summation order (sequential in the c backend, trees on multicore and GPU) of n
    # terms errs by at most (n-1)*u*sum|terms| (u = eps/2); the f32 products add u*|x*y| each.
    # Bound (n+2)*eps*sum|x*y| covers that, the reference's final rounding and FMA contraction.
    # It is the worst case and loose for large n; tests add exact integer-valued inputs.
    ex.append(Example(
        name="sum", summary="sum of an f32 vector",
        sources=(_fut("dot", "sum"), _probe("sum")), cuda_op="sum",
        reference=sum_reference, make_inputs=_sum_inputs, arg_names=("xs",),
        tolerance=ElementwiseBound(_sum_bound, "|err| <= (n+2)*eps32*sum|x|"),
        default_size=1 << 20, tags=frozenset({"demo", "probe"}),
    ))
    ex.append(Example(
        name="dot", summary="dot product of two f32 vectors",
        sources=(_fut("dot", "dot"),), cuda_op=None,
        reference=_dot_ref, make_inputs=_dot_inputs, arg_names=("xs", "ys"),
        tolerance=ElementwiseBound(_dot_bound, "|err| <= (n+2)*eps32*sum|x*y|"),
        default_size=1 << 20, tags=frozenset({"demo"}),
    ))
    # dot_f64: same argument in f64; the reference is fsum of f64-rounded products (error <=
    # u*sum|x*y| + u*|result|), inside the same (n+2)*eps64 bound.
    ex.append(Example(
        name="dot_f64", summary="dot product of two f64 vectors",
        sources=(_fut("dot", "dot_f64"),), cuda_op=None,
        reference=_dot_f64_ref, make_inputs=_dot_f64_inputs, arg_names=("xs", "ys"),
        tolerance=ElementwiseBound(_dot_f64_bound, "|err| <= (n+2)*eps64*sum|x*y|"),
        default_size=1 << 20,
    ))

    # stats: sum as for "sum" in f64; mean = sum/n; the two-pass variance's error is second order
    # in the mean's error plus (n+3)u relative from squaring and summing (doubled); std from the
    # variance's bound through |sqrt a - sqrt b| <= min(sqrt|a-b|, |a-b|/sqrt a).  The probe
    # program's record has fields mean and sd (= std) only.
    ex.append(Example(
        name="stats", summary="sum, mean and population std of an f64 sample (one record)",
        sources=(_fut("stats", "stats"), _probe("stats", {"mean": "mean", "std": "sd"})),
        cuda_op=None, reference=_stats_ref, make_inputs=_stats_inputs, arg_names=("xs",),
        tolerance=RecordBound(("sum", "mean", "std"), _stats_bounds,
                              "sum: (n+1)*eps64*sum|x|; mean: that/n; std: propagated two-pass bound"),
        default_size=1 << 20, tags=frozenset({"demo", "probe"}),
    ))

    # prefix_sum: prefix i is a sum of i+1 terms, in whatever order the scan uses:
    # |err_i| <= (i+2)*eps32*sum_{j<=i}|x_j| (the sum bound, per prefix).
    ex.append(Example(
        name="prefix_sum", summary="inclusive prefix sum (f32)",
        sources=(_fut("scan", "prefix_sum"),), cuda_op="scan",
        reference=prefix_sum_reference, make_inputs=_prefix_sum_inputs, arg_names=("xs",),
        tolerance=ElementwiseBound(_prefix_sum_bound, "per prefix i: (i+2)*eps32*sum_{j<=i}|x_j|"),
        default_size=1 << 20, tags=frozenset({"demo"}),
    ))
    # Integer results are exact (two's-complement wrap-around on both sides).
    ex.append(Example(
        name="prefix_sum_i64", summary="inclusive prefix sum (i64, wrapping)",
        sources=(_fut("scan", "prefix_sum_i64"),), cuda_op=None,
        reference=_prefix_sum_i64_ref, make_inputs=_prefix_sum_i64_inputs, arg_names=("xs",),
        tolerance=Exact(), default_size=1 << 20,
    ))

    # matmul: c[i,k] is a k-term dot product (k = inner dimension): the dot bound per element,
    # (k+2)*eps32*sum_j|a_ij*b_jk|, whatever the blocking/tiling order and FMA use.
    ex.append(Example(
        name="matmul", summary="dense f32 matrix product (size ~ number of output elements)",
        sources=(_fut("matmul", "matmul"),), cuda_op="matmul",
        reference=matmul_reference, make_inputs=_matmul_inputs, arg_names=("a", "b"),
        tolerance=ElementwiseBound(_matmul_bound, "per element (k+2)*eps32*sum_j|a_ij*b_jk|"),
        default_size=256 * 256, tags=frozenset({"demo"}),
    ))

    # histogram: integer counts, exact.
    ex.append(Example(
        name="histogram", summary="counts of i32 values in [0, nbins), others ignored",
        sources=(_fut("histogram", "histogram"),), cuda_op="histogram",
        reference=histogram_reference, make_inputs=_histogram_inputs, arg_names=("nbins", "xs"),
        tolerance=Exact(), default_size=1 << 20, tags=frozenset({"demo"}),
    ))

    # mandelbrot: the iteration is chaotic near the set's boundary, so a single rounding
    # difference -- FMA contraction of zr*zr - zi*zi + cr, 2*zr*zi + ci or x0 + j*dx (nvcc/NVRTC
    # contract by default; GCC does on targets with FMA) -- can move a boundary pixel's escape
    # count by any amount, while pixels away from the boundary agree exactly.  Emulating FMA in
    # NumPy on the full view changed 0.1-0.25% of the pixels (up to ~0.5% on small random
    # windows, 1 pixel at most on 200 windows of <= 32x32); deep zooms into the boundary change
    # several percent and need a looser rule.  Allowed: max(2, 1% of the pixels) mismatches of any
    # size, and every count must lie in [0, max_iter].
    ex.append(Example(
        name="mandelbrot", summary="Mandelbrot escape counts of an h-by-w image (size ~ w*h)",
        sources=(_fut("mandelbrot", "mandelbrot"),), cuda_op="mandelbrot",
        reference=mandelbrot_reference, make_inputs=_mandelbrot_inputs,
        arg_names=("w", "h", "x0", "y0", "dx", "dy", "max_iter"),
        tolerance=MismatchFraction(
            0.01, 2, "at most max(2, 1% of pixels) differ (by any amount); all in [0, max_iter]",
            valid=_mandelbrot_valid),
        default_size=512 * 512, tags=frozenset({"demo"}),
    ))

    # chainN: the reference repeats the same f32 operations step by step, so c/multicore match it
    # exactly; FMA contraction (GPU) rounds once instead of twice per step, an error of at most
    # 2u*max|y| per step, carried forward with factor 1.0001 per step: bound 2*N*eps32*max|y|.
    for n in CHAIN_LENGTHS:
        sources = [_fut("chain", f"chain{n}")]
        if n in PROBE_CHAIN_LENGTHS:
            sources.append(_probe(f"chain{n}"))
        tags = {"chain"}
        if n in PROBE_CHAIN_LENGTHS:
            tags.add("probe")
        if n in (1, 30):
            tags.add("demo")
        ex.append(Example(
            name=f"chain{n}", summary=f"{n} chained elementwise f32 ops (fusion benchmark)",
            sources=tuple(sources), cuda_op="chain",
            reference=(lambda xs, _n=n: chain_reference(xs, _n)),
            make_inputs=_chain_inputs, arg_names=("xs",),
            tolerance=ElementwiseBound(_chain_bound(n), f"per element 2*{n}*eps32*max_k|y_k|"),
            default_size=1 << 20, params=MappingProxyType({"nops": n}), tags=frozenset(tags),
        ))

    # index_at: a copy of an element, exact; a bad index must fail Futhark's bounds check.
    ex.append(Example(
        name="index_at", summary="xs[i], failing the bounds check on a bad index",
        sources=(_fut("bounds", "index_at"), _probe("index_at")), cuda_op=None,
        reference=_index_at_ref, make_inputs=_index_at_inputs, arg_names=("xs", "i"),
        tolerance=Exact(), default_size=1024,
        make_bad_inputs=_index_at_bad_inputs, error_substring="out of bounds",
        tags=frozenset({"demo", "probe", "error"}),
    ))
    # checked_sqrt: IEEE sqrt is correctly rounded (C's sqrt, CUDA's f64 sqrt); allow 1 ulp anyway.
    ex.append(Example(
        name="checked_sqrt", summary="sqrt of x >= 0, failing an assertion otherwise",
        sources=(_fut("bounds", "checked_sqrt"),), cuda_op=None,
        reference=_checked_sqrt_ref, make_inputs=_checked_sqrt_inputs, arg_names=("x",),
        tolerance=ElementwiseBound(_checked_sqrt_bound, "1 ulp (eps64*|sqrt x|)"), default_size=1,
        make_bad_inputs=_checked_sqrt_bad_inputs, error_substring="Assertion is false",
        tags=frozenset({"error"}),
    ))

    # Probe-only entries (tests/reference/probe.fut): integer, bool and exactly representable results, exact.
    ex.append(Example(
        name="trivial", summary="x + 1 on an i32 (call overhead)",
        sources=(_probe("trivial"),), cuda_op=None,
        reference=_trivial_ref, make_inputs=_trivial_inputs, arg_names=("x",),
        tolerance=Exact(), default_size=1, tags=frozenset({"probe"}),
    ))
    ex.append(Example(
        name="bump", summary="xs with xs[0] + 1 (consumes its argument)",
        sources=(_probe("bump"),), cuda_op=None,
        reference=_bump_ref, make_inputs=_bump_inputs, arg_names=("xs",),
        tolerance=Exact(), default_size=1024, tags=frozenset({"probe"}),
    ))
    # x*2 and z+z are exact in binary floating point (or overflow the same way); !y is exact.
    ex.append(Example(
        name="pair", summary="(x*2, !y, z+z) for an f32, a bool and an f16 (several results)",
        sources=(_probe("pair"),), cuda_op=None,
        reference=_pair_ref, make_inputs=_pair_inputs, arg_names=("x", "y", "z"),
        tolerance=TupleOf((Exact(), Exact(), Exact())), default_size=1, tags=frozenset({"probe"}),
    ))

    catalog = {e.name: e for e in ex}
    if len(catalog) != len(ex):
        raise RuntimeError("duplicate example names")
    for e in ex:
        if e.cuda_op is not None and e.cuda_op not in CUDA_OPS:
            raise RuntimeError(f"{e.name}: unknown CUDA op {e.cuda_op!r}")
    return catalog


#: All examples by name, in catalog order.
EXAMPLES: Mapping[str, Example] = MappingProxyType(_build_catalog())

#: The examples ``pybridge demo`` shows, in order.
DEMO_EXAMPLES: tuple[str, ...] = tuple(n for n, e in EXAMPLES.items() if "demo" in e.tags)


def get(name: str) -> Example:
    try:
        return EXAMPLES[name]
    except KeyError:
        raise KeyError(f"no example {name!r}; known: {', '.join(EXAMPLES)}") from None


def names(tag: str | None = None) -> list[str]:
    """Example names, all or those with ``tag`` ("demo", "probe", "chain", "error")."""
    return [n for n, e in EXAMPLES.items() if tag is None or tag in e.tags]


def by_cuda_op(op: str) -> list[Example]:
    """The examples the CUDA catalog operation ``op`` implements (chain: one per length)."""
    return [e for e in EXAMPLES.values() if e.cuda_op == op]


def find_library(
    example: Example | str,
    backend: str = "c",
    kinds: Iterable[str] = ("futhark",),
) -> tuple[LibrarySource, Path] | None:
    """The first of the example's sources (of the given kinds: by default the programs of
    ``futhark/``, which installs ship; ``"reference"`` adds the test program ``probe``) whose library
    has been built for ``backend``, with the path of its ``lib*.so``; None if none is built."""
    from pybridge import paths  # only the build-directory lookup; no Futhark or CUDA imports

    ex = get(example) if isinstance(example, str) else example
    kinds = tuple(kinds)
    for src in ex.sources:
        if src.kind not in kinds:
            continue
        p = paths.find_build_file(src.library_relpath(backend))
        if p is not None:
            return src, p
    return None
