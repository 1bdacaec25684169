"""Alias groups count their live members (issue 23) instead of holding them in a WeakSet: for any
sequence of joins, frees, consumes and merges, ``shared_with_live`` must say what the plain rule
says -- another handle related to this one (transitively) is still live -- and the call plan's
inline join must leave the same groups as ``join``."""

from __future__ import annotations

import gc
import threading
import weakref
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pybridge.futhark.aliases import AliasGroup, join, shared_with_live
from pybridge.futhark.handles import ArrayHandle, OpaqueHandle


class _Ctx:
    """What Value._release and shared_with_live use of a Context."""

    def __init__(self) -> None:
        self._state = SimpleNamespace(open=True, lock=threading.RLock(), values={}, ctx=None)

    @property
    def closed(self) -> bool:
        return not self._state.open


def _handle(ctx: _Ctx, opaque: bool = False) -> ArrayHandle | OpaqueHandle:
    h = object.__new__(OpaqueHandle if opaque else ArrayHandle)
    h._ctx, h._ptr, h._status, h._keep, h._aliases = ctx, object(), None, None, None
    h._free_fn = lambda ctx, ptr: 0
    if opaque:
        h.otype = None
    ctx._state.values[id(h)] = (h._free_fn, h._ptr)
    return h


class _Model:
    """The rule, by explicit sets: handles related by any join, transitively."""

    def __init__(self) -> None:
        self.related: dict[int, set[int]] = {}

    def join(self, hs: list) -> None:
        if len(hs) < 2:
            return
        merged: set[int] = set()
        for h in hs:
            merged |= self.related.get(id(h), {id(h)})
        for k in merged:
            self.related[k] = merged

    def shared(self, h, live: dict[int, object]) -> bool:
        if id(h) not in self.related:
            return False
        if hasattr(h, "otype"):
            return True
        return any(k != id(h) and k in live for k in self.related[id(h)])


ops = st.lists(
    st.one_of(
        st.tuples(st.just("new"), st.booleans()),
        st.tuples(st.just("join"), st.lists(st.integers(0, 30), min_size=1, max_size=5)),
        st.tuples(st.just("free"), st.integers(0, 30)),
        st.tuples(st.just("plan"), st.lists(st.integers(0, 30), min_size=1, max_size=4), st.integers(1, 3)),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(ops=ops)
def test_shared_with_live_follows_the_rule(ops) -> None:
    ctx = _Ctx()
    hs: list = []
    live: dict[int, object] = {}
    model = _Model()

    def pick(i: int):
        return hs[i % len(hs)] if hs else None

    for op in ops:
        if op[0] == "new":
            h = _handle(ctx, opaque=op[1] and len(hs) % 3 == 0)
            hs.append(h)
            live[id(h)] = h
        elif op[0] == "join" and hs:
            group = [pick(i) for i in op[1]]
            group = [h for h in group if h._status is None]  # join is given live handles only
            join(group)
            model.join(group)
        elif op[0] == "free" and hs:
            h = pick(op[1])
            h._release("freed")  # the real one: it takes the handle out of its group's count
            live.pop(id(h), None)
        elif op[0] == "plan" and hs:
            # The call plan's inline join: arguments on one root -> new results join it.
            args = [h for h in (pick(i) for i in op[1]) if h._status is None]
            outs = [_handle(ctx) for _ in range(op[2])]
            hs += outs
            live.update((id(h), h) for h in outs)
            g = args[0]._aliases if args else None
            if g is not None and g.parent is None and all(a._aliases is g for a in args[1:]):
                for o in outs:
                    o._aliases = g
                g.live += len(outs)
            else:
                join([*args, *outs])
            model.join([*args, *outs])
        for h in hs:
            assert shared_with_live(h) == model.shared(h, live), (op, h)
    for h in hs:  # every group's count is exact: the live members it has
        if h._aliases is not None and h._status is None:
            root = h._aliases.parent or h._aliases
            members = [m for m in hs if m._status is None and m._aliases is not None and (m._aliases.parent or m._aliases) is root]
            assert root.live + sum(n.live for n in root.nodes) == len(members)


def test_a_group_keeps_no_handle_alive_and_merges_stay_two_levels_deep() -> None:
    ctx = _Ctx()
    groups = []
    for _ in range(50):  # 50 groups of two, then all merged through one handle each
        a, b = _handle(ctx), _handle(ctx)
        join([a, b])
        groups.append((a, b))
    keep = groups[0][0]
    for a, b in groups[1:]:
        join([keep, a])
        b._release("freed")
    roots = {id(h._aliases.parent or h._aliases) for pair in groups for h in pair if h._status is None}
    assert len(roots) == 1
    root = keep._aliases.parent or keep._aliases
    assert all(n.parent is root and not n.nodes for n in root.nodes)
    assert len(root.nodes) <= 2 * 50 + 8  # nodes of released members are pruned as they come
    ref = weakref.ref(groups[-1][0])
    ctx._state.values.clear()
    del groups, a, b
    gc.collect()
    assert ref() is None  # the group held no reference to its member


def test_closed_context_shares_nothing() -> None:
    ctx = _Ctx()
    a, b = _handle(ctx), _handle(ctx)
    join([a, b])
    assert shared_with_live(a)
    ctx._state.open = False
    assert not shared_with_live(a)


def test_alias_group_has_no_member_set() -> None:
    """The group is counts and links only (what the call plan's inline join relies on)."""
    g = AliasGroup()
    assert (g.live, g.parent, g.nodes) == (0, None, [])
    with pytest.raises(AttributeError):
        g.members  # noqa: B018


@pytest.mark.parametrize("n", [1, 3])
def test_real_calls_consume_a_shared_handle_as_a_copy(n: int) -> None:
    """End to end on a real library: a result that may alias an argument is consumed as a copy, so
    the argument is unchanged; freeing the last related result makes the argument unshared."""
    pf = pytest.importorskip("pybridge.futhark")
    from pybridge.futhark.build import futhark_compiler

    if futhark_compiler() is None:
        pytest.skip("no Futhark compiler")
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "benchmarks" / "programs" / "consume.fut"
    with pf.load(src, backend="c") as lib:
        counts = lib.types["[]i64"].new(np.zeros(4, np.int64))
        xs = lib.types["[]i64"].new(np.arange(n * 4, dtype=np.int64))
        before = xs.numpy()
        out = lib.main(counts, xs)  # consumes counts; out aliases xs (not unique)
        assert not counts.valid
        assert shared_with_live(xs) and shared_with_live(out)
        again = lib.main(out, xs)  # out may share xs's memory: a copy is consumed, xs is unchanged
        assert not out.valid and np.array_equal(xs.numpy(), before)
        assert shared_with_live(xs)  # `again` may share xs's memory
        again.free()
        assert not shared_with_live(xs)
