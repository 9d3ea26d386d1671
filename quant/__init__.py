"""Tensor codecs for the exchange: int16 (ProFe section III-D), fp16 and fp32."""

from quant.codecs import (
    ALLOWED_DTYPES,
    CODECS,
    WIRE_CODECS,
    TensorSpec,
    decode,
    dequantize_int16,
    encode,
    encoded_size,
    quantize_int16,
)

__all__ = [
    "ALLOWED_DTYPES",
    "CODECS",
    "WIRE_CODECS",
    "TensorSpec",
    "decode",
    "dequantize_int16",
    "encode",
    "encoded_size",
    "quantize_int16",
]
