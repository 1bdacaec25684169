"""Whether the components of stored bytes agree with each other, before Futhark reads them.

``binformat.read_values`` checks each component alone; Futhark's ``restore`` then trusts that they
fit together. Two disagreements crash or lie (issue 22): an array of records or sums whose
components differ in their outer lengths (``[]point`` with x of 3·10^8 elements and y of 1: indexing
reads past y), and a sum tag outside its variants (in an array of sums or a nested sum: entry points
compute on it silently). This module checks both:

- ``outer_dims``: every component of an array of rank r (of records, tuples or sums) has rank >= r
  and the same first r dimensions: Futhark's arrays are regular, so values it produced always do;
- ``Structure``: where the value's component layout can be derived from the manifest (records:
  fields in manifest order; sums: an i8 tag, then payload slots, scalar ones shared between
  variants by core type (unsigned stored as signed), arrays one slot each, as Futhark lays them out), and agrees with the components present, every tag in reach of an
  active variant is checked to be in range, and the outer lengths of arrays nested in the value.

Only what an active variant reaches is checked: the inactive payload of a sum holds whatever bytes
Futhark left there (a bool byte other than 0 or 1 came back from a cuda store once), and values
Futhark produced must always restore.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .binformat import ELEMENT_TYPES, Component
from .errors import ValueFormatError
from .types import PRIMITIVES, split_array_type

_TYPE_FIELD = {p.decode().strip(): p.decode() for p in ELEMENT_TYPES}  # "i8" -> "  i8"
# Futhark's core types have no signedness: a sum stores an unsigned payload as the signed type of
# its width (u16 as i16), and variants with u16 and i16 payloads share one slot.
_CORE = {"  u8": "  i8", " u16": " i16", " u32": " i32", " u64": " i64"}


def core_type(field: str) -> str:
    """The 4-byte type field as Futhark's core type (unsigned as signed)."""
    return _CORE.get(field, field)


class _Unknown(Exception):
    """The layout of some part cannot be derived from the manifest (a fully opaque type)."""


@dataclass(frozen=True)
class Leaf:
    index: int


@dataclass(frozen=True)
class Record:
    fields: tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class Sum:
    name: str
    tag: int
    variants: tuple[tuple[str, tuple[Any, ...]], ...]


@dataclass(frozen=True)
class Array:
    name: str
    rank: int
    elem: Any
    indices: tuple[int, ...]  # every component below


def _remap(node: Any, m: Sequence[int]) -> Any:
    if isinstance(node, Leaf):
        return Leaf(m[node.index])
    if isinstance(node, Record):
        return Record(tuple((n, _remap(f, m)) for n, f in node.fields))
    if isinstance(node, Sum):
        return Sum(node.name, m[node.tag], tuple((v, tuple(_remap(p, m) for p in ps)) for v, ps in node.variants))
    return Array(node.name, node.rank, _remap(node.elem, m), tuple(m[i] for i in node.indices))


def flatten(type_name: str, opaque_info: Callable[[str], Any], path: str = "", depth: int = 0) -> tuple[list[tuple[int, str, str]], Any]:
    """(components as (rank, 4-byte type field, path in the value), tree) of ``type_name``'s
    stored form; Unknown where a part has no structure in the manifest."""
    if depth > 32:
        raise _Unknown(type_name)
    here = path or "the value"
    if type_name in PRIMITIVES:
        return [(0, _TYPE_FIELD[type_name], here)], Leaf(0)
    rank, elem = split_array_type(type_name)
    if rank and elem in PRIMITIVES:
        return [(rank, _TYPE_FIELD[elem], here)], Leaf(0)
    info = opaque_info(type_name)
    if info is None:
        raise _Unknown(type_name)
    if info.record is not None:
        comps: list[tuple[int, str, str]] = []
        fields = []
        for f in info.record.fields:
            c, t = flatten(f.type, opaque_info, f"{path}.{f.name}" if path else f"field {f.name}", depth + 1)
            fields.append((f.name, _remap(t, range(len(comps), len(comps) + len(c)))))
            comps += c
        return comps, Record(tuple(fields))
    if info.sum is not None:
        comps = [(0, _TYPE_FIELD["i8"], f"{path} tag" if path else "the variant tag")]
        variants = []
        for v in info.sum.variants:
            used: set[int] = set()
            payload = []
            for j, p in enumerate(info_payload(v)):
                c, t = flatten(p, opaque_info, f"{path}#{v.name}.{j}", depth + 1)
                c = [(rk, core_type(ty), where) for rk, ty, where in c]  # as the sum stores them
                slots = []
                for rk, ty, where in c:
                    # Scalars: the first slot of this type the variant does not use yet. Arrays get
                    # a slot of their own (Futhark shares no array slots between variants).
                    k = None if rk else next((i for i in range(1, len(comps)) if comps[i][:2] == (rk, ty) and i not in used), None)
                    if k is None:
                        k = len(comps)
                        comps.append((rk, ty, where))
                    used.add(k)
                    slots.append(k)
                payload.append(_remap(t, slots))
            variants.append((v.name, tuple(payload)))
        return comps, Sum(type_name, 0, tuple(variants))
    arr = info.record_array or info.opaque_array
    if arr is not None:
        c, t = flatten(arr.elemtype, opaque_info, f"{path}[]" if path else "[]", depth + 1)
        return [(r + arr.rank, ty, w) for r, ty, w in c], Array(type_name, arr.rank, t, tuple(range(len(c))))
    raise _Unknown(type_name)


