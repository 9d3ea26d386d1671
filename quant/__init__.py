"""Tensor codecs for the exchange, one module each behind quant.codecs.FLOAT_CODECS: int16
(ProFe section III-D), int8 per channel, fp16 and fp32."""

from quant.codecs import (
    ALLOWED_DTYPES,
    CODECS,
    WIRE_CODECS,
    TensorSpec,
    decode,
    encode,
    expanded_size,
    payload_bounds,
)
from quant.int16 import dequantize_int16, quantize_int16

__all__ = [
    "ALLOWED_DTYPES",
    "CODECS",
    "WIRE_CODECS",
    "TensorSpec",
    "decode",
    "dequantize_int16",
    "encode",
    "expanded_size",
    "payload_bounds",
    "quantize_int16",
]
