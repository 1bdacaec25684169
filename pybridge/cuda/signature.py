"""Kernel declarations in a small, readable syntax.

    saxpy(float a, const float* x[n], const float* y[n], float* out[n], int64 n)

A declaration names the kernel and its parameters in order. A parameter is a scalar (``float a``,
``int64 n``, ``unsigned int k``) or a pointer (``const float* x``); a pointer may carry, in brackets
after its name, the number of elements it must hold as an expression over integer scalar
parameters and integer literals (``x[n]``, ``c[m*n]``, ``s[(n + 2047) / 2048]``; ``+ - * / %``,
parentheses and ``min(a, b)`` / ``max(a, b)``; ``/`` rounds down). Launches check that an array has
exactly that many elements. A leading ``extern "C"``, ``__global__`` and ``void`` are
accepted, so a kernel's C prototype can be pasted in. The same declaration drives argument checks
at launch and the hypothesis strategies of ``pybridge.testing``.

How it is read: the kernel name, the parentheses and each parameter's size in brackets are cut out
here (sizes are not C; :mod:`pybridge.sizeexpr` reads them), then each parameter is parsed as C by
pycparser and its declarator walked for pointer, const, type and name. Element types come from the
one primitive table, :mod:`pybridge.primitives`.

Pure Python and NumPy: importable and testable without CUDA.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from pycparser import c_ast, c_parser

from ..errors import PybridgeError
from ..primitives import BY_DTYPE, BY_SPELLING
from ..sizeexpr import SizeExpr, SizeExprError, parse_size

__all__ = [
    "C_KEYWORDS",
    "SCALAR_TYPES",
    "KernelSignature",
    "Param",
    "SignatureError",
    "SizeDivisionError",
    "SizeExpr",
    "c_type_name",
    "parse_signature",
    "parse_size_expr",
]


class SignatureError(SizeExprError):
    """A declaration that cannot be parsed; the message quotes the text and marks the bad spot."""


class SizeDivisionError(PybridgeError, ValueError, ZeroDivisionError):
    """A size expression divides by zero for the values given (a ValueError naming kernel and
    parameter; still a ZeroDivisionError for code that caught that)."""


#: Every accepted scalar spelling -> its NumPy dtype (from the one table, pybridge.primitives).
SCALAR_TYPES: dict[str, np.dtype] = {spelling: p.dtype for spelling, p in BY_SPELLING.items()}


def c_type_name(dtype: np.dtype) -> str:
    """C type for one element of ``dtype`` (``float16`` maps to ``uint16_t``, its bits)."""
    return BY_DTYPE[np.dtype(dtype)].ctype


# Every declarable dtype's short name, computed once: ``dtype.name`` is Python code in NumPy
# (``_name_get``) and costs microseconds, which error messages need but launches must not pay.
_SHORT_NAME_OF: dict[np.dtype, str] = {p.dtype: p.short for p in BY_DTYPE.values()}


def _short_name(dtype: np.dtype) -> str:
    try:
        return _SHORT_NAME_OF[dtype]
    except (KeyError, TypeError):
        return dtype.name


@lru_cache(maxsize=512)
def parse_size_expr(text: str, _offset: int = 0, _whole: str | None = None) -> SizeExpr:
    """Parse a size expression such as ``m*n`` or ``(n + 2047) / 2048`` (see
    :mod:`pybridge.sizeexpr`); a bad one raises :class:`SignatureError`."""
    try:
        return parse_size(text, _offset, _whole)
    except SignatureError:
        raise
    except SizeExprError as e:
        raise SignatureError(e.reason, e.text, e.pos) from None


# ---------------------------------------------------------------------------- declarations


@dataclass(frozen=True)
class Param:
    """One kernel parameter. ``size`` is the element-count expression of a pointer, or None."""

    name: str
    dtype: np.dtype
    is_pointer: bool
    is_const: bool
    size: str | None = None

    @property
    def size_expr(self) -> SizeExpr | None:
        return parse_size_expr(self.size) if self.size is not None else None

    @property
    def c_type(self) -> str:
        base = c_type_name(self.dtype)
        if not self.is_pointer:
            return base
        return f"const {base}*" if self.is_const else f"{base}*"

    def __str__(self) -> str:
        if not self.is_pointer:
            return f"{_short_name(self.dtype)} {self.name}"
        const = "const " if self.is_const else ""
        size = f"[{self.size}]" if self.size is not None else ""
        return f"{const}{_short_name(self.dtype)}* {self.name}{size}"


@dataclass(frozen=True)
class KernelSignature:
    """A kernel's name and parameters, from :func:`parse_signature`."""

    name: str
    params: tuple[Param, ...]

    def __str__(self) -> str:
        return f"{self.name}({', '.join(str(p) for p in self.params)})"

    @property
    def pointer_params(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.is_pointer)

    @property
    def scalar_params(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if not p.is_pointer)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(f"{self.name} has no parameter {name!r}")

    def sizes(self, args: Mapping[str, int]) -> dict[str, int]:
        """Element counts of the sized pointer parameters, given the integer scalars by name.

        ``args`` may hold more than the scalars (extra keys are ignored). Raises KeyError for a
        missing scalar and ValueError for a negative size.
        """
        out: dict[str, int] = {}
        for p in self.params:
            expr = p.size_expr
            if expr is None:
                continue
            try:
                value = expr.evaluate(args)
            except ZeroDivisionError as e:  # say which kernel and parameter, with the values
                used = ", ".join(f"{k}={args[k]}" for k in sorted(expr.names) if k in args)
                raise SizeDivisionError(f"kernel {self.name}, parameter {p.name}: {e} (with {used})") from None
            if value < 0:
                raise ValueError(f"{self.name}: size of {p.name} is {p.size} = {value}, which is negative")
            out[p.name] = value
        return out

    def size_names(self) -> frozenset[str]:
        """Scalar parameters that appear in some size expression."""
        names: set[str] = set()
        for p in self.params:
            expr = p.size_expr
            if expr is not None:
                names |= expr.names
        return frozenset(names)

    def c_declaration(self, *, return_type: str = "void", extra: tuple[str, ...] = ()) -> str:
        """The C prototype, e.g. for a cffi cdef: ``int launch_x(const float* x, int64_t n, void* stream);``."""
        parts = [f"{p.c_type} {p.name}" for p in self.params] + list(extra)
        return f"{return_type} {self.name}({', '.join(parts) or 'void'});"


