"""The compiled call path against the Python one, in one process (issue 34).

Each library is loaded twice from the same file: once with the compiled plans (``_callpath.Plan``)
and once inside ``callpath.python_plans()`` (the Python plans, which the fallback uses). Hypothesis
drives both with the same draws and every outcome must be identical: results bit for bit,
exception types and messages, and the libraries' live-value counts after every step.

- Generated interfaces (tests/interface_gen.py): every primitive type, arrays, records, sums,
  arrays of records and of sums, unique parameters; arguments as NumPy data, then the result
  handles passed back (the plans' fast path: consumed, aliased, reused), then again once they are
  consumed or freed; scalars replaced at random by adversarial values (out of range, NaN, bool for
  int, strings, None, NumPy scalars of other types).
- The lifecycle machine (pybridge/testing/stateful.py: threads, Ctrl-C, freed and consumed
  handles, aliasing), run on both with one derandomised seed; the trace of its model after every
  step (which handles are live, their shapes, the library's live-value count) must match.

On cuda: ``PYBRIDGE_GEN_PREBUILT`` as for tests/test_generated_interfaces.py (the GPU machine has
no Futhark compiler), and build/reference/cuda/libprobe.so for the machine.
"""

from __future__ import annotations

import gc
import signal
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed, settings, strategies as st
from hypothesis.extra import numpy as hnp
from hypothesis.stateful import run_state_machine_as_test

import pybridge.futhark as pf
from pybridge.futhark import callpath
from pybridge.futhark.build import futhark_compiler
from pybridge.futhark.context import error_for_message
from pybridge.futhark.handles import Value
from pybridge.futhark.types import PRIMITIVES
from pybridge.paths import find_build_file
from pybridge.testing.stateful import handle_lifecycle_machine

