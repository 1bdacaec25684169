"""Hypothesis strategies for Futhark entry-point interfaces and their values, and the Futhark source
that implements them (tests/test_generated_interfaces.py).

A drawn entry point is one of
- identity:     entry e (a: A) (b: *B) (_: C) : (A, *B) = (a, b)    every named parameter comes back;
- projection:   entry e (r: R) : F = r.f.g                           a path into records and tuples;
- construction: entry e (a: F) (b: G) : R = {f = a, g = b}           a record, tuple, sum, array of
                records (from one array per field) or opaque array of sums (from a tag array and
                one array per payload).
Types: the 12 primitives, arrays of rank 1-3, tuples, records (numeric and Python-keyword field
names), sums, arrays of records/tuples (record_array), arrays of sums (opaque_array), nested to
depth 2, unique where Futhark allows it. Names come from Futhark's identifier grammar, with the
cases Python cannot use as they are over-represented.

Two Futhark 0.25.32 bugs shape the generator (both produce C that does not compile):
- variant names with primes are written into C function names unmangled (futhark_new_opaque_s_a');
- name mangling is not injective: entry points f' and fzq both become futhark_entry_fzq (the same
  for fields x' and xzq of one record). Names whose mangled forms coincide are not drawn together.
"""

from __future__ import annotations

import builtins
import keyword
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Union

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

PRIMS = ("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f16", "f32", "f64", "bool")
DTYPES = {p: np.dtype("bool" if p == "bool" else {"i": "int", "u": "uint", "f": "float"}[p[0]] + p[1:]) for p in PRIMS}
# The unsigned integer of the same width: floats are compared (and drawn) by their bits.
BITS = {p: np.dtype(f"uint{DTYPES[p].itemsize * 8}") for p in PRIMS if p[0] == "f"}

FUTHARK_KEYWORDS = {
    "assert", "case", "def", "do", "else", "entry", "false", "for", "if", "import", "in", "include",
    "let", "local", "loop", "match", "module", "open", "then", "true", "type", "val", "while", "with",
}
# Prelude names the generated bodies use: a parameter or entry point of that name would shadow them.
BODY_NAMES = {"tabulate", "tabulate_2d", "n", "m", "ix0", "ix1"}
# Names Python cannot use as they are, or that clash with pybridge's own attributes.
SPECIAL_NAMES = (
    "as", "lambda", "class", "None", "True", "False", "is", "not", "or", "and", "pass", "return",
    "yield", "try", "except", "raise", "from", "global", "del", "await", "async", "nonlocal",
    "x'", "arr'", "x''", "a'b", "arr_1", "x_2", "as_", "close", "sync", "report", "types", "free",
    "store", "shape", "valid", "numpy", "manifest", "context", "entry", "field", "entry_points", "i32", "f16",
)


def mangle(name: str) -> str:
    """How Futhark 0.25.32 spells a name in C (only primes change)."""
    return name.replace("'", "zq")


def _ok_name(n: str) -> bool:
    return n not in FUTHARK_KEYWORDS and n not in BODY_NAMES


identifier = st.one_of(
    st.from_regex(r"\A[A-Za-z][A-Za-z0-9_']{0,5}\Z"),
    st.from_regex(r"\A_[A-Za-z0-9][A-Za-z0-9_']{0,4}\Z"),  # _x: a parameter Futhark does not let the body use
    st.sampled_from([n for n in SPECIAL_NAMES if n != "entry"]),
).filter(_ok_name)
field_name = st.one_of(identifier, st.integers(0, 12).map(str))
variant_name = identifier.filter(lambda n: "'" not in n)  # Futhark bug: primes in variants


# ---------------------------------------------------------------- types


@dataclass(frozen=True)
class Prim:
    name: str

    def fut(self) -> str:
        return self.name


@dataclass(frozen=True)
class Array:
    elem: Prim
    rank: int

    def fut(self) -> str:
        return "[]" * self.rank + self.elem.name


