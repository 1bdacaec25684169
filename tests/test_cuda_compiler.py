"""Your own CUDA C on the CPU: pybridge.cuda.compiler with the real nvcc (cache, concurrency, errors)
and pybridge.cuda.declarations (kernel declarations read from the source). Nothing is loaded onto a
GPU here: tests/gpu/test_cuda_compile.py launches what these build."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybridge.cli import main
from pybridge.cuda import compiler as C
from pybridge.cuda.declarations import DeclarationMismatchError, read_declarations, reconcile
from pybridge.cuda.module import Module, cubin_arch
from pybridge.cuda.signature import KernelSignature, Param, SignatureError, parse_signature
from pybridge.ownership import MARK, TEMP_PREFIX

pytestmark = pytest.mark.slow  # left out of the quick subset (-m 'not slow')

ROOT = Path(__file__).resolve().parents[1]
needs_nvcc = pytest.mark.skipif(shutil.which(os.environ.get("NVCC", "nvcc")) is None, reason="nvcc not on PATH")

SAXPY = textwrap.dedent("""\
    extern "C" __global__ void saxpy(float a, const float* x /*[n]*/, const float* y /*[n]*/,
                                     float* out /*[n]*/, int64_t n) {
        int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
        if (i < n) out[i] = a * x[i] + y[i];
    }
    """)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private, empty pybridge cache for one test."""
    d = tmp_path / "cache"
    monkeypatch.setenv("PYBRIDGE_CACHE", str(d))
    return d


