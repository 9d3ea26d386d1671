"""Array helpers every codec uses: the peak of a tensor, little-endian bytes, float32 copies."""

import math
import sys

import numpy as np
import torch

LITTLE_ENDIAN = sys.byteorder == "little"


def peak(values: torch.Tensor | np.ndarray) -> float:
    """max |x| in one pass without temporaries; NaN or Inf when `values` holds any."""
    if values.size == 0 if isinstance(values, np.ndarray) else values.numel() == 0:
        return 0.0
    if isinstance(values, np.ndarray):
        low, high = float(np.min(values)), float(np.max(values))
    else:
        low, high = (float(v) for v in torch.aminmax(values))
    if math.isnan(low) or math.isnan(high):
        return math.nan
    return max(-low, high)


def native_bytes(array: np.ndarray, wire: str) -> bytes:
    """The array's bytes in the little-endian wire layout."""
    if LITTLE_ENDIAN and array.dtype == np.dtype(wire):
        return array.tobytes()
    return array.astype(wire).tobytes()


def to_float32(wire: np.ndarray) -> np.ndarray:
    """A new float32 copy of fp16 or fp32 wire values (exact: every float16 is a float32).

    numpy allocates the result (its large arrays get huge pages, so fewer page faults) and
    torch converts into it (vectorised, where numpy's float16 conversion is not).
    """
    out = np.empty(wire.shape, dtype=np.float32)
    if wire.dtype == np.dtype("<f2") and LITTLE_ENDIAN:
        # np.array(copy) makes the read-only wire buffer a writable array torch may view
        torch.from_numpy(out).copy_(torch.from_numpy(np.array(wire)))
    else:
        out[...] = wire
    return out


class FixedWidth:
    """A codec whose payload is one `wire` value per element (int16, fp16, fp32)."""

    wire: str  # the little-endian numpy dtype of one value

    def expanded_size(self, shape: tuple[int, ...]) -> int:
        return math.prod(shape) * np.dtype(self.wire).itemsize

    def payload_bounds(self, shape: tuple[int, ...]) -> tuple[int, int]:
        exact = self.expanded_size(shape)
        return exact, exact
