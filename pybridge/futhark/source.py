"""Read entry-point headers from Futhark source, for the sizes the manifest leaves out.

The manifest writes ``[n]f32`` as ``[]f32``, so it cannot say that two parameters share a length.
The source can: ``entry dot [n] (xs: [n]f32) (ys: [n]f32) : f32``. This module parses just enough of
a ``.fut`` file to recover that: top-level ``entry`` headers (spread over any number of lines,
with comments), their parameter types (arrays, ``*`` uniqueness, records, tuples, parenthesised
types) and the file's own non-parametric ``type`` abbreviations. What it cannot understand — a
parametric abbreviation such as ``vec [n]``, a name from another module — comes back as *unknown*
(``kind == "unknown"`` or a ``None`` dimension), never as a guess. A size expression over names and
integer literals (``[n+1]``, ``[n*m]``) comes back as a :class:`pybridge.sizeexpr.SizeExpr`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Union

from ..sizeexpr import SizeExpr, SizeExprError, parse_size
from .types import PRIMITIVES, split_array_type

Dim = Union[str, int, SizeExpr, None]  # a size name, a literal size, a size expression, or unknown

_KEYWORDS = frozenset(
    "def let entry type module open import local include val fun in if then else loop for while "
    "do with case match assert module functor".split()
)

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<comment>--[^\n]*)
  | (?P<string>"(?:\\.|[^"\\])*")
  | (?P<char>'(?:\\.|[^'\\])')
  | (?P<num>\d[\w.]*)
  | (?P<ctor>\#[A-Za-z_][\w']*)
  | (?P<attr>\#\[)
  | (?P<ident>[A-Za-z_][\w']*(?:\.[A-Za-z_][\w']*)*)
  | (?P<arrow>->)
  | (?P<op>[-+*/%<>=!&|^~?.@\\:,;$]+)
  | (?P<punct>[\[\](){}])
  """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class Token:
    kind: str
    text: str
    line: int


def tokenize(source: str) -> list[Token]:
    """Tokens of ``source`` without whitespace and comments (unknown characters are skipped)."""
    out: list[Token] = []
    pos, line = 0, 1
    while pos < len(source):
        m = _TOKEN.match(source, pos)
        if m is None:  # a character Futhark would reject; skipping keeps the rest parseable
            pos += 1
            continue
        kind = m.lastgroup or ""
        text = m.group()
        if kind not in ("ws", "comment"):
            out.append(Token(kind, text, line))
        line += text.count("\n")
        pos = m.end()
    return out


@dataclass(frozen=True)
class TypeExpr:
    """A parameter type: ``dims`` outer array dimensions around an element of one ``kind``.

    kind: ``prim`` (``name`` is i32, f32 ...), ``record`` (``fields``), ``tuple`` (``fields``
    named "0", "1", ...), ``sum`` (``variants``), ``name`` (an abbreviation not resolved) or
    ``unknown``.
    """

    kind: str
    dims: tuple[Dim, ...] = ()
    name: str | None = None
    fields: tuple[tuple[str, "TypeExpr"], ...] = ()
    variants: tuple[tuple[str, tuple["TypeExpr", ...]], ...] = ()
    unique: bool = False

    @property
    def rank(self) -> int:
        return len(self.dims)

    def __str__(self) -> str:
        """Futhark spelling, e.g. ``*[n][]f32`` or ``{x: f32, y: f32}``."""
        dims = "".join(f"[{'' if d is None else d}]" for d in self.dims)
        if self.kind in ("prim", "name"):
            body = str(self.name)
        elif self.kind == "record":
            body = "{" + ", ".join(f"{n}: {t}" for n, t in self.fields) + "}"
        elif self.kind == "tuple":
            body = "(" + ", ".join(str(t) for _, t in self.fields) + ")"
        elif self.kind == "sum":
            body = " | ".join(" ".join([f"#{n}", *(str(p) for p in ps)]) for n, ps in self.variants)
            body = f"({body})" if dims else body
        else:
            body = "?"
        return ("*" if self.unique else "") + dims + body

    def with_dims(self, outer: tuple[Dim, ...], unique: bool | None = None) -> "TypeExpr":
        return TypeExpr(
            self.kind,
            outer + self.dims,
            self.name,
            self.fields,
            self.variants,
            self.unique if unique is None else unique,
        )


