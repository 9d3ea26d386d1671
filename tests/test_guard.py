"""What one connection may make a node hold: its unread bytes, bounded by an honest queue."""

import time

from node.net.guard import bytes_received, quiet_seconds, unread_budget
from node.net.transport import RECEIVE_HWM, ZmqTransport
from tests.helpers import free_address
from tests.test_gate import rings  # noqa: F401 - the fixture
from tests.test_security import drain


def test_the_budget_is_a_full_queue_of_the_largest_messages_with_slack():
    # (16 queued + 4 slack) messages of 1 MiB, plus 8 MiB for the kernel's buffer ...
    assert unread_budget(16, 1 << 20, kernel_buffer=6 << 20) == 20 * (1 << 20) + (8 << 20)
    # ... or the kernel's receive buffer ceiling where it was raised beyond that
    assert unread_budget(16, 1 << 20, kernel_buffer=64 << 20) == 20 * (1 << 20) + (64 << 20)


def test_tcp_info_fields_are_read_at_the_kernels_offsets():
    info = bytearray(136)
    info[52:56] = (1500).to_bytes(4, "little")  # tcpi_last_data_recv, ms
    info[128:136] = (123_456_789_012).to_bytes(8, "little")  # tcpi_bytes_received
    assert quiet_seconds(bytes(info)) == 1.5
    assert bytes_received(bytes(info)) == 123_456_789_012
    assert quiet_seconds(b"") == 0.0 and bytes_received(bytes(info[:100])) is None


def test_many_frame_messages_get_a_connection_closed_and_an_honest_full_queue_does_not(rings):  # noqa: F811
    cap = 64 << 10  # per message; the budget is (16 + 4) * 64 KiB + the kernel's buffer
    address = free_address()
    receiver = ZmqTransport(0, address, {}, cap, rings[0], in_neighbours=[1, 2]).open()
    thief = ZmqTransport(1, free_address(), {0: address}, cap, rings[1]).open()
    honest = ZmqTransport(2, free_address(), {0: address}, cap, rings[2]).open()
    try:
        # the receiver reads nothing (as while training) while both send
        frame = bytes(cap - 1024)
        for index in range(RECEIVE_HWM):  # a full honest queue of the largest messages
            assert honest.send(0, [b"honest", index.to_bytes(2, "big"), frame])
        # messages of 40 frames just under the cap (2.5 MiB each), twice the budget in all
        budget = unread_budget(RECEIVE_HWM, cap)
        for _ in range(2 * budget // (40 * len(frame)) + 1):
            thief.send(0, [frame] * 40)
        deadline = time.monotonic() + 10.0
        while (receiver.security_counts()["cut_connections"] == 0
               and time.monotonic() < deadline):
            time.sleep(0.05)
        assert receiver.security_counts()["cut_connections"] >= 1
        got = [frames for peer, frames in drain(receiver, 1.5) if peer == 2]
        assert [bytes(f[1]) for f in got] == [i.to_bytes(2, "big") for i in range(RECEIVE_HWM)]
    finally:
        for transport in (receiver, thief, honest):
            transport.close(0)


def test_the_guard_looks_rarely_while_its_neighbours_are_silent(rings, monkeypatch):  # noqa: F811
    """An idle node costs little: with neighbours connected and silent, the guard looks at
    the process's memory every IDLE_MS (an earlier guard looked every 10 ms: 100 idle nodes
    needed more CPU than this machine has)."""
    from node.net import guard

    looks = []
    real = guard.resident_bytes
    monkeypatch.setattr(guard, "resident_bytes", lambda: looks.append(1) or real())
    address = free_address()
    receiver = ZmqTransport(0, address, {}, 1 << 20, rings[0], in_neighbours=[1]).open()
    sender = ZmqTransport(1, free_address(), {0: address}, 1 << 20, rings[1]).open()
    try:
        assert sender.send(0, [b"hello"])
        assert [peer for peer, _ in drain(receiver, 0.5)] == [1]  # connected and read
        time.sleep(1.2)  # the scan the hello's bytes call for comes within SCAN_SECONDS
        before = len(looks)
        time.sleep(1.0)
        # one look per IDLE_MS (and a second reading after a scan), far from 100
        assert len(looks) - before <= 2 * 1000 / guard.IDLE_MS + 2
    finally:
        for transport in (receiver, sender):
            transport.close(0)
