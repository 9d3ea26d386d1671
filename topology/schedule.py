"""Every round's graph, from the run's seed and the round alone: the static graph, a random
graph drawn again every few rounds, or peers drawn each round; less the nodes a scenario
keeps away and the edges it takes down. Every node computes the same schedule, so the
graphs change with no coordinator and nothing exchanged.

Round 0 evaluates the initial models and exchanges nothing: graph(0) has no edges.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import networkx as nx
import numpy as np

from topology.graphs import TopologyError, k_regular, random, small_world
from topology.participation import EVERYONE, Participation

# Kinds drawn again each round (each draw held `resample_every` rounds when that is set).
PER_ROUND_KINDS = ("epidemic", "one_peer_exponential")
# Random builders `resample_every` draws again; the others stay static.
RESAMPLED_KINDS = ("k_regular", "random", "small_world")


@dataclass(frozen=True)
class Event:
    """What a scenario does at the start of one round: nodes that leave, come back or join
    for the first time, undirected edges that go down or come back up."""

    round: int
    leave: tuple[int, ...] = ()
    back: tuple[int, ...] = ()
    join: tuple[int, ...] = ()
    edge_down: tuple[tuple[int, int], ...] = ()
    edge_up: tuple[tuple[int, int], ...] = ()

    def describe(self) -> str:
        parts = [f"{what} {list(getattr(self, what))}" for what in
                 ("leave", "back", "join", "edge_down", "edge_up") if getattr(self, what)]
        return f"round {self.round}: {', '.join(parts) or 'nothing'}"


class ScenarioError(ValueError):
    """A scenario that contradicts itself or the federation; the message names the event."""


@dataclass(frozen=True)
class Presence:
    """Which nodes take part in each round and which edges are down, after a scenario."""

    present: tuple[frozenset[int], ...]  # index r: the nodes present in round r
    joining: tuple[frozenset[int], ...]  # index r: nodes whose first round is r (r >= 1)
    down: tuple[frozenset[tuple[int, int]], ...]  # index r: edges down, both directions

    def away(self, node: int) -> list[int]:
        """The rounds `node` is away."""
        return [r for r, nodes in enumerate(self.present) if node not in nodes]


def presence(nodes: int, rounds: int, events: Sequence[Event]) -> Presence:
    """Replay `events` over rounds 0..rounds; ScenarioError naming the first bad event."""
    here = set(range(nodes)) - {n for e in events for n in e.join}
    never_here = set(range(nodes)) - here
    down: set[tuple[int, int]] = set()
    present, joining, downs = [frozenset(here)], [frozenset()], [frozenset()]
    by_round: dict[int, list[Event]] = {}
    for event in events:
        if not 1 <= event.round <= rounds:
            raise ScenarioError(f"{event.describe()}: the round must be in 1..{rounds}")
        by_round.setdefault(event.round, []).append(event)
    left: set[int] = set()
    for r in range(1, rounds + 1):
        joined: set[int] = set()
        for event in by_round.get(r, []):
            _replay(event, nodes, here, left, never_here, joined, down)
        if not here:
            raise ScenarioError(f"round {r}: every node is away")
        present.append(frozenset(here))
        joining.append(frozenset(joined))
        downs.append(frozenset(down))
    return Presence(tuple(present), tuple(joining), tuple(downs))


def _replay(event: Event, nodes: int, here: set[int], left: set[int], never_here: set[int],
            joined: set[int], down: set[tuple[int, int]]) -> None:
    """Apply one event to the running state, refusing what contradicts it."""
    def refuse(problem: str) -> ScenarioError:
        return ScenarioError(f"{event.describe()}: {problem}")

    named = [*event.leave, *event.back, *event.join,
             *(n for edge in (*event.edge_down, *event.edge_up) for n in edge)]
    unknown = sorted({n for n in named if not 0 <= n < nodes})
    if unknown:
        raise refuse(f"node {unknown[0]} does not exist (nodes are 0..{nodes - 1})")
    moving = [*event.leave, *event.back, *event.join]
    twice = sorted({n for n in moving if moving.count(n) > 1})
    if twice:
        raise refuse(f"node {twice[0]} is named twice")
    for node in event.leave:
        if node not in here:
            raise refuse(f"node {node} cannot leave: it is away already")
        here.discard(node)
        left.add(node)
    for node in event.back:
        if node not in left:
            raise refuse(f"node {node} cannot come back: it has not left")
        left.discard(node)
        here.add(node)
    for node in event.join:
        if node not in never_here:
            raise refuse(f"node {node} cannot join: it took part already (a node joins "
                         "once, late; one that left comes back with 'back')")
        never_here.discard(node)
        here.add(node)
        joined.add(node)
    for u, v in event.edge_down:
        edge = (min(u, v), max(u, v))
        if u == v or edge in down:
            raise refuse(f"edge {u}-{v} cannot go down: "
                         f"{'a node has no edge to itself' if u == v else 'it is down already'}")
        down.add(edge)
    for u, v in event.edge_up:
        edge = (min(u, v), max(u, v))
        if edge not in down:
            raise refuse(f"edge {u}-{v} cannot come up: it is not down")
        down.discard(edge)


def derived_seed(*parts: int) -> int:
    """A 32-bit seed from the run's seed and the round (and node): the same everywhere."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0])


