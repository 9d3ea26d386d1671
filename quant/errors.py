"""What a codec raises: the node maps it at its message boundary (node.net.message)."""


class QuantizationError(ValueError):
    """A tensor that a codec cannot encode or bytes it cannot decode."""
