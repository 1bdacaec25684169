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

Pure Python and NumPy: importable and testable without CUDA.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Union

import numpy as np
from ..errors import PybridgeError

__all__ = [
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


class SignatureError(PybridgeError, ValueError):
    """A declaration that cannot be parsed; the message quotes the text and marks the bad spot."""

    def __init__(self, message: str, text: str | None = None, pos: int | None = None) -> None:
        self.reason = message
        self.text = text
        self.pos = pos
        if text is not None and pos is not None:
            pos = max(0, min(pos, len(text)))
            message = f"{message}\n  {text}\n  {' ' * pos}^"
        super().__init__(message)


class SizeDivisionError(PybridgeError, ValueError, ZeroDivisionError):
    """A size expression divides by zero for the values given (a ValueError naming kernel and
    parameter; still a ZeroDivisionError for code that caught that)."""


# Spellings accepted for each scalar type. Multi-word C spellings are matched after collapsing
# whitespace. `long` is 64 bits: CUDA on Linux is LP64.
_TYPE_SPELLINGS: dict[str, tuple[str, ...]] = {
    "int8": ("int8", "int8_t", "i8", "signed char", "char"),
    "int16": ("int16", "int16_t", "i16", "short", "short int", "signed short", "signed short int"),
    "int32": ("int32", "int32_t", "i32", "int", "signed", "signed int"),
    "int64": (
        "int64", "int64_t", "i64", "long", "long int", "signed long", "long long", "long long int",
        "signed long long", "signed long long int", "ptrdiff_t", "ssize_t", "intptr_t",
    ),
    "uint8": ("uint8", "uint8_t", "u8", "unsigned char"),
    "uint16": ("uint16", "uint16_t", "u16", "unsigned short", "unsigned short int"),
    "uint32": ("uint32", "uint32_t", "u32", "unsigned", "unsigned int"),
    "uint64": (
        "uint64", "uint64_t", "u64", "unsigned long", "unsigned long int", "unsigned long long",
        "unsigned long long int", "size_t", "uintptr_t",
    ),
    "float16": ("float16", "half", "__half", "f16"),
    "float32": ("float", "float32", "f32"),
    "float64": ("double", "float64", "f64"),
    "bool": ("bool", "_Bool"),
}

#: Every accepted scalar spelling -> its NumPy dtype.
SCALAR_TYPES: dict[str, np.dtype] = {
    spelling: np.dtype(canonical)
    for canonical, spellings in _TYPE_SPELLINGS.items()
    for spelling in spellings
}

# The C spelling used when a declaration is turned back into C (cffi cdefs, error messages).
_C_NAMES: dict[np.dtype, str] = {
    np.dtype(np.int8): "int8_t",
    np.dtype(np.int16): "int16_t",
    np.dtype(np.int32): "int32_t",
    np.dtype(np.int64): "int64_t",
    np.dtype(np.uint8): "uint8_t",
    np.dtype(np.uint16): "uint16_t",
    np.dtype(np.uint32): "uint32_t",
    np.dtype(np.uint64): "uint64_t",
    np.dtype(np.float16): "uint16_t",  # C has no half; it travels as its IEEE bits
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
    np.dtype(np.bool_): "bool",
}

# Short names used when printing a declaration back.
_SHORT_NAMES: dict[np.dtype, str] = {
    np.dtype(np.float16): "half",
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
    np.dtype(np.bool_): "bool",
}


def c_type_name(dtype: np.dtype) -> str:
    """C type for one element of ``dtype`` (``float16`` maps to ``uint16_t``, its bits)."""
    return _C_NAMES[np.dtype(dtype)]


# Every declarable dtype's short name, computed once: ``dtype.name`` is Python code in NumPy
# (``_name_get``) and costs microseconds, which error messages need but launches must not pay.
_SHORT_NAME_OF: dict[np.dtype, str] = {dt: _SHORT_NAMES.get(dt, dt.name) for dt in SCALAR_TYPES.values()}


def _short_name(dtype: np.dtype) -> str:
    try:
        return _SHORT_NAME_OF[dtype]
    except (KeyError, TypeError):
        return _SHORT_NAMES.get(dtype, dtype.name)


# ---------------------------------------------------------------------------- size expressions

_Node = Union[int, str, tuple[str, "_Node", "_Node"], tuple[str, "_Node"]]


@dataclass(frozen=True)
class SizeExpr:
    """A parsed size expression: integer literals, names, ``+ - * / %``, unary minus, parentheses,
    ``min(a, b)`` and ``max(a, b)``."""

    text: str
    tree: _Node

    @property
    def names(self) -> frozenset[str]:
        found: set[str] = set()

        def walk(node: _Node) -> None:
            if isinstance(node, str):
                found.add(node)
            elif isinstance(node, tuple):
                for child in node[1:]:
                    walk(child)

        walk(self.tree)
        return frozenset(found)

    def evaluate(self, env: Mapping[str, int]) -> int:
        def ev(node: _Node) -> int:
            if isinstance(node, int):
                return node
            if isinstance(node, str):
                try:
                    return int(env[node])
                except KeyError:
                    raise KeyError(f"size expression {self.text!r} needs {node!r}") from None
            if len(node) == 2:
                return -ev(node[1])
            op, left, right = node
            a, b = ev(left), ev(right)
            if op == "+":
                return a + b
            if op == "-":
                return a - b
            if op == "*":
                return a * b
            if op == "min":
                return min(a, b)
            if op == "max":
                return max(a, b)
            if b == 0:
                raise ZeroDivisionError(f"division by zero in size expression {self.text!r}")
            return a // b if op == "/" else a % b

        return ev(self.tree)

    def __str__(self) -> str:
        return self.text

    def python_source(self, name_to_source: Mapping[str, str]) -> str:
        """The expression as Python source, each name replaced by ``name_to_source[name]``
        (``/`` becomes ``//``: both round down). Used to compile size checks once per kernel;
        :meth:`evaluate` stays the reference (and gives the error messages)."""

        def src(node: _Node) -> str:
            if isinstance(node, int):
                return repr(node)
            if isinstance(node, str):
                return name_to_source[node]
            if len(node) == 2:
                return f"(-{src(node[1])})"
            op, left, right = node
            if op in ("min", "max"):
                return f"{op}({src(left)}, {src(right)})"
            return f"({src(left)} {'//' if op == '/' else op} {src(right)})"

        return src(self.tree)


# Limits that keep parsing, evaluation and the compiled size check (kernel.py) far from Python's
# recursion and nesting limits: no kernel needs more.
MAX_SIZE_TOKENS = 128
MAX_SIZE_NESTING = 32

_EXPR_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_]\w*)|(.))")


