"""The kinds of message nodes exchange, named once for the wire and for the records."""

CONTROL_KINDS = ("hello", "ack", "bye")
PAYLOAD_KINDS = ("model", "prototypes")
KINDS = CONTROL_KINDS + PAYLOAD_KINDS
