"""Raw frame transports: ZeroMQ for real runs, an in-memory hub for protocol tests.

A transport moves lists of byte frames and knows nothing about their meaning. Each node
binds one ROUTER socket and connects one DEALER (identity = its own id) to every
out-neighbour, so a receiver learns which connection a message came in on, and can answer
a hello on the same connection.

With a keyring (the default; see node.net.security) every connection is CurveZMQ: encrypted,
the ROUTER admits only its in-neighbours' keys through a ZAP handler, each DEALER checks
its out-neighbour's server key, and a message's peer is the node its key belongs to.
Without one, the peer is the integer the connection claims as its identity.
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import threading
import time
from typing import Protocol

import zmq
from zmq.utils.monitor import recv_monitor_message

from node.errors import TransportError
from node.net.gate import AdmissionPolicy, ZapHandler
from node.net.guard import ConnectionGuard, quiet_seconds, tcp_info, unread_budget
from node.net.names import NumericAddresses
from node.net.security import Keyring

log = logging.getLogger(__name__)

# (peer id claimed by the connection, frames); peer is None if the identity is not an int.
Received = tuple[int | None, list[bytes] | list[memoryview]]  # frames, read in place


class Transport(Protocol):
    """What the node needs from a network: send, reply, receive with a timeout, close."""

    # wall-clock time (time.time()) the message `receive` returned last finished arriving
    last_arrival: float

    def send(self, peer: int, frames: list[bytes]) -> bool:
        """Queue frames for an out-neighbour; False if they could not be queued."""

    def reply(self, peer: int, frames: list[bytes]) -> bool:
        """Send frames back to an in-neighbour over the connection it opened."""

    def receive(self, timeout: float) -> Received | None:
        """The next message from any peer, or None after `timeout` seconds."""

    def unreachable(self) -> set[int]:
        """Out-neighbours whose connection is known to be down (their process is gone)."""

    def dropped(self) -> set[int]:
        """Out-neighbours whose connection went down since the last call, back up or not (a
        process started again reconnects within milliseconds of its predecessor's end)."""

    def farewell(self) -> None:
        """This node said goodbye: neighbours closing their connections are now expected."""

    def security_counts(self) -> dict[str, int]:
        """Connections turned away so far, by why (for the node's record)."""

    def close(self, linger: float) -> None:
        """Deliver what is queued for up to `linger` seconds, then release everything."""


# Messages queued per incoming connection before it is read. A peer sends a few messages a
# round and at most ROUNDS_AHEAD rounds ahead; when the queue is full ZeroMQ stops reading
# that connection (back-pressure, nothing is lost). ZeroMQ counts whole messages, not their
# frames: the ConnectionGuard closes a connection that holds more unread bytes than
# RECEIVE_HWM honest messages can.
RECEIVE_HWM = 16
FRAME_OVERHEAD = 64  # wire bytes per frame beyond its content (ZMTP and CurveZMQ box)
RECONNECT_MAX_MS = 1000  # back-off ceiling for a refused or failed connection attempt
NAME_LOOKUP_WAIT = 2.0  # seconds open() waits for peers' names to resolve (node.net.names)


class ZmqTransport:
    """One bound ROUTER plus one DEALER per out-neighbour, over TCP."""

    def __init__(self, node_id: int, bind_address: str, out_addresses: dict[int, str],
                 max_message_bytes: int, keyring: Keyring | None = None,
                 in_neighbours: tuple[int, ...] | list[int] = (),
                 listen_fd: int | None = None, source: str = "") -> None:
        self.node_id = node_id
        self.bind_address = bind_address
        self.out_addresses = dict(out_addresses)
        self.max_message_bytes = max_message_bytes
        self.keyring = keyring
        self.in_neighbours = tuple(in_neighbours)
        self.listen_fd = listen_fd  # an already listening socket for bind_address, if any
        self.source = source  # the IPv4 address connections leave from ("" = the system's)
        self.policy = AdmissionPolicy(frozenset(self.in_neighbours))
        self._guard: ConnectionGuard | None = None
        self._context: zmq.Context | None = None
        self._gate: ZapHandler | None = None
        self._router: zmq.Socket | None = None
        self._dealers: dict[int, zmq.Socket] = {}
        self._endpoints: dict[int, str] = {}  # peer -> the endpoint its DEALER connects to
        self._numeric = NumericAddresses(node_id)
        self._poller = zmq.Poller()
        self._socket_peer: dict[zmq.Socket, int] = {}
        self._routes: dict[int, bytes] = {}  # peer -> routing id of its connection to us
        self._monitors: dict[zmq.Socket, int] = {}  # DEALER monitor socket -> its peer
        self._down: set[int] = set()
        self._dropped: set[int] = set()  # down since dropped() last asked
        self._leaving = False  # set by farewell(): disconnects from now on are expected
        self.last_arrival = 0.0

    @property
    def refused_keys(self) -> int:
        """Connections refused for a key that is not an in-neighbour's."""
        return self.policy.counts["refused_keys"]

    def _secure_router(self, router: zmq.Socket, listener_fd: int | None) -> None:
        assert self.keyring is not None and self._context is not None
        self._gate = ZapHandler(self._context, self.node_id, self.keyring.node_of, self.policy,
                                listener_fd)
        self._gate.start()
        router.curve_secretkey = self.keyring.secret
        router.curve_publickey = self.keyring.public
        router.curve_server = True

    def open(self) -> ZmqTransport:
        """Bind the ROUTER and connect the DEALERs; raise TransportError if the bind fails."""
        self._context = zmq.Context()
        self._router = self._bind_router()
        self._poller.register(self._router, zmq.POLLIN)
        for peer, address in self.out_addresses.items():
            self._numeric.look_up(peer, address)
        self._numeric.wait(NAME_LOOKUP_WAIT)
        for peer, address in sorted(self.out_addresses.items()):
            self._connect(peer, self._numeric.numeric(peer) or address)
        return self

    def _bind_router(self) -> zmq.Socket:
        assert self._context is not None
        router = self._context.socket(zmq.ROUTER)
        router.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)  # per frame
        router.setsockopt(zmq.RCVHWM, RECEIVE_HWM)
        router.setsockopt(zmq.LINGER, 0)
        listener_fd = None
        try:
            listener_fd = self.listen_fd if self.listen_fd is not None else _listen(
                self.bind_address)
            if self.keyring is not None:
                self._secure_router(router, listener_fd)
            else:  # the claimed identity names the sender: a restarted peer takes its name
                router.setsockopt(zmq.ROUTER_HANDOVER, 1)
            if listener_fd is not None:
                router.setsockopt(zmq.USE_FD, listener_fd)
            router.bind(self.bind_address)
            # failed handshakes counted as they happen; no connection may hold more unread
            # bytes than an honest neighbour's full queue
            self._guard = ConnectionGuard(router, self.node_id,
                                          unread_budget(RECEIVE_HWM, self.max_message_bytes))
            self._guard.start()
        except (zmq.ZMQError, OSError) as exc:
            router.close(0)
            if listener_fd is not None and self.listen_fd is None:  # ours, never bound
                os.close(listener_fd)
            self._stop_gate()
            self._context.term()
            raise TransportError(f"node {self.node_id}: cannot bind {self.bind_address}: "
                                 f"{exc}") from exc
        return router

    def _connect(self, peer: int, address: str) -> None:
        assert self._context is not None
        dealer = self._context.socket(zmq.DEALER)
        if self.keyring is None:
            # Under CurveZMQ the key names the sender and the ROUTER picks a fresh routing
            # id per connection, so a peer restarted before its old connection was noticed
            # gone is not refused as a duplicate (and cannot take another's routing id).
            dealer.setsockopt(zmq.IDENTITY, str(self.node_id).encode())
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.setsockopt(zmq.SNDHWM, 10_000)
        dealer.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_MAX_MS)
        if self.keyring is not None:
            dealer.curve_secretkey = self.keyring.secret
            dealer.curve_publickey = self.keyring.public
            dealer.curve_serverkey = self.keyring.publics[peer]
        endpoint = self._endpoint(address)
        try:
            dealer.connect(endpoint)
        except zmq.ZMQError as exc:
            self.close(0)
            raise TransportError(f"node {self.node_id}: bad address {endpoint!r} for peer "
                                 f"{peer}: {exc}") from exc
        self._dealers[peer] = dealer
        self._endpoints[peer] = endpoint
        self._socket_peer[dealer] = peer
        self._poller.register(dealer, zmq.POLLIN)
        # A killed peer's kernel closes its sockets, so our connection reports the
        # disconnect at once; ZeroMQ keeps retrying. Back means a completed ZMTP
        # handshake: a TCP connect alone may reach a socket no process reads.
        monitor = dealer.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED
                                            | zmq.EVENT_DISCONNECTED)
        self._monitors[monitor] = peer
        self._poller.register(monitor, zmq.POLLIN)

    def _endpoint(self, address: str) -> str:
        if self.source:  # ZeroMQ's "tcp://source:port;destination" form
            return address.replace("tcp://", f"tcp://{self.source}:0;", 1)
        return address

    def endpoint(self, peer: int) -> str:
        """The address this node's connection to `peer` uses now."""
        return self._endpoints[peer]

    def _retry_at_numeric_address(self, peer: int) -> None:
        """Point a lost connection to a named peer at the peer's numeric address, so that
        ZeroMQ's reconnect attempts never block its I/O thread on DNS (node.net.names)."""
        numeric = self._numeric.numeric(peer)
        if numeric is None or self._endpoint(numeric) == self._endpoints[peer]:
            return
        dealer, endpoint = self._dealers[peer], self._endpoint(numeric)
        try:
            dealer.disconnect(self._endpoints[peer])
        except zmq.ZMQError:  # already gone from the socket: connecting anew is enough
            pass
        dealer.connect(endpoint)
        log.info("node %d: reconnecting to peer %d at %s (was %s)", self.node_id, peer,
                 endpoint, self._endpoints[peer])
        self._endpoints[peer] = endpoint

    def __enter__(self) -> ZmqTransport:  # noqa: PYI034
        return self.open()

    def __exit__(self, *exc_info: object) -> None:
        self.close(0)

    def send(self, peer: int, frames: list[bytes]) -> bool:
        try:
            self._dealers[peer].send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
        except zmq.Again:
            log.warning("node %d: send queue to peer %d is full, message dropped",
                        self.node_id, peer)
            return False
        return True

    def reply(self, peer: int, frames: list[bytes]) -> bool:
        assert self._router is not None
        route = self._routes.get(peer, str(peer).encode())
        try:
            self._router.send_multipart([route, *frames], flags=zmq.NOBLOCK)
        except (zmq.Again, zmq.ZMQError) as exc:
            log.warning("node %d: reply to peer %d failed: %s", self.node_id, peer, exc)
            return False
        return True

    def receive(self, timeout: float) -> Received | None:
        deadline = time.monotonic() + timeout
        while True:
            remaining = max(0.0, deadline - time.monotonic())
            ready = dict(self._poller.poll(int(remaining * 1000)))
            if not ready:
                return None
            for monitor in [s for s in ready if s in self._monitors]:
                self._connection_event(monitor)
                del ready[monitor]
            if ready:
                return self._read(next(iter(ready)))
            if remaining <= 0:
                return None

    def unreachable(self) -> set[int]:
        return set(self._down)

    def dropped(self) -> set[int]:
        dropped, self._dropped = self._dropped, set()
        return dropped

    def farewell(self) -> None:
        self._leaving = True

    def security_counts(self) -> dict[str, int]:
        return {**self.policy.counts, **(self._guard.counts if self._guard else {})}

    @property
    def failed_handshakes(self) -> int:
        """Incoming handshakes that failed (ZAP refusals included)."""
        return self._guard.counts["failed_handshakes"] if self._guard else 0

    def _connection_event(self, monitor: zmq.Socket) -> None:
        peer = self._monitors[monitor]
        event = recv_monitor_message(monitor, flags=zmq.NOBLOCK)["event"]
        if event == zmq.EVENT_DISCONNECTED and peer not in self._down:
            self._down.add(peer)
            self._dropped.add(peer)
            # after our goodbye a neighbour leaves once it has heard from everyone: expected
            log.log(logging.INFO if self._leaving else logging.WARNING,
                    "node %d: connection to peer %d %s", self.node_id, peer,
                    "closed after the goodbyes" if self._leaving else "lost")
            self._retry_at_numeric_address(peer)
        elif event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            self._numeric.look_up(peer, self.out_addresses[peer])
            if peer in self._down:
                self._down.discard(peer)
                log.info("node %d: peer %d reachable again", self.node_id, peer)

    def _read(self, socket: zmq.Socket) -> Received:
        if socket is not self._router:  # an answer on our own connection to an out-neighbour
            frames = socket.recv_multipart()
            self.last_arrival = time.time()
            return self._socket_peer[socket], frames
        parts = socket.recv_multipart(copy=False)
        # the frames are read in place (decoding copies what it keeps): no copy of a model
        identity, frames = parts[0].bytes, [part.buffer for part in parts[1:]]
        fd = parts[0].get(zmq.SRCFD)
        self.last_arrival = time.time() - quiet_seconds(tcp_info(fd))
        if self._guard is not None:
            self._guard.read(fd, sum(len(frame) + FRAME_OVERHEAD for frame in frames))
        if self.keyring is None:
            return _peer_from_identity(identity), frames
        # the sender is whoever holds the key the ZAP handler admitted, whatever it claims
        peer = self.keyring.node_of(parts[0].get("User-Id").encode())
        if peer is not None:
            self._routes[peer] = identity
        return peer, frames

    def close(self, linger: float) -> None:
        linger_ms = max(0, int(linger * 1000))
        for monitor in self._monitors:
            monitor.close(0)
        self._monitors.clear()
        if self._guard is not None:
            self._guard.stop()
            self._guard = None
        for peer, dealer in self._dealers.items():
            # nothing queued for a peer that is gone can be delivered: do not wait for it
            dealer.setsockopt(zmq.LINGER, 0 if peer in self._down else linger_ms)
            dealer.close()
        self._dealers.clear()
        if self._router is not None:
            self._router.setsockopt(zmq.LINGER, linger_ms)
            self._router.close()
            self._router = None
        self._stop_gate()
        if self._context is not None:
            self._context.term()
            self._context = None

    def _stop_gate(self) -> None:
        if self._gate is not None:
            self._gate.stop()
            self._gate = None


