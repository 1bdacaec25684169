"""`pybridge package` end to end: a new multi-entry program (records, an opaque type, a sum, rank-2
arrays) becomes a wheel; the wheel goes into a fresh virtual environment of the stock interpreter
with no package index (pybridge from a wheel of this checkout, found by the distribution name the
generated wheel requires; numpy, cffi and the rest of the run time seen from this environment,
nothing else), and is used from a folder outside the checkout with neither futhark nor a C compiler
on PATH, in fast (API) mode, against NumPy; mypy --strict accepts correct calls and reports a wrong
dtype, a wrong rank and a misspelt entry point. One environment per session.
"""

from __future__ import annotations

import csv
import importlib.metadata
import io
import logging
import os
import pickle
import re
import shutil
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import pybridge
from pybridge.distribution import NAME as DISTRIBUTION
from pybridge.distribution import compatible_requirement
from pybridge.futhark.build import futhark_compiler

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "tests" / "package" / "shipdemo.fut"
USE_SCRIPT = ROOT / "tests" / "package" / "use_shipdemo.py"

pytestmark = [
    pytest.mark.futhark,
    pytest.mark.slow,
    pytest.mark.skipif(futhark_compiler() is None, reason="Futhark compiler not found: run `make` (it obtains it) or set FUTHARK"),
]


