"""Virtual time for a federation whose nodes are threads of one process.

Each node runs the real round loop on its own thread. While it computes, its clock runs
with the CPU time its thread uses (times its slowdown); when it waits for a message it
stops, and the engine wakes it at the virtual time the message arrives (node.sim.wire) or
its wait times out, whichever is first. The engine is conservative: it hands out the
event at virtual time t only once every computing node's clock is at t or later, since a
computing node can only send after its current time. So a node never sees a message
before its virtual arrival, whatever the threads' real speeds, and timeouts, stragglers
and missed updates happen in virtual time as they would on a network.

At most `workers` nodes compute at once (one per core), each on one torch thread, so a
thread's CPU time is its node's compute.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from dataclasses import dataclass, field

from node.errors import ProtofedError, TransportError
from node.net.transport import Received
from node.sim.wire import Wire, wire_bytes

TICK = 0.002  # seconds between the ticker's looks while clocks run

class SimStopped(ProtofedError):
    """The simulation was asked to stop: every node ends where it is."""


@dataclass
class _Node:
    """One node's place on the virtual time line."""

    base: float = 0.0  # virtual time when it last started computing
    mark: float = 0.0  # its thread's CPU seconds at that moment
    cpu_used: float = 0.0  # CPU seconds before `mark`
    running: bool = True  # computing (or about to), not waiting
    computing: bool = False  # holds a core, its clock running (else its clock is `base`)
    cpu_clock: int | None = None  # its thread's CPU clock, readable from other threads
    at: float = 0.0  # while waiting: when it began
    deadline: float = 0.0  # while waiting: when the wait times out
    version: int = 0  # bumped at every change of state; stale heap entries carry old ones
    woken: threading.Event = field(default_factory=threading.Event)
    answer: Received | None = None
    gone_at: float | None = None  # when it closed its transport (left, finished, failed)
    inbox: list = field(default_factory=list)  # heap of (arrival, seq, sender, frames)


