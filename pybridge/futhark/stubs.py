"""Typed Python views of a Futhark library: ``.pyi`` stubs from the manifest and the source.

One generator serves two uses:
- ``pybridge stubs prog.fut`` writes ``prog.pyi`` for a library loaded with ``pf.load`` (a class
  ``Library`` with the entry points as typed methods; ``typing.cast`` a loaded library to it);
- ``pybridge package`` writes the generated module of a wheel (``package_module_source``) and its
  stub (``package_stub``).

Types on the Python side (``PyTypes``): a scalar parameter takes a Python number or a NumPy scalar
and a scalar result is the NumPy scalar pybridge returns; an array parameter takes the array's handle
class (one per element type and rank: ``F32Array2D`` for ``[][]f32``), a NumPy array of that dtype
and rank (a shape-typed ``ndarray``) or nested sequences; a record takes its handle class or a
``TypedDict`` (a tuple type: a tuple); sums and other opaque types take their handle class. At run
time every handle class is pybridge's ``ArrayHandle`` / ``OpaqueHandle`` (the names are aliases), so
``isinstance`` works; the stubs make them distinct so a type checker tells them apart.
Doc comments (``-- |`` before ``entry`` or ``type``) become docstrings.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from .handles import OpaqueHandle
from .library import OWN_NAMES
from .manifest import ArrayInfo, EntryInfo, Manifest, OpaqueInfo
from .names import python_names
from .source import SourceInfo, declared_results, parse_source, spelled_with_sizes
from .source import doc_comments  # noqa: F401 - its former home (now source.py, which pf.load reads too)
from .types import PRIMITIVES

_INT = "int | np.integer[Any]"
_FLOAT = "float | np.floating[Any]"
_BOOL = "bool | np.bool_"
_NP_SCALAR = {
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "f16": "float16", "f32": "float32", "f64": "float64", "bool": "bool_",
}  # fmt: skip
# A record field is an attribute of its handle unless OpaqueHandle has one of that name (then it is
# reached as h["name"]); the stub declares a property for the same fields only.
_HANDLE_ATTRS = frozenset(dir(OpaqueHandle))

# The names annotations use, and where each comes from (module, attribute; None: the module itself).
# An entry point or record field of the same name would hide one (mypy, like Python, looks a name
# up in the class body before the module, and a module function replaces an import): a stub where
# that happens imports it as ``__pb_<name>__`` instead and spells it so. No Futhark name starts with
# two underscores (its identifiers are letters, digits, _ and primes, at most one leading _) and
# names.python_names never makes one, so no user name can hide those.
VOCABULARY: dict[str, tuple[str, str | None]] = {
    **{b: ("builtins", b) for b in ("int", "float", "bool", "tuple", "str", "dict", "object")},
    "np": ("numpy", None),
    **{t: ("typing", t) for t in ("Any", "Literal", "TypedDict")},
    "Sequence": ("collections.abc", "Sequence"),
    "ArrayHandle": ("pybridge.futhark.handles", "ArrayHandle"),
    "OpaqueHandle": ("pybridge.futhark.handles", "OpaqueHandle"),
    "FutharkLibrary": ("pybridge.futhark.library", "Library"),
}
_TOKEN = re.compile(r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|(?<![.\w])([A-Za-z_]\w*)""")




def private(name: str) -> str:
    """The spelling of a vocabulary name that no user name can hide."""
    return f"__pb_{name}__"


def qualify(annotation: str, hidden: frozenset[str]) -> str:
    """``annotation`` with each hidden vocabulary name in its private spelling (string literals,
    such as Literal['np'] or a TypedDict key, and attributes such as np.int32 are left alone)."""
    if not hidden:
        return annotation
    return _TOKEN.sub(lambda m: private(m.group(1)) if m.group(1) in hidden else m.group(0), annotation)


def import_lines(hidden: frozenset[str]) -> str:
    """The imports of the vocabulary: the usual ones, and the private ones of the hidden names."""
    plain: dict[str, list[str]] = {}
    lines = []
    for name, (module, attr) in VOCABULARY.items():
        if name in hidden:
            lines.append(f"import {module} as {private(name)}" if attr is None else f"from {module} import {attr} as {private(name)}")
        elif attr is None:
            lines.append(f"import {module} as {name}")
        elif module != "builtins":
            plain.setdefault(module, []).append(attr if attr == name else f"{attr} as {name}")
    lines += [f"from {m} import {', '.join(names)}" for m, names in plain.items()]
    return "\n".join(sorted(lines, key=lambda ln: ln.split()[1])) + "\n"



