"""ZmqTransport over real loopback sockets: a lost peer is noticed at once, and its return."""

import socket
import time

from node.transport import ZmqTransport


def free_address():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{sock.getsockname()[1]}"


def until(condition, transport, seconds=5.0):
    """Keep the transport receiving (it reads connection events there) until `condition`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        transport.receive(0.05)
    return condition()


def test_a_peer_whose_process_goes_away_is_unreachable_until_it_is_back():
    address = free_address()
    sender = ZmqTransport(0, free_address(), {1: address}, 1 << 20).open()
    peer = ZmqTransport(1, address, {}, 1 << 20).open()
    try:
        assert sender.send(1, [b"hello"])
        assert until(lambda: peer.receive(0.05) is not None, sender)
        assert sender.unreachable() == set()
        peer.close(0)  # what the kernel does to a killed process's sockets
        assert until(lambda: sender.unreachable() == {1}, sender)
        peer = ZmqTransport(1, address, {}, 1 << 20).open()  # restarted on its address
        assert until(lambda: sender.unreachable() == set(), sender)
    finally:
        sender.close(0)
        peer.close(0)
