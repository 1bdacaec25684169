"""Python spellings of Futhark names (parameters, entry points, record fields).

Futhark accepts names Python cannot use as parameters or attributes: keywords (``as``, ``lambda``,
``class``, ``None``), primes (``arr'``, ``x''``), the wildcard ``_`` several times in one entry
point, and numeric record fields (``{0: i32, 3: bool}``). The manifest records them exactly as
written. :func:`python_names` gives each one spelling by one rule, so signatures, keyword calls and
attribute access agree; the exact Futhark name always works too, by ``lib[name]``,
``lib.entry(name)``, ``handle[name]`` and ``handle.field(name)``.
"""

from __future__ import annotations

import keyword
import re
from typing import Mapping, Sequence

_PRIMES = re.compile(r"'+")
_NOT_IDENT = re.compile(r"[^0-9A-Za-z_]")


def _rewrite(name: str, position: int) -> str:
    if name == "_":
        return f"_{position}"  # Futhark's wildcard: may repeat, so it is named by its position
    s = _PRIMES.sub(lambda m: f"_{len(m.group())}", name)  # arr' -> arr_1, x'' -> x_2
    s = _NOT_IDENT.sub("_", s)
    if not s or s[0].isdigit():
        s = "_" + s  # numeric record fields: 0 -> _0
    if keyword.iskeyword(s):
        s += "_"  # as -> as_, None -> None_
    return s


def _keeps_spelling(name: str) -> bool:
    return name != "_" and name.isidentifier() and name.isascii() and not keyword.iskeyword(name)


def python_names(names: Sequence[str]) -> tuple[str, ...]:
    """One distinct, valid Python identifier per Futhark name, in order. The rule:

    1. a name that is already a valid identifier and not a keyword keeps its spelling (except ``_``);
    2. otherwise ``_`` at position i becomes ``_i``; each run of k primes becomes ``_k``
       (``arr'`` -> ``arr_1``, ``x''`` -> ``x_2``); a leading digit gets a ``_`` before it
       (field ``0`` -> ``_0``); a keyword gets a ``_`` after it (``as`` -> ``as_``);
    3. a rewritten name that equals a name taken before it gets more ``_`` appended until it is
       unique (``arr'`` beside a real ``arr_1`` becomes ``arr_1_``). Names of rule 1 are taken first.
    """
    taken = {n for n in names if _keeps_spelling(n)}
    out = []
    for i, n in enumerate(names):
        if _keeps_spelling(n):
            out.append(n)
            continue
        s = _rewrite(n, i)
        while s in taken:
            s += "_"
        taken.add(s)
        out.append(s)
    return tuple(out)


def name_lookup(names: Sequence[str]) -> dict[str, int]:
    """Every accepted spelling -> the position of its name: the Python spelling of each name, and
    the exact Futhark name itself where it is unambiguous (a repeated ``_`` only as ``_i``)."""
    table = {py: i for i, py in enumerate(python_names(names))}
    for i, n in enumerate(names):
        if names.count(n) == 1:
            table.setdefault(n, i)
    return table


def resolve_keys(given: Mapping[str, object], lookup: Mapping[str, int], canonical: Sequence[str], what: str) -> dict[str, object]:
    """Re-key ``given`` by ``canonical[position]`` (either spelling accepted, not both for one name);
    unknown keys are kept, so the caller reports them."""
    out: dict[str, object] = {}
    for k, v in given.items():
        key = canonical[lookup[k]] if k in lookup else k
        if key in out:
            raise TypeError(f"{what}: {key!r} given twice (by its Futhark name and its Python spelling)")
        out[key] = v
    return out
