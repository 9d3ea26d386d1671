"""Topology builders, validation errors, file formats and neighbour queries."""

import json
from pathlib import Path

import networkx as nx
import pytest

from node.config import from_dict
from node.errors import ConfigError
from node.topology_settings import build_graph
from topology import (
    BUILDERS,
    TopologyError,
    build,
    from_file,
    fully_connected,
    in_neighbours,
    k_regular,
    line,
    out_neighbours,
    random,
    ring,
    small_world,
    star,
    validate,
)

SIZES = [1, 2, 3, 7]


def _edges(graph: nx.DiGraph) -> list[tuple[int, int]]:
    """Sorted directed edges, for comparing graphs."""
    return sorted(graph.edges())


def _is_symmetric(graph: nx.DiGraph) -> bool:
    """Whether every edge also runs the other way."""
    return all(graph.has_edge(v, u) for u, v in graph.edges())


@pytest.mark.parametrize("n", SIZES)
def test_fully_connected(n: int) -> None:
    graph = fully_connected(n)
    assert sorted(graph.nodes) == list(range(n))
    assert graph.number_of_edges() == n * (n - 1)
    assert all(graph.in_degree(v) == graph.out_degree(v) == n - 1 for v in graph)


@pytest.mark.parametrize("n", [3, 4, 9])
def test_ring_has_two_neighbours_each(n: int) -> None:
    graph = ring(n)
    assert graph.number_of_edges() == 2 * n
    assert all(graph.in_degree(v) == graph.out_degree(v) == 2 for v in graph)
    assert out_neighbours(graph, 0) == [1, n - 1]


@pytest.mark.parametrize(("n", "edges"), [(1, []), (2, [(0, 1), (1, 0)])])
def test_tiny_rings(n: int, edges: list) -> None:
    graph = ring(n)
    assert sorted(graph.nodes) == list(range(n)) and _edges(graph) == edges


@pytest.mark.parametrize(("n", "center"), [(1, 0), (5, 0), (5, 3)])
def test_star(n: int, center: int) -> None:
    graph = star(n, center)
    assert graph.number_of_edges() == 2 * (n - 1)
    assert graph.in_degree(center) == graph.out_degree(center) == n - 1
    leaves = [v for v in range(n) if v != center]
    assert all(out_neighbours(graph, v) == in_neighbours(graph, v) == [center] for v in leaves)


@pytest.mark.parametrize("center", [-1, 5])
def test_star_rejects_center_outside(center: int) -> None:
    with pytest.raises(TopologyError, match="center"):
        star(5, center)


@pytest.mark.parametrize("n", [2, 3, 6])
def test_line(n: int) -> None:
    graph = line(n)
    assert graph.number_of_edges() == 2 * (n - 1)
    assert graph.out_degree(0) == graph.out_degree(n - 1) == 1
    assert all(graph.out_degree(v) == 2 for v in range(1, n - 1))
    assert out_neighbours(graph, 1) == ([0, 2] if n > 2 else [0])


@pytest.mark.parametrize(
    "make",
    [
        fully_connected,
        ring,
        star,
        line,
        lambda n: random(n, 0.5, 0),
        lambda n: k_regular(n, 2, 0),
        lambda n: small_world(n, 2, 0.3, 0),
    ],
)
def test_undirected_shapes_go_both_ways_and_validate(make) -> None:
    graph = make(8)
    assert _is_symmetric(graph)
    assert _edges(validate(graph, 8)) == _edges(graph)


@pytest.mark.parametrize("n", [0, -3, 2.0, True])
def test_builders_reject_bad_n(n: object) -> None:
    with pytest.raises(TopologyError, match="number of nodes"):
        fully_connected(n)


@pytest.mark.parametrize(
    "make",
    [
        lambda s: random(12, 0.3, s),
        lambda s: small_world(12, 4, 0.3, s),
        lambda s: k_regular(12, 3, s),
    ],
)
def test_seeded_builders_are_deterministic(make) -> None:
    assert _edges(make(5)) == _edges(make(5))
    assert len({tuple(_edges(make(seed))) for seed in range(5)}) > 1


@pytest.mark.parametrize("seed", range(5))
def test_random_is_connected_even_when_sparse(seed: int) -> None:
    graph = random(20, 0.15, seed)
    assert nx.is_strongly_connected(graph)


def test_random_with_hopeless_p_suggests_larger_p() -> None:
    with pytest.raises(TopologyError, match="larger p"):
        random(30, 0.0, 0)


@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_random_rejects_bad_probability(p: float) -> None:
    with pytest.raises(TopologyError, match="probability"):
        random(5, p, 0)


def test_random_single_node() -> None:
    assert sorted(random(1, 0.5, 0).nodes) == [0]