def _base_python() -> str:
    """The stock /usr/bin/python3 where it is this interpreter's version (the wheel is tagged for
    it), else the interpreter this virtual environment was made from."""
    stock = Path("/usr/bin/python3")
    if stock.exists():
        out = subprocess.run([str(stock), "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True).stdout
        if out.strip() == str(sys.version_info[:2]):
            return str(stock)
    return getattr(sys, "_base_executable", sys.executable)


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def _wheel_requirements(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as z:
        (meta,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        text = z.read(meta).decode()
    return [Requirement(line.split(": ", 1)[1]) for line in text.splitlines() if line.startswith("Requires-Dist: ")]


def _run_time_overlay(folder: Path, wheels: list[Path], provided: set[str]) -> set[str]:
    """Links in ``folder`` to this environment's installed copies of what ``wheels`` require
    (transitively, extras and markers applied), except the ``provided`` names: the run time a fresh
    environment may see besides the wheels (through a .pth file), so that it installs with no index.
    Returns their canonical names; fails if this environment lacks one or has a version outside a
    requirement."""
    folder.mkdir()
    todo = [r for w in wheels for r in _wheel_requirements(w)]
    seen: set[str] = set()
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in provided or name in seen or (req.marker and not req.marker.evaluate({"extra": ""})):
            continue
        dist = importlib.metadata.distribution(name)
        assert req.specifier.contains(dist.version, prereleases=True), f"this environment's {name} {dist.version} is not {req}"
        assert dist.files is not None, f"{name}: installed without a RECORD, cannot be linked"
        seen.add(name)
        site = Path(str(dist.locate_file("")))
        for top in {f.parts[0] for f in dist.files if f.parts[0] != ".."}:
            if not (folder / top).exists():
                (folder / top).symlink_to(site / top)
        extras = set(req.extras)
        for line in dist.requires or []:
            sub = Requirement(line)
            if not sub.marker or any(sub.marker.evaluate({"extra": e}) for e in extras | {""}):
                todo.append(sub)
    return seen


def _distributions(python: Path) -> set[str]:
    code = "import importlib.metadata as m; print('\\n'.join(d.metadata['Name'] for d in m.distributions()))"
    return {canonicalize_name(n) for n in _run([str(python), "-c", code]).stdout.split()}


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from pybridge.package import build_package

    tmp = tmp_path_factory.mktemp("ship")
    wheel = build_package([PROGRAM], "shipdemo", "1.2.3", ["c", "multicore"], tmp / "dist", license="BSD-3-Clause")
    # pybridge itself as a wheel of this checkout's package only (no build/ artefacts).
    src = tmp / "pybridge-src"
    src.mkdir()
    shutil.copytree(ROOT / "pybridge", src / "pybridge", ignore=shutil.ignore_patterns("__pycache__", "_build"))
    shutil.copytree(ROOT / "scripts", src / "scripts")
    for f in ("setup.py", "pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / f, src / f)
    # The runtime alone: setup.py neither runs make nor refuses a package without libraries.
    env = dict(os.environ, PYBRIDGE_ALLOW_NO_LIBRARIES="1", PYBRIDGE_NO_MAKE="1")
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(src), "-w", str(tmp / "dist")],
         env=env)
    (pybridge_wheel,) = (tmp / "dist").glob("pybridge_futhark-*.whl")
    venv = tmp / "venv"
    _run([_base_python(), "-m", "venv", str(venv)])
    python = venv / "bin" / "python"
    overlay = _run_time_overlay(tmp / "run-time", [wheel, pybridge_wheel], {canonicalize_name(DISTRIBUTION)})
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    Path(purelib, "run_time.pth").write_text(f"{tmp / 'run-time'}\n")
    before = _distributions(python)
    # No index, no pip configuration, no PYTHONPATH (a checkout on it, with its egg-info, would make
    # pip skip the wheel): pip must find pybridge by the name the generated wheel requires.
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("PIP_")}
    clean["PIP_CONFIG_FILE"] = os.devnull
    pip = _run([str(python), "-m", "pip", "install", "--no-index", "--find-links", str(tmp / "dist"),
                "--disable-pip-version-check", "--no-color", str(wheel)], env=clean)
    check = _run([str(python), "-m", "pip", "check", "--disable-pip-version-check"], env=clean)
    outside = tmp / "elsewhere"
    outside.mkdir()
    return {"wheel": wheel, "venv": venv, "outside": outside, "tmp": tmp, "pip": pip.stdout, "check": check.stdout,
            "overlay": overlay, "before": before, "after": _distributions(python)}


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One mypy cache for the runs that check against this interpreter (MYPYPATH: the checkout): the
    first analyses NumPy's stubs and the standard library's, the others reuse that."""
    return tmp_path_factory.mktemp("mypy-cache")


def _bare_env(shipped: dict[str, Any]) -> dict[str, str]:
    """PATH with the environment's bin only (no futhark, no cc), no CC, an empty pybridge cache."""
    return {
        "PATH": str(shipped["venv"] / "bin"),
        "HOME": str(shipped["outside"]),
        "PYBRIDGE_CACHE": str(shipped["tmp"] / "user-cache"),
        "LANG": "C.UTF-8",
    }


def test_wheel_tags_metadata_and_files(shipped: dict[str, Any]) -> None:
    from wheel.wheelfile import WheelFile

    wheel = shipped["wheel"]
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert wheel.name == f"shipdemo-1.2.3-{tag}-{tag}-linux_x86_64.whl"
    with WheelFile(wheel) as wf:  # reading checks every file against RECORD's hash
        names = set(wf.namelist())
        for n in names:
            wf.read(n)
        meta = wf.read("shipdemo-1.2.3.dist-info/METADATA").decode()
        whl = wf.read("shipdemo-1.2.3.dist-info/WHEEL").decode()
        record = list(csv.reader(io.StringIO(wf.read("shipdemo-1.2.3.dist-info/RECORD").decode())))
    assert {r[0] for r in record} == names
    assert f"Tag: {tag}-{tag}-linux_x86_64" in whl and "Root-Is-Purelib: false" in whl
    fields = [line.split(": ", 1) for line in meta.splitlines() if ": " in line]
    assert ("Name", "shipdemo") in [tuple(f) for f in fields] and ("Version", "1.2.3") in [tuple(f) for f in fields]
    assert ("License", "BSD-3-Clause") in [tuple(f) for f in fields]
    requires = sorted(v for k, v in fields if k == "Requires-Dist")
    assert [r.split(">=")[0] for r in requires] == ["cffi", "numpy", DISTRIBUTION], requires
    assert requires[2] == compatible_requirement() and ",<" in requires[2], requires  # docs/versioning.md
    ext = f".cpython-{sys.version_info.major}{sys.version_info.minor}-x86_64-linux-gnu.so"
    expected = {"shipdemo/__init__.py", "shipdemo/__init__.pyi", "shipdemo/py.typed", "shipdemo/_futhark/package.json"}
    for b in ("c", "multicore"):
        stem = f"shipdemo/_futhark/{b}/shipdemo_shipdemo_{b}"
        expected |= {f"shipdemo/_futhark/{b}/libshipdemo_shipdemo_{b}.so", f"{stem}.json", f"{stem}.fut",
                     f"shipdemo/_futhark/{b}/_pybridge_shipdemo_shipdemo_{b}{ext}"}
    assert names - {n for n in names if n.startswith("shipdemo-1.2.3.dist-info/")} == expected


def test_the_wheel_installs_with_no_index_and_brings_in_nothing_foreign(shipped: dict[str, Any]) -> None:
    """pip, with no index and only the checkout's pybridge wheel to find, resolves the generated
    wheel's requirement to it; the environment then holds what venv made, the run time this test
    let it see (numpy, cffi, ... from this environment), pybridge-futhark and the program: no
    distribution named `pybridge` (the public index's unrelated project) or anything else."""
    installed = re.search(r"^Successfully installed (.*)$", shipped["pip"], re.M)
    assert installed, shipped["pip"]
    assert sorted(installed.group(1).split()) == sorted([f"{DISTRIBUTION}-{pybridge.__version__}", "shipdemo-1.2.3"]), shipped["pip"]
    assert shipped["after"] - shipped["before"] == {canonicalize_name(DISTRIBUTION), "shipdemo"}
    assert shipped["before"] - shipped["overlay"] <= {"pip", "setuptools"}, shipped["before"]
    assert shipped["overlay"] >= {"numpy", "cffi", "platformdirs", "filelock"}, shipped["overlay"]
    assert "pybridge" not in shipped["after"]
    assert "No broken requirements found" in shipped["check"], shipped["check"]


def test_auditwheel_show(shipped: dict[str, Any]) -> None:
    exe = shutil.which("auditwheel") or str(Path(sys.executable).with_name("auditwheel"))
    if not Path(exe).exists():
        pytest.skip("auditwheel not installed")
    out = _run([exe, "show", str(shipped["wheel"])]).stdout
    assert "is consistent with the" in out and "manylinux" in out, out
    assert "external shared libraries are required" not in out, out  # only libc and friends


def test_pf_load_and_the_packaged_module_agree(shipped: dict[str, Any]) -> None:
    """The same default backend, the doc comments as docstrings, the size names of the signatures,
    for the packaged module and for pf.load of the library it holds (issue 33)."""
    script = shipped["outside"] / "agree.py"
    script.write_text(AGREE)
    proc = _run([str(shipped["venv"] / "bin" / "python"), str(script)], cwd=shipped["outside"], env=_bare_env(shipped))
    assert proc.stdout.strip() == "AGREE", proc.stdout + proc.stderr


def test_installed_wheel_runs_without_compilers_in_fast_mode(shipped: dict[str, Any]) -> None:
    script = shipped["outside"] / "use_shipdemo.py"
    shutil.copy2(USE_SCRIPT, script)
    proc = _run([str(shipped["venv"] / "bin" / "python"), str(script)], cwd=shipped["outside"], env=_bare_env(shipped))
    assert proc.stdout.strip().endswith("OK"), proc.stdout + proc.stderr
    assert "RuntimeWarning" not in proc.stderr, proc.stderr  # no fallback to ABI mode


AGREE = """\
import inspect
import pybridge.futhark as pf
import shipdemo
from pybridge.backends import choose_backend
from pybridge.futhark.names import python_names

lib = shipdemo.load()
assert lib.backend == choose_backend(shipdemo.BACKENDS) == "multicore", lib.backend  # no GPU here
same = pf.load(lib.libraries["shipdemo"].path)  # the packaged library, loaded as a user would
assert same.backend == lib.backend
names = list(same.entry_points)
assert sorted(n for n in dir(same) if n in names) == sorted(names)  # each entry point once
for py, name in zip(python_names(names), names):
    mine, theirs = inspect.getdoc(same.entry_points[name]), inspect.getdoc(getattr(shipdemo, py))
    doc = theirs.split("\\n\\nFuthark: entry")[0]
    assert doc and mine.startswith(doc + "\\n\\nFuthark entry point "), (name, doc, mine)
    entry = same.entry_points[name]  # sizes in both or in neither:
    for p, a in zip(entry.info.inputs, inspect.signature(entry).parameters.values()):
        assert f"({p.name}: {a.annotation})" in theirs, (name, p.name, a.annotation, theirs)
print("AGREE")
"""

GOOD = """\
import numpy as np
import shipdemo

m = np.ones((2, 3), dtype=np.float32)
r: shipdemo.F32Array2D = shipdemo.scale(2.0, m)
shape: tuple[int, int] = r.shape
lib = shipdemo.load("c")
p = lib.shift({"x": 1.0, "y": 2.0}, 1.0, np.float32(2.0))
x: np.float32 = p.x
n, s = lib.count_pos(np.zeros((2, 2), dtype=np.int32))
total: np.int64 = n
v = lib.square(2.0)
if v.variant == "rect":
    print(lib.area(v), lib.acc_mean(lib.acc_add(lib.acc_new(0), np.zeros((1, 1)))))
print(lib.matmul(r, [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]).numpy().sum(), x, s)
"""

BAD = """\
import numpy as np
import shipdemo

m64 = np.ones((2, 3), dtype=np.float64)
v32 = np.ones(3, dtype=np.float32)
m32 = np.ones((2, 3), dtype=np.float32)
shipdemo.scale(2.0, m64)
shipdemo.scale(2.0, v32)
shipdemo.scael(2.0, m32)
shipdemo.load("cuda")
shipdemo.area({"x": 1.0, "y": 2.0})
"""


def test_mypy_strict_checks_calls(shipped: dict[str, Any]) -> None:
    pytest.importorskip("mypy")
    out = shipped["outside"]
    (out / "good.py").write_text(GOOD)
    (out / "bad.py").write_text(BAD)
    cmd = [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--python-executable",
           str(shipped["venv"] / "bin" / "python"), "--cache-dir", str(shipped["tmp"] / "mypy-cache")]
    env = {**os.environ, "MYPYPATH": ""}
    good = subprocess.run(cmd + ["good.py"], cwd=out, capture_output=True, text=True, env=env)
    assert good.returncode == 0, good.stdout + good.stderr
    bad = subprocess.run(cmd + ["bad.py"], cwd=out, capture_output=True, text=True, env=env)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    lines = bad.stdout.splitlines()
    errors = {int(ln.split(":")[1]): ln for ln in lines if ": error:" in ln}
    assert sorted(errors) == [7, 8, 9, 10, 11], bad.stdout
    assert "float64" in errors[7] and '"scale"' in errors[7]  # wrong dtype
    assert "ndarray[tuple[int]," in errors[8] and '"scale"' in errors[8]  # wrong rank
    assert 'has no attribute "scael"' in errors[9] and 'maybe "scale"' in errors[9]  # misspelt entry point
    assert "Literal['c', 'multicore']" in errors[10]  # a backend the package lacks
    assert '"area"' in errors[11] and '"Shape"' in errors[11]  # a record where a sum is expected


def test_prebuilt_module_of_another_library_is_refused(shipped: dict[str, Any], tmp_path: Path) -> None:
    """A prebuilt module with other declarations, or one that calls another copy of the library, is
    refused: an error in mode "api", ABI mode with a warning in mode "auto"."""
    import zipfile

    import pybridge.futhark as pf
    from pybridge.futhark.binding import PrebuiltModuleError, bind_prebuilt
    from pybridge.futhark.manifest import ManifestError

    zipfile.ZipFile(shipped["wheel"]).extractall(tmp_path / "a")
    c_dir = tmp_path / "a" / "shipdemo" / "_futhark" / "c"
    mc_dir = tmp_path / "a" / "shipdemo" / "_futhark" / "multicore"
    (c_ext,) = c_dir.glob("_pybridge_*.so")
    (mc_ext,) = mc_dir.glob("_pybridge_*.so")
    with pytest.raises(PrebuiltModuleError, match="other declarations"):  # the c module for the multicore library
        pf.load(mc_dir / "libshipdemo_shipdemo_multicore.so", mode="api", api_module=c_ext)
    with pytest.raises(PrebuiltModuleError, match="built for other declarations"):
        bind_prebuilt(c_ext, "0" * 32)
    with pytest.raises(PrebuiltModuleError, match="does not exist"):
        bind_prebuilt(c_dir / "_pybridge_nothing.so", "x")
    # A copy of the library elsewhere, with the first copy's module: it would call the other file.
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    other = tmp_path / "b" / "shipdemo" / "_futhark" / "c" / "libshipdemo_shipdemo_c.so"
    with pytest.raises((ManifestError, PrebuiltModuleError)):
        pf.load(other, mode="api", api_module=c_ext)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lib = pf.load(other, api_module=c_ext)
    try:
        assert lib.mode == "abi" and any("ABI mode" in str(w.message) for w in caught)
        assert lib.scale(2.0, [[1.0, 2.0]]).numpy().tolist() == [[2.0, 4.0]]
    finally:
        lib.close()
    # The right module for the right library: API mode with no compilation; found beside the
    # library when not named (a library of a package loaded again by path: unpickling, Dask).
    right = pf.load(c_dir / "libshipdemo_shipdemo_c.so", mode="api", api_module=c_ext)
    again = pf.load(c_dir / "libshipdemo_shipdemo_c.so", mode="api")
    try:
        assert right.mode == "api" and right.square(2.0).variant == "rect"
        assert again.mode == "api" and again.api_module == c_ext
        h = pickle.loads(pickle.dumps(right.scale(2.0, [[1.0]])))
        assert h.numpy().tolist() == [[2.0]] and h.library.api_module == c_ext
    finally:
        right.close()
        again.close()


def test_backend_choice_falls_back_without_gpu_with_one_log_line(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from pybridge.futhark import packaged

    monkeypatch.setattr("pybridge.backends.gpu_present", lambda: (False, "the CUDA driver reports no device"))
    log = logging.getLogger("shipdemo-test")
    with caplog.at_level(logging.INFO, logger="shipdemo-test"):
        assert packaged.choose_backend(["c", "multicore", "cuda"], None, log, "shipdemo") == "multicore"
    assert [r.getMessage() for r in caplog.records] == ["shipdemo: no usable GPU (the CUDA driver reports no device); using multicore"]
    monkeypatch.setattr("pybridge.backends.gpu_present", lambda: (True, ""))
    assert packaged.choose_backend(["c", "multicore", "cuda"], None, log, "shipdemo") == "cuda"
    assert packaged.choose_backend(["c"], None, log, "shipdemo") == "c"
    assert packaged.choose_backend(["c", "multicore"], "c", log, "shipdemo") == "c"
    with pytest.raises(ValueError, match="shipdemo has no 'cuda' library; it has c"):
        packaged.choose_backend(["c"], "cuda", log, "shipdemo")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"name": "ship-demo"}, "name: 'ship-demo' must be a Python module name"),
        ({"name": "class"}, "name: 'class'"),
        ({"name": "pybridge"}, "name: 'pybridge' is a module the package needs at run time"),
        ({"version": "one"}, "version: 'one' is not a PEP 440 version"),
        ({"backends": ["c", "opencl"]}, "backends: 'opencl' is not one of"),
        ({"backends": ["c", "c"]}, "names one twice"),
        ({"backends": []}, "at least one"),
        ({"sources": []}, "at least one .fut"),
        ({"sources": ["nothing.fut"]}, "is not an existing .fut file"),
        ({"sources": [PROGRAM, PROGRAM]}, "two programs share a name"),
        ({"license": "MIT\nEvil: yes"}, "one line"),
    ],
)
def test_package_rejects_bad_arguments(kwargs: dict[str, object], message: str, tmp_path: Path) -> None:
    from pybridge.package import PackageError, build_package

    args: dict[str, object] = {"sources": [PROGRAM], "name": "shipdemo", "version": "1.0", "backends": ["c"], "out_dir": tmp_path}
    args.update(kwargs)
    with pytest.raises(PackageError, match=message.replace("(", "\\(").replace("[", "\\[")):
        build_package(**args)  # type: ignore[arg-type]
    assert not list(tmp_path.glob("*.whl"))


