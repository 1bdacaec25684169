"""The manifest that ``futhark <backend> --library`` writes, as frozen dataclasses.

Follows docs/c-api.rst ("Manifest") and the manifest JSON schema. Tolerant by design: the free-text
``version`` is kept as is, unknown keys are ignored, and both entry-point forms are read — ``outputs``
(a list, Futhark 0.25) and ``output`` (one object, Futhark 0.26.1 and newer).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .types import PRIMITIVES, split_array_type


class ManifestError(ValueError):
    """The manifest is not of the documented form."""


@dataclass(frozen=True)
class Input:
    name: str
    type: str
    unique: bool


@dataclass(frozen=True)
class Output:
    type: str
    unique: bool


@dataclass(frozen=True)
class EntryPoint:
    name: str
    cfun: str
    inputs: tuple[Input, ...]
    outputs: tuple[Output, ...]
    tuning_params: tuple[str, ...] = ()
    attributes: tuple[str, ...] = ()
    doc: str | None = None
    single_output: bool = False  # True for the 0.26.1+ `output` form


@dataclass(frozen=True)
class ArrayType:
    name: str
    ctype: str
    elemtype: str
    rank: int
    ops: Mapping[str, str]

    kind = "array"


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    project: str


@dataclass(frozen=True)
class RecordInfo:
    fields: tuple[Field, ...]
    new: str | None


@dataclass(frozen=True)
class Variant:
    name: str
    payload: tuple[str, ...]
    construct: str
    destruct: str


@dataclass(frozen=True)
class SumInfo:
    variant: str
    variants: tuple[Variant, ...]


@dataclass(frozen=True)
class RecordArrayInfo:
    elemtype: str
    rank: int
    fields: tuple[Field, ...]
    index: str | None
    shape: str | None
    zip: str | None


@dataclass(frozen=True)
class OpaqueArrayInfo:
    elemtype: str
    rank: int
    index: str | None
    shape: str | None
    set: str | None
    new: str | None


@dataclass(frozen=True)
class OpaqueType:
    name: str
    ctype: str
    ops: Mapping[str, str]
    record: RecordInfo | None = None
    sum: SumInfo | None = None
    record_array: RecordArrayInfo | None = None
    opaque_array: OpaqueArrayInfo | None = None

    kind = "opaque"


TypeInfo = ArrayType | OpaqueType


@dataclass(frozen=True)
class Manifest:
    backend: str
    version: str
    entry_points: Mapping[str, EntryPoint]
    types: Mapping[str, TypeInfo]
    source: Path | None = field(default=None, compare=False)

    def type_of(self, name: str) -> TypeInfo | None:
        """The manifest's description of a non-primitive type, or None for a primitive."""
        if name in PRIMITIVES:
            return None
        try:
            return self.types[name]
        except KeyError:
            raise ManifestError(f"type {name!r} is used but not described in the manifest") from None

    def c_functions(self) -> list[str]:
        """Every C function the manifest names (entry points and type operations)."""
        names: list[str] = [e.cfun for e in self.entry_points.values()]
        for t in self.types.values():
            names.extend(t.ops.values())
            if isinstance(t, OpaqueType):
                if t.record:
                    names.extend(f.project for f in t.record.fields)
                    if t.record.new:
                        names.append(t.record.new)
                if t.sum:
                    names.append(t.sum.variant)
                    for v in t.sum.variants:
                        names.extend([v.construct, v.destruct])
                if t.record_array:
                    ra = t.record_array
                    names.extend(f.project for f in ra.fields)
                    names.extend(n for n in (ra.index, ra.shape, ra.zip) if n)
                if t.opaque_array:
                    oa = t.opaque_array
                    names.extend(n for n in (oa.index, oa.shape, oa.set, oa.new) if n)
        return list(dict.fromkeys(names))


# ---------------------------------------------------------------- parsing


def _req(obj: Mapping[str, Any], key: str, where: str) -> Any:
    try:
        return obj[key]
    except (KeyError, TypeError):
        raise ManifestError(f"{where}: missing required key {key!r}") from None


def _fields(raw: list[Any], where: str) -> tuple[Field, ...]:
    return tuple(
        Field(str(_req(f, "name", where)), str(_req(f, "type", where)), str(_req(f, "project", where)))
        for f in raw
    )


