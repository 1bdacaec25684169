"""pybridge as a distribution: the name in pyproject.toml is the one the code requires and looks up,
the extras are the ones the install hints name, and no hint anywhere tells a user to install a
name that resolves to someone else's project (the public index's `pybridge`) or to nothing (the
extras of `pybridge-futhark`, not on the index yet). The wheel that `pybridge package` makes is
installed with no index in tests/test_package.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pybridge.distribution import EXTRAS, NAME, compatible_requirement, install_hint

ROOT = Path(__file__).resolve().parents[1]
tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python >= 3.11's tomllib")


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_distribution_name_is_pyprojects_and_not_the_import_name() -> None:
    assert _project()["name"] == NAME == "pybridge-futhark"


def test_the_hints_name_the_extras_packages() -> None:
    extras = _project()["optional-dependencies"]
    for extra, requirements in EXTRAS.items():
        assert tuple(extras[extra]) == requirements, extra
    assert install_hint("cuda") == "pip install pycuda"
    assert install_hint("dask") == "pip install 'dask[array]' distributed"
    # test is lean; test-full adds the heavy parts to it (and is what .ci/run installs).
    assert not {"dask[array]>=2024.12", "mypy>=1.10", "futhark-ffi>=0.14"} & set(extras["test"])
    assert f"{NAME}[test,dask,bench]" in extras["test-full"]  # bench: the plots are tested too
    assert "'.[test-full,docs]'" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("version, pin", [
    ("0.1.0", "pybridge-futhark>=0.1.0,<0.2"),
    ("0.9.3", "pybridge-futhark>=0.9.3,<0.10"),
    ("1.0.0", "pybridge-futhark>=1.0.0,<2"),
    ("2.3.1rc1", "pybridge-futhark>=2.3.1rc1,<3"),
])
def test_generated_wheels_pin_a_compatible_version(version: str, pin: str) -> None:
    assert compatible_requirement(version) == pin


# `pip install 'pybridge[...]'`, `pip install pybridge`, `pybridge-futhark[...]`: none resolves today.
_UNRESOLVABLE = re.compile(r"pip install[^\n`]*?(?<![\w./-])(pybridge(-futhark)?\b(?![-_./])(\[[^\]]*\])?)")


def _texts() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", *ROOT.glob("docs/**/*.md"),
             *ROOT.glob("pybridge/**/*.py"), *ROOT.glob("scripts/*"), *ROOT.glob("tests/**/*.py"), ROOT / ".ci" / "run"]
    return [f for f in files if f.is_file() and f != Path(__file__).resolve()]


def test_no_install_hint_names_a_distribution_that_does_not_resolve() -> None:
    bad = []
    for f in _texts():
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            m = _UNRESOLVABLE.search(line)
            if m and "would not" not in line:
                bad.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not bad, "install hints that do not resolve (pybridge-futhark is not on the public index):\n" + "\n".join(bad)


def test_pybridge_testing_without_hypothesis_says_what_to_install() -> None:
    """(pybridge.dask's: tests/test_dask.py; pybridge.cuda's: tests/test_cuda_cpu.py)"""
    import subprocess
    import sys

    code = "import sys; sys.modules['hypothesis'] = None\nimport pybridge.testing"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "pybridge.testing needs hypothesis: pip install hypothesis" in proc.stderr, proc.stderr[-2000:]