def _class_name(type_name: str) -> str:
    """A Python class name for a manifest type: ``[][]f32`` -> ``F32Array2D``, ``point`` -> ``Point``,
    ``(f32, i32)`` -> ``Tuple_f32_i32``, ``[]point`` -> ``PointArray1D``."""
    rank = 0
    while type_name.startswith("[]", 2 * rank):
        rank += 1
    base = type_name[2 * rank :]
    if base.startswith("("):
        core = "Tuple_" + "_".join(re.findall(r"\w+", base))
    else:
        words = [w for w in re.split(r"[^A-Za-z0-9]+", base.replace("'", "_1")) if w]
        core = "".join(w[:1].upper() + w[1:] for w in words) or "Opaque"
    if not core[0].isalpha():
        core = "T" + core
    return f"{core}Array{rank}D" if rank else core


@dataclass(frozen=True)
class Param:
    name: str  # Python spelling
    futhark_name: str
    annotation: str
    futhark_type: str


@dataclass(frozen=True)
class Entry:
    name: str  # Python spelling
    futhark_name: str
    params: tuple[Param, ...]
    result: str
    doc: str

    @property
    def receiver(self) -> str:
        """The name of a method's first parameter: ``self``, unless a parameter is named so."""
        return private("self") if any(p.name == "self" for p in self.params) else "self"

    def signature(self, hidden: frozenset[str] = frozenset(), method: bool = False) -> str:
        """``def name(params) -> result`` (a method's: with its receiver first); ``hidden``: the
        vocabulary names to spell privately (``qualify``)."""
        params = ([self.receiver] if method else []) + [f"{p.name}: {qualify(p.annotation, hidden)}" for p in self.params]
        return f"def {self.name}({', '.join(params)}) -> {qualify(self.result, hidden)}"

    def call(self, target: str) -> str:
        """``target(arg, ...)``: this entry point's parameters passed on as they came."""
        return f"{target}({', '.join(p.name for p in self.params)})"


def user_names(manifest: Manifest) -> frozenset[str]:
    """The Python spellings a library's stub binds: its entry points (functions, methods) and record
    fields (properties). Class names avoid them, and the vocabulary names among them are hidden."""
    names = set(python_names(list(manifest.entry_points)))
    for info in manifest.types.values():
        if isinstance(info, OpaqueInfo) and info.record is not None:
            names.update(python_names([f.name for f in info.record.fields]))
    return frozenset(names)


