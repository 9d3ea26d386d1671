"""Learning algorithms behind one interface, picked by name."""

from node.algorithms.base import Algorithm, NodeData, Payload
from node.algorithms.fedavg import FedAvg
from node.algorithms.fedhp import FedHP
from node.algorithms.fedpr import FedPR
from node.algorithms.fedproc import FedProc
from node.algorithms.fedproto import FedProto
from node.algorithms.profe import ProFe

ALGORITHMS: dict[str, type[Algorithm]] = {
    algorithm.name: algorithm for algorithm in (ProFe, FedAvg, FedProto, FedProc, FedHP, FedPR)
}

__all__ = ["ALGORITHMS", "Algorithm", "NodeData", "Payload"]
