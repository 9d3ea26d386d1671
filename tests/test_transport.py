"""ZmqTransport over real loopback sockets: a lost peer is noticed at once, and its return."""

import socket
import time

import pytest

from deploy.backends.plan import reserve_listeners
from node.config import from_dict
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
        got = []
        assert until(lambda: got.append(node.receive(0.05)) or got[-1] is not None, sender)
        assert got[-1] == (1, [b"hello"])
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
        got = []
        assert until(lambda: got.append(peer.receive(0.05)) or got[-1] is not None, sender)
        node, frames = got[-1]
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
