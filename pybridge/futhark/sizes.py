"""Size rules of an entry point, read from its ``.fut`` header (the manifest writes ``[n]f32`` as
``[]f32``): which scalar parameters are sizes, and which arrays must agree in length.

Used before a call (a negative size makes Futhark's generated C ``exit(1)`` in libraries that
``csource.harden`` did not patch) and after a failed one (Futhark's "invalid sizes" error names no
parameter; ``explain`` names the ones that disagree).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from ..sizeexpr import SizeExpr
from .source import EntryDecl, size_names


@dataclass(frozen=True)
class SizeRules:
    """``size_params``: scalar parameters used as a size somewhere in the entry's types;
    ``dims``: size name -> [(parameter, axis)] of the array parameters it measures;
    ``exprs``: (parameter, axis, expression) of the axes whose length is a size expression
    (``[n+1]``), evaluated by :mod:`pybridge.sizeexpr`, the evaluator kernel checks use too."""

    size_params: frozenset[str]
    dims: dict[str, list[tuple[str, int]]]
    exprs: tuple[tuple[str, int, SizeExpr], ...] = field(default=())

    @classmethod
    def from_decl(cls, decl: EntryDecl | None) -> "SizeRules":
        if decl is None:
            return cls(frozenset(), {})
        used: set[str] = set(decl.result_size_names())
        dims: dict[str, list[tuple[str, int]]] = {}
        exprs: list[tuple[str, int, SizeExpr]] = []
        for p in decl.params:
            used |= size_names(p.type)
            if p.name is not None and p.type.kind == "prim":
                for axis, d in enumerate(p.type.dims):
                    if isinstance(d, str):
                        dims.setdefault(d, []).append((p.name, axis))
                    elif isinstance(d, SizeExpr):
                        exprs.append((p.name, axis, d))
        scalars = {p.name for p in decl.params if p.name is not None and not p.type.dims and p.type.kind == "prim"}
        return cls(frozenset(scalars & used), dims, tuple(exprs))

    def explain(self, names: Sequence[str], values: Sequence[Any]) -> str:
        """Which arguments' sizes disagree, e.g. "n: xs has 3 (axis 0), ys has 4 (axis 0)"."""
        shapes = {n: tuple(getattr(v, "shape", ())) for n, v in zip(names, values) if getattr(v, "shape", None) is not None}
        scalars = {n: v for n, v in zip(names, values) if n in self.size_params}
        parts = []
        for dim, uses in self.dims.items():
            seen = [(p, ax, shapes[p][ax]) for p, ax in uses if p in shapes and ax < len(shapes[p])]
            lengths = {n for _, _, n in seen}
            if dim in scalars:
                lengths.add(int(scalars[dim]))
            if len(lengths) > 1:
                got = ", ".join(f"{p} has {n} (axis {ax})" for p, ax, n in seen)
                extra = f", parameter {dim} = {scalars[dim]}" if dim in scalars else ""
                parts.append(f"[{dim}]: {got}{extra}")
        # Axes sized by an expression: evaluate it with the sizes the arguments give.
        known: dict[str, int] = {n: int(v) for n, v in scalars.items()}
        for dim, uses in self.dims.items():
            for p, ax in uses:
                if dim not in known and p in shapes and ax < len(shapes[p]):
                    known[dim] = shapes[p][ax]
        for p, ax, expr in self.exprs:
            if p not in shapes or ax >= len(shapes[p]) or not expr.names <= known.keys():
                continue
            try:
                want = expr.evaluate(known)
            except ZeroDivisionError:
                continue
            if shapes[p][ax] != want:
                used = ", ".join(f"{n} = {known[n]}" for n in sorted(expr.names))
                parts.append(f"[{expr}]: {p} has {shapes[p][ax]} (axis {ax}), {expr} = {want} (with {used})")
        if parts:
            return "sizes that must agree differ: " + "; ".join(parts)
        arrays = ", ".join(f"{n}: shape {s}" for n, s in shapes.items())
        return f"array arguments: {arrays}" if arrays else ""


__all__ = ["SizeRules"]
