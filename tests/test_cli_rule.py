"""The command line's one rule, driven with generated bad arguments (hypothesis).

Every bad option, value, backend or file: exit 2, exactly one line on stderr that names the
argument and says what was expected, nothing on stdout, no traceback; nothing runs first. Also:
every help page has a description and every option a help text, without RST markup; the progress
bar draws only on a terminal; -q keeps results and errors only.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pybridge.backends import BACKENDS
from pybridge.cli import build_parser, main
from pybridge.paths import find_build_file

ROOT = Path(__file__).resolve().parents[1]
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``pybridge ARGV`` run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def refused(argv: list[str], *needles: str) -> str:
    """Assert the rule for ``argv``; the one error line."""
    rc, out, err = run_cli(argv)
    assert "Traceback" not in out + err, err
    assert (rc, out) == (2, ""), (argv, rc, out, err)
    lines = err.splitlines()
    assert len(lines) == 1, (argv, err)
    line = lines[0]
    assert line.startswith("pybridge") and ": error: " in line, line
    assert re.search(r"expected|choose from|valid:|must be|such as", line), ("says what was expected", line)
    for n in needles:
        assert n in line, (n, line)
    return line


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("cli-rule")
    (d / "ok.fut").write_text("entry f (x: i32) : i32 = x\n")
    (d / "k.cu").write_text('extern "C" __global__ void k(float* x) {}\n')
    (d / "notes.txt").write_text("not a program\n")
    (d / "rows.json").write_text("{}\n")
    (d / "folder.fut").mkdir()
    locked = d / "locked.fut"
    locked.write_text("entry f (x: i32) : i32 = x\n")
    locked.chmod(0)
    return {"dir": str(d), "fut": str(d / "ok.fut"), "cu": str(d / "k.cu"), "txt": str(d / "notes.txt"),
            "json": str(d / "rows.json"), "folder": str(d / "folder.fut"), "locked": str(locked)}


def commands(files: dict[str, str]) -> dict[str, list[str]]:
    """A valid start of each subcommand (the generated bad part is appended)."""
    return {
        "info": ["info"], "demo": ["demo"], "build": ["build", files["fut"]], "build-cu": ["build", files["cu"]],
        "cache": ["cache"], "cache list": ["cache", "list"], "cache clear": ["cache", "clear"], "cache path": ["cache", "path"],
        "package": ["package", files["fut"], "--name", "x"], "stubs": ["stubs", files["fut"]],
        "install-futhark": ["install-futhark"], "bench overhead": ["bench", "overhead"],
        "bench report": ["bench", "report", files["json"]], "bench scaling": ["bench", "scaling"],
    }


def option_names(argv: list[str]) -> set[str]:
    """Every option string the (sub)command of ``argv`` takes (an unknown one must not be a prefix:
    argparse accepts abbreviations)."""
    if argv[0] == "bench":
        from pybridge.bench.cli import build_parser as bench_parser

        parser = bench_parser()
        argv = argv[1:]
    else:
        parser = build_parser()
    names: set[str] = set()
    for word in [None, *argv]:
        if word is not None:
            sub = next((a.choices[word] for a in parser._actions
                        if isinstance(a, argparse._SubParsersAction) and word in a.choices), None)
            if sub is None:
                continue
            parser = sub
        names |= {o for a in parser._actions for o in a.option_strings}
    return names | {"-v", "--verbose", "-q", "--quiet", "-h", "--help"}


# ------------------------------------------------------------------ unknown options, options elsewhere


@FAST
@given(which=st.sampled_from(["info", "demo", "build", "build-cu", "cache", "cache list", "cache clear", "cache path",
                              "package", "stubs", "install-futhark", "bench overhead", "bench report"]),
       name=st.from_regex(r"\A(--[a-z][a-z0-9-]{0,14}|-[a-zA-Z])\Z"))
def test_an_unknown_option_is_refused_by_its_subcommand(files: dict[str, str], which: str, name: str) -> None:
    start = commands(files)[which]
    assume(not any(o.startswith(name) for o in option_names(start)))  # an abbreviation is an option
    line = refused([*start, name], name)
    assert f"see pybridge {which.replace('build-cu', 'build')} -h" in line, line


@FAST
@given(which=st.sampled_from(["info", "cache list", "cache path", "install-futhark", "demo", "stubs", "bench report"]),
       option=st.sampled_from([("--older-than", "7d"), ("--backend", "c"), ("--name", "x"), ("--arch", "sm_90"),
                               ("--size", "10"), ("--manylinux", None), ("--calls", "5"), ("--generated", "."),
                               ("--option", "-DX=1"), ("--summary", "s"), ("--quick", None), ("--workers", "1,2")]))
def test_an_option_of_another_subcommand_is_not_accepted_and_ignored(files: dict[str, str], which: str,
                                                                      option: tuple[str, str | None]) -> None:
    start = commands(files)[which]
    assume(not any(o.startswith(option[0]) for o in option_names(start)))
    refused([*start, option[0], *([option[1]] if option[1] else [])], option[0])


@pytest.mark.parametrize("argv, needles", [
    (["build", "{cu}", "--backend", "c"], ["--backend: applies to .fut sources only"]),
    (["build", "{fut}", "--arch", "sm_90"], ["--arch: applies to .cu sources only"]),
    (["build", "{fut}", "-I", "{dir}", "--option=-DX"], ["--option, -I: apply to .cu sources only"]),
    (["-v", "info", "-q"], ["-v/--verbose and -q/--quiet", "expected one of them"]),
    (["cache", "--older-than", "7d"], ["choose from 'list', 'clear', 'path'"]),
])
def test_options_that_do_not_apply_are_refused(files: dict[str, str], argv: list[str], needles: list[str]) -> None:
    refused([a.format(**files) for a in argv], *needles)


# ------------------------------------------------------------------ bad values


def _counts(text: str) -> bool:
    """Whether ``text`` is a valid value of the option (what int() takes: ' 5', '+5', '1_0' too)."""
    try:
        return all(int(part) > 0 for part in text.split(","))
    except ValueError:
        return False


@FAST
@given(where=st.sampled_from([["demo", "--size"], ["bench", "overhead", "--calls"], ["bench", "overhead", "--n"],
                              ["bench", "scaling", "--repeat"], ["bench", "scaling", "--workers"]]),
       value=st.one_of(st.integers(max_value=0).map(str), st.text(min_size=1, max_size=8)))
def test_a_bad_count_or_size_names_its_option(where: list[str], value: str) -> None:
    single = where[-1] != "--workers"
    assume(not (_counts(value) if not single else _counts(value) and "," not in value))  # a valid value would run
    assume(not value.startswith("-") or value[1:].isdigit())  # "-x" is an option to argparse: tested above
    refused([*where, value], where[-1])


@FAST
@given(value=st.text(min_size=1, max_size=10).filter(lambda t: not re.fullmatch(r"\s*\d+(\.\d+)?\s*[smhdwSMHDW]?\s*", t)))
def test_a_bad_duration_names_older_than(value: str) -> None:
    assume("\x00" not in value and not value.startswith("-"))
    refused(["cache", "clear", "--older-than", value], "--older-than", "30s, 12h, 7d or 2w")


def _near_miss(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(BACKENDS))
    i = draw(st.integers(0, len(name) - 1))
    edit = draw(st.sampled_from(["swap", "drop", "double", "upper"]))
    if edit == "swap" and i + 1 < len(name):
        return name[:i] + name[i + 1] + name[i] + name[i + 2:]
    if edit == "drop" and len(name) > 1:
        return name[:i] + name[i + 1:]
    if edit == "upper":
        return name.upper()
    return name[:i] + name[i] + name[i:]


backend_typo = st.one_of(st.composite(_near_miss)(), st.text(min_size=1, max_size=12))


@FAST
@given(where=st.sampled_from(["build", "stubs", "bench overhead", "bench scaling"]), typo=backend_typo)
def test_an_unknown_backend_is_refused_with_the_valid_ones(files: dict[str, str], where: str, typo: str) -> None:
    assume(typo not in BACKENDS and not typo.startswith("-"))
    refused([*commands(files)[where], "--backend", typo], "--backend", repr(typo), "expected one of " + ", ".join(BACKENDS))


def test_a_near_miss_backend_is_named() -> None:
    assert "(did you mean 'cuda'?)" in refused(["bench", "overhead", "--backend", "cdua"])
    assert "(did you mean 'multicore'?)" in refused(["build", str(ROOT / "futhark" / "saxpy.fut"), "--backend", "multicor"])
    refused(["package", str(ROOT / "futhark" / "saxpy.fut"), "--name", "x", "--backends", "c,cdua"],
            "--backends", "expected one of c, multicore, cuda", "did you mean 'cuda'")


@FAST
@given(typo=backend_typo)
def test_pf_load_refuses_an_unknown_backend_with_the_valid_ones(typo: str) -> None:
    import pybridge.futhark as pf

    assume(typo not in BACKENDS)
    with pytest.raises(ValueError, match=r"^backend: expected one of c, multicore, cuda, opencl, hip, ispc, got "):
        pf.load("saxpy", backend=typo)


# ------------------------------------------------------------------ files


@FAST
@given(where=st.sampled_from([["build"], ["stubs"], ["package", "--name", "x"], ["bench", "report"]]),
       kind=st.sampled_from(["missing", "folder", "txt", "locked"]),
       stem=st.text(st.characters(codec="ascii", categories=("L", "N")), min_size=1, max_size=12))
def test_a_missing_unreadable_or_wrong_file_is_refused_alike(files: dict[str, str], where: list[str], kind: str, stem: str) -> None:
    assume(kind != "locked" or os.geteuid() != 0)  # root reads any file: no unreadable file to be had
    assume(kind != "txt" or where[0] != "bench")  # any file may hold JSON: its content is checked when read
    path = {"missing": os.path.join(files["dir"], f"{stem}-missing.fut"), "folder": files["folder"],
            "txt": files["txt"], "locked": files["locked"]}[kind]
    argv = [*where[:1], path, *where[1:]] if where[0] != "bench" else [*where, path]
    expected = {"missing": "does not exist", "folder": "is a directory", "txt": "is not a Futhark program (.fut)",
                "locked": "cannot be read"}[kind]
    line = refused(argv, path, expected, "(expected ")
    assert re.search(r"argument (source|prog\.fut|JSON): ", line), line


@pytest.mark.parametrize("argv, needles", [
    (["package", "{fut}", "--name", "x", "--generated", "{dir}/nowhere"], ["--generated", "does not exist", "expected an existing directory"]),
    (["package", "{fut}", "--name", "x", "-o", "{fut}"], ["--output", "not a directory"]),
    (["stubs", "{fut}", "-o", "{dir}/nowhere/x.pyi"], ["--output", "does not exist"]),
    (["bench", "overhead", "--json", "{dir}"], ["--json", "is a directory"]),
    (["bench", "overhead", "--markdown", "{dir}/nowhere/B.md"], ["--markdown", "does not exist"]),
    (["build", "{cu}", "-I", "{dir}/nowhere"], ["-I/--include", "does not exist"]),
    (["build", "{cu}", "--arch", "sm_bogus"], ["--arch", "'sm_bogus'"]),
    (["package", "{fut}", "--name", "not a name"], ["name: 'not a name' must be a Python module name"]),
    (["package", "{fut}", "--name", "x", "--version", "one"], ["version: 'one' is not a PEP 440 version"]),
])
def test_bad_outputs_and_package_values_are_refused_before_anything_runs(files: dict[str, str], argv: list[str],
                                                                          needles: list[str]) -> None:
    refused([a.format(**files) for a in argv], *needles)


def test_the_rule_holds_in_a_real_process_too(tmp_path: Path) -> None:
    """Three runs of ``python -m pybridge`` (the console script's path): exit 2, one line, no stdout."""
    import pybridge

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(pybridge.__file__).resolve().parents[1]),
                                                        *filter(None, [os.environ.get("PYTHONPATH")])])}
    for argv, needle in ((["cache", "list", "--older-than", "7d"], "--older-than"),
                         (["bench", "overhead", "--backend", "cdua"], "did you mean 'cuda'"),
                         (["build", str(tmp_path / "missing.fut")], "missing.fut does not exist")):
        proc = subprocess.run([sys.executable, "-m", "pybridge", *argv], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=120)
        assert (proc.returncode, proc.stdout) == (2, ""), (argv, proc)
        assert len(proc.stderr.splitlines()) == 1 and needle in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


