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

    def largest(self, shape: tuple[int, ...], scale: float, data: bytes | memoryview) -> float:
        # An IEEE float's magnitude orders as the integer of its bits without the sign, NaN
        # above Inf, so one integer max finds it (numpy's float16 max is not vectorised).
        width = np.dtype(self.wire).itemsize
        bits = np.frombuffer(data, dtype=f"<u{width}")
        if not bits.size:
            return 0.0
        top = np.bitwise_and(bits, (1 << (8 * width - 1)) - 1).max()
        return float(np.array(top, dtype=f"<u{width}").view(self.wire))  # fp16 fits a float


FP16 = Cast("fp16", "<f2", torch.float16)
FP32 = Cast("fp32", "<f4", torch.float32)
