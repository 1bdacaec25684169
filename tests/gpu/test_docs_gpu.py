"""The docs' code blocks that need a GPU (marked ``<!-- doc-test: gpu -->``), each page run whole
(its CPU blocks too, in order, since the GPU blocks may use what they wrote) as tests/test_docs_run.py
runs the rest: scripts/gpu_check.sh runs this file."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

import doc_blocks
from conftest import FROM_SOURCE_TREE
from pybridge.futhark.build import futhark_compiler

GPU_PAGES = [p for p in doc_blocks.pages() if any(b.directive == "gpu" for b in doc_blocks.blocks(p))]
# Top-level modules a page's GPU blocks import that the GPU machine may lack: the one-GPU check carries
# no Dask (scripts/gpu_scale.sh, which carries it, runs those pages).
_OPTIONAL = ("distributed", "dask", "dask_cuda")


def _missing_modules(page: Path) -> list[str]:
    names = {m for b in doc_blocks.blocks(page) if b.runs
             for m in re.findall(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", b.text, re.M)}
    return sorted(m for m in names if m in _OPTIONAL and importlib.util.find_spec(m) is None)


@pytest.mark.gpu
@pytest.mark.parametrize("page", GPU_PAGES, ids=[str(p.relative_to(doc_blocks.ROOT)) for p in GPU_PAGES])
def test_page_runs_as_written_on_the_gpu(page: Path, tmp_path: Path) -> None:
    if futhark_compiler() is None and any(b.directive == "file" and b.argument.endswith(".fut") for b in doc_blocks.blocks(page)):
        pytest.skip("the page compiles a .fut: no Futhark compiler here (carry it: scripts/prepare-device-carry.sh)")
    missing = _missing_modules(page)
    if missing:
        pytest.skip(f"the page imports {', '.join(missing)}, not installed here (scripts/gpu_scale.sh runs it with Dask)")
    ran = doc_blocks.run_page(page, tmp_path / "reader", tmp_path / "cache", from_source_tree=FROM_SOURCE_TREE, gpu=True)
    gpu_blocks = [b for b in doc_blocks.blocks(page) if b.directive == "gpu"]
    assert gpu_blocks and all(b in ran for b in gpu_blocks if b.runs), [b.where for b in gpu_blocks]
