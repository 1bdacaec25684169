"""Compare a wrapped kernel with a NumPy reference on generated inputs: :func:`check_against`.

Results are compared structurally: a ``tuple`` is several results (compared pairwise), a ``dict``
is a record (field by field), ``(str, tuple)`` is a sum value (variant exactly, then payload), a
list or anything array-like is one array. Arrays must have the same shape; integers, bools and
strings must be equal; floats must be within the tolerance:

- default: ``|got - expected| <= atol + rtol*|expected|`` with per-dtype defaults (those of
  ``torch.testing.assert_close``: f16 1e-3/1e-5, f32 1.3e-6/1e-5, f64 1e-7/1e-7);
- ``Tolerance(rtol=, atol=)``: those instead (a missing one is 0);
- ``Tolerance(ulps=N)``: at most N units in the last place apart, in the target's dtype;
- ``Tolerance(reduction=True)`` (check_against): ``|got - expected| <= n * eps * sum(|x|)`` over
  the float array inputs (``n`` their largest length, ``eps`` of the result dtype): the classic
  bound for a summation in any order; ``reduction=callable(*args)`` returns the bound itself (see
  :func:`reduction_bound`).

An element passes when it meets any criterion that was asked for (the rtol/atol test is
``numpy.isclose``'s). NaN equals NaN (``equal_nan=True``, the default, as in
``numpy.testing.assert_allclose``; ``Tolerance(equal_nan=False)`` to refuse NaN on both sides);
infinities must match exactly.

A reference that raises on an input (``xs.max()`` on an empty array) without ``errors=`` fails the
check with :class:`ReferenceRaisedError` ("the reference raised on this input: ...", the input
shrunk and shown), never with the reference's own exception escaping the comparison.

``rule=`` replaces all of that with an acceptance rule of your own: an object with
``check(args, expected, actual)`` returning something with ``.ok`` and ``.message`` (the example
catalog's tolerances, ``pybridge.examples.get("saxpy").tolerance``), or a callable
``rule(args, expected, actual)`` returning a bool or ``(ok, message)``.

``errors=`` makes errors part of the specification: where the reference raises, the target must
raise one of the given exception types too (its message matching ``error_match=``), and vice versa.
"""

from __future__ import annotations

import copy
import hashlib
import numbers
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence, Union

import numpy as np
from hypothesis import HealthCheck, example, given
from hypothesis import settings as Settings
from hypothesis import strategies as st
from hypothesis.database import ExampleDatabase

from .strategies import (
    InputOptions,
    InputSpec,
    Inputs,
    entry_spec,
    inputs as inputs_strategy,
    spec_from_kernel,
    spec_from_text,
)
from ..convert import to_numpy
from ..errors import PybridgeError

# ---------------------------------------------------------------- tolerances

# Per-dtype (rtol, atol): torch.testing.assert_close's defaults, a widely used and documented choice.
DEFAULT_TOLERANCES: dict[np.dtype, tuple[float, float]] = {
    np.dtype(np.float16): (1e-3, 1e-5),
    np.dtype(np.float32): (1.3e-6, 1e-5),
    np.dtype(np.float64): (1e-7, 1e-7),
}

Bound = Union[float, np.ndarray, Callable[[np.dtype], Any]]


@dataclass(frozen=True)
class Tolerance:
    """What "close enough" means for floats (see the module docstring)."""

    rtol: float | None = None
    atol: float | None = None
    ulps: int | None = None
    equal_nan: bool = True
    check_dtype: bool = False
    #: check_against only: True for the bound n*eps*sum|x| over the float inputs, or a callable
    #: of the inputs returning the bound (see :func:`reduction_bound`).
    reduction: bool | Callable[..., Any] = False

    def __post_init__(self) -> None:
        # Checked here: a wrong bound otherwise fails deep in NumPy at the first compare.
        for name in ("rtol", "atol", "ulps"):
            v = getattr(self, name)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise TypeError(f"Tolerance({name}={v!r}): expected a number or None, got {type(v).__name__}")
            if not v >= 0:  # NaN too
                raise ValueError(f"Tolerance({name}={v!r}): expected a non-negative number")

    def explicit(self) -> bool:
        return self.rtol is not None or self.atol is not None or self.ulps is not None

    def describe(self, dtype: np.dtype, bound: Any = None) -> str:
        parts = []
        if self.explicit() or bound is not None:
            if self.rtol is not None:
                parts.append(f"rtol={self.rtol:g}")
            if self.atol is not None:
                parts.append(f"atol={self.atol:g}")
            if self.ulps is not None:
                parts.append(f"ulps={self.ulps}")
            if bound is not None:
                parts.append("reduction bound n*eps*sum|x|")
        else:
            r, a = DEFAULT_TOLERANCES.get(np.dtype(dtype), DEFAULT_TOLERANCES[np.dtype(np.float64)])
            parts.append(f"rtol={r:g}, atol={a:g} ({np.dtype(dtype).name} defaults)")
        if not self.equal_nan:  # the default (NaN equals NaN) goes unsaid
            parts.append("equal_nan=False")
        return ", ".join(parts)


