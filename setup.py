"""Packaging steps that pyproject.toml cannot declare (the metadata is there).

`make` builds the native artefacts into build/ (build/futhark, build/cuda, build/reference);
setuptools' own outputs go to build/setuptools, apart from them. build_py clears the package's
pybridge/_build and copies into it what users need: build/futhark, build/cuda, the probe program of
build/reference (`pybridge demo` and `pybridge bench` run it; with its C) and
scripts/install-futhark.sh (as pybridge/_scripts, for `pybridge install-futhark`). Never the record
of the compiler `make` used (build/futhark-compiler.txt): a path of the machine that built the
wheel, which would choose the program an installed pybridge runs (issue 31).

No libraries built (an sdist, or `pip install .` before `make`): `make` runs first, obtaining the
Futhark compiler into the per-user data folder (install-futhark.sh's default) unless one is found. If still nothing was built the
install fails saying why; PYBRIDGE_ALLOW_NO_LIBRARIES=1 installs without them (pybridge info then
says so), PYBRIDGE_NO_MAKE=1 never runs make.

The compiled call path, pybridge/futhark/_callpath.c, is built as one extension against the stable
ABI (Py_LIMITED_API 3.10, an .abi3.so that CPython 3.10 and later load). Its build may fail (no C
compiler, no Python headers) without failing the install, as MarkupSafe's speedups do: pybridge
then takes its pure-Python path, and `pybridge info` says so.

A wheel that carries the extension is tagged cp310-abi3-<platform>; one that carries only compiled
libraries (the extension failed) py3-none-<platform> (plain C/CUDA libraries loaded through
cffi/ctypes, not CPython extensions, so any Python 3 of that platform).
"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

HERE = Path(__file__).resolve().parent
MAKE_BUILD = HERE / "build"  # the Makefile's BUILD
# *.fut: the program beside its library, for the size names the manifest leaves out (Library.source).
ARTEFACTS = ("*.so", "*.json", "*.h", "*.fut", "*.cubin", "*.ptx", "*.fatbin")
SHIPPED_TEST_PROGRAMS = ("probe",)  # of build/reference: pybridge demo and pybridge bench run it
# its generated C too: `pybridge bench overhead` builds futhark-ffi's module from it for the comparison
SHIPPED_TEST_ARTEFACTS = ARTEFACTS + ("*.c",)
LIMITED_API = "cp310"  # the oldest CPython the abi3 extension serves (pyproject.toml's requires-python)
CALL_PATH = Extension(
    "pybridge.futhark._callpath",
    ["pybridge/futhark/_callpath.c"],
    py_limited_api=True,  # named _callpath.abi3.so; the C defines Py_LIMITED_API 0x030A0000 itself
    optional=True,  # a failed build warns and leaves the pure-Python path (build_ext_optional)
    # The debug information names the folder it was compiled in: mapped to "." so that the wheel
    # carries no path of the machine that built it.
    extra_compile_args=[f"-ffile-prefix-map={d}=." for d in sorted({str(HERE), os.getcwd()})],
)


def _libraries(build: Path) -> list[Path]:
    return sorted(build.glob("futhark/*/lib*.so")) + sorted(build.glob("cuda/*.cubin")) + sorted(build.glob("cuda/lib*.so"))


_MAKE_STATE: dict[str, str] = {}
MAKE_TAIL_LINES = 60  # of make's output, kept for the messages of build_py
MAKE_FAILURE_LINES = 12  # repeated under "make failed": its error, whichever job of -j it came from


def _tell_terminal(line: str) -> None:
    """Say ``line`` to the person at the terminal: pip shows a build's output only with -v, and a
    silent `make` of minutes looks like a hang. Nothing without a terminal (CI logs, no tty)."""
    try:
        with open("/dev/tty", "w") as tty:
            tty.write("\n" + line + "\n")  # on a line of its own, after pip's spinner
    except OSError:
        pass


def ensure_make_outputs() -> bool:
    """Run `make` once when no library is built (and PYBRIDGE_NO_MAKE is not set); True if the
    build tree has libraries afterwards. make's output streams to stderr as it comes (what
    `pip install -v` shows); its last lines go into the failure message."""
    if _libraries(MAKE_BUILD) or "ran" in _MAKE_STATE:
        return bool(_libraries(MAKE_BUILD))
    _MAKE_STATE["ran"] = ""
    if os.environ.get("PYBRIDGE_NO_MAKE") == "1" or not (HERE / "Makefile").is_file():
        return False
    env = {**os.environ, "PYTHON": sys.executable}
    cmd = ["make", f"-j{min(os.cpu_count() or 1, 4)}"]
    _tell_terminal("pybridge: no libraries built yet: running `make` first (about 2 minutes, more the first time, when "
                   "it fetches the Futhark compiler); `pip install -v .` shows each step")
    print(f"pybridge: no libraries in {MAKE_BUILD}: running {' '.join(cmd)}", file=sys.stderr, flush=True)
    tail: collections.deque[str] = collections.deque(maxlen=MAKE_TAIL_LINES)
    try:
        with subprocess.Popen(cmd, cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              errors="replace", bufsize=1) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                sys.stderr.write(line)
                sys.stderr.flush()
                tail.append(line.rstrip("\n"))
    except FileNotFoundError:
        _MAKE_STATE["ran"] = "`make` is not installed"
        return False
    _MAKE_STATE["ran"] = "\n".join(tail).strip()
    if proc.returncode != 0:
        last = "\n".join(list(tail)[-MAKE_FAILURE_LINES:])  # the rest was streamed above (pip shows it on failure)
        raise SystemExit(f"pybridge: `make` failed (exit {proc.returncode}); the end of its output:\n{last}")
    return bool(_libraries(MAKE_BUILD))


class build_py_with_artefacts(build_py):
    """The package plus what `make` built for users, in a freshly cleared pybridge/_build."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):  # an editable install imports the checkout (its build/)
            return
        package = Path(self.build_lib) / "pybridge"
        shutil.rmtree(package / "_build", ignore_errors=True)  # nothing stale from an earlier build
        shutil.rmtree(package / "_scripts", ignore_errors=True)
        (package / "_scripts").mkdir(parents=True)
        shutil.copy2(HERE / "scripts" / "install-futhark.sh", package / "_scripts" / "install-futhark.sh")
        if not ensure_make_outputs():
            why = _MAKE_STATE.get("ran") or "PYBRIDGE_NO_MAKE=1"
            message = (
                f"pybridge: no compiled libraries in {MAKE_BUILD} (make: {why.splitlines()[-1] if why else 'nothing built'}).\n"
                "Run `make` first (it obtains the Futhark compiler; see README 'Requirements'), or set "
                "PYBRIDGE_ALLOW_NO_LIBRARIES=1 to install without them (pybridge.futhark.load('prog.fut') still builds "
                "programs where a Futhark compiler is found; `pybridge info` will say nothing is built)."
            )
            if os.environ.get("PYBRIDGE_ALLOW_NO_LIBRARIES") != "1":
                raise SystemExit(message)
            print("WARNING: " + message, file=sys.stderr)
            return
        dst = package / "_build"
        for sub in ("futhark", "cuda"):
            for pattern in ARTEFACTS:
                for f in (MAKE_BUILD / sub).rglob(pattern) if (MAKE_BUILD / sub).is_dir() else ():
                    if "__pycache__" in f.parts or any(part.startswith(".tmp-") for part in f.parts):
                        continue
                    self._ship(f, dst / f.relative_to(MAKE_BUILD))
        for prog in SHIPPED_TEST_PROGRAMS:
            for f in MAKE_BUILD.glob(f"reference/*/*{prog}.*"):
                if f.stem in (prog, f"lib{prog}") and any(f.match(p) for p in SHIPPED_TEST_ARTEFACTS):
                    self._ship(f, dst / f.relative_to(MAKE_BUILD))

    @staticmethod
    def _ship(src: Path, target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)


