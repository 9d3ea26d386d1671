"""The exception tree every protofed component raises; the CLI catches only the base."""


class ProtofedError(Exception):
    """Base of every error protofed raises on purpose."""


class ConfigError(ProtofedError):
    """A config file, key or value the user must fix."""


class TopologyError(ConfigError):
    """A graph that cannot carry the federation (disconnected, self-loops, wrong size)."""


class DataError(ProtofedError):
    """Dataset files missing, corrupt or unsuitable for the requested partition."""


class QuantizationError(ProtofedError):
    """A tensor that a codec cannot encode or bytes it cannot decode."""


class TransportError(ProtofedError):
    """A ZeroMQ failure mapped at the transport boundary."""


class PeerTimeout(TransportError):
    """Neighbours that did not answer within the configured time."""


class ProtocolError(TransportError):
    """A received message that breaks the wire protocol; it is dropped and counted."""


class DeployError(ProtofedError):
    """A federation that cannot be started, watched or stopped (Docker, processes, ports)."""
