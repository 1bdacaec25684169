"""The compiled path's value registry (_callpath.c, "registry"), against the Python one (issue 34).

A value registered in C (a plan's result, a handle made from Python) sits on its state's list
instead of in ``state.values``; reading ``state.values`` moves the listed values into the
dictionary, and close() frees them in C. Everything Python code can see must stay as it was:
each library here is loaded twice, with the compiled plans and inside ``callpath.python_plans()``
(whose results the Python plan registers in the dictionary), and both are driven alike:

- hypothesis draws sequences of calls with several results, consuming calls, frees, dropped
  handles, registry reads (the move into the dictionary) at any point and pointer reads, and
  compares the registries (which values, under which key) after every step and after close();
- a handle whose release fails midway (its alias group raising) dies registered: its entry
  stays under the dead handle's id, and the next handle at that address frees it (free_orphan);
- a call whose bookkeeping fails after the C call (the alias link raising) frees every result;
- a result whose registration fails midway through a call's results (a malformed entry under its
  address, compiled path only: the Python plan registers before the call) frees that result and
  every other one of the call, and consumes the consumed argument;
- threads calling, freeing, dropping and reading the registry at once; close() then frees all.
"""

from __future__ import annotations

import gc
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import pybridge.futhark as pf
from pybridge.futhark import InvalidHandleError, callpath
from pybridge.futhark.build import futhark_compiler

ROOT = Path(__file__).resolve().parents[1]
ALIASING = ROOT / "tests" / "programs" / "aliasing.fut"
pytestmark = [
    pytest.mark.futhark,
    pytest.mark.skipif(callpath.compiled is None, reason=f"the compiled call path is not in use: {callpath.DESCRIPTION}"),
    pytest.mark.skipif(futhark_compiler() is None, reason="no Futhark compiler to build tests/programs/aliasing.fut"),
]


@pytest.fixture(scope="module")
def both() -> Any:
    fast = pf.load(ALIASING, backend="c")
    with callpath.python_plans():
        slow = pf.load(ALIASING, backend="c")
    assert isinstance(type(fast.entry_points["twice"]).__call__, callpath.compiled.Plan)
    assert not isinstance(type(slow.entry_points["twice"]).__call__, callpath.compiled.Plan)
    yield fast, slow
    fast.close()
    slow.close()


def address(lib: pf.Library, where: Any) -> int:
    """A registry entry's pointer (an address where the compiled path registered it) as an int."""
    return where if isinstance(where, int) else int(lib.ffi.cast("uintptr_t", where))


def registry(lib: pf.Library, handles: list[Any]) -> list[tuple[int, bool, int | None]]:
    """Per handle: (position, registered, the address registered). Reading ``values`` moves the
    listed ones into it (the compiled path), after which none is listed."""
    values = lib.context._state.values
    assert lib.context._state._listed == 0
    out = []
    for i, h in enumerate(handles):
        entry = values.get(id(h))
        if entry is not None:
            assert entry[0] is h._free_fn, "registered with another free function"
        out.append((i, entry is not None, None if entry is None else address(lib, entry[1])))
    return out


def own_addresses(lib: pf.Library, handles: list[Any]) -> list[int | None]:
    return [address(lib, h._ptr) if h._status is None else None for h in handles]


# ---------------------------------------------------------------- drawn sequences

OPS = ("new", "twice", "copyof", "set0", "free", "drop", "read", "ptr", "add")


def run_ops(lib: pf.Library, ops: list[tuple[str, int, int]]) -> list[Any]:
    """Run the drawn operations; the trace: outcomes and the registry after every step."""
    kind = lib.types["[]i32"]
    hs: list[Any] = []
    trace: list[Any] = []
    for op, i, v in ops:
        pick = hs[i % len(hs)] if hs else None
        try:
            if op == "new" or pick is None:
                hs.append(kind.new(np.arange(v % 5 + 1, dtype=np.int32)))
            elif op == "twice":
                hs.extend(lib.twice(pick))
            elif op == "copyof":
                hs.append(lib.copyof(pick))
            elif op == "set0":
                hs.append(lib.set0(pick, v))
            elif op == "add":
                hs.append(lib.add(pick, hs[v % len(hs)]))
            elif op == "free":
                pick.free()
            elif op == "drop":
                hs.remove(pick)
                del pick
                gc.collect()
            elif op == "ptr":
                pick._ptr  # makes the pointer object of a result the compiled path holds by address
            trace.append(("ok", op))
        except Exception as e:  # noqa: BLE001 - the outcome is compared
            trace.append(("raised", op, type(e).__name__, str(e)))
        pick = None
        if op == "read" or v % 3 == 0:
            reg = registry(lib, hs)
            assert [a for _, ok, a in reg if ok] == [a for a in own_addresses(lib, hs) if a is not None]
            trace.append(("registry", [ok for _, ok, _ in reg], lib.live_values()))
        trace.append(("valid", [h.valid for h in hs], [h.numpy().tolist() if h.valid else None for h in hs]))
    for h in hs:
        h.free()
    trace.append(("end", lib.live_values(), lib.context._state._listed))
    return trace


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 50), st.integers(-3, 40)), min_size=1, max_size=20))
def test_drawn_sequences_see_one_registry_on_both_paths(both, ops) -> None:
    fast, slow = both
    before = fast.live_values(), slow.live_values()
    a, b = run_ops(fast, ops), run_ops(slow, ops)
    assert a == b
    assert (fast.live_values(), slow.live_values()) == before