def _parse_type(name: str, raw: Mapping[str, Any]) -> TypeInfo:
    where = f"type {name!r}"
    kind = _req(raw, "kind", where)
    ops = dict(raw.get("ops", {}))
    ctype = str(_req(raw, "ctype", where))
    if kind == "array":
        elem = str(_req(raw, "elemtype", where))
        rank = int(_req(raw, "rank", where))
        if elem not in PRIMITIVES:
            raise ManifestError(f"{where}: array element type {elem!r} is not primitive")
        return ArrayType(name, ctype, elem, rank, ops)
    if kind != "opaque":
        raise ManifestError(f"{where}: unknown kind {kind!r}")
    record = sum_ = rarr = oarr = None
    if "record" in raw:
        r = raw["record"]
        record = RecordInfo(_fields(_req(r, "fields", where), where), r.get("new"))
    if "sum" in raw:
        s = raw["sum"]
        sum_ = SumInfo(
            str(_req(s, "variant", where)),
            tuple(
                Variant(
                    str(_req(v, "name", where)),
                    tuple(str(p) for p in v.get("payload", [])),
                    str(_req(v, "construct", where)),
                    str(_req(v, "destruct", where)),
                )
                for v in _req(s, "variants", where)
            ),
        )
    if "record_array" in raw:
        ra = raw["record_array"]
        rarr = RecordArrayInfo(
            str(_req(ra, "elemtype", where)),
            int(_req(ra, "rank", where)),
            _fields(_req(ra, "fields", where), where),
            ra.get("index"),
            ra.get("shape"),
            ra.get("zip"),
        )
    if "opaque_array" in raw:
        oa = raw["opaque_array"]
        oarr = OpaqueArrayInfo(
            str(_req(oa, "elemtype", where)),
            int(_req(oa, "rank", where)),
            oa.get("index"),
            oa.get("shape"),
            oa.get("set"),
            oa.get("new"),
        )
    return OpaqueType(name, ctype, ops, record, sum_, rarr, oarr)


def _parse_entry(name: str, raw: Mapping[str, Any]) -> EntryPoint:
    where = f"entry point {name!r}"
    inputs = tuple(
        Input(str(_req(i, "name", where)), str(_req(i, "type", where)), bool(i.get("unique", False)))
        for i in _req(raw, "inputs", where)
    )
    single = False
    if "outputs" in raw:
        outs = raw["outputs"]
    elif "output" in raw:  # Futhark >= 0.26.1: exactly one result (a tuple is one opaque)
        outs = [raw["output"]]
        single = True
    else:
        raise ManifestError(f"{where}: neither 'outputs' nor 'output' present")
    outputs = tuple(Output(str(_req(o, "type", where)), bool(o.get("unique", False))) for o in outs)
    return EntryPoint(
        name=name,
        cfun=str(_req(raw, "cfun", where)),
        inputs=inputs,
        outputs=outputs,
        tuning_params=tuple(raw.get("tuning_params", ())),
        attributes=tuple(str(a) for a in raw.get("attributes", ())),
        doc=raw.get("doc"),
        single_output=single,
    )


def parse_manifest(data: Mapping[str, Any] | str, source: Path | None = None) -> Manifest:
    """Build a Manifest from parsed JSON (a mapping) or JSON text."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as e:
            raise ManifestError(f"manifest is not valid JSON: {e}") from None
    if not isinstance(data, Mapping):
        raise ManifestError("manifest must be a JSON object")
    types = {str(n): _parse_type(str(n), t) for n, t in _req(data, "types", "manifest").items()}
    entries = {str(n): _parse_entry(str(n), e) for n, e in _req(data, "entry_points", "manifest").items()}
    m = Manifest(
        backend=str(_req(data, "backend", "manifest")),
        version=str(data.get("version", "")),
        entry_points=entries,
        types=types,
        source=source,
    )
    _check_references(m)
    return m


def _check_references(m: Manifest) -> None:
    """Every type an entry point or field mentions is primitive or described."""
    mentioned: list[tuple[str, str]] = []
    for e in m.entry_points.values():
        mentioned += [(f"entry point {e.name!r}", p.type) for p in e.inputs]
        mentioned += [(f"entry point {e.name!r}", o.type) for o in e.outputs]
    for t in m.types.values():
        if isinstance(t, OpaqueType):
            for f in (t.record.fields if t.record else ()) + (t.record_array.fields if t.record_array else ()):
                mentioned.append((f"type {t.name!r}", f.type))
            for v in t.sum.variants if t.sum else ():
                mentioned += [(f"type {t.name!r}", p) for p in v.payload]
    for where, name in mentioned:
        if name not in PRIMITIVES and name not in m.types:
            raise ManifestError(f"{where} uses type {name!r}, which the manifest does not describe")


def load_manifest(path: str | os.PathLike[str]) -> Manifest:
    p = Path(path)
    return parse_manifest(p.read_text(), source=p)


__all__ = [
    "ArrayType",
    "EntryPoint",
    "Field",
    "Input",
    "Manifest",
    "ManifestError",
    "OpaqueArrayInfo",
    "OpaqueType",
    "Output",
    "RecordArrayInfo",
    "RecordInfo",
    "SumInfo",
    "TypeInfo",
    "Variant",
    "load_manifest",
    "parse_manifest",
    "split_array_type",
]