UNKNOWN = TypeExpr("unknown")


@dataclass(frozen=True)
class ParamDecl:
    name: str | None  # None for a pattern parameter such as ((a, b): (f32, f32))
    type: TypeExpr


@dataclass(frozen=True)
class EntryDecl:
    name: str
    size_params: tuple[str, ...]
    params: tuple[ParamDecl, ...]
    line: int
    result: TypeExpr | None = None  # the return type, when it could be read

    def result_size_names(self) -> set[str]:
        """Size names in the return type (``[nbins]i32`` -> {"nbins"})."""
        return _dim_names(self.result) if self.result is not None else set()

    def param(self, name: str) -> ParamDecl | None:
        for p in self.params:
            if p.name == name:
                return p
        return None


@dataclass(frozen=True)
class SourceInfo:
    entries: Mapping[str, EntryDecl]
    types: Mapping[str, TypeExpr] = field(default_factory=dict)
    docs: Mapping[str, str] = field(default_factory=dict)  # entry or type name -> its doc comment


class _ParseError(Exception):
    pass


class _Parser:
    def __init__(self, tokens: list[Token]):
        self.t = tokens
        self.i = 0

    def peek(self, k: int = 0) -> Token | None:
        j = self.i + k
        return self.t[j] if j < len(self.t) else None

    def at(self, text: str, k: int = 0) -> bool:
        tok = self.peek(k)
        return tok is not None and tok.text == text

    def next(self) -> Token:
        tok = self.peek()
        if tok is None:
            raise _ParseError("unexpected end of input")
        self.i += 1
        return tok

    def expect(self, text: str) -> Token:
        tok = self.next()
        if tok.text != text:
            raise _ParseError(f"line {tok.line}: expected {text!r}, found {tok.text!r}")
        return tok

    def skip_balanced(self, open_: str, close: str) -> None:
        """Skip from an opening bracket to its partner."""
        depth = 0
        while True:
            tok = self.next()
            if tok.text == open_:
                depth += 1
            elif tok.text == close:
                depth -= 1
                if depth == 0:
                    return

    # -- types
    def dim(self) -> Dim:
        """Inside ``[...]``: a name, an integer literal, or anything else (unknown)."""
        self.expect("[")
        if self.at("]"):
            self.next()
            return None
        toks: list[Token] = []
        depth = 1
        while True:
            tok = self.next()
            if tok.text == "[":
                depth += 1
            elif tok.text == "]":
                depth -= 1
                if depth == 0:
                    break
            toks.append(tok)
        if len(toks) == 1 and toks[0].kind == "ident" and toks[0].text not in _KEYWORDS:
            return toks[0].text
        if len(toks) == 1 and toks[0].kind == "num":
            m = re.fullmatch(r"(\d+)(?:[iu](?:8|16|32|64))?", toks[0].text)
            if m:
                return int(m.group(1))
        try:  # a size expression such as [n+1], in the grammar kernels and strategies share
            expr = parse_size(" ".join(t.text for t in toks), futhark=True)
        except SizeExprError:
            return None  # something else (a function call, a name with a quote): not tracked
        return expr if expr.names else None

    def type_(self) -> TypeExpr:
        """A full type, possibly a function type or a sum type (both only described loosely)."""
        if self.peek() is not None and self.peek().kind == "ctor":  # type: ignore[union-attr]
            return self.sum_type()
        t = self.array_type()
        if self.at("->"):  # function types cannot be entry-point inputs we can generate
            self.next()
            self.type_()
            return UNKNOWN
        return t

    def sum_type(self) -> TypeExpr:
        variants: list[tuple[str, tuple[TypeExpr, ...]]] = []
        while True:
            ctor = self.next()
            if ctor.kind != "ctor":
                raise _ParseError(f"line {ctor.line}: expected a constructor, found {ctor.text!r}")
            payload: list[TypeExpr] = []
            while self._starts_atom():
                payload.append(self.array_type(allow_application=False))
            variants.append((ctor.text[1:], tuple(payload)))
            if not self.at("|"):
                break
            self.next()
        return TypeExpr("sum", variants=tuple(variants))

    def _starts_atom(self) -> bool:
        tok = self.peek()
        if tok is None:
            return False
        if tok.text in ("(", "{", "[", "*", "?"):
            return True
        return tok.kind == "ident" and tok.text not in _KEYWORDS

    def array_type(self, allow_application: bool = True) -> TypeExpr:
        unique = False
        if self.at("*"):
            self.next()
            unique = True
        if self.at("?"):  # existential sizes ?[n].t: the names are local, the dims unknown-ish
            self.next()
            while self.at("["):
                self.skip_balanced("[", "]")
            self.expect(".")
        dims: list[Dim] = []
        while self.at("["):
            dims.append(self.dim())
        elem = self.atom(allow_application)
        return elem.with_dims(tuple(dims), unique=unique or elem.unique)

    def atom(self, allow_application: bool = True) -> TypeExpr:
        tok = self.next()
        if tok.text == "(":
            if self.at(")"):
                self.next()
                return TypeExpr("tuple")  # unit
            items = [self.type_()]
            while self.at(","):
                self.next()
                items.append(self.type_())
            self.expect(")")
            if len(items) == 1:
                return items[0]  # [](f32) is []f32
            return TypeExpr("tuple", fields=tuple((str(k), t) for k, t in enumerate(items)))
        if tok.text == "{":
            fields: list[tuple[str, TypeExpr]] = []
            while not self.at("}"):
                name = self.next()
                self.expect(":")
                fields.append((name.text, self.type_()))
                if self.at(","):
                    self.next()
            self.expect("}")
            # Futhark orders record fields by name in the manifest; keep that order here too.
            return TypeExpr("record", fields=tuple(sorted(fields, key=lambda f: _field_key(f[0]))))
        if tok.kind == "ident" and tok.text not in _KEYWORDS:
            if tok.text in PRIMITIVES:
                return TypeExpr("prim", name=tok.text)
            applied = False
            # A type application (`vec [n]`, `arr f32`) names a parametric type: unknown.
            while allow_application and (self.at("[") or self._starts_plain_arg()):
                applied = True
                if self.at("["):
                    self.skip_balanced("[", "]")
                else:
                    self.atom(allow_application=False)
            return UNKNOWN if applied else TypeExpr("name", name=tok.text)
        raise _ParseError(f"line {tok.line}: unexpected {tok.text!r} in a type")

    def _starts_plain_arg(self) -> bool:
        tok = self.peek()
        if tok is None:
            return False
        if tok.text in ("(", "{"):
            return True
        return tok.kind == "ident" and tok.text not in _KEYWORDS

    # -- declarations
    def entry(self) -> EntryDecl:
        head = self.expect("entry")
        name_tok = self.next()
        if name_tok.kind != "ident":
            raise _ParseError(f"line {name_tok.line}: expected an entry-point name")
        sizes: list[str] = []
        params: list[ParamDecl] = []
        while True:
            if self.at("["):
                d = self.dim()
                if isinstance(d, str):
                    sizes.append(d)
            elif self.at("("):
                params.append(self.param())
            elif self.peek() is not None and self.peek().kind == "ident" and not self.at(":"):  # type: ignore[union-attr]
                tok = self.next()  # an unannotated parameter: its type is unknown
                params.append(ParamDecl(tok.text, UNKNOWN))
            else:
                break
        result = None
        if self.at(":"):
            self.next()
            try:
                result = self.type_()
            except _ParseError:
                result = None  # the parameters are what matter; a strange result type is fine
        return EntryDecl(name_tok.text, tuple(sizes), tuple(params), head.line, result)

    def param(self) -> ParamDecl:
        start = self.i
        self.expect("(")
        name_tok = self.peek()
        if name_tok is not None and name_tok.kind == "ident" and self.at(":", 1):
            self.next()
            self.next()
            t = self.type_()
            self.expect(")")
            return ParamDecl(name_tok.text, t)
        # A pattern parameter: skip it as a whole.
        self.i = start
        self.skip_balanced("(", ")")
        return ParamDecl(None, UNKNOWN)

    def type_decl(self) -> tuple[str, TypeExpr] | None:
        self.expect("type")
        if self.peek() is not None and self.peek().text in ("^", "~"):  # type: ignore[union-attr]
            self.next()
        name = self.next()
        parametric = False
        while not self.at("="):
            tok = self.next()  # size or type parameters: the abbreviation is parametric
            if tok.text == "[":
                self.i -= 1
                self.skip_balanced("[", "]")
            parametric = True
        self.expect("=")
        body = self.type_()
        if parametric or name.kind != "ident":
            return None
        return name.text, body