class PyTypes:
    """The Python-side types of one library: classes to declare, annotations of each entry point."""

    def __init__(
        self,
        manifest: Manifest,
        docs: dict[str, str] | None = None,
        reserved: frozenset[str] = frozenset(),
        shared: dict[str, str] | None = None,
        source: SourceInfo | None = None,
    ):
        """``reserved``: names the classes must not take (besides the vocabulary and this library's
        ``user_names``); ``shared``: type name -> class name of libraries already declared in the
        same module (reused, not declared again); ``source``: the program's parsed headers, whose
        size names the docstrings' Futhark types keep."""
        self.manifest = manifest
        self.docs = docs or {}
        self.source = source
        self.classes: dict[str, str] = {}  # manifest type name -> Python class name
        self.declared_elsewhere = set(shared or {})
        taken = set(reserved) | set(VOCABULARY) | user_names(manifest) | set((shared or {}).values())
        for t, info in manifest.types.items():
            if shared and t in shared:
                self.classes[t] = shared[t]
                continue
            name = _class_name(t)
            with_dict = isinstance(info, OpaqueInfo) and info.record is not None and not self._is_tuple(info)
            while name in taken or keyword.iskeyword(name) or (with_dict and name + "Dict" in taken):
                name += "_"
            taken.add(name)
            if with_dict:
                taken.add(name + "Dict")
            self.classes[t] = name

    # ---------------------------------------------------------------- annotations
    def input(self, t: str) -> str:
        if t in PRIMITIVES:
            return _BOOL if t == "bool" else _FLOAT if t.startswith("f") else _INT
        info = self.manifest.type_of(t)
        cls = self.classes[t]
        if isinstance(info, ArrayInfo):
            return f"{cls} | {self._ndarray(info)} | {self._nested(info)}"
        assert isinstance(info, OpaqueInfo)
        if info.record is not None:
            if self._is_tuple(info):
                return f"{cls} | tuple[{', '.join(self.input(f.type) for f in info.record.fields)}]"
            return f"{cls} | {cls}Dict"
        return cls

    def output(self, t: str) -> str:
        if t in PRIMITIVES:
            return f"np.{_NP_SCALAR[t]}"
        return self.classes[t]

    def _ndarray(self, info: ArrayInfo) -> str:
        shape = ", ".join(["int"] * info.rank)
        return f"np.ndarray[tuple[{shape}], np.dtype[np.{_NP_SCALAR[info.elemtype]}]]"

    def _nested(self, info: ArrayInfo) -> str:
        e = info.elemtype
        inner = "bool" if e == "bool" else "float" if e.startswith("f") else "int"
        for _ in range(info.rank):
            inner = f"Sequence[{inner}]"
        return inner

    @staticmethod
    def _is_tuple(info: OpaqueInfo) -> bool:
        fields = info.record.fields if info.record else ()
        return bool(fields) and [f.name for f in fields] == [str(i) for i in range(len(fields))]

    # ---------------------------------------------------------------- entry points
    def entries(self) -> list[Entry]:
        names = list(self.manifest.entry_points)
        out = []
        for py, (name, e) in zip(python_names(names), self.manifest.entry_points.items()):
            out.append(self._entry(py, e))
        return out

    def _entry(self, py: str, e: EntryInfo) -> Entry:
        pnames = python_names([p.name for p in e.inputs])
        decl = self.source.entries.get(e.name) if self.source is not None else None
        declared = [d.type if decl is not None and (d := decl.param(p.name)) is not None else None for p in e.inputs]
        params = tuple(Param(pn, p.name, self.input(p.type), spelled_with_sizes(p.type, p.unique, d))
                       for pn, p, d in zip(pnames, e.inputs, declared))
        outs = [self.output(o.type) for o in e.outputs]
        result = outs[0] if len(outs) == 1 else f"tuple[{', '.join(outs)}]" if outs else "None"
        sizes = "".join(f" [{n}]" for n in decl.size_params) if decl is not None else ""
        header = " ".join(f"({p.futhark_name}: {p.futhark_type})" for p in params)
        ftype = ", ".join(spelled_with_sizes(o.type, o.unique, d) for o, d in zip(e.outputs, declared_results(decl, len(e.outputs))))
        ftype = ftype if len(e.outputs) == 1 else f"({ftype})"
        doc = self.docs.get(e.name, "").strip()
        futhark = f"Futhark: entry {e.name}{sizes} {header} : {ftype}".replace("  ", " ")
        return Entry(py, e.name, params, result, f"{doc}\n\n{futhark}" if doc else futhark)

    # ---------------------------------------------------------------- class declarations
    def stub_classes(self, hidden: frozenset[str] = frozenset()) -> list[str]:
        """Stub text of every handle class (and record TypedDict)."""
        q = partial(qualify, hidden=hidden)
        out = []
        for t, cls in self.classes.items():
            if t in self.declared_elsewhere:
                continue
            info = self.manifest.types[t]
            doc = self.docs.get(t)
            if isinstance(info, ArrayInfo):
                shape = ", ".join(["int"] * info.rank)
                out.append(
                    f"class {cls}({q('ArrayHandle')}):\n"
                    f"    {_docstring(doc or f'A {t} held by the library (read it with .numpy()).', 4)}\n"
                    f"    @property\n    def shape(self) -> {q(f'tuple[{shape}]')}: ...\n"
                    f"    def numpy(self) -> {q(self._ndarray(info))}: ...\n"
                )
                continue
            body = [f"    {_docstring(doc or f'The Futhark type {t}, held by the library.', 4)}"]
            if info.record is not None:
                fields = info.record.fields
                fnames = python_names([f.name for f in fields])
                for fn, f in zip(fnames, fields):
                    if fn not in _HANDLE_ATTRS:
                        body.append(f"    @property\n    def {fn}(self) -> {q(self.output(f.type))}: ...")
                if not self._is_tuple(info):
                    items = ", ".join(f"{f.name!r}: {q(self.input(f.type))}" for f in fields)
                    out.append(f"{cls}Dict = {q('TypedDict')}({cls + 'Dict'!r}, {{{items}}})\n")
            if info.sum is not None:
                variants = ", ".join(repr(v.name) for v in info.sum.variants)
                body.append(f"    @property\n    def variant(self) -> {q('Literal')}[{variants}]: ...")
            out.append(f"class {cls}({q('OpaqueHandle')}):\n" + "\n".join(body) + "\n")
        return out

    def runtime_aliases(self, hidden: frozenset[str] = frozenset()) -> list[str]:
        """The same names for the generated module (run time): aliases of pybridge's handle classes
        (and the record TypedDicts, as plain dict)."""
        out = []
        for t, cls in self.classes.items():
            if t in self.declared_elsewhere:
                continue
            info = self.manifest.types[t]
            out.append(f"{cls} = {qualify('ArrayHandle' if isinstance(info, ArrayInfo) else 'OpaqueHandle', hidden)}")
            if isinstance(info, OpaqueInfo) and info.record is not None and not self._is_tuple(info):
                out.append(f"{cls}Dict = {qualify('dict', hidden)}")
        return out


