"""Out-neighbours' host names, resolved off ZeroMQ's I/O thread.

ZeroMQ resolves a connect address's host name again on every reconnect attempt, inside its
one I/O thread. When a peer's name stops resolving (a killed container's: Docker's DNS can
leave the query unanswered for the resolver's two 5 s attempts), that thread blocks on each
attempt and every connection of the node stalls with it: the survivors missed each other's
updates in a third of the rounds after a container was killed. So names are looked up by a few
threads of their own: at start-up (briefly waited for, so that a connection starts at its
numeric address), and once a connection made by name is up; a connection lost is retried
at the numeric address, so ZeroMQ's attempts never wait on DNS.
"""

from __future__ import annotations

import ipaddress
import logging
import queue
import socket
import threading

log = logging.getLogger(__name__)

LOOKUP_THREADS = 4  # names looked up at once (a node may have hundreds of neighbours)


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
    """Named out-neighbours' numeric `tcp://ip:port` addresses, looked up in the background
    by at most LOOKUP_THREADS threads (a container's threads are limited)."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self._found: dict[int, str] = {}
        self._pending: set[int] = set()
        self._queue: queue.SimpleQueue[tuple[int, str, int]] = queue.SimpleQueue()
        self._threads = 0
        self._done = threading.Condition()

    def look_up(self, peer: int, address: str) -> None:
        """Start looking up `address`, unless numeric, found already, or being looked up."""
        named = named_host(address)
        with self._done:
            if named is None or peer in self._found or peer in self._pending:
                return
            self._pending.add(peer)
        self._queue.put((peer, *named))
        if self._threads < LOOKUP_THREADS:
            self._threads += 1
            threading.Thread(target=self._serve, daemon=True,
                             name=f"protofed-resolve-{self.node_id}-{self._threads}").start()

    def wait(self, seconds: float) -> None:
        """Wait up to `seconds` for the look-ups under way."""
        with self._done:
            self._done.wait_for(lambda: not self._pending, timeout=seconds)

    def numeric(self, peer: int) -> str | None:
        """The numeric address found for `peer`, or None (not named, not found yet, failed)."""
        return self._found.get(peer)

    def _serve(self) -> None:
        while True:  # a daemon thread: it ends with the process
            peer, host, port = self._queue.get()
            found = self._resolve(peer, host, port)
            with self._done:
                if found:
                    self._found[peer] = found
                self._pending.discard(peer)
                self._done.notify_all()

    def _resolve(self, peer: int, host: str, port: int) -> str | None:
        try:  # ZeroMQ connects over IPv4 unless told otherwise: the address it would pick
            ip = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
        except OSError as exc:  # not up yet: connected by name, looked up again once it is
            log.debug("node %d: cannot look up peer %d's host %s yet (%s)", self.node_id,
                      peer, host, exc)
            return None
        return f"tcp://{ip}:{port}"
