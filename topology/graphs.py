"""Topology builders: each returns an nx.DiGraph on nodes 0..n-1 where u->v means u sends to v.

Undirected shapes get both directions. `build` dispatches by name and validates the result.
"""

import json
import logging
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from pathlib import Path

import networkx as nx

# Edge attributes a graph file may carry for its links (topology.links reads them).
EDGE_CONDITIONS = ("bandwidth", "delay", "jitter", "loss")


class TopologyError(ValueError):
    """A graph that cannot carry the federation (disconnected, self-loops, wrong size); the
    config entrance (node.config) reports it as a ConfigError naming the topology."""


logger = logging.getLogger(__name__)

MAX_TRIES = 100
"""Seeds tried (seed, seed+1, ...) by the random builders before giving up on connectivity."""

_INT_LABEL = re.compile(r"-?\d+")


def _check_n(n: int) -> None:
    """A federation needs at least one node."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise TopologyError(f"number of nodes must be an int >= 1, got {n!r}")


def _check_probability(p: float) -> None:
    """Probabilities lie in [0, 1]."""
    if not 0.0 <= p <= 1.0:
        raise TopologyError(f"probability p must lie in [0, 1], got {p!r}")


def _both_ways(n: int, edges: Iterable[tuple[int, int]]) -> nx.DiGraph:
    """A DiGraph on 0..n-1 carrying each undirected edge in both directions."""
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    for u, v in edges:
        graph.add_edge(u, v)
        graph.add_edge(v, u)
    return graph


def fully_connected(n: int) -> nx.DiGraph:
    """Every node sends to every other node: n*(n-1) directed edges."""
    _check_n(n)
    return _both_ways(n, ((u, v) for u in range(n) for v in range(u + 1, n)))


def ring(n: int) -> nx.DiGraph:
    """Each node exchanges with its two ring neighbours; n == 2 is one edge, n == 1 has none."""
    _check_n(n)
    # n == 2 would give (0, 1) and (1, 0): the same undirected edge, deduplicated by DiGraph
    return _both_ways(n, ((i, (i + 1) % n) for i in range(n) if n > 1))


def star(n: int, center: int = 0) -> nx.DiGraph:
    """Every node exchanges only with `center`."""
    _check_n(n)
    if not 0 <= center < n:
        raise TopologyError(f"star center must be a node in 0..{n - 1}, got {center}")
    return _both_ways(n, ((center, v) for v in range(n) if v != center))


def line(n: int) -> nx.DiGraph:
    """A path 0 - 1 - ... - n-1."""
    _check_n(n)
    return _both_ways(n, ((i, i + 1) for i in range(n - 1)))


def _first_connected(
    make: Callable[[int], nx.Graph], seed: int, what: str, hint: str
) -> nx.DiGraph:
    """The first connected graph make(seed), make(seed+1), ...; TopologyError after MAX_TRIES."""
    for attempt in range(MAX_TRIES):
        graph = make(seed + attempt)
        if nx.is_connected(graph):
            if attempt:
                logger.debug("%s connected at seed %d (asked %d)", what, seed + attempt, seed)
            return _both_ways(graph.number_of_nodes(), graph.edges())
    raise TopologyError(
        f"{what} was disconnected for all {MAX_TRIES} seeds {seed}..{seed + MAX_TRIES - 1}; {hint}"
    )


def random(n: int, p: float, seed: int) -> nx.DiGraph:
    """Erdos-Renyi G(n, p), retrying seeds seed, seed+1, ... until it comes out connected."""
    _check_n(n)
    _check_probability(p)
    return _first_connected(
        lambda s: nx.gnp_random_graph(n, p, seed=s),
        seed,
        f"random G(n={n}, p={p})",
        "use a larger p",
    )


def small_world(n: int, k: int, p: float, seed: int) -> nx.DiGraph:
    """Connected Watts-Strogatz: a ring where each node joins its k nearest, rewired with prob. p.

    k must be even (k/2 neighbours each side) with 2 <= k < n.
    """
    _check_n(n)
    _check_probability(p)
    if k < 2 or k % 2 or k >= n:
        raise TopologyError(
            f"small_world needs an even k with 2 <= k < n (k/2 neighbours each side), "
            f"got k={k}, n={n}"
        )
    try:
        graph = nx.connected_watts_strogatz_graph(n, k, p, tries=MAX_TRIES, seed=seed)
    except nx.NetworkXError as error:
        raise TopologyError(
            f"small_world(n={n}, k={k}, p={p}): {error}; use a smaller p"
        ) from error
    return _both_ways(n, graph.edges())


def k_regular(n: int, k: int, seed: int) -> nx.DiGraph:
    """Random k-regular graph, retrying seeds seed, seed+1, ... until it comes out connected."""
    _check_n(n)
    if not 0 <= k < n or (n * k) % 2:
        raise TopologyError(
            f"k_regular needs 0 <= k < n and n*k even (each edge uses two node slots), "
            f"got n={n}, k={k}"
        )
    if n > 2 and k < 2:
        raise TopologyError(f"a {k}-regular graph on {n} nodes is never connected; use k >= 2")
    return _first_connected(
        lambda s: nx.random_regular_graph(k, n, seed=s),
        seed,
        f"random {k}-regular graph on {n} nodes",
        "use a larger k",
    )


def _int_label(label: object, path: Path) -> int:
    """A node label as an int: ints and strings of ints are accepted."""
    if isinstance(label, int) and not isinstance(label, bool):
        return label
    if isinstance(label, str) and _INT_LABEL.fullmatch(label.strip()):
        return int(label)
    raise TopologyError(f"{path}: node label {label!r} is not an integer")


def _relabel(graph: nx.Graph, path: Path) -> nx.DiGraph:
    """`graph` with integer labels, as a DiGraph (undirected edges become both directions)."""
    mapping = {label: _int_label(label, path) for label in graph.nodes}
    if len(set(mapping.values())) != len(mapping):
        raise TopologyError(f"{path}: node labels {sorted(map(str, mapping))} collide as integers")
    directed = nx.DiGraph()
    directed.add_nodes_from(sorted(mapping.values()))
    for u, v, data in graph.edges(data=True):
        directed.add_edge(mapping[u], mapping[v], **conditions_of(data))
        if not graph.is_directed():
            directed.add_edge(mapping[v], mapping[u], **conditions_of(data))
    return directed


def conditions_of(data: dict) -> dict[str, str]:
    """The link conditions among an edge's attributes (see topology.links), as text."""
    return {key: str(data[key]) for key in EDGE_CONDITIONS if key in data}