def test_close_frees_listed_and_moved_values_and_invalidates_every_handle() -> None:
    for plans in ("compiled", "python"):
        if plans == "python":
            with callpath.python_plans():
                lib = pf.load(ALIASING, backend="c")
        else:
            lib = pf.load(ALIASING, backend="c")
        state = lib.context._state
        x = lib.types["[]i32"].new(np.arange(4, dtype=np.int32))
        moved = [h for _ in range(5) for h in lib.twice(x)]
        assert len(state.values) == 11 and state._listed == 0  # read: every listed one moved into it
        listed = [lib.copyof(x) for _ in range(7)] + [lib.types["[]i32"].new(np.ones(2, np.int32)) for _ in range(3)]
        # compiled plans: 10 listed (results and new()'s); Python plans: new()'s 3 (its results are in `values`)
        assert state._listed == (10 if plans == "compiled" else 3), plans
        lib.close()
        assert state._listed == 0 and len(state.values) == 0, plans
        assert not any(h.valid for h in [x, *moved, *listed]), plans
        with pytest.raises(InvalidHandleError, match="closed"):
            listed[0].numpy()
        for h in [x, *moved, *listed]:
            h.free()  # no-op after close
        lib.close()  # again: nothing left


def test_entries_keep_the_form_registration_gave_them(both) -> None:
    """A plan's result is registered (free function, address) in C, a handle made from Python
    (free function, pointer object), as before; changing a registered handle's pointer, free
    function or context keeps the entry it had."""
    fast, slow = both
    for lib in (fast, slow):
        x = lib.types["[]i32"].new(np.arange(3, dtype=np.int32))
        r = lib.copyof(x)
        free = r._free_fn
        other = lambda ctx, p: free(ctx, p)  # noqa: E731 - a different function object
        r._free_fn = other
        values = lib.context._state.values
        assert values[id(r)][0] is free and values[id(x)][0] is x._free_fn
        assert not isinstance(values[id(x)][1], int)  # the pointer object Python registration stores
        if lib is fast:
            assert isinstance(values[id(r)][1], int)
        r._free_fn = free
        r.free()
        x.free()
        assert id(r) not in lib.context._state.values and id(x) not in lib.context._state.values


# ---------------------------------------------------------------- failures midway


class _BrokenGroup:
    """An alias group one of whose attributes cannot be read: ``live`` (a release stops after the
    status is set) or ``parent`` (the alias link of a call's results fails)."""

    def __init__(self, broken: str) -> None:
        self.broken = broken

    def _read(self, name: str, value: Any) -> Any:
        if name == self.broken:
            raise RuntimeError(f"this group's {name} cannot be read")
        return value

    @property
    def live(self) -> int:
        return self._read("live", 1)  # type: ignore[no-any-return]

    @property
    def parent(self) -> Any:
        return self._read("parent", None)


def test_a_handle_dying_registered_leaves_its_entry_for_the_next_handle_at_its_address(both) -> None:
    fast, slow = both
    outcomes = []
    for lib in (fast, slow):
        x = lib.types["[]i32"].new(np.arange(3, dtype=np.int32))
        h = lib.copyof(x)
        h._aliases = _BrokenGroup("live")
        with pytest.raises(RuntimeError, match="cannot be read") as e:
            h.free()
        key = id(h)
        status = h._status
        del h
        gc.collect()  # its finaliser does nothing more (released); it dies registered
        values = lib.context._state.values
        assert key in values and lib.live_values() == 2  # x and the dead handle's value
        taken, others = None, []
        for _ in range(3000):  # a new handle at that address frees the value first (free_orphan)
            r = lib.copyof(x)
            if id(r) == key:
                taken = r
                break
            others.append(r)  # kept: the next one takes another address
        for r in others:
            r.free()
        del others, r
        assert taken is not None, "no new handle took the dead one's address"
        entry = lib.context._state.values[key]
        assert address(lib, entry[1]) == address(lib, taken._ptr)
        assert lib.live_values() == 2  # x and the new handle: the orphan's entry is gone
        outcomes.append((str(e.value), status))
        taken.free()
        x.free()
    assert outcomes[0] == outcomes[1]