def size_names(t: TypeExpr) -> set[str]:
    """Every size name in ``t`` (``[n][m]f32`` -> {"n", "m"}), fields and payloads included."""
    return _dim_names(t)


def _dim_names(t: TypeExpr) -> set[str]:
    names = {d for d in t.dims if isinstance(d, str)}
    for d in t.dims:
        if isinstance(d, SizeExpr):
            names |= d.names
    for _, f in t.fields:
        names |= _dim_names(f)
    for _, ps in t.variants:
        for p in ps:
            names |= _dim_names(p)
    return names


def _field_key(name: str) -> tuple[int, int | str]:
    return (0, int(name)) if name.isdigit() else (1, name)


def _top_level_starts(tokens: list[Token], keyword: str) -> Iterator[int]:
    """Indices of ``keyword`` tokens that start a top-level declaration.

    Futhark has no layout rule, so we approximate "top level" as: not inside brackets and not
    inside a ``module ... = { ... }`` body (whose entries are not entry points anyway).
    """
    depth = 0
    for i, tok in enumerate(tokens):
        if tok.text in ("(", "[", "{"):
            depth += 1
        elif tok.text in (")", "]", "}"):
            depth = max(0, depth - 1)
        elif depth == 0 and tok.text == keyword and tok.kind == "ident":
            yield i