def ulp_distance(a: Any, b: Any) -> np.ndarray:
    """How many representable numbers of their (common float) dtype lie between ``a`` and ``b``.

    +0 and -0 are 0 apart; an infinity is one step beyond the largest finite number; NaN is
    the maximum distance from anything (callers handle NaN themselves). Returns uint64.
    """
    a = np.asarray(a)
    b = np.asarray(b)
    dtype = np.result_type(a, b)
    if dtype.kind != "f":
        raise TypeError(f"ulp_distance needs floats, got {a.dtype} and {b.dtype}")
    bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[dtype.itemsize]
    width = dtype.itemsize * 8
    sign = np.uint64(1) << np.uint64(width - 1)

    def key(x: np.ndarray) -> np.ndarray:
        x = np.where(x == 0, dtype.type(0), x).astype(dtype)  # -0 -> +0
        u = np.atleast_1d(x).view(bits).astype(np.uint64)
        # Map sign-magnitude bit patterns onto a monotonic unsigned line: -m -> sign-m, +m -> sign+m.
        with np.errstate(over="ignore"):
            return np.where(u & sign, sign - (u & (sign - np.uint64(1))), u + sign).reshape(x.shape)

    ka, kb = key(np.broadcast_to(a, np.broadcast_shapes(a.shape, b.shape))), key(
        np.broadcast_to(b, np.broadcast_shapes(a.shape, b.shape))
    )
    d = np.where(ka >= kb, ka - kb, kb - ka)
    nan = np.isnan(a) | np.isnan(b)
    return np.where(nan, np.iinfo(np.uint64).max, d).astype(np.uint64)


def reduction_bound(terms: Any, dtype: Any = None, *, axis: int | tuple[int, ...] | None = None, n: int | None = None) -> Any:
    """``n * eps * sum(|terms|)``: how far a float summation of ``terms`` may be from the exact sum.

    ``dtype`` gives ``eps`` (default: the terms' dtype); ``axis`` sums along that axis only (one
    bound per output element, e.g. row sums); ``n`` defaults to the number of terms summed. For a
    dot product pass the products: ``reduction=lambda xs, ys: reduction_bound(xs * ys)``.
    """
    t = np.asarray(terms)
    eps = np.finfo(np.dtype(dtype) if dtype is not None else (t.dtype if t.dtype.kind == "f" else np.float64)).eps
    mag = np.sum(np.abs(t.astype(np.float64)), axis=axis)
    if n is None:
        n = t.size if axis is None else int(np.prod([t.shape[k] for k in np.atleast_1d(axis)]))
    return n * eps * mag


def _inputs_bound(case: Inputs) -> Callable[[np.dtype], float]:
    """The reduction=True bound for one case: n * eps * sum|x| over its float arrays."""
    arrays = [a for a in _leaves(case.args) if isinstance(a, np.ndarray) and a.dtype.kind == "f"]
    n = max((a.size for a in arrays), default=0)
    mag = float(sum(np.sum(np.abs(a.astype(np.float64))) for a in arrays))

    def bound(dtype: np.dtype) -> float:
        eps = float(np.finfo(dtype if np.dtype(dtype).kind == "f" else np.float64).eps)
        return n * eps * mag

    return bound


def _leaves(v: Any) -> Iterable[Any]:
    if isinstance(v, dict):
        for x in v.values():
            yield from _leaves(x)
    elif isinstance(v, (tuple, list)):
        for x in v:
            yield from _leaves(x)
    else:
        yield v


# ---------------------------------------------------------------- comparing values

@dataclass
class Mismatch:
    """What differs at one place (``path``) of the results."""

    path: str
    reason: str
    rows: list[tuple[str, str, str, str, str]] = field(default_factory=list)  # index, got, expected, err, allowed
    count: int = 0
    total: int = 0
    max_error: float | None = None
    max_error_index: tuple[int, ...] | None = None
    max_ulps: int | None = None

    def format(self) -> str:
        lines = [f"{self.path}: {self.reason}"]
        if self.total:
            pct = 100.0 * self.count / self.total
            line = f"  {self.count} of {self.total} element(s) differ ({pct:.1f}%)"
            if self.max_error is not None:
                line += f"; max abs err {self.max_error:.6g} at index {self.max_error_index}"
            if self.max_ulps is not None:
                line += f"; max {self.max_ulps} ulps"
            lines.append(line)
        if self.rows:
            header = ("index", "got", "expected", "abs err", "allowed")
            widths = [max(len(r[k]) for r in [header, *self.rows]) for k in range(5)]
            for r in [header, *self.rows]:
                lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        return "\n".join(lines)


class MismatchError(PybridgeError, AssertionError):
    """The target disagreed with the reference. ``inputs`` is the (shrunk) failing case."""

    def __init__(self, message: str, inputs: Inputs | None, mismatches: list[Mismatch], results: Any = None, expected: Any = None):
        super().__init__(message)
        self.inputs = inputs
        self.mismatches = mismatches
        self.results = results
        self.expected = expected