def _read_graphml(path: Path) -> nx.Graph:
    """GraphML; directedness comes from the file's edgedefault."""
    return nx.read_graphml(path)


def _read_node_link(path: Path) -> nx.Graph:
    """Node-link JSON with either the "edges" (networkx >= 3.4) or the older "links" key."""
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise TypeError('expected an object with a "nodes" list')
    edges = data.get("edges", data.get("links", []))
    if not isinstance(edges, list):
        raise TypeError('"edges" must be a list')
    graph = nx.DiGraph() if data.get("directed", False) else nx.Graph()
    for node in data["nodes"]:
        graph.add_node(node["id"])
    for edge in edges:
        graph.add_edge(edge["source"], edge["target"], **conditions_of(edge))
    return graph


def _read_edge_list(path: Path, directed: bool) -> nx.Graph:
    """Lines "u v" (an edge, optionally followed by link conditions "bandwidth=5mbit
    delay=10ms") or "u" (a lone node); '#' starts a comment."""
    graph = nx.DiGraph() if directed else nx.Graph()
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        fields = raw.split("#", 1)[0].split()
        if len(fields) >= 2:
            graph.add_edge(fields[0], fields[1], **_edge_conditions(fields[2:], number))
        elif fields:
            graph.add_node(fields[0])
    return graph


def _edge_conditions(fields: list[str], number: int) -> dict[str, str]:
    """An edge list line's "key=value" link conditions."""
    conditions = {}
    for field in fields:
        key, sep, value = field.partition("=")
        if not sep or key not in EDGE_CONDITIONS or not value:
            raise ValueError(f"line {number}: expected 'u v' and optionally conditions like "
                             f"bandwidth=5mbit ({', '.join(EDGE_CONDITIONS)}), got {field!r}")
        conditions[key] = value
    return conditions


def from_file(path: str | Path, directed: bool = False) -> nx.DiGraph:
    """Load .graphml, node-link .json or an edge list ("u v" per line; `directed` makes it one-way)."""
    path = Path(path)
    try:
        if path.suffix.lower() == ".graphml":
            graph = _read_graphml(path)
        elif path.suffix.lower() == ".json":
            graph = _read_node_link(path)
        else:
            graph = _read_edge_list(path, directed)
    except (OSError, UnicodeDecodeError) as error:
        raise TopologyError(f"cannot read topology file {path}: {error}") from error
    except (ValueError, KeyError, TypeError, ET.ParseError, nx.NetworkXError) as error:
        raise TopologyError(f"malformed topology file {path}: {error!r}") from error
    return _relabel(graph, path)


def _sorted_ids(ids: Iterable[object]) -> list[object]:
    """Node ids in a stable order even when their types are mixed."""
    return sorted(ids, key=lambda node: (not isinstance(node, int), str(node)))


