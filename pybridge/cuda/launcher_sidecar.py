"""The declarations of a ``.cu`` file's host launchers, written beside its library by ``make``.

A host launcher is an ``extern "C"`` function returning ``int`` whose last parameter is
``void* stream``; its pointer sizes are ``/*[expr]*/`` comments after the parameter names, as on a
kernel's line (:mod:`pybridge.cuda.declarations`)::

    extern "C" int launch_saxpy(float a, const float* x /*[n]*/, const float* y /*[n]*/,
                                float* out /*[n]*/, int64_t n, void* stream) { ... }

Every other ``extern "C"`` host function (``int64_t sum_num_partials(int64_t n)``) is kept as a C
prototype for cffi. ``make`` runs this file as a script, ``python3 -I launcher_sidecar.py
kernels_cu/saxpy.cu build/cuda/libsaxpy.launchers.json``, before ``pip install`` has put NumPy
anywhere: standard library only. :func:`pybridge.cuda.launchers.load_launchers` reads the JSON and
parses each declaration with :func:`~pybridge.cuda.signature.parse_signature`.

Not a C parser: comments (but size annotations), string literals and preprocessor lines are
dropped, then each ``extern "C"`` function is read up to its closing parenthesis. Functions a macro
defines are not seen (``pybridge_error_string`` comes from ``PB_DEFINE_ERROR_HELPERS``; the
launchers' cdef declares it), nor ones inside an ``extern "C" { ... }`` block.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

FORMAT = "pybridge-launchers/1"
SUFFIX = ".launchers.json"

_TOKEN = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
_ANNOTATION = re.compile(r"/\*\s*(\[.*\])\s*\*/", re.S)
_DIRECTIVE = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.M)
_FUNCTION = re.compile(r'\bextern\s*"C"\s+((?:[A-Za-z_]\w*[\s*]+)+?)([A-Za-z_]\w*)\s*\(')
_STREAM = re.compile(r"^void\s*\*\s*stream$")


def sidecar_path(library: str | Path) -> Path:
    """``build/cuda/libsaxpy.so`` -> ``build/cuda/libsaxpy.launchers.json``."""
    library = Path(library)
    return library.with_name(library.stem + SUFFIX)


def _clean(source: str) -> str:
    def keep(m: re.Match[str]) -> str:
        text = m.group(0)
        if text.startswith("/*"):
            ann = _ANNOTATION.fullmatch(text)
            return f" {ann.group(1)} " if ann else " "
        if text.startswith("//"):
            return " "
        return text if text == '"C"' else '""'

    return _DIRECTIVE.sub("", _TOKEN.sub(keep, source))


def _closing(text: str, open_pos: int) -> int:
    depth = 0
    for i in range(open_pos, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i
    return -1


def _split_params(params: str) -> list[str]:
    out, depth, start = [], 0, 0
    for i, ch in enumerate(params):
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            out.append(params[start:i])
            start = i + 1
    out.append(params[start:])
    return [re.sub(r"\s+\[", "[", " ".join(p.split())) for p in out if p.strip()]


def read_host_functions(source: str, source_name: str = "<string>") -> dict[str, Any]:
    """``{"launchers": [declaration, ...], "cdef": [prototype, ...]}`` of ``source``."""
    text = _clean(source)
    launchers: dict[str, str] = {}
    cdef: dict[str, str] = {}
    for m in _FUNCTION.finditer(text):
        ret = " ".join(m.group(1).split())
        name = m.group(2)
        if "__global__" in ret.split() or "__device__" in ret.split():
            continue
        close = _closing(text, m.end() - 1)
        if close < 0:
            raise ValueError(f"{source_name}: extern \"C\" function {name}: no closing parenthesis")
        params = _split_params(text[m.end() : close])
        if ret == "int" and params and _STREAM.match(params[-1]):
            launchers.setdefault(name, f"{name}({', '.join(params[:-1])})")
        else:
            if any("[" in p for p in params):
                raise ValueError(f"{source_name}: {name} has a size annotation but is no launcher "
                                 "(a launcher returns int and takes void* stream last)")
            cdef.setdefault(name, f"{ret} {name}({', '.join(params) or 'void'});")
    return {"launchers": list(launchers.values()), "cdef": list(cdef.values())}


def write_sidecar(cu_file: str | Path, out: str | Path) -> dict[str, Any]:
    """Read ``cu_file``'s host functions and write them to ``out`` (JSON); return what was written."""
    cu_file = Path(cu_file)
    data = {"format": FORMAT, "source": cu_file.name, **read_host_functions(cu_file.read_text(), str(cu_file))}
    tmp = Path(f"{out}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(out)  # never a half-written sidecar beside the library
    return data


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: launcher_sidecar.py kernels.cu out.launchers.json", file=sys.stderr)
        return 2
    try:
        data = write_sidecar(argv[0], argv[1])
    except (OSError, ValueError) as e:
        print(f"launcher_sidecar: {e}", file=sys.stderr)
        return 1
    if not data["launchers"]:
        print(f"launcher_sidecar: {argv[0]} declares no host launcher (extern \"C\" int f(..., void* stream))",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
