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
"""

from __future__ import annotations

import weakref
from typing import Any, Iterable


class AliasGroup:
    """Handles that may share memory. Members are held weakly: a group never keeps a value alive."""

    __slots__ = ("members",)

    def __init__(self) -> None:
        self.members: "weakref.WeakSet[Any]" = weakref.WeakSet()


def join(handles: Iterable[Any]) -> None:
    """Record that ``handles`` (pybridge values; None entries ignored) may share memory. Callers
    hold the handles' context lock, so two joins never merge groups at once.

    Runs after every call with non-unique handle results, so it does only what changes: a handle
    already in the target group is a member of it (``h._aliases is g`` implies ``h in g.members``:
    only this function sets either, and a live member never leaves a WeakSet), so it is not
    added again (each WeakSet.add makes a weak reference)."""
    hs = [h for h in handles if h is not None]
    if len(hs) < 2:
        return
    target = None
    others: list[AliasGroup] = []
    for h in hs:
        g = h._aliases
        if g is None or g is target:
            continue
        if target is None:
            target = g
        elif g not in others:
            others.append(g)
    if target is None:
        target = AliasGroup()
    elif others:
        groups = [target, *others]
        target = max(groups, key=lambda g: len(g.members))
        for g in groups:
            if g is not target:
                for m in _members(g):
                    m._aliases = target
                    target.members.add(m)
    add = target.members.add
    for h in hs:
        if h._aliases is not target:
            h._aliases = target
            add(h)


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
    return any(m is not handle and m.valid for m in _members(g))


def _members(g: AliasGroup) -> list[Any]:
    """The live members of ``g`` now. ``list(WeakSet)`` iterates in Python and raises "Set changed
    size during iteration" when another thread joins or drops a member meanwhile (the fast call
    path asks ``shared_with_live`` outside the context lock); the underlying set of weak references
    is copied in one C call instead, which no other thread can interleave with."""
    return [m for r in g.members.data.copy() if (m := r()) is not None]


__all__ = ["AliasGroup", "join", "shared_with_live"]