def info_payload(v: Any) -> tuple[str, ...]:
    return tuple(v.payload)


def outer_dims(comps: Sequence[Component], rank: int, what: str, names: Callable[[int], str]) -> None:
    """Every component has rank >= ``rank`` and the same first ``rank`` dimensions."""
    if not comps:
        return
    first = comps[0].shape[:rank]
    for i, c in enumerate(comps):
        if c.rank < rank:
            raise ValueFormatError(f"{what}: {names(i)} has rank {c.rank}, an array of rank {rank} needs at least {rank}")
        if c.shape[:rank] != first:
            raise ValueFormatError(
                f"{what}: the parts of an array disagree in length: {names(0)} has outer shape {first}, "
                f"{names(i)} has {c.shape[:rank]}"
            )


class Checker:
    """Checks one restore's components against a derived tree."""

    def __init__(self, comps: Sequence[Component], data: bytes, what: str, names: Callable[[int], str]):
        self.comps, self.data, self.what, self.names = comps, data, what, names

    def _values(self, i: int) -> np.ndarray:
        c = self.comps[i]
        n = int(np.prod(c.shape, dtype=np.int64)) if c.rank else 1
        return np.frombuffer(self.data, np.int8, count=n, offset=c.data_offset).reshape(c.shape)

    def check(self, node: Any, lead: int, mask: np.ndarray | None) -> None:
        """``lead``: the array dimensions enclosing ``node``; ``mask`` (shape of those dimensions,
        None: all) says where the enclosing variants are active."""
        if isinstance(node, Leaf):
            c = self.comps[node.index]
            if c.type == "bool":  # only where a variant reaches it: inactive payloads hold anything
                v = self._values(node.index)
                if mask is not None:
                    v = v[np.broadcast_to(mask.reshape(mask.shape + (1,) * (v.ndim - mask.ndim)), v.shape)]
                if v.size and (int(v.min()) < 0 or int(v.max()) > 1):
                    raise ValueFormatError(f"{self.what}: {self.names(node.index)}: a bool element is neither 0 nor 1")
            return
        if isinstance(node, Record):
            for _, f in node.fields:
                self.check(f, lead, mask)
            return
        if isinstance(node, Array):
            outer_dims([self.comps[i] for i in node.indices], lead + node.rank, self.what,
                       lambda k: self.names(node.indices[k]))
            if mask is not None:
                dims = self.comps[node.indices[0]].shape[lead:lead + node.rank] if node.indices else ()
                mask = np.broadcast_to(mask.reshape(mask.shape + (1,) * node.rank), mask.shape + tuple(dims))
            self.check(node.elem, lead + node.rank, mask)
            return
        tags = self._values(node.tag)
        active = tags if mask is None else tags[mask]
        if active.size and (int(active.min()) < 0 or int(active.max()) >= len(node.variants)):
            bad = int(active[(active < 0) | (active >= len(node.variants))][0])
            raise ValueFormatError(
                f"{self.what}: {self.names(node.tag)} holds the variant tag {bad}, but {node.name} has "
                f"{len(node.variants)} variants"
            )
        for k, (_, payload) in enumerate(node.variants):
            m = tags == k if mask is None else (mask & (tags == k))
            if not m.any():
                continue
            for p in payload:
                self.check(p, lead, m)


Unknown = _Unknown  # internal: flatten raises it, OpaqueKind.structure catches it

__all__ = ["Checker", "Unknown", "core_type", "flatten", "outer_dims"]
