"""The node's view of its neighbours: metered, validated messaging and an inbox by round.

Bytes are counted here and nowhere else: the frame bytes handed to the transport on send
and the frame bytes taken from it on receive (routing identities excluded).
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import torch

from node.clock import SYSTEM, Clock
from node.errors import PeerTimeout, ProtocolError
from node.finite import all_finite
from node.net.kinds import CONTROL_KINDS
from node.net.message import Message, decode_message, encode_message, frame_bytes
from node.net.transport import Transport
from node.profile import Profile

T = TypeVar("T")

log = logging.getLogger(__name__)

SENT, RECEIVED = "sent", "received"


def metered_kind(kind: str) -> str:
    """The metering bucket of a message kind: model, prototypes or control."""
    return "control" if kind in CONTROL_KINDS else kind


DROP_SAMPLE = 50  # dropped messages kept in full; the rest are only counted
DROP_REASONS = 200  # distinct reasons counted apart; further ones count as "(other reasons)"
DROP_LOG_EVERY = 1000  # after the first DROP_SAMPLE drops, log one in this many
# Updates kept ahead of this node's round: a neighbour that waited out this node can be
# a round or two ahead; keeping every future round would let one peer fill memory.
ROUNDS_AHEAD = 3


@dataclass
class Meter:
    """Byte counts by round and (direction, peer, kind), and summed over rounds, so a round's
    figures and the totals cost the same in round 1,000 as in round 1 (a node reads them
    every round); and dropped messages: every one counted by reason and by peer, the first
    DROP_SAMPLE kept whole (bounded under a flood)."""

    # round -> (direction, peer, kind) -> bytes; (direction, peer, kind) -> bytes, all rounds
    by_round: dict[int, collections.Counter] = field(default_factory=dict)
    over_rounds: collections.Counter = field(default_factory=collections.Counter)
    changed_rounds: set[int] = field(default_factory=set)  # since `take_changed`
    dropped: list[dict] = field(default_factory=list)
    dropped_count: int = 0
    dropped_bytes: int = 0
    dropped_by_reason: collections.Counter = field(default_factory=collections.Counter)
    dropped_by_peer: collections.Counter = field(default_factory=collections.Counter)
    # round -> (peer, kind) -> seconds from the sender's stamp to arrival, summed (shaped runs)
    transfers_by_round: dict[int, collections.Counter] = field(default_factory=dict)

    def add(self, direction: str, round_: int, peer: int, kind: str, nbytes: int) -> None:
        kind = metered_kind(kind)
        self.by_round.setdefault(round_, collections.Counter())[(direction, peer, kind)] += nbytes
        self.over_rounds[(direction, peer, kind)] += nbytes
        self.changed_rounds.add(round_)

    def transfer(self, round_: int, peer: int, kind: str, seconds: float) -> None:
        kind = metered_kind(kind)
        self.transfers_by_round.setdefault(round_, collections.Counter())[(peer, kind)] += seconds
        self.changed_rounds.add(round_)

    def take_changed(self) -> set[int]:
        """The rounds whose counts or transfer times changed since the last call."""
        changed, self.changed_rounds = self.changed_rounds, set()
        return changed

    def transfers(self, round_: int) -> dict[str, dict[str, float]]:
        """{peer: {kind: seconds}} of the stamped messages received in one round."""
        out: dict[str, dict[str, float]] = collections.defaultdict(dict)
        for (p, k), seconds in sorted(self.transfers_by_round.get(round_, {}).items()):
            out[str(p)][k] = round(seconds, 6)
        return dict(out)

    def drop(self, peer: int | None, nbytes: int, reason: str, round_: int | None = None) -> bool:
        """Count one dropped message; True when it should be logged (rate-limited)."""
        self.dropped_count += 1
        self.dropped_bytes += nbytes
        reason = reason[:200]
        if reason not in self.dropped_by_reason and len(self.dropped_by_reason) >= DROP_REASONS:
            reason = "(other reasons)"
        self.dropped_by_reason[reason] += 1
        self.dropped_by_peer["unknown" if peer is None else str(peer)] += 1
        if len(self.dropped) < DROP_SAMPLE:
            self.dropped.append({"peer": peer, "bytes": nbytes, "reason": reason,
                                 "round": round_})
            return True
        return self.dropped_count % DROP_LOG_EVERY == 0

    def drop_record(self) -> dict:
        """The dropped messages as the node's result file keeps them."""
        return {"dropped_messages": list(self.dropped), "dropped_count": self.dropped_count,
                "dropped_bytes": self.dropped_bytes,
                "dropped_by_reason": dict(self.dropped_by_reason.most_common()),
                "dropped_by_peer": dict(sorted(self.dropped_by_peer.items()))}

    def _counts_of(self, round_: int | None) -> collections.Counter:
        """(direction, peer, kind) -> bytes of one round, or of every round."""
        if round_ is None:
            return self.over_rounds
        return self.by_round.get(round_, collections.Counter())

    def total(self, direction: str, *, round_: int | None = None, peer: int | None = None,
              kind: str | None = None) -> int:
        """Sum of the bytes that match every given filter."""
        return sum(n for (d, p, k), n in self._counts_of(round_).items()
                   if d == direction and (peer is None or p == peer)
                   and (kind is None or k == kind))

    def breakdown(self, direction: str, round_: int | None = None) -> dict[str, dict[str, int]]:
        """{peer: {kind: bytes}} for one direction, optionally one round."""
        out: dict[str, dict[str, int]] = collections.defaultdict(dict)
        for (d, p, k), n in sorted(self._counts_of(round_).items()):
            if d == direction:
                out[str(p)][k] = n
        return dict(out)


class Inbox:
    """Messages kept by (round, sender, kind) until the round loop takes them."""

    def __init__(self) -> None:
        self._messages: dict[tuple[int, int, str], Message] = {}

    def put(self, message: Message) -> None:
        self._messages[(message.round, message.sender, message.kind)] = message

    def has(self, round_: int, sender: int, kinds: Iterable[str]) -> bool:
        return all((round_, sender, kind) in self._messages for kind in kinds)

    def take(self, round_: int, senders: Iterable[int],
             kinds: Iterable[str]) -> dict[int, dict[str, Message]]:
        """Remove and return the complete updates of `senders` for `round_`."""
        kinds = tuple(kinds)
        complete = {}
        for sender in senders:
            if self.has(round_, sender, kinds):
                complete[sender] = {k: self._messages.pop((round_, sender, k)) for k in kinds}
        return complete

    def discard_before(self, round_: int) -> list[Message]:
        """Forget messages of rounds before `round_` and return them."""
        stale = [key for key in self._messages if key[0] < round_]
        return [self._messages.pop(key) for key in stale]


# Meta key of the sending time (ms since the epoch, the sender's clock) in shaped runs; a
# stamp in the future or more than a day old is ignored (a peer's clock, or a lie).
SENT_AT = "sent_ms"
MAX_TRANSFER_MS = 86_400_000
SAME_ARRIVAL = 0.002  # seconds: two messages the kernel saw arrive at once

# Seconds a node in its goodbye still reads from neighbours whose connection has dropped.
LOST_GOODBYE_GRACE = 1.0