@dataclass(frozen=True)
class Record:
    """A record; a tuple when ``tuple_`` (fields then are 0..n-1, written ``(a, b)``)."""

    fields: tuple[tuple[str, "Type"], ...]
    tuple_: bool = False

    def fut(self) -> str:
        if self.tuple_:
            return "(" + ", ".join(t.fut() for _, t in self.fields) + ")"
        return "{" + ", ".join(f"{n}: {t.fut()}" for n, t in self.fields) + "}"

    @property
    def reads_as_tuple(self) -> bool:
        """pybridge reads a record whose fields are exactly 0..n-1 back as a tuple (Futhark's own
        definition of a tuple)."""
        return sorted(n for n, _ in self.fields) == sorted(str(i) for i in range(len(self.fields))) and len(self.fields) > 1 or self.tuple_


@dataclass(frozen=True)
class Sum:
    variants: tuple[tuple[str, tuple["Type", ...]], ...]

    def fut(self) -> str:
        return " | ".join("#" + n + "".join(f" ({t.fut()})" for t in ts) for n, ts in self.variants)


@dataclass(frozen=True)
class RecordArray:
    """An array of records or tuples of primitives (Futhark: record_array, built by zip)."""

    elem: Record
    rank: int

    def fut(self) -> str:
        return "[]" * self.rank + self.elem.fut()


@dataclass(frozen=True)
class SumArray:
    """A one-dimensional array of sums with primitive payloads (Futhark: opaque_array)."""

    elem: Sum

    def fut(self) -> str:
        return "[](" + self.elem.fut() + ")"


Type = Union[Prim, Array, Record, Sum, RecordArray, SumArray]


def array_parts(t: Type) -> int:
    """How many arrays make up a value of ``t`` (an array of records counts once)."""
    if isinstance(t, Prim):
        return 0
    if isinstance(t, Record):
        return sum(array_parts(f) for _, f in t.fields)
    if isinstance(t, Sum):
        return sum(array_parts(p) for _, ps in t.variants for p in ps)
    return 1


def may_be_unique(t: Type) -> bool:
    """Futhark rejects returning a unique record whose array parts might alias each other
    (error-index: unique-return-aliased), so only types with exactly one array part are drawn unique."""
    return not isinstance(t, Sum) and array_parts(t) == 1


prim_type = st.sampled_from(PRIMS).map(Prim)
array_type = st.builds(Array, prim_type, st.integers(1, 3))


@st.composite
def _fields(draw, member: st.SearchStrategy, min_size: int = 1, max_size: int = 3) -> Record:
    if draw(st.booleans()):
        ts = draw(st.lists(member, min_size=max(2, min_size), max_size=max_size))
        return Record(tuple((str(i), t) for i, t in enumerate(ts)), tuple_=True)
    names = draw(st.lists(field_name, min_size=min_size, max_size=max_size, unique_by=mangle))
    return Record(tuple((n, draw(member)) for n in names))


@st.composite
def _sum(draw, payload: st.SearchStrategy) -> Sum:
    names = draw(st.lists(variant_name, min_size=1, max_size=3, unique=True))
    return Sum(tuple((n, tuple(draw(st.lists(payload, max_size=2)))) for n in names))


flat_record = _fields(prim_type)
elem_record = _fields(st.one_of(prim_type, flat_record), max_size=3)  # one level of nesting
prim_sum = _sum(prim_type)
record_array_type = st.builds(RecordArray, elem_record, st.integers(1, 2))
sum_array_type = st.builds(SumArray, prim_sum)
leaf_type = st.one_of(prim_type, array_type)
inner_type = st.one_of(leaf_type, flat_record, _sum(st.one_of(leaf_type, flat_record)), record_array_type)
# Parameters take every kind but arrays of sums, which Python cannot build (Futhark 0.25.32 gives them
# no `new`); those come from construction entry points and are read back element by element.
any_type = st.one_of(prim_type, array_type, _fields(inner_type), _sum(st.one_of(leaf_type, flat_record)), record_array_type)


# ---------------------------------------------------------------- values (what Python passes and reads back)


def _prim_scalar(p: str) -> st.SearchStrategy:
    dt = DTYPES[p]
    if p == "bool":
        return st.booleans().map(np.bool_)
    if p[0] in "iu":
        info = np.iinfo(dt)
        return st.integers(int(info.min), int(info.max)).map(dt.type)
    return _float_bits(p).map(lambda b: np.array(b, BITS[p]).view(dt)[()])


