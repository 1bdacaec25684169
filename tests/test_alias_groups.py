"""Alias groups count their live members (issue 23) instead of holding them in a WeakSet: for any
sequence of joins, frees, consumes and merges, ``shared_with_live`` must say what the plain rule
says -- another handle related to this one (transitively) is still live -- and the call plan's
inline join must leave the same groups as ``join``. A join that a Ctrl-C cuts short (its call's
results are then dropped) may leave groups merged too much, never too little."""

from __future__ import annotations

import dis
import gc
import sys
import threading
import weakref
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pybridge.futhark import aliases
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


class _Cut:
    """A KeyboardInterrupt at the ``at``-th place where Python checks for signals while ``join``
    (or a function of aliases.py it calls) runs: a function's start, the end of a call, a loop's
    back edge (RELIABILITY.md, "Ctrl-C"). Raising there is what a Ctrl-C arriving just before does.
    Found opcode by opcode (sys.settrace): CALL (and CALL_FUNCTION_EX, CALL_KW) checks once the
    callee returns, JUMP_BACKWARD after its jump."""

    CODES = {aliases.join.__code__, aliases._merge.__code__}
    CALLS = {"CALL", "CALL_FUNCTION_EX", "CALL_KW"}

    def __init__(self, at: int) -> None:
        self.at, self.points = at, 0

    def __enter__(self) -> "_Cut":
        self._previous = sys.gettrace()  # Hypothesis may trace for its own ends: put back after
        sys.settrace(self._outer)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.settrace(self._previous)

    def _point(self) -> None:
        self.points += 1
        if self.points == self.at:
            raise KeyboardInterrupt

    def _outer(self, frame, event, arg):
        if event != "call" or frame.f_code not in self.CODES:
            return None
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        self._point()  # the function's start
        after_call = False

        def step(frame, event, arg):
            nonlocal after_call
            if event == "opcode":
                op = dis.opname[frame.f_code.co_code[frame.f_lasti]]
                if after_call or op == "JUMP_BACKWARD":
                    self._point()
                after_call = op in self.CALLS
            return step

        return step


def _structure_sound(hs: list) -> None:
    """Two levels at most, no node its own parent, no node listed twice."""
    for h in hs:
        g = h._aliases
        if g is None:
            continue
        assert g.parent is not g
        root = g.parent or g
        assert root.parent is None or root.parent.parent is None, "more than two levels"
        assert len({id(n) for n in root.nodes}) == len(root.nodes), "a node listed twice"
        assert all(n is not root for n in root.nodes)


# Few handles, mostly joins: groups with nodes, merged again by the joins that are cut.
few = st.integers(0, 9)
pair_join = st.tuples(st.just("join"), st.lists(few, min_size=2, max_size=3))
cut_ops = st.builds(lambda n, rest: [("new", False)] * n + rest, st.integers(4, 10),
                    st.lists(st.one_of(pair_join, pair_join, st.tuples(st.just("free"), few)), max_size=12))
cuts = st.lists(st.tuples(st.lists(few, min_size=2, max_size=4), st.integers(0, 2), st.integers(1, 40)), max_size=6)


@settings(max_examples=300, deadline=None)
@given(ops=cut_ops, cuts=cuts)
def test_an_interrupted_join_leaves_groups_merged_too_much_never_too_little(ops, cuts) -> None:
    """Groups built by drawn joins and frees, then joins cut short by a KeyboardInterrupt at a drawn
    statement (the results of their calls dropped, as the plans drop them), each followed by more
    joins: ``shared_with_live`` must say True wherever the rule does (a consume otherwise overwrites
    memory a live handle shares: the lifecycle machine once read a live result of ``set0`` as 6,
    not 10, after a merge of two groups was cut between moving their nodes and listing them), and
    the next joins finish such merges. Each count may be too high after a cut, never too low."""
    ctx = _Ctx()
    hs: list = []
    live: dict[int, object] = {}
    model = _Model()

    def pick(i: int):
        return hs[i % len(hs)]

    def check() -> None:
        _structure_sound(hs)
        for h in hs:
            if model.shared(h, live):
                assert shared_with_live(h), h
        for h in hs:  # no node counts fewer live members than point to it
            g = h._aliases
            if g is not None:
                assert g.live >= sum(1 for m in hs if m._aliases is g and m._status is None)
        for h in live.values():  # a handle's count covers every live handle related to it: whatever
            g = h._aliases       # is freed next, shared_with_live stays True while one of them lives
            if g is None:
                continue
            root = g.parent or g
            domain = {id(root), *(id(n) for n in root.nodes)}
            counted = {id(m) for m in live.values() if m._aliases is not None and id(m._aliases) in domain}
            assert model.related.get(id(h), set()) & live.keys() <= counted, h

    def run(op) -> None:
        if op[0] == "new":
            h = _handle(ctx)
            hs.append(h)
            live[id(h)] = h
        elif op[0] in ("join", "plan") and hs:
            group = [h for h in (pick(i) for i in op[1]) if h._status is None]
            join(group)
            model.join(group)
        elif op[0] == "free" and hs:
            h = pick(op[1])
            h._release("freed")
            live.pop(id(h), None)

    for op in ops:
        run(op)
    for picks, n_results, at in cuts:
        if not hs:
            break
        args = [h for h in (pick(i) for i in picks) if h._status is None]
        results = [_handle(ctx) for _ in range(n_results)]
        hs += results
        with _Cut(at) as cut:
            try:
                join([*args, *results])
                done = True
            except KeyboardInterrupt:
                done = False
        if done:  # the cut came after join's last line: the call's results stay
            assert cut.points < at
            live.update((id(h), h) for h in results)
            model.join([*args, *results])
        else:
            for h in results:  # dropped with the interrupted call
                h._release("freed")
        check()
        for op in ops[:10]:  # more joins and frees on the same handles
            run(op)
            check()


