"""The messaging layer over the in-memory transport: handshake, rounds, metering, drops."""

import threading
import time
import types

import pytest
import torch

from node.errors import PeerTimeout
from node.net.message import encode_message
from node.net.peers import LOST_GOODBYE_GRACE, RECEIVED, ROUNDS_AHEAD, SENT, Peers
from node.net.transport import MemoryHub

CODECS = {"model": "int16", "prototypes": "fp32"}


class WaitedClock:
    """A clock whose monotonic time is the waiting its node did: each receive that came back
    empty adds the seconds it was given (MemoryHub returns nothing only once they passed),
    and nothing else moves it. How long a node waited is then exact, whatever the load."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return time.time()

    def cpu(self) -> float:
        return time.process_time()


class ClockedTransport:
    """A MemoryTransport whose empty receives advance a WaitedClock."""

    def __init__(self, transport, clock: WaitedClock) -> None:
        self.transport, self.clock = transport, clock

    def receive(self, timeout: float):
        received = self.transport.receive(timeout)
        if received is None:
            self.clock.now += timeout
        return received

    def __getattr__(self, name):
        return getattr(self.transport, name)


def make_peers(hub, node_id, ins, outs, rounds=3, clock=None):
    """Peers on `hub`; with a WaitedClock its deadlines count only the waits it made."""
    transport, timing = hub.transport(node_id, outs), {}
    if clock is not None:
        transport, timing = ClockedTransport(transport, clock), {"clock": clock}
    return Peers(node_id, transport, in_neighbours=ins, out_neighbours=outs, rounds=rounds,
                 max_message_bytes=1 << 20, codecs=CODECS, **timing)


def handshake_all(peers, timeout=5.0):
    threads = [threading.Thread(target=p.handshake, args=(timeout,)) for p in peers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_handshake_then_round_exchange_with_exact_byte_accounting():
    hub = MemoryHub()
    a = make_peers(hub, 0, ins=[1], outs=[1])
    b = make_peers(hub, 1, ins=[0], outs=[0])
    handshake_all([a, b])
    assert a.ack_from == {1} and a.hello_from == {1}
    a.broadcast(1, "model", {"w": torch.randn(10)}, {"samples": 5})
    b.broadcast(1, "model", {"w": torch.randn(10)}, {"samples": 6})
    updates_b, missing_b = b.collect(1, ["model"], timeout=2.0)
    _, missing_a = a.collect(1, ["model"], timeout=2.0)
    assert missing_a == missing_b == []
    assert updates_b[0]["model"].meta == {"samples": 5}
    for kind in ("model", "control"):
        assert a.meter.total(SENT, peer=1, kind=kind) == b.meter.total(RECEIVED, peer=0, kind=kind)
        assert b.meter.total(SENT, peer=0, kind=kind) == a.meter.total(RECEIVED, peer=1, kind=kind)
    assert a.meter.total(SENT, kind="model") > 20  # int16: 10 values, 2 bytes each, + header


def test_work_given_to_the_handshake_runs_after_the_hellos_and_before_the_wait():
    """A node evaluates its initial model while its peers connect: the hellos are out
    before that work starts, and the wait's timeout starts after it."""
    hub = MemoryHub()
    a = make_peers(hub, 0, ins=[1], outs=[1])
    b = make_peers(hub, 1, ins=[0], outs=[0])
    seen = {}
    # the messaging layer's clock, which the work moves on by more than the wait's timeout
    # (however long the work really takes)
    clock = {"skew": 0.0}
    a.clock = types.SimpleNamespace(monotonic=lambda: time.monotonic() + clock["skew"],
                                    time=time.time, cpu=time.process_time)

    def work():
        seen["hello sent"] = a.meter.total(SENT, peer=1, kind="control")
        clock["skew"] += 60.0  # longer than the wait's timeout below
        return "evaluated"

    other = threading.Thread(target=b.handshake, args=(120.0,), daemon=True)
    other.start()
    assert a.handshake(30.0, work) == "evaluated"
    other.join()
    assert seen["hello sent"] > 0
    assert a.hello_from == {1} and a.ack_from == {1}


