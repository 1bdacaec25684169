"""futhark-ffi as the baseline: the same program through futhark-ffi and through pybridge gives the
same answers. futhark-ffi compiles the generated C itself, so this needs the real compiler's output."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import pybridge.futhark as pf
from pybridge.paths import find_build_file

pytestmark = [pytest.mark.futhark, pytest.mark.slow]  # slow: left out of the quick subset (-m 'not slow')


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    pytest.importorskip("futhark_ffi", reason="futhark-ffi not installed (pip install futhark-ffi)")
    so = find_build_file("reference/c/libprobe.so")
    if so is None or not so.with_name("probe.c").exists():
        pytest.skip("reference/c/probe.c not built: run `make futhark` with the Futhark compiler")
    tmp = tmp_path_factory.mktemp("ffi")
    for ext in ("c", "h", "json"):
        shutil.copy(so.with_name(f"probe.{ext}"), tmp)
    # futhark-ffi's own build command (its console script build_futhark_ffi = futhark_ffi.build:main)
    script = shutil.which("build_futhark_ffi", path=str(Path(sys.executable).parent)) or shutil.which("build_futhark_ffi")
    cmd = [script, "probe"] if script else [sys.executable, "-c", "import sys; sys.argv=['b','probe']; import futhark_ffi.build as b; b.main()"]
    proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    sys.path.insert(0, str(tmp))
    from futhark_ffi import Futhark

    fut = Futhark(importlib.import_module("_probe"))
    lib = pf.load(so)
    yield fut, lib
    lib.close()
    sys.path.remove(str(tmp))


def test_same_results_as_futhark_ffi(both):
    fut, lib = both
    rng = np.random.default_rng(7)
    x, y = rng.random(1000, dtype=np.float32), rng.random(1000, dtype=np.float32)
    np.testing.assert_array_equal(fut.from_futhark(fut.saxpy(1.5, x, y)), lib.saxpy(1.5, x, y).numpy())
    assert fut.sum(x) == lib.sum(x)
    assert fut.trivial(41) == lib.trivial(41)
    np.testing.assert_array_equal(fut.from_futhark(fut.chain30(x)), lib.chain30(x).numpy())


def test_where_pybridge_is_stricter(both):
    fut, lib = both
    with pytest.raises(TypeError, match="parameter 'xs'"):
        lib.sum(np.ones(3, np.float64))  # futhark-ffi does not check the dtype
    with pytest.raises(pf.ProgramError):
        lib.index_at(np.ones(3, np.float32), 5)
    with pytest.raises(ValueError):  # futhark-ffi raises a bare ValueError with the same text
        fut.index_at(np.ones(3, np.float32), 5)


def test_futhark_ffi_converts_wrong_array_dtypes_silently(both):
    """What README's comparison says: futhark-ffi converts an array of the wrong dtype with NumPy's
    astype (values truncated, wrapped or overflowed to inf, no error), where pybridge refuses it."""
    fut, lib = both
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's overflow warning is all there is
        assert fut.sum(np.array([1.5, 2.25, 1e40])) == np.float32(np.inf)  # f64 -> f32 by astype
    assert fut.sum(np.array([1.5, 2.25], np.float64)) == 3.75
    with pytest.raises(TypeError, match="parameter 'xs'.*float32.*float64"):
        lib.sum(np.array([1.5, 2.25]))
    with pytest.raises(OverflowError):  # scalars: cffi's own check, without the parameter's name
        fut.trivial(2**40)
