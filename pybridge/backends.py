"""Futhark backends: the names pybridge knows, a check with the valid list, and the one rule that
picks the default everywhere (``pf.load``, ``pybridge build`` and ``demo``, packaged modules).

The default is the best backend present: cuda where a GPU is usable, else multicore, else c, then
any other in the order given. A backend that is asked for by name is used as asked, or refused.
"""

from __future__ import annotations

import ctypes
import difflib
import logging
from collections.abc import Iterable

# Every backend whose library pybridge can build and load (build.LINK_FLAGS has their link flags).
BACKENDS = ("c", "multicore", "cuda", "opencl", "hip", "ispc")
PREFERENCE = ("cuda", "multicore", "c")


def check_backend(name: object, valid: Iterable[str] = BACKENDS, what: str = "backend") -> str:
    """``name`` if it is one of ``valid``; else a ValueError naming ``what``, the closest valid
    name (``cdua`` -> ``cuda``) and the valid list."""
    choices = list(valid)
    if isinstance(name, str) and name in choices:
        return name
    close = difflib.get_close_matches(str(name), choices, n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(f"{what}: expected one of {', '.join(choices)}, got {name!r}{hint}")


def gpu_present() -> tuple[bool, str]:
    """(whether a CUDA device exists, why not), asked of the driver without creating a context.

    Futhark's cuda backend calls exit() when it finds no device, which would kill Python."""
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            cu = ctypes.CDLL(name)
            break
        except OSError:
            continue
    else:
        return False, "the CUDA driver (libcuda.so.1) is not installed"
    if cu.cuInit(0) != 0:
        return False, "cuInit failed (no usable NVIDIA GPU or driver)"
    count = ctypes.c_int(0)
    if cu.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return False, "the CUDA driver reports no device"
    return True, ""


def preferred(available: Iterable[str]) -> list[str]:
    """``available`` best first: cuda (last where no GPU is usable: its library cannot create a
    context then), multicore, c, then the rest in their given order."""
    present = list(dict.fromkeys(available))
    order = [b for b in PREFERENCE if b in present] + [b for b in present if b not in PREFERENCE]
    if "cuda" in order and not gpu_present()[0]:
        order.remove("cuda")
        order.append("cuda")
    return order


def choose_backend(available: Iterable[str], requested: str | None = None, logger: logging.Logger | None = None,
                   name: str = "") -> str:
    """``requested`` if ``available`` has it (else a ValueError listing them); else the best present
    (:func:`preferred`), with one INFO line on ``logger`` when cuda is passed over for want of a GPU."""
    present = list(dict.fromkeys(available))
    if requested is not None:
        check_backend(requested)
        if requested not in present:
            raise ValueError(f"backend: {name or 'this'} has no {requested!r} library; it has {', '.join(present) or 'none'}")
        return requested
    order = preferred(present)
    if not order:
        raise ValueError(f"{name or 'this'}: no backend to choose from")
    if order[0] != "cuda" and "cuda" in present and logger is not None:
        logger.info("%s: no usable GPU (%s); using %s", name or "cuda", gpu_present()[1], order[0])
    return order[0]