# ------------------------------------------------------------------ help pages


def _pages() -> list[tuple[str, argparse.ArgumentParser]]:
    from pybridge.bench.cli import build_parser as bench_parser

    out: list[tuple[str, argparse.ArgumentParser]] = []

    def walk(name: str, parser: argparse.ArgumentParser) -> None:
        out.append((name, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, p in action.choices.items():
                    if f"{name} {sub}" != "pybridge bench":  # a stand-in: `pybridge bench` has its own parser
                        walk(f"{name} {sub}", p)

    walk("pybridge", build_parser())
    walk("pybridge bench", bench_parser())
    return out


RST = re.compile(r"``|:(?:mod|func|class|meth|attr|data|ref|doc):`|`_\b|^\.\. ", re.MULTILINE)


def test_every_help_page_has_a_description_and_every_option_a_help_text() -> None:
    pages = _pages()
    assert {"pybridge cache clear", "pybridge bench overhead", "pybridge bench report", "pybridge stubs"} <= {n for n, _ in pages}
    for name, parser in pages:
        assert parser.description and parser.description.strip(), f"{name}: no description"
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            assert action.help and action.help != argparse.SUPPRESS, f"{name}: {action.option_strings or action.dest} has no help"
        rc, out, err = run_cli([*name.split()[1:], "-h"])
        assert (rc, err) == (0, ""), (name, err)
        assert parser.description.split()[0] in out, name
        assert not RST.search(out), f"{name} -h shows RST markup: {RST.search(out)}"
        if name == "pybridge bench":
            assert "pybridge bench -h" not in out  # the page does not point at itself


# ------------------------------------------------------------------ quiet, progress


def test_quiet_keeps_results_and_errors_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pybridge.futhark.build import futhark_compiler

    if futhark_compiler() is None:
        pytest.skip("Futhark compiler not found (set FUTHARK=)")
    src = tmp_path / "q.fut"
    src.write_text("entry f (x: i32) : i32 = x\n")
    monkeypatch.setenv("PYBRIDGE_CACHE", str(tmp_path / "cache"))
    rc, out, err = run_cli(["-q", "build", str(src), "--backend", "c"])
    assert (rc, err) == (0, "") and out.strip().endswith("libq.so"), (out, err)
    rc, out, err = run_cli(["build", str(src), "--backend", "c"])  # without -q: the hint, on stderr
    assert rc == 0 and "load it with: pybridge.futhark.load(" in err and "load it with" not in out


def test_progress_draws_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    import logging

    from pybridge.bench.timing import Progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    log = logging.getLogger("pybridge")
    saved = log.level
    try:
        for level, stream, drawn in ((logging.INFO, io.StringIO(), False), (logging.INFO, Terminal(), True),
                                     (logging.ERROR, Terminal(), False)):  # ERROR: pybridge -q
            log.setLevel(level)
            monkeypatch.setattr(sys, "stderr", stream)
            with Progress(2, "test") as bar:
                bar.step("one")
                bar.step("two")
            assert ("\r" in stream.getvalue()) is drawn and (stream.getvalue() != "") is drawn, (level, stream)
    finally:
        log.setLevel(saved)


def test_the_demo_logs_before_its_table(tmp_path: Path) -> None:
    """A first run (cold cache, a fresh process) compiles API-mode bindings: their log lines come
    before the table, not between its rows (stdout and stderr in one pipe, as a terminal shows them)."""
    import pybridge

    if find_build_file("futhark/c/libsaxpy.so") is None:
        pytest.skip("build/futhark not built: run `make`")
    env = {**os.environ, "PYBRIDGE_CACHE": str(tmp_path / "cold"),
           "PYTHONPATH": os.pathsep.join([str(Path(pybridge.__file__).resolve().parents[1]),
                                          *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, "-m", "pybridge", "demo", "saxpy", "--size", "100"], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout
    lines = proc.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("example "))
    logged = [i for i, line in enumerate(lines) if line.startswith("pybridge: ")]
    assert logged and max(logged) < header, lines  # something was compiled, and said so first


@pytest.mark.skipif(shutil.which(os.environ.get("NVCC", "nvcc")) is None, reason="nvcc not on PATH")
def test_a_cu_build_that_failed_exits_1_and_says_it_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel whose declaration cannot be used fails the build (it exited 0, listing the problem
    among the results); nvcc's errors are printed once (they were printed twice)."""
    monkeypatch.setenv("PYBRIDGE_CACHE", str(tmp_path / "cache"))
    body = "int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; if (i < n) out[i] = {};"
    bad_decl = tmp_path / "decl.cu"
    bad_decl.write_text(f'extern "C" __global__ void bad(float* out /*[m]*/, int64_t n) {{ {body.format("2.0f")} }}\n'
                        f'extern "C" __global__ void good(float* out /*[n]*/, int64_t n) {{ {body.format("1.0f")} }}\n')
    rc, out, err = run_cli(["build", str(bad_decl)])
    assert rc == 1, (out, err)
    assert err.splitlines() == [f"pybridge build: {bad_decl} line 1: kernel bad: size of 'out' names 'm', which is not a parameter of bad"]
    assert "kernel good(" in out and "bad" not in out
    broken = tmp_path / "broken.cu"
    broken.write_text(f'extern "C" __global__ void k(float* out /*[n]*/, int64_t n) {{ {body.format("undefined_thing")} }}\n')
    rc, out, err = run_cli(["-q", "build", str(broken)])
    assert (rc, out) == (1, ""), err
    assert err.startswith(f"pybridge build: nvcc could not compile {broken}") and "; nvcc said:\n" in err
    assert err.count('identifier "undefined_thing" is undefined') == 1, err
