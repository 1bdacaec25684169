"""The manifest checked against the header Futhark wrote beside the library.

pybridge declares each C function from the manifest (cdef.py). A manifest edited by hand (a result
``i32`` made ``[]i32``, a parameter ``[][]f32`` made ``[]f32``, a field ``f32`` made ``[]f32``)
then declares a pointer where the library has a value or the wrong struct: ABI mode calls it that
way and the process dies, and in API mode gcc only warns about the mismatched pointer types. The
header (``<prog>.h``) states the true C types, so before binding, every function the manifest
names is compared with the header's declaration (parameter names and ``const`` aside: the header
does not show uniqueness).

What a declaration cannot show is checked from the header too:
- the order of a sum type's variants: the variant function returns an index into them, and a wrong
  order makes pybridge destruct the value as another variant (Futhark's ``assert`` aborts). The
  header declares each variant's functions in index order.
- the fields of a record or an array of records: the header declares one projection per field.
- the rank of an array or an opaque array: its ``index`` function takes one ``int64_t`` per
  dimension, also when the manifest does not name it (``shape`` returns a bare pointer: a wrong
  rank read past it, and looped over garbage sizes).

What the header cannot show: uniqueness, which field a projection reads, and ``f16`` against
``u16`` in a scalar position (Futhark passes an ``f16`` as its bits, declared ``uint16_t``); such
an edit loads, and the value's bits are read as the other type (RELIABILITY.md).

Only the header's ``futhark_*`` function declarations are read (``<ret> name(<params>);``, one
per statement), the form every Futhark 0.25 header has; a header without them (another form)
checks nothing, and says so in the log.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from .manifest import ArrayInfo, Manifest, ManifestError, OpaqueInfo

log = logging.getLogger(__name__)

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_DIRECTIVE = re.compile(r"(?m)^\s*#.*$")
_DECL = re.compile(r"([A-Za-z_][\w \t*]*?)\b(futhark_\w+)\s*\(([^;{}()]*)\)\s*;")
_TOKEN = re.compile(r"[A-Za-z_]\w*|\*")
# Words that end a parameter's type rather than name it (an unnamed parameter: `(int)`).
_TYPE_WORDS = {
    "void", "char", "short", "int", "long", "float", "double", "bool", "unsigned", "signed", "size_t",
    "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t",
    "CUdeviceptr", "cl_mem", "hipDeviceptr_t", "FILE",
}


@dataclass(frozen=True)
class Decl:
    ret: str
    params: tuple[str, ...]
    order: int  # position in the header

    def text(self, name: str) -> str:
        return f"{self.ret} {name}({', '.join(self.params)})"


def _type(text: str, named: bool) -> str:
    """``const struct futhark_f32_1d *in0`` -> ``struct futhark_f32_1d *``."""
    toks = [t for t in _TOKEN.findall(text) if t != "const"]
    if named and len(toks) >= 2 and toks[-1] != "*" and toks[-2] != "struct" and toks[-1] not in _TYPE_WORDS:
        toks = toks[:-1]
    words, stars = [t for t in toks if t != "*"], toks.count("*")
    return " ".join(words) + (" " + "*" * stars if stars else "")


def declarations(text: str) -> dict[str, Decl]:
    """The ``futhark_*`` functions a header (or a cdef) declares."""
    text = _DIRECTIVE.sub("", _COMMENT.sub("", text))
    out: dict[str, Decl] = {}
    for i, m in enumerate(_DECL.finditer(text)):
        ret, name, params = m.group(1), m.group(2), m.group(3)
        ret = ret.split("}")[-1].split("{")[-1]
        plist = [] if params.strip() in ("", "void") else [p for p in params.split(",")]
        out.setdefault(name, Decl(_type(ret, False), tuple(_type(p, True) for p in plist), i))
    return out


def check(manifest: Manifest, cdef: str, header: Path) -> None:
    """Raise ManifestError naming the first function, variant order or rank of ``manifest`` that
    disagrees with ``header``."""
    where = manifest.source or "the manifest"
    try:
        truth = declarations(header.read_text(errors="replace"))
    except OSError as e:
        log.info("%s: header %s unreadable (%s): manifest not checked against it", where, header, e)
        return
    if not truth:
        log.info("%s: header %s declares no futhark_* functions in a form pybridge reads: not checked", where, header)
        return
    ours = declarations(cdef)
    for name in manifest.c_functions():
        mine, real = ours.get(name), truth.get(name)
        if real is None:  # also a name the cdef parse skips (not futhark_*): API mode would call it undeclared
            raise ManifestError(f"{where} does not match {header.name}: {_role(manifest, name)} is {name}, which the header does not declare")
        if mine is None:
            continue
        if (mine.ret, mine.params) != (real.ret, real.params):
            raise ManifestError(
                f"{where} does not match {header.name}: {_role(manifest, name)} disagrees: the manifest makes it "
                f"{mine.text(name)}, the header declares {real.text(name)}"
            )
    indexes = {d.params[2]: (name, d) for name, d in truth.items() if name.startswith("futhark_index_") and len(d.params) >= 3}
    projections: dict[str, list[str]] = {}  # struct -> the projections the header declares on it
    for name, d in truth.items():
        if name.startswith("futhark_project_") and d.params:
            projections.setdefault(d.params[-1], []).append(name)
    for t in manifest.types.values():
        _check_rank(t, indexes, where, header)
        fields = t.record.fields if isinstance(t, OpaqueInfo) and t.record else t.record_array.fields if isinstance(t, OpaqueInfo) and t.record_array else None
        projs = projections.get(_type(t.ctype, False), [])
        if isinstance(t, OpaqueInfo) and projs and fields is None:
            raise ManifestError(
                f"{where} does not match {header.name}: type {t.name!r} has no record or record_array in the manifest, "
                f"but the header declares the projections {sorted(projs)}"
            )
        if fields is not None and projs and sorted(f.project for f in fields) != sorted(projs):
            raise ManifestError(
                f"{where} does not match {header.name}: type {t.name!r} lists fields {[f.name for f in fields]} projected by "
                f"{sorted(f.project for f in fields)}, the header declares the projections {sorted(projs)}"
            )
        if isinstance(t, OpaqueInfo) and t.sum is not None:
            order = [truth[v.construct].order if v.construct in truth else None for v in t.sum.variants]
            known = [o for o in order if o is not None]
            if known != sorted(known):
                listed = [v.name for _, v in sorted((o, v) for o, v in zip(order, t.sum.variants) if o is not None)]
                raise ManifestError(
                    f"{where} does not match {header.name}: type {t.name!r}: sum variants listed as {[v.name for v in t.sum.variants]}, "
                    f"but {header.name} declares them in the order {listed} (the variant index follows it)"
                )


def _check_rank(t: object, indexes: dict[str, tuple[str, Decl]], where: object, header: Path) -> None:
    if isinstance(t, ArrayInfo):
        rank, struct, what = t.rank, t.ctype, "rank"
    elif isinstance(t, OpaqueInfo) and (t.record_array or t.opaque_array):
        arr = t.record_array or t.opaque_array
        rank, struct, what = arr.rank, t.ctype, "rank"  # type: ignore[union-attr]
    else:
        return
    struct = _type(struct, False)
    if struct in indexes:
        name, d = indexes[struct]
        real = sum(1 for p in d.params[3:] if p == "int64_t")
        if real != rank:
            raise ManifestError(
                f"{where} does not match {header.name}: type {t.name!r}: {what} {rank} in the manifest, but the header indexes "  # type: ignore[attr-defined]
                f"{struct} with {real} indices ({d.text(name)})"
            )


def _role(m: Manifest, fn: str) -> str:
    """Which part of the manifest names ``fn``: 'entry point 'f'', 'type 'point' field 'x'' ..."""
    for e in m.entry_points.values():
        if e.cfun == fn:
            return f"entry point {e.name!r} (its inputs {[i.type for i in e.inputs]}, outputs {[o.type for o in e.outputs]})"
    for t in m.types.values():
        for op, name in t.ops.items():
            if name == fn:
                return f"type {t.name!r} ops {op!r}"
        if isinstance(t, OpaqueInfo):
            for f in (t.record.fields if t.record else ()) + (t.record_array.fields if t.record_array else ()):
                if f.project == fn:
                    return f"type {t.name!r} field {f.name!r} (of type {f.type!r})"
            if t.record and t.record.new == fn:
                return f"type {t.name!r} record new (fields {[f.type for f in t.record.fields]})"
            if t.sum:
                if t.sum.variant == fn:
                    return f"type {t.name!r} sum variant"
                for v in t.sum.variants:
                    if fn in (v.construct, v.destruct):
                        return f"type {t.name!r} variant {v.name!r} (payload {list(v.payload)})"
            for arr, kind in ((t.record_array, "record_array"), (t.opaque_array, "opaque_array")):
                if arr is not None:
                    for attr in ("index", "shape", "zip", "set", "new"):
                        if getattr(arr, attr, None) == fn:
                            return f"type {t.name!r} {kind} {attr} (rank {arr.rank})"
    return f"function {fn}"
