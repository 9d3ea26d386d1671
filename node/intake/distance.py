"""Distance: an in-neighbour's model farther from this node's own, in any layer, than
aggregation.distance times the median in-neighbour's (node.defences.layer_distance_scores)
is refused: it needs no data, so it judges what no sample here can (a classifier shifted on
classes this node does not hold), and it bounds how far any update it keeps can pull each
layer."""

from __future__ import annotations

import logging

import torch
from torch import nn

from node.algorithms.base import Algorithm, Refusal
from node.defences import layer_distance_scores
from node.intake.checks import Contributions

log = logging.getLogger(__name__)


def layer_of(name: str) -> str:
    """The layer a tensor belongs to: its module's name (conv1.weight and conv1.bias: conv1)."""
    return name.rsplit(".", 1)[0]


def layer_distances(own: dict[str, torch.Tensor], peer) -> dict[str, float]:
    """Per layer, the Euclidean distance between two models' floating-point tensors in it."""
    squares: dict[str, float] = {}
    for name, t in own.items():
        if t.is_floating_point():
            gap = peer[name].to(torch.float64) - t.to(torch.float64)
            squares[layer_of(name)] = squares.get(layer_of(name), 0.0) + float(gap.square().sum())
    return {layer: total ** 0.5 for layer, total in squares.items()}


def screen(algorithm: Algorithm, model: nn.Module, update: Contributions) -> dict[int, Refusal]:
    """The in-neighbours farther from this node's model, in some layer, than the bound
    allows."""
    factor = algorithm.config.aggregation.distance
    if factor <= 0 or not update.peers:
        return {}
    own = {name: t.detach() for name, t in model.state_dict().items()}
    distances = [layer_distances(own, state) for state, _ in update.states[1:]]
    scores = layer_distance_scores(distances)
    log.debug("node %d: distance scores %s", algorithm.node_id,
              dict(zip(update.peers, scores, strict=True)))
    return {peer: Refusal(peer, "model and prototypes", "distance",
                          f"in some layer its model is {score:.3g} times as far from this "
                          f"node's as the median in-neighbour's (at most {factor:g})")
            for peer, score in zip(update.peers, scores, strict=True) if score > factor}
