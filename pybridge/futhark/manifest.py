"""The manifest that ``futhark <backend> --library`` writes, as frozen dataclasses.

Follows docs/c-api.rst ("Manifest") and the manifest JSON schema. Tolerant by design: the free-text
``version`` is kept as is, unknown keys are ignored, and both entry-point forms are read — ``outputs``
(a list, Futhark 0.25) and ``output`` (one object, Futhark 0.26.1 and newer).

Vocabulary: the manifest's records are ``*Info`` (``EntryInfo``, ``ArrayInfo``, ``OpaqueInfo``, ...);
the objects a loaded library hands out keep the public names (``EntryPoint``, ``ArrayKind``,
``OpaqueKind``, ``ArrayHandle``, ``OpaqueHandle``) and each holds its record as ``.info``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping  # not typing's: its isinstance checks cost a third of a parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .types import PRIMITIVES, split_array_type
from ..errors import PybridgeError


class ManifestError(PybridgeError, ValueError):
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
class EntryInfo:
    """One entry point as the manifest describes it (the callable is ``entry.EntryPoint``)."""

    name: str
    cfun: str
    inputs: tuple[Input, ...]
    outputs: tuple[Output, ...]
    tuning_params: tuple[str, ...] = ()
    attributes: tuple[str, ...] = ()
    doc: str | None = None
    single_output: bool = False  # True for the 0.26.1+ `output` form


@dataclass(frozen=True)
class ArrayInfo:
    """An array type's record (the object ``lib.types[name]`` returns is ``kinds.ArrayKind``)."""

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
class OpaqueInfo:
    """An opaque type's record (the object ``lib.types[name]`` returns is ``kinds.OpaqueKind``)."""

    name: str
    ctype: str
    ops: Mapping[str, str]
    record: RecordInfo | None = None
    sum: SumInfo | None = None
    record_array: RecordArrayInfo | None = None
    opaque_array: OpaqueArrayInfo | None = None

    kind = "opaque"


TypeInfo = ArrayInfo | OpaqueInfo


@dataclass(frozen=True)
class Manifest:
    backend: str
    version: str
    entry_points: Mapping[str, EntryInfo]
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
            if isinstance(t, OpaqueInfo):
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
    if not isinstance(obj, Mapping):
        raise ManifestError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    try:
        return obj[key]
    except KeyError:
        raise ManifestError(f"{where}: missing required key {key!r}") from None


_C_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_ARRAY_OP = re.compile(r"_(i8|i16|i32|i64|u8|u16|u32|u64|f16|f32|f64|bool)_(\d+)d\Z")
_C_TYPE = re.compile(r"(const )?(struct )?[A-Za-z_][A-Za-z0-9_]*( ?\*)*\Z")


def _str(obj: Mapping[str, Any], key: str, where: str, pattern: "re.Pattern[str] | None" = None) -> str:
    v = _req(obj, key, where)
    if not isinstance(v, str):
        raise ManifestError(f"{where}: {key!r} must be a string, got {type(v).__name__} {v!r}")
    if pattern is not None and not pattern.match(v):
        raise ManifestError(f"{where}: {key!r} is not a C name: {v!r}")
    return v


def _opt_cname(obj: Mapping[str, Any], key: str, where: str) -> str | None:
    return None if obj.get(key) is None else _str(obj, key, where, _C_NAME)


def _bool(obj: Mapping[str, Any], key: str, where: str) -> bool:
    v = obj.get(key, False)
    if not isinstance(v, bool):  # "false" (a string) is not false
        raise ManifestError(f"{where}: {key!r} must be true or false, got {v!r}")
    return v


def _int(obj: Mapping[str, Any], key: str, where: str, lo: int, hi: int) -> int:
    v = _req(obj, key, where)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ManifestError(f"{where}: {key!r} must be an integer in [{lo}, {hi}], got {v!r}")
    return v


def _list(obj: Mapping[str, Any], key: str, where: str) -> list[Any]:
    v = _req(obj, key, where)
    if not isinstance(v, list):
        raise ManifestError(f"{where}: {key!r} must be a list, got {type(v).__name__}")
    return v


