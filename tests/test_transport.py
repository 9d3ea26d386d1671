"""ZmqTransport over real loopback sockets: a lost peer is noticed at once, and its return."""

import socket
import threading
import time

import pytest

from deploy.backends.plan import reserve_listeners
from node.config import from_dict
from node.net import names
from node.net.names import named_host
from node.net.transport import ZmqTransport
from tests.helpers import free_address


def until(condition, transport, seconds=5.0):
    """Keep the transport receiving (it reads connection events there) until `condition`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        transport.receive(0.05)
    return condition()


def next_message(receiver, sender):
    """The first message `receiver` gets, `sender` reading its connection events meanwhile."""
    got = []
    assert until(lambda: got.append(receiver.receive(0.05)) or got[-1] is not None, sender)
    return got[-1]


def connected():
    """(node 0, its out-neighbour node 1, node 1's address), with a message through."""
    address = free_address()
    sender = ZmqTransport(0, free_address(), {1: address}, 1 << 20).open()
    peer = ZmqTransport(1, address, {}, 1 << 20).open()
    assert sender.send(1, [b"hello"])
    assert until(lambda: peer.receive(0.05) is not None, sender)
    return sender, peer, address


def test_a_peer_whose_process_goes_away_is_unreachable_until_it_is_back():
    sender, peer, address = connected()
    try:
        assert sender.unreachable() == set()
        peer.close(0)  # what the kernel does to a killed process's sockets
        assert until(lambda: sender.unreachable() == {1}, sender)
        peer = ZmqTransport(1, address, {}, 1 << 20).open()  # restarted on its address
        assert until(lambda: sender.unreachable() == set(), sender)
    finally:
        sender.close(0)
        peer.close(0)


def test_a_node_listens_on_the_socket_the_launcher_holds_so_its_port_cannot_be_taken():
    listener, = reserve_listeners(from_dict({"nodes": 1}))
    port = listener.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    with socket.socket() as impostor, pytest.raises(OSError):
        impostor.bind(("127.0.0.1", port))
    node = ZmqTransport(0, address, {}, 1 << 20, listen_fd=listener.detach()).open()
    sender = ZmqTransport(1, free_address(), {0: address}, 1 << 20).open()
    try:
        assert sender.send(0, [b"hello"])
        assert next_message(node, sender) == (1, [b"hello"])
    finally:
        sender.close(0)
        node.close(0)


def test_received_frames_are_read_in_place_and_decode_to_what_was_sent():
    import torch

    from node.net.message import decode_message, encode_message

    address = free_address()
    sender = ZmqTransport(0, free_address(), {1: address}, 1 << 24).open()
    peer = ZmqTransport(1, address, {}, 1 << 24).open()
    weights = {"fc.weight": torch.randn(512, 1024)}
    try:
        assert sender.send(1, encode_message(0, 1, "model", weights, codec="fp32"))
        node, frames = next_message(peer, sender)
        # ZeroMQ's own buffers, not a 2 MB copy of each frame
        assert node == 0 and all(isinstance(frame, memoryview) for frame in frames)
        received = decode_message(frames, max_bytes=1 << 24).tensors["fc.weight"]
        assert torch.equal(received, weights["fc.weight"])
    finally:
        sender.close(0)
        peer.close(0)


@pytest.mark.parametrize("leaving", [False, True])
def test_a_peer_closing_after_this_nodes_goodbye_is_no_warning(caplog, leaving):
    """A lost connection is a warning while the federation runs; once this node said
    goodbye, neighbours closing theirs is the normal end (said at info level)."""
    sender, peer, _ = connected()
    try:
        if leaving:
            sender.farewell()
        caplog.set_level("INFO", logger="node.net.transport")
        peer.close(0)
        assert until(lambda: sender.unreachable() == {1}, sender)
    finally:
        sender.close(0)
        peer.close(0)
    said = [(r.levelname, r.getMessage()) for r in caplog.records if "peer 1" in r.getMessage()]
    expected = (("INFO", "node 0: connection to peer 1 closed after the goodbyes") if leaving
                else ("WARNING", "node 0: connection to peer 1 lost"))
    assert said == [expected]


@pytest.mark.parametrize(("address", "named"), [
    ("tcp://node-2:5555", ("node-2", 5555)),
    ("tcp://localhost:7000", ("localhost", 7000)),
    ("tcp://127.0.0.1:5555", None),
    ("tcp://[::1]:5555", None),
    ("tcp://*:5555", None),
    ("ipc:///tmp/node-2", None),
    ("tcp://node-2", None),
])
def test_only_a_tcp_address_with_a_host_name_is_looked_up(address, named):
    assert named_host(address) == named


def test_a_peer_addressed_by_name_is_connected_at_its_numeric_address():
    """ZeroMQ would look the name up again on every reconnect attempt, blocking its I/O
    thread (every connection) while a dead container's name goes unanswered."""
    port = free_address().rpartition(":")[2]
    sender = ZmqTransport(0, free_address(), {1: f"tcp://localhost:{port}"}, 1 << 20).open()
    try:
        assert sender.endpoint(1) == f"tcp://127.0.0.1:{port}"
    finally:
        sender.close(0)


def test_a_peer_named_before_its_name_resolves_is_retried_at_its_numeric_address(monkeypatch):
    """A container started after this node: connected by name, looked up again once the
    connection is up, and after a loss retried (and found again) at the numeric address."""
    lookups, getaddrinfo = [], socket.getaddrinfo

    def not_yet_then_found(*args, **kwargs):
        lookups.append(args[0])
        if len(lookups) == 1:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return getaddrinfo(*args, **kwargs)

    monkeypatch.setattr(names.socket, "getaddrinfo", not_yet_then_found)
    port = free_address().rpartition(":")[2]
    sender = ZmqTransport(0, free_address(), {1: f"tcp://localhost:{port}"}, 1 << 20).open()
    peer = ZmqTransport(1, f"tcp://127.0.0.1:{port}", {}, 1 << 20).open()
    try:
        assert sender.endpoint(1) == f"tcp://localhost:{port}"
        assert sender.send(1, [b"hello"])
        assert until(lambda: peer.receive(0.05) is not None, sender)
        assert until(lambda: len(lookups) == 2, sender)  # once the connection was up
        peer.close(0)
        assert until(lambda: sender.unreachable() == {1}, sender)
        assert sender.endpoint(1) == f"tcp://127.0.0.1:{port}"
        peer = ZmqTransport(1, f"tcp://127.0.0.1:{port}", {}, 1 << 20).open()
        assert until(lambda: sender.unreachable() == set(), sender)
        assert sender.send(1, [b"again"])
        assert next_message(peer, sender) == (0, [b"again"])
    finally:
        sender.close(0)
        peer.close(0)


def test_a_hundred_named_neighbours_are_looked_up_by_a_few_threads():
    """A container may start only so many threads (deploy's pids limit)."""
    addresses = names.NumericAddresses(77)
    for peer in range(100):
        addresses.look_up(peer, f"tcp://localhost:{6000 + peer}")
    addresses.wait(60)
    assert [addresses.numeric(p) for p in range(100)] == [
        f"tcp://127.0.0.1:{6000 + p}" for p in range(100)]
    resolvers = [t for t in threading.enumerate() if t.name.startswith("protofed-resolve-77-")]
    assert 1 <= len(resolvers) <= names.LOOKUP_THREADS
