"""pybridge: call Futhark programs and hand-written CUDA C kernels from Python.

Subpackages: ``pybridge.futhark`` (Futhark libraries through their C API and manifest),
``pybridge.cuda`` (CUDA kernels through PyCUDA and cffi), ``pybridge.testing`` (property tests
against NumPy). Each is imported on demand so that a machine without a GPU or PyCUDA can use the rest.
"""

__version__ = "0.1.0"
from .errors import PybridgeError

__all__ = ["PybridgeError", "__version__"]
