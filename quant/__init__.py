"""Tensor codecs for the exchange, one module each behind quant.codecs.FLOAT_CODECS: int16
(ProFe section III-D), int8 per channel, fp16 and fp32. Their names are in quant.names, which
loads no torch; import the codecs from quant.codecs."""