class ReferenceRaisedError(MismatchError):
    """The reference raised on an input (and ``errors=`` did not make errors part of the
    specification): no expected value exists for it. ``inputs`` is the (shrunk) case, ``error``
    (also ``__cause__``) what the reference raised, ``results`` what the target returned."""

    def __init__(self, inputs: Inputs, error: BaseException, results: Any = None):
        reason = f"the reference raised on this input: {type(error).__name__}: {_short(str(error))}"
        super().__init__(f"{reason}\ninputs:\n{inputs.summary()}", inputs, [Mismatch("reference", reason)], results)
        self.error = error


def _fmt(v: Any) -> str:
    if isinstance(v, np.generic):
        return str(v.item()) if v.dtype.kind in "iub" else str(v)
    return str(v)


def _is_sum_value(v: Any) -> bool:
    return isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str) and isinstance(v[1], tuple)


def compare(
    got: Any, expected: Any, tolerance: Tolerance = Tolerance(), *, bound: Bound | None = None, path: str = "result", max_rows: int = 5
) -> list[Mismatch]:
    """Every mismatch between ``got`` and ``expected`` (empty when they agree). Floating-point
    warnings of the comparison itself (an infinite value times a zero tolerance, an overflowing
    bound) are silenced: infinities and NaN are part of what is compared."""
    out: list[Mismatch] = []
    with np.errstate(all="ignore"):
        _compare(got, expected, tolerance, bound, path, out, max_rows)
    return out


def _compare(got: Any, exp: Any, tol: Tolerance, bound: Any, path: str, out: list[Mismatch], max_rows: int) -> None:
    if isinstance(exp, dict) or isinstance(got, dict):
        if not (isinstance(exp, dict) and isinstance(got, dict)):
            out.append(Mismatch(path, f"got {type(got).__name__}, expected a record (dict)"))
            return
        if set(got) != set(exp):
            out.append(Mismatch(path, f"record fields differ: got {sorted(got)}, expected {sorted(exp)}"))
            return
        for k in exp:
            _compare(got[k], exp[k], tol, bound, f"{path}.{k}", out, max_rows)
        return
    if _is_sum_value(exp) or _is_sum_value(got):
        if not (_is_sum_value(exp) and _is_sum_value(got)):
            out.append(Mismatch(path, f"got {got!r:.80}, expected a sum value {exp!r:.80}"))
            return
        if got[0] != exp[0]:
            out.append(Mismatch(path, f"variant #{got[0]}, expected #{exp[0]}"))
            return
        _compare(got[1], exp[1], tol, bound, f"{path}#{exp[0]}", out, max_rows)
        return
    if isinstance(exp, tuple) or isinstance(got, tuple):
        if not (isinstance(exp, tuple) and isinstance(got, tuple)):
            out.append(Mismatch(path, f"got {type(got).__name__}, expected {type(exp).__name__} (a tuple is several results)"))
            return
        if len(got) != len(exp):
            out.append(Mismatch(path, f"got {len(got)} values, expected {len(exp)}"))
            return
        bounds = bound if isinstance(bound, tuple) else (bound,) * len(exp)
        for k, (g, e) in enumerate(zip(got, exp)):
            _compare(g, e, tol, bounds[k] if k < len(bounds) else None, f"{path}[{k}]", out, max_rows)
        return
    if isinstance(exp, (str, bytes)) or exp is None or isinstance(got, (str, bytes)) or got is None:
        if got != exp:
            out.append(Mismatch(path, f"got {got!r}, expected {exp!r}"))
        return
    _compare_arrays(np.asarray(got), np.asarray(exp), tol, bound, path, out, max_rows)


