"""The codecs by name, torch-free: a config names them before any tensor is loaded;
quant.codecs.FLOAT_CODECS implements each."""

# The codecs a user may configure, in the order messages list them.
CODECS = ("int16", "int8", "fp16", "fp32")

RAW = "raw"
WIRE_CODECS = (*CODECS, RAW)
"""Codecs a received spec may carry; "raw" is chosen automatically for non-floating tensors."""