@lru_cache(maxsize=512)
def parse_size_expr(text: str, _offset: int = 0, _whole: str | None = None) -> SizeExpr:
    """Parse a size expression such as ``m*n`` or ``(n + 2047) / 2048``."""
    whole = _whole if _whole is not None else text
    tokens: list[tuple[str, str, int]] = []
    pos = 0
    while pos < len(text):
        m = _EXPR_TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            break
        if m.group(1) is not None:
            tokens.append(("int", m.group(1), _offset + m.start(1)))
        elif m.group(2) is not None:
            tokens.append(("name", m.group(2), _offset + m.start(2)))
        elif m.group(3) is not None:
            if m.group(3).isspace():
                pos = m.end()
                continue
            tokens.append(("op", m.group(3), _offset + m.start(3)))
        pos = m.end()
    tokens.append(("end", "", _offset + len(text)))
    if len(tokens) - 1 > MAX_SIZE_TOKENS:
        raise SignatureError(f"size expression too long: {len(tokens) - 1} tokens (at most {MAX_SIZE_TOKENS})", whole, _offset)
    i = 0
    depth = 0

    def nest(at: int) -> None:
        nonlocal depth
        depth += 1
        if depth > MAX_SIZE_NESTING:
            raise SignatureError(f"size expression nested too deeply (at most {MAX_SIZE_NESTING} levels)", whole, at)

    def peek() -> tuple[str, str, int]:
        return tokens[i]

    def take() -> tuple[str, str, int]:
        nonlocal i
        tok = tokens[i]
        i += 1
        return tok

    def expr() -> _Node:
        node = term()
        while peek()[0] == "op" and peek()[1] in "+-":
            op = take()[1]
            node = (op, node, term())
        return node

    def term() -> _Node:
        node = unary()
        while peek()[0] == "op" and peek()[1] in "*/%":
            op = take()[1]
            node = (op, node, unary())
        return node

    def unary() -> _Node:
        nonlocal depth
        if peek()[0] == "op" and peek()[1] == "-":
            nest(take()[2])
            node = ("neg", unary())
            depth -= 1
            return node
        if peek()[0] == "op" and peek()[1] == "+":
            take()
            return unary()
        return atom()

    def atom() -> _Node:
        nonlocal depth
        kind, value, at = take()
        if kind == "int":
            return int(value)
        if kind == "name":
            if value in ("min", "max") and peek()[0] == "op" and peek()[1] == "(":
                nest(take()[2])
                first = expr()
                kind2, value2, at2 = take()
                if (kind2, value2) != ("op", ","):
                    raise SignatureError(f"{value}() takes two arguments: expected ','", whole, at2)
                second = expr()
                kind2, value2, at2 = take()
                if (kind2, value2) != ("op", ")"):
                    raise SignatureError(f"expected ')' to close {value}(", whole, at2)
                depth -= 1
                return (value, first, second)
            return value
        if kind == "op" and value == "(":
            nest(at)
            node = expr()
            kind2, value2, at2 = take()
            if (kind2, value2) != ("op", ")"):
                raise SignatureError("expected ')' in size expression", whole, at2)
            depth -= 1
            return node
        what = "end of size expression" if kind == "end" else f"{value!r}"
        raise SignatureError(f"expected a number, a name or '(' in size expression, got {what}", whole, at)

    if len(tokens) == 1:
        raise SignatureError("empty size expression", whole, _offset)
    tree = expr()
    kind, value, at = peek()
    if kind != "end":
        raise SignatureError(f"unexpected {value!r} in size expression", whole, at)
    canonical = " ".join(text.split())
    return SizeExpr(canonical, tree)


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
_QUALIFIERS = {"__restrict__", "__restrict", "restrict", "volatile"}
_PREFIX_WORDS = ("__global__", "void", "static", "inline", "__device__")
# Words that can only be (part of) a type, never a parameter name.
_C_KEYWORDS = frozenset(
    {"int", "char", "short", "long", "unsigned", "signed", "float", "double", "bool", "_Bool", "void",
     "half", "__half"}
)


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _parse_param(text: str, start: int, end: int, seen: set[str]) -> tuple[Param, tuple[int, int] | None]:
    """Parse text[start:end] as one parameter; returns it and the span of its size expression."""
    pos = _skip_ws(text, start)
    if pos >= end:
        raise SignatureError("empty parameter", text, start)
    words: list[tuple[str, int]] = []  # identifiers and '*' before the brackets, with positions
    size_span: tuple[int, int] | None = None
    while pos < end:
        ch = text[pos]
        if ch.isspace():
            pos += 1
            continue
        if ch == "*":
            words.append(("*", pos))
            pos += 1
            continue
        if ch == "[":
            close = text.find("]", pos, end)
            if close < 0:
                raise SignatureError("missing ']' after size expression", text, pos)
            size_span = (pos + 1, close)
            pos = _skip_ws(text, close + 1)
            if pos < end:
                raise SignatureError(f"unexpected {text[pos]!r} after the size in brackets", text, pos)
            break
        m = _IDENT.match(text, pos, end)
        if m is None:
            raise SignatureError(f"unexpected character {ch!r} in parameter", text, pos)
        words.append((m.group(0), pos))
        pos = m.end()

    if not words:
        raise SignatureError("empty parameter", text, start)
    name, name_pos = words[-1]
    if name == "*" or name in _C_KEYWORDS or (name in SCALAR_TYPES and len(words) == 1):
        raise SignatureError("parameter has a type but no name", text, name_pos)
    if not _IDENT.fullmatch(name) or name in ("const",) or name in _QUALIFIERS:
        raise SignatureError(f"expected a parameter name, got {name!r}", text, name_pos)
    if name in seen:
        raise SignatureError(f"duplicate parameter name {name!r}", text, name_pos)

    is_const = False
    stars = 0
    type_words: list[tuple[str, int]] = []
    for word, at in words[:-1]:
        if word == "const":
            # `const` before the '*' qualifies the element (read-only data); after it, the pointer
            # variable itself, which does not matter to a caller.
            if stars == 0:
                is_const = True
            continue
        if word in _QUALIFIERS:
            continue
        if word == "*":
            stars += 1
            continue
        if stars:
            raise SignatureError(f"unexpected {word!r} after '*'", text, at)
        type_words.append((word, at))

    if not type_words:
        raise SignatureError(f"parameter {name!r} has no type", text, name_pos)
    type_text = " ".join(w for w, _ in type_words)
    type_pos = type_words[0][1]
    if stars > 1:
        raise SignatureError(f"pointer to pointer is not supported (parameter {name!r})", text, name_pos)
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
