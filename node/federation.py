"""A resolved federation: the validated config plus every node's addresses and neighbours.

The launcher builds it once (the graph included) and writes it as one JSON file; every
backend hands that file to every node unchanged, and nodes never rebuild the graph.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx

from node.config import FederationConfig, connections, from_dict, schedule_over
from node.errors import ConfigError, ProtofedError
from topology import in_neighbours, out_neighbours
from topology.schedule import Schedule

FORMAT = 1  # bumped when the file's shape changes


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
    """The config every node runs with and the members, node i at index i."""

    config: FederationConfig
    members: tuple[Member, ...]

    def member(self, node_id: int) -> Member:
        """Node `node_id`'s entry; ConfigError when there is no such node."""
        if not 0 <= node_id < len(self.members):
            raise ConfigError(f"node id {node_id} is outside 0..{len(self.members) - 1}")
        return self.members[node_id]

    def schedule(self) -> Schedule:
        """Every round's graph, as every node derives it: from the members' connections,
        [topology] and [scenario] alone (nodes never read the graph's file)."""
        graph = nx.DiGraph()
        graph.add_nodes_from(range(len(self.members)))
        graph.add_edges_from((m.node_id, peer) for m in self.members for peer in m.out_neighbours)
        return schedule_over(graph, self.config)

    def addresses(self, node_ids: Sequence[int]) -> dict[int, str]:
        """Where each of `node_ids` is reached."""
        return {i: self.members[i].address for i in node_ids}

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "digest": self.config.digest(),
                "config": self.config.to_dict(),
                "nodes": [{"id": m.node_id, "bind": m.bind, "address": m.address,
                           "in": list(m.in_neighbours), "out": list(m.out_neighbours),
                           **({"source": m.source} if m.source else {})}
                          for m in self.members]}

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(self.to_dict(), indent=1))
        return path


def resolve(config: FederationConfig, binds: Sequence[str], addresses: Sequence[str],
            source: str = "<config>", sources: Sequence[str] = ()) -> Federation:
    """Build the graph (once) and give node i the bind and reach addresses binds[i],
    addresses[i] (and the address its connections leave from, sources[i], if given); a
    graph that cannot be built is a ConfigError naming [topology]."""
    if not len(binds) == len(addresses) == config.nodes:
        raise ConfigError(f"need {config.nodes} addresses, got {len(binds)} and "
                          f"{len(addresses)}")
    try:
        # a node connects to every peer it sends to or hears from in any round
        graph = connections(config)
    except ProtofedError as exc:
        raise ConfigError(f"{source}: [topology] {exc}") from None
    members = tuple(Member(i, binds[i], addresses[i], tuple(in_neighbours(graph, i)),
                           tuple(out_neighbours(graph, i)), sources[i] if sources else "")
                    for i in range(config.nodes))
    return Federation(config, members)


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
    return Federation(config, members)


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
