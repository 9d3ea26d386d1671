"""Learning algorithms behind one interface, picked by name."""

from node.algorithms.base import Algorithm, NodeData, Payload
from node.algorithms.profe import ProFe

ALGORITHMS: dict[str, type[Algorithm]] = {
    ProFe.name: ProFe,
}

__all__ = ["ALGORITHMS", "Algorithm", "NodeData", "Payload"]
