"""[topology], [links] and [scenario] turned into graphs: the static graph (the only place a
graph file is read, by the launcher when it resolves the federation), every round's
schedule, and each edge's link conditions. Errors are ConfigErrors naming the table."""

from __future__ import annotations

import networkx as nx

from node.errors import ConfigError
from node.settings import FederationConfig
from topology import TopologyError
from topology import build as build_topology
from topology.links import Link, edge_links
from topology.participation import Participation
from topology.schedule import Drawing, Event, ScenarioError, Schedule, build_schedule


def build_graph(config: FederationConfig) -> nx.DiGraph:
    """The federation's static graph from [topology] (a graph file's edge attributes
    kept), validated; one that cannot carry the federation is a ConfigError."""
    t = config.topology
    seed = config.seed if t.seed is None else t.seed
    try:
        return build_topology(t.kind, config.nodes, p=t.p, k=t.k, seed=seed,
                              path=t.path or None, directed=t.directed, center=t.hub or 0)
    except TopologyError as exc:
        raise ConfigError(f"topology ({t.kind}{': ' + t.path if t.path else ''}): {exc}") from exc


def scenario_events(config: FederationConfig) -> list[Event]:
    """[scenario]'s events as the schedule reads them."""
    return [Event(round=e.round, leave=tuple(e.leave), back=tuple(e.back), join=tuple(e.join),
                  edge_down=tuple((u, v) for u, v in e.edge_down),
                  edge_up=tuple((u, v) for u, v in e.edge_up))
            for e in config.scenario.events]


def drawing(config: FederationConfig) -> Drawing:
    """How [topology] draws each round's graph."""
    t = config.topology
    return Drawing(kind=t.kind, k=t.k, p=t.p, seed=config.seed if t.seed is None else t.seed,
                   resample_every=t.resample_every)


def participation(config: FederationConfig) -> Participation:
    """Who takes part in each round: `participation` of the nodes, drawn from `seed`, and
    [topology]'s hub in every round."""
    return Participation(config.participation, config.seed, config.topology.hub)


def schedule_over(graph: nx.DiGraph, config: FederationConfig) -> Schedule:
    """Every round's graph from the static `graph`, [topology] and [scenario] (no file is
    read); a round whose graph cannot be drawn is a ConfigError naming the round."""
    try:
        return build_schedule(graph, drawing(config), config.rounds, scenario_events(config),
                              participation(config))
    except (TopologyError, ScenarioError) as exc:
        raise ConfigError(f"topology ({config.topology.kind}): {exc}") from exc


def connections(schedule: Schedule, config: FederationConfig) -> nx.DiGraph:
    """Every edge of every round (each round drawn: one that cannot be is a ConfigError
    naming the round): the connections nodes open."""
    try:
        return schedule.union()
    except TopologyError as exc:
        raise ConfigError(f"topology ({config.topology.kind}): {exc}") from exc


def link_conditions(static: nx.DiGraph, union: nx.DiGraph,
                    config: FederationConfig) -> dict[tuple[int, int], Link]:
    """Every connection's conditions: [links]' default and profile, the static graph's own
    edge attributes (a graph file's), then [[links.edges]]; a mistake is a ConfigError
    naming the edge. Edges only a later round draws get the default."""
    graph = nx.DiGraph(union.edges)
    for u, v in graph.edges:
        if static.has_edge(u, v):
            graph.edges[u, v].update(static.edges[u, v])
    try:
        return edge_links(graph, config.links.default(), config.links.overrides())
    except TopologyError as exc:
        raise ConfigError(f"links: {exc}") from exc