import interface_gen as g
import test_generated_interfaces as gen

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [
    pytest.mark.futhark,
    pytest.mark.skipif(callpath.compiled is None, reason=f"the compiled call path is not in use: {callpath.DESCRIPTION}"),
]
# The generated interfaces run on c and cuda: the call plans do not depend on the backend, and
# multicore's library is driven through both plans by the lifecycle machine (CI's time budget).
GENERATED_BACKENDS = [pytest.param("c", id="c"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]
BACKENDS = [pytest.param("c", id="c"), pytest.param("multicore", id="multicore"),
            pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]
ENTRIES = 8  # generated entry points per backend (one compiler run)
ROUNDS = 2  # draws per entry point


def load_both(so: Path, backend: str) -> tuple[pf.Library, pf.Library]:
    """(compiled plans, Python plans) of one library file, each with its own context."""
    fast = pf.load(so, backend=backend)
    with callpath.python_plans():
        slow = pf.load(so, backend=backend)
    for name in fast.entry_points:  # both paths are what they claim to be
        assert isinstance(type(fast.entry_points[name]).__call__, callpath.compiled.Plan), name
        assert not isinstance(type(slow.entry_points[name]).__call__, callpath.compiled.Plan), name
    return fast, slow


# ---------------------------------------------------------------- generated interfaces


numpy_scalars = st.sampled_from(sorted(set(g.DTYPES.values()), key=str)).flatmap(lambda dt: hnp.from_dtype(dt).map(dt.type))
adversarial = st.one_of(
    numpy_scalars,
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**7, 2**8, 2**15, 2**16, 2**31, 2**32, 2**63, 2**64, -1, -(2**63) - 1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([3.5e38, -3.5e38, 1e300, float("nan")]),
    st.booleans(),
    st.none(),
    st.text(max_size=2),
)


def outcome(fn: Callable[[], Any]) -> tuple[Any, ...]:
    """("ok", the results as plain data, the results) or ("raised", type, message)."""
    try:
        res = fn()
    except Exception as e:  # noqa: BLE001 - the exception is the outcome compared
        return ("raised", type(e), str(e))
    return ("ok", tuple(gen.read(r) for r in (res if isinstance(res, tuple) else (res,))), res)


def same_outcome(a: tuple[Any, ...], b: tuple[Any, ...], where: str) -> None:
    if a[0] == "raised" or b[0] == "raised":
        assert a == b, f"{where}: compiled {a[:3]} != Python {b[:3]}"
        return
    gen.assert_same(b[1], a[1], where, scalar_f32_quiet=False)


def run_entry(lib: pf.Library, e: g.Entry, args: list[Any]) -> list[tuple[Any, ...]]:
    """The steps one entry point goes through, with the live-value count after each."""
    ep = lib.entry(e.name)
    steps = []
    first = outcome(lambda: ep(*args))
    steps += [first, ("live", lib.live_values())]
    if first[0] == "ok":
        res = first[2] if isinstance(first[2], tuple) else (first[2],)
        again = list(args)
        if e.kind == "identity":
            kept = [i for i, p in enumerate(e.params) if not p.ignored]
            if len(kept) == 1 and len(res) != 1:
                again[kept[0]] = tuple(res)
            else:
                for i, r in zip(kept, res):
                    again[i] = r
        for _ in range(2):  # the handles passed back, then once more (consumed ones are invalid now)
            o = outcome(lambda: ep(*again))
            steps += [o[:2] if o[0] == "ok" else o, ("live", lib.live_values())]
            if o[0] == "ok":
                gen._free(o[2])
        gen._free(first[2])
        o = outcome(lambda: ep(*again))  # freed handles
        steps += [o[:2] if o[0] == "ok" else o, ("live", lib.live_values())]
        if o[0] == "ok":
            gen._free(o[2])
    gc.collect()
    steps.append(("live", lib.live_values()))
    return steps


def check_both(fast: pf.Library, slow: pf.Library, e: g.Entry, draw: Any, backend: str, counts: dict[str, int]) -> None:
    info = fast.entry(e.name).info
    plain, _ = gen.draw_call(e, draw, backend)
    for i, p in enumerate(info.inputs):  # adversarial scalars: both paths must refuse them alike
        if p.type in PRIMITIVES and draw(st.integers(0, 3)) == 0:
            plain[i] = draw(adversarial)
    args = [gen.spelled(fast, p.type, a, draw) for p, a in zip(info.inputs, plain)]
    a, b = run_entry(fast, e, args), run_entry(slow, e, args)
    assert len(a) == len(b), f"{e.name}: {len(a)} steps compiled, {len(b)} Python"
    for k, (x, y) in enumerate(zip(a, b)):
        if x[0] == "live":
            assert x == y, f"{e.name} step {k}: live values compiled {x[1]}, Python {y[1]}"
        else:
            same_outcome(x, y, f"{e.name} step {k}")
            counts[x[0]] += 1


@pytest.mark.skipif(futhark_compiler() is None and not gen.PREBUILT, reason="the Futhark compiler is not installed")
@pytest.mark.parametrize("backend", GENERATED_BACKENDS)
def test_generated_interfaces_both_paths(backend: str, tmp_path: Path) -> None:
    if gen.PREBUILT:
        profile, seed_, entries = gen.prebuilt_entries()
        entries = entries[:profile.entries]  # program 0 only
    else:
        seed_ = gen.SEED
        entries = gen.collect_entries(ENTRIES, seed_)
    so = gen.build_generated(entries, 0, backend, tmp_path)
    fast, slow = load_both(so, backend)
    counts = {"ok": 0, "raised": 0}
    try:
        for j, e in enumerate(entries):

            @seed(seed_ + j)
            @settings(max_examples=ROUNDS, database=None, deadline=None, suppress_health_check=list(HealthCheck))
            @given(st.data())
            def check(data: st.DataObject) -> None:
                check_both(fast, slow, e, data.draw, backend, counts)

            try:
                check()
            except Exception as exc:
                raise AssertionError(f"PYBRIDGE_GEN_SEED={seed_}: entry point {e.name!r} ({backend}):\n{e.fut()}\n{exc}") from exc
    finally:
        fast.close()
        slow.close()
    assert counts["ok"] > 0 and counts["raised"] > 0, counts  # both kinds of outcome were compared


# ---------------------------------------------------------------- the lifecycle machine


def _trace(lib: pf.Library, steps: int, examples: int) -> list[Any]:
    """The lifecycle machine's model after every step, derandomised (the same draws on both paths
    as long as they behave the same)."""
    machine = handle_lifecycle_machine(lib, max_size=5)
    trace: list[Any] = []

    class Traced(machine):  # type: ignore[misc,valid-type]
        def check_invariants(self, *a: Any, **k: Any) -> None:
            super().check_invariants(*a, **k)
            trace.append((lib.live_values() - self.base,
                          [(t.origin, t.type_name, t.state == "live", getattr(t.model, "shape", None)) for t in self.tracked]))

    run_state_machine_as_test(Traced, settings=settings(
        max_examples=examples, stateful_step_count=steps, deadline=None, database=None, derandomize=True,
        suppress_health_check=list(HealthCheck)))
    return trace


def _lifecycle_programs(backend: str) -> list[str]:
    found = find_build_file(Path("reference") / backend / "libprobe.so")
    programs = [str(found)] if found is not None else []
    if futhark_compiler() is not None:  # aliasing.fut: results that alias, records of handles
        programs.append(str(ROOT / "tests" / "programs" / "aliasing.fut"))
    if not programs:
        pytest.skip(f"reference/{backend}/libprobe.so not built: run `make`")
    return programs


@pytest.mark.parametrize("backend", BACKENDS)
def test_lifecycle_machine_both_paths(backend: str) -> None:
    for prog in _lifecycle_programs(backend):
        fast = pf.load(prog, backend=backend)
        with callpath.python_plans():
            slow = pf.load(prog, backend=backend)
        try:
            a, b = _trace(fast, 10, 6), _trace(slow, 10, 6)
        finally:
            fast.close()
            slow.close()
        assert len(a) > 8, f"{prog}: the machine ran {len(a)} steps"
        assert a == b, next(f"{prog}: step {k}: compiled {x} != Python {y}" for k, (x, y) in enumerate(zip(a, b)) if x != y) \
            if any(x != y for x, y in zip(a, b)) else f"{prog}: {len(a)} steps compiled, {len(b)} Python"


# ---------------------------------------------------------------- the comparison sees a difference


def _aliasing_steps(lib: pf.Library) -> list[tuple[Any, ...]]:
    """A consume of a handle that shares memory with a live one (``set0(ident(x))``), then x read."""
    x = lib.types["[]i32"].new(np.array([1, 2, 3], np.int32))
    steps = [outcome(lambda: lib.set0(lib.ident(x), 7)), outcome(lambda: x.numpy())]
    gen._free(steps[0][2] if steps[0][0] == "ok" else None)
    x.free()
    return [*steps, ("live", lib.live_values())]


def _failing_steps(lib: pf.Library) -> list[tuple[Any, ...]]:
    """A failed call (an index out of bounds): Futhark's message, made into the exception."""
    xs = lib.types["[]f32"].new(np.ones(3, np.float32))
    steps = [outcome(lambda: lib.index_at(xs, 5)), ("live", lib.live_values())]
    xs.free()
    return steps


def _same_steps(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]]) -> None:
    """What check_both requires of two runs (results, exceptions, live counts alike)."""
    assert len(a) == len(b)
    for k, (x, y) in enumerate(zip(a, b)):
        if x[0] == "live":
            assert x == y, f"step {k}: live values compiled {x[1]}, Python {y[1]}"
        else:
            same_outcome(x, y, f"step {k}")


