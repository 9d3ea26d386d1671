"""A resolved federation: the validated config, every node's addresses and neighbours, the
static graph and every connection's link conditions.

The launcher resolves it once (the only time a graph file is read) and writes it as one
JSON file; every backend hands that file to every node unchanged. Nodes, shaping, capacity
and the reports read it and never the user's files: every round's graph is derived from the
static graph, [topology]'s seed and [scenario]'s events, which the file holds.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import networkx as nx

from node.config import blame_overrides, from_dict
from node.errors import ConfigError, ProtofedError
from node.settings import FederationConfig
from node.topology_settings import build_graph, connections, link_conditions, schedule_over
from topology import in_neighbours, out_neighbours
from topology.links import Link
from topology.schedule import Schedule

_SCHEDULE_LOCK = threading.Lock()
FORMAT = 2  # bumped when the file's shape changes (2: the static graph and link conditions)
LINK_FIELDS = ("bandwidth_bps", "delay_s", "jitter_s", "loss")


@dataclass(frozen=True)
class Member:
    """One node's place in the federation: where it listens, where it is reached, whom it
    hears from and whom it sends to."""

    node_id: int
    bind: str
    address: str
    in_neighbours: tuple[int, ...]
    out_neighbours: tuple[int, ...]
    source: str = ""  # the IPv4 address its connections leave from ("" = the system's)


@dataclass(frozen=True)
class Federation:
    """The config every node runs with, the members (node i at index i), the static graph's
    edges and the conditions of every shaped connection."""

    config: FederationConfig
    members: tuple[Member, ...]
    edges: tuple[tuple[int, int], ...]
    shaped_links: dict[tuple[int, int], Link]

    def member(self, node_id: int) -> Member:
        """Node `node_id`'s entry; ConfigError when there is no such node."""
        if not 0 <= node_id < len(self.members):
            raise ConfigError(f"node id {node_id} is outside 0..{len(self.members) - 1}")
        return self.members[node_id]

    def graph(self) -> nx.DiGraph:
        """The static graph [topology] built."""
        graph = nx.DiGraph()
        graph.add_nodes_from(range(len(self.members)))
        graph.add_edges_from(self.edges)
        return graph

    def schedule(self) -> Schedule:
        """Every round's graph, as every node derives it: from the static graph, [topology]
        and [scenario] alone. Made once per federation: the sim's nodes share one."""
        with _SCHEDULE_LOCK:
            made = self.__dict__.get("_schedule")
            if made is None:
                # each of 10,000 threads holding the whole graph would be 10,000 copies
                made = schedule_over(self.graph(), self.config)
                object.__setattr__(self, "_schedule", made)  # not a field: not compared
            return made

    def with_sources(self, sources: Sequence[str]) -> Federation:
        """The same federation with node i's connections leaving from sources[i]."""
        return replace(self, members=tuple(replace(m, source=sources[m.node_id])
                                           for m in self.members))

    def addresses(self, node_ids: Sequence[int]) -> dict[int, str]:
        """Where each of `node_ids` is reached."""
        return {i: self.members[i].address for i in node_ids}

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "digest": self.config.digest(),
                "config": self.config.to_dict(),
                "nodes": [{"id": m.node_id, "bind": m.bind, "address": m.address,
                           "in": list(m.in_neighbours), "out": list(m.out_neighbours),
                           **({"source": m.source} if m.source else {})}
                          for m in self.members],
                "edges": [list(edge) for edge in self.edges],
                "links": [{"edge": list(edge), **{k: getattr(link, k) for k in LINK_FIELDS}}
                          for edge, link in sorted(self.shaped_links.items())]}

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(self.to_dict(), indent=1))
        return path


def resolve(config: FederationConfig, binds: Sequence[str], addresses: Sequence[str],
            source: str = "<config>", overrides: Sequence[str] = ()) -> Federation:
    """Build the graph (once: a graph file is read here and nowhere else), draw every round,
    resolve every connection's link conditions, and give node i the bind and reach
    addresses binds[i], addresses[i]; a ConfigError names [topology] or [links], and the
    `overrides` (--set options) that set their keys."""
    try:
        return _resolve(config, binds, addresses, source)
    except ConfigError as exc:
        raise blame_overrides(exc, source, overrides) from None