class Peers:
    """Send to out-neighbours and collect from in-neighbours, metering every frame."""

    def __init__(self, node_id: int, transport: Transport, *, in_neighbours: Iterable[int],
                 out_neighbours: Iterable[int], rounds: int, max_message_bytes: int,
                 codecs: Mapping[str, str], stamp: bool = False,
                 round_in_neighbours: Callable[[int], Sequence[int]] | None = None,
                 left_early: Iterable[int] = (), clock: Clock = SYSTEM) -> None:
        self.node_id = node_id
        self.clock = clock  # deadlines and stamps: the system's time, or a simulation's
        self.transport = transport
        self.in_neighbours = sorted(in_neighbours)  # in any round: whose hellos it awaits
        self.out_neighbours = sorted(out_neighbours)
        # who may send payloads for a round, where the graph changes (else in_neighbours)
        self.round_in_neighbours = round_in_neighbours
        # peers a scenario takes away for good before the last round: no goodbye to them
        self.left_early = frozenset(left_early)
        self.rounds = rounds
        self.max_message_bytes = max_message_bytes
        self.codecs = dict(codecs)
        self.stamp = stamp  # put the sending time in every payload message (shaped links)
        self._untimed: dict[int, tuple] = {}  # peer -> its last stamped message, not yet timed
        self._arrivals: dict[int, float] = {}  # peer -> when its latest message arrived
        self.meter = Meter()
        self.inbox = Inbox()
        self.current_round = 0
        self.hello_from: set[int] = set()
        self.hello_owed: set[int] = set()  # restarted out-neighbours to hello once reachable
        self.rejoins_after: dict[int, int] = {}  # restarted neighbour -> last round it skips
        self.ack_from: set[int] = set()
        self.bye_from: set[int] = set()
        self.handshake_done = False
        self.joined_round = 0  # the latest round an ack reported: > 0 when this node rejoins
        self.absent: set[int] = set()  # in-neighbours whose update the last collect missed
        self.unreachable_seen: set[int] = set()  # neighbours whose connection was lost
        self.latest_round: dict[int, int] = {}  # peer -> latest round it sent an update for
        self.leaving = False  # this node said its own goodbye
        self.profile = Profile(self.clock)  # the node's own, once it runs (node.runtime)

    # -- sending -------------------------------------------------------------------------
    def broadcast(self, round_: int, kind: str, tensors: Mapping[str, torch.Tensor] | None = None,
                  meta: Mapping[str, int] | None = None,
                  to: Sequence[int] | None = None) -> None:
        """Send one message to every out-neighbour (or to those of the round, `to`), through
        the codec for its kind. A payload holding NaN or infinities is not sent (counted as
        dropped): it would poison them."""
        recipients = self.out_neighbours if to is None else to
        if tensors and not all_finite(tensors.values()):
            log.error("node %d: its own %s for round %d holds NaN or infinite values: not "
                      "sent", self.node_id, kind, round_)
            for peer in recipients:
                self.meter.drop(peer, 0, f"own {kind} not finite", round_)
            return
        if tensors and kind not in self.codecs:  # a kind the runtime gave no codec: a bug
            raise ValueError(f"no codec for message kind {kind!r} (codecs for "
                             f"{sorted(self.codecs)})")
        if self.stamp and tensors:
            meta = {**(meta or {}), SENT_AT: int(self.clock.time() * 1000)}
        with self.profile.phase("encode"):
            frames = encode_message(self.node_id, round_, kind, tensors,
                                    self.codecs.get(kind, "fp32"), meta)
        for peer in recipients:
            self._send(peer, round_, kind, frames)

    def _send(self, peer: int, round_: int, kind: str, frames: list[bytes]) -> None:
        if peer in self.transport.unreachable():  # sent bytes are bytes a live peer can get
            self.unreachable_seen.add(peer)
            self.meter.drop(peer, frame_bytes(frames), "peer unreachable", round_)
        elif self.transport.send(peer, frames):
            self.meter.add(SENT, round_, peer, kind, frame_bytes(frames))
        else:
            self.meter.drop(peer, frame_bytes(frames), "send queue full", round_)

    # -- receiving -----------------------------------------------------------------------
    def poll(self, timeout: float) -> bool:
        """Receive at most one message, validate and file it; False if nothing came."""
        with self.profile.phase("wait"):
            received = self.transport.receive(timeout)
        self._answer_hellos()
        if received is None:
            return False
        peer, frames = received
        nbytes = frame_bytes(frames)
        try:
            with self.profile.phase("decode"):
                message = decode_message(frames, max_bytes=self.max_message_bytes)
                self._check_envelope(peer, message)
        except ProtocolError as exc:
            if self.meter.drop(peer, nbytes, str(exc)):
                log.warning("node %d: dropped a message of %d bytes from %s: %s (%d dropped "
                            "so far)", self.node_id, nbytes,
                            "unknown peer" if peer is None else f"peer {peer}", exc,
                            self.meter.dropped_count)
            return True
        except Exception as exc:
            if self.meter.drop(peer, nbytes, f"undecodable: {type(exc).__name__}: {exc}"):
                log.exception("node %d: a message of %d bytes from %s could not be decoded",
                              self.node_id, nbytes,
                              "unknown peer" if peer is None else f"peer {peer}")
            return True
        self.meter.add(RECEIVED, message.round, message.sender, message.kind, nbytes)
        self._time_transfer(message)
        self._file(message)
        return True

    def _time_transfer(self, message: Message) -> None:
        """Seconds a stamped message spent on its link: from its sending, or from the
        arrival of the message before it on that link if that came later (it waited behind
        it), to its own arrival. The arrival is when its connection last received data: if
        the next message of that peer shows the same time, data came after this one before
        it was read, so this one is left untimed."""
        arrival, sender = self.transport.last_arrival, message.sender
        pending = self._untimed.pop(sender, None)
        if pending is not None and abs(pending[0] - arrival) > SAME_ARRIVAL:
            self.meter.transfer(*pending[1:])
        previous, self._arrivals[sender] = self._arrivals.get(sender, 0.0), arrival
        sent_at = message.meta.pop(SENT_AT, None)
        if sent_at is None or not 0 <= arrival * 1000 - sent_at <= MAX_TRANSFER_MS:
            return
        took = arrival - max(sent_at / 1000, previous)
        if took >= 0:
            self._untimed[sender] = (arrival, message.round, sender, message.kind, took)

    def settle_transfers(self) -> None:
        """Count the last timed message of every peer (nothing came after it)."""
        for pending in self._untimed.values():
            self.meter.transfer(*pending[1:])
        self._untimed.clear()

    def _check_envelope(self, peer: int | None, message: Message) -> None:
        if peer is None or message.sender != peer:
            raise ProtocolError(f"sender {message.sender} does not match its connection "
                                f"identity {peer}")
        if message.kind == "ack":
            allowed = self.out_neighbours  # acks come back on our own connections
        else:
            allowed = self.in_neighbours
        if message.sender not in allowed:
            raise ProtocolError(f"sender {message.sender} is not a neighbour for {message.kind}")
        if (message.kind not in CONTROL_KINDS and self.round_in_neighbours is not None
                and message.sender not in self.round_in_neighbours(message.round)):
            raise ProtocolError(f"sender {message.sender} is not an in-neighbour in round "
                                f"{message.round}")
        if message.round > self.rounds:
            raise ProtocolError(f"round {message.round} is beyond the last round {self.rounds}")
        if not 0 <= message.meta.get("round", 0) <= self.rounds:
            raise ProtocolError(f"meta round {message.meta['round']} is outside 0..{self.rounds}")

    def _file(self, message: Message) -> None:
        if message.kind == "hello":
            self.hello_from.add(message.sender)
            # the ack tells a restarted neighbour which round the federation is in
            frames = encode_message(self.node_id, 0, "ack", meta={"round": self.current_round})
            if self.transport.reply(message.sender, frames):
                self.meter.add(SENT, 0, message.sender, "ack", frame_bytes(frames))
            if (self.handshake_done and message.sender in self.out_neighbours
                    and not message.meta.get("answer")):
                # a neighbour that started again waits for our hello; an answer is not answered
                self.hello_owed.add(message.sender)
                self._answer_hellos()
            if self.handshake_done and not message.meta.get("answer"):
                self._restarted(message.sender)
        elif message.kind == "ack":
            self.ack_from.add(message.sender)
            self.joined_round = max(self.joined_round, message.meta.get("round", 0))
        elif message.kind == "bye":
            self._goodbye_from(message.sender)
        elif message.round < self.current_round:
            log.info("node %d: stale %s from peer %d for round %d (now %d), dropped",
                     self.node_id, message.kind, message.sender, message.round,
                     self.current_round)
            self.meter.drop(message.sender, 0, "stale round", message.round)
        elif message.round > self.current_round + ROUNDS_AHEAD:
            self.meter.drop(message.sender, 0, f"more than {ROUNDS_AHEAD} rounds ahead",
                            message.round)
        else:
            self.inbox.put(message)
            self.latest_round[message.sender] = max(self.latest_round.get(message.sender, 0),
                                                    message.round)
            if message.sender in self.rejoins_after:
                # a restarted peer joins after the latest round any neighbour's ack named,
                # which may be past ours: its first update says which rounds it skips
                self.rejoins_after[message.sender] = max(self.rejoins_after[message.sender],
                                                         message.round - 1)

    def _restarted(self, peer: int) -> None:
        """A hello after the handshake: the peer started again and joins after the round our
        ack named, so no update from it is coming for that round or any before. Believed
        only when its old process is known gone (connection lost, or its last update
        missing): a key holder's hello cannot make this node stop waiting for the real one."""
        if peer in self.absent or peer in self.unreachable_seen | self._lost():
            self.rejoins_after[peer] = self.current_round
        else:
            log.warning("node %d: hello from peer %d while it is still taking part: ignored",
                        self.node_id, peer)
            self.meter.drop(peer, 0, "hello while still taking part", self.current_round)

    def _last_round_from(self, peer: int) -> int:
        """The last round `peer` sends this node an update in: the last round, or where the
        graph changes, the last round it is among this node's in-neighbours."""
        if self.round_in_neighbours is None:
            return self.rounds
        # from the last round back: a resampled graph has the peer among the last few
        return next((r for r in range(self.rounds, 0, -1) if peer in self.round_in_neighbours(r)),
                    0)

    def _goodbye_from(self, peer: int) -> None:
        """A peer leaves after its last round, whose messages come before its goodbye on the
        same connection: a goodbye before them (a key holder's forgery, or a repeat) is
        counted and ignored, so it cannot make this node stop waiting for the real peer.
        Once this node leaves itself, every goodbye is taken."""
        if peer in self.bye_from:
            self.meter.drop(peer, 0, "repeated goodbye", self.current_round)
        elif self.leaving or self.latest_round.get(peer, 0) >= self._last_round_from(peer):
            self.bye_from.add(peer)
        else:
            log.warning("node %d: goodbye from peer %d before its last round: ignored",
                        self.node_id, peer)
            self.meter.drop(peer, 0, "goodbye before its last round", self.current_round)

    def _answer_hellos(self) -> None:
        """Hello the restarted neighbours that helloed us, once our connection to them is
        back (their hello can arrive before our side has reconnected)."""
        for peer in sorted(self.hello_owed - self.transport.unreachable()):
            self.hello_owed.discard(peer)
            self._send(peer, 0, "hello",
                       encode_message(self.node_id, 0, "hello", meta={"answer": 1}))

    # -- phases --------------------------------------------------------------------------
    def handshake(self, timeout: float, while_waiting: Callable[[], T] | None = None) -> T | None:
        """Hello every out-neighbour and wait (up to `timeout` seconds) for their acks and
        every in-neighbour's hello. `while_waiting` runs between the hellos and the wait,
        while ZeroMQ's threads connect; what it returns is returned."""
        for peer in self.out_neighbours:
            self._send(peer, 0, "hello", encode_message(self.node_id, 0, "hello"))
        done_meanwhile = while_waiting() if while_waiting else None
        deadline = self.clock.monotonic() + timeout
        while not self._handshake_done():
            remaining = deadline - self.clock.monotonic()
            if remaining <= 0:
                silent_out = sorted(set(self.out_neighbours) - self.ack_from)
                silent_in = sorted(set(self.in_neighbours) - self.hello_from)
                raise PeerTimeout(
                    f"node {self.node_id}: neighbours not reachable after {timeout:.0f} s: "
                    f"no answer from out-neighbours {silent_out}, no hello from "
                    f"in-neighbours {silent_in}")
            self.poll(min(remaining, 0.2))
        self.handshake_done = True
        return done_meanwhile

    def _handshake_done(self) -> bool:
        return (self.ack_from >= set(self.out_neighbours)
                and self.hello_from >= set(self.in_neighbours))

    def collect(self, round_: int, kinds: Iterable[str], timeout: float,
                absent_timeout: float | None = None, senders: Sequence[int] | None = None,
                ) -> tuple[dict[int, dict[str, Message]], list[int]]:
        """In-neighbours' (or the round's `senders`') updates for `round_`, waiting up to
        `timeout`; also who was missing.

        Not waited for: neighbours that said goodbye, whose connection is lost, or that
        started again and join after this round. Waited for only `absent_timeout`:
        neighbours that missed the previous collect.
        """
        kinds = tuple(kinds)
        senders = self.in_neighbours if senders is None else list(senders)
        self.current_round = round_
        for message in self.inbox.discard_before(round_):
            self.meter.drop(message.sender, 0, "stale round", message.round)
        started = self.clock.monotonic()
        deadlines = {p: started + (timeout if p not in self.absent or absent_timeout is None
                                   else min(timeout, absent_timeout))
                     for p in senders}
        while True:
            gone = (self.bye_from | self._lost()
                    | {p for p, last in self.rejoins_after.items() if round_ <= last})
            now = self.clock.monotonic()
            pending = [p for p in senders if p not in gone
                       and not self.inbox.has(round_, p, kinds) and now < deadlines[p]]
            if not pending:
                break
            self.poll(min(max(deadlines[p] for p in pending) - now, 0.2))
        while self.poll(0):  # whatever else is already here
            pass
        updates = self.inbox.take(round_, senders, kinds)
        missing = [p for p in senders if p not in updates]
        self.absent = (self.absent - set(senders)) | set(missing)
        return updates, missing

    def _lost(self) -> set[int]:
        """Out-neighbours whose connection is down now; those down at any time since the
        last look join unreachable_seen too (a restart's hello is believed after either)."""
        lost = self.transport.unreachable()
        self.unreachable_seen |= lost | self.transport.dropped()
        return lost

    def goodbye(self, timeout: float) -> list[int]:
        """Tell out-neighbours this node is done, then wait for the in-neighbours' goodbyes.

        Waiting means every message a live neighbour sent is read and metered before this
        node leaves. Returns the in-neighbours that never said goodbye.
        """
        for peer in self.out_neighbours:
            if peer not in self.left_early:
                self._send(peer, self.rounds, "bye",
                           encode_message(self.node_id, self.rounds, "bye"))
        self.leaving = True
        self.transport.farewell()
        deadline = self.clock.monotonic() + timeout
        lost_since = None
        while missing := set(self.in_neighbours) - self.bye_from:
            now = self.clock.monotonic()
            if missing <= self._lost():
                # a neighbour closes its sockets right after its own goodbye, which may
                # still be on its way on another connection: give it a moment
                lost_since = now if lost_since is None else lost_since
                if now - lost_since >= LOST_GOODBYE_GRACE:
                    break
            else:
                lost_since = None
            if now >= deadline:
                break
            self.poll(min(deadline - now, 0.2 if lost_since is None else 0.05))
        while self.poll(0):  # whatever else is already here is read and metered
            pass
        # a neighbour that said goodbye and then closed its sockets was not lost
        self.unreachable_seen -= self.bye_from
        return sorted(set(self.in_neighbours) - self.bye_from)  # lost ones included