@pytest.mark.parametrize("mutation", ["message", "aliasing"])
def test_the_comparison_fails_when_the_compiled_path_differs(mutation: str) -> None:
    """A mutation check of this file: the compiled path given a different part (Futhark's message
    with a word added; an alias rule that never copies) must make the comparison above fail, and
    the same runs without it pass. The parts are swapped through callplan.configure_compiled, the
    way the extension is given them at import."""
    from pybridge.futhark import callplan

    if mutation == "message":
        prog = find_build_file(Path("reference") / "c" / "libprobe.so")
        if prog is None:
            pytest.skip("reference/c/libprobe.so not built: run `make`")
        steps, swap = _failing_steps, {"error_for_message": lambda code, text, fn: error_for_message(code, text + " (mutated)", fn)}
    else:
        if futhark_compiler() is None:
            pytest.skip("the Futhark compiler is not installed")
        prog, steps, swap = ROOT / "tests" / "programs" / "aliasing.fut", _aliasing_steps, {"shared": lambda h: False}
    fast, slow = load_both(Path(prog), "c")
    try:
        _same_steps(steps(fast), steps(slow))  # unchanged: alike
        callplan.configure_compiled(**swap)
        try:
            mutated = steps(fast)
        finally:
            callplan.configure_compiled()
        with pytest.raises(AssertionError):
            _same_steps(mutated, steps(slow))
        _same_steps(steps(fast), steps(slow))  # restored: alike again
    finally:
        fast.close()
        slow.close()


