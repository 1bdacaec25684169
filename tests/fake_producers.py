"""Stand-ins for GPU array producers, for the exchange tests that run without a GPU
(tests/test_call_path_cuda_exchange.py, tests/test_call_path_from_cuda.py): an object whose
``__cuda_array_interface__`` is built per read (as CuPy's and PyTorch's are), and a PyTorch tensor
answering what ``interop.torch_plain`` and ``interop._torch_stream`` ask of one."""

from __future__ import annotations

import types

import numpy as np


class Producer:
    """Anything with a __cuda_array_interface__ (a fresh copy per read, as CuPy and PyTorch make),
    its reads counted; an exception given as the interface is raised by the read."""

    def __init__(self, cai) -> None:
        self.cai = cai
        self.reads = 0

    @property
    def __cuda_array_interface__(self):
        self.reads += 1
        if isinstance(self.cai, BaseException):
            raise self.cai
        return dict(self.cai) if type(self.cai) is dict else self.cai


class FakeTorchDtype:
    pass


F32, U8 = FakeTorchDtype(), FakeTorchDtype()


class Tensor:
    """What interop.torch_plain and _torch_stream read of a torch.Tensor, no more; its interface
    (version 2, no stream) refused for a tensor with grad or a sparse one, as PyTorch refuses it."""

    def __init__(self, shape=(3, 4), dtype=F32, contiguous=True, cuda=True, grad=False, ptr=0x7F0000001000,
                 device=0, sparse=False) -> None:
        self.shape, self.dtype, self.is_cuda, self.requires_grad = shape, dtype, cuda, grad
        self.is_sparse, self._contiguous, self._ptr = sparse, contiguous, ptr
        self.device = types.SimpleNamespace(index=device)

    def is_contiguous(self):
        return self._contiguous

    def is_conj(self):
        return False

    def is_neg(self):
        return False

    def numel(self):
        return int(np.prod(self.shape))

    def data_ptr(self):
        return self._ptr

    @property
    def __cuda_array_interface__(self):
        if self.requires_grad or self.is_sparse:
            raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad or is sparse.")
        return {"typestr": "<f4", "shape": tuple(self.shape), "strides": None, "data": (self._ptr, False), "version": 2}


Tensor.__module__ = "torch"
