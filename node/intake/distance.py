"""Distance: an in-neighbour's model farther from this node's own than aggregation.distance
times the median in-neighbour's (node.defences.distance_scores) is refused: it needs no
data, so it judges what no sample here can (a classifier shifted on classes this node does
not hold), and it bounds how far any update it keeps can pull."""

from __future__ import annotations

import logging

import torch
from torch import nn

from node.aggregation import state_norm
from node.algorithms.base import Algorithm, Refusal
from node.defences import distance_scores
from node.intake.checks import Contributions

log = logging.getLogger(__name__)


def model_distance(own: dict[str, torch.Tensor], peer) -> float:
    """The Euclidean distance between two models' floating-point tensors, taken together."""
    return state_norm({name: peer[name].to(torch.float64) - t.to(torch.float64)
                       for name, t in own.items() if t.is_floating_point()})


def screen(algorithm: Algorithm, model: nn.Module, update: Contributions) -> dict[int, Refusal]:
    """The in-neighbours farther from this node's model than the bound allows."""
    factor = algorithm.config.aggregation.distance
    if factor <= 0 or not update.peers:
        return {}
    own = {name: t.detach() for name, t in model.state_dict().items()}
    distances = [model_distance(own, state) for state, _ in update.states[1:]]
    scores = distance_scores(distances)
    log.debug("node %d: distance scores %s", algorithm.node_id,
              dict(zip(update.peers, scores, strict=True)))
    return {peer: Refusal(peer, "model and prototypes", "distance",
                          f"its model is {d:.4g} from this node's, {score:.3g} times the "
                          f"median in-neighbour's (at most {factor:g})")
            for peer, d, score in zip(update.peers, distances, scores, strict=True)
            if score > factor}