class Engine:
    """The virtual clocks of `nodes` threads, their messages in flight and their waits."""

    def __init__(self, nodes: int, wire: Wire, *, epoch: float, workers: int,
                 slowdowns: list[float] | None = None) -> None:
        self.wire = wire
        self.workers = workers
        self.epoch = epoch  # Unix time of virtual time 0, so records read like real runs
        self.slowdowns = slowdowns or [1.0] * nodes
        self._nodes = [_Node() for _ in range(nodes)]
        self._lock = threading.Lock()
        self._seq = itertools.count()
        self._wakeups: list[tuple[float, int, int, int]] = []  # (time, seq, node, version)
        # running nodes waiting for a core (their clocks stopped at base), and those with one
        self._ready: list[tuple[float, int, int]] = []  # (base, node, version)
        self._computing: set[int] = set()
        self._gone = 0  # nodes that closed their transport
        self._cores = threading.Semaphore(workers)
        self.stopping = False
        for node_id in range(nodes):
            heapq.heappush(self._ready, (0.0, node_id, 0))
        self._ticker = threading.Thread(target=self._tick, name="sim-ticker", daemon=True)
        self._ticker.start()

    # -- the node's own thread -----------------------------------------------------------
    def begin(self, node_id: int) -> None:
        """The node's thread starts: it waits for a core, then its clock runs."""
        self._nodes[node_id].cpu_clock = time.pthread_getcpuclockid(threading.get_ident())
        self._cores.acquire()
        self._start_computing(node_id)

    def _start_computing(self, node_id: int) -> None:
        node = self._nodes[node_id]
        with self._lock:
            node.mark = time.thread_time()
            node.computing = True
            self._computing.add(node_id)

    def now(self, node_id: int) -> float:
        """The node's virtual time (from its own thread only)."""
        node = self._nodes[node_id]
        if not node.running:
            return node.at
        return node.base + (time.thread_time() - node.mark) * self.slowdowns[node_id]

    def cpu(self, node_id: int) -> float:
        """CPU seconds the node's thread has used while its clock ran."""
        node = self._nodes[node_id]
        return node.cpu_used + (time.thread_time() - node.mark if node.running else 0.0)

    def send(self, sender: int, frames_by_receiver: dict[int, list[bytes]]) -> None:
        """Put one broadcast's copies on the wire at the sender's current time."""
        receivers = sorted(frames_by_receiver)
        sizes = [(r, wire_bytes([len(f) for f in frames_by_receiver[r]])) for r in receivers]
        # under the lock, so no look at the sender's clock comes between its reading here
        # and its messages being in flight
        with self._lock:
            arrivals = self.wire.arrivals(sender, self.now(sender), sizes)
            for receiver, arrival in zip(receivers, arrivals, strict=True):
                target = self._nodes[receiver]
                if target.gone_at is not None:
                    continue  # as to a process that exited: nobody reads it
                heapq.heappush(target.inbox, (arrival, next(self._seq), sender,
                                              frames_by_receiver[receiver]))
                if not target.running:
                    self._schedule(receiver)
            self._advance()

    def receive(self, node_id: int, timeout: float) -> Received | None:
        """Wait up to `timeout` virtual seconds for the node's next message."""
        node = self._nodes[node_id]
        if self.stopping:
            raise SimStopped("stopped by signal")
        with self._lock:  # its clock stops where the others' looks at it saw it last
            at = self.now(node_id)
            node.cpu_used += time.thread_time() - node.mark
            node.running, node.at, node.deadline = False, at, at + max(0.0, timeout)
            node.computing = False
            self._computing.discard(node_id)
            node.version += 1
            node.woken.clear()
            self._schedule(node_id)
            self._advance()
        self._cores.release()
        node.woken.wait()
        if self.stopping:
            raise SimStopped("stopped by signal")
        self._cores.acquire()
        self._start_computing(node_id)
        return node.answer

    def stop(self) -> None:
        """Every node stops at its next wait (a waiting one at once)."""
        with self._lock:
            self.stopping = True
            for node in self._nodes:
                node.woken.set()

    def _tick(self) -> None:
        """Hand out the events computing clocks have passed since the last look."""
        while not self.stopping and self._gone < len(self._nodes):
            time.sleep(TICK)
            with self._lock:
                if self._wakeups and self._computing:
                    self._advance()

    def gone(self, node_id: int) -> None:
        """The node closed its transport: peers see it unreachable from its current time,
        and its clock no longer holds the others back."""
        node = self._nodes[node_id]
        with self._lock:
            if node.gone_at is not None:
                return
            self._gone += 1
            node.gone_at = node.at = self.now(node_id)
            if node.running:
                node.cpu_used += time.thread_time() - node.mark
                node.running = node.computing = False
                self._computing.discard(node_id)
                node.version += 1
                self._cores.release()
            node.inbox.clear()
            self._advance()

    def unreachable(self, node_id: int, peers: set[int]) -> set[int]:
        """Those of `peers` that were gone by the node's current time."""
        now = self.now(node_id)
        return {p for p in peers
                if (gone := self._nodes[p].gone_at) is not None and gone <= now}

    # -- the engine, under the lock ------------------------------------------------------
    def _schedule(self, node_id: int) -> None:
        """Queue the waiting node's next event: its first message, or its timeout."""
        node = self._nodes[node_id]
        heapq.heappush(self._wakeups, (self._next_event(node), next(self._seq), node_id,
                                       node.version))

    @staticmethod
    def _next_event(node: _Node) -> float:
        if node.inbox and node.inbox[0][0] <= node.deadline:
            return max(node.at, node.inbox[0][0])
        return node.deadline

    def _horizon(self) -> float:
        """The earliest virtual time a running node may still send at: a computing node's
        clock as it reads now, a node waiting for a core its clock's stop."""
        horizon = float("inf")
        while self._ready:
            base, node_id, version = self._ready[0]
            node = self._nodes[node_id]
            if node.running and not node.computing and node.version == version:
                horizon = base
                break
            heapq.heappop(self._ready)
        for node_id in self._computing:
            node = self._nodes[node_id]
            used = time.clock_gettime(node.cpu_clock) - node.mark if node.cpu_clock else 0.0
            horizon = min(horizon, node.base + max(0.0, used) * self.slowdowns[node_id])
        return horizon

    def _advance(self) -> None:
        """Wake every waiting node whose event no computing node can still precede."""
        while self._wakeups:
            when, _, node_id, version = self._wakeups[0]
            node = self._nodes[node_id]
            if node.running or node.version != version or node.gone_at is not None:
                heapq.heappop(self._wakeups)
                continue
            if when > self._horizon():
                return
            heapq.heappop(self._wakeups)
            if when != self._next_event(node):  # an earlier message came since: queued too
                continue
            if node.inbox and node.inbox[0][0] <= when:
                _, _, sender, frames = heapq.heappop(node.inbox)
                node.answer = (sender, frames)
            else:
                node.answer = None
            node.running, node.base = True, when
            node.version += 1
            heapq.heappush(self._ready, (when, node_id, node.version))
            node.woken.set()