def _compare_arrays(g: np.ndarray, e: np.ndarray, tol: Tolerance, bound: Any, path: str, out: list[Mismatch], max_rows: int) -> None:
    if g.shape != e.shape:
        out.append(Mismatch(path, f"shape {g.shape}, expected {e.shape}"))
        return
    if tol.check_dtype and g.dtype != e.dtype:
        out.append(Mismatch(path, f"dtype {g.dtype}, expected {e.dtype}"))
        return
    if g.dtype.kind not in "biuf" or e.dtype.kind not in "biuf":
        ok = np.asarray(g == e, dtype=bool)
        if not ok.all():
            out.append(_table(path, "values differ", g, e, ~ok, None, None, max_rows))
        return
    if g.dtype.kind != "f" and e.dtype.kind != "f":
        if g.dtype != e.dtype and np.result_type(g.dtype, e.dtype).kind == "f":
            ok = np.asarray(g.astype(object) == e.astype(object), dtype=bool)  # u64 vs i64: exact via int
        else:
            ok = np.asarray(g == e, dtype=bool)
        if not ok.all():
            out.append(_table(path, "integer/bool values differ (exact comparison)", g, e, ~ok, None, None, max_rows))
        return
    # Floats: tolerance in the less precise of the two float dtypes (usually the target's).
    fdtypes = [d for d in (g.dtype, e.dtype) if d.kind == "f"]
    dtype = min(fdtypes, key=lambda d: d.itemsize)
    g64, e64 = g.astype(np.float64), e.astype(np.float64)
    gnan, enan = np.isnan(g64), np.isnan(e64)
    finite = np.isfinite(g64) & np.isfinite(e64)
    err = np.where(finite, np.abs(g64 - e64), np.where(gnan | enan, np.nan, np.inf))
    if tol.explicit() or bound is not None:
        rtol, atol = tol.rtol or 0.0, tol.atol or 0.0
    else:
        rtol, atol = DEFAULT_TOLERANCES.get(dtype, DEFAULT_TOLERANCES[np.dtype(np.float64)])
    use_abs = not tol.explicit() or tol.rtol is not None or tol.atol is not None or bound is not None
    allowed = atol + rtol * np.abs(e64)
    atols: Any = atol
    if bound is not None:
        b = bound(dtype) if callable(bound) else bound
        extra = np.broadcast_to(np.asarray(b, dtype=np.float64), e64.shape)
        allowed = allowed + extra
        atols = atol + extra
    # The element test is numpy.isclose's (|got - expected| <= atol + rtol*|expected|, equal
    # infinities pass, NaN only with equal_nan); the ulps criterion may add to it. compare() has
    # silenced floating-point warnings around all of this.
    if use_abs:
        ok = np.isclose(g64, e64, rtol=rtol, atol=atols, equal_nan=tol.equal_nan)
    else:
        ok = np.isclose(g64, e64, rtol=0.0, atol=0.0, equal_nan=tol.equal_nan) & ~finite
    ulps = None
    if tol.ulps is not None:
        ulps = ulp_distance(g.astype(dtype), e.astype(dtype))
        ok |= finite & (ulps <= np.uint64(tol.ulps))
    if ok.all():
        return
    bad = ~ok
    m = _table(
        path,
        f"values differ beyond tolerance ({tol.describe(dtype, bound)})",
        g,
        e,
        bad,
        err,
        np.where(finite, allowed, np.nan) if use_abs else None,
        max_rows,
        ulps,
        tol.ulps,
    )
    out.append(m)


def _table(
    path: str,
    reason: str,
    g: np.ndarray,
    e: np.ndarray,
    bad: np.ndarray,
    err: np.ndarray | None,
    allowed: np.ndarray | None,
    max_rows: int,
    ulps: np.ndarray | None = None,
    max_ulps: int | None = None,
) -> Mismatch:
    idx = np.argwhere(bad)
    m = Mismatch(path, reason, count=int(bad.sum()), total=int(bad.size))
    if err is not None:
        errs = np.where(bad & ~np.isnan(err), err, -1.0)  # NaN has no size: rank it below everything
        if errs.size and errs.max() >= 0:
            k = np.unravel_index(int(np.argmax(errs)), errs.shape)
            m.max_error = float(errs[k])
            m.max_error_index = tuple(int(i) for i in k)
    if ulps is not None:
        finite_ulps = ulps[bad & (ulps != np.iinfo(np.uint64).max)]
        m.max_ulps = int(finite_ulps.max()) if finite_ulps.size else None
    for row in idx[:max_rows]:
        i = tuple(int(x) for x in row)
        gv, ev = g[i], e[i]
        if err is None:
            es, al = "", "exact"
        elif np.isnan(gv) and np.isnan(ev):
            es, al = "nan", "NaN != NaN (pass equal_nan=True)"
        elif not np.isfinite(err[i]):
            es, al = f"{err[i]}", "exact (non-finite)"
        else:
            es = f"{err[i]:.3g}"
            al = f"{allowed[i]:.3g}" if allowed is not None else ""
            if ulps is not None:
                es += f" ({int(ulps[i])} ulps)"
                al = (al + " or " if al else "") + f"{max_ulps} ulps"
        m.rows.append((str(i), _fmt(gv), _fmt(ev), es, al))
    if len(idx) > max_rows:
        m.rows.append(("...", f"{len(idx) - max_rows} more", "", "", ""))
    return m


def assert_close(
    got: Any,
    expected: Any,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    ulps: int | None = None,
    equal_nan: bool = True,
    check_dtype: bool = False,
    bound: Bound | None = None,
    inputs: Inputs | None = None,
    what: str = "target",
) -> None:
    """Raise :class:`MismatchError` with a readable diff unless ``got`` matches ``expected``."""
    tol = Tolerance(rtol, atol, ulps, equal_nan, check_dtype)
    ms = compare(got, expected, tol, bound=bound)
    if ms:
        raise MismatchError(_message(what, ms, inputs), inputs, ms, got, expected)


def _message(what: str, ms: list[Mismatch], case: Inputs | None) -> str:
    lines = [f"{what} does not match the reference:"]
    for m in ms:
        lines.append(m.format())
    if case is not None:
        lines.append("inputs:")
        lines.append(case.summary())
    return "\n".join(lines)


# ---------------------------------------------------------------- targets

class Target:
    """How to call something on one case and get NumPy results. Subclass for exotic targets."""

    name: str = "target"

    def spec(self, **kwargs: Any) -> InputSpec | None:
        """The input description, when the target knows its own signature."""
        return None

    def __call__(self, case: Inputs) -> Any:
        raise NotImplementedError


