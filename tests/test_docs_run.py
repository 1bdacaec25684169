"""Every code block of README.md and docs/ runs as written, from a folder outside the checkout, with
the pybridge under test (tests/doc_blocks.py says how; blocks that need a GPU run in
tests/gpu/test_docs_gpu.py). Also: no block escapes the runner under another language name, every
block not run says why, the README's commands are the ones .ci/run runs, and local links resolve."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import doc_blocks
from conftest import FROM_SOURCE_TREE
from pybridge.futhark.build import futhark_compiler

ROOT = doc_blocks.ROOT
# Languages a block may be written in: the two that run, and the ones that are data or output.
KNOWN_LANGUAGES = {"python", "sh", "futhark", "text", "c", "cuda", "toml", ""}
CPU_PAGES = [p for p in doc_blocks.pages() if any(b.runs and b.directive != "gpu" for b in doc_blocks.blocks(p))]


@pytest.fixture(scope="module")
def doc_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("doc-cache")


@pytest.mark.futhark
@pytest.mark.slow
@pytest.mark.skipif(futhark_compiler() is None, reason="Futhark compiler not found: run `make` (it obtains it) or set FUTHARK")
@pytest.mark.parametrize("page", CPU_PAGES, ids=[str(p.relative_to(ROOT)) for p in CPU_PAGES])
def test_page_runs_as_written(page: Path, tmp_path: Path, doc_cache: Path) -> None:
    ran = doc_blocks.run_page(page, tmp_path / "reader", doc_cache, from_source_tree=FROM_SOURCE_TREE, gpu=False)
    assert ran, f"{page}: no block ran"


def _all_blocks() -> list[doc_blocks.Block]:
    return [b for p in doc_blocks.pages() for b in doc_blocks.blocks(p)]


def test_every_block_is_run_or_says_why() -> None:
    wrong = [f"{b.where}: ```{b.language}" for b in _all_blocks() if b.language not in KNOWN_LANGUAGES]
    assert not wrong, f"blocks in a language the doc test neither runs nor knows as data (use python or sh): {wrong}"
    not_run = [b for b in _all_blocks() if b.directive == "skip"]
    assert all(len(b.argument.split()) >= 3 for b in not_run), [b.where for b in not_run]
    # The exceptions stay few: the README's two commands and the second machine of docs/sharing.md.
    assert len(not_run) <= 5, [f"{b.where}: {b.argument}" for b in not_run]
    files = [b for b in _all_blocks() if b.directive == "file"]
    assert all(re.fullmatch(r"[\w.-]+", b.argument) for b in files), [b.where for b in files]


def test_the_readmes_commands_are_what_ci_runs() -> None:
    readme = {b.text.strip() for b in doc_blocks.blocks(ROOT / "README.md") if b.language == "sh"}
    ci = (ROOT / ".ci" / "run").read_text()
    assert ".venv/bin/pytest -rs -n auto tests" in readme and "PYBRIDGE_TEST_INSTALLED=1 .venv/bin/pytest -rs -n auto tests" in ci
    quick = [c for c in readme if "not slow" in c]
    assert quick == ['.venv/bin/pytest -rs -n auto -m "not slow" tests'], readme


_LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def test_local_links_resolve() -> None:
    broken = []
    for page in [*doc_blocks.pages(), ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md"]:
        for target, _anchor in _LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken
