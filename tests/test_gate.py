"""Who may connect: in-neighbours' keys, a few connections per key, address bans in the kernel."""

import socket
import struct
import time

import zmq

from node.net.gate import (
    BPF_JEQ_K,
    BPF_LD_W_ABS,
    BPF_RET_K,
    DROP,
    KEEP,
    AdmissionPolicy,
    ban_filter,
)
from node.net.transport import ZmqTransport
from tests.helpers import drain, free_address, receive_until, wait_until


def test_unknown_and_non_neighbour_keys_are_refused_and_counted():
    policy = AdmissionPolicy(frozenset({1, 3}))
    assert policy.decide(0.0, "10.0.0.9", None) == "an unknown key"
    assert "not an in-neighbour" in policy.decide(0.0, "10.0.0.9", 2)
    assert policy.decide(0.0, "10.0.0.1", 1) is None
    assert policy.counts == {"refused_keys": 2, "refused_repeats": 0, "banned_addresses": 0}


def test_a_key_opens_at_most_n_connections_per_window():
    policy = AdmissionPolicy(frozenset({1}), admissions_per_key=3, admission_window=60.0)
    assert [policy.decide(t, "a", 1) for t in (0.0, 1.0, 2.0)] == [None, None, None]
    assert "3 connections in the last 60 s" in policy.decide(3.0, "a", 1)
    assert policy.decide(59.9, "a", 1) is not None  # the first is still inside the window
    assert policy.decide(60.0, "a", 1) is None  # the first left the window at t = 60
    assert policy.counts["refused_repeats"] == 2
    assert policy.banned(60.0) == []  # a known key retrying is never banned for it


def test_an_address_is_banned_after_refusals_within_the_window_and_the_ban_expires():
    policy = AdmissionPolicy(frozenset({1}), ban_after=3, ban_window=10.0, ban_seconds=30.0)
    policy.decide(0.0, "10.0.0.9", None)
    policy.decide(11.0, "10.0.0.9", None)  # the first has left the 10 s window
    policy.decide(12.0, "10.0.0.9", None)
    assert policy.banned(12.0) == []
    policy.decide(13.0, "10.0.0.9", None)  # three within 10 s
    assert policy.banned(13.0) == ["10.0.0.9"] and policy.counts["banned_addresses"] == 1
    assert policy.banned(42.9) == ["10.0.0.9"]
    assert policy.banned(43.0) == []


def test_the_ban_filter_loads_the_source_address_and_drops_listed_ones():
    first = struct.unpack("!I", socket.inet_aton("10.0.0.1"))[0]
    second = struct.unpack("!I", socket.inet_aton("192.168.1.2"))[0]
    # ld [net + 12]; jeq first -> drop (skip 2); jeq second -> drop (skip 1); keep; drop
    assert ban_filter(["10.0.0.1", "192.168.1.2"]) == [
        (BPF_LD_W_ABS, 0, 0, 0xFFF0000C), (BPF_JEQ_K, 2, 0, first),
        (BPF_JEQ_K, 1, 0, second), (BPF_RET_K, 0, 0, KEEP), (BPF_RET_K, 0, 0, DROP)]
    assert ban_filter([]) == [(BPF_LD_W_ABS, 0, 0, 0xFFF0000C), (BPF_RET_K, 0, 0, KEEP),
                              (BPF_RET_K, 0, 0, DROP)]


def _storm(address, server_key, count):
    """`count` CurveZMQ connections with random keys, each refused by the ZAP handler."""
    context = zmq.Context()
    sockets = []
    for _ in range(count):
        dealer = context.socket(zmq.DEALER)
        dealer.curve_publickey, dealer.curve_secretkey = zmq.curve_keypair()
        dealer.curve_serverkey = server_key
        dealer.linger = 0
        dealer.connect(address)
        sockets.append(dealer)
    return context, sockets


def test_a_refusal_storm_bans_its_address_in_the_kernel_and_open_connections_go_on(rings):
    address = free_address()
    receiver = ZmqTransport(0, address, {}, 1 << 20, rings[0], in_neighbours=[1, 2])
    receiver.policy = AdmissionPolicy(frozenset({1, 2}), ban_after=5, ban_window=10.0,
                                      ban_seconds=3.0)
    receiver.open()
    friend = ZmqTransport(1, free_address(), {0: address}, 1 << 20, rings[1]).open()
    context, storm = _storm(address, rings[0].public, 8)
    late = None
    try:
        friend.send(0, [b"before"])
        assert receive_until(receiver, lambda got: len(got) == 1,
                             "the friend's first message") == [(1, [b"before"])]
        wait_until(lambda: receiver.security_counts()["banned_addresses"] >= 1,
                   "the storm's ban", timeout=60)
        assert receiver.security_counts()["banned_addresses"] == 1
        ban_ends = max(receiver.policy.banned_until.values(), default=0.0)
        refused = receiver.refused_keys
        # banned: the kernel drops new connections from 127.0.0.1 before any handshake ...
        late = ZmqTransport(2, free_address(), {0: address}, 1 << 20, rings[2]).open()
        late.send(0, [b"late"])
        friend.send(0, [b"during"])  # ... while the open connection goes on
        assert receive_until(receiver, lambda got: len(got) == 1,
                             "the friend's message during the ban") == [(1, [b"during"])]
        # the storm's retries never reach ZAP: at most the one handshake each storm socket
        # had in flight when the ban landed (unbanned, 8 sockets retrying every 0.1 s would
        # add dozens before the friend's message is through)
        assert receiver.refused_keys - refused <= len(storm)
        # after the ban, TCP retransmits the SYN and the new neighbour gets in (not before)
        receive_until(receiver, lambda got: (2, [b"late"]) in got,
                      "the new neighbour getting in after the ban", timeout=60)
        assert time.monotonic() >= ban_ends
        # seconds later: the ban held the storm off (retrying unbanned, 8 sockets every 0.1
        # s would have been refused hundreds of times); when it ends, the next refusal bans
        # again, so at most one more handshake per socket got through
        assert receiver.refused_keys - refused <= 2 * len(storm)
    finally:
        for dealer in storm:
            dealer.close()
        context.term()
        for transport in (receiver, friend, late):
            if transport is not None:
                transport.close(0)


def test_a_key_gets_three_connections_a_minute_and_the_fourth_is_refused(rings):
    address = free_address()
    receiver = ZmqTransport(0, address, {}, 1 << 20, rings[0], in_neighbours=[1]).open()
    copies, got = [], []
    try:
        for index in range(4):  # four processes holding node 1's key, one after the other
            copies.append(ZmqTransport(1, free_address(), {0: address}, 1 << 20,
                                       rings[1]).open())
            copies[-1].send(0, [b"copy", str(index).encode()])
            if index < 3:  # the next one starts once this one is in: its message came
                got += receive_until(receiver, lambda new: len(new) == 1,
                                     f"copy {index}'s message")
        # the fourth is refused for its key's repeats, and its handshake fails
        wait_until(lambda: receiver.security_counts()["refused_repeats"] >= 1
                   and receiver.failed_handshakes >= 1, "the fourth connection refused",
                   timeout=60)
        got += drain(receiver, 0.2)  # what came meanwhile: nothing
        assert [frames for _, frames in got] == [[b"copy", b"0"], [b"copy", b"1"],
                                                 [b"copy", b"2"]]
        assert receiver.security_counts()["refused_keys"] == 0
    finally:
        for transport in (receiver, *copies):
            transport.close(0)