_IDENT = re.compile(r"[A-Za-z_]\w*")
# CUDA's spellings of C's restrict qualifier, which pycparser does not know.
_CUDA_QUALIFIERS = frozenset({"__restrict__", "__restrict"})
_QUALIFIERS = frozenset({"restrict", "volatile"}) | _CUDA_QUALIFIERS
_PREFIX_WORDS = ("__global__", "void", "static", "inline", "__device__")
# Words that can only be (part of) a type, never a parameter name: C's own type keywords, which
# pycparser reads itself (every other spelling in SCALAR_TYPES is declared to it as a typedef).
_C_KEYWORDS = frozenset(
    {"int", "char", "short", "long", "unsigned", "signed", "float", "double", "bool", "_Bool", "void",
     "half", "__half"}
)
_PYCPARSER_KEYWORDS = frozenset(
    {"int", "char", "short", "long", "unsigned", "signed", "float", "double", "_Bool", "void", "const",
     "restrict", "volatile", "struct", "union", "enum"}
)
# C's reserved words (C11), none of which can name a parameter.
C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if inline int "
    "long register restrict return short signed sizeof static struct switch typedef union unsigned void "
    "volatile while _Alignas _Alignof _Atomic _Bool _Complex _Generic _Imaginary _Noreturn _Static_assert "
    "_Thread_local".split()
)
_PARAM_CHARS = re.compile(r"[\w\s*]*")
_PARSE_ERROR_AT = re.compile(r":(\d+):(\d+):\s*(?:before:\s*(.*))?")


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _c_param(text: str, start: int, end: int, words: list[tuple[str, int]]) -> c_ast.Node:
    """text[start:end] (one parameter, its size already cut off) parsed by pycparser: a Decl, a
    Typename (no name) or an ID (a name without a type, read as a K&R identifier list).

    Every word that stands where a type name may stand is declared as a typedef first, so that
    unknown types parse and get a message about the type rather than a syntax error."""
    typedefs = {w for w, _ in (words[:-1] if len(words) > 1 else words) if w not in _PYCPARSER_KEYWORDS and w not in _CUDA_QUALIFIERS}
    if len(words) == 1 and words[0][0] not in SCALAR_TYPES:
        typedefs.clear()  # a lone unknown word is a name without a type
    param = "".join(" " * len(w) if w in _CUDA_QUALIFIERS else w for w in re.split(r"(\w+)", text[start:end]))
    head = "void __pybridge_kernel("
    source = "".join(f"typedef int {t};\n" for t in sorted(typedefs)) + head + param + ");"
    try:
        unit = c_parser.CParser().parse(source, "")
    except c_parser.ParseError as e:
        m = _PARSE_ERROR_AT.search(str(e))
        line = len(typedefs) + 1
        pos = start
        if m is not None and int(m.group(1)) == line:
            pos = start + max(0, int(m.group(2)) - 1 - len(head))
        token = (m.group(3) or "").strip() if m is not None else ""
        what = f"unexpected {token!r} in parameter" if token else "cannot read the parameter as C"
        raise SignatureError(what, text, min(pos, end)) from None
    decl = unit.ext[-1]
    assert isinstance(decl, c_ast.Decl) and isinstance(decl.type, c_ast.FuncDecl)
    params = decl.type.args.params if decl.type.args is not None else []
    if len(params) != 1:
        raise SignatureError("expected one parameter", text, start)
    return params[0]