def _unreachable(graph: nx.DiGraph) -> tuple[int, list[int]]:
    """The first node and the nodes it cannot reach."""
    for node in sorted(graph.nodes):
        missing = set(graph.nodes) - nx.descendants(graph, node) - {node}
        if missing:
            return node, sorted(missing)
    raise AssertionError("called on a strongly connected graph")


def validate(graph: nx.Graph, n: int) -> nx.DiGraph:
    """A DiGraph copy of `graph` (undirected edges both ways) after checking it can carry n nodes."""
    _check_n(n)
    loops = sorted(nx.selfloop_edges(graph))
    if loops:
        raise TopologyError(f"topology has self-loops on nodes {[u for u, _ in loops]}")
    nodes = set(graph.nodes)
    expected = set(range(n))
    if nodes != expected:
        problems = []
        if len(nodes) != n:
            problems.append(f"it has {len(nodes)} nodes but the federation has n={n}")
        if nodes - expected:
            problems.append(f"unknown node ids {_sorted_ids(nodes - expected)}")
        if expected - nodes:
            problems.append(f"missing node ids {sorted(expected - nodes)}")
        raise TopologyError(f"topology nodes must be exactly 0..{n - 1}: {'; '.join(problems)}")
    directed = nx.DiGraph()
    directed.add_nodes_from(range(n))
    directed.add_edges_from((u, v, conditions_of(data))
                            for u, v, data in graph.to_directed().edges(data=True))
    if not nx.is_strongly_connected(directed):
        components = sorted(sorted(c) for c in nx.strongly_connected_components(directed))
        source, missing = _unreachable(directed)
        raise TopologyError(
            f"topology is not strongly connected: node {source} cannot reach nodes {missing}; "
            f"strongly connected components {components}"
        )
    return directed


def in_neighbours(graph: nx.DiGraph, node: int) -> list[int]:
    """Sorted nodes that send to `node`."""
    if node not in graph:
        raise TopologyError(f"node {node} is not in the topology")
    return sorted(graph.predecessors(node))


def out_neighbours(graph: nx.DiGraph, node: int) -> list[int]:
    """Sorted nodes that `node` sends to."""
    if node not in graph:
        raise TopologyError(f"node {node} is not in the topology")
    return sorted(graph.successors(node))


def _from_config_file(path: str | None, directed: bool) -> nx.DiGraph:
    """from_file for `build`, which needs a path for kind 'file'."""
    if path is None:
        raise TopologyError("topology kind 'file' needs a path")
    return from_file(path, directed)


BUILDERS: dict[str, Callable[..., nx.DiGraph]] = {
    "fully_connected": lambda n, **_: fully_connected(n),
    "ring": lambda n, **_: ring(n),
    "star": lambda n, *, center=0, **_: star(n, center),
    "line": lambda n, **_: line(n),
    "random": lambda n, *, p, seed, **_: random(n, p, seed),
    "small_world": lambda n, *, k, p, seed, **_: small_world(n, k, p, seed),
    "k_regular": lambda n, *, k, seed, **_: k_regular(n, k, seed),
    "file": lambda n, *, path, directed, **_: _from_config_file(path, directed),
    # drawn anew each round (topology.schedule); every pair is a possible edge
    "epidemic": lambda n, **_: fully_connected(n),
    "one_peer_exponential": lambda n, **_: fully_connected(n),
}
"""Topology kinds by name; each takes n and the keyword options of `build`."""


def edge_count(kind: str, n: int, *, k: int = 2, p: float = 0.5) -> int | None:
    """How many directed edges `build` makes for a kind (its expectation for `random`),
    known before any is built; None for a graph file (its size bounds it)."""
    if kind in ("fully_connected", "epidemic", "one_peer_exponential"):
        return n * (n - 1)  # the last two draw each round's edges among every pair
    if kind in ("ring", "line", "star"):
        return 2 * max(n - 1, 0) + (2 if kind == "ring" and n > 2 else 0)
    if kind == "random":
        return round(p * n * (n - 1))
    if kind in ("small_world", "k_regular"):
        return n * min(k, max(n - 1, 0))
    return None


def build(
    kind: str,
    n: int,
    *,
    p: float = 0.5,
    k: int = 2,
    seed: int = 0,
    path: str | None = None,
    directed: bool = False,
    center: int = 0,
) -> nx.DiGraph:
    """Build the topology `kind` for n nodes and validate it (`center`: a star's)."""
    if kind not in BUILDERS:
        raise TopologyError(f"unknown topology kind {kind!r}; valid kinds are {sorted(BUILDERS)}")
    graph = BUILDERS[kind](n, p=p, k=k, seed=seed, path=path, directed=directed,
                          center=center)
    return validate(graph, n)
