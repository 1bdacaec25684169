"""Property tests of Futhark entry points and CUDA kernels against NumPy, derived from signatures::

    import numpy as np, pybridge.futhark as pf
    from pybridge.testing import check_against

    lib = pf.load("saxpy", backend="c")
    def test_saxpy():
        check_against(lambda a, xs, ys: a * xs + ys, lib.saxpy)

``check_against`` reads the entry point's types from the manifest and the shared size ``n`` of
``entry saxpy [n] (a: f32) (xs: [n]f32) (ys: [n]f32)`` from the program's source, generates
inputs with Hypothesis, runs both sides and compares with dtype-aware tolerances. On a difference
Hypothesis shrinks to a minimal case and the ``MismatchError`` lists indices, values and errors.

Modules: ``strategies`` (inputs from manifests, Futhark headers and CUDA signatures), ``compare``
(tolerances, ``check_against``), ``stateful`` (a state machine over handle lifecycles),
and the ``.fut`` header reader, which is ``pybridge.futhark``'s (``pf.load_source``, ``pybridge.futhark.source``).
"""

try:
    import hypothesis  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised where hypothesis is absent
    from ..distribution import install_hint

    raise ImportError(f"pybridge.testing needs hypothesis: {install_hint('testing')} [{e}]") from e

from .compare import (
    DEFAULT_TOLERANCES,
    CallableTarget,
    FutharkTarget,
    KernelTarget,
    Mismatch,
    MismatchError,
    ReferenceRaisedError,
    Target,
    Tolerance,
    apply_rule,
    as_target,
    assert_close,
    check_against,
    compare,
    on_device,
    reduction_bound,
    to_numpy,
    ulp_distance,
)
from .stateful import handle_lifecycle_machine
from .strategies import (
    InputOptions,
    InputSpec,
    Inputs,
    ParamSpec,
    block_sizes,
    elements,
    entry_inputs,
    entry_spec,
    find_source,
    inputs,
    kernel_inputs,
    seeded,
    signature_inputs,
    sizes_strategy,
    spec_from_decl,
    spec_from_entry,
    spec_from_kernel,
    spec_from_text,
)

__all__ = [
    "DEFAULT_TOLERANCES",
    "CallableTarget",
    "FutharkTarget",
    "InputOptions",
    "InputSpec",
    "Inputs",
    "KernelTarget",
    "Mismatch",
    "MismatchError",
    "ReferenceRaisedError",
    "ParamSpec",
    "Target",
    "Tolerance",
    "apply_rule",
    "as_target",
    "assert_close",
    "block_sizes",
    "check_against",
    "compare",
    "elements",
    "entry_inputs",
    "entry_spec",
    "find_source",
    "handle_lifecycle_machine",
    "inputs",
    "kernel_inputs",
    "on_device",
    "reduction_bound",
    "seeded",
    "signature_inputs",
    "sizes_strategy",
    "spec_from_decl",
    "spec_from_entry",
    "spec_from_kernel",
    "spec_from_text",
    "to_numpy",
    "ulp_distance",
]
