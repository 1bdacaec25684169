"""Kernel declarations read from CUDA C source, so that ``mod.kernel("saxpy")`` is enough.

Two ways to declare a kernel once, in the source itself (both use the syntax of
:mod:`pybridge.cuda.signature`):

* **size annotations on the kernel's own line**: a ``/*[expr]*/`` comment right after a pointer
  parameter's name gives its element count::

      extern "C" __global__ void saxpy(float a, const float* x /*[n]*/, const float* y /*[n]*/,
                                       float* out /*[n]*/, int64_t n) { ... }

  Every ``__global__`` function with C linkage (``extern "C"`` before it, or inside an
  ``extern "C" { ... }`` block) is read; pointers without an annotation are checked for device
  memory, dtype and writability but not length.
* **a marked comment** holding a whole declaration, for kernels whose line a macro writes or to
  keep the parameter list untouched: ``// pybridge: saxpy(float a, const float* x[n], ...)`` (or the
  same in ``/* ... */``). When the kernel's line is also found, the two must agree.

A hand-written declaration passed to ``mod.kernel(...)`` still works; when the source declares the
same kernel, they are compared parameter by parameter (name, type, pointer, const, and the size
where both give one) and a difference raises :class:`DeclarationMismatchError` naming the kernel
and the parameter. Sizes given by either side are all checked at launch.

How the source is read: comments, string literals and preprocessor lines are masked (a ``.cu``
file is CUDA C++ with includes, which no C parser takes whole), then the parameter list after each
``__global__`` is cut out up to its closing parenthesis and parsed like any declaration (its
parameters by pycparser, see :mod:`pybridge.cuda.signature`). Kernels a macro defines are invisible
here (use a marked comment); template kernels have no C linkage and are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from .signature import KernelSignature, Param, SignatureError, parse_signature

__all__ = [
    "DeclarationMismatchError",
    "SourceDeclarations",
    "reconcile",
    "read_declarations",
]

_IDENT = re.compile(r"[A-Za-z_]\w*")
_MARK = re.compile(r"^\s*pybridge\s*:", re.S)
_ANNOTATION = re.compile(r"^\s*\[(.*)\]\s*$", re.S)
_EXTERN_C = re.compile(r'extern\s*"C"\s*$')
_EXTERN_C_BLOCK = re.compile(r'\bextern\s*"C"\s*\{')
_GLOBAL = re.compile(r"\b__global__\b")
# Words that may stand between __global__ and the kernel's name; the ones in _CALL_LIKE take
# a parenthesised argument list.
_PREFIX_WORDS = frozenset({"void", "static", "inline", "__inline__", "__noinline__", "__forceinline__"})
_CALL_LIKE = frozenset({"__launch_bounds__", "__maxnreg__", "__cluster_dims__", "__attribute__", "__declspec"})


class DeclarationMismatchError(SignatureError):
    """A declaration disagrees with the kernel's source (or two declarations in one source do).

    ``kernel`` and ``parameter`` (None when the parameter counts differ) say where.
    """

    def __init__(self, message: str, kernel: str, parameter: str | None = None) -> None:
        self.kernel = kernel
        self.parameter = parameter
        super().__init__(message)


# ---------------------------------------------------------------------------- reading the source


@dataclass(frozen=True)
class _Comment:
    start: int
    end: int
    body: str  # without the // or /* */ markers


def _mask(source: str) -> tuple[str, list[_Comment]]:
    """The source with comments, preprocessor lines and string/char literal contents blanked
    (newlines kept, so offsets and line numbers stay), and the comments found."""
    out = list(source)
    comments: list[_Comment] = []
    i, n = 0, len(source)
    line_start = True  # only whitespace since the last newline: a '#' starts a directive

    def blank(a: int, b: int) -> None:
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        ch = source[i]
        if source.startswith("//", i):
            j = source.find("\n", i)
            j = n if j < 0 else j
            comments.append(_Comment(i, j, source[i + 2 : j]))
            blank(i, j)
            i = j
            continue
        if source.startswith("/*", i):
            j = source.find("*/", i + 2)
            j = n if j < 0 else j + 2
            comments.append(_Comment(i, j, source[i + 2 : max(i + 2, j - 2)]))
            blank(i, j)
            i = j
            continue
        if ch in "\"'":
            j = i + 1
            while j < n and source[j] != ch and source[j] != "\n":
                j += 2 if source[j] == "\\" else 1
            j = min(j + 1, n)
            if source[i:j] != '"C"':  # keep extern "C" readable
                blank(i + 1, j - 1)
            i = j
            line_start = False
            continue
        if ch == "#" and line_start:
            j = i
            while j < n and source[j] != "\n":
                if source.startswith("//", j) or source.startswith("/*", j):
                    break  # the comment is handled (and recorded) by the loop
                j += 2 if source.startswith("\\\n", j) else 1
            blank(i, j)
            i = j
            continue
        if ch == "\n":
            line_start = True
        elif not ch.isspace():
            line_start = False
        i += 1
    return "".join(out), comments


def _matching(text: str, open_pos: int, opener: str, closer: str) -> int:
    """Index of the closer matching text[open_pos] (== opener), or -1."""
    depth = 0
    for i in range(open_pos, len(text)):
        if text[i] == opener:
            depth += 1
        elif text[i] == closer:
            depth -= 1
            if depth == 0:
                return i
    return -1


def _line_of(source: str, pos: int) -> int:
    return source.count("\n", 0, pos) + 1


@dataclass(frozen=True)
class _Found:
    signature: KernelSignature | SignatureError
    where: str  # "<file> line N (the kernel's line)" / "... (pybridge: comment)"


def _c_linkage_regions(masked: str) -> list[tuple[int, int]]:
    regions = []
    for m in _EXTERN_C_BLOCK.finditer(masked):
        close = _matching(masked, m.end() - 1, "{", "}")
        regions.append((m.end(), close if close >= 0 else len(masked)))
    return regions


def _kernel_lines(source: str, masked: str, comments: list[_Comment], source_name: str) -> Iterator[tuple[str, _Found | None]]:
    """(name, found) per __global__ function; found is None for one without C linkage."""
    regions = _c_linkage_regions(masked)
    for m in _GLOBAL.finditer(masked):
        # What stands before __global__ since the previous statement or brace.
        start = max(masked.rfind(c, 0, m.start()) for c in ";{}") + 1
        before = masked[start : m.start()].strip()
        if re.search(r"\btemplate\b", before):
            continue
        c_linkage = bool(_EXTERN_C.search(before)) or any(a <= m.start() < b for a, b in regions)
        pos = m.end()
        name = None
        while True:
            w = _IDENT.match(masked, _skip_ws(masked, pos))
            if w is None:
                break
            word, pos = w.group(0), w.end()
            if word in _CALL_LIKE:
                open_pos = _skip_ws(masked, pos)
                if open_pos < len(masked) and masked[open_pos] == "(":
                    close = _matching(masked, open_pos, "(", ")")
                    pos = close + 1 if close >= 0 else len(masked)
                continue
            if word in _PREFIX_WORDS:
                continue
            name = word
            break
        open_pos = _skip_ws(masked, pos)
        if name is None or open_pos >= len(masked) or masked[open_pos] != "(":
            continue  # not a function we can read (a macro, or something odd): leave it alone
        close = _matching(masked, open_pos, "(", ")")
        if close < 0:
            continue
        if not c_linkage:
            yield name, None
            continue
        where = f"{source_name} line {_line_of(source, m.start())}"
        yield name, _Found(_parse_kernel_line(name, source, masked, comments, open_pos, close, where), where)


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _parse_kernel_line(
    name: str, source: str, masked: str, comments: list[_Comment], open_pos: int, close: int, where: str
) -> KernelSignature | SignatureError:
    # The parameter list with comments removed, except /*[expr]*/ annotations, which become [expr].
    pieces: list[str] = []
    pos = open_pos + 1
    for c in comments:
        if c.start < open_pos or c.end > close:
            continue
        pieces.append(masked[pos : c.start])
        ann = _ANNOTATION.match(c.body) if source.startswith("/*", c.start) else None
        pieces.append(f"[{ann.group(1)}]" if ann else " ")
        pos = c.end
    pieces.append(masked[pos:close])
    params = " ".join("".join(pieces).split())
    try:
        return parse_signature(f"{name}({params})")
    except SignatureError as e:
        return SignatureError(f"{where}: kernel {name}: {e.reason}", e.text, e.pos)


def _marked_comments(source: str, comments: list[_Comment], source_name: str) -> Iterator[tuple[str, _Found]]:
    for c in comments:
        m = _MARK.match(c.body)
        if m is None:
            continue
        text = " ".join(c.body[m.end() :].split())
        where = f"{source_name} line {_line_of(source, c.start)} (pybridge: comment)"
        head = re.match(r'\s*(?:extern\s*"C"\s*)?(?:__global__\s+)?(?:void\s+)?([A-Za-z_]\w*)\s*\(', text)
        if head is None:
            raise SignatureError(f"{where}: expected a kernel declaration such as saxpy(float a, const float* x[n], int64 n)", text, 0)
        try:
            found: KernelSignature | SignatureError = parse_signature(text)
        except SignatureError as e:
            found = SignatureError(f"{where}: kernel {head.group(1)}: {e.reason}", e.text, e.pos)
        yield head.group(1), _Found(found, where)


# ---------------------------------------------------------------------------- comparing


def _same_size(a: Param, b: Param) -> bool:
    ea, eb = a.size_expr, b.size_expr
    return ea is None or eb is None or ea.tree == eb.tree


def reconcile(first: KernelSignature, second: KernelSignature, first_is: str, second_is: str) -> KernelSignature:
    """``first`` with the sizes only ``second`` gives, after checking the two agree.

    Raises :class:`DeclarationMismatchError` naming the kernel and the first differing parameter;
    ``first_is`` / ``second_is`` say where each came from ("your declaration", "the source ...").
    """
    kernel = first.name
    if len(first.params) != len(second.params):
        raise DeclarationMismatchError(
            f"kernel {kernel}: {first_is} has {len(first.params)} parameters ({first}), "
            f"{second_is} has {len(second.params)} ({second})",
            kernel,
        )
    merged: list[Param] = []
    for i, (a, b) in enumerate(zip(first.params, second.params), 1):
        what = None
        if a.name != b.name:
            what = f"is called {a.name!r} in {first_is} but {b.name!r} in {second_is}"
        elif a.is_pointer != b.is_pointer or a.dtype != b.dtype:
            what = f"is '{a}' in {first_is} but '{b}' in {second_is}"
        elif a.is_const != b.is_const:
            what = f"is {'' if a.is_const else 'not '}const in {first_is} but {'' if b.is_const else 'not '}const in {second_is}"
        elif not _same_size(a, b):
            what = f"has size [{a.size}] in {first_is} but [{b.size}] in {second_is}"
        if what is not None:
            raise DeclarationMismatchError(f"kernel {kernel}, parameter {i} ({a.name}) {what}", kernel, a.name)
        merged.append(a if a.size is not None or b.size is None else b)
    return KernelSignature(kernel, tuple(merged))


# ---------------------------------------------------------------------------- the result


@dataclass(frozen=True)
class SourceDeclarations:
    """The kernels a source declares: name -> signature (or the error its declaration gave)."""

    source_name: str
    kernels: Mapping[str, KernelSignature | SignatureError]
    #: __global__ functions without C linkage: their names are mangled, so they cannot be loaded by name.
    cpp_kernels: frozenset[str] = field(default_factory=frozenset)

    def __contains__(self, name: object) -> bool:
        return name in self.kernels

    def __getitem__(self, name: str) -> KernelSignature:
        found = self.kernels.get(name)
        if isinstance(found, KernelSignature):
            return found
        if isinstance(found, SignatureError):
            raise found
        if name in self.cpp_kernels:
            raise KeyError(
                f'{self.source_name}: kernel {name!r} has C++ linkage (its name is mangled): declare it extern "C"'
            )
        known = ", ".join(sorted(self.kernels)) or 'none: kernels need extern "C" __global__'
        raise KeyError(f"{self.source_name} declares no kernel {name!r} (declared: {known})")

    def check(self, declared: KernelSignature) -> KernelSignature:
        """``declared`` checked against the source's declaration of the same kernel (if any)."""
        found = self.kernels.get(declared.name)
        if not isinstance(found, KernelSignature):
            return declared  # not in the source as we can read it (a macro?), or unreadable there
        return reconcile(declared, found, "your declaration", f"the source ({self.source_name})")

    def resolve(self, declaration: str | KernelSignature) -> KernelSignature:
        """A bare kernel name -> the source's declaration; a declaration -> checked against it."""
        if isinstance(declaration, str) and _IDENT.fullmatch(declaration.strip()):
            return self[declaration.strip()]
        sig = parse_signature(declaration) if isinstance(declaration, str) else declaration
        return self.check(sig)


def read_declarations(source: str, source_name: str = "<string>") -> SourceDeclarations:
    """Every kernel declaration in ``source`` (see the module docstring).

    A kernel declared twice (a prototype and its definition, or its line and a marked comment) gets
    the two reconciled; if they disagree, asking for that kernel raises the mismatch.
    """
    masked, comments = _mask(source)
    kernels: dict[str, KernelSignature | SignatureError] = {}
    places: dict[str, str] = {}
    cpp: set[str] = set()
    found_all: list[tuple[str, _Found | None]] = [
        *_marked_comments(source, comments, source_name),
        *_kernel_lines(source, masked, comments, source_name),
    ]
    for name, found in found_all:
        if found is None:
            cpp.add(name)
            continue
        earlier = kernels.get(name)
        if earlier is None or isinstance(earlier, SignatureError):
            if earlier is None:
                kernels[name], places[name] = found.signature, found.where
            continue
        if isinstance(found.signature, SignatureError):
            kernels[name] = found.signature
            continue
        try:
            kernels[name] = reconcile(earlier, found.signature, places[name], found.where)
        except DeclarationMismatchError as e:
            kernels[name] = e
    return SourceDeclarations(source_name, kernels, frozenset(cpp - set(kernels)))
