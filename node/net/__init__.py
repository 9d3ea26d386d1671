"""How nodes talk: wire messages (message), sockets (transport), the exchange with peers
(peers) and CurveZMQ keys (security)."""
