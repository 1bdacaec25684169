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
from pathlib import Path

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
# Attributes of OpaqueHandle a record field's property must not shadow.
_HANDLE_ATTRS = frozenset(
    "free valid ptr library type_name field field_names to_dict is_tuple shape variant payload store numpy info kind".split()
)

_LIBRARY_API = frozenset("mode backend types entry_points close sync report clear_caches entry closed path manifest context".split())
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

    def signature(self, self_param: bool = False) -> str:
        params = (["self"] if self_param else []) + [f"{p.name}: {p.annotation}" for p in self.params]
        return f"def {self.name}({', '.join(params)}) -> {self.result}"


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
        """``reserved``: names the classes must not take; ``shared``: type name -> class name of
        libraries already declared in the same module (reused, not declared again); ``source``:
        the program's parsed headers, whose size names the docstrings' Futhark types keep."""
        self.manifest = manifest
        self.docs = docs or {}
        self.source = source
        self.classes: dict[str, str] = {}  # manifest type name -> Python class name
        self.declared_elsewhere = set(shared or {})
        taken = set(reserved) | set((shared or {}).values())
        for t in manifest.types:
            if shared and t in shared:
                self.classes[t] = shared[t]
                continue
            name = _class_name(t)
            while name in taken or keyword.iskeyword(name):
                name += "_"
            taken.add(name)
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
    def stub_classes(self) -> list[str]:
        """Stub text of every handle class (and record TypedDict)."""
        out = []
        for t, cls in self.classes.items():
            if t in self.declared_elsewhere:
                continue
            info = self.manifest.types[t]
            doc = self.docs.get(t)
            if isinstance(info, ArrayInfo):
                shape = ", ".join(["int"] * info.rank)
                out.append(
                    f"class {cls}(ArrayHandle):\n"
                    f"    {_docstring(doc or f'A {t} held by the library (read it with .numpy()).', 4)}\n"
                    f"    @property\n    def shape(self) -> tuple[{shape}]: ...\n"
                    f"    def numpy(self) -> {self._ndarray(info)}: ...\n"
                )
                continue
            body = [f"    {_docstring(doc or f'The Futhark type {t}, held by the library.', 4)}"]
            if info.record is not None:
                fields = info.record.fields
                fnames = python_names([f.name for f in fields])
                for fn, f in zip(fnames, fields):
                    if fn.isidentifier() and fn not in _HANDLE_ATTRS and not keyword.iskeyword(fn):
                        body.append(f"    @property\n    def {fn}(self) -> {self.output(f.type)}: ...")
                if not self._is_tuple(info):
                    items = ", ".join(f"{f.name!r}: {self.input(f.type)}" for f in fields)
                    out.append(f"{cls}Dict = TypedDict({cls + 'Dict'!r}, {{{items}}})\n")
            if info.sum is not None:
                variants = ", ".join(repr(v.name) for v in info.sum.variants)
                body.append(f"    @property\n    def variant(self) -> Literal[{variants}]: ...")
            out.append(f"class {cls}(OpaqueHandle):\n" + "\n".join(body) + "\n")
        return out

    def runtime_aliases(self) -> list[str]:
        """The same names for the generated module (run time): aliases of pybridge's handle classes
        (and the record TypedDicts, as plain dict)."""
        out = []
        for t, cls in self.classes.items():
            if t in self.declared_elsewhere:
                continue
            info = self.manifest.types[t]
            out.append(f"{cls} = _ArrayHandle" if isinstance(info, ArrayInfo) else f"{cls} = _OpaqueHandle")
            if isinstance(info, OpaqueInfo) and info.record is not None and not self._is_tuple(info):
                out.append(f"{cls}Dict = dict")
        return out


def _docstring(text: str, indent: int) -> str:
    text = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    pad = " " * indent
    lines = text.splitlines() or [""]
    if len(lines) == 1:
        return f'"""{lines[0]}"""'
    return '"""' + lines[0] + "\n" + "\n".join((pad + ln) if ln else "" for ln in lines[1:]) + "\n" + pad + '"""'


STUB_HEADER = """\
# Generated by pybridge {what}: the Python-side types of {sources}. Do not edit.
from collections.abc import Sequence
from typing import Any, Literal, TypedDict

import numpy as np

from pybridge.futhark.handles import ArrayHandle, OpaqueHandle
"""


def library_stub(manifest: Manifest, source: str | None = None, origin: str = "a Futhark library") -> str:
    """The ``.pyi`` for a library loaded with ``pf.load``: handle classes and ``class Library`` (the
    library's interface with the entry points as typed methods), for ``typing.cast``."""
    parsed = parse_source(source) if source else None
    types = PyTypes(manifest, dict(parsed.docs) if parsed else {}, frozenset({"Library"}), source=parsed)
    parts = [STUB_HEADER.format(what="stubs", sources=origin), *types.stub_classes()]
    methods = [
        f"    {e.signature(True)}:\n        {_docstring(e.doc, 8)}\n        ..."
        for e in types.entries()
        if e.name.isidentifier() and e.name not in _LIBRARY_API
    ]
    # Not a subclass of pybridge's Library: its __getattr__ (entry points by name) would let any
    # misspelt name through. The part of its interface a caller uses, then the entry points.
    parts.append(
        "class Library:\n"
        f"    {_docstring(f'{origin}: its entry points as typed methods. Use: typing.cast(module.Library, pf.load(...)).', 4)}\n"
        "    mode: str\n    backend: str\n    types: dict[str, Any]\n    entry_points: dict[str, Any]\n"
        "    def close(self) -> None: ...\n    def sync(self) -> None: ...\n    def report(self) -> dict[str, Any]: ...\n"
        "    def clear_caches(self) -> None: ...\n    def entry(self, name: str) -> Any: ...\n"
        "    def __getitem__(self, name: str) -> Any: ...\n"
        "    def __enter__(self) -> Library: ...\n    def __exit__(self, *exc: object) -> None: ...\n"
        + "\n".join(methods)
        + "\n"
    )
    return "\n".join(parts)


def write_library_stub(fut: str | Path, manifest: Manifest, out: str | Path) -> Path:
    """Write ``library_stub`` of ``fut`` (compiled to ``manifest``) to ``out``."""
    src = Path(fut)
    text = library_stub(manifest, src.read_text(errors="replace"), src.name)
    Path(out).write_text(text)
    return Path(out)
