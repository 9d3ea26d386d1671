"""What one connection may make a node hold: its unread bytes, bounded by an honest queue."""

import time

from node.net.guard import bytes_received, quiet_seconds, unread_budget
from node.net.transport import RECEIVE_HWM, ZmqTransport
from tests.helpers import free_address, receive_until, wait_until


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


def test_many_frame_messages_get_a_connection_closed_and_an_honest_full_queue_does_not(rings):
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
        wait_until(lambda: receiver.security_counts()["cut_connections"] >= 1,
                   "the guard closing the thief's connection", timeout=60, interval=0.05)
        got = [frames for peer, frames in receive_until(
            receiver, lambda got: sum(peer == 2 for peer, _ in got) == RECEIVE_HWM,
            "the honest neighbour's full queue read") if peer == 2]
        assert [bytes(f[1]) for f in got] == [i.to_bytes(2, "big") for i in range(RECEIVE_HWM)]
    finally:
        for transport in (receiver, thief, honest):
            transport.close(0)


def test_the_guard_looks_rarely_while_its_neighbours_are_silent(rings, monkeypatch):
    """An idle node costs little: with neighbours connected and silent, the guard looks at
    the process's memory every IDLE_MS (an earlier guard looked every 10 ms: 100 idle nodes
    needed more CPU than this machine has)."""
    from node.net import guard

    looks = []  # when the guard looked
    real = guard.resident_bytes
    monkeypatch.setattr(guard, "resident_bytes",
                        lambda: looks.append(time.monotonic()) or real())
    address = free_address()
    receiver = ZmqTransport(0, address, {}, 1 << 20, rings[0], in_neighbours=[1]).open()
    sender = ZmqTransport(1, free_address(), {0: address}, 1 << 20, rings[1]).open()
    try:
        assert sender.send(0, [b"hello"])
        got = receive_until(receiver, lambda got: len(got) == 1, "the hello")
        assert [peer for peer, _ in got] == [1]  # connected and read
        # from now on the neighbour is silent: the guard's next looks, however long they take
        # (the looks the hello's bytes call for, and the scan, are among them)
        first, count = len(looks), 8
        wait_until(lambda: len(looks) >= first + count, f"{count} looks of the guard",
                   timeout=60, interval=0.05)
        seconds = looks[first + count - 1] - looks[first]
        # one look per IDLE_MS (and a second reading after a scan, a look as the hello came):
        # no more than 2 a IDLE_MS + 2; a guard looking every 10 ms takes 0.07 s for them
        assert count <= 2 * seconds * 1000 / guard.IDLE_MS + 2, (count, seconds)
    finally:
        for transport in (receiver, sender):
            transport.close(0)
