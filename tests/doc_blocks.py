"""The code blocks of README.md and docs/, and how to run them as a reader would.

Every fenced ```python and ```sh block runs, in the page's order, in one temporary folder per page
(outside the checkout), with the pybridge under test: a python block as a script of its own
(``python block.py``: ``__name__ == "__main__"``, nothing left over from the block before), an sh
block under ``bash -e -o pipefail`` with this interpreter's ``python``, ``pip`` and ``pybridge``
first on PATH. Files the page's blocks write stay for the blocks after them. An HTML comment on the
line before a fence changes that (CONTRIBUTING.md, "Code blocks in the docs"):

- ``<!-- doc-test: file NAME -->``: the block (any language) is written to NAME in the page's folder
  and not run: a program or a test file the next blocks use;
- ``<!-- doc-test: gpu -->``: the block needs an NVIDIA GPU; tests/gpu/test_docs_gpu.py runs the page
  with it (scripts/gpu_check.sh), tests/test_docs_run.py without it;
- ``<!-- doc-test: skip REASON -->``: shown, never run; REASON is required (the few commands that act
  on the checkout itself, or need a second machine).

Blocks in other languages (```futhark, ```text, plain ```) are not run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN_LANGUAGES = ("python", "sh")
_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*doc-test:\s*(\w+)\s*(.*?)\s*-->\s*$")
BLOCK_TIMEOUT_S = 600


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    directive: str = ""  # "", "file", "gpu" or "skip"
    argument: str = ""  # the file name, or the reason for a skip

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.directive in ("", "gpu") and self.language in RUN_LANGUAGES


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of one page, with the directive on the line before each (if any)."""
    lines = page.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, language = m.group(1), m.group(2)
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if end == len(lines):
            raise ValueError(f"{page}:{i + 1}: a code block is never closed")
        body = "\n".join(line[len(indent):] if line.startswith(indent) else line for line in lines[i + 1:end]) + "\n"
        d = _DIRECTIVE.match(lines[i - 1]) if i else None
        directive, argument = (d.group(1), d.group(2)) if d else ("", "")
        if directive not in ("", "file", "gpu", "skip"):
            raise ValueError(f"{page}:{i}: unknown doc-test directive {directive!r}")
        if directive in ("file", "skip") and not argument:
            raise ValueError(f"{page}:{i}: 'doc-test: {directive}' needs {'a file name' if directive == 'file' else 'a reason'}")
        found.append(Block(page, i + 1, language, body, directive, argument))
        i = end + 1
    return found


def _command_shims(folder: Path) -> Path:
    """A bin folder with ``python``/``python3``/``pip`` of this interpreter, and ``pybridge`` where
    this interpreter has no console script (a source tree run from PYTHONPATH)."""
    bin_dir = folder / ".doc-test-bin"
    bin_dir.mkdir(exist_ok=True)
    scripts = Path(sys.executable).parent
    for name, command in (("python", ""), ("python3", ""), ("pip", "-m pip"), ("pybridge", "-m pybridge")):
        own = scripts / name
        target = bin_dir / name
        if name == "pybridge" and own.exists():
            continue
        target.write_text(f'#!/bin/sh\nexec "{sys.executable}" {command} "$@"\n')
        target.chmod(0o755)
    return bin_dir


def environment(folder: Path, cache: Path, from_source_tree: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    # The checkout never reaches a block through PYTHONPATH unless asked for; other entries stay (the
    # GPU machine keeps its carried wheels, cffi and PyCUDA among them, on PYTHONPATH).
    kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if p and Path(p).resolve() != ROOT.resolve()]
    if from_source_tree:
        kept.insert(0, str(ROOT))  # the pybridge under test, seen from the page's folder
    if kept:
        env["PYTHONPATH"] = os.pathsep.join(kept)
    env["PATH"] = os.pathsep.join([str(_command_shims(folder)), str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYBRIDGE_CACHE"] = str(cache)  # never the user's own cache
    env["MPLBACKEND"] = "Agg"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_page(page: Path, folder: Path, cache: Path, *, from_source_tree: bool, gpu: bool) -> list[Block]:
    """Run a page's blocks in order in ``folder`` (gpu: the GPU blocks too); returns the blocks that
    ran. Raises AssertionError naming the block (page:line) and its output on a failure."""
    folder.mkdir(parents=True, exist_ok=True)
    env = environment(folder, cache, from_source_tree)
    done: list[Block] = []
    for n, block in enumerate(blocks(page)):
        if block.directive == "file":
            (folder / block.argument).write_text(block.text)
            continue
        if not block.runs or (block.directive == "gpu" and not gpu):
            continue
        if block.language == "python":
            script = folder / f".doc_block_{n}.py"
            script.write_text(block.text)
            cmd = [sys.executable, script.name]
        else:
            cmd = ["bash", "-e", "-o", "pipefail", "-c", block.text]
        try:
            proc = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            raise AssertionError(f"{block.where}: the block ran over {BLOCK_TIMEOUT_S} s\n{e.stdout}\n{e.stderr}") from None
        if proc.returncode != 0:
            raise AssertionError(f"{block.where}: the {block.language} block failed (exit {proc.returncode}):\n"
                                 f"--- block\n{block.text}--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-6000:]}")
        done.append(block)
    return done


def clean(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