@pytest.mark.parametrize(("n", "k"), [(10, 2), (10, 4), (7, 6)])
def test_small_world_keeps_n_times_k_over_two_edges(n: int, k: int) -> None:
    graph = small_world(n, k, 0.2, 3)
    assert graph.number_of_edges() == n * k  # n*k/2 undirected edges, each both ways
    assert nx.is_strongly_connected(graph)


def test_small_world_without_rewiring_is_a_ring_lattice() -> None:
    graph = small_world(6, 4, 0.0, 0)
    assert out_neighbours(graph, 0) == [1, 2, 4, 5]


@pytest.mark.parametrize(("n", "k"), [(10, 3), (10, 0), (5, 6), (4, 4)])
def test_small_world_rejects_bad_k(n: int, k: int) -> None:
    with pytest.raises(TopologyError, match="even k"):
        small_world(n, k, 0.1, 0)


@pytest.mark.parametrize(("n", "k"), [(6, 2), (10, 3), (8, 5), (2, 1), (1, 0)])
def test_k_regular_degrees(n: int, k: int) -> None:
    graph = k_regular(n, k, 0)
    assert sorted(graph.nodes) == list(range(n))
    assert all(graph.in_degree(v) == graph.out_degree(v) == k for v in graph)
    assert nx.is_strongly_connected(graph)


@pytest.mark.parametrize(
    ("n", "k", "match"),
    [(5, 3, "n\\*k even"), (4, 4, "k < n"), (4, -1, "k < n"), (6, 1, "never connected")],
)
def test_k_regular_rejects_bad_k(n: int, k: int, match: str) -> None:
    with pytest.raises(TopologyError, match=match):
        k_regular(n, k, 0)


@pytest.mark.parametrize("kind", sorted(set(BUILDERS) - {"file"}))
def test_build_dispatches_and_validates(kind: str) -> None:
    graph = build(kind, 8, p=0.5, k=4, seed=1)
    assert sorted(graph.nodes) == list(range(8))
    assert nx.is_strongly_connected(graph)


def test_build_file_kind(tmp_path: Path) -> None:
    (tmp_path / "g.txt").write_text("0 1\n1 2\n")
    assert _edges(build("file", 3, path=str(tmp_path / "g.txt"))) == _edges(line(3))
    with pytest.raises(TopologyError, match="needs a path"):
        build("file", 3)


def test_build_rejects_unknown_kind() -> None:
    with pytest.raises(TopologyError, match="'torus'.*fully_connected.*small_world"):
        build("torus", 4)


def test_build_checks_file_size_against_n(tmp_path: Path) -> None:
    (tmp_path / "g.txt").write_text("0 1\n1 2\n")
    with pytest.raises(TopologyError, match="3 nodes but the federation has n=4"):
        build("file", 4, path=str(tmp_path / "g.txt"))


def test_the_config_entrance_reports_a_topology_error_as_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"topology \(k_regular\): .*n\*k even") as caught:
        build_graph(from_dict({"name": "t", "nodes": 5, "topology": {"kind": "k_regular",
                                                                     "k": 3}}))
    assert isinstance(caught.value.__cause__, TopologyError)


def test_validate_turns_undirected_into_both_ways() -> None:
    graph = validate(nx.Graph([(0, 1), (1, 2)]), 3)
    assert isinstance(graph, nx.DiGraph)
    assert _edges(graph) == [(0, 1), (1, 0), (1, 2), (2, 1)]


def test_validate_accepts_single_node() -> None:
    graph = nx.Graph()
    graph.add_node(0)
    assert list(validate(graph, 1).nodes) == [0]


@pytest.mark.parametrize(
    ("graph", "n", "match"),
    [
        (nx.Graph([(0, 1), (1, 1), (1, 2)]), 3, "self-loops on nodes \\[1\\]"),
        (nx.Graph([(0, 1), (1, 7)]), 3, "unknown node ids \\[7\\]"),
        (nx.Graph([(0, 1), (1, "x")]), 3, "unknown node ids \\['x'\\]"),
        (nx.Graph([(0, 1), (1, 2), (2, 3)]), 3, "4 nodes but the federation has n=3"),
        (nx.Graph([(0, 1)]), 3, "2 nodes but the federation has n=3.*missing node ids \\[2\\]"),
        (nx.Graph([(0, 1), (2, 3)]), 4, "node 0 cannot reach nodes \\[2, 3\\]"),
        (
            nx.DiGraph([(0, 1), (1, 2), (2, 0), (2, 3)]),
            4,
            "node 3 cannot reach nodes \\[0, 1, 2\\].*components \\[\\[0, 1, 2\\], \\[3\\]\\]",
        ),
        (nx.DiGraph([(0, 1), (1, 2)]), 3, "not strongly connected"),
    ],
)
def test_validate_errors(graph: nx.Graph, n: int, match: str) -> None:
    with pytest.raises(TopologyError, match=match):
        validate(graph, n)