def _parse_each(tokens: list[Token], keyword: str, parse: Callable[["_Parser"], Any]) -> Iterator[Any]:
    """``parse`` at every top-level ``keyword``; declarations that do not parse are skipped."""
    for i in _top_level_starts(tokens, keyword):
        p = _Parser(tokens)
        p.i = i
        try:
            yield parse(p)
        except _ParseError:
            continue


def parse_source(source: str) -> SourceInfo:
    """Entry-point headers and type abbreviations of a Futhark program's text.

    Headers that cannot be parsed are left out (the caller falls back to its defaults).
    """
    tokens = tokenize(source)
    types: dict[str, TypeExpr] = {}
    for got in _parse_each(tokens, "type", _Parser.type_decl):
        if got is not None:
            types[got[0]] = got[1]
    entries: dict[str, EntryDecl] = {}
    for e in _parse_each(tokens, "entry", _Parser.entry):
        resolved = tuple(ParamDecl(q.name, resolve(q.type, types)) for q in e.params)
        result = resolve(e.result, types) if e.result is not None else None
        entries[e.name] = EntryDecl(e.name, e.size_params, resolved, e.line, result)
    return SourceInfo(entries, types, doc_comments(source))


_DOC_TARGET = re.compile(r"\s*(?:entry|type[\^~]?|module\s+type)\s+([A-Za-z_][\w']*)")


