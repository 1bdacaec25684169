"""The host launchers' declarations: read from each .cu file, written by make beside lib<m>.so as
lib<m>.launchers.json, read back by load_launchers. No GPU needed (make builds without one)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pybridge.cuda import launchers as lmod
from pybridge.cuda.launcher_sidecar import FORMAT, read_host_functions, sidecar_path, write_sidecar
from pybridge.cuda.signature import parse_signature
from pybridge.demo import catalog

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(catalog.MODULES)


def test_every_module_declares_its_launchers_in_its_source() -> None:
    for module in MODULES:
        found = read_host_functions((ROOT / "kernels_cu" / f"{module}.cu").read_text(), module)
        sigs = [parse_signature(d) for d in found["launchers"]]
        assert sigs and all(s.name.startswith("launch_") for s in sigs), module
        # A launcher takes its kernel's parameters (sizes included) where the two share a name.
        for sig in sigs:
            kernel = catalog.MODULES[module].kernels.get(sig.name.removeprefix("launch_"))
            if kernel is not None:
                assert str(sig).removeprefix("launch_") == str(parse_signature(kernel)), sig
    saxpy = read_host_functions((ROOT / "kernels_cu" / "saxpy.cu").read_text())
    assert saxpy == {"launchers": ["launch_saxpy(float a, const float* x[n], const float* y[n], float* out[n], int64_t n)"],
                     "cdef": []}
    reduce = read_host_functions((ROOT / "kernels_cu" / "reduce.cu").read_text())
    assert reduce["cdef"] == ["int64_t sum_num_partials(int64_t n);", "int64_t sum_scratch_floats(int64_t n);"]
    assert str(parse_signature(reduce["launchers"][0]).params[3].size) == "min((n + 255) / 256, 1024) + 1"


def test_reader_skips_comments_kernels_and_directives() -> None:
    source = r'''
    #define LAUNCH extern "C" int launch_macro(float* x, void* stream)
    // extern "C" int launch_commented(float* x /*[n]*/, int64_t n, void* stream);
    /* extern "C" int launch_blocked(void* stream); */
    const char* s = "extern \"C\" int launch_string(void* stream)";
    extern "C" __global__ void kern(float* x /*[n]*/, int64_t n) {}
    extern "C" int launch_kern(float* x /*[n]*/, /* a note (with parens) */ int64_t n,
                               void* stream) { return 0; }
    extern "C" int launch_kern(float* x /*[n]*/, int64_t n, void* stream);
    extern "C" int64_t helper(int64_t n) { return n; }
    extern "C" void reset() {}
    '''
    assert read_host_functions(source) == {
        "launchers": ["launch_kern(float* x[n], int64_t n)"],
        "cdef": ["int64_t helper(int64_t n);", "void reset(void);"],
    }


def test_a_size_on_a_non_launcher_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="helper has a size annotation but is no launcher"):
        read_host_functions('extern "C" int64_t helper(float* x /*[n]*/, int64_t n) { return n; }', "k.cu")


@pytest.fixture(scope="module")
def saxpy_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """make's sidecar for saxpy, in a private BUILD (only that target: no nvcc needed for it)."""
    if shutil.which("make") is None:
        pytest.skip("make not on PATH")
    build = tmp_path_factory.mktemp("build")
    target = build / "cuda" / "libsaxpy.launchers.json"
    r = subprocess.run(["make", "-s", f"BUILD={build}", f"PYTHON={sys.executable}", str(target)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return build / "cuda"


def test_make_writes_the_sidecar(saxpy_build: Path) -> None:
    data = json.loads((saxpy_build / "libsaxpy.launchers.json").read_text())
    assert data == {"format": FORMAT, "source": "saxpy.cu",
                    "launchers": ["launch_saxpy(float a, const float* x[n], const float* y[n], float* out[n], int64_t n)"],
                    "cdef": []}
    sigs, cdef = lmod.read_sidecar(saxpy_build / "libsaxpy.launchers.json")
    assert [str(s) for s in sigs] == ["launch_saxpy(float a, const float* x[n], const float* y[n], float* out[n], int64 n)"]
    assert cdef == ""
    assert sidecar_path(saxpy_build / "libsaxpy.so") == saxpy_build / "libsaxpy.launchers.json"


@pytest.mark.parametrize(
    "content, match",
    [
        ("", "not a launcher declaration file"),
        ('{"format": "pybridge-launchers/1", "launchers": [', "not a launcher declaration file"),
        ("[1, 2]", "expected format"),
        ('{"format": "other/9", "launchers": [], "cdef": []}', "expected format"),
        ('{"format": "pybridge-launchers/1", "launchers": "launch_x()", "cdef": []}', "'launchers' must be a list"),
        ('{"format": "pybridge-launchers/1", "launchers": [], "cdef": [3]}', "'cdef' must be a list"),
        ('{"format": "pybridge-launchers/1", "launchers": ["launch_x(float* x[q)"], "cdef": []}', "launch_x"),
    ],
)
def test_a_corrupt_sidecar_is_a_clear_error_naming_the_file(tmp_path: Path, content: str, match: str) -> None:
    so = tmp_path / "libk.so"
    so.write_bytes(b"not loaded: the sidecar is read first")
    sidecar_path(so).write_text(content)
    with pytest.raises(lmod.SidecarError, match=match) as err:
        lmod.load_launchers(so)
    assert str(sidecar_path(so)) in str(err.value)
    assert isinstance(err.value, ValueError)


def test_a_missing_sidecar_names_the_file_and_the_fix(tmp_path: Path) -> None:
    so = tmp_path / "libk.so"
    so.write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"libk\.launchers\.json.*make cuda.*declarations="):
        lmod.load_launchers(so)


def test_hand_declarations_override_the_sidecar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    so = tmp_path / "libk.so"
    so.write_bytes(b"")
    write_sidecar_source = tmp_path / "k.cu"
    write_sidecar_source.write_text('extern "C" int launch_k(float* x /*[n]*/, int64_t n, void* stream) { return 0; }\n'
                                    'extern "C" int64_t k_helper(int64_t n) { return n; }\n')
    write_sidecar(write_sidecar_source, sidecar_path(so))
    made: list[tuple[list[str], str]] = []

    class Recorder:
        def __init__(self, path: Path, sigs: list, extra: str) -> None:
            made.append(([str(s) for s in sigs], extra))

    monkeypatch.setattr(lmod, "Launchers", Recorder)
    lmod.load_launchers(so)
    lmod.load_launchers(so, ["launch_k(float* x[2*n], int64 n)"])
    lmod.load_launchers(so, ["launch_k(float* x[3*n], int64 n)"], extra_cdef="")
    assert made == [
        (["launch_k(float* x[n], int64 n)"], "int64_t k_helper(int64_t n);"),
        (["launch_k(float* x[2*n], int64 n)"], "int64_t k_helper(int64_t n);"),
        (["launch_k(float* x[3*n], int64 n)"], ""),
    ]
    sidecar_path(so).unlink()  # declarations by hand need no sidecar
    lmod.load_launchers(so, ["launch_k(float* x[4*n], int64 n)"])
    assert made[-1] == (["launch_k(float* x[4*n], int64 n)"], "")
