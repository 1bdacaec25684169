"""docs/api/futhark.md lists every public name of pybridge.futhark, each with a description."""

from __future__ import annotations

import re
from pathlib import Path

import pybridge.futhark as pf

DOC = Path(__file__).resolve().parents[1] / "docs" / "api" / "futhark.md"


def _documented() -> dict[str, str]:
    """name -> description, from the doc's "- `name` — description" lines."""
    found = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"- `([A-Za-z_][A-Za-z0-9_]*)` — (.+)", line)
        if m:
            found[m.group(1)] = m.group(2).strip()
    return found


def test_every_public_name_is_documented_once_with_a_description():
    documented = _documented()
    missing = [n for n in pf.__all__ if n not in documented]
    assert not missing, f"docs/api/futhark.md lacks {missing}"
    assert all(len(documented[n]) > 20 for n in pf.__all__), "a one-line description per name"


def test_the_doc_names_nothing_that_is_not_public():
    extra = sorted(set(_documented()) - set(pf.__all__))
    assert not extra, f"docs/api/futhark.md documents {extra}, which pybridge.futhark.__all__ does not export"


def test_every_public_name_exists():
    assert all(hasattr(pf, n) for n in pf.__all__)
    assert len(set(pf.__all__)) == len(pf.__all__)