@pytest.fixture
def nvcc_calls(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every nvcc command the compiler runs (the real nvcc still runs)."""
    calls: list[list[str]] = []
    real = subprocess.run

    def spy(cmd, *a, **k):  # type: ignore[no-untyped-def]
        if isinstance(cmd, list) and cmd and "nvcc" in os.path.basename(cmd[0]):
            calls.append(cmd)
        return real(cmd, *a, **k)

    monkeypatch.setattr(C.subprocess, "run", spy)
    return calls


def fresh(source: str = SAXPY) -> str:
    """The source made unique, so no earlier cache entry answers for it."""
    return f"// {uuid.uuid4()}\n{source}"


def entries(cache: Path) -> list[Path]:
    return sorted(p for p in (cache / "cuda").iterdir() if p.is_dir() and p.name != "direct" and not p.name.startswith("."))


# ------------------------------------------------------------------------------------- compiling and the cache


@needs_nvcc
def test_compiles_cubin_and_ptx_with_the_makefile_flags(cache: Path) -> None:
    built = C.build_source(fresh(), arch="sm_90")
    assert not built.from_cache
    assert built.options == ("-O3", "-std=c++17", "-lineinfo")
    assert built.compiled_by == ("pycuda" if C._pycuda_compiler() else "nvcc")
    assert cubin_arch(built.cubin) == (9, 0)
    ptx = built.ptx.read_text()
    assert ".target sm_90" in ptx and ".entry saxpy(" in ptx  # extern "C": the plain name
    assert built.declarations["saxpy"] == parse_signature(
        "saxpy(float a, const float* x[n], const float* y[n], float* out[n], int64 n)")
    # -lineinfo names the caller's file through the #line directive.
    assert '<string>"' in ptx


@needs_nvcc
def test_same_source_compiles_once_then_hits_without_running_nvcc(cache: Path, nvcc_calls: list) -> None:
    src = fresh()
    first = C.build_source(src, arch="sm_90")
    compiles = [c for c in nvcc_calls if "--cubin" in c or "--ptx" in c]
    # the cubin and the PTX (PyCUDA, where it imports, runs nvcc its own way: not counted here)
    assert len(compiles) == (2 if first.compiled_by == "nvcc" else 0) and not first.from_cache
    nvcc_calls.clear()
    again = C.build_source(src, arch="sm_90")
    assert again.from_cache and again.directory == first.directory
    assert [c for c in nvcc_calls if "--version" not in c] == []  # no -MM, no compile: the direct record answered
    assert len(entries(cache)) == 1


@needs_nvcc
def test_changed_header_recompiles_even_two_includes_deep(cache: Path, tmp_path: Path, nvcc_calls: list) -> None:
    src_dir = tmp_path / "src"
    (src_dir / "inc").mkdir(parents=True)
    (src_dir / "inc" / "deep.cuh").write_text("#define SCALE 2.0f\n")
    (src_dir / "top.cuh").write_text('#include "deep.cuh"\n')
    kernel = src_dir / "k.cu"
    kernel.write_text('#include "top.cuh"\n'
                      'extern "C" __global__ void scale(float* x /*[n]*/, int n) { if (threadIdx.x < n) x[threadIdx.x] *= SCALE; }\n')
    opts = dict(include_dirs=[src_dir / "inc"], arch="sm_90")
    a = C.build_source(kernel, **opts)
    b = C.build_source(kernel, **opts)
    assert not a.from_cache and b.from_cache
    (src_dir / "inc" / "deep.cuh").write_text("#define SCALE 3.0f\n")
    c = C.build_source(kernel, **opts)
    assert not c.from_cache and c.directory != a.directory
    assert "3.0" in c.ptx.read_text() or "0f40400000" in c.ptx.read_text()  # 3.0f as PTX writes it
    (src_dir / "inc" / "deep.cuh").write_text("#define SCALE 2.0f\n")  # back: the first entry again
    d = C.build_source(kernel, **opts)
    assert d.from_cache and d.directory == a.directory


@needs_nvcc
def test_options_and_arch_are_part_of_the_key(cache: Path) -> None:
    src = fresh()
    base = C.build_source(src, arch="sm_90")
    with_define = C.build_source(src, arch="sm_90", options=["-DUNUSED=1"])
    older = C.build_source(src, arch="sm_80")
    assert not with_define.from_cache and not older.from_cache
    assert len({base.directory, with_define.directory, older.directory}) == 3
    assert cubin_arch(older.cubin) == (8, 0) and ".target sm_80" in older.ptx.read_text()
    assert C.build_source(src, arch=(8, 0)).from_cache  # same arch, spelled differently
    # An -O or -std of the caller's replaces the Makefile's.
    assert C.build_source(src, arch="sm_90", options=["-O1", "-std=c++20"]).options == ("-lineinfo", "-O1", "-std=c++20")


# What each of the four processes runs: wait for the common start, build, print the outcome.
_PROCESS_CODE = textwrap.dedent("""
        import json, sys, time
        from pybridge.cuda.compiler import build_source
        src, start_at = sys.argv[1], float(sys.argv[2])
        time.sleep(max(0.0, start_at - time.time()))
        b = build_source(src, arch="sm_90")
        print(json.dumps({"dir": str(b.directory), "from_cache": b.from_cache}))
        """)


@needs_nvcc
def test_eight_threads_and_four_processes_compile_one_fresh_source(cache: Path) -> None:
    src = fresh()
    start_at = time.time() + 4.0  # everyone starts together, after the processes have imported pybridge
    env = dict(os.environ, PYBRIDGE_CACHE=str(cache))
    procs = [subprocess.Popen([sys.executable, "-c", _PROCESS_CODE, src, str(start_at)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(4)]
    results: list[object] = [None] * 8

    def work(i: int) -> None:
        time.sleep(max(0.0, start_at - time.time()))
        try:
            b = C.build_source(src, arch="sm_90")
            results[i] = {"dir": str(b.directory), "from_cache": b.from_cache}
        except BaseException as e:  # noqa: BLE001 - reported below
            results[i] = e

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        outs.append(json.loads(out.strip().splitlines()[-1]))
    errors = [r for r in results if isinstance(r, BaseException)]
    assert errors == []
    everyone = [*results, *outs]
    assert len({r["dir"] for r in everyone}) == 1  # type: ignore[index]
    assert sum(not r["from_cache"] for r in everyone) == 1  # type: ignore[index]  # one compile in all
    (entry,) = entries(cache)
    assert cubin_arch(entry / "module.cubin") == (9, 0)
    assert ".entry saxpy(" in (entry / "module.ptx").read_text()
    assert [p.name for p in (cache / "cuda").iterdir() if p.name.startswith(TEMP_PREFIX)] == []


@needs_nvcc
def test_a_damaged_entry_is_rebuilt(cache: Path) -> None:
    src = fresh()
    first = C.build_source(src, arch="sm_90")
    first.cubin.write_bytes(b"")  # truncated by a full disk, say
    again = C.build_source(src, arch="sm_90")
    assert not again.from_cache and cubin_arch(again.cubin) == (9, 0)
    again.ptx.unlink()
    assert not C.build_source(src, arch="sm_90").from_cache


@needs_nvcc
def test_leftovers_of_a_killed_compile_are_removed(cache: Path) -> None:
    src = fresh()
    first = C.build_source(src, arch="sm_90")
    leftover = cache / "cuda" / f"{TEMP_PREFIX}{first.key[:12]}-killed"
    leftover.mkdir()
    (leftover / MARK).write_text("made by pybridge\n")  # the first file of every folder it makes
    (leftover / "module.cubin").write_bytes(b"\x7fELF half")
    shutil.rmtree(first.directory)
    again = C.build_source(src, arch="sm_90")
    assert not again.from_cache and not leftover.exists() and cubin_arch(again.cubin) == (9, 0)


@needs_nvcc
def test_compiler_warnings_are_kept_and_shown(cache: Path) -> None:
    with pytest.warns(UserWarning, match="careful"):
        built = C.build_source(fresh('#warning "careful"\n' + SAXPY), arch="sm_90")
    assert "careful" in built.log


# ------------------------------------------------------------------------------------- errors


@needs_nvcc
def test_compile_error_carries_file_line_and_message(cache: Path, tmp_path: Path) -> None:
    with pytest.raises(C.CompileError) as info:
        C.build_source('extern "C" __global__ void k(float* x) {\n  x[0] = undefined_name;\n}\n', arch="sm_90")
    e = info.value
    assert (e.file, e.line) == ("<string>", 2)
    assert 'identifier "undefined_name" is undefined' in str(e) and "undefined_name" in e.output
    assert entries(cache) == []  # nothing half-made left behind
    assert [p for p in (cache / "cuda").iterdir() if p.name.startswith(TEMP_PREFIX)] == []

    bad = tmp_path / "bad.cu"
    bad.write_text('#include "oops.cuh"\nextern "C" __global__ void k() {}\n')
    (tmp_path / "oops.cuh").write_text("\n\nint broken = ;\n")
    with pytest.raises(C.CompileError) as info:
        C.build_source(bad, arch="sm_90")
    assert info.value.file is not None and info.value.file.endswith("oops.cuh") and info.value.line == 3


@needs_nvcc
def test_missing_header_is_a_compile_error_naming_it(cache: Path, tmp_path: Path) -> None:
    src = tmp_path / "k.cu"
    src.write_text('#include "nowhere.cuh"\n')
    with pytest.raises(C.CompileError, match="nowhere.cuh") as info:
        C.build_source(src, arch="sm_90")
    assert info.value.line == 1 and info.value.file == str(src)


def test_missing_nvcc_says_how_to_get_it(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVCC", "/no/such/nvcc")
    with pytest.raises(C.CompileError, match="CUDA toolkit"):
        C.build_source(SAXPY, arch="sm_90")


@pytest.mark.parametrize("options, error", [
    ("-DX=1", TypeError), ([b"-DX"], TypeError), (["-arch=sm_80"], ValueError), (["-gencode", "x"], ValueError),
    (["-o", "x.cubin"], ValueError), (["--ptx"], ValueError),
])
def test_bad_options_are_refused_by_name(cache: Path, options: object, error: type) -> None:
    with pytest.raises(error, match="options"):
        C.build_source(SAXPY, arch="sm_90", options=options)  # type: ignore[arg-type]


@pytest.mark.parametrize("arch, expected", [("sm_90", "sm_90"), ("compute_80", "sm_80"), ("90a", "sm_90a"),
                                            (86, "sm_86"), ((10, 0), "sm_100")])
def test_arch_spellings(arch: object, expected: str) -> None:
    assert C.normalize_arch(arch)[0] == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("arch", ["sm_9", "gfx90a", "", 20, True, 9.0])
def test_bad_arch_is_refused(arch: object) -> None:
    with pytest.raises((ValueError, TypeError), match="arch"):
        C.normalize_arch(arch)  # type: ignore[arg-type]


def test_diagnostics_of_each_tool_are_parsed() -> None:
    out = "\n".join([
        'k.cu(12): error: identifier "y" is undefined',
        "k.cu(3): warning #177-D: variable \"z\" was declared but never referenced",
        "/tmp/x.h:4:2: error: #error stop",
        "ptxas error   : Entry function 'k' uses too much shared data",
        "nvcc fatal   : Unsupported gpu architecture 'compute_1'",
    ])
    ds = C.parse_diagnostics(out)
    assert [(d.file, d.line, d.severity) for d in ds] == [
        ("k.cu", 12, "error"), ("k.cu", 3, "warning"), ("/tmp/x.h", 4, "error"), (None, None, "error"), (None, None, "fatal")]
    e = C.CompileError("failed", out)
    assert (e.file, e.line) == ("k.cu", 12)


# ------------------------------------------------------------------------------------- the command line


@needs_nvcc
def test_pybridge_build_a_cu_file(cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "my_kernels.cu"
    src.write_text(fresh())
    assert main(["build", str(src), "--arch", "sm_80", "--option=-DBLOCK=128", "-o", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "kernel saxpy(float a, const float* x[n], const float* y[n], float* out[n], int64 n)" in out
    assert "-DBLOCK=128" in out
    assert cubin_arch(tmp_path / "out" / "my_kernels.cubin") == (8, 0)
    assert (tmp_path / "out" / "my_kernels.ptx").read_text().count(".entry saxpy(") == 1
    src.write_text('extern "C" __global__ void k() { nope; }\n')
    assert main(["build", str(src)]) == 1
    err = capsys.readouterr().err
    assert f"{src}(1): error" in err and '"nope" is undefined' in err


# ------------------------------------------------------------------------------------- declarations in the source

_C_SPELLINGS = {
    "float32": ["float"], "float64": ["double"], "int32": ["int", "int32_t"], "int64": ["int64_t", "long", "long long"],
    "uint32": ["unsigned int", "uint32_t"], "uint8": ["unsigned char", "uint8_t"], "int16": ["short", "int16_t"],
    "uint64": ["size_t", "unsigned long long"], "float16": ["__half"], "bool": ["bool"],
}
_NAME = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True).filter(
    lambda s: s not in {"int", "long", "short", "char", "float", "double", "bool", "void", "const", "unsigned",
                        "signed", "half", "restrict", "volatile", "inline", "static", "min", "max", "extern", "if", "for", "do"})


@st.composite
def declarations(draw: st.DrawFn) -> tuple[KernelSignature, list[str]]:
    """A kernel declaration and, per parameter, a C spelling of its type."""
    names = draw(st.lists(_NAME, min_size=1, max_size=7, unique=True))
    kinds = [draw(st.sampled_from(["scalar", "pointer", "const pointer"])) for _ in names]
    int_scalars = []
    params: list[Param] = []
    spellings: list[str] = []
    for name, kind in zip(names, kinds):
        canonical = draw(st.sampled_from(sorted(_C_SPELLINGS)))
        if kind == "scalar" and draw(st.booleans()):
            canonical = "int64"
        if kind == "scalar" and canonical.startswith(("int", "uint")):
            int_scalars.append(name)
        spellings.append(draw(st.sampled_from(_C_SPELLINGS[canonical])))
        params.append(Param(name, np.dtype(canonical), kind != "scalar", kind == "const pointer"))
    sized = []
    for p in params:
        size = None
        if p.is_pointer and int_scalars and draw(st.booleans()):
            a = draw(st.sampled_from(int_scalars))
            size = draw(st.sampled_from([a, f"{a} * 2", f"({a} + 7) / 8", f"max({a}, 1)"]))
        sized.append(Param(p.name, p.dtype, p.is_pointer, p.is_const, size))
    kname = draw(_NAME)
    return KernelSignature(kname, tuple(sized)), spellings


def as_c_kernel(sig: KernelSignature, spellings: list[str], restrict: bool, block: bool) -> str:
    parts = []
    for p, c in zip(sig.params, spellings):
        if not p.is_pointer:
            parts.append(f"{c} {p.name}")
            continue
        ann = f" /* [{p.size}] */" if p.size else " /* not a size */"
        parts.append(f"{'const ' if p.is_const else ''}{c}*{' __restrict__' if restrict else ''} {p.name}{ann}")
    params = ",\n    ".join(parts)
    head = f"__global__ void __launch_bounds__(256) {sig.name}(\n    {params})"
    body = ' { const char* s = "}"; /* ) */ }\n'
    return f'extern "C" {{\n{head}{body}}}\n' if block else f'extern "C" {head}{body}'


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(declarations(), st.booleans(), st.booleans())
def test_declarations_are_read_back_from_the_kernel_line(decl: tuple[KernelSignature, list[str]], restrict: bool, block: bool) -> None:
    sig, spellings = decl
    source = '#include <cuda_fp16.h>\n// a comment with __global__ void fake(int x)\n' + as_c_kernel(sig, spellings, restrict, block)
    found = read_declarations(source, "gen.cu")
    assert found[sig.name] == sig
    assert list(found.kernels) == [sig.name]


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(declarations())
def test_marked_comment_declares_a_kernel_and_agrees_with_its_line(decl: tuple[KernelSignature, list[str]]) -> None:
    sig, spellings = decl
    # The comment gives the sizes; the line has none of its own: the result has the comment's sizes.
    bare = KernelSignature(sig.name, tuple(Param(p.name, p.dtype, p.is_pointer, p.is_const) for p in sig.params))
    source = f"// pybridge: {sig}\n" + as_c_kernel(bare, spellings, False, False)
    assert read_declarations(source)[sig.name] == sig
    assert read_declarations(f"/* pybridge:\n   {sig} */\n#define K(x) x\n")[sig.name] == sig  # the macro case


@st.composite
def mutated(draw: st.DrawFn) -> tuple[KernelSignature, KernelSignature, str]:
    """(source declaration, a hand-written one differing in one parameter, that parameter's name in
    the hand-written one)."""
    sig, _ = draw(declarations())
    i = draw(st.integers(0, len(sig.params) - 1))
    p = sig.params[i]
    ints = [q.name for q in sig.params if not q.is_pointer and q.dtype.kind in "iu"]
    referenced = any(q.size_expr is not None and p.name in q.size_expr.names for q in sig.params)
    # (renaming a size parameter would make the declaration itself invalid, a SignatureError)
    options = (["retype"] if referenced else ["rename", "retype"]) + (["const"] if p.is_pointer else []) + (["resize"] if p.is_pointer and p.size and ints else [])
    how = draw(st.sampled_from(options))
    if how == "rename":
        q = Param(p.name + "_2", p.dtype, p.is_pointer, p.is_const, p.size)
    elif how == "retype":
        kinds = "iu" if referenced else "iufb"  # a size parameter stays an integer
        other = draw(st.sampled_from([t for t in sorted(_C_SPELLINGS) if np.dtype(t) != p.dtype and np.dtype(t).kind in kinds]))
        q = Param(p.name, np.dtype(other), p.is_pointer, p.is_const, p.size)
    elif how == "const":
        q = Param(p.name, p.dtype, True, not p.is_const, p.size)
    else:
        q = Param(p.name, p.dtype, True, p.is_const, f"{p.size} + 1")
    params = list(sig.params)
    params[i] = q
    return sig, KernelSignature(sig.name, tuple(params)), q.name


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_a_declaration_that_disagrees_with_the_source_names_kernel_and_parameter(case: tuple[KernelSignature, KernelSignature, str]) -> None:
    source_sig, declared, param = case
    found = read_declarations(f"// pybridge: {source_sig}\n", "k.cu")
    with pytest.raises(DeclarationMismatchError) as info:
        found.resolve(str(declared))
    e = info.value
    assert (e.kernel, e.parameter) == (source_sig.name, param)
    assert f"kernel {source_sig.name}, parameter" in str(e) and param in str(e)


def test_hand_written_declaration_adds_and_keeps_sizes() -> None:
    found = read_declarations(SAXPY)
    # Without sizes of its own, a declaration takes the source's; the same sizes are fine.
    loose = "saxpy(float a, const float* x, const float* y, float* out, int64 n)"
    assert found.resolve(loose) == found["saxpy"] == found.resolve(str(found["saxpy"]))
    # Sizes written differently but meaning the same are accepted (and kept as written).
    same = found.resolve("saxpy(float a, const float* x[(n)], const float* y[n], float* out[ n ], long n)")
    assert same.sizes({"n": 5}) == found["saxpy"].sizes({"n": 5}) == {"x": 5, "y": 5, "out": 5}
    with pytest.raises(DeclarationMismatchError, match=r"parameter 2 \(x\) has size \[n \* 2\]"):
        found.resolve("saxpy(float a, const float* x[n * 2], const float* y, float* out, int64 n)")
    with pytest.raises(DeclarationMismatchError, match="6 parameters"):
        found.resolve("saxpy(float a, const float* x, const float* y, float* out, int64 n, int m)")
    # A kernel the source does not show (a macro wrote it) is taken as declared.
    other = parse_signature("made_by_macro(float* x[n], int n)")
    assert found.resolve(other) == other


def test_what_the_source_reader_skips_and_why() -> None:
    source = textwrap.dedent("""\
        #define KERNEL(name) extern "C" __global__ void name(float* x)
        KERNEL(from_macro) {}
        template <typename T> __global__ void templated(T* x) {}
        __global__ void mangled(float* x, int n) {}
        static __device__ float helper(float x) { return x; }
        extern "C" __global__ void vec(float2 v) {}
        extern "C" __global__ void declared_twice(float* x /*[n]*/, int n);
        extern "C" __global__ void declared_twice(float* x, int n) {}
        extern "C" __global__ void clash(float* x /*[n]*/, int n);
        extern "C" __global__ void clash(float* x /*[2*n]*/, int n) {}
        // pybridge: from_macro(float* x[16])
        const char* s = "extern \\"C\\" __global__ void in_string(int x)";
        """)
    found = read_declarations(source, "k.cu")
    assert sorted(found.kernels) == ["clash", "declared_twice", "from_macro", "vec"]
    assert found.cpp_kernels == {"mangled"}
    assert str(found["declared_twice"]) == "declared_twice(float* x[n], int32 n)"
    assert str(found["from_macro"]) == "from_macro(float* x[16])"
    with pytest.raises(KeyError, match='C\\+\\+ linkage.*extern "C"'):
        found["mangled"]
    with pytest.raises(SignatureError, match=r"k.cu line 6: kernel vec: unknown type 'float2'"):
        found["vec"]
    with pytest.raises(DeclarationMismatchError, match=r"clash, parameter 1 \(x\) has size \[n\] in k.cu line 9"):
        found["clash"]
    with pytest.raises(KeyError, match=r"declares no kernel 'nope' \(declared: clash, declared_twice"):
        found["nope"]
    with pytest.raises(SignatureError, match="line 2 .pybridge: comment.: expected a kernel declaration"):
        read_declarations("\n// pybridge: 42 is not a kernel\n")


def test_unreadable_comments_and_strings_do_not_confuse_the_reader() -> None:
    source = 'extern "C" __global__ void k(const char c /* ) */, int n /* [ */) { char q = \'"\'; }\n'
    assert str(read_declarations(source)["k"]) == "k(int8 c, int32 n)"


_C_ISH = st.lists(st.sampled_from(list('abxn_ ()[]{},;*/"\'\\#\n') + ["__global__", 'extern "C"', "pybridge:", "void",
                                                                         "float", "int", "/*[", "]*/", "//"]),
                  max_size=60).map("".join)


@settings(max_examples=300)
@given(_C_ISH)
def test_any_text_reads_or_fails_with_a_signature_error(text: str) -> None:
    try:
        found = read_declarations(text, "fuzz.cu")
    except SignatureError:
        return  # only a marked comment without a kernel name raises at read time
    for name in found.kernels:
        try:
            found[name]
        except SignatureError:
            pass


def test_reconcile_is_symmetric_in_what_it_accepts() -> None:
    a = parse_signature("k(const float* x[n], float* y, int n)")
    b = parse_signature("k(const float* x, float* y[n], int n)")
    assert reconcile(a, b, "A", "B") == reconcile(b, a, "B", "A") == parse_signature("k(const float* x[n], float* y[n], int n)")


def test_a_bare_name_needs_a_module_compiled_from_source() -> None:
    mod = Module(handle=None, path=Path("build/cuda/saxpy.cubin"), name="saxpy")
    with pytest.raises(ValueError, match="not compiled from source.*pass the whole declaration"):
        mod.kernel("saxpy")


# ------------------------------------------------------------------------------------- review: hostile paths


def test_a_missing_cu_file_is_file_not_found_not_a_syntax_error(cache: Path, tmp_path: Path) -> None:
    """Found: build_source("my_kernels.cu") with no such file compiled the name itself as CUDA C
    and reported 'this declaration has no storage class' in <string>."""
    missing = str(tmp_path / "my_kernels.cu")
    for source in ("my_kernels.cu", missing, "  kernels.cuh "):
        with pytest.raises(FileNotFoundError, match="no such file"):
            C.build_source(source, arch="sm_90")


@needs_nvcc
def test_a_backslash_in_the_file_name_reaches_the_diagnostics_intact(cache: Path, tmp_path: Path) -> None:
    """Found: the #line directive put the path into a C string unescaped ('\\s' is an escape)."""
    d = tmp_path / "back\\slash"
    d.mkdir()
    src = d / "bad.cu"
    src.write_text('extern "C" __global__ void k(float* x) { x[0] = undefined_name; }\n')
    with pytest.raises(C.CompileError) as e:
        C.build_source(src, arch="sm_90")
    assert e.value.file == str(src) and e.value.line == 1, e.value.diagnostics


@needs_nvcc
def test_readers_never_lose_an_entry_while_it_is_rebuilt(cache: Path) -> None:
    """Found: rebuild=True moved the entry aside before renaming the new one in, so a thread that
    had just found it complete (readers take no lock) got FileNotFoundError reading its cubin."""
    source = fresh()
    C.build_source(source, arch="sm_90")
    errors: list[str] = []
    reads = [0]
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                built = C.build_source(source, arch="sm_90")
                assert built.cubin.read_bytes()[:4] == b"\x7fELF" and built.ptx.read_bytes() and built.source
                reads[0] += 1
            except Exception as e:  # noqa: BLE001 - collected and reported below
                errors.append(repr(e))

    readers = [threading.Thread(target=reader) for _ in range(3)]
    for t in readers:
        t.start()
    try:
        for _ in range(3):
            assert not C.build_source(source, arch="sm_90", rebuild=True).from_cache
    finally:
        stop.set()
        for t in readers:
            t.join()
    assert errors == [] and reads[0] > 0
    assert len(entries(cache)) == 1


@needs_nvcc
def test_nvcc_flags_from_the_environment_are_part_of_the_key(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found: nvcc also reads NVCC_PREPEND_FLAGS / NVCC_APPEND_FLAGS; with either set, a cache entry
    compiled without them was returned (here: the source must now fail to compile)."""
    source = fresh("#ifdef BOOM\n#error boom requested\n#endif\n" + SAXPY)
    C.build_source(source, arch="sm_90")
    for var in ("NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS"):
        monkeypatch.setenv(var, "-DBOOM")
        with pytest.raises(C.CompileError, match="boom requested"):
            C.build_source(source, arch="sm_90")
        monkeypatch.delenv(var)
    assert C.build_source(source, arch="sm_90").from_cache


@needs_nvcc
def test_pybridge_build_reports_an_unreadable_marked_comment_without_a_traceback(
        cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found: the declarations are read after the compile, outside the command's error handling,
    so a `// pybridge:` comment that is no declaration ended `pybridge build` in a traceback."""
    src = tmp_path / "k.cu"
    src.write_text('// pybridge: kernels for the demo\n' + SAXPY)
    assert main(["build", str(src), "--arch", "sm_90"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("pybridge build: ") and "line 1 (pybridge: comment)" in err


def test_relative_include_directories_are_resolved_in_every_spelling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found: only -Idir was made absolute; "-I", "dir" and --include-path=dir stayed relative, which
    PyCUDA (compiling in a temporary directory) then resolves against the wrong directory."""
    monkeypatch.chdir(tmp_path)
    got = C._check_options(["-I", "inc", "--include-path=inc2", "--include-path", "inc3", "-Iinc4", "-isystem", "sys",
                            "-DX=1", f"-I{tmp_path}"])
    user = got[len(C.NVCC_FLAGS):]
    assert user == ["-I", str(tmp_path / "inc"), f"--include-path={tmp_path / 'inc2'}", "--include-path",
                    str(tmp_path / "inc3"), f"-I{tmp_path / 'inc4'}", "-isystem", str(tmp_path / "sys"), "-DX=1",
                    f"-I{tmp_path}"]
