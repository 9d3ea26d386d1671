"""Tensor codecs for the exchange: int16 (ProFe section III-D), fp16 and fp32."""