def _float_bits(p: str) -> st.SearchStrategy:
    """Every bit pattern (NaNs with payloads and sign, subnormals), the special values more often."""
    dt, bits = DTYPES[p], BITS[p]
    width, mant = 8 * dt.itemsize, np.finfo(dt).nmant
    sign, exp, quiet = 1 << (width - 1), ((1 << (width - 1)) - 1) & ~((1 << mant) - 1), 1 << (mant - 1)
    nans = [exp | 1, exp | (quiet - 1), exp | quiet, exp | quiet | 1]  # signalling and quiet, payloads
    special = [np.array(v, dt).view(bits).item() for v in (0.0, 1.0, np.inf, np.finfo(dt).max, np.finfo(dt).tiny)]
    special += nans + [1, (1 << mant) - 1]  # subnormals
    special += [v | sign for v in special]
    return st.one_of(st.integers(0, 2**width - 1), st.sampled_from(special))


def _elements(p: str) -> st.SearchStrategy:
    dt = DTYPES[p]
    if p == "bool":
        return st.booleans()
    if p[0] in "iu":
        info = np.iinfo(dt)
        return st.integers(int(info.min), int(info.max))
    return _float_bits(p)


def _array(p: str, shape: tuple[int, ...]) -> st.SearchStrategy:
    dt = DTYPES[p]
    store = BITS.get(p, dt)
    return hnp.arrays(store, shape, elements=_elements(p)).map(lambda a: a.view(dt))


shape_of = lambda rank: st.tuples(*[st.integers(0, 3)] * rank)  # noqa: E731  empty dimensions too


@st.composite
def value_of(draw, t: Type) -> Any:
    """A value of ``t`` as pybridge takes it and reads it back (to_numpy): NumPy scalars and arrays,
    tuples, dicts by exact field name, (variant, payload) pairs, dicts of columns for record arrays,
    lists of (variant, payload) for arrays of sums."""
    if isinstance(t, Prim):
        return draw(_prim_scalar(t.name))
    if isinstance(t, Array):
        return draw(_array(t.elem.name, draw(shape_of(t.rank))))
    if isinstance(t, Record):
        vals = {n: draw(value_of(f)) for n, f in t.fields}
        return tuple(vals[str(i)] for i in range(len(t.fields))) if t.reads_as_tuple else vals
    if isinstance(t, Sum):
        name, payload = draw(st.sampled_from(t.variants))
        return (name, tuple(draw(value_of(p)) for p in payload))
    if isinstance(t, RecordArray):
        return draw(columns_of(t.elem, draw(shape_of(t.rank))))
    if isinstance(t, SumArray):
        return draw(st.lists(value_of(t.elem), max_size=4))
    raise TypeError(t)


@st.composite
def columns_of(draw, r: Record, shape: tuple[int, ...]) -> dict[str, Any]:
    """One array per field (nested records: a dict of columns), all of leading shape ``shape``."""
    out: dict[str, Any] = {}
    for n, f in r.fields:
        out[n] = draw(columns_of(f, shape)) if isinstance(f, Record) else draw(_array(f.name, shape))  # type: ignore[union-attr]
    return out


# ---------------------------------------------------------------- entry points


@dataclass
class Param:
    name: str
    type: Type
    unique: bool = False
    sized: str = ""  # arrays built into records/sums: the size names, "[n]" or "[n][m]"

    def fut(self) -> str:
        t = self.type.fut()
        if self.sized:
            t = self.sized + t[2 * self.sized.count("["):]
        return f"({self.name}: {'*' if self.unique else ''}{t})"

    @property
    def ignored(self) -> bool:
        """Futhark forbids using a parameter whose name starts with _ (its value is dropped)."""
        return self.name.startswith("_")


