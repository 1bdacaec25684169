"""Which handles may share memory, so that consuming one never changes another.

Futhark may return an argument itself as a result (it even drops an explicit ``copy`` when it can),
and projections, record construction and tuple results share their components' memory. A
consuming (``*t``) parameter may then overwrite memory another live handle still reads. The
manifest says which results are unique (fresh, aliasing nothing live); everything else is assumed
to alias:

- a non-unique result may alias every non-unique argument of its call and the call's other
  non-unique results;
- a projected field, a sum payload or an element of an array of records aliases its parent;
- a record, tuple, sum or array of records built from handles aliases those handles.

Handles that may alias form one group (a union of sets, merged as calls relate them). Before a
handle goes to a consuming parameter, ``values.Codec`` asks ``shared_with_live``; if another live
handle of its group remains (for an opaque value: whenever it has a group, since its own fields may
share memory), the value is copied first and the copy is consumed (see
``values.copy_value`` for how, and RELIABILITY.md for the cost).

A group counts its live members instead of holding them (issue 23: a WeakSet add per result, and a
callback when the result died, were most of what a call with array results cost). A handle joins
with ``h._aliases = g; g.live += 1``; the one place a handle stops being live (``Value._release``,
which sets its status) takes it back with ``h._aliases.live -= 1``: attribute arithmetic only, so no
signal handler can run in between (RELIABILITY.md, "Ctrl-C"). Should a decrement ever be lost, the
count is too high, which only makes a consume copy when it need not. Merged groups keep their
objects: each becomes a node of the surviving root (``parent``), whose ``nodes`` lists them, so a
group is at most two levels deep and a count is the sum over its root and nodes.
"""

from __future__ import annotations

from collections import deque
from itertools import repeat
from typing import Any, Iterable

_run = deque(maxlen=0).extend  # runs an iterator to its end in C (no check point between its steps)


class AliasGroup:
    """Handles that may share memory, counted, never held (a group keeps no value alive).

    ``live``: members that joined this node and have not been released since; ``parent``: the root
    this node was merged into (None for a root); ``nodes``: a root's merged nodes."""

    __slots__ = ("live", "parent", "nodes", "_pruned_at")

    def __init__(self) -> None:
        self.live = 0
        self.parent: AliasGroup | None = None
        self.nodes: list[AliasGroup] = []
        self._pruned_at = 8

    def live_members(self) -> int:
        """Members of the whole group (this node's root and its nodes) not released yet."""
        r = self.parent or self
        return r.live + sum(n.live for n in r.nodes)


def join(handles: Iterable[Any]) -> None:
    """Record that ``handles`` (pybridge values; None entries ignored) may share memory. Callers
    hold the handles' context lock, so two joins never merge groups at once.

    Every handle given ends up on the group's root (so the call plan's inline test, "all arguments
    on one root", holds for the next call); a live one moves its count along."""
    hs = [h for h in handles if h is not None]
    if len(hs) < 2:
        return
    target = None
    others: list[AliasGroup] = []
    for h in hs:
        g = h._aliases
        if g is None:
            continue
        r = g.parent or g
        if r is target:
            continue
        if target is None:
            target = r
        elif not any(r is o for o in others):
            others.append(r)
    if target is None:
        target = AliasGroup()
    elif others:
        roots = [target, *others]
        target = max(roots, key=lambda r: len(r.nodes))
        nodes = target.nodes
        for r in roots:
            if r is not target:
                _merge(r, target, nodes)
        if len(nodes) > target._pruned_at:  # nodes whose members were all released: dropped
            nodes[:] = [n for n in nodes if n.live]
            target._pruned_at = 2 * len(nodes) + 8
    for h in hs:
        g = h._aliases
        if g is not target:
            if h._status is None:
                if g is not None:
                    g.live -= 1
                target.live += 1
            h._aliases = target


def _merge(r: AliasGroup, target: AliasGroup, nodes: list[AliasGroup]) -> None:
    """Make root ``r`` and its nodes nodes of ``target`` (whose ``nodes`` is ``nodes``), with no
    place between the first change and the last where Python checks for signals (RELIABILITY.md,
    "Ctrl-C"): the new parents are set by ``setattr`` mapped over the nodes and run from C, the one
    call of the merge and its last step. A KeyboardInterrupt then finds the merge not started or
    done. Before, a Python loop set them first: stopped there, the nodes pointed to the target but
    were listed by neither root, so their handles' counts missed the rest of their group and a
    consume overwrote memory a live handle shared (the lifecycle machine read a live result of
    ``set0`` as 6, not 10). An interrupted join's results are dropped; the groups it merged stay
    merged (too much, never too little: a consume copies when it need not)."""
    moved = [*r.nodes, r]
    reparent = map(setattr, moved, repeat("parent"), repeat(target))
    # No check point from here on: a list extended in place, an attribute store, then the C loop.
    nodes += moved
    r.nodes = []
    _run(reparent)


def shared_with_live(handle: Any) -> bool:
    """Whether another live handle may share ``handle``'s memory."""
    g = handle._aliases
    if g is None:
        return False
    # An opaque value (record, tuple, sum, array of records) that was ever related to other handles
    # may hold the same memory twice (mkpair(h, h)): consumed in place, one field's update would
    # change the other even when no other handle is live. Copy it (store/restore) every time.
    if hasattr(handle, "otype"):
        return True
    if handle._ctx.closed:  # every handle of a closed context is invalid
        return False
    return g.live_members() - (handle._status is None) > 0


__all__ = ["AliasGroup", "join", "shared_with_live"]