def _resolve(config: FederationConfig, binds: Sequence[str], addresses: Sequence[str],
             source: str) -> Federation:
    if not len(binds) == len(addresses) == config.nodes:
        raise ConfigError(f"need {config.nodes} addresses, got {len(binds)} and "
                          f"{len(addresses)}")
    try:
        static = build_graph(config)
        # a node connects to every peer it sends to or hears from in any round
        union = connections(schedule_over(static, config), config)
    except ProtofedError as exc:
        raise ConfigError(f"{source}: [topology] {exc}") from None
    try:
        links = link_conditions(static, union, config)
    except ProtofedError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    members = tuple(Member(i, binds[i], addresses[i], tuple(in_neighbours(union, i)),
                           tuple(out_neighbours(union, i)))
                    for i in range(config.nodes))
    return Federation(config, members, tuple(sorted(static.edges)),
                      {edge: link for edge, link in links.items() if link.shaped})


def read(path: str | Path) -> Federation:
    """A federation file written by the launcher, checked as strictly as a TOML file."""
    source = str(path)
    try:
        raw = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read the federation file: {exc}") from None
    except ValueError as exc:
        raise ConfigError(f"{source}: not a federation file (bad JSON: {exc})") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise ConfigError(f"{source}: not a federation file of format {FORMAT} (written by "
                          "another protofed version?)")
    config = from_dict(raw.get("config"), source=source)
    nodes = raw.get("nodes")
    if not isinstance(nodes, list) or len(nodes) != config.nodes:
        raise ConfigError(f"{source}: nodes must list all {config.nodes} nodes")
    members = tuple(_member(entry, i, config.nodes, source) for i, entry in enumerate(nodes))
    return Federation(config, members, _edges(raw.get("edges"), config.nodes, source),
                      _links(raw.get("links"), config.nodes, source))


def _edges(raw: Any, nodes: int, source: str) -> tuple[tuple[int, int], ...]:
    if not isinstance(raw, list) or not all(_is_edge(edge, nodes) for edge in raw):
        raise ConfigError(f"{source}: edges: must list [sender, receiver] pairs of node ids "
                          f"in 0..{nodes - 1}")
    return tuple(sorted({(u, v) for u, v in raw}))


def _links(raw: Any, nodes: int, source: str) -> dict[tuple[int, int], Link]:
    if not isinstance(raw, list):
        raise ConfigError(f"{source}: links: must be a list")
    links = {}
    for index, entry in enumerate(raw):
        where = f"{source}: links[{index}]"
        if not isinstance(entry, dict) or not _is_edge(entry.get("edge"), nodes):
            raise ConfigError(f"{where}: must be an object with edge [sender, receiver]")
        bandwidth = entry.get("bandwidth_bps")
        numbers = [entry.get(k) for k in LINK_FIELDS[1:]]
        if not ((bandwidth is None or (type(bandwidth) is int and bandwidth > 0))
                and all(type(x) in (int, float) and 0 <= x < 100 for x in numbers)
                and numbers[-1] < 1):
            raise ConfigError(f"{where}: bandwidth_bps must be a positive integer or null, "
                              "delay_s and jitter_s seconds, loss a fraction below 1")
        links[tuple(entry["edge"])] = Link(bandwidth, *(float(x) for x in numbers))
    return links


def _is_edge(edge: Any, nodes: int) -> bool:
    return (isinstance(edge, list) and len(edge) == 2 and edge[0] != edge[1]
            and all(type(i) is int and 0 <= i < nodes for i in edge))


def _member(entry: Any, index: int, nodes: int, source: str) -> Member:
    where = f"{source}: nodes[{index}]"
    if not isinstance(entry, dict) or entry.get("id") != index:
        raise ConfigError(f"{where}: must be an object with id {index}")
    for key in ("bind", "address"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            raise ConfigError(f"{where}.{key}: must be an address like tcp://host:port")
    neighbours = {}
    for key in ("in", "out"):
        ids = entry.get(key)
        if (not isinstance(ids, list) or
                not all(type(i) is int and 0 <= i < nodes and i != index for i in ids)):
            raise ConfigError(f"{where}.{key}: must list node ids in 0..{nodes - 1} other "
                              f"than {index}, got {ids!r}")
        neighbours[key] = tuple(sorted(set(ids)))
    origin = entry.get("source", "")
    if not isinstance(origin, str) or (origin and not _is_ipv4(origin)):
        raise ConfigError(f"{where}.source: must be an IPv4 address, got {origin!r}")
    return Member(index, entry["bind"], entry["address"], neighbours["in"], neighbours["out"],
                  origin)


def _is_ipv4(text: str) -> bool:
    parts = text.split(".")
    return len(parts) == 4 and all(p.isdigit() and int(p) < 256 for p in parts)