@dataclass
class Entry:
    name: str
    kind: str  # identity | projection | construction
    params: list[Param]
    result: Type | tuple[Type, ...]
    body: str
    unique_result: tuple[bool, ...] = ()
    path: tuple[str, ...] = ()  # projection: the fields taken
    sizes: str = ""  # construction of arrays: size parameters [n][m], also the result's sizes
    built: Type | None = None  # construction: the type built
    doc: str = ""  # its doc comment, one line per line

    def fut(self) -> str:
        params = " ".join(p.fut() for p in self.params)
        res = [("*" if u else "") + t.fut() for t, u in zip(self.result, self.unique_result)]  # type: ignore[union-attr]
        if self.sizes:
            res = [self.sizes + res[0][2 * self.sizes.count("["):]]
        ret = res[0] if len(res) == 1 else "(" + ", ".join(res) + ")"
        return doc_comment(self.doc) + f"entry {self.name} {self.sizes} {params} : {ret} =\n  {self.body}"


def _param_names(draw, n: int, allow_ignored: bool = True) -> list[str]:
    names = draw(st.lists(identifier, min_size=n, max_size=n, unique_by=mangle))
    if not allow_ignored:
        names = [("p" + x if x.startswith("_") else x) for x in names]
        names = list(dict.fromkeys(names))
        while len(names) < n:
            names.append(f"p{len(names)}x")
    return names


@st.composite
def identity_entry(draw, name: str) -> Entry:
    n = draw(st.integers(1, 4))
    names = _param_names(draw, n)
    params = []
    for pn in names:
        t = draw(any_type)
        params.append(Param(pn, t, unique=may_be_unique(t) and draw(st.booleans())))
    if draw(st.integers(0, 4)) == 0:  # the wildcard, once or twice
        for _ in range(draw(st.integers(1, 2))):
            params.insert(draw(st.integers(0, len(params))), Param("_", draw(any_type)))
    kept = [p for p in params if not p.ignored]
    if not kept:
        params.append(Param("kept", draw(prim_type)))
        kept = params[-1:]
    body = kept[0].name if len(kept) == 1 else "(" + ", ".join(p.name for p in kept) + ")"
    return Entry(name, "identity", params, tuple(p.type for p in kept), body, tuple(p.unique for p in kept))


@st.composite
def projection_entry(draw, name: str) -> Entry:
    r = draw(_fields(st.one_of(inner_type, _fields(leaf_type))))
    pname = _param_names(draw, 1, allow_ignored=False)[0]
    path: list[str] = []
    t: Type = r
    # Futhark parses r._x as a use of a variable named with a leading _, which it forbids: fields
    # named so are built and read back, but not projected in Futhark code.
    while isinstance(t, Record) and (not path or draw(st.booleans())):
        named = [f for f in t.fields if not f[0].startswith("_")]
        if not named:
            break
        fname, t = draw(st.sampled_from(named))
        path.append(fname)
    return Entry(name, "projection", [Param(pname, r)], (t,), pname + "".join(f".{f}" for f in path), (False,), tuple(path))