@dataclass(frozen=True)
class Drawing:
    """How round graphs are drawn before a scenario's changes: [topology] in short."""

    kind: str
    k: int = 2
    p: float = 0.5
    seed: int = 0
    resample_every: int = 0

    @property
    def dynamic(self) -> bool:
        return self.kind in PER_ROUND_KINDS or (self.resample_every > 0
                                                and self.kind in RESAMPLED_KINDS)

    def draw_index(self, round_: int) -> int:
        """Which draw serves `round_` (>= 1): draws change every `resample_every` rounds
        (every round for the per-round kinds when it is 0)."""
        every = self.resample_every or 1
        return (round_ - 1) // every

    def graph(self, members: Sequence[int], draw: int) -> nx.DiGraph:
        """Draw number `draw` over `members` (node ids, sorted), edges in both directions
        for the random builders, one way for the per-round kinds."""
        n = len(members)
        if self.kind == "epidemic":
            return _relabelled(epidemic(n, self.k, derived_seed(self.seed, draw)), members)
        if self.kind == "one_peer_exponential":
            return _relabelled(one_peer_exponential(n, draw), members)
        seed = derived_seed(self.seed, draw)
        builders: dict[str, Callable[[], nx.DiGraph]] = {
            "k_regular": lambda: k_regular(n, self.k, seed),
            "random": lambda: random(n, self.p, seed),
            "small_world": lambda: small_world(n, self.k, self.p, seed),
        }
        return _relabelled(builders[self.kind](), members)


def epidemic(n: int, k: int, seed: int) -> nx.DiGraph:
    """Each node sends to k others drawn uniformly at random (Epidemic Learning's EL-Local,
    de Vos et al., NeurIPS 2023); in-degrees vary, and one round's graph need not be
    connected: mixing comes from drawing again every round."""
    if not 1 <= k < n:
        raise TopologyError(f"epidemic sampling needs 1 <= k < nodes, got k={k} with "
                            f"{n} nodes")
    generator = np.random.default_rng(seed)
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    for u in range(n):
        others = np.array([v for v in range(n) if v != u])
        graph.add_edges_from((u, int(v)) for v in generator.choice(others, k, replace=False))
    return graph


def one_peer_exponential(n: int, draw: int) -> nx.DiGraph:
    """Node i sends to i + 2^t (mod n), t = draw mod ceil(log2 n): one peer a round, every
    hop of the exponential graph in turn (Ying et al., NeurIPS 2021, "Exponential graph is
    provably efficient for decentralized deep training")."""
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    if n > 1:
        hop = 2 ** (draw % max(1, math.ceil(math.log2(n))))
        graph.add_edges_from((i, (i + hop) % n) for i in range(n) if (i + hop) % n != i)
    return graph


def _relabelled(graph: nx.DiGraph, members: Sequence[int]) -> nx.DiGraph:
    return nx.relabel_nodes(graph, dict(enumerate(members)), copy=True)


