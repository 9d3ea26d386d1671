"""int8 with one scale per output channel, then DEFLATE: the codec below 16 bits.

A tensor of rank >= 2 is read as rows along its first dimension (a layer's output channels
or a prototype's class); anything else is one row. Row r gets Delta_r = max|x_r| / 127 and
codes floor(x / Delta_r + 0.5), the rounding of ProFe III-D at 8 bits, so every decoded
value is within Delta_r / 2 of the original (plus the float32 rounding of the result).
The payload is the zlib stream of the float64 scales followed by the codes; the receiver
inflates at most the size the spec implies, so a small frame cannot expand without bound.
"""

import math
import zlib

import numpy as np
import torch

from quant.arrays import peak
from quant.errors import QuantizationError

INT8_MAX = 127
SCALE_BYTES = 8  # float64: the same precision as int16's Delta, no overflow or rounding cases
# Huffman coding alone: int8 codes have skewed byte frequencies but few repeated strings,
# so on 10M normal codes it packs tighter (0.887 vs 0.888-0.892) in half the time of LZ77.
DEFLATE_LEVEL = 6


def rows_of(shape: tuple[int, ...]) -> int:
    """How many scales a tensor of `shape` carries: its first dimension for rank >= 2."""
    return shape[0] if len(shape) >= 2 else 1


def raw_size(shape: tuple[int, ...]) -> int:
    """Bytes of the payload before DEFLATE: the scales and one byte per element."""
    return rows_of(shape) * SCALE_BYTES + math.prod(shape)


def max_payload_size(shape: tuple[int, ...]) -> int:
    """The largest zlib stream a payload of `shape` can need (zlib's compressBound)."""
    n = raw_size(shape)
    return n + (n >> 12) + (n >> 14) + (n >> 25) + 13


def quantize_rows(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes (int8, shaped like `values`) and the float64 Delta of each row; finite input."""
    shape = values.shape
    rows = rows_of(shape)
    if values.size == 0:
        return np.zeros(shape, dtype=np.int8), np.ones(rows)
    matrix = values.astype(np.float64).reshape(rows, -1)
    peaks = np.max(np.abs(matrix), axis=1)
    deltas = np.where(peaks > 0, peaks / INT8_MAX, 1.0)
    # a float64 subnormal peak can make the quotient 0: any tiny step keeps the bound
    deltas[deltas == 0.0] = np.finfo(np.float64).tiny
    matrix /= deltas[:, None]
    matrix += 0.5
    np.floor(matrix, out=matrix)
    # a normal Delta keeps codes within +-127 (peak/Delta is 127 up to one rounding)
    np.clip(matrix, -INT8_MAX, INT8_MAX, out=matrix)
    return matrix.astype(np.int8).reshape(shape), deltas


def dequantize_rows(codes: np.ndarray, deltas: np.ndarray) -> np.ndarray:
    """Inverse of quantize_rows: codes * Delta_r in float64, rounded to float32."""
    rows = rows_of(codes.shape)
    if codes.size == 0:
        return np.zeros(codes.shape, dtype=np.float32)
    with np.errstate(over="ignore"):  # a peer's scale may overflow: decode() refuses Inf
        values = codes.astype(np.float64).reshape(rows, -1) * deltas[:, None]
        return values.astype(np.float32).reshape(codes.shape)


def pack(values: np.ndarray) -> bytes:
    """The int8 payload of a finite floating array."""
    codes, deltas = quantize_rows(values)
    raw = deltas.astype("<f8").tobytes() + codes.tobytes()
    deflater = zlib.compressobj(DEFLATE_LEVEL, zlib.DEFLATED, zlib.MAX_WBITS, 9,
                                zlib.Z_HUFFMAN_ONLY)
    return deflater.compress(raw) + deflater.flush()


def unpack(data: bytes | memoryview, shape: tuple[int, ...]) -> np.ndarray:
    """float32 values of a payload for `shape`; QuantizationError on anything malformed."""
    expected = raw_size(shape)
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(data, expected)
    except zlib.error as exc:
        raise QuantizationError(f"int8 payload is not a valid zlib stream: {exc}") from None
    if len(raw) != expected or not inflater.eof or inflater.unconsumed_tail \
            or inflater.unused_data:
        raise QuantizationError(
            f"int8 payload inflates to other than the {expected} bytes its shape needs"
        )
    rows = rows_of(shape)
    deltas = np.frombuffer(raw, dtype="<f8", count=rows).astype(np.float64)
    if not np.all(np.isfinite(deltas)) or np.any(deltas <= 0):
        raise QuantizationError("int8 scales must be finite and positive")
    codes = np.frombuffer(raw, dtype=np.int8, offset=rows * SCALE_BYTES).reshape(shape)
    return dequantize_rows(codes, deltas)


class Int8:
    """The int8 codec: a scale per row and a byte per value, DEFLATEd."""

    name = "int8"

    def encode(self, name: str, tensor: torch.Tensor, peak: float) -> tuple[bytes, float]:
        return pack(tensor.to(torch.float64).numpy()), 1.0

    def decode(self, shape: tuple[int, ...], scale: float,
               data: bytes | memoryview) -> tuple[np.ndarray, bool]:
        return unpack(data, shape), False  # finiteness is checked by the caller

    def largest(self, shape: tuple[int, ...], scale: float, data: bytes | memoryview) -> float:
        return peak(unpack(data, shape))  # the zlib stream must be undone to know

    def payload_bounds(self, shape: tuple[int, ...]) -> tuple[int, int]:
        return 1, max_payload_size(shape)

    def expanded_size(self, shape: tuple[int, ...]) -> int:
        return raw_size(shape)