def _outputs_in_place(spec: InputSpec | None, args: Sequence[Any]) -> Any:
    """Results of a kernel-style function that returned None: its non-const pointer arguments."""
    if spec is None:
        return None
    outs = tuple(a for p, a in zip(spec.params, args) if p.is_output)
    if not outs:
        return None
    return outs[0] if len(outs) == 1 else outs


class CallableTarget(Target):
    """A Python function called as ``fn(*args)``. For a kernel-style signature a ``None`` result
    means "look at the output arrays", which the function filled in place."""

    def __init__(self, fn: Callable[..., Any], spec: InputSpec | None = None, name: str | None = None):
        self.fn = fn
        self._spec = spec
        self.name = name or getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)

    def spec(self, **kwargs: Any) -> InputSpec | None:
        return self._spec

    def __call__(self, case: Inputs) -> Any:
        args = case.args
        result = self.fn(*args)
        if result is None:
            return _outputs_in_place(self._spec, args)
        return to_numpy(result)


def _free_all(value: Any) -> None:
    """Free Futhark handles in a result (tuples included); other values are left alone."""
    if isinstance(value, (tuple, list)):
        for v in value:
            _free_all(v)
        return
    if (type(value).__module__ or "").startswith("pybridge.futhark"):
        free = getattr(value, "free", None)
        if callable(free):
            free()


class FutharkTarget(Target):
    """A Futhark entry point (``lib.saxpy``): called with NumPy values, results read back and freed."""

    def __init__(self, entry: Any):
        self.entry = entry
        self.ep = entry.info
        self.library = getattr(entry, "library", None)
        self.name = f"Futhark entry point {self.ep.name!r}"

    def spec(self, **kwargs: Any) -> InputSpec:
        return entry_spec(self.entry, **kwargs)

    def _arg(self, type_name: str, value: Any, temps: list[Any]) -> Any:
        """Build the opaque values an entry point does not take as plain Python values: sums
        (``(variant, payload)`` -> ``construct``) and arrays of records (dict of columns -> ``zip``)."""
        manifest = getattr(self.library, "manifest", None)
        types = getattr(self.library, "types", None)
        t = manifest.types.get(type_name) if manifest is not None else None
        if t is None or types is None:
            return value
        kind = types[type_name]
        h = None
        if getattr(t, "sum", None) is not None and _is_sum_value(value) and hasattr(kind, "construct"):
            h = kind.construct(value[0], *value[1])
        elif getattr(t, "record_array", None) is not None and isinstance(value, Mapping) and hasattr(kind, "zip"):
            h = kind.zip(**value)
        if h is None:
            return value
        temps.append(h)
        return h

    def __call__(self, case: Inputs) -> Any:
        temps: list[Any] = []
        try:
            args = [self._arg(i.type, v, temps) for i, v in zip(self.ep.inputs, case.args)]
            result = self.entry(*args)
        finally:
            for h in temps:
                free = getattr(h, "free", None)
                if callable(free):
                    free()
        try:
            return to_numpy(result)
        finally:
            _free_all(result)


class KernelTarget(Target):
    """A ``pybridge.cuda`` Kernel launched as ``kernel(*args, grid=..., block=..., stream=...)``.

    Pointer parameters are copied to the device (outputs too: they are in/out), scalars passed as
    NumPy scalars; the non-const pointers are read back as the results. ``block`` (default 256) and
    ``grid`` may be values or functions of the drawn sizes; the default grid covers the longest
    array with one thread per element (``pybridge.cuda.grid_for``, which launches one block even
    for empty arrays); a grid of 0 blocks skips the launch. ``shared_mem`` (bytes of dynamic
    shared memory, a value or a function of the drawn sizes) is passed to the launch when given.
    """

    def __init__(
        self,
        kernel: Any,
        *,
        grid: Any = None,
        block: Any = None,
        stream: Any = None,
        shared_mem: Any = None,
        to_device: Callable[..., Any] | None = None,
        grid_for: Callable[[int, int], Any] | None = None,
    ):
        self.kernel = kernel
        self.signature = kernel.signature
        self.grid, self.block, self.stream = grid, block, stream
        self.shared_mem = shared_mem
        # Injectable so the launch logic can be tested without a GPU; default: pybridge.cuda's.
        self._to_device, self._grid_for = to_device, grid_for
        self.name = f"CUDA kernel {getattr(self.signature, 'name', '?')!r}"

    def spec(self, **kwargs: Any) -> InputSpec:
        return spec_from_kernel(self.signature, **kwargs)

    def __call__(self, case: Inputs) -> Any:
        to_device, grid_for = self._to_device, self._grid_for
        if to_device is None or grid_for is None:
            from .. import cuda

            to_device = to_device or cuda.to_device
            grid_for = grid_for or cuda.grid_for
        args: list[Any] = []
        outs: list[Any] = []
        longest = 0
        for p, v in zip(self.signature.params, case.args):
            if p.is_pointer:
                arr = np.ascontiguousarray(v)
                longest = max(longest, arr.size)
                d = to_device(arr) if self.stream is None else to_device(arr, stream=self.stream)
                args.append(d)
                if not p.is_const:
                    outs.append(d)
            else:
                args.append(v)
        block = self.block(case.sizes) if callable(self.block) else (self.block or 256)
        if self.grid is not None:
            grid = self.grid(case.sizes) if callable(self.grid) else self.grid
        else:
            grid = grid_for(longest, block if isinstance(block, int) else int(np.prod(block)))
        launch: dict[str, Any] = {"grid": grid, "block": block, "stream": self.stream}
        if self.shared_mem is not None:
            launch["shared_mem"] = int(self.shared_mem(case.sizes) if callable(self.shared_mem) else self.shared_mem)
        if grid != 0 and grid != (0,):
            self.kernel(*args, **launch)
        if self.stream is not None and hasattr(self.stream, "synchronize"):
            self.stream.synchronize()
        host = tuple(to_numpy(d) for d in outs)
        return host[0] if len(host) == 1 else host