def doc_comments(source: str) -> dict[str, str]:
    """``name -> doc`` for every ``entry`` / ``type`` preceded by a ``-- |`` comment block."""
    docs: dict[str, str] = {}
    block: list[str] | None = None
    for line in source.split("\n"):  # Futhark's lines: a form feed or U+2028 does not end a comment
        stripped = line.strip()
        if stripped.startswith("-- |") or stripped == "--|":
            block = [stripped[4:].strip()]
        elif stripped.startswith("--") and block is not None:
            block.append(stripped[2:].removeprefix(" "))
        elif stripped.startswith("--"):
            continue
        else:
            if block is not None and stripped:
                m = _DOC_TARGET.match(line)
                if m:
                    docs[m.group(1)] = "\n".join(block).strip()
            block = None
    return docs


def spelled_with_sizes(type_name: str, unique: bool, declared: TypeExpr | None = None) -> str:
    """The manifest's spelling (``*[]f32``, ``[]point``), with the source's size names where the
    ``.fut`` header declares an array of the same rank (``*[n]f32``, ``[n]point``): the manifest
    leaves sizes out. A header type of another rank (an abbreviation from elsewhere) adds none."""
    rank, elem = split_array_type(type_name)
    if rank and declared is not None and declared.kind != "unknown" and declared.rank == rank:
        if declared.kind != "prim" or declared.name == elem:
            type_name = "".join(f"[{'' if d is None else d}]" for d in declared.dims) + elem
    return ("*" if unique else "") + type_name


def declared_results(decl: EntryDecl | None, n: int) -> list[TypeExpr | None]:
    """The source's type of each of ``n`` results: the result type itself, or its tuple's components."""
    result = decl.result if decl is not None else None
    if result is None:
        return [None] * n
    if n == 1:
        return [result]
    if result.kind == "tuple" and not result.dims and len(result.fields) == n:
        return [t for _, t in result.fields]
    return [None] * n


def resolve(t: TypeExpr, types: Mapping[str, TypeExpr], _seen: frozenset[str] = frozenset()) -> TypeExpr:
    """Replace the file's own abbreviations by their definitions; others stay ``name``."""
    if t.kind == "name" and t.name is not None and t.name in types and t.name not in _seen:
        body = resolve(types[t.name], types, _seen | {t.name})
        return body.with_dims(t.dims, unique=t.unique or body.unique)
    if t.kind in ("record", "tuple"):
        fields = tuple((n, resolve(f, types, _seen)) for n, f in t.fields)
        return TypeExpr(t.kind, t.dims, t.name, fields, t.variants, t.unique)
    if t.kind == "sum":
        variants = tuple((n, tuple(resolve(p, types, _seen) for p in ps)) for n, ps in t.variants)
        return TypeExpr(t.kind, t.dims, t.name, t.fields, variants, t.unique)
    return t


def parse_entry_header(text: str) -> EntryDecl:
    """Parse one ``entry ...`` header (the text may stop at ``:`` or ``=`` or go on)."""
    info = parse_source(text)
    if len(info.entries) != 1:
        raise ValueError(f"expected exactly one entry header, found {len(info.entries)}")
    return next(iter(info.entries.values()))


def parse_dims(text: str) -> tuple[Dim, ...]:
    """``"[n][m]"`` (or ``"[n][m]f32"``) -> ``("n", "m")``; used for the ``sizes=`` shorthand."""
    p = _Parser(tokenize(text))
    dims: list[Dim] = []
    try:
        while p.at("["):
            dims.append(p.dim())
    except _ParseError as e:
        raise ValueError(f"cannot read dimensions from {text!r}: {e}") from None
    if not dims:
        raise ValueError(f"no dimensions in {text!r}; write them as '[n][m]'")
    return tuple(dims)


def load_source(path: str | Path) -> SourceInfo:
    return parse_source(Path(path).read_text())


__all__ = [
    "Dim",
    "EntryDecl",
    "ParamDecl",
    "SourceInfo",
    "TypeExpr",
    "UNKNOWN",
    "declared_results",
    "doc_comments",
    "load_source",
    "parse_dims",
    "parse_entry_header",
    "parse_source",
    "resolve",
    "size_names",
    "spelled_with_sizes",
    "tokenize",
]
