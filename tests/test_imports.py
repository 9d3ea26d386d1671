"""The package's import graph: no cycles, so each module can be read from the bottom up."""

import ast
from pathlib import Path

import networkx as nx

from tests.helpers import REPO

PACKAGES = ("node", "topology", "quant", "deploy", "experiments")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.Module, known: set[str]) -> set[str]:
    """Our modules a module imports when it is loaded (not those under TYPE_CHECKING or
    inside functions, which run later)."""
    found = set()
    for statement in tree.body:
        if isinstance(statement, ast.If) and "TYPE_CHECKING" in ast.unparse(statement.test):
            continue
        for node in ast.walk(statement):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                break
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


def test_config_does_not_import_the_algorithms_at_load_time():
    graph = import_graph()
    assert not nx.has_path(graph, "node.config", "node.algorithms")
    assert not any(nx.has_path(graph, f"node.algorithms.{m}", "node.config")
                   for m in ("base", "common", "profe", "fedavg"))