def test_neighbours_on_a_directed_graph() -> None:
    # 0 -> 1, 0 -> 2, 1 -> 2, 2 -> 0, 3 -> 0, 2 -> 3
    graph = validate(nx.DiGraph([(0, 1), (0, 2), (1, 2), (2, 0), (3, 0), (2, 3)]), 4)
    assert [in_neighbours(graph, v) for v in range(4)] == [[2, 3], [0], [0, 1], [2]]
    assert [out_neighbours(graph, v) for v in range(4)] == [[1, 2], [2], [0, 3], [0]]


@pytest.mark.parametrize("query", [in_neighbours, out_neighbours])
def test_neighbours_of_unknown_node(query) -> None:
    with pytest.raises(TopologyError, match="node 9"):
        query(ring(3), 9)


@pytest.mark.parametrize("directed", [False, True])
def test_graphml_roundtrip(tmp_path: Path, directed: bool) -> None:
    source = nx.DiGraph([(0, 1), (1, 2), (2, 0)]) if directed else nx.path_graph(3)
    nx.write_graphml(source, tmp_path / "g.graphml")
    graph = from_file(tmp_path / "g.graphml", directed=not directed)  # the file decides
    expected = [(0, 1), (1, 2), (2, 0)] if directed else [(0, 1), (1, 0), (1, 2), (2, 1)]
    assert _edges(graph) == expected


@pytest.mark.parametrize("key", ["edges", "links"])
@pytest.mark.parametrize("directed", [False, True])
def test_node_link_json(tmp_path: Path, key: str, directed: bool) -> None:
    source = nx.DiGraph([(0, 1), (1, 2)]) if directed else nx.Graph([(0, 1), (1, 2)])
    (tmp_path / "g.json").write_text(json.dumps(nx.node_link_data(source, edges=key)))
    expected = [(0, 1), (1, 2)] if directed else [(0, 1), (1, 0), (1, 2), (2, 1)]
    assert _edges(from_file(tmp_path / "g.json")) == expected


def test_node_link_json_with_string_ids(tmp_path: Path) -> None:
    data = {
        "directed": True,
        "nodes": [{"id": "0"}, {"id": "1"}],
        "links": [{"source": "0", "target": "1"}, {"source": "1", "target": "0"}],
    }
    (tmp_path / "g.json").write_text(json.dumps(data))
    assert _edges(from_file(tmp_path / "g.json")) == [(0, 1), (1, 0)]


@pytest.mark.parametrize(
    ("directed", "expected"),
    [(False, [(0, 1), (1, 0), (1, 2), (2, 1)]), (True, [(0, 1), (1, 2)])],
)
def test_edge_list(tmp_path: Path, directed: bool, expected: list) -> None:
    (tmp_path / "g.edges").write_text("# a comment\n0 1  # first edge\n\n1 2\n")
    assert _edges(from_file(tmp_path / "g.edges", directed=directed)) == expected


def test_edge_list_lone_node(tmp_path: Path) -> None:
    (tmp_path / "one.txt").write_text("0\n")
    assert list(validate(from_file(tmp_path / "one.txt"), 1).nodes) == [0]


def _bad_graphml(path: Path) -> None:
    """GraphML whose node ids are not integers."""
    nx.write_graphml(nx.Graph([("a", "b")]), path)


@pytest.mark.parametrize(
    ("name", "write", "match"),
    [
        ("g.txt", lambda p: p.write_text("0 1\n1 node2\n"), "label 'node2'"),
        ("g.txt", lambda p: p.write_text("0 1 2\n"), "line 1"),
        ("g.txt", lambda p: p.write_text("1 01\n"), "collide"),
        ("g.txt", lambda p: p.write_bytes(b"\xff\xfe\x00"), "cannot read"),
        ("g.json", lambda p: p.write_text("{not json"), "malformed"),
        ("g.json", lambda p: p.write_text('{"nodes": [{"name": 0}]}'), "malformed"),
        ("g.json", lambda p: p.write_text("[1, 2]"), "malformed"),
        ("g.json", lambda p: p.write_text('{"nodes": [{"id": 1.5}], "edges": []}'), "label 1.5"),
        ("g.graphml", lambda p: p.write_text("<graphml><graph"), "malformed"),
        ("g.graphml", _bad_graphml, "label 'a'"),
    ],
)
def test_bad_files_name_the_file(tmp_path: Path, name: str, write, match: str) -> None:
    path = tmp_path / name
    write(path)
    with pytest.raises(TopologyError, match=match) as caught:
        from_file(path)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize("name", ["missing.txt", "missing.json", "missing.graphml"])
def test_missing_file(tmp_path: Path, name: str) -> None:
    with pytest.raises(TopologyError, match=name):
        from_file(tmp_path / name)