def _payload(variant: Any, where: str) -> tuple[str, ...]:
    """A sum variant's payload types; Futhark writes ``[]`` for none, and omits nothing else."""
    if not isinstance(variant, Mapping) or "payload" not in variant:
        return ()  # a variant that is no object is refused by its other keys
    return tuple(_str({"payload": p}, "payload", where) for p in _list(variant, "payload", where))


def _ops(raw: Mapping[str, Any], where: str) -> dict[str, str]:
    ops = raw.get("ops", {})
    if not isinstance(ops, Mapping):
        raise ManifestError(f"{where}: 'ops' must be an object")
    return {str(k): _str(ops, k, f"{where} ops", _C_NAME) for k in ops}


def _fields(raw: list[Any], where: str) -> tuple[Field, ...]:
    fields = tuple(
        Field(_str(f, "name", where), _str(f, "type", where), _str(f, "project", where, _C_NAME))
        for f in raw
    )
    _unique([f.name for f in fields], "field", where)
    return fields


def _unique(names: list[str], what: str, where: str) -> None:
    """Names are looked up: a repeated one would read another part (a sum's destruct on the wrong
    variant aborts the process)."""
    seen = {n for n in names if names.count(n) > 1}
    if seen:
        raise ManifestError(f"{where}: {what} names repeat: {sorted(seen)}")


def _parse_type(name: str, raw: Mapping[str, Any]) -> TypeInfo:
    where = f"type {name!r}"
    kind = _req(raw, "kind", where)
    ops = _ops(raw, where)
    ctype = _str(raw, "ctype", where, _C_TYPE)
    if kind == "array":
        elem = _str(raw, "elemtype", where)
        rank = _int(raw, "rank", where, 1, 64)
        if elem not in PRIMITIVES:
            raise ManifestError(f"{where}: array element type {elem!r} is not primitive")
        if name != "[]" * rank + elem:  # a wrong rank would make pybridge misread shapes
            raise ManifestError(f"{where}: rank {rank} and element type {elem!r} do not spell the name {name!r}")
        for op, fn in ops.items():  # Futhark names them futhark_<op>_<elem>_<rank>d
            m = _ARRAY_OP.search(fn)
            if m and (m.group(1), int(m.group(2))) != (elem, rank):
                raise ManifestError(f"{where}: ops {op!r} = {fn!r} is for []{m.group(1)} of rank {m.group(2)}, not {name!r}")
        missing = {"new", "free", "shape", "values"} - set(ops)
        if missing:
            raise ManifestError(f"{where}: ops lack {sorted(missing)}")
        return ArrayInfo(name, ctype, elem, rank, ops)
    if kind != "opaque":
        raise ManifestError(f"{where}: unknown kind {kind!r}")
    record = sum_ = rarr = oarr = None
    missing = {"free", "store", "restore"} - set(ops)  # Futhark gives every opaque type all three
    if missing:
        raise ManifestError(f"{where}: ops lack {sorted(missing)}")
    if "record" in raw:
        r = raw["record"]
        record = RecordInfo(_fields(_list(r, "fields", where), where), _opt_cname(r, "new", where))
    if "sum" in raw:
        s = raw["sum"]
        sum_ = SumInfo(
            _str(s, "variant", where, _C_NAME),
            tuple(
                Variant(
                    _str(v, "name", where),
                    _payload(v, where),
                    _str(v, "construct", where, _C_NAME),
                    _str(v, "destruct", where, _C_NAME),
                )
                for v in _list(s, "variants", where)
            ),
        )
        if not sum_.variants or len(sum_.variants) > 128:  # the stored tag is an i8
            raise ManifestError(f"{where}: a sum type needs 1 to 128 variants, got {len(sum_.variants)}")
        _unique([v.name for v in sum_.variants], "variant", where)
    if "record_array" in raw:
        ra = raw["record_array"]
        rarr = RecordArrayInfo(
            _str(ra, "elemtype", where),
            _int(ra, "rank", where, 1, 64),
            _fields(_list(ra, "fields", where), where),
            _opt_cname(ra, "index", where),
            _opt_cname(ra, "shape", where),
            _opt_cname(ra, "zip", where),
        )
    if "opaque_array" in raw:
        oa = raw["opaque_array"]
        oarr = OpaqueArrayInfo(
            _str(oa, "elemtype", where),
            _int(oa, "rank", where, 1, 64),
            _opt_cname(oa, "index", where),
            _opt_cname(oa, "shape", where),
            _opt_cname(oa, "set", where),
            _opt_cname(oa, "new", where),
        )
    return OpaqueInfo(name, ctype, ops, record, sum_, rarr, oarr)


