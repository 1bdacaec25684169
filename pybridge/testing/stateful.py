"""A Hypothesis state machine over the lifecycle of a Futhark library's value handles.

``handle_lifecycle_machine(lib)`` builds a ``RuleBasedStateMachine`` for any loaded library. It
keeps a model (a NumPy copy and a state: live / freed / consumed) of every handle it made, and
runs random sequences of:

- create: ``lib.types["[]f32"].new(array)`` for each array-of-primitive type;
- read: ``handle.numpy()`` (and ``handle[i]``) equals the model; the shape matches;
- call: an entry point whose inputs are primitives and those array types, with live handles (of
  fitting shapes) or new ones; the handles passed must stay live and unchanged; array results join
  the pool, other results are read back and freed; a Futhark error (e.g. a size mismatch) is an
  allowed outcome;
- consume: an entry point with a unique (``*[]t``) parameter gets a live handle there; afterwards
  the handle is consumed (the C API: also when the call failed);
- free: ``handle.free()`` on any handle, live or not: idempotent;
- misuse: reading a freed or consumed handle, or passing it to an entry point, raises
  ``pybridge.futhark.InvalidHandleError`` and leaks nothing;
- records: record/tuple results whose fields are arrays of those types (or primitives) are kept
  with a model too; entry points taking such records get a kept one (or a dict); ``project``
  takes a field out (it shares the record's memory); records may be consumed (``*rec``);
- thread: a call made from a second thread (the machine waits for it, at most
  ``THREAD_CALL_TIMEOUT_S``: longer is a failure, a lock left held);
- interrupted call (Ctrl-C): a KeyboardInterrupt at a drawn moment 1-400 µs into a call (the main
  thread only); results owned or freed, a consumed argument invalid or untouched, no lock left held.

A sequence that runs longer than ``hang_limit_s`` (a hang: a lock left held, a wait in Futhark that
never ends) writes every thread's stack and ends the process (``pybridge.testing.watchdog``).

Aliasing invariant: after every step, every live handle (arrays and records) still reads as its
model. Results may share memory with arguments (``entry ident (xs: []i32) = xs``), projections
with their record: consuming one of them must never change another (pybridge copies first).

Invariant: the values the library's context holds for Python (``lib.live_values()``: handles made
and not yet freed or consumed) number the baseline plus the model's live handles. Teardown frees
everything and checks the count is back to the baseline.

    HandleMachine = handle_lifecycle_machine(lib)
    TestHandles = HandleMachine.TestCase
"""

from __future__ import annotations

import _imp  # lock_held(): CPython's import lock
import gc
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np
from hypothesis import HealthCheck, settings as Settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ..convert import to_numpy
from . import watchdog
from .alarm import Alarm
from .strategies import PrimSpec, elements, entry_spec, inputs


@dataclass
class Tracked:
    """One handle the machine made, with what it should hold and whether it may be used."""

    handle: Any
    type_name: str
    model: Any  # np.ndarray for arrays; {field: np.ndarray or scalar} for records
    state: str = "live"  # "live", "freed" or "consumed"
    origin: str = ""

    def __repr__(self) -> str:
        shape = self.model.shape if isinstance(self.model, np.ndarray) else "record"
        return f"<{self.type_name} {shape} {self.state} from {self.origin}>"


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")


THREAD_CALL_TIMEOUT_S = 60.0  # a call from a second thread that takes longer found a lock left held
# One sequence normally takes well under a second; a failing one waits THREAD_CALL_TIMEOUT_S at most
# once or twice before it raises. Longer is a hang, shown with every thread's stack (watchdog.py).
SEQUENCE_LIMIT_S = 300.0


def _lock_is_free(lock: Any, timeout: float) -> bool:
    """Whether another thread can take ``lock`` within ``timeout`` seconds (it releases it at once)."""
    got: list[bool] = []

    def probe() -> None:
        if lock.acquire(timeout=timeout):
            lock.release()
            got.append(True)

    t = threading.Thread(target=probe, name="lifecycle lock probe", daemon=True)
    t.start()
    t.join(timeout + 5)
    return bool(got)


