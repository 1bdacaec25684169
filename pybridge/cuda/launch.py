"""The cuda.core-style ``launch(stream, config, kernel, *args)``: the top of the kernel layers.

    cfg = LaunchConfig(grid=grid_for(n, 256), block=256)
    launch(stream, cfg, kernel, 2.0, x, y, out, n)

Layers, bottom up: :mod:`~pybridge.cuda.launch_config` (configurations, pure Python) ->
:mod:`~pybridge.cuda.kernel` (checked arguments, prepared launches) -> this module.
"""

from __future__ import annotations

from typing import Any

from .kernel import Kernel
from .launch_config import Dim3, LaunchConfig, grid_2d, grid_for  # noqa: F401 - their import path before launch_config.py

__all__ = ["launch"]


def launch(stream: Any, config: LaunchConfig, kernel: Kernel, *args: Any) -> None:
    """Launch ``kernel`` with ``config`` on ``stream`` (None = legacy default), after checking args.

    The same checks as ``kernel(*args, config=config, stream=stream)`` at a lower per-call cost: a
    plain function takes positional arguments faster than an object's ``__call__`` takes keywords."""
    if type(config) is not LaunchConfig and not isinstance(config, LaunchConfig):
        raise TypeError(f"launch() needs a LaunchConfig, got {type(config).__name__}")
    kernel._checked_launch(config, args, stream)