class build_ext_optional(build_ext):
    """build_ext whose optional extension may fail to build, saying so in one block (setuptools'
    own warning for ``optional=True`` is one line among many); ``built`` names what was built."""

    built: list[str] = []

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:  # noqa: BLE001 - no compiler at all (setuptools raises before any extension)
            self._warn(f"{type(e).__name__}: {e}")
        for ext in self.extensions:
            if Path(self.get_ext_fullpath(ext.name)).is_file():
                build_ext_optional.built.append(ext.name)
            else:
                self._warn("see the compiler's message above")

    @staticmethod
    def _warn(why: str) -> None:
        line = "=" * 74
        print(f"{line}\nWARNING: pybridge's compiled call path (pybridge/futhark/_callpath.c) could not be built ({why}).\n"
              "pybridge works without it, more slowly per call (`pybridge info` says which path is in use). To build it,\n"
              f"install a C compiler and the Python headers (Debian: apt-get install gcc python3-dev) and reinstall.\n{line}",
              file=sys.stderr)


class bdist_wheel_platform(bdist_wheel):
    """cp310-abi3-<platform> when the wheel carries the abi3 extension, py3-none-<platform> when it
    carries compiled libraries only, py3-none-any otherwise."""

    def finalize_options(self) -> None:
        if ensure_make_outputs():  # platlib, not purelib, and root_is_pure False
            self.distribution.has_ext_modules = lambda: True  # type: ignore[method-assign]
        super().finalize_options()

    def get_tag(self) -> tuple[str, str, str]:
        python, abi, plat = super().get_tag()  # called after the build (the wheel's name)
        if CALL_PATH.name in build_ext_optional.built and python.startswith("cp3"):
            return LIMITED_API, "abi3", plat
        if not self.root_is_pure:
            return "py3", "none", plat
        return python, abi, plat


setup(
    ext_modules=[CALL_PATH],
    cmdclass={"build_py": build_py_with_artefacts, "build_ext": build_ext_optional, "bdist_wheel": bdist_wheel_platform},
    options={"build": {"build_base": "build/setuptools"}},
)
