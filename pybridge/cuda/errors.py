"""Errors of pybridge.cuda.

* :class:`CudaError`: a CUDA call failed; carries the kernel (or operation), CUDA's error code when
  known, and CUDA's own error string.
* :class:`StickyCudaError`: an error that kills the CUDA context (illegal address, device-side
  assert, ...). Every later CUDA call in this process fails too: save what you can and restart the
  process. It usually surfaces at the next synchronisation, not at the launch that caused it.
* :class:`LaunchError`: a launch configuration CUDA (or our own checks) rejects: too many threads,
  a zero-sized grid, too much shared memory. It is also a ValueError.

Argument mistakes found before anything reaches the GPU (wrong dtype, a NumPy host array, a size
that disagrees with the declaration) are plain TypeError / ValueError naming kernel and parameter.

CUDA's driver (CUresult) and runtime (cudaError_t) codes agree for the errors classified here.
Pure Python: importable without CUDA.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from ..errors import PybridgeError

__all__ = [
    "pycuda_errors",
    "CudaError",
    "LaunchError",
    "StickyCudaError",
    "classify",
    "error_for_code",
    "from_pycuda_error",
    "STICKY_CODES",
    "LAUNCH_CONFIG_CODES",
]

# code -> (name, CUDA's error string). Codes are shared by CUresult and cudaError_t.
_KNOWN: dict[int, tuple[str, str]] = {
    1: ("CUDA_ERROR_INVALID_VALUE", "invalid argument"),
    2: ("CUDA_ERROR_OUT_OF_MEMORY", "out of memory"),
    9: ("cudaErrorInvalidConfiguration", "invalid configuration argument"),
    98: ("cudaErrorInvalidDeviceFunction", "invalid device function"),
    200: ("CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"),
    201: ("CUDA_ERROR_INVALID_CONTEXT", "invalid device context"),
    209: ("CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"),
    214: ("CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error encountered"),
    218: ("CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"),
    222: ("CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain."),
    400: ("CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"),
    500: ("CUDA_ERROR_NOT_FOUND", "named symbol not found"),
    700: ("CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"),
    701: ("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"),
    702: ("CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"),
    709: ("CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"),
    710: ("CUDA_ERROR_ASSERT", "device-side assert triggered"),
    714: ("CUDA_ERROR_HARDWARE_STACK_ERROR", "hardware stack error"),
    715: ("CUDA_ERROR_ILLEGAL_INSTRUCTION", "an illegal instruction was encountered"),
    716: ("CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"),
    717: ("CUDA_ERROR_INVALID_ADDRESS_SPACE", "operation not supported on global/shared address space"),
    718: ("CUDA_ERROR_INVALID_PC", "invalid program counter"),
    719: ("CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"),
    720: ("CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", "too many blocks in cooperative launch"),
}

#: Errors after which the context is unusable ("sticky"): the process must restart.
STICKY_CODES: frozenset[int] = frozenset({214, 700, 702, 710, 714, 715, 716, 717, 718, 719})
#: Errors that mean the launch configuration itself was rejected.
LAUNCH_CONFIG_CODES: frozenset[int] = frozenset({9, 701, 720})

_STICKY_TEXT = {_KNOWN[c][1].lower(): c for c in STICKY_CODES}
_LAUNCH_TEXT = {_KNOWN[c][1].lower(): c for c in LAUNCH_CONFIG_CODES}


class CudaError(PybridgeError, RuntimeError):
    """A CUDA operation failed.

    Attributes: ``kernel`` (kernel or operation name, or None), ``code`` (CUresult / cudaError_t,
    or None when unknown), ``cuda_message`` (CUDA's error string), ``operation`` (the CUDA call).
    """

    def __init__(
        self,
        cuda_message: str,
        *,
        kernel: str | None = None,
        code: int | None = None,
        operation: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.kernel = kernel
        self.code = code
        self.cuda_message = cuda_message
        self.operation = operation
        parts = []
        if kernel:
            parts.append(f"kernel {kernel}")
        if operation:
            parts.append(operation)
        where = ": ".join(parts)
        name = _KNOWN[code][0] if code in _KNOWN else None
        what = cuda_message
        if code is not None:
            what += f" ({name}, code {code})" if name else f" (code {code})"
        msg = f"{where}: {what}" if where else what
        if hint:
            msg += f". {hint}"
        super().__init__(msg)

    @property
    def is_sticky(self) -> bool:
        return isinstance(self, StickyCudaError)


class StickyCudaError(CudaError):
    """The CUDA context is dead (illegal address, device assert, ...): restart the process."""


class LaunchError(CudaError, ValueError):
    """A launch configuration was rejected (by our checks or by CUDA)."""


_STICKY_HINT = (
    "This error is sticky: the CUDA context is unusable and every later CUDA call in this process "
    "will fail; restart the process (it may have been caused by an earlier asynchronous launch)"
)


def classify(code: int | None, message: str = "") -> type[CudaError]:
    """The error class for a CUDA code, or for CUDA's message when the code is unknown."""
    if code is not None:
        if code in STICKY_CODES:
            return StickyCudaError
        if code in LAUNCH_CONFIG_CODES:
            return LaunchError
        return CudaError
    low = message.lower()
    if any(text in low for text in _STICKY_TEXT):
        return StickyCudaError
    if any(text in low for text in _LAUNCH_TEXT):
        return LaunchError
    return CudaError


def error_for_code(
    code: int,
    *,
    kernel: str | None = None,
    operation: str | None = None,
    cuda_message: str | None = None,
) -> CudaError:
    """The exception for a non-zero CUDA return code (e.g. from a host launcher)."""
    if cuda_message is None:
        cuda_message = _KNOWN[code][1] if code in _KNOWN else "unknown CUDA error"
    cls = classify(code)
    hint = _STICKY_HINT if cls is StickyCudaError else None
    return cls(cuda_message, kernel=kernel, code=code, operation=operation, hint=hint)


_PYCUDA_MSG = re.compile(r"^\s*(?P<call>cu\w+) failed: (?P<msg>.*)$", re.S)


def _code_from_text(message: str) -> int | None:
    low = message.lower().strip().rstrip(".")
    for code, (_, text) in _KNOWN.items():
        if low == text.lower().rstrip("."):
            return code
    return None


def from_pycuda_error(exc: BaseException, *, kernel: str | None = None, operation: str | None = None) -> CudaError:
    """Translate a pycuda.driver.Error ("cuLaunchKernel failed: ...") into our classes."""
    text = str(exc)
    m = _PYCUDA_MSG.match(text)
    call, msg = (m.group("call"), m.group("msg").strip()) if m else (None, text.strip())
    code = getattr(exc, "code", None)
    if not isinstance(code, int):
        code = _code_from_text(msg)
    cls = classify(code, msg)
    hint = _STICKY_HINT if cls is StickyCudaError else None
    op = operation or call
    return cls(msg, kernel=kernel, code=code, operation=op, hint=hint)


@contextmanager
def pycuda_errors(*, kernel: str | None = None, operation: str | None = None) -> Iterator[None]:
    """Re-raise PyCUDA's driver errors inside the block as our classes (others pass through)."""
    try:
        yield
    except CudaError:
        raise
    except Exception as e:
        if type(e).__module__.startswith("pycuda"):
            raise from_pycuda_error(e, kernel=kernel, operation=operation) from e
        raise