def test_a_call_whose_link_fails_after_the_c_call_frees_every_result(both) -> None:
    fast, slow = both
    seen = []
    for lib in (fast, slow):
        x = lib.types["[]i32"].new(np.arange(3, dtype=np.int32))
        x._aliases = _BrokenGroup("parent")
        gc.collect()
        before = lib.live_values()
        with pytest.raises(RuntimeError) as e:
            lib.twice(x)
        message = str(e.value)
        del e  # its traceback holds the Python plan's frame, whose locals hold the results
        gc.collect()
        seen.append((message, lib.live_values() - before, lib.context._state._listed))
        x._aliases = None
        assert x.valid
        x.free()
    assert seen[0] == seen[1] and seen[0][1] == 0


MALFORMED = "not an entry"


def live(lib: pf.Library) -> int:
    """Registered values, the malformed entries a test put in left out."""
    return sum(e != MALFORMED for e in lib.context._state.values.values())


def test_a_result_whose_registration_fails_midway_frees_the_call_s_results_and_consumes() -> None:
    """Compiled path only (the Python plan registers before the C call): a malformed entry under
    the address a result's handle takes makes its registration raise; that value and the call's
    other results are freed, the consumed argument is consumed, the error names the registry."""
    lib = pf.load(ALIASING, backend="c")
    kind = lib.types["[]i32"]
    try:
        x = kind.new(np.arange(3, dtype=np.int32))
        hits = []
        for _ in range(12):
            c = lib.copyof(x)
            y = kind.new(np.arange(3, dtype=np.int32))  # in no alias group: the plan consumes it
            spare = [kind.new(np.arange(3, dtype=np.int32)) for _ in range(64)]  # addresses results take
            keys = [id(h) for h in spare]
            for h in spare:
                h.free()
            del spare, h
            values = lib.context._state.values
            for k in keys:
                values[k] = MALFORMED
            base = live(lib)  # x, c, y
            out: tuple[Any, ...] = ()
            try:
                out = lib.twice(c)
            except TypeError as e:
                assert str(e) == "a registry entry is (free function, pointer)"
                hits.append("twice")
            r = None
            try:
                r = lib.set0(y, 5)
            except TypeError as e:
                assert str(e) == "a registry entry is (free function, pointer)"
                hits.append("set0")
            gc.collect()
            assert y._status == "consumed by entry point 'set0' (parameter 'xs')"
            assert live(lib) == base - 1 + len(out) + (r is not None)  # y gone, the failed calls' results too
            assert lib.context._state._listed == 0
            for k in keys:
                values.pop(k, None)
            for h in (c, *out, *([r] if r is not None else [])):
                assert h.valid
                h.free()
            del c, out, r
        assert "twice" in hits and "set0" in hits, hits
        x.free()
        assert live(lib) == 0
    finally:
        lib.close()


# ---------------------------------------------------------------- threads


def test_threads_calling_freeing_dropping_and_reading_the_registry() -> None:
    lib = pf.load(ALIASING, backend="c")
    kind = lib.types["[]i32"]
    errors: list[BaseException] = []
    stop = threading.Event()

    def caller(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(400):
                x = kind.new(np.arange(int(rng.integers(1, 6)), dtype=np.int32))
                a, b = lib.twice(x)
                c = lib.copyof(a)
                v = int(rng.integers(0, 9))
                d = lib.set0(c, v)  # consumes c (a copy of it: it shares its group with a live one)
                assert not c.valid and d.numpy()[0] == v
                if rng.integers(0, 2):
                    a.free()
                del a  # the other: its finaliser
                assert np.array_equal(b.numpy(), x.numpy())
                del x, b, c, d
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    def reader() -> None:
        try:
            while not stop.is_set():
                values = lib.context._state.values  # moves what is listed, concurrently with calls
                assert all(isinstance(e, tuple) and len(e) == 2 for e in list(values.values()))
                lib.live_values()
                time.sleep(0.0002)  # the GIL back to the callers between reads
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(3)]
    r = threading.Thread(target=reader)
    r.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    stop.set()
    r.join(60)
    assert not errors, errors[:3]
    gc.collect()
    assert lib.live_values() == 0 and lib.context._state._listed == 0
    lib.close()