def on_device(fn: Callable[..., Any], *, to_device: Callable[[np.ndarray], Any] | None = None) -> Callable[..., Any]:
    """Wrap a function of device arrays (a ``pybridge.cuda.catalog`` operation, a CuPy function)
    so it takes NumPy: array arguments are copied to the device, results read back.

        check_against(reference_saxpy, on_device(catalog.cuda_saxpy), signature=...)
    """

    def wrapper(*args: Any) -> Any:
        nonlocal to_device
        if to_device is None:
            from ..cuda import to_device as cuda_to_device

            to_device = cuda_to_device
        return to_numpy(fn(*(to_device(np.ascontiguousarray(a)) if isinstance(a, np.ndarray) else a for a in args)))

    wrapper.__name__ = wrapper.__qualname__ = getattr(fn, "__name__", "on_device")
    return wrapper


def as_target(target: Any, **kwargs: Any) -> Target:
    """Wrap a Futhark entry point, a CUDA Kernel, or a callable as a :class:`Target`."""
    if isinstance(target, Target):
        return target
    from ..futhark.manifest import EntryInfo

    if isinstance(getattr(target, "info", None), EntryInfo):
        return FutharkTarget(target)
    sig = getattr(target, "signature", None)
    if sig is not None and hasattr(sig, "params") and not isinstance(sig, InputSpec):
        return KernelTarget(
            target, grid=kwargs.get("grid"), block=kwargs.get("block"), stream=kwargs.get("stream"),
            shared_mem=kwargs.get("shared_mem"),
        )
    if callable(target):
        return CallableTarget(target, kwargs.get("spec"))
    raise TypeError(f"cannot test {target!r}: expected a Futhark entry point, a CUDA Kernel or a callable")


# ---------------------------------------------------------------- rules and expected errors

def _rule_name(rule: Any) -> str:
    text = getattr(rule, "rule", None)
    if isinstance(text, str) and text:
        return text
    return getattr(rule, "__qualname__", None) or getattr(rule, "__name__", None) or type(rule).__name__


def apply_rule(rule: Any, args: Sequence[Any], expected: Any, got: Any) -> list[Mismatch]:
    """Judge ``got`` by an acceptance rule (see ``rule=`` of :func:`check_against`); [] if accepted."""
    check = getattr(rule, "check", None)
    result = check(tuple(args), expected, got) if callable(check) else rule(tuple(args), expected, got)
    if isinstance(result, tuple):
        ok, message = bool(result[0]), str(result[1]) if len(result) > 1 else ""
    elif isinstance(result, (bool, np.bool_)):
        ok, message = bool(result), ""
    elif hasattr(result, "ok"):
        ok, message = bool(result.ok), str(getattr(result, "message", ""))
    else:
        raise TypeError(f"rule {_rule_name(rule)!r} returned {result!r}: expected a bool, (ok, message) or .ok/.message")
    if ok:
        return []
    return [Mismatch("result", f"rejected by the rule '{_rule_name(rule)}'" + (f": {message}" if message else ""))]


def _short(v: Any, limit: int = 200) -> str:
    with np.printoptions(threshold=16, edgeitems=3):
        text = repr(v).replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _error_mismatches(
    got_exc: BaseException | None, ref_exc: BaseException | None, got: Any, expected: Any, error_match: str | None
) -> list[Mismatch]:
    """Where at least one side raised (with ``errors=``): both must have, with a matching message."""
    if got_exc is not None and ref_exc is not None:
        if error_match is not None and re.search(error_match, str(got_exc)) is None:
            return [Mismatch("error", f"the target raised {type(got_exc).__name__}: {_short(str(got_exc))}, "
                                      f"which does not match {error_match!r}")]
        return []
    if ref_exc is not None:
        return [Mismatch("result", f"expected an error (the reference raised {type(ref_exc).__name__}: "
                                   f"{_short(str(ref_exc))}), but the target returned {_short(got)}")]
    assert got_exc is not None
    return [Mismatch("result", f"the target raised {type(got_exc).__name__}: {_short(str(got_exc))}, "
                               f"but the reference returned {_short(expected)}")]


# ---------------------------------------------------------------- check_against