def test_handshake_times_out_naming_the_silent_neighbours():
    hub = MemoryHub()
    a = make_peers(hub, 0, ins=[2], outs=[1])
    with pytest.raises(PeerTimeout, match=r"out-neighbours \[1\].*in-neighbours \[2\]"):
        a.handshake(0.3)


def test_missing_peer_is_reported_after_the_round_timeout():
    hub = MemoryHub()
    a = make_peers(hub, 0, ins=[1, 2], outs=[])
    hub.deliver(0, 1, encode_message(1, 1, "model", {"w": torch.ones(2)}, "fp32",
                                     {"samples": 1}))
    updates, missing = a.collect(1, ["model"], timeout=0.3)
    assert list(updates) == [1]
    assert missing == [2]


def test_future_round_is_kept_and_stale_round_dropped():
    hub = MemoryHub()
    a = make_peers(hub, 0, ins=[1], outs=[])
    hub.deliver(0, 1, encode_message(1, 2, "model", {"w": torch.ones(2)}, "fp32"))
    updates, missing = a.collect(1, ["model"], timeout=0.2)
    assert missing == [1]
    hub.deliver(0, 1, encode_message(1, 1, "model", {"w": torch.ones(2)}, "fp32"))
    updates, missing = a.collect(2, ["model"], timeout=0.2)
    assert list(updates) == [1] and missing == []
    assert [d["reason"] for d in a.meter.dropped] == ["stale round"]


def test_updates_far_ahead_are_dropped_so_one_peer_cannot_fill_the_inbox():
    hub = MemoryHub()
    a = make_peers(hub, 0, ins=[1], outs=[], rounds=1000)
    for round_ in range(1, 1001):
        hub.deliver(0, 1, encode_message(1, round_, "model", {"w": torch.ones(2)}, "fp32"))
    while a.poll(0):
        pass
    assert a.meter.dropped_by_reason == {f"more than {ROUNDS_AHEAD} rounds ahead": 1000 - 3}
    updates, _ = a.collect(1, ["model"], timeout=0.2)
    assert list(updates) == [1]


@pytest.mark.parametrize("identity, frames_sender, kind, round_, reason", [
    (3, 3, "model", 1, "not a neighbour"),       # not an in-neighbour
    (1, 2, "model", 1, "does not match"),        # header sender differs from connection
    (1, 1, "model", 9, "beyond the last round"),
    (1, 1, "ack", 0, "not a neighbour"),         # acks only come from out-neighbours
    (None, 1, "model", 1, "does not match"),     # connection without a numeric identity
])
def test_invalid_envelopes_are_dropped_and_counted(identity, frames_sender, kind, round_, reason):
    hub = MemoryHub()
    a = make_peers(hub, 0, ins=[1, 2], outs=[])
    frames = encode_message(frames_sender, round_, kind, {"w": torch.ones(2)}, "fp32")
    hub.deliver(0, identity, frames)
    assert a.poll(1.0)
    assert len(a.meter.dropped) == 1 and reason in a.meter.dropped[0]["reason"]
    assert a.meter.total(RECEIVED) == 0
    assert a.meter.dropped[0]["bytes"] == sum(len(f) for f in frames)


def test_garbage_is_dropped_not_raised():
    hub = MemoryHub()
    a = make_peers(hub, 0, ins=[1], outs=[])
    hub.deliver(0, 1, [b"\xff\xfe not msgpack"])
    assert a.poll(1.0)
    assert "msgpack" in a.meter.dropped[0]["reason"]


def model_message(sender, round_):
    return encode_message(sender, round_, "model", {"w": torch.ones(2)}, "fp32", {"samples": 1})


def test_bye_stops_the_wait_for_a_finished_peer():
    """Its last round's update came before its goodbye: the goodbye is real."""
    hub, clock = MemoryHub(), WaitedClock()
    a = make_peers(hub, 0, ins=[1], outs=[], clock=clock)
    hub.deliver(0, 1, model_message(1, 3))
    hub.deliver(0, 1, encode_message(1, 3, "bye"))
    _, missing = a.collect(2, ["model"], timeout=30.0)
    assert missing == [1] and clock.now == 0.0  # returned without waiting at all


def test_a_forged_goodbye_is_counted_and_changes_nothing():
    """A key holder's goodbye in node 1's name while node 1 is still in round 1: the real
    node 1's update is still waited for and taken; the goodbye is counted, as is a repeat."""
    hub = MemoryHub()
    a = make_peers(hub, 0, ins=[1], outs=[])
    hub.deliver(0, 1, encode_message(1, 3, "bye"))
    late = threading.Timer(0.3, lambda: hub.deliver(0, 1, model_message(1, 1)))
    late.start()
    updates, missing = a.collect(1, ["model"], timeout=10.0)
    late.join()
    assert list(updates) == [1] and missing == []
    assert a.bye_from == set()
    assert dict(a.meter.dropped_by_reason) == {"goodbye before its last round": 1}
    hub.deliver(0, 1, model_message(1, 3))  # its last round, then the real goodbye, twice
    hub.deliver(0, 1, encode_message(1, 3, "bye"))
    hub.deliver(0, 1, encode_message(1, 3, "bye"))
    a.collect(3, ["model"], timeout=2.0)
    assert a.bye_from == {1}
    assert a.meter.dropped_by_reason["repeated goodbye"] == 1


def test_a_hello_from_a_peer_still_taking_part_is_counted_and_changes_nothing():
    """A fresh hello after the handshake means a restart only when the old process is known
    gone: otherwise the peer is still waited for."""
    hub = MemoryHub()
    a, b = make_peers(hub, 0, ins=[1], outs=[1]), make_peers(hub, 1, ins=[0], outs=[0])
    handshake_all([a, b])
    hub.deliver(0, 1, encode_message(1, 0, "hello"))  # forged: node 1 is alive and well
    late = threading.Timer(0.3, lambda: hub.deliver(0, 1, model_message(1, 1)))
    late.start()
    updates, _ = a.collect(1, ["model"], timeout=10.0)
    late.join()
    assert list(updates) == [1] and a.rejoins_after == {}
    assert a.meter.dropped_by_reason["hello while still taking part"] == 1
    a.collect(2, ["model"], timeout=0.2)  # node 1 really is gone now: its update is missing
    hub.deliver(0, 1, encode_message(1, 0, "hello"))  # and it comes back
    a.collect(3, ["model"], timeout=0.2)
    assert a.rejoins_after == {1: 3}


def test_a_connection_lost_and_back_before_the_node_looked_still_believes_the_restart():
    """A restarted node reconnects within milliseconds of its predecessor's end: the loss
    and the reconnection can both pass before this node looks, and its hello is still a
    restart's, not a key holder's while the old process takes part."""
    hub = MemoryHub()
    a, b = make_peers(hub, 0, ins=[1], outs=[1]), make_peers(hub, 1, ins=[0], outs=[0])
    handshake_all([a, b])
    dropped = {1}  # down and back up since the last look; unreachable() is empty again
    a.transport.dropped = lambda: {dropped.pop()} if dropped else set()
    hub.deliver(0, 1, encode_message(1, 0, "hello"))
    a.collect(1, ["model"], timeout=0.0)
    assert a.rejoins_after == {1: 1} and a.unreachable_seen == {1}
    assert "hello while still taking part" not in a.meter.dropped_by_reason


def test_a_restarted_peer_is_not_waited_for_in_the_rounds_its_first_update_skips():
    """It joins after the latest round any neighbour's ack named (here 3), past this node's
    (1): once its first update (round 4) is here, rounds 2 and 3 do not wait for it."""
    hub, clock = MemoryHub(), WaitedClock()
    a = make_peers(hub, 0, ins=[1], outs=[1], rounds=6, clock=clock)
    b = make_peers(hub, 1, ins=[0], outs=[0], rounds=6)
    handshake_all([a, b])
    hub.leave(1)  # the old process is gone...
    assert a.collect(1, ["model"], timeout=0.0)[1] == [1]
    hub.gone.clear()  # ...and its successor helloes
    hub.deliver(0, 1, encode_message(1, 0, "hello"))
    a.collect(1, ["model"], timeout=0.0)
    assert a.rejoins_after == {1: 1}
    hub.deliver(0, 1, model_message(1, 4))
    started = clock.now
    assert a.collect(2, ["model"], timeout=20.0)[1] == [1]
    assert a.collect(3, ["model"], timeout=20.0)[1] == [1]
    assert clock.now == started  # neither waited
    assert a.rejoins_after == {1: 3}
    updates, missing = a.collect(4, ["model"], timeout=60.0)
    assert list(updates) == [1] and missing == []


