"""Two fixes to the C that ``futhark <backend> --library`` generates, so that ordinary calls cannot
kill the process (measured with Futhark 0.25.32, c and multicore backends):

- ``host_alloc`` ignores a NULL from ``malloc``: an allocation too large for the machine
  (``replicate (1<<36) 0u8``) then writes through NULL and segfaults. The fix records an error,
  which the generated ``memblock_alloc`` already turns into ``FUTHARK_OUT_OF_MEMORY`` (code 3).
- ``memblock_alloc`` calls ``futhark_panic`` (``exit(1)``) on a negative size, e.g.
  ``replicate n 0`` with ``n < 0``. The fix records the same message as an error and returns
  ``FUTHARK_PROGRAM_ERROR``; callers already propagate a failed allocation.

Applied by ``pybridge build`` / ``pybridge.futhark.load("prog.fut")`` and by ``make`` (this file
runs as a script: ``python3 pybridge/futhark/csource.py prog.c``). Standard library only. Each fix
is applied only where the generated text has the expected form; the text is unchanged otherwise.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

MARK = "/* pybridge: hardened */"

_MALLOC = "    *mem_out = malloc(size);\n"
_MALLOC_CHECKED = (
    "    *mem_out = malloc(size);\n"
    "    if (*mem_out == NULL && size != 0)\n"
    '      set_error(ctx, msgprintf("Host allocation of %lld bytes failed (malloc returned NULL).\\n", (long long) size));\n'
)
_NEGATIVE = re.compile(r'futhark_panic\(1, ("Negative allocation of %lld bytes attempted for %s in %s\.\\n", \(long long\) size, desc, [^;]*)\);')


def harden(text: str) -> tuple[str, list[str]]:
    """The patched text and the names of the fixes applied."""
    if MARK in text:
        return text, []
    applied = []
    head = text.find("static void host_alloc(struct futhark_context* ctx,\n")
    if head >= 0 and text.find(_MALLOC, head) >= 0 and "static void set_error(" in text:
        at = text.find(_MALLOC, head)
        text = text[:at] + _MALLOC_CHECKED + text[at + len(_MALLOC) :]
        applied.append("malloc-null")
    text, n = _NEGATIVE.subn(r"{ set_error(ctx, msgprintf(\1)); return FUTHARK_PROGRAM_ERROR; }", text)
    if n:
        applied.append("negative-allocation")
    if applied:
        text = MARK + "\n" + text
    return text, applied


def harden_file(path: str | Path) -> list[str]:
    p = Path(path)
    text, applied = harden(p.read_text())
    if applied:
        p.write_text(text)
    return applied


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        fixes = harden_file(arg)
        print(f"csource: {arg}: {', '.join(fixes) if fixes else 'nothing to patch (already done, or another Futhark version)'}")
