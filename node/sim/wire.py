"""When a message sent in virtual time arrives: the links' bandwidth, delay, jitter and loss
as arithmetic, so they work on any kernel (no qdisc, no root).

The model, per directed edge as [links] resolves it (topology.links.Link):
- a message occupies its edge for wire bytes x 8 / bandwidth seconds, behind the messages
  sent on that edge before it (one TCP connection per edge: first in, first out), as the
  local backend's HTB class per edge does; an unshaped edge takes no time;
- a node's messages of one broadcast share its uplink ([links] uplink) equally, each copy
  no faster than its edge: k copies of n bytes on an uplink of U take k n / U together;
- then delay, plus a normal draw of sd jitter (netem's "distribution normal"); a message
  never overtakes the one before it on its edge;
- loss: each of the message's packets is lost with the link's probability, and each lost
  packet costs one retransmission timeout (two delays, at least Linux's 200 ms minimum),
  an upper bound on what TCP's fast retransmit pays.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping

from topology.links import Link

FRAME_OVERHEAD = 64  # wire bytes per frame beyond its content (ZMTP and CurveZMQ's box)
PACKET_PAYLOAD = 1448  # TCP payload per packet on an Ethernet path (MSS)
MIN_RETRANSMIT_S = 0.2  # Linux's minimum retransmission timeout (TCP_RTO_MIN)


def wire_bytes(frame_sizes: list[int]) -> int:
    """Bytes a message puts on its connection: its frames and their framing."""
    return sum(frame_sizes) + FRAME_OVERHEAD * len(frame_sizes)


def serialization_seconds(nbytes: int, bits_per_second: float | None) -> float:
    """Seconds to push `nbytes` through a link of that rate (0 for an unlimited one)."""
    return 0.0 if not bits_per_second else nbytes * 8 / bits_per_second


def lost_packets(nbytes: int, loss: float, rng: random.Random) -> int:
    """How many of the message's packets the link loses (each one independently)."""
    if not loss:
        return 0
    return sum(rng.random() < loss for _ in range(math.ceil(nbytes / PACKET_PAYLOAD)))


def retransmission_seconds(lost: int, link: Link) -> float:
    """What `lost` packets cost: one retransmission timeout each."""
    return lost * max(MIN_RETRANSMIT_S, 2 * link.delay_s)


class Wire:
    """Every edge's queue and every node's uplink in virtual time: `arrivals` answers when
    the copies of one broadcast arrive. Jitter and loss draw from one generator per edge,
    seeded from the federation's seed, so a run's timing is repeatable."""

    def __init__(self, links: Mapping[tuple[int, int], Link], seed: int,
                 uplinks: Mapping[int, int] | None = None) -> None:
        self.links = dict(links)
        self.uplinks = dict(uplinks or {})  # node -> bits per second (absent: unlimited)
        self.seed = seed
        self._edge_free: dict[tuple[int, int], float] = {}  # when the edge's queue empties
        self._edge_last: dict[tuple[int, int], float] = {}  # arrival of its latest message
        self._uplink_free: dict[int, float] = {}
        self._rngs: dict[tuple[int, int], random.Random] = {}

    def link(self, sender: int, receiver: int) -> Link:
        return self.links.get((sender, receiver), Link())

    def arrivals(self, sender: int, sent_at: float,
                 copies: list[tuple[int, int]]) -> list[float]:
        """When each copy (receiver, wire bytes) of one broadcast sent at `sent_at` arrives;
        the edges and the uplink are then busy until the copies are through."""
        uplink = self.uplinks.get(sender)
        start = max(sent_at, self._uplink_free.get(sender, 0.0)) if uplink else sent_at
        share = uplink / len(copies) if uplink else None
        arrivals = []
        for receiver, nbytes in copies:
            edge = (sender, receiver)
            link = self.link(*edge)
            rate = min((r for r in (link.bandwidth_bps, share) if r), default=None)
            through = max(start, self._edge_free.get(edge, 0.0)) + serialization_seconds(
                nbytes, rate)
            self._edge_free[edge] = through
            if uplink:
                self._uplink_free[sender] = max(self._uplink_free.get(sender, 0.0), through)
            late = link.delay_s
            if link.jitter_s or link.loss:  # an edge's stream of draws, made when first needed
                rng = self._rng(edge)
                late += rng.gauss(0.0, link.jitter_s) if link.jitter_s else 0.0
                late += retransmission_seconds(lost_packets(nbytes, link.loss, rng), link)
            arrival = max(through + max(0.0, late), self._edge_last.get(edge, 0.0))
            self._edge_last[edge] = arrival
            arrivals.append(arrival)
        return arrivals

    def _rng(self, edge: tuple[int, int]) -> random.Random:
        if edge not in self._rngs:
            self._rngs[edge] = random.Random(f"{self.seed}:{edge[0]}>{edge[1]}")
        return self._rngs[edge]
