"""fp16 and fp32: the values cast to a float format, no scale."""

import math

import numpy as np
import torch

from quant.arrays import FixedWidth, native_bytes, peak, to_float32
from quant.errors import QuantizationError


class Cast(FixedWidth):
    """A codec that casts to one float format: `wire` is its little-endian numpy dtype."""

    def __init__(self, name: str, wire: str, dtype: torch.dtype) -> None:
        self.name, self.wire, self.dtype = name, wire, dtype

    def encode(self, name: str, tensor: torch.Tensor, peak_value: float) -> tuple[bytes, float]:
        cast = tensor.to(self.dtype)
        if not math.isfinite(peak(cast)):
            raise QuantizationError(
                f"tensor {name!r} overflows {self.name}; use codec 'int16' or 'fp32' instead"
            )
        return native_bytes(cast.numpy(), self.wire), 1.0

    def decode(self, shape: tuple[int, ...], scale: float,
               data: bytes | memoryview) -> tuple[np.ndarray, bool]:
        floats = to_float32(np.frombuffer(data, dtype=self.wire).reshape(shape))
        return floats, math.isfinite(peak(floats))


FP16 = Cast("fp16", "<f2", torch.float16)
FP32 = Cast("fp32", "<f4", torch.float32)