def test_handles_are_of_one_kind_and_report_the_path() -> None:
    """The handle storage is the compiled one in this process, and pybridge info says so."""
    from pybridge.futhark.handles import ArrayHandle, OpaqueHandle

    assert issubclass(ArrayHandle, callpath.compiled.ArrayBase) and issubclass(OpaqueHandle, callpath.compiled.OpaqueBase)
    assert issubclass(ArrayHandle, Value) and callpath.DESCRIPTION.startswith("compiled")


_FORCED = r"""
import numpy as np, pybridge.futhark as pf
from pybridge.futhark import callpath, handles, InvalidHandleError
assert callpath.compiled is None and callpath.DESCRIPTION == "Python (PYBRIDGE_CALL_PATH=python)", callpath.DESCRIPTION
assert issubclass(handles.ArrayHandle, handles._PythonArray)
lib = pf.load({so!r})
assert not hasattr(type(lib.entry_points["trivial"]).__call__, "__self__")
assert lib.trivial(41) == 42
x = lib.types["[]f32"].new(np.arange(4, dtype=np.float32))
y = lib.bump(lib.saxpy(2.0, x, x))
assert np.from_dlpack(y).tolist() == [1.0, 3.0, 6.0, 9.0]
try:
    lib.sum(lib.bump(y) and y)
except InvalidHandleError as e:
    assert "sum: parameter 'xs'" in str(e) and "consumed by entry point 'bump'" in str(e), e
else:
    raise AssertionError("a consumed handle was accepted")
x.free()
assert lib.live_values() == 0, lib.live_values()
lib.close()
print("python path ok")
"""


def test_forced_python_path_works() -> None:
    """PYBRIDGE_CALL_PATH=python: the pure-Python handles and plans, as where the extension is not built."""
    import os
    import subprocess
    import sys

    so = find_build_file(Path("reference") / "c" / "libprobe.so")
    if so is None:
        pytest.skip("reference/c/libprobe.so not built: run `make`")
    env = {**os.environ, callpath.ENV: "python"}
    out = subprocess.run([sys.executable, "-c", _FORCED.format(so=str(so))], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "python path ok" in out.stdout, out.stdout + out.stderr
    info = subprocess.run([sys.executable, "-m", "pybridge", "info"], env=env, capture_output=True, text=True, timeout=300)
    assert "call path" in info.stdout and "Python (PYBRIDGE_CALL_PATH=python)" in info.stdout, info.stdout + info.stderr


# ---------------------------------------------------------------- Ctrl-C in a consuming call


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pybridge.testing.alarm needs Linux's POSIX timers")
@pytest.mark.skipif(futhark_compiler() is None, reason="the Futhark compiler is not installed")
@pytest.mark.parametrize("plans", ["compiled", "python"])
def test_an_interrupted_consuming_call_leaves_its_argument_consumed_or_untouched(plans: str) -> None:
    """set0 (``xs with [0] = v``, in place) cut by a Ctrl-C at random moments: afterwards the
    argument is consumed or still holds what it held. The compiled plan once built the consumed
    status's text after the C call (str() runs Python code, where the interrupt surfaced): the
    argument stayed valid with its memory overwritten, about once in 30 interrupted calls."""
    from pybridge.testing.alarm import Alarm

    prog = str(ROOT / "tests" / "programs" / "aliasing.fut")
    if plans == "python":
        with callpath.python_plans():
            lib = pf.load(prog, backend="c")
    else:
        lib = pf.load(prog, backend="c")
    alarm = Alarm()
    previous = signal.signal(signal.SIGALRM, alarm.handler)
    rng = np.random.default_rng(7)
    landed = 0
    try:
        for i in range(600):
            h = lib.types["[]i32"].new(np.ones(1 + i % 4, np.int32))
            try:
                try:
                    alarm.arm(float(rng.integers(1, 60)))
                    lib.set0(h, 0)
                finally:
                    alarm.disarm()
            except KeyboardInterrupt:
                landed += 1
            if h.valid:
                np.testing.assert_array_equal(h.numpy(), np.ones(1 + i % 4, np.int32), err_msg=f"call {i}")
                h.free()
    finally:
        signal.signal(signal.SIGALRM, previous)
        alarm.close()
        lib.close()
    assert landed > 20, landed  # the interrupts did land in the calls