def _listen(bind_address: str) -> int | None:
    """A listening TCP socket for `bind_address`, handed to ZeroMQ (which closes it), so the
    gate can filter it; None for an address that ZeroMQ must bind itself."""
    if not bind_address.startswith("tcp://"):
        return None
    host, _, port = bind_address.removeprefix("tcp://").rpartition(":")
    if not port.isdigit() or host.startswith("["):
        return None
    listener = socket.create_server(("" if host == "*" else host, int(port)), backlog=100)
    return listener.detach()


def _peer_from_identity(identity: bytes) -> int | None:
    try:
        text = identity.decode("ascii")
    except UnicodeDecodeError:
        return None
    return int(text) if text.isdigit() else None


class MemoryHub:
    """A process-local network of inboxes, for fast protocol tests without sockets."""

    def __init__(self) -> None:
        self._queues: dict[int, collections.deque[Received]] = collections.defaultdict(
            collections.deque)
        self._cond = threading.Condition()
        self.gone: set[int] = set()  # nodes that left, as a killed process would

    def transport(self, node_id: int, out_neighbours: list[int]) -> MemoryTransport:
        """A transport for `node_id` that may send to `out_neighbours`."""
        return MemoryTransport(self, node_id, out_neighbours)

    def leave(self, node_id: int) -> None:
        """Take a node off the network: its peers see it unreachable, its mail is lost."""
        with self._cond:
            self.gone.add(node_id)
            self._cond.notify_all()

    def deliver(self, to: int, sender: int, frames: list[bytes]) -> None:
        with self._cond:
            if to in self.gone or sender in self.gone:
                return
            self._queues[to].append((sender, [bytes(f) for f in frames]))
            self._cond.notify_all()

    def take(self, node_id: int, timeout: float) -> Received | None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._queues[node_id]:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)
            return self._queues[node_id].popleft()


class MemoryTransport:
    """The in-memory counterpart of ZmqTransport, with the same interface."""

    def __init__(self, hub: MemoryHub, node_id: int, out_neighbours: list[int]) -> None:
        self.hub = hub
        self.node_id = node_id
        self.out_neighbours = set(out_neighbours)
        self.last_arrival = 0.0

    def send(self, peer: int, frames: list[bytes]) -> bool:
        if peer not in self.out_neighbours:
            raise TransportError(f"node {self.node_id}: {peer} is not an out-neighbour")
        self.hub.deliver(peer, self.node_id, frames)
        return True

    def reply(self, peer: int, frames: list[bytes]) -> bool:
        self.hub.deliver(peer, self.node_id, frames)
        return True

    def receive(self, timeout: float) -> Received | None:
        received = self.hub.take(self.node_id, timeout)
        self.last_arrival = time.time()
        return received

    def unreachable(self) -> set[int]:
        return self.out_neighbours & self.hub.gone

    def dropped(self) -> set[int]:
        return self.unreachable()  # a node gone from the hub never comes back

    def farewell(self) -> None:
        return None

    def security_counts(self) -> dict[str, int]:
        return {}

    def close(self, linger: float) -> None:
        return None