@st.composite
def construction_entry(draw, name: str) -> Entry:
    what = draw(st.sampled_from(["record", "sum", "record_array", "sum_array"]))
    if what == "record":
        r = draw(_fields(inner_type))
        names = _param_names(draw, len(r.fields), allow_ignored=False)
        params = [Param(pn, f) for pn, (_, f) in zip(names, r.fields)]
        body = _record_expr(r, names, flat=True)
        return Entry(name, "construction", params, (r,), body, (False,), built=r)
    if what == "sum":
        s = draw(_sum(st.one_of(leaf_type, flat_record)))
        payload_types = [p for _, ps in s.variants for p in ps]
        names = _param_names(draw, len(payload_types) + 1, allow_ignored=False)
        tag, rest = names[0], names[1:]
        params = [Param(tag, Prim("i8"))] + [Param(pn, t) for pn, t in zip(rest, payload_types)]
        body, k = "", 0
        for i, (vn, ps) in enumerate(s.variants):
            expr = "#" + vn + "".join(f" {rest[k + j]}" for j in range(len(ps)))
            k += len(ps)
            body += expr if i == len(s.variants) - 1 else f"if {tag} == {i} then {expr} else "
        return Entry(name, "construction", params, (s,), body, (False,), built=s)
    if what == "record_array":
        ra = draw(record_array_type)
        leaves = _leaves(ra.elem)
        names = _param_names(draw, len(leaves), allow_ignored=False)
        dims = ["n", "m"][: ra.rank]
        sizes = "".join(f"[{d}]" for d in dims)
        params = [Param(pn, Array(t, ra.rank), sized=sizes) for pn, (_, t) in zip(names, leaves)]
        ixs = ["ix0", "ix1"][: ra.rank]
        idx = ", ".join(ixs)
        elem = _record_expr(ra.elem, [f"{pn}[{idx}]" for pn in names], flat=False)
        tab = {1: "tabulate", 2: "tabulate_2d"}[ra.rank]
        body = f"{tab} {' '.join(dims)} (\\{' '.join(ixs)} -> {elem})"
        return Entry(name, "construction", params, (ra,), body, (False,), sizes=sizes, built=ra)
    sa = draw(sum_array_type)
    payload_types = [p for _, ps in sa.elem.variants for p in ps]
    names = _param_names(draw, len(payload_types) + 1, allow_ignored=False)
    tag, rest = names[0], names[1:]
    params = [Param(tag, Array(Prim("i8"), 1), sized="[n]")] + [Param(pn, Array(t, 1), sized="[n]") for pn, t in zip(rest, payload_types)]  # type: ignore[arg-type]
    body, k = "", 0
    for i, (vn, ps) in enumerate(sa.elem.variants):
        expr = "#" + vn + "".join(f" {rest[k + j]}[ix0]" for j in range(len(ps)))
        k += len(ps)
        body += expr if i == len(sa.elem.variants) - 1 else f"if {tag}[ix0] == {i} then {expr} else "
    return Entry(name, "construction", params, (sa,), f"tabulate n (\\ix0 -> {body})", (False,), sizes="[n]", built=sa)


def _leaves(r: Record, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Prim]]:
    out: list[tuple[tuple[str, ...], Prim]] = []
    for n, f in r.fields:
        out += _leaves(f, prefix + (n,)) if isinstance(f, Record) else [(prefix + (n,), f)]  # type: ignore[list-item]
    return out


def _record_expr(r: Record, exprs: list[str], flat: bool) -> str:
    """{a = e0, b = {c = e1}} (or a tuple) from the field expressions (``flat``) or the leaf
    expressions of nested records (an element of a record array)."""
    it = iter(exprs)

    def build(rec: Record) -> str:
        parts = [(n, build(f) if isinstance(f, Record) and not flat else next(it)) for n, f in rec.fields]
        if rec.tuple_:
            return "(" + ", ".join(e for _, e in parts) + ")"
        return "{" + ", ".join(f"{n} = {e}" for n, e in parts) + "}"

    return build(r)


def entry_point(name: str) -> st.SearchStrategy[Entry]:
    return st.one_of(identity_entry(name), projection_entry(name), construction_entry(name))


entry_name = identifier.filter(lambda n: not n.startswith("_"))


def unique_names(entries: list[Entry]) -> list[Entry]:
    """Entry points drawn one by one may share a name (or its C spelling): number the later ones."""
    seen: set[str] = set()
    for e in entries:
        base, k = e.name, 0
        while mangle(e.name) in seen:
            k += 1
            e.name = f"{base}_{k}"
        seen.add(mangle(e.name))
    return entries


def program(entries: list[Entry], types: Iterable["Named"] = ()) -> str:
    decls = [t.declaration() for t in types]
    return "-- generated by tests/interface_gen.py\n" + "\n".join(decls + [e.fut() for e in entries]) + "\n"


def doc_comment(doc: str) -> str:
    """``doc`` as a Futhark doc comment: ``-- | first line``, then ``-- line``."""
    if not doc:
        return ""
    first, *rest = doc.split("\n")
    return "".join([f"-- | {first}\n"] + [f"-- {line}\n" for line in rest])


# ---------------------------------------------------------------- names that break generated Python
# A package's generated module binds entry points as functions and methods, record fields as
# properties and types as classes, all beside its own names. Drawn here: Python keywords, builtins,
# `self`, the names a test harvests from generated code, each with its leading-underscore twin, and
# doc comments full of quotes and backslashes; entry points tagged so that each call shows which one
# ran and which argument went where.

FUTHARK_NAME = re.compile(r"\A(?:[A-Za-z]|_[A-Za-z0-9])[A-Za-z0-9_']*\Z")  # Futhark 0.25.32's identifiers