def _strategy_from_inputs(given_inputs: Any) -> st.SearchStrategy[Inputs]:
    """``inputs=``: a strategy of Inputs / dict / tuple, or a dict or sequence of strategies."""
    if isinstance(given_inputs, Mapping):
        return st.fixed_dictionaries(dict(given_inputs)).map(Inputs)
    if isinstance(given_inputs, (list, tuple)):
        return st.tuples(*given_inputs).map(lambda t: Inputs({f"arg{k}": v for k, v in enumerate(t)}))
    if isinstance(given_inputs, st.SearchStrategy):
        return given_inputs.map(_as_inputs)
    raise TypeError("inputs= must be a strategy, a dict of strategies or a sequence of strategies")


def _as_inputs(v: Any) -> Inputs:
    if isinstance(v, Inputs):
        return v
    if isinstance(v, Mapping):
        return Inputs(v)
    if isinstance(v, tuple):
        return Inputs({f"arg{k}": x for k, x in enumerate(v)})
    return Inputs({"arg0": v})


class _KeyedDatabase(ExampleDatabase):
    """Another example database with every key prefixed, so that one check's saved failures are
    replayed by that check only."""

    def __init__(self, inner: ExampleDatabase, prefix: bytes) -> None:
        super().__init__()
        self.inner = inner
        self.prefix = prefix

    def save(self, key: bytes, value: bytes) -> None:
        self.inner.save(self.prefix + key, value)

    def fetch(self, key: bytes) -> Iterable[bytes]:
        return self.inner.fetch(self.prefix + key)

    def delete(self, key: bytes, value: bytes) -> None:
        self.inner.delete(self.prefix + key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.inner.move(self.prefix + src, self.prefix + dest, value)


_TOLERANCE_FIELDS = ("rtol", "atol", "ulps", "reduction", "equal_nan", "check_dtype")
_LAUNCH_FIELDS = ("grid", "block", "stream", "shared_mem")


def _moved_keywords(moved: Mapping[str, Any]) -> TypeError:
    """The error for check_against keywords that moved into option objects: names the new form."""
    from dataclasses import fields

    from .strategies import InputOptions

    input_fields = {f.name for f in fields(InputOptions)}
    lines = []
    for group, names, form in (
        ("input", input_fields, "inputs=InputOptions({})"),
        ("tolerance", set(_TOLERANCE_FIELDS), "tolerance=Tolerance({})"),
        ("launch", set(_LAUNCH_FIELDS), "a KernelTarget(kernel, {}) as the target"),
    ):
        given_here = [k for k in moved if k in names]
        if given_here:
            lines.append(form.format(", ".join(f"{k}=..." for k in given_here)))
    unknown = [k for k in moved if k not in input_fields and k not in _TOLERANCE_FIELDS and k not in _LAUNCH_FIELDS]
    if unknown:
        return TypeError(f"check_against() got unexpected keyword argument(s) {', '.join(unknown)}")
    return TypeError(
        f"check_against({', '.join(f'{k}=...' for k in moved)}): these options moved into option objects; "
        f"pass {' and '.join(lines)}"
    )


def check_against(
    reference: Callable[..., Any],
    target: Any,
    *,
    signature: str | InputSpec | Any = None,
    sizes: Mapping[str, Any] | None = None,
    shapes: Mapping[str, Any] | None = None,
    source: Any = None,
    inputs: InputOptions | Any = None,
    tolerance: Tolerance | None = None,
    rule: Any = None,
    errors: type[BaseException] | tuple[type[BaseException], ...] | None = None,
    error_match: str | None = None,
    examples: Iterable[Mapping[str, Any]] = (),
    max_examples: int = 100,
    settings: Settings | None = None,
    **moved: Any,
) -> None:
    """Property-test ``target`` against ``reference`` on generated inputs; raise on a difference.

    ``target``: a Futhark entry point (``lib.saxpy``), a ``pybridge.cuda`` Kernel (launch options:
    pass ``KernelTarget(kernel, grid=..., block=..., stream=..., shared_mem=...)``), a
    :class:`Target`, or any callable (then say what its inputs are: ``signature=`` with a Futhark
    header or CUDA signature text, or ``inputs=`` strategies). ``reference`` is called with the
    same arguments, as NumPy values, in parameter order, and returns the expected result(s) (for a
    kernel-style signature it may instead fill the output arrays in place and return None).
    Each side gets its own copy of the inputs.

    ``sizes=`` / ``shapes=`` / ``source=`` say how dimensions are named (see
    :mod:`pybridge.testing.strategies`). ``inputs=``: an :class:`InputOptions` (how values are
    generated), or the inputs themselves as a strategy of dicts/tuples, a dict of strategies or a
    sequence of strategies. ``tolerance=``: a :class:`Tolerance` (see this module's docstring). On a
    difference Hypothesis shrinks the case and re-raises :class:`MismatchError` (an
    ``AssertionError``) whose message lists the mismatching indices and the inputs; its
    ``.inputs`` is the minimal case.

    ``rule=``: an acceptance rule instead of a tolerance (``rule.check(args, expected, actual)``
    with ``.ok``/``.message``, or a callable returning a bool or ``(ok, message)``); it gets the
    NumPy results and its own copy of the inputs.

    ``errors=``: exception type(s) of the target that the specification allows: where the
    reference raises (any exception), the target must raise one of them, with ``error_match``
    (a regular expression, as in ``pytest.raises(match=)``) found in its message; where only one
    side raises, the case fails. Other exceptions of the target propagate, as without ``errors=``.

    The options that used to be keywords (``max_size=``, ``rtol=``, ``grid=`` ...) raise a
    TypeError that names their new place.
    """
    if moved:
        raise _moved_keywords(moved)
    if tolerance is not None and not isinstance(tolerance, Tolerance):
        raise TypeError(f"tolerance= must be a Tolerance, got {type(tolerance).__name__}")
    if rule is not None and tolerance is not None:
        raise TypeError("rule= replaces tolerance=: give one or the other")
    tol = tolerance if tolerance is not None else Tolerance()
    reduction = tol.reduction
    options = inputs if isinstance(inputs, InputOptions) else None
    given_inputs = None if isinstance(inputs, InputOptions) else inputs
    if errors is not None:
        allowed = errors if isinstance(errors, tuple) else (errors,)
        if not allowed or not all(isinstance(e, type) and issubclass(e, BaseException) for e in allowed):
            raise TypeError(f"errors= must be an exception type or a tuple of them, got {errors!r}")
    elif error_match is not None:
        raise TypeError("error_match= needs errors= (the exception types the target may raise)")
    if isinstance(signature, InputSpec):
        spec: InputSpec | None = signature
    elif isinstance(signature, str):
        spec = spec_from_text(signature, sizes=sizes, shapes=shapes)
    elif signature is not None:
        spec = spec_from_kernel(signature, sizes=sizes, shapes=shapes)
    else:
        spec = None
    tgt = as_target(target, spec=spec)
    if spec is None and given_inputs is None:
        if isinstance(tgt, FutharkTarget):
            spec = tgt.spec(sizes=sizes, shapes=shapes, source=source)
        else:
            spec = tgt.spec(sizes=sizes, shapes=shapes)
    if isinstance(tgt, CallableTarget) and tgt._spec is None:
        tgt._spec = spec
    ref = CallableTarget(reference, spec, name="reference")
    if given_inputs is not None:
        strategy = _strategy_from_inputs(given_inputs)
    elif spec is not None:
        strategy = inputs_strategy(spec, options)
    else:
        raise TypeError(
            f"{tgt.name} does not describe its inputs: pass signature='entry f [n] (xs: [n]f32) ...' "
            "(or a CUDA signature), or inputs=<strategies>"
        )
    what = tgt.name

    def check_case(case: Inputs) -> None:
        bound: Any = None
        got: Any = None
        expected: Any = None
        got_exc: BaseException | None = None
        ref_exc: BaseException | None = None
        # Overflow to inf or 0/0 on either side is part of what is compared, not a warning.
        with np.errstate(all="ignore"):
            # The target first: when both sides fail on an input, the target's error is the news.
            if errors is None:
                got = tgt(case.copy())
            else:
                try:
                    got = tgt(case.copy())
                except errors as e:
                    got_exc = e
            if got_exc is None and rule is None:
                if reduction is True:
                    bound = _inputs_bound(case)
                elif callable(reduction):
                    bound = reduction(*copy.deepcopy(case.args))
            if errors is None:
                try:
                    expected = ref(case.copy())
                except Exception as e:  # noqa: BLE001 - reported with the input, not as a crash of the check
                    raise ReferenceRaisedError(case, e, got) from e
            else:
                try:
                    expected = ref(case.copy())
                except Exception as e:  # noqa: BLE001 - the reference says: this input is an error
                    ref_exc = e
        if got_exc is not None or ref_exc is not None:
            ms = _error_mismatches(got_exc, ref_exc, got, expected, error_match)
        elif rule is not None:
            with np.errstate(all="ignore"):  # as compare() does: a rule's arithmetic on inf/NaN
                ms = apply_rule(rule, case.copy().args, expected, got)
        else:
            ms = compare(got, expected, tol, bound=bound)
        if ms:
            raise MismatchError(_message(what, ms, case), case, ms, got, expected) from got_exc

    # Hypothesis keys its example database on the test function, which is this same closure for
    # every check: give each check its own keys, through the public database interface.
    key = f"{what}\0{spec.describe() if spec else ''}\0{getattr(reference, '__qualname__', '')}"
    base = settings or Settings(
        max_examples=max_examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
        # One minimal failure, not an ExceptionGroup of every distinct one Hypothesis met on the way.
        report_multiple_bugs=False,
    )
    if base.database is not None:
        base = Settings(base, database=_KeyedDatabase(base.database, hashlib.sha256(key.encode()).digest()))
    run = base(given(case=strategy)(check_case))
    for ex in examples:
        run = example(case=_as_inputs(ex))(run)
    run()


__all__ = [
    "CallableTarget",
    "DEFAULT_TOLERANCES",
    "FutharkTarget",
    "KernelTarget",
    "Mismatch",
    "MismatchError",
    "ReferenceRaisedError",
    "Target",
    "Tolerance",
    "apply_rule",
    "as_target",
    "assert_close",
    "check_against",
    "compare",
    "on_device",
    "reduction_bound",
    "to_numpy",
    "ulp_distance",
]
