"""Any file name Futhark accepts loads in the fast (API) mode, quietly.

Futhark 0.25 compiles a program whatever its file name holds, except '/' and NUL (checked by hand:
'-', spaces, quotes, backslashes, newlines, carriage returns, control and non-ASCII characters,
'.', leading '-'). The name used to reach a C identifier (cffi's PyInit_<module>), generated Python
source and an #include line, making the API-mode build fail (a RuntimeWarning, then the slower ABI
mode) or the load fail with SyntaxError. Here hypothesis makes the names; the real compiler builds.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import pybridge.futhark as pf
from pybridge.futhark.build import futhark_compiler

pytestmark = [
    pytest.mark.slow,  # left out of the quick subset (-m 'not slow')
    pytest.mark.futhark,
    pytest.mark.skipif(futhark_compiler() is None, reason="Futhark compiler not found: run `make` (it obtains one) or set FUTHARK="),
]

PROGRAM = "entry f (x: i32) : i32 = x + 1\n"

# Every character a file name may hold on POSIX, except surrogates (not encodable as UTF-8).
NAME_CHARS = st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",))
NAMES = st.text(NAME_CHARS, min_size=1, max_size=12).filter(lambda n: len(os.fsencode(n + ".fut")) <= 200)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache with 'odd' chars é")


def _load_quietly(path: Path, backend: str, capfd: pytest.CaptureFixture[str]) -> None:
    path.write_text(PROGRAM)
    capfd.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the RuntimeWarning of the ABI fallback fails the test
        with pf.load(path, backend=backend) as lib:
            assert lib.mode == "api", lib.mode_note
            assert lib.f(41) == 42
            assert lib.source_path is not None and lib.source_path.name == path.name
    out, err = capfd.readouterr()
    assert (out, err) == ("", ""), f"not quiet: {out!r} {err!r}"


@pytest.mark.parametrize("backend", ["c", "multicore"])
@settings(max_examples=6, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(name=NAMES)
@example(name="a-b")
@example(name="a b")
@example(name="é")
@example(name="a'b")
@example(name="a\nb")
@example(name="a\rb")
@example(name='a"b\\c')
@example(name=".")
@example(name="-x")
def test_any_file_name_loads_in_api_mode_quietly(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capfd: pytest.CaptureFixture[str], backend: str, name: str) -> None:
    monkeypatch.setenv("PYBRIDGE_CACHE", str(cache))
    folder = tmp_path / f"dir {name[:3]!r}\n"  # an odd folder too (the path, not only the name)
    folder.mkdir(exist_ok=True)
    _load_quietly(folder / f"{name}.fut", backend, capfd)


@pytest.mark.skipif(os.name != "posix", reason="POSIX file names are bytes")
def test_a_name_that_is_not_utf8_loads_in_api_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PYBRIDGE_CACHE", str(tmp_path / "cache"))
    path = Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), b"\xff\xfe-latin1.fut")))  # surrogate-escaped
    _load_quietly(path, "c", capfd)
