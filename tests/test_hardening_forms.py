"""The forms of the C hardening chosen for speed in issue 23 (csource v7): C hardened by pybridge v6
(carried generated C, ``make`` with FUTHARK=/bin/true) is upgraded to exactly what fresh C gets;
the v7 division and allocation-size forms compute what the v6 ones did; library builds use
-fno-semantic-interposition where the compiler has it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pybridge.futhark import csource
from pybridge.futhark.build import LIB_CFLAGS, _accepts, futhark_compiler

ROOT = Path(__file__).resolve().parents[1]
DIVISION = ROOT / "tests" / "programs" / "division.fut"
needs_futhark = pytest.mark.skipif(futhark_compiler() is None, reason="no Futhark compiler")
needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")


def _raw_c(tmp_path: Path) -> str:
    """The C `futhark c --library` writes for tests/programs/division.fut, unhardened."""
    out = tmp_path / "division"
    subprocess.run([futhark_compiler(), "c", "--library", "-o", str(out), str(DIVISION)], check=True, capture_output=True)
    return out.with_suffix(".c").read_text()


def _as_v6(text: str) -> str:
    """v7-hardened C turned back into what pybridge v6 wrote (its forms are kept in csource for the
    upgrade): the quotient guards and their helpers, the inline pb_szmul, the inline size checks."""
    for v6, current in csource._DIVISION_V6:
        assert current in text
        text = text.replace(current, v6)
    at = text.find(csource._DIVISION_V6[0][0])  # v6 put its helpers before the first guarded function
    text = text[:at] + csource._v6_helper(32) + csource._v6_helper(64) + text[at:]
    text = text.replace(csource._SZMUL, csource._SZMUL_V6)
    text = text.replace(csource._SIZE_ERROR, "").replace(csource._REALLOC_FAILED_FN, "")
    text = text.replace(csource._ALLOC_GUARD, csource._ALLOC_GUARD_V6)
    text = text.replace(csource._REALLOC_FAILED_GUARD, "    lexical_realloc_error(ctx, new_size);\n    return FUTHARK_OUT_OF_MEMORY;\n")
    text = csource._REALLOC_HEAD.sub(lambda m: m.group(1) + csource._REALLOC_GUARD_V6, text)
    return text.replace(csource.MARK, "/* pybridge: hardened v6 */")


@needs_futhark
def test_v6_hardened_c_is_upgraded_to_the_current_forms(tmp_path: Path) -> None:
    fresh, applied = csource.harden(_raw_c(tmp_path))
    assert "division-overflow" in applied and "pybridge_lowest_div" not in fresh
    v6 = _as_v6(fresh)
    assert "pybridge_lowest_div64(x)" in v6 and "INT64_MAX / a" in v6 and "pybridge_size_error" not in v6
    upgraded, applied = csource.harden(v6)
    assert applied == ["upgraded to the current forms"]
    assert upgraded == fresh  # one mark, the current one, and nothing of v6 left
    assert csource.harden(upgraded) == (upgraded, [])


@needs_futhark
@needs_cc
def test_v7_forms_compute_the_v6_answers(tmp_path: Path) -> None:
    """The division functions and pb_szmul of both versions, each compiled from its hardened C (up
    to the end of Futhark's scalar.h), compared on edge operands: the lowest values, -1, 0, 1, the
    largest, products that overflow."""
    fresh, _ = csource.harden(_raw_c(tmp_path))
    ops = ("sdiv", "smod", "squot", "srem", "sdiv_safe", "smod_safe", "squot_safe", "srem_safe")
    objs = []
    for tag, text in (("v6", _as_v6(fresh)), ("v7", fresh)):
        prefix = text[: text.index("// End of scalar.h.")]
        wrappers = "".join(f"int{b}_t {tag}_{op}{b}(int{b}_t x, int{b}_t y) {{ return {op}{b}(x, y); }}\n"
                           for op in ops for b in (32, 64))
        wrappers += f"int64_t {tag}_szmul(int64_t a, int64_t b) {{ return pb_szmul(a, b); }}\n"
        src = tmp_path / f"{tag}.c"
        src.write_text(prefix + "\n" + wrappers)
        subprocess.run(["cc", "-O2", "-w", "-c", "-o", str(src.with_suffix(".o")), str(src)], check=True, capture_output=True)
        objs.append(str(src.with_suffix(".o")))
    decls = "".join(f"int{b}_t {tag}_{op}{b}(int{b}_t, int{b}_t);\n" for tag in ("v6", "v7") for op in ops for b in (32, 64))
    checks = "".join(f"    bad += v6_{op}64(a, b) != v7_{op}64(a, b);\n"
                     f"    bad += v6_{op}32((int32_t) a32, (int32_t) b32) != v7_{op}32((int32_t) a32, (int32_t) b32);\n"
                     for op in ops)
    main = tmp_path / "main.c"
    main.write_text("#include <stdint.h>\n#include <stdio.h>\n" + decls
                    + "int64_t v6_szmul(int64_t, int64_t);\nint64_t v7_szmul(int64_t, int64_t);\n"
                    "int main(void) {\n"
                    "  int64_t v64[] = {INT64_MIN, INT64_MIN + 1, -(1LL << 32), -7, -1, 0, 1, 7, 3037000499LL, 3037000500LL, 1LL << 32, INT64_MAX};\n"
                    "  int64_t v32[] = {INT32_MIN, INT32_MIN + 1, -65536, -7, -1, 0, 1, 7, 46340, 46341, 65536, INT32_MAX};\n"
                    "  int bad = 0;\n"
                    "  for (int i = 0; i < 12; i++) for (int j = 0; j < 12; j++) {\n"
                    "    int64_t a = v64[i], b = v64[j], a32 = v32[i], b32 = v32[j];\n"
                    "    bad += v6_szmul(a, b) != v7_szmul(a, b);\n"
                    "    if (b == 0 || b32 == 0) continue;\n" + checks + "  }\n"
                    '  printf("%d\\n", bad);\n  return 0;\n}\n')
    exe = tmp_path / "forms"
    subprocess.run(["cc", "-O2", "-o", str(exe), str(main), *objs, "-Wl,-z,muldefs", "-lm"], check=True, capture_output=True)
    assert subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.strip() == "0"


@needs_cc
def test_library_flags_take_what_the_compiler_has() -> None:
    assert "-fno-semantic-interposition" in LIB_CFLAGS
    assert _accepts("cc", "-fno-semantic-interposition")  # GCC >= 5, clang >= 11
    assert not _accepts("cc", "-fno-such-option-pybridge")