def handle_lifecycle_machine(
    lib: Any,
    *,
    types: Iterable[str] | None = None,
    entries: Iterable[str] | None = None,
    max_size: int = 8,
    ranges: Mapping[str, tuple[float | None, float | None]] | None = None,
    settings: Settings | None = None,
    interrupts: bool | None = None,
    hang_limit_s: float | None = SEQUENCE_LIMIT_S,
) -> type[RuleBasedStateMachine]:
    """A state machine class for ``lib`` (a loaded ``pybridge.futhark`` library).

    ``types``: the array types to create (default: every array type in the manifest);
    ``entries``: the entry points to call (default: every one whose non-primitive inputs are among
    ``types``); ``max_size``: the largest dimension of created arrays; ``ranges``: bounds for
    scalar inputs as ``{"entry.param": (lo, hi)}`` (integer scalars default to [-2, 2*max_size]
    so that sizes and iteration counts stay small; floats to ±1e6); ``settings``: Hypothesis
    settings of the ``TestCase`` (default: 50 examples, deadline off); ``interrupts``: the rule
    ``interrupted_call``, a KeyboardInterrupt (SIGALRM to the main thread, ``pybridge.testing.alarm``)
    at a drawn moment of a call, as Ctrl-C raises it (RELIABILITY.md, "Ctrl-C"); None (the default):
    on where the alarm works (Linux). ``hang_limit_s``: the seconds one sequence may take before
    every thread's stack is written and the process exits (``pybridge.testing.watchdog``; it
    replaces other code's faulthandler timer meanwhile); None: no limit.
    """
    from ..futhark import FutharkError, InvalidHandleError
    from ..futhark.manifest import ArrayInfo, OpaqueInfo
    from ..futhark.types import PRIMITIVES as _PRIMS

    if interrupts is None:
        interrupts = sys.platform.startswith("linux")
    manifest = lib.manifest
    all_arrays = {n for n, t in manifest.types.items() if isinstance(t, ArrayInfo)}
    creatable = sorted(all_arrays if types is None else set(types))
    unknown = set(creatable) - all_arrays
    if unknown:
        raise ValueError(f"types {sorted(unknown)} are not array types of {lib!r}")
    if not creatable:
        raise ValueError(f"{lib!r} has no array types: nothing to create handles of")

    # Records (and tuples) whose fields are all creatable arrays or primitives: kept with a model.
    records = sorted(
        n
        for n, t in manifest.types.items()
        if isinstance(t, OpaqueInfo) and t.record is not None and t.record.fields
        and all(f.type in creatable or f.type in _PRIMS for f in t.record.fields)
    )

    def usable(name: str) -> bool:
        return all(i.type in creatable or i.type in _PRIMS or i.type in records for i in manifest.entry_points[name].inputs)

    names = sorted(manifest.entry_points) if entries is None else list(entries)
    missing = [n for n in names if n not in manifest.entry_points]
    if missing:
        raise ValueError(f"entries {missing} are not entry points of {lib!r}")
    names = [n for n in names if usable(n)]
    plain = [n for n in names if not any(i.unique for i in manifest.entry_points[n].inputs)]
    consuming = [n for n in names if any(i.unique for i in manifest.entry_points[n].inputs)]
    pooled = set(creatable) | set(records)
    user_ranges = dict(ranges or {})

    def entry_strategy(name: str) -> st.SearchStrategy[Any]:
        spec = entry_spec(lib.entry_points[name])
        r: dict[str, tuple[float | None, float | None]] = {}
        for p in spec.params:
            if isinstance(p.spec, PrimSpec) and p.spec.bound is None and p.spec.dtype.kind in "iu":
                r[p.name] = (-2, 2 * max_size)
        for key, value in user_ranges.items():
            entry_name, _, param = key.partition(".")
            if entry_name == name:
                r[param] = value
        return inputs(spec, max_size=max_size, min_value=-1e6, max_value=1e6, ranges=r)

    strategies = {n: entry_strategy(n) for n in plain + consuming}
    stored = [r for r in records if {"store", "restore"} <= set(manifest.types[r].ops)]
    array_infos = {n: manifest.types[n] for n in creatable}

    class HandleMachine(RuleBasedStateMachine):
        library = lib
        sequences = 0  # counters for runners (pybridge.testing.lifecycle_run)
        steps = 0
        interrupted_calls = 0  # interrupted_call rules run, and those whose KeyboardInterrupt landed
        interrupts_landed = 0

        def __init__(self) -> None:
            super().__init__()
            gc.collect()  # handles of earlier examples must not be freed by the GC mid-run
            self.tracked: list[Tracked] = []
            self.alarm: Alarm | None = None  # made by the first interrupted call (main thread)
            self.base = lib.live_values()
            type(self).sequences += 1
            # Last: teardown, which Hypothesis runs for every machine it made, stops it.
            self.hang_limit = watchdog.start(hang_limit_s) if hang_limit_s is not None else None

        # -- helpers
        def live(self, type_name: str | None = None) -> list[Tracked]:
            return [t for t in self.tracked if t.state == "live" and (type_name is None or t.type_name == type_name)]

        def dead(self) -> list[Tracked]:
            return [t for t in self.tracked if t.state != "live"]

        def new_handle(self, type_name: str, arr: np.ndarray, origin: str) -> Tracked:
            h = lib.types[type_name].new(arr)
            t = Tracked(h, type_name, arr.copy(), origin=origin)
            self.tracked.append(t)
            return t

        def check_read(self, t: Tracked) -> None:
            if t.type_name in records:
                got = to_numpy(t.handle)
                assert set(got) == set(t.model), f"{t!r}: fields {sorted(got)}"
                for k, v in t.model.items():
                    g = np.asarray(got[k])
                    assert _same(g, np.asarray(v)), f"{t!r}.{k}: read back {g!r}, model {v!r}"
                return
            got = t.handle.numpy()
            assert _same(got, t.model), f"{t!r}: read back {got!r}, model {t.model!r}"
            assert tuple(t.handle.shape) == t.model.shape

        def record_model(self, h: Any) -> dict[str, Any]:
            return {k: np.asarray(v).copy() for k, v in dict(to_numpy(h)).items()}

        def take_results(self, name: str, result: Any) -> None:
            outs = manifest.entry_points[name].outputs
            values = result if len(outs) > 1 else (result,)
            for o, v in zip(outs, values):
                if o.type in creatable and hasattr(v, "numpy"):
                    self.tracked.append(Tracked(v, o.type, v.numpy(), origin=f"result of {name}"))
                elif o.type in records:
                    self.tracked.append(Tracked(v, o.type, self.record_model(v), origin=f"result of {name}"))
                else:
                    to_numpy(v)  # reading must work; then let it go
                    free = getattr(v, "free", None)
                    if callable(free):
                        free()

        def call(self, data: st.DataObject, name: str, chosen: Tracked | None, in_thread: bool = False,
                 interrupt_after_us: int = 0) -> bool:
            """One call of ``name`` checked against the model; True when an interrupt landed in it."""
            ep = lib.entry_points[name]
            info = manifest.entry_points[name]
            case = data.draw(strategies[name], label=f"{name} inputs")
            reserved = {id(chosen)} if chosen is not None else set()
            args: list[Any] = []
            passed: list[tuple[Tracked, bool]] = []
            first_unique = True
            for inp, v in zip(info.inputs, case.args):
                if inp.type not in pooled:
                    args.append(v)
                    continue
                if inp.unique and chosen is not None and first_unique:
                    t = chosen
                    first_unique = False
                elif inp.type in records:
                    fits = [x for x in self.live(inp.type) if id(x) not in reserved]
                    if fits and data.draw(st.booleans(), label="reuse a record"):
                        t = data.draw(st.sampled_from(fits), label="record")
                    else:  # a dict of fields: pybridge builds the record (a temporary)
                        args.append(v)
                        continue
                else:
                    fits = [x for x in self.live(inp.type) if x.model.shape == v.shape and id(x) not in reserved]
                    if fits and data.draw(st.booleans(), label="reuse a handle"):
                        t = data.draw(st.sampled_from(fits), label="handle")
                    else:
                        t = self.new_handle(inp.type, v, origin=f"argument of {name}")
                    if inp.unique:
                        reserved.add(id(t))
                args.append(t.handle)
                passed.append((t, inp.unique))
            outcome: dict[str, Any] = {}

            def run() -> None:
                try:
                    try:
                        # Armed inside the try whose finally disarms: an interrupt that lands
                        # before the call (in arm's own return) still leaves the alarm disarmed.
                        if interrupt_after_us:
                            self.alarm.arm(interrupt_after_us)
                        outcome["result"] = ep(*args)
                    finally:
                        if interrupt_after_us:
                            self.alarm.disarm()
                except KeyboardInterrupt:
                    outcome["result"] = None
                    outcome["interrupted"] = True
                except FutharkError:
                    outcome["result"] = None  # e.g. sizes that do not match: an allowed outcome
                except BaseException as e:  # re-raised in the machine's thread
                    outcome["error"] = e

            if in_thread:
                worker = threading.Thread(target=run, name=f"lifecycle call {name}", daemon=True)
                worker.start()
                worker.join(THREAD_CALL_TIMEOUT_S)  # a lock left held would make this wait forever
                assert not worker.is_alive(), f"{name} from a second thread did not finish in {THREAD_CALL_TIMEOUT_S} s"
            else:
                run()
            if "error" in outcome:
                raise outcome["error"]
            result = outcome["result"]
            for t, unique in passed:
                if unique and interrupt_after_us and t.handle.valid:
                    # Interrupted before the C call ran: untouched. Freed then, so that the model
                    # (and the rules Hypothesis may draw next) is the same whatever the timing.
                    assert outcome.get("interrupted"), f"{name} returned but left {t!r} valid"
                    self.check_read(t)
                    t.handle.free()
                    t.state = "freed"
                    continue
                if unique:
                    t.state = "consumed"  # also after a failed call: the C API says so
                    assert not t.handle.valid, f"{t!r} is still valid after {name} consumed it"
            for t, unique in passed:
                if unique and t.state == "live":
                    self.check_read(t)
            for t, unique in passed:
                if not unique:
                    assert t.handle.valid, f"{t!r} became invalid after a call to {name}"
                    self.check_read(t)
            if result is not None and interrupt_after_us:
                to_numpy(result)  # readable; then dropped, as after an interrupt (timing-independent model)
            elif result is not None:
                self.take_results(name, result)
            return bool(outcome.get("interrupted"))

        # -- rules
        @rule(data=st.data(), type_name=st.sampled_from(creatable))
        def create(self, data: st.DataObject, type_name: str) -> None:
            info = array_infos[type_name]
            dtype = np.dtype(_PRIMS[info.elemtype].dtype)
            shape = data.draw(array_shapes(min_dims=info.rank, max_dims=info.rank, min_side=0, max_side=max_size))
            arr = data.draw(arrays(dtype, shape, elements=elements(dtype)), label="array")
            self.new_handle(type_name, arr, origin="new")

        @precondition(lambda self: bool(self.live()))
        @rule(data=st.data())
        def read(self, data: st.DataObject) -> None:
            t = data.draw(st.sampled_from(self.live()), label="handle")
            self.check_read(t)
            if isinstance(t.model, np.ndarray) and t.model.size:
                idx = tuple(data.draw(st.integers(0, n - 1), label="index") for n in t.model.shape)
                got = t.handle[idx]
                want = t.model[idx]
                assert got == want or (np.isnan(want) and np.isnan(got)), f"{t!r}[{idx}] = {got}, model {want}"

        @precondition(lambda self: bool(self.tracked))
        @rule(data=st.data())
        def free(self, data: st.DataObject) -> None:
            t = data.draw(st.sampled_from(self.tracked), label="handle")
            t.handle.free()  # on a freed or consumed handle: a no-op
            if t.state == "live":
                t.state = "freed"
            assert not t.handle.valid

        @precondition(lambda self: bool(self.dead()))
        @rule(data=st.data())
        def misuse(self, data: st.DataObject) -> None:
            t = data.draw(st.sampled_from(self.dead()), label="invalid handle")
            try:
                to_numpy(t.handle) if t.type_name in records else t.handle.numpy()
            except InvalidHandleError:
                pass
            else:
                raise AssertionError(f"reading {t!r} did not raise InvalidHandleError")
            users = [n for n in plain + consuming if any(i.type == t.type_name for i in manifest.entry_points[n].inputs)]
            if users:
                name = data.draw(st.sampled_from(users), label="entry point")
                info = manifest.entry_points[name]
                case = data.draw(strategies[name], label=f"{name} inputs")
                args = [t.handle if i.type == t.type_name else v for i, v in zip(info.inputs, case.args)]
                try:
                    lib.entry_points[name](*args)
                except InvalidHandleError:
                    pass
                else:
                    raise AssertionError(f"{name} accepted {t!r}")

        if plain:

            @rule(data=st.data(), name=st.sampled_from(plain))
            def call_entry(self, data: st.DataObject, name: str) -> None:
                self.call(data, name, None)

            @rule(data=st.data(), name=st.sampled_from(plain))
            def call_from_thread(self, data: st.DataObject, name: str) -> None:
                self.call(data, name, None, in_thread=True)

        if records:

            @precondition(lambda self: any(self.live(r) for r in records))
            @rule(data=st.data())
            def project(self, data: st.DataObject) -> None:
                t = data.draw(st.sampled_from([x for r in records for x in self.live(r)]), label="record")
                info = manifest.types[t.type_name]
                f = data.draw(st.sampled_from(info.record.fields), label="field")
                v = t.handle.field(f.name)
                if f.type in creatable:  # shares the record's memory: joins the pool
                    self.tracked.append(Tracked(v, f.type, v.numpy(), origin=f"{t.type_name}.{f.name}"))
                else:
                    assert _same(np.asarray(v), np.asarray(t.model[f.name]))

        if consuming:

            @precondition(
                lambda self: any(
                    self.live(i.type) for n in consuming for i in manifest.entry_points[n].inputs if i.unique
                )
            )
            @rule(data=st.data())
            def consume(self, data: st.DataObject) -> None:
                options = [
                    (n, t)
                    for n in consuming
                    for i in manifest.entry_points[n].inputs
                    if i.unique
                    for t in self.live(i.type)
                ]
                name, t = data.draw(st.sampled_from(options), label="entry point and handle")
                self.call(data, name, t)
                assert t.state == "consumed"

        if interrupts and (plain or consuming):

            @precondition(lambda self: threading.current_thread() is threading.main_thread())
            @rule(data=st.data(), name=st.sampled_from(plain + consuming), after_us=st.integers(1, 400))
            def interrupted_call(self, data: st.DataObject, name: str, after_us: int) -> None:
                """Ctrl-C at a drawn moment of a call: its results are owned or freed (the
                live-values invariant), a consumed argument is invalid or untouched, and no lock is
                left held (the context's, CPython's import lock). An interrupt that Python delivers
                in a finaliser or a gc callback (Hypothesis has one) is dropped by Python there; the
                call then runs on as if it came after it, which the model allows for anyway."""
                if self.alarm is None:
                    self.alarm = Alarm()
                previous = signal.signal(signal.SIGALRM, self.alarm.handler)
                try:
                    landed = self.call(data, name, None, interrupt_after_us=after_us)
                finally:
                    signal.signal(signal.SIGALRM, previous)
                type(self).interrupted_calls += 1
                type(self).interrupts_landed += int(landed)
                assert not _imp.lock_held(), f"CPython's import lock is held after an interrupted call of {name}"
                assert _lock_is_free(lib.context.lock, THREAD_CALL_TIMEOUT_S), \
                    f"the context lock is held after an interrupted call of {name}"

        if stored:

            @precondition(lambda self: any(self.live(r) for r in stored))
            @rule(data=st.data())
            def restore(self, data: st.DataObject) -> None:
                """store() then restore() of a live record: the same value, a new handle; the bytes
                tampered (the last byte cut, or one added) raise ValueFormatError."""
                from ..futhark import ValueFormatError

                t = data.draw(st.sampled_from([x for r in stored for x in self.live(r)]), label="record")
                kind = lib.types[t.type_name]
                b = t.handle.store()
                r = kind.restore(b)
                self.tracked.append(Tracked(r, t.type_name, self.record_model(r), origin=f"restore of {t!r}"))
                self.check_read(self.tracked[-1])
                bad = b[:-1] if data.draw(st.booleans(), label="cut the last byte") else b + b"\0"
                try:
                    kind.restore(bytes(bad))
                except ValueFormatError:
                    pass
                else:
                    raise AssertionError(f"{t.type_name}.restore accepted tampered bytes")

        @invariant()
        def live_handles_keep_their_values(self) -> None:
            type(self).steps += 1
            for t in self.live():
                self.check_read(t)

        @invariant()
        def live_values_match(self) -> None:
            count = lib.live_values()
            want = self.base + len(self.live())
            assert count == want, f"library has {count} live values, model says {want} ({self.tracked})"

        def teardown(self) -> None:
            try:
                for t in self.tracked:
                    t.handle.free()
                    t.state = "freed" if t.state == "live" else t.state
                count = lib.live_values()
                assert count == self.base, f"{count - self.base} value(s) leaked after freeing everything"
            finally:
                if self.hang_limit is not None:
                    watchdog.stop(self.hang_limit)

    HandleMachine.__name__ = HandleMachine.__qualname__ = f"HandleMachine_{getattr(lib.path, 'stem', 'lib')}"
    HandleMachine.TestCase.settings = settings or Settings(
        max_examples=50, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
    return HandleMachine


__all__ = ["Tracked", "handle_lifecycle_machine"]
