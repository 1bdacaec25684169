"""docs/api/cuda.md lists every public name of pybridge.cuda, each with a description."""

from __future__ import annotations

import re
from pathlib import Path

import pybridge.cuda as cuda

DOC = Path(__file__).resolve().parents[1] / "docs" / "api" / "cuda.md"


def _documented() -> dict[str, str]:
    entries = re.findall(r"^- `([A-Za-z_]\w*)` — (.+)$", DOC.read_text(), re.M)
    return dict(entries)


def test_every_public_name_is_documented_once_with_a_description() -> None:
    documented = _documented()
    assert sorted(set(cuda.__all__) - set(documented)) == []
    assert sorted(set(documented) - set(cuda.__all__)) == []  # no stale entry
    names = re.findall(r"^- `([A-Za-z_]\w*)` — ", DOC.read_text(), re.M)
    assert len(names) == len(set(names))  # one entry per name
    assert all(len(text.strip()) > 10 for text in documented.values())


def test_every_documented_name_exists() -> None:
    for name in _documented():
        assert hasattr(cuda, name), name