class SimTransport:
    """A node's network in virtual time, with the Transport interface.

    The copies of one broadcast (the peers send the same frames to each out-neighbour in
    a row) leave together, so they share the node's uplink; they are put on the wire when
    the node does anything else (receives, sends another message, closes).
    """

    def __init__(self, engine: Engine, node_id: int, out_neighbours: list[int]) -> None:
        self.engine = engine
        self.node_id = node_id
        self.out_neighbours = set(out_neighbours)
        self.last_arrival = 0.0
        self._pending: dict[int, list[bytes]] = {}
        self._pending_frames: list[bytes] | None = None
        self._pending_bytes: list[bytes] = []  # the pending frames as bytes, made once
        self._closed = False

    def send(self, peer: int, frames: list[bytes]) -> bool:
        if peer not in self.out_neighbours:
            raise TransportError(f"node {self.node_id}: {peer} is not an out-neighbour")
        return self._queue(peer, frames)

    def reply(self, peer: int, frames: list[bytes]) -> bool:
        return self._queue(peer, frames)

    def _queue(self, peer: int, frames: list[bytes]) -> bool:
        if frames is not self._pending_frames or peer in self._pending:
            self._flush()
            self._pending_frames, self._pending_bytes = frames, [bytes(f) for f in frames]
        self._pending[peer] = self._pending_bytes  # one copy in memory for every receiver
        return True

    def _flush(self) -> None:
        if self._pending:
            self.engine.send(self.node_id, self._pending)
        self._pending, self._pending_frames, self._pending_bytes = {}, None, []

    def receive(self, timeout: float) -> Received | None:
        self._flush()
        received = self.engine.receive(self.node_id, timeout)
        if received is not None:
            self.last_arrival = self.engine.epoch + self.engine.now(self.node_id)
        return received

    def unreachable(self) -> set[int]:
        return self.engine.unreachable(self.node_id, self.out_neighbours)

    def dropped(self) -> set[int]:
        return self.unreachable()  # a simulated node that is gone never comes back

    def farewell(self) -> None:
        return None

    def security_counts(self) -> dict[str, int]:
        return {}

    def close(self, linger: float) -> None:
        if not self._closed:
            self._closed = True
            self._flush()
            self.engine.gone(self.node_id)


class SimClock:
    """A node's Clock in virtual time: seconds from the engine, Unix time from its epoch."""

    def __init__(self, engine: Engine, node_id: int) -> None:
        self.engine = engine
        self.node_id = node_id

    def monotonic(self) -> float:
        return self.engine.now(self.node_id)

    def time(self) -> float:
        return self.engine.epoch + self.engine.now(self.node_id)

    def cpu(self) -> float:
        return self.engine.cpu(self.node_id)
