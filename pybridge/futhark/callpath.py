"""Which call path pybridge.futhark takes: the compiled one or the pure-Python fallback.

The compiled path is the extension ``pybridge.futhark._callpath`` (_callpath.c, built with the
package against the stable ABI: handle storage and lifetime, context state, the per-entry-point
call plan, DLPack capsules). Where it could not be built (no C compiler or no Python headers at
install time) the pure-Python code does the same job, more slowly; ``PYBRIDGE_CALL_PATH=python``
forces that path (read once, at import). ``pybridge info`` prints :data:`DESCRIPTION`.

The choice is made once per process: handles of one process are all of one kind. Tests compare the
two call plans in one process with :func:`python_plans` (libraries loaded inside it get the Python
plan over the same handles).
"""

from __future__ import annotations

import contextlib
import importlib
import os
from types import ModuleType
from typing import Iterator

ENV = "PYBRIDGE_CALL_PATH"


def _load() -> tuple[ModuleType | None, str]:
    if os.environ.get(ENV, "").strip().lower() == "python":
        return None, f"Python ({ENV}=python)"
    # import_module, not ``from . import``: inside the package's own import a missing submodule
    # reads as a "partially initialized module (circular import)" error.
    try:
        module = importlib.import_module(f"{__package__}._callpath")
    except ModuleNotFoundError:  # not built: no C compiler or Python headers when installed
        return None, "Python (the compiled extension is not built)"
    except ImportError as e:  # built, but it does not load here
        return None, f"Python (the compiled extension does not load: {e})"
    return module, "compiled (pybridge.futhark._callpath, stable ABI)"


compiled, DESCRIPTION = _load()
_python_plans = 0


@contextlib.contextmanager
def python_plans() -> Iterator[None]:
    """Libraries loaded inside this block call through the Python plan (for comparing the two)."""
    global _python_plans
    _python_plans += 1
    try:
        yield
    finally:
        _python_plans -= 1


def plans_compiled() -> bool:
    """Whether entry points made now get the compiled plan (where their library allows it)."""
    return compiled is not None and not _python_plans


__all__ = ["DESCRIPTION", "ENV", "compiled", "plans_compiled", "python_plans"]
