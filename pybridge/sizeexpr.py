"""Size expressions: the one parser and evaluator of element counts such as ``m*n`` or
``(n + 2047) / 2048``, shared by kernel argument checks (``pybridge.cuda.signature``), hypothesis
size draws (``pybridge.testing.strategies``) and Futhark size rules (``pybridge.futhark.sizes``).

Grammar: integer literals, names, ``+ - * / %`` (``//`` is accepted for ``/``; both round down, as
sizes are integers), unary ``-`` and ``+``, parentheses, ``min(a, b)`` and ``max(a, b)``. Futhark
text (``parse_size(..., futhark=True)``) keeps Futhark's meaning of ``//``: division rounding
towards zero (``(0 - 1) // 2 == 0``), as its ``/`` and ``%`` round down.

Pure Python; imports nothing of pybridge but the exception root.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Union

from .errors import PybridgeError

__all__ = [
    "MAX_SIZE_NESTING",
    "MAX_SIZE_TOKENS",
    "SizeExpr",
    "SizeExprError",
    "evaluate_size",
    "parse_size",
]


class SizeExprError(PybridgeError, ValueError):
    """Text that cannot be read; the message quotes the text and puts a caret under the bad spot.

    ``reason`` is the message without the quote; ``text`` and ``pos`` say where (either may be None).
    """

    def __init__(self, message: str, text: str | None = None, pos: int | None = None) -> None:
        self.reason = message
        self.text = text
        self.pos = pos
        if text is not None and pos is not None:
            pos = max(0, min(pos, len(text)))
            message = f"{message}\n  {text}\n  {' ' * pos}^"
        super().__init__(message)


_Node = Union[int, str, tuple[str, "_Node", "_Node"], tuple[str, "_Node"]]


@dataclass(frozen=True)
class SizeExpr:
    """A parsed size expression; ``text`` is its canonical spelling (whitespace collapsed)."""

    text: str
    tree: _Node

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.ordered_names())

    def ordered_names(self) -> list[str]:
        """The names in order of first appearance (``"m*k + m"`` -> ``["m", "k"]``)."""
        found: dict[str, None] = {}

        def walk(node: _Node) -> None:
            if isinstance(node, str):
                found[node] = None
            elif isinstance(node, tuple):
                for child in node[1:]:
                    walk(child)

        walk(self.tree)
        return list(found)

    def evaluate(self, env: Mapping[str, int]) -> int:
        """The value for the names in ``env``. KeyError names a missing name; division by zero
        raises ZeroDivisionError quoting the expression."""

        def ev(node: _Node) -> int:
            if isinstance(node, int):
                return node
            if isinstance(node, str):
                try:
                    value = env[node]
                except KeyError:
                    raise KeyError(f"size expression {self.text!r} needs {node!r}") from None
                try:
                    return operator.index(value)  # ints and NumPy ints; never truncates 2.7 to 2
                except TypeError:
                    raise TypeError(f"size expression {self.text!r}: {node!r} must be an integer, "
                                    f"got {value!r} ({type(value).__name__})") from None
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
            if op == "quot":  # Futhark's //: rounds towards zero
                q = abs(a) // abs(b)
                return q if (a < 0) == (b < 0) else -q
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
            if op == "quot":  # Futhark text only; never compiled into a kernel check
                raise ValueError(f"size expression {self.text!r}: Futhark's // has no Python source here")
            return f"({src(left)} {'//' if op == '/' else op} {src(right)})"

        return src(self.tree)


# Limits that keep parsing, evaluation and compiled size checks far from Python's recursion and
# nesting limits: no kernel needs more.
MAX_SIZE_TOKENS = 128
MAX_SIZE_NESTING = 32

_EXPR_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_]\w*)|(//)|(.))")


@lru_cache(maxsize=512)
def parse_size(text: str, offset: int = 0, whole: str | None = None, *, futhark: bool = False) -> SizeExpr:
    """Parse a size expression such as ``m*n`` or ``(n + 2047) / 2048``.

    ``offset`` and ``whole``: where ``text`` sits in a longer text (a declaration), so that a
    :class:`SizeExprError` points into that text. ``futhark``: the text is Futhark's, whose ``//``
    rounds towards zero.
    """
    if not isinstance(text, str):
        raise TypeError(f"a size expression is a str, not {type(text).__name__}")
    whole = whole if whole is not None else text
    tokens: list[tuple[str, str, int]] = []
    pos = 0
    while pos < len(text):
        m = _EXPR_TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            break
        if m.group(1) is not None:
            tokens.append(("int", m.group(1), offset + m.start(1)))
        elif m.group(2) is not None:
            tokens.append(("name", m.group(2), offset + m.start(2)))
        elif m.group(3) is not None:
            tokens.append(("op", "quot" if futhark else "/", offset + m.start(3)))
        elif m.group(4) is not None:
            if m.group(4).isspace():
                pos = m.end()
                continue
            tokens.append(("op", m.group(4), offset + m.start(4)))
        pos = m.end()
    tokens.append(("end", "", offset + len(text)))
    if len(tokens) - 1 > MAX_SIZE_TOKENS:
        raise SizeExprError(f"size expression too long: {len(tokens) - 1} tokens (at most {MAX_SIZE_TOKENS})", whole, offset)
    i = 0
    depth = 0

    def nest(at: int) -> None:
        nonlocal depth
        depth += 1
        if depth > MAX_SIZE_NESTING:
            raise SizeExprError(f"size expression nested too deeply (at most {MAX_SIZE_NESTING} levels)", whole, at)

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
        while peek()[0] == "op" and peek()[1] in ("*", "/", "%", "quot"):
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
            try:
                return int(value)
            except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
                raise SizeExprError(f"integer literal too long ({len(value)} digits)", whole, at) from None
        if kind == "name":
            if value in ("min", "max") and peek()[0] == "op" and peek()[1] == "(":
                nest(take()[2])
                first = expr()
                kind2, value2, at2 = take()
                if (kind2, value2) != ("op", ","):
                    raise SizeExprError(f"{value}() takes two arguments: expected ','", whole, at2)
                second = expr()
                kind2, value2, at2 = take()
                if (kind2, value2) != ("op", ")"):
                    raise SizeExprError(f"expected ')' to close {value}(", whole, at2)
                depth -= 1
                return (value, first, second)
            return value
        if kind == "op" and value == "(":
            nest(at)
            node = expr()
            kind2, value2, at2 = take()
            if (kind2, value2) != ("op", ")"):
                raise SizeExprError("expected ')' in size expression", whole, at2)
            depth -= 1
            return node
        what = "end of size expression" if kind == "end" else f"{value!r}"
        raise SizeExprError(f"expected a number, a name or '(' in size expression, got {what}", whole, at)

    if len(tokens) == 1:
        raise SizeExprError("empty size expression", whole, offset)
    tree = expr()
    kind, value, at = peek()
    if kind != "end":
        raise SizeExprError(f"unexpected {value!r} in size expression", whole, at)
    return SizeExpr(" ".join(text.split()), tree)


def evaluate_size(text: str | int, env: Mapping[str, int]) -> int:
    """The value of a size expression (or a literal size) for the names in ``env``."""
    if isinstance(text, int):
        return text
    if not isinstance(text, str):
        raise TypeError(f"a size expression is a str or an int, not {type(text).__name__}")
    return parse_size(text).evaluate(env)