def _two_roots_with_nodes(ctx: _Ctx) -> list:
    """a..h: a group {a, b} with node {c, d}, and {e, f} with node {g, h} (pairs joined, then
    two pairs joined through one handle each)."""
    hs = [_handle(ctx) for _ in range(8)]
    a, b, c, d, e, f, g, h = hs
    for pair in ((a, b), (c, d), (a, c), (e, f), (g, h), (e, g)):
        join(list(pair))
    return hs


@pytest.mark.parametrize("kept", [(0, 1), (2, 3), (4, 5), (6, 7)], ids=["ab", "cd", "ef", "gh"])
def test_a_merge_cut_at_any_check_point_leaves_every_pair_shared(kept: tuple[int, int]) -> None:
    """The merge of those two groups (``join([a, e, result])``), cut at each check point in turn,
    the result dropped, then more joins on each side: with every handle freed but one pair that
    shares memory, each of the two must still be shared (before aliases._merge, {e, f} and {g, h}
    were not when the cut came at the back edge of the loop that moved the nodes: consuming h
    changed g); and a join that relates the groups again leaves one root with every node once."""
    for at in range(1, 100):
        ctx = _Ctx()
        hs = _two_roots_with_nodes(ctx)
        out = _handle(ctx)
        with _Cut(at) as cut:
            try:
                join([hs[0], hs[4], out])
                done = True
            except KeyboardInterrupt:
                done = False
        if done:
            assert cut.points < at
            break
        out._release("freed")
        _structure_sound(hs)
        again = [_handle(ctx) for _ in range(2)]
        join([hs[0], again[0]])  # more joins on each side (the plan's common case goes through here too)
        join([hs[7], again[1]])
        for x in again:
            x._release("freed")
        for i, x in enumerate(hs):
            if i not in kept:
                x._release("freed")
        x, y = (hs[i] for i in kept)
        assert shared_with_live(x) and shared_with_live(y), at
        join([x, y, *hs])  # the two groups related again: the merge is finished
        roots = {id(z._aliases.parent or z._aliases) for z in hs}
        assert len(roots) == 1, at
        _structure_sound(hs)
        root = x._aliases.parent or x._aliases
        assert all(n.parent is root for n in root.nodes), at
    else:
        raise AssertionError("join never ran to its end")


@pytest.fixture(scope="module")
def aliasing_libraries():
    """tests/programs/aliasing.fut on c with the compiled plans (where built) and the Python plans."""
    pf = pytest.importorskip("pybridge.futhark")
    from pybridge.futhark import callpath
    from pybridge.futhark.build import futhark_compiler

    if futhark_compiler() is None:
        pytest.skip("no Futhark compiler")
    src = Path(__file__).resolve().parents[1] / "tests" / "programs" / "aliasing.fut"
    libs = {}
    if callpath.compiled is not None:
        libs["compiled plans"] = pf.load(src, backend="c")
    with callpath.python_plans():
        libs["Python plans"] = pf.load(src, backend="c")
    yield libs
    for lib in libs.values():
        lib.close()


def test_a_real_call_cut_in_its_join_never_lets_a_consume_change_a_live_handle(aliasing_libraries) -> None:
    """End to end, through each call plan: ``add(a, e)`` (aliasing.fut; its result may alias both)
    relates two groups that each have a node, and a Ctrl-C lands at each check point of the join in
    turn. Then every handle but ``g`` and ``h = ident(g)`` (which share memory) is freed and
    ``set0(h, 10)`` consumes h: g must read as before. Before aliases._merge, a cut at the back edge
    of the loop that moved the nodes made set0 write into g (the lifecycle machine's "6, not 10")."""
    for name, lib in aliasing_libraries.items():
        i32 = lib.types["[]i32"]

        def new(v: int):
            return i32.new(np.full(2, v, np.int32))

        for at in range(1, 100):
            a, c, e, g = new(1), new(2), new(3), new(4)
            b, d, f, h = lib.ident(a), lib.ident(c), lib.ident(e), lib.ident(g)
            lib.add(a, c).free()  # {a, b, c} with the node {d}
            lib.add(e, g).free()  # {e, f, g} with the node {h}
            with _Cut(at) as cut:
                try:
                    lib.add(a, e).free()
                    done = True
                except KeyboardInterrupt:
                    done = False
            for x in (a, b, c, d, e, f):
                x.free()
            before = g.numpy()
            lib.set0(h, 10).free()
            assert np.array_equal(g.numpy(), before), (name, at, g.numpy(), before)
            g.free()
            assert lib.live_values() == 0, (name, at)
            if done:
                assert cut.points < at and at > 5, (name, at)  # the sweep went through the join
                break
        else:
            raise AssertionError(f"{name}: join never ran to its end")


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
