"""The exception tree of the node and the launcher; the CLI catches only the base.

quant and topology raise their own (quant.errors.QuantizationError,
topology.TopologyError), which the node maps where it calls them: the message boundary
turns a codec's error into a ProtocolError, the config entrance a topology's into a
ConfigError."""


class ProtofedError(Exception):
    """Base of every error protofed raises on purpose."""


class ConfigError(ProtofedError):
    """A config file, key or value the user must fix."""


class DataError(ProtofedError):
    """Dataset files missing, corrupt or unsuitable for the requested partition."""


class TransportError(ProtofedError):
    """A ZeroMQ failure mapped at the transport boundary."""


class PeerTimeout(TransportError):
    """Neighbours that did not answer within the configured time."""


class ProtocolError(TransportError):
    """A received message that breaks the wire protocol; it is dropped and counted."""


class DeployError(ProtofedError):
    """A federation that cannot be started, watched or stopped (Docker, processes, ports)."""
