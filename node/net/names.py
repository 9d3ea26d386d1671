"""Out-neighbours' host names, resolved off ZeroMQ's I/O thread.

ZeroMQ resolves a connect address's host name again on every reconnect attempt, inside its
one I/O thread. When a peer's name stops resolving (a killed container's: Docker's DNS can
leave the query unanswered for the resolver's two 5 s attempts), that thread blocks on each
attempt and every connection of the node stalls with it: the survivors missed each other's
updates in most rounds after a container was killed. So names are looked up here, each in a
thread of its own: at start-up (briefly waited for, so that a connection starts at its
numeric address), and once a connection made by name is up; a connection lost is retried
at the numeric address, so ZeroMQ's attempts never wait on DNS.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
import time

log = logging.getLogger(__name__)


def named_host(address: str) -> tuple[str, int] | None:
    """(host name, port) of a `tcp://host:port` address whose host is a name, not a numeric
    address; None otherwise (numeric, a wildcard, another transport)."""
    if not address.startswith("tcp://"):
        return None
    host, _, port = address.removeprefix("tcp://").rpartition(":")
    if not port.isdigit() or not host or host.startswith("[") or host == "*":
        return None
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return host, int(port)
    return None


class NumericAddresses:
    """Named out-neighbours' numeric `tcp://ip:port` addresses, looked up in the background."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self._found: dict[int, str] = {}
        self._running: dict[int, threading.Thread] = {}

    def look_up(self, peer: int, address: str) -> None:
        """Start looking up `address`, unless numeric, found already, or being looked up."""
        named = named_host(address)
        if named is None or peer in self._found or (
                peer in self._running and self._running[peer].is_alive()):
            return
        thread = threading.Thread(target=self._resolve, args=(peer, *named), daemon=True,
                                  name=f"protofed-resolve-{peer}")
        self._running[peer] = thread
        thread.start()

    def wait(self, seconds: float) -> None:
        """Wait up to `seconds` in all for the look-ups under way."""
        deadline = time.monotonic() + seconds
        for thread in list(self._running.values()):
            thread.join(max(0.0, deadline - time.monotonic()))

    def numeric(self, peer: int) -> str | None:
        """The numeric address found for `peer`, or None (not named, not found yet, failed)."""
        return self._found.get(peer)

    def _resolve(self, peer: int, host: str, port: int) -> None:
        try:  # ZeroMQ connects over IPv4 unless told otherwise: the address it would pick
            ip = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
        except OSError as exc:  # not up yet: connected by name, looked up again once it is
            log.debug("node %d: cannot look up peer %d's host %s yet (%s)", self.node_id,
                      peer, host, exc)
            return
        self._found[peer] = f"tcp://{ip}:{port}"