def test_a_flood_of_drops_is_counted_in_full_but_kept_bounded():
    hub = MemoryHub()
    a = make_peers(hub, 0, ins=[1], outs=[])
    for i in range(5000):
        hub.deliver(0, 1 if i % 2 else 2, [b"\xff" + str(i).encode()])
    while a.poll(0):
        pass
    record = a.meter.drop_record()
    assert record["dropped_count"] == 5000
    assert len(record["dropped_messages"]) == 50
    assert record["dropped_by_peer"] == {"1": 2500, "2": 2500}
    assert sum(record["dropped_by_reason"].values()) == 5000
    assert len(record["dropped_by_reason"]) <= 201  # distinct reasons capped, the rest pooled
    assert record["dropped_bytes"] == sum(1 + len(str(i)) for i in range(5000))


def test_a_lost_peer_is_not_waited_for_and_nothing_is_counted_as_sent_to_it():
    hub, clock = MemoryHub(), WaitedClock()
    a = make_peers(hub, 0, ins=[1, 2], outs=[1, 2], clock=clock)
    b = make_peers(hub, 1, ins=[0, 2], outs=[0, 2])
    c = make_peers(hub, 2, ins=[0, 1], outs=[0, 1])
    handshake_all([a, b, c])
    hub.leave(2)  # as a killed process: its connections drop
    b.broadcast(1, "model", {"w": torch.randn(4)}, {"samples": 1})
    a.broadcast(1, "model", {"w": torch.randn(4)}, {"samples": 1})
    started = clock.now
    updates, missing = a.collect(1, ["model"], timeout=30.0, absent_timeout=30.0)
    assert clock.now == started  # 2 was not waited for
    assert list(updates) == [1] and missing == [2]
    assert a.meter.total(SENT, round_=1, peer=2) == 0
    assert a.meter.dropped_by_reason["peer unreachable"] == 1
    b.goodbye(timeout=0.01)
    started = clock.now
    assert a.goodbye(timeout=30.0) == [2]  # 1 said goodbye; 2 is not waited for...
    # ...beyond the grace a goodbye still on its way gets (polled every 0.05 s)
    assert LOST_GOODBYE_GRACE <= clock.now - started <= LOST_GOODBYE_GRACE + 0.05 + 1e-9
    assert a.unreachable_seen == {2}


def test_a_peer_that_missed_a_round_is_waited_for_only_the_absent_timeout():
    hub, clock = MemoryHub(), WaitedClock()
    a = make_peers(hub, 0, ins=[1], outs=[1], clock=clock)
    b = make_peers(hub, 1, ins=[0], outs=[0])
    handshake_all([a, b])  # b stays connected but hangs: it sends nothing more
    started = clock.now
    assert a.collect(1, ["model"], timeout=0.6, absent_timeout=0.1)[1] == [1]
    first = clock.now - started
    assert a.collect(2, ["model"], timeout=0.6, absent_timeout=0.1)[1] == [1]
    second = clock.now - first - started
    assert first == pytest.approx(0.6) and second == pytest.approx(0.1)
    b.broadcast(3, "model", {"w": torch.randn(4)}, {"samples": 1})
    updates, missing = a.collect(3, ["model"], timeout=0.6, absent_timeout=0.1)
    assert list(updates) == [1] and missing == [] and a.absent == set()


def test_a_kind_without_a_codec_is_an_error_not_fp32_in_silence():
    hub = MemoryHub()
    a = make_peers(hub, 0, ins=[], outs=[1])
    with pytest.raises(ValueError, match="no codec for message kind 'logits'"):
        a.broadcast(1, "logits", {"w": torch.ones(2)})


def test_every_kind_an_algorithm_sends_gets_its_codec():
    from node.config import from_dict
    from node.runtime import kind_codecs

    config = from_dict({"exchange": {"codec": "int8", "prototype_codec": "fp32"}})
    assert kind_codecs(config, ("model", "prototypes")) == {"model": "int8",
                                                            "prototypes": "fp32"}
    assert kind_codecs(from_dict({}), ("prototypes",)) == {"prototypes": "int16"}