def _escape(c: str) -> str:
    if c in "\\\"":
        return "\\" + c
    if c in "\n\t" or c.isprintable():
        return c
    return c.encode("unicode_escape").decode("ascii")  # a control character, U+2028, a lone surrogate


def _docstring(text: str, indent: int) -> str:
    """A triple-quoted literal whose value is ``text`` (its lines after the first indented by
    ``indent``): every backslash and quote escaped, so no text can end or break it."""
    pad = " " * indent
    lines = "".join(_escape(c) for c in text).split("\n")
    if len(lines) == 1:
        return f'"""{lines[0]}"""'
    return '"""' + lines[0] + "\n" + "\n".join((pad + ln) if ln else "" for ln in lines[1:]) + "\n" + pad + '"""'


def stub_header(what: str, sources: str, hidden: frozenset[str]) -> str:
    """The first comment line (``sources`` on one line, whatever its file names hold) and the imports."""
    one_line = sources.encode("unicode_escape").decode("ascii")
    return f"# Generated by pybridge {what}: the Python-side types of {one_line}. Do not edit.\n" + import_lines(hidden)


def library_stub(manifest: Manifest, source: str | None = None, origin: str = "a Futhark library") -> str:
    """The ``.pyi`` for a library loaded with ``pf.load``: handle classes and ``class Library`` (the
    library's interface with the entry points as typed methods), for ``typing.cast``."""
    parsed = parse_source(source) if source else None
    types = PyTypes(manifest, dict(parsed.docs) if parsed else {}, frozenset({"Library"}), source=parsed)
    hidden = frozenset(VOCABULARY) & user_names(manifest)
    q = partial(qualify, hidden=hidden)
    parts = [stub_header("stubs", origin, hidden), *types.stub_classes(hidden)]
    # Entry points named like the library's own attributes are not attributes at run time (they
    # are lib["close"]), so not methods here either.
    methods = [
        f"    {e.signature(hidden, method=True)}:\n        {_docstring(e.doc, 8)}\n        ..."
        for e in types.entries()
        if e.name not in OWN_NAMES
    ]
    # Not a subclass of pybridge's Library: its __getattr__ (entry points by name) would let any
    # misspelt name through. The part of its interface a caller uses, then the entry points.
    parts.append(
        "class Library:\n"
        f"    {_docstring(f'{origin}: its entry points as typed methods. Use: typing.cast(module.Library, pf.load(...)).', 4)}\n"
        f"    mode: {q('str')}\n    backend: {q('str')}\n    types: {q('dict[str, Any]')}\n    entry_points: {q('dict[str, Any]')}\n"
        f"    def close(self) -> None: ...\n    def sync(self) -> None: ...\n    def report(self) -> {q('dict[str, Any]')}: ...\n"
        f"    def clear_caches(self) -> None: ...\n    def entry(self, name: {q('str')}) -> {q('Any')}: ...\n"
        f"    def __getitem__(self, name: {q('str')}) -> {q('Any')}: ...\n"
        f"    def __enter__(self) -> Library: ...\n    def __exit__(self, *exc: {q('object')}) -> None: ...\n"
        + "\n".join(methods)
        + "\n"
    )
    return "\n".join(parts)


def write_library_stub(fut: str | Path, manifest: Manifest, out: str | Path) -> Path:
    """Write ``library_stub`` of ``fut`` (compiled to ``manifest``) to ``out``."""
    src = Path(fut)
    text = library_stub(manifest, src.read_text(errors="replace"), src.name)
    Path(out).write_text(text, encoding="utf-8")
    return Path(out)
