"""Learning algorithms behind one interface, picked by name: adding one is a new module
and a line in ALGORITHMS."""

import threading

import torch

from node.algorithms.base import Algorithm, DataPlan, NodeData, Payload
from node.algorithms.fedavg import FedAvg
from node.algorithms.fedhp import FedHP
from node.algorithms.fedpr import FedPR
from node.algorithms.fedproc import FedProc
from node.algorithms.fedproto import FedProto
from node.algorithms.profe import ProFe

ALGORITHMS: dict[str, type[Algorithm]] = {
    algorithm.name: algorithm for algorithm in (ProFe, FedAvg, FedProto, FedProc, FedHP, FedPR)
}

# Construction draws initial weights from torch's global generator; nodes sharing one
# process (in-process federations) must not interleave those draws.
_CONSTRUCTION = threading.Lock()


def create(name: str, config, data: NodeData, device: torch.device, node_id: int) -> Algorithm:
    """Algorithm `name` for one node; every node of a federation starts from the same
    weights, drawn from config.seed."""
    with _CONSTRUCTION:
        torch.manual_seed(config.seed)
        return ALGORITHMS[name](config, data, device, node_id)


__all__ = ["ALGORITHMS", "Algorithm", "DataPlan", "NodeData", "Payload", "create"]