def test_cuda_without_toolkit_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import pybridge.package as pkg

    monkeypatch.setattr(pkg, "cuda_toolkit", lambda: (False, "nvcc not found"))
    with pytest.raises(pkg.PackageError, match="cuda needs the CUDA toolkit at packaging time: nvcc not found"):
        pkg.build_package([PROGRAM], "shipdemo", backends=["c", "cuda"], out_dir=tmp_path)


def test_stubs_command_writes_a_checked_pyi(tmp_path: Path) -> None:
    import ast

    from pybridge.cli import main

    out = tmp_path / "shipdemo_types.pyi"
    assert main(["stubs", str(PROGRAM), "-o", str(out)]) == 0
    text = out.read_text()
    ast.parse(text)
    assert "class Library:" in text
    assert "def matmul(self, a: F32Array2D | np.ndarray[tuple[int, int], np.dtype[np.float32]]" in text
    assert "Matrix product of an n×k and a k×m matrix." in text
    assert "def variant(self) -> Literal['circle', 'rect']" in text
    assert "A running total: a state the caller keeps" in text  # a type's doc comment
    assert main(["stubs", str(tmp_path / "missing.fut")]) == 2  # a missing file is a usage error, as for build and package


def test_package_from_c_generated_elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--generated: C that futhark wrote on another machine is compiled here, with no Futhark
    compiler (the route for a GPU machine with nvcc but no Futhark); the result loads in API mode."""
    import zipfile

    import pybridge.futhark as pf
    from pybridge.package import build_package

    gen = tmp_path / "gen" / "c"
    gen.mkdir(parents=True)
    _run([str(futhark_compiler()), "c", "--library", "-o", str(gen / "shipdemo"), str(PROGRAM)])
    monkeypatch.setenv("FUTHARK", str(tmp_path / "no-such-futhark"))
    wheel = build_package([PROGRAM], "shipgen", "0.1", ["c"], tmp_path / "dist", generated=tmp_path / "gen")
    names = zipfile.ZipFile(wheel).namelist()
    assert all(n.startswith(("shipgen/", "shipgen-0.1.dist-info/")) for n in names), names  # nothing of the work folders
    zipfile.ZipFile(wheel).extractall(tmp_path / "site")
    folder = tmp_path / "site" / "shipgen" / "_futhark" / "c"
    (ext,) = folder.glob("_pybridge_shipgen_shipdemo_c*.so")
    lib = pf.load(folder / "libshipgen_shipdemo_c.so", mode="api", api_module=ext)
    try:
        assert lib.row_sums([[1.0, 2.0], [3.0, 4.0]]).numpy().tolist() == [3.0, 7.0]
    finally:
        lib.close()
    # Missing pieces of the generated C are named.
    (gen / "shipdemo.h").unlink()
    from pybridge.package import PackageError

    with pytest.raises(PackageError, match="shipdemo.h is missing"):
        build_package([PROGRAM], "shipgen", "0.1", ["c"], tmp_path / "dist2", generated=tmp_path / "gen")


def test_stubs_let_mypy_check_a_library_loaded_with_pf_load(tmp_path: Path, mypy_cache: Path) -> None:
    pytest.importorskip("mypy")
    from pybridge.cli import main

    assert main(["stubs", str(PROGRAM), "-o", str(tmp_path / "shipdemo_api.pyi")]) == 0
    script = (
        "import typing\n"
        "import numpy as np\n"
        "import pybridge.futhark as pf\n"
        "if typing.TYPE_CHECKING:\n"
        "    import shipdemo_api\n"
        "lib = typing.cast('shipdemo_api.Library', pf.load('shipdemo.fut'))\n"
        "m = np.ones((2, 3), dtype=np.float32)\n"
        "r: 'shipdemo_api.F32Array2D' = lib.scale(2.0, m)\n"
        "lib.scale(2.0, np.ones(3, dtype=np.float32))\n"
        "lib.scael(2.0, m)\n"
        "lib.close()\n"
    )
    (tmp_path / "user.py").write_text(script)
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--follow-imports=silent",
         "--cache-dir", str(mypy_cache), "user.py"],
        cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "MYPYPATH": str(ROOT)},
    )
    errors = [ln for ln in proc.stdout.splitlines() if ": error:" in ln]
    assert [int(e.split(":")[1]) for e in errors] == [9, 10], proc.stdout + proc.stderr
    assert "ndarray[tuple[int]," in errors[0] and '"Library" has no attribute "scael"' in errors[1], proc.stdout


def test_manylinux_tag_only_where_auditwheel_agrees(tmp_path: Path) -> None:
    pytest.importorskip("auditwheel")
    from wheel.wheelfile import WheelFile

    from pybridge.package import build_package, manylinux_tag

    wheel = build_package([PROGRAM], "shipml", "0.1", ["c"], tmp_path / "dist", manylinux=True)
    plat = wheel.name.rsplit("-", 1)[1].removesuffix(".whl")
    assert plat.startswith("manylinux_") and plat.endswith("_x86_64"), wheel.name
    with WheelFile(wheel) as wf:
        assert f"Tag: {wheel.name.split('-', 2)[2].removesuffix('.whl')}\n" in wf.read("shipml-0.1.dist-info/WHEEL").decode()
    assert manylinux_tag(wheel) == plat  # auditwheel agrees with the tag the wheel carries
    assert [p.name for p in (tmp_path / "dist").iterdir()] == [wheel.name]


def test_several_programs_in_one_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib
    import zipfile

    import numpy as np

    from pybridge.package import PackageError, build_package

    extra = ROOT / "tests" / "package" / "shipextra.fut"
    wheel = build_package([PROGRAM, extra], "shipmulti", "0.1", ["c"], tmp_path / "dist")
    zipfile.ZipFile(wheel).extractall(tmp_path / "site")
    stub = (tmp_path / "site" / "shipmulti" / "__init__.pyi").read_text()
    assert stub.count("class F32Array1D(") == 1 and "def dot(xs: F32Array1D" in stub  # one class per type
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    shipmulti = importlib.import_module("shipmulti")
    assert shipmulti.PROGRAMS == ("shipdemo", "shipextra")
    with shipmulti.load("c") as lib:
        assert lib.mode == "api" and set(lib.libraries) == {"shipdemo", "shipextra"}
        xs = np.arange(4, dtype=np.float32)
        assert lib.dot(xs, xs) == np.float32(14.0)
        assert lib.row_sums([[1.0, 2.0]]).numpy().tolist() == [3.0]
    clash = tmp_path / "clash.fut"
    clash.write_text("entry dot (x: f32) : f32 = x\n")
    with pytest.raises(PackageError, match="entry point 'dot' is in both shipextra.fut and clash.fut"):
        build_package([PROGRAM, extra, clash], "shipclash", "0.1", ["c"], tmp_path / "dist2")


def test_extension_compile_failure_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pybridge.futhark.build import build_program
    from pybridge.package import PackageError, build_package

    build_program(PROGRAM, backend="c")  # cached: only the extension's compilation meets the broken compiler
    monkeypatch.setenv("CC", "false")
    with pytest.raises(PackageError, match=r"shipdemo.fut \(c\): cannot compile the fast-mode \(API\) extension"):
        build_package([PROGRAM], "shipbroken", "0.1", ["c"], tmp_path / "dist")
    assert not (tmp_path / "dist").exists() or not list((tmp_path / "dist").iterdir())


def test_stubs_of_every_reference_manifest_pass_mypy_strict(tmp_path: Path, mypy_cache: Path) -> None:
    """Tuples, arrays of records, sums, every primitive, ranks 1-3, manifests of 0.25 and 0.26:
    the generated .pyi is valid and clean under mypy --strict."""
    pytest.importorskip("mypy")
    from pybridge.futhark.manifest import load_manifest
    from pybridge.futhark.stubs import library_stub

    manifests = sorted((ROOT / "tests" / "reference").glob("*.json"))
    assert len(manifests) >= 5
    for m in manifests:
        program = m.name.split(".")[0]
        text = library_stub(load_manifest(m), (m.parent / f"{program}.fut").read_text(), f"{program}.fut")
        (tmp_path / f"{m.stem.replace('.', '_')}.pyi").write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--cache-dir", str(mypy_cache),
         *sorted(str(p.name) for p in tmp_path.glob("*.pyi"))],
        cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "MYPYPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    types_stub = (tmp_path / "types_c.pyi").read_text()
    assert "def pair_in(self, p: Tuple_f32_i32 | tuple[float | np.floating[Any], int | np.integer[Any]]) -> np.float32" in types_stub
    assert "-> tuple[np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.float16, np.float32, np.float64, np.bool_]" in types_stub
    assert "class PointArray1D(OpaqueHandle)" in types_stub and "def sum_points(self, ps: PointArray1D) -> Point" in types_stub


def test_doc_comments() -> None:
    from pybridge.futhark.stubs import doc_comments

    src = (
        "-- not a doc\n"
        "-- | First line.\n"
        "-- second line\n"
        "entry f (x: i32) : i32 = x\n"
        "\n"
        "-- | Dropped: a blank line follows.\n"
        "\n"
        "entry g (x: i32) : i32 = x\n"
        "-- | A type.\n"
        "type^ t = i32\n"
        "-- | Primes too.\n"
        "entry h' (x: i32) : i32 = x\n"
    )
    assert doc_comments(src) == {"f": "First line.\nsecond line", "t": "A type.", "h'": "Primes too."}
