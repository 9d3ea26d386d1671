"""int16, ProFe section III-D: one scale Delta = max|x| / 32767 per tensor, codes
floor(x / Delta + 0.5), so every decoded value is within Delta / 2 of the original."""

import math

import numpy as np
import torch

from quant.arrays import FixedWidth
from quant.arrays import peak as peak_of
from quant.errors import QuantizationError

INT16_MAX = 32767
WIRE = "<i2"

# Elements per block in the int16 paths: their float64 temporaries stay in the CPU cache,
# so a large tensor costs a few passes over memory rather than one per operation.
BLOCK = 1 << 15
SUBNORMAL_DELTA = 1e-300  # above float64's smallest normal (2.2e-308), with room to spare

# 2**128 - 2**103: halfway between float32's largest value and 2**128 (ties round to even: Inf)
FLOAT32_OVERFLOW = float(2**128 - 2**103)


def _blocks(size: int) -> range:
    return range(0, size, BLOCK)


def quantize_int16(x: np.ndarray, peak: float | None = None) -> tuple[np.ndarray, float]:
    """ProFe III-D: codes floor(x/Delta + 0.5) as little-endian int16, Delta = max|x| / 32767.

    An all-zero (or empty) array gets Delta = 1.0, so its codes and decoded values are exact
    zeros. The arithmetic is float64, block by block; `peak` is max|x| when already known.
    """
    values = np.asarray(x)
    if values.dtype.kind != "f" or values.dtype.itemsize < 4:
        values = values.astype(np.float64)
    peak = peak_of(values) if peak is None else peak
    if not math.isfinite(peak):
        raise QuantizationError("cannot quantize an array containing NaN or Inf")
    delta = peak / INT16_MAX if peak > 0 else 1.0
    if delta == 0.0:
        # peak is a float64 subnormal whose quotient underflows; any tiny step keeps the bound
        delta = float(np.finfo(np.float64).tiny)
    # With a normal Delta, |x| <= peak keeps every code within +-32767 already (peak/Delta
    # is 32767 up to one rounding); only a subnormal Delta needs the clip.
    clip = delta < SUBNORMAL_DELTA
    flat = values.reshape(-1)
    codes = np.empty(flat.size, dtype="<i2")
    work = np.empty(min(BLOCK, flat.size), dtype=np.float64)
    for start in _blocks(flat.size):
        block = work[:len(flat[start:start + BLOCK])]
        block[...] = flat[start:start + BLOCK]  # exact: every float32 is a float64
        np.divide(block, delta, out=block)
        block += 0.5
        np.floor(block, out=block)
        if clip:
            np.clip(block, -INT16_MAX, INT16_MAX, out=block)
        codes[start:start + len(block)] = block
    return codes.reshape(values.shape), delta


def dequantize_int16(codes: np.ndarray, delta: float) -> np.ndarray:
    """Inverse of quantize_int16: codes * Delta (in float64) as float32."""
    wire = np.asarray(codes)
    flat = wire.reshape(-1)
    out = np.empty(flat.size, dtype=np.float32)
    work = np.empty(min(BLOCK, flat.size), dtype=np.float64)
    for start in _blocks(flat.size):
        block = work[:len(flat[start:start + BLOCK])]
        block[...] = flat[start:start + BLOCK]
        block *= delta
        out[start:start + len(block)] = block  # rounds to nearest, as astype does
    return out.reshape(wire.shape)


class Int16(FixedWidth):
    """The int16 codec: 2 bytes per value, one float64 scale in the spec."""

    name = "int16"
    wire = WIRE

    def encode(self, name: str, tensor: torch.Tensor, peak: float) -> tuple[bytes, float]:
        exact = tensor if tensor.dtype in (torch.float32, torch.float64) else tensor.float()
        codes, delta = quantize_int16(exact.numpy(), peak)
        return codes.tobytes(), delta

    def decode(self, shape: tuple[int, ...], scale: float,
               data: bytes | memoryview) -> tuple[np.ndarray, bool]:
        wire = np.frombuffer(data, dtype=WIRE).reshape(shape)
        finite = math.isfinite(self.largest(shape, scale, data))
        if finite:
            return dequantize_int16(wire, scale), True
        with np.errstate(over="ignore"):  # values past float32 become Inf: refused by the caller
            return dequantize_int16(wire, scale), False

    def largest(self, shape: tuple[int, ...], scale: float, data: bytes | memoryview) -> float:
        # |value| grows with |code|: the largest code times Delta, rounded to float32 as
        # dequantize_int16 rounds each value, is the largest value
        wire = np.frombuffer(data, dtype=WIRE)
        code = max(-int(wire.min()), int(wire.max())) if wire.size else 0
        value = code * scale
        # from half an ulp above float32's largest value, rounding gives Inf (numpy would
        # warn); below it, the value rounded as dequantize_int16 rounds each one
        return math.inf if value >= FLOAT32_OVERFLOW else float(np.float32(value))