def _parse_param(text: str, start: int, end: int, seen: set[str]) -> tuple[Param, tuple[int, int] | None]:
    """Parse text[start:end] as one parameter; returns it and the span of its size expression.

    The size in brackets is cut off first (it is not C), the rest is read by pycparser."""
    pos = _skip_ws(text, start)
    if pos >= end:
        raise SignatureError("empty parameter", text, start)
    size_span: tuple[int, int] | None = None
    decl_end = end
    open_bracket = text.find("[", pos, end)
    if open_bracket >= 0:
        close = text.find("]", open_bracket, end)
        if close < 0:
            raise SignatureError("missing ']' after size expression", text, open_bracket)
        size_span = (open_bracket + 1, close)
        after = _skip_ws(text, close + 1)
        if after < end:
            raise SignatureError(f"unexpected {text[after]!r} after the size in brackets", text, after)
        decl_end = open_bracket
    bad = _PARAM_CHARS.match(text, pos, decl_end)
    if bad is not None and bad.end() < decl_end:
        raise SignatureError(f"unexpected character {text[bad.end()]!r} in parameter", text, bad.end())
    words = [(m.group(0), m.start()) for m in re.finditer(r"\w+|\*", text[:decl_end]) if m.start() >= pos]
    words = [(w, at) for w, at in words if w != "*"]
    if not words:
        raise SignatureError("empty parameter" if "*" not in text[pos:decl_end] else "parameter has a type but no name",
                             text, start if "*" not in text[pos:decl_end] else text.rfind("*", pos, decl_end))
    last, last_pos = words[-1]
    if last in _C_KEYWORDS or (last in SCALAR_TYPES and len(words) == 1):
        raise SignatureError("parameter has a type but no name", text, last_pos)
    if last in C_KEYWORDS or last in _QUALIFIERS or not _IDENT.fullmatch(last):
        keyword = " (a C keyword)" if last in C_KEYWORDS else ""
        raise SignatureError(f"expected a parameter name, got {last!r}{keyword}", text, last_pos)

    node = _c_param(text, pos, decl_end, words)
    if isinstance(node, c_ast.ID):
        raise SignatureError(f"parameter {node.name!r} has no type", text, last_pos)
    if isinstance(node, c_ast.Typename) or getattr(node, "name", None) is None:
        raise SignatureError("parameter has a type but no name", text, last_pos)
    name: str = node.name
    if name in seen:
        raise SignatureError(f"duplicate parameter name {name!r}", text, last_pos)

    # Walk the declarator: each PtrDecl is one '*'; `const` on the innermost TypeDecl qualifies the
    # element (read-only data), `const` on a PtrDecl the pointer variable, which a caller ignores.
    stars = 0
    t = node.type
    while isinstance(t, c_ast.PtrDecl):
        stars += 1
        t = t.type
    type_words = [(w, at) for w, at in words[:-1] if w != "const" and w not in _QUALIFIERS]
    if not type_words:  # pycparser would read `const x` as C89's implicit int
        raise SignatureError(f"parameter {name!r} has no type", text, last_pos)
    type_pos = type_words[0][1]
    if not isinstance(t, c_ast.TypeDecl):
        raise SignatureError(f"unsupported declarator for parameter {name!r}", text, last_pos)
    if not isinstance(t.type, c_ast.IdentifierType):
        kind = type(t.type).__name__.lower()
        raise SignatureError(f"unknown type '{kind} {getattr(t.type, 'name', '')}' for parameter {name!r}", text, type_pos)
    type_text = " ".join(t.type.names)
    is_const = "const" in t.quals
    if stars > 1:
        raise SignatureError(f"pointer to pointer is not supported (parameter {name!r})", text, last_pos)
    if type_text == "void":
        raise SignatureError(
            f"{'void*' if stars else 'void'} parameter {name!r}: give the element type (e.g. float*)",
            text,
            type_pos,
        )
    dtype = SCALAR_TYPES.get(type_text)
    if dtype is None:
        raise SignatureError(
            f"unknown type {type_text!r} for parameter {name!r} "
            f"(known: int8..int64, uint8..uint64, half, float, double, bool and their C spellings)",
            text,
            type_pos,
        )
    if size_span is not None and stars == 0:
        raise SignatureError(f"scalar parameter {name!r} cannot have a size in brackets", text, size_span[0] - 1)
    if stars == 0 and is_const:
        is_const = False  # a const scalar is just a scalar
    size: str | None = None
    if size_span is not None:
        s0, s1 = size_span
        try:
            expr = parse_size_expr(text[s0:s1], s0, text)
        except SignatureError as e:
            raise SignatureError(f"parameter {name!r}: {e.reason}", text, e.pos) from None
        size = expr.text
    seen.add(name)
    return Param(name, dtype, stars == 1, is_const, size), size_span