def futhark_name(n: str) -> bool:
    return bool(FUTHARK_NAME.match(n)) and n not in FUTHARK_KEYWORDS


def clash_names(*groups: Iterable[str]) -> list[str]:
    """Keywords, builtins, ``self`` and ``groups``, with their leading-underscore twins, that Futhark
    accepts as names."""
    names = set(keyword.kwlist) | set(dir(builtins)) | {"self", "cls"} | set().union(*map(set, groups))
    names |= {"_" + n for n in names} | {n.lstrip("_") for n in names}
    return sorted(n for n in names if futhark_name(n))


@dataclass
class Named:
    """``type name = {fields}`` (all i64), with its doc comment."""

    name: str
    fields: tuple[str, ...]
    doc: str = ""

    def fut(self) -> str:
        return self.name

    def declaration(self) -> str:
        return doc_comment(self.doc) + f"type {self.name} = {{{', '.join(f'{f}: i64' for f in self.fields)}}}"

    @property
    def readable(self) -> str | None:
        """The first field a Futhark body may project (not one named with a leading _)."""
        return next((f for f in self.fields if not f.startswith("_")), None)


# Doc comment text: quotes, backslashes, triple quotes, braces, a tab, non-ASCII. A line is stripped
# and does not start with "|" (that would begin another doc comment).
_DOC_PIECES = ['"', "'", "\\", " ", "a", "b", "{", "}", "é", "\t", '"""', "'''", '\\"', '"\\']
doc_line = (
    st.lists(st.sampled_from(_DOC_PIECES), max_size=12)
    .map(lambda t: "".join(t).strip())
    .filter(lambda t: bool(t) and not t.startswith("|"))
)
doc_text = st.one_of(st.just(""), st.lists(doc_line, min_size=1, max_size=3).map("\n".join))


@st.composite
def named_types(draw, names: st.SearchStrategy[str]) -> list[Named]:
    tnames = draw(st.lists(names.filter(lambda n: n not in PRIMS), max_size=3, unique_by=mangle))
    return [Named(t, tuple(draw(st.lists(names, min_size=1, max_size=4, unique_by=mangle))), draw(doc_text)) for t in tnames]


@st.composite
def tagged_entry(draw, name: str, tag: int, names: st.SearchStrategy[str], types: list[Named]) -> Entry:
    """``entry name (p0: T0) ... : R = tag * 1000000 + 1 * v0 + 10 * v1 + ...``, where vi is the i64
    parameter pi or the first readable field of the record pi (nothing where Futhark lets the body
    read neither: a name with a leading _); R is i64 or a record type whose every field holds it."""
    pnames: list[str] = []
    for n in draw(st.lists(names | st.just("_"), max_size=4)):
        if n == "_" or mangle(n) not in map(mangle, pnames):
            pnames.append(n)
    params = [Param(pn, draw(st.sampled_from([Prim("i64"), *types]))) for pn in pnames]
    terms = [f"{tag}i64 * 1000000"]
    for i, p in enumerate(params):
        if p.ignored:
            continue
        if isinstance(p.type, Named):
            if p.type.readable is not None:
                terms.append(f"{10 ** i} * {p.name}.{p.type.readable}")
        else:
            terms.append(f"{10 ** i} * {p.name}")
    value = " + ".join(terms)
    result = draw(st.sampled_from([Prim("i64"), *types]))
    if isinstance(result, Named):
        fields = ", ".join(f"{f} = v" for f in result.fields)
        value = f"let v = {value} in {{{fields}}}"
    return Entry(name, "tagged", params, (result,), value, (False,), doc=draw(doc_text))


def expected_value(e: Entry, tag: int, args: list[Any]) -> int:
    """What a ``tagged_entry`` returns for ``args`` (ints; records as dicts by Futhark field name)."""
    total = tag * 1000000
    for i, (p, a) in enumerate(zip(e.params, args)):
        if p.ignored:
            continue
        if isinstance(p.type, Named):
            if p.type.readable is not None:
                total += 10**i * a[p.type.readable]
        else:
            total += 10**i * a
    return total