def _parse_entry(name: str, raw: Mapping[str, Any]) -> EntryInfo:
    where = f"entry point {name!r}"
    inputs = tuple(Input(_str(i, "name", where), _str(i, "type", where), _bool(i, "unique", where)) for i in _list(raw, "inputs", where))
    _unique([i.name for i in inputs if i.name != "_"], "parameter", where)  # Futhark repeats only the wildcard
    single = False
    if "outputs" in raw:
        outs = _list(raw, "outputs", where)
    elif "output" in raw:  # Futhark >= 0.26.1: exactly one result (a tuple is one opaque)
        outs = [raw["output"]]
        single = True
    else:
        raise ManifestError(f"{where}: neither 'outputs' nor 'output' present")
    outputs = tuple(Output(_str(o, "type", where), _bool(o, "unique", where)) for o in outs)
    tuning = raw.get("tuning_params", [])
    attrs = raw.get("attributes", [])
    doc = raw.get("doc")
    if not isinstance(tuning, list) or not all(isinstance(t, str) for t in tuning):
        raise ManifestError(f"{where}: 'tuning_params' must be a list of strings")
    if not isinstance(attrs, list) or (doc is not None and not isinstance(doc, str)):
        raise ManifestError(f"{where}: 'attributes' must be a list and 'doc' a string")
    return EntryInfo(
        name=name,
        cfun=_str(raw, "cfun", where, _C_NAME),
        inputs=inputs,
        outputs=outputs,
        tuning_params=tuple(tuning),
        attributes=tuple(str(a) for a in attrs),
        doc=doc,
        single_output=single,
    )


def parse_manifest(data: Mapping[str, Any] | str, source: Path | None = None) -> Manifest:
    """Build a Manifest from parsed JSON (a mapping) or JSON text."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as e:
            raise ManifestError(f"manifest is not valid JSON: {e}") from None
        except RecursionError:
            raise ManifestError("manifest is nested too deeply to be one Futhark wrote") from None
    try:
        return _parse(data, source)
    except RecursionError:  # a deeply nested value quoted in a message
        raise ManifestError("manifest is nested too deeply to be one Futhark wrote") from None


def _parse(data: Any, source: Path | None) -> Manifest:
    if not isinstance(data, Mapping):
        raise ManifestError("manifest must be a JSON object")
    raw_types, raw_entries = _req(data, "types", "manifest"), _req(data, "entry_points", "manifest")
    if not isinstance(raw_types, Mapping) or not isinstance(raw_entries, Mapping):
        raise ManifestError("manifest: 'types' and 'entry_points' must be JSON objects")
    types = {str(n): _parse_type(str(n), t) for n, t in raw_types.items()}
    entries = {str(n): _parse_entry(str(n), e) for n, e in raw_entries.items()}
    m = Manifest(
        backend=_str(data, "backend", "manifest"),
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
        if isinstance(t, OpaqueInfo):
            for f in (t.record.fields if t.record else ()) + (t.record_array.fields if t.record_array else ()):
                mentioned.append((f"type {t.name!r}", f.type))
            for v in t.sum.variants if t.sum else ():
                mentioned += [(f"type {t.name!r}", p) for p in v.payload]
    for where, name in mentioned:
        if name not in PRIMITIVES and name not in m.types:
            raise ManifestError(f"{where} uses type {name!r}, which the manifest does not describe")


def load_manifest(path: str | os.PathLike[str]) -> Manifest:
    """Parse the manifest file; every defect is one ManifestError that names the file."""
    p = Path(path)
    try:
        return parse_manifest(p.read_text(), source=p)
    except UnicodeDecodeError as e:
        raise ManifestError(f"{p}: not UTF-8 text ({e})") from None
    except ManifestError as e:
        raise ManifestError(f"{p}: {e}") from None


__all__ = [
    "ArrayInfo",
    "EntryInfo",
    "Field",
    "Input",
    "Manifest",
    "ManifestError",
    "OpaqueArrayInfo",
    "OpaqueInfo",
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