def _split_params(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Comma-separated spans in text[start:end], ignoring commas inside brackets or parentheses."""
    spans: list[tuple[int, int]] = []
    depth = 0
    begin = start
    for i in range(start, end):
        ch = text[i]
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            spans.append((begin, i))
            begin = i + 1
    spans.append((begin, end))
    return spans


@lru_cache(maxsize=1024)  # pycparser reads each parameter: parse a declaration once
def parse_signature(text: str) -> KernelSignature:
    """Parse a kernel declaration; raises :class:`SignatureError` pointing at the bad part."""
    if not isinstance(text, str):
        raise TypeError(f"a kernel declaration is a str, not {type(text).__name__}")
    pos = _skip_ws(text, 0)
    # Optional C prefix: extern "C" __global__ void
    if text.startswith("extern", pos):
        m = re.compile(r'extern\s*"C"').match(text, pos)
        if m is None:
            raise SignatureError('expected extern "C"', text, pos)
        pos = _skip_ws(text, m.end())
    while True:
        m = _IDENT.match(text, pos)
        if m is None or m.group(0) not in _PREFIX_WORDS:
            break
        after = _skip_ws(text, m.end())
        if after < len(text) and text[after] == "(":
            break  # the kernel is really called e.g. `inline`; let it through
        pos = after
    m = _IDENT.match(text, pos)
    if m is None:
        raise SignatureError("expected the kernel name", text, pos)
    name = m.group(0)
    pos = _skip_ws(text, m.end())
    if pos >= len(text) or text[pos] != "(":
        raise SignatureError(f"expected '(' after the kernel name {name!r}", text, pos)
    open_pos = pos
    close_pos = -1
    stack: list[tuple[str, int]] = []
    pairs = {")": "(", "]": "["}
    for i in range(open_pos, len(text)):
        ch = text[i]
        if ch in "([":
            stack.append((ch, i))
        elif ch in ")]":
            if not stack or stack[-1][0] != pairs[ch]:
                opener = f" (it does not close the {stack[-1][0]!r} at column {stack[-1][1]})" if stack else ""
                raise SignatureError(f"mismatched {ch!r}{opener}", text, i)
            stack.pop()
            if not stack:
                close_pos = i
                break
    if close_pos < 0:
        raise SignatureError("missing ')' at the end of the parameter list", text, len(text))
    rest = _skip_ws(text, close_pos + 1)
    if rest < len(text) and text[rest] == ";":
        rest = _skip_ws(text, rest + 1)
    if rest < len(text):
        raise SignatureError(f"unexpected {text[rest]!r} after the parameter list", text, rest)

    params: list[Param] = []
    spans: list[tuple[int, int] | None] = []
    inner = text[open_pos + 1 : close_pos]
    if inner.strip() and inner.strip() != "void":
        seen: set[str] = set()
        for s0, s1 in _split_params(text, open_pos + 1, close_pos):
            p, span = _parse_param(text, s0, s1, seen)
            params.append(p)
            spans.append(span)

    # Size expressions may only name integer scalar parameters of this kernel.
    by_name = {p.name: p for p in params}
    for p, span in zip(params, spans):
        if p.size is None or span is None:
            continue
        for ref in sorted(parse_size_expr(p.size).names):
            at = span[0] + max(0, text[span[0] : span[1]].find(ref))
            target = by_name.get(ref)
            if target is None:
                raise SignatureError(
                    f"size of {p.name!r} names {ref!r}, which is not a parameter of {name}", text, at
                )
            if target.is_pointer or target.dtype.kind not in "iu":
                raise SignatureError(
                    f"size of {p.name!r} names {ref!r}, which is not an integer scalar parameter", text, at
                )
    return KernelSignature(name, tuple(params))