class Schedule:
    """Round r's graph for r in 0..rounds, and who takes part in it. A graph is drawn when
    first asked for, then kept: a node draws only the rounds it reaches (100 nodes drawing
    200 rounds of a 6-regular graph up front spent 1.6 s each)."""

    def __init__(self, static: nx.DiGraph, drawing: Drawing, rounds: int,
                 replayed: Presence, participation: Participation = EVERYONE) -> None:
        self.static, self.drawing, self.rounds, self.presence = static, drawing, rounds, replayed
        self.participation = participation
        self.dynamic = drawing.dynamic
        self.nodes = static.number_of_nodes()
        # no draw, no scenario change, everyone takes part: the static graph, every round
        self.plain = not self.dynamic and all(
            len(here) == self.nodes for here in replayed.present) and not any(replayed.down) \
            and not participation.partial
        self._empty = nx.DiGraph()
        self._empty.add_nodes_from(range(self.nodes))
        self._graphs: dict[int, nx.DiGraph] = {}
        self._drawn: dict[tuple[int, frozenset[int]], nx.DiGraph] = {}
        self._chosen: dict[int, frozenset[int]] = {}

    def graph(self, round_: int) -> nx.DiGraph:
        """Round `round_`'s graph (round 0 exchanges nothing: no edges); TopologyError
        naming the round when it cannot be drawn."""
        if round_ == 0:
            return self._empty
        if self.plain:
            return self.static
        if round_ not in self._graphs:
            self._graphs[round_] = self._build(round_)
        return self._graphs[round_]

    def _build(self, round_: int) -> nx.DiGraph:
        here = self.presence.present[round_]
        if self.dynamic:
            key = (self.drawing.draw_index(round_), here)
            if key not in self._drawn:
                try:
                    self._drawn[key] = self.drawing.graph(sorted(here), key[0])
                except TopologyError as exc:
                    raise TopologyError(f"round {round_} ({len(here)} nodes present): {exc}"
                                        ) from None
            graph = self._drawn[key].copy()
            graph.add_nodes_from(range(self.nodes))
            if self.participation.partial:
                graph.remove_edges_from([edge for edge in list(graph.edges)
                                         if not self._carries(round_, *edge)])
        elif self.participation.partial:  # the senders' edges only, not a copy of them all
            graph = nx.DiGraph()
            graph.add_nodes_from(range(self.nodes))
            graph.add_edges_from((u, v, data) for u in sorted(here)
                                 if self.takes_part(round_, u)
                                 for v, data in self.static.adj[u].items()
                                 if v in here and self._carries(round_, u, v))
        else:
            graph = self.static.copy()
            graph.remove_edges_from([(u, v) for u, v in self.static.edges
                                     if u not in here or v not in here])
        graph.remove_edges_from([(u, v) for u, v in list(graph.edges)
                                 if (min(u, v), max(u, v)) in self.presence.down[round_]
                                 or u in self.presence.joining[round_]])
        return graph

    def _carries(self, round_: int, u: int, v: int) -> bool:
        """Whether edge u -> v moves anything in round `round_` under partial participation:
        both ends take part; from the hub, to the clients drawn for the next round (they
        start it from the hub's aggregate) and to every client in the last round."""
        if u == self.participation.hub:
            return round_ == self.rounds or v in self.chosen(round_ + 1)
        return self.takes_part(round_, u) and self.takes_part(round_, v)

    def chosen(self, round_: int) -> frozenset[int]:
        """The nodes other than the hub drawn to train and send in round `round_`."""
        if round_ not in self._chosen:
            self._chosen[round_] = self.participation.chosen(self.nodes, round_)
        return self._chosen[round_]

    def takes_part(self, round_: int, node: int) -> bool:
        """Whether `node` is the hub or drawn in round `round_` (presence aside)."""
        return node == self.participation.hub or node in self.chosen(round_)

    @property
    def graphs(self) -> tuple[nx.DiGraph, ...]:
        """Every round's graph, 0..rounds (draws them all)."""
        return tuple(self.graph(r) for r in range(self.rounds + 1))

    @property
    def edge_rounds(self) -> dict[tuple[int, int], int]:
        """u -> v: the rounds the edge is in the graph."""
        if self.plain:
            return dict.fromkeys(self.static.edges, self.rounds)
        counts: dict[tuple[int, int], int] = {}
        for graph in self.graphs[1:]:
            for edge in graph.edges:
                counts[edge] = counts.get(edge, 0) + 1
        return counts

    def in_neighbours(self, round_: int, node: int) -> list[int]:
        graph = self.graph(round_)
        return sorted(graph.predecessors(node)) if node in graph else []

    def out_neighbours(self, round_: int, node: int) -> list[int]:
        graph = self.graph(round_)
        return sorted(graph.successors(node)) if node in graph else []

    def present(self, round_: int, node: int) -> bool:
        return node in self.presence.present[round_]

    def joining(self, round_: int, node: int) -> bool:
        return node in self.presence.joining[round_]

    def left_early(self) -> set[int]:
        """Nodes away in the last round: they left for good."""
        return set(range(self.nodes)) - self.presence.present[-1]

    def union(self) -> nx.DiGraph:
        """Every edge of every round: the connections a node opens and the peers it hears
        (draws every round: the launcher's check that each can be drawn)."""
        if self.plain:
            return self.static.copy()
        graph = nx.DiGraph()
        graph.add_nodes_from(range(self.nodes))
        for g in self.graphs[1:]:
            graph.add_edges_from(g.edges(data=True))
        return graph


def build_schedule(static: nx.DiGraph, drawing: Drawing, rounds: int,
                   events: Sequence[Event],
                   participation: Participation = EVERYONE) -> Schedule:
    """Every round's graph: `static` (or a fresh draw, see Drawing) over the nodes present,
    less the edges down and, under partial `participation`, the edges of the nodes not
    drawn that round; a joining node only listens in its first round (it starts from
    its in-neighbours' models). ScenarioError for events that contradict each other."""
    return Schedule(static, drawing, rounds, presence(static.number_of_nodes(), rounds, events),
                    participation)
