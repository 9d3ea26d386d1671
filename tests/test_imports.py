"""The package's import graph: no cycles, so each module can be read from the bottom up."""

import ast
from pathlib import Path

import networkx as nx

from tests.helpers import REPO

PACKAGES = ("protofed", "node", "topology", "quant", "deploy", "experiments")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.Module, known: set[str]) -> set[str]:
    """Every module of ours a module imports anywhere: at load time, inside functions and
    under TYPE_CHECKING alike (a cycle hidden from load time is still a cycle to read)."""
    found = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        found |= {n for n in names if n in known}
    return found


def import_graph() -> nx.DiGraph:
    files = {module_name(p): p for package in PACKAGES for p in (REPO / package).rglob("*.py")}
    graph = nx.DiGraph()
    for name, path in files.items():
        graph.add_node(name)
        for target in imported(ast.parse(path.read_text()), set(files)):
            if target != name:
                graph.add_edge(name, target)
    return graph


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert len(graph) > 30
    assert list(nx.simple_cycles(graph)) == []


def test_quant_and_topology_stand_alone():
    """The codecs and the graph builders import nothing of the node or the launcher; their
    errors are their own, mapped where the node calls them."""
    graph = import_graph()
    upward = [(source, target) for source, target in graph.edges
              if source.split(".")[0] in ("quant", "topology")
              and target.split(".")[0] not in ("quant", "topology")]
    assert upward == []


def test_the_algorithms_name_their_settings_without_the_config_loader():
    """The loader (node.config) asks the algorithm registry for each algorithm's table; the
    algorithms know only the settings dataclasses (node.settings)."""
    graph = import_graph()
    assert nx.has_path(graph, "node.config", "node.algorithms")
    assert not any(nx.has_path(graph, f"node.algorithms.{m}", "node.config")
                   for m in ("base", "common", "profe", "fedavg", "fedhp", "fedpr", "fedproc",
                             "fedproto"))
    assert not nx.has_path(graph, "node.settings", "node.algorithms")


def test_no_function_in_node_or_deploy_is_longer_than_sixty_lines():
    long = [f"{path.relative_to(REPO)}:{node.lineno} {node.name}"
            for package in ("node", "deploy") for path in (REPO / package).rglob("*.py")
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.end_lineno - node.lineno + 1 > 60]
    assert long == []


def test_the_command_line_knows_backends_only_through_the_launchers():
    text = (REPO / "deploy" / "cli.py").read_text()
    assert "backend ==" not in text and "backend !=" not in text


def test_deploy_is_two_wings_under_a_thin_command_line():
    """deploy/backends (where nodes run) and deploy/views (what shows a run) never import
    each other; both meet in the run folder (deploy.run_folder); only the command line
    (deploy.cli, deploy.up, deploy.terminal) and the run `up` starts (deploy.launch) import
    both, and nothing imports the command line."""
    graph = import_graph()
    wing = {name: name.split(".")[1] for name in graph if name.startswith(
        ("deploy.backends", "deploy.views"))}
    crossing = [(s, t) for s, t in graph.edges if s in wing and t in wing and wing[s] != wing[t]]
    assert crossing == []
    top = {"deploy.cli", "deploy.up", "deploy.terminal"}
    assert [(s, t) for s, t in graph.edges if t in top - {"deploy.terminal"} and s != "deploy.cli"
            ] == []
    assert [(s, t) for s, t in graph.edges if s in wing and t in top] == []
    assert not any(t.startswith("deploy") for s, t in graph.edges if s.startswith(
        ("node", "topology", "quant")))
    # the Python API starts `up` as a process and reads run folders: never the command line
    assert not [(s, t) for s, t in graph.edges if s.startswith("protofed") and t in top]
