"""Your own CUDA C on the GPU: a .cu string and a .cu file compiled by pybridge.cuda.compile /
load_module (cached), launched with checked arguments, compared with NumPy.

Needs PyCUDA and a GPU, not `make cuda` (these tests build everything they launch)."""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

from pybridge.testing import InputOptions, Tolerance, check_against

pytestmark = pytest.mark.gpu

SAXPY = textwrap.dedent("""\
    extern "C" __global__ void saxpy(float a, const float* x /*[n]*/, const float* y /*[n]*/,
                                     float* out /*[n]*/, int64_t n) {
        int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
        if (i < n) out[i] = __fadd_rn(__fmul_rn(a, x[i]), y[i]);  // rounded like NumPy's float32
    }
    """)

SETTINGS = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           # n is drawn and then tied to the arrays' length: many draws are discarded
                                           HealthCheck.filter_too_much])


@pytest.fixture(scope="module", autouse=True)
def _gpu() -> None:
    try:
        import pycuda.driver  # noqa: F401
    except ImportError as e:
        pytest.skip(f"PyCUDA is not importable ({e}): `source .gpu-wheels/install.sh` or pip install pycuda")
    from pybridge import cuda

    if cuda.device_count() == 0:
        pytest.skip("PyCUDA sees no CUDA device")
    cuda.ensure_context()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PYBRIDGE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_compile_a_string_and_launch_with_checked_arguments(cache: Path) -> None:
    from pybridge import cuda

    source = f"// {uuid.uuid4()}\n{SAXPY}"
    mod = cuda.compile(source)
    assert mod.kind == "cubin"  # built for this GPU's own architecture
    k = mod.kernel("saxpy")  # the declaration comes from the source
    assert str(k.signature) == "saxpy(float a, const float* x[n], const float* y[n], float* out[n], int64 n)"
    n = 100_003
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    out = cuda.empty(n)
    k(2.5, cuda.to_device(x), cuda.to_device(y), out, n, grid=cuda.grid_for(n, 256), block=256)
    np.testing.assert_array_equal(out.get(), np.float32(2.5) * x + y)
    # Checked: a short array, a host array, a wrong dtype are refused before the launch.
    with pytest.raises(ValueError, match="saxpy.*out"):
        k(2.5, cuda.to_device(x), cuda.to_device(y), cuda.empty(n - 1), n, grid=cuda.grid_for(n, 256), block=256)
    with pytest.raises(TypeError, match="saxpy.*x"):
        k(2.5, x, cuda.to_device(y), out, n, grid=cuda.grid_for(n, 256), block=256)
    with pytest.raises(TypeError, match="saxpy.*y"):
        k(2.5, cuda.to_device(x), cuda.to_device(y.astype(np.float64)), out, n, grid=cuda.grid_for(n, 256), block=256)
    # The same text again: the cache answers and the module is the same.
    built = cuda.build_source(source, arch=cuda.context.compute_capability())
    assert built.from_cache and built.compiled_by == "pycuda"  # PyCUDA imports here, so its compiler ran
    assert cuda.compile(source) is mod
    # Property test against NumPy, inputs drawn from the source's own declaration.
    check_against(lambda a, x, y, out, n: np.float32(a) * x + y, k,
                  inputs=InputOptions(max_size=5000), tolerance=Tolerance(ulps=0, equal_nan=True),
                  settings=SETTINGS)


def test_load_a_cu_file_with_a_header_and_a_marked_comment(cache: Path, tmp_path: Path) -> None:
    from pybridge import cuda

    (tmp_path / "params.cuh").write_text("#define SHIFT 3\n")
    src = tmp_path / "my_kernels.cu"
    src.write_text(textwrap.dedent("""\
        #include "params.cuh"
        // pybridge: shift_add(const int* x[m * k], int* out[m * k], int m, int k)
        #define KERNEL(name) extern "C" __global__ void name(const int* x, int* out, int m, int k)
        KERNEL(shift_add) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < m * k) out[i] = x[i] * SHIFT + i % k;
        }
        """))
    mod = cuda.load_module(src)
    k = mod.kernel("shift_add")
    m, kk = 37, 53
    x = np.arange(m * kk, dtype=np.int32) - 999
    out = cuda.zeros(m * kk, np.int32)
    k(cuda.to_device(x), out, m, kk, grid=cuda.grid_for(m * kk, 128), block=128)
    np.testing.assert_array_equal(out.get(), x * 3 + np.arange(m * kk, dtype=np.int32) % kk)
    with pytest.raises(ValueError, match="shift_add.*out"):
        k(cuda.to_device(x), cuda.zeros(m * kk + 1, np.int32), m, kk, grid=1, block=128)
    # Change the header: load_module compiles again and the new constant is used.
    (tmp_path / "params.cuh").write_text("#define SHIFT 1\n")
    k2 = cuda.load_module(src).kernel("shift_add")
    out2 = cuda.zeros(m * kk, np.int32)
    k2(cuda.to_device(x), out2, m, kk, grid=cuda.grid_for(m * kk, 128), block=128)
    np.testing.assert_array_equal(out2.get(), x * 1 + np.arange(m * kk, dtype=np.int32) % kk)


def test_hand_written_declaration_is_checked_against_the_source(cache: Path) -> None:
    from pybridge import cuda

    mod = cuda.compile(f"// {uuid.uuid4()}\n{SAXPY}")
    k = mod.kernel("saxpy(float a, const float* x, const float* y, float* out, int64 n)")  # agrees: works
    assert k.signature == mod.kernel("saxpy").signature  # and has the source's sizes
    with pytest.raises(cuda.DeclarationMismatchError, match=r"kernel saxpy, parameter 5 \(n\)"):
        mod.kernel("saxpy(float a, const float* x, const float* y, float* out, int32 n)")


def test_compile_error_and_ptx_fallback(cache: Path) -> None:
    from pybridge import cuda

    with pytest.raises(cuda.CompileError) as info:
        cuda.compile('extern "C" __global__ void k(float* x) {\n  x[0] = nope;\n}\n')
    assert (info.value.file, info.value.line) == ("<string>", 2)
    mod = cuda.load_compiled(cuda.build_source(f"// {uuid.uuid4()}\n{SAXPY}",
                                               arch=cuda.context.compute_capability()), prefer="ptx")
    assert mod.kind == "ptx"
    n = 1000
    x = np.linspace(-1, 1, n, dtype=np.float32)
    out = cuda.empty(n)
    mod.kernel("saxpy")(2.0, cuda.to_device(x), cuda.to_device(x), out, n, grid=cuda.grid_for(n, 256), block=256)
    np.testing.assert_array_equal(out.get(), np.float32(2.0) * x + x)
