"""Tensor codecs for the exchange, one module each behind quant.codecs.FLOAT_CODECS: int16
(ProFe section III-D), int8 per channel, fp16 and fp32."""

from typing import TYPE_CHECKING, Any

from quant.names import CODECS, WIRE_CODECS

if TYPE_CHECKING:
    from quant.codecs import (
        ALLOWED_DTYPES,
        TensorSpec,
        decode,
        encode,
        expanded_size,
        payload_bounds,
    )
    from quant.int16 import dequantize_int16, quantize_int16

# Importing any quant module runs this file: the codecs (and torch) load on first use, so
# that quant.names stays torch-free.
_LAZY = {"ALLOWED_DTYPES": "quant.codecs", "TensorSpec": "quant.codecs", "decode": "quant.codecs",
         "encode": "quant.codecs", "expanded_size": "quant.codecs",
         "payload_bounds": "quant.codecs", "dequantize_int16": "quant.int16",
         "quantize_int16": "quant.int16"}


def __getattr__(name: str) -> Any:
    """The codec functions and types, imported from their modules on first use."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)


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
