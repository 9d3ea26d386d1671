"""Distance: per layer, an in-neighbour's model is measured against the median in-neighbour's
distance from this node's own (node.defences.layer_distance_scores). Beyond
aggregation.distance_refuse x aggregation.distance times that median in some layer it is
refused; beyond aggregation.distance times it, that layer's pull is clipped to the bound
(node.defences.layer_clip_factors). It needs no data, so it judges what no sample here can
(a classifier shifted on classes this node does not hold), and no update it keeps pulls
any layer further than the bound; an honest neighbour just beyond it loses a little of
one layer's pull, not its whole update and prototypes."""

from __future__ import annotations

import logging

import torch
from torch import nn

from node.algorithms.base import Algorithm, Refusal
from node.defences import layer_clip_factors, layer_distance_scores
from node.intake.checks import Contributions

log = logging.getLogger(__name__)


def layer_of(name: str) -> str:
    """The layer a tensor belongs to: its module's name (conv1.weight and conv1.bias: conv1)."""
    return name.rsplit(".", 1)[0]


def in_float64(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A model's floating-point tensors in float64, converted once for every peer's
    `layer_distances` from it."""
    return {name: t.to(torch.float64) for name, t in state.items() if t.is_floating_point()}


def layer_distances(own: dict[str, torch.Tensor], peer) -> dict[str, float]:
    """Per layer, the Euclidean distance between two models' floating-point tensors in it
    (`own` may be given `in_float64`, as the screens do)."""
    squares: dict[str, float] = {}
    for name, t in own.items():
        if t.is_floating_point():
            gap = peer[name].to(torch.float64) - t.to(torch.float64)
            squares[layer_of(name)] = squares.get(layer_of(name), 0.0) + float(gap.square().sum())
    return {layer: total ** 0.5 for layer, total in squares.items()}


def screen(algorithm: Algorithm, model: nn.Module, update: Contributions) -> dict[int, Refusal]:
    """The in-neighbours farther from this node's model, in some layer, than the refusal
    bound allows."""
    settings = algorithm.config.aggregation
    bound = settings.distance * settings.distance_refuse
    if settings.distance <= 0 or not update.peers:
        return {}
    own = in_float64({name: t.detach() for name, t in model.state_dict().items()})
    distances = [layer_distances(own, state) for state, _ in update.states[1:]]
    # kept for `clipped`, which measures the peers this round keeps from the same model
    algorithm.layer_distances = dict(zip(update.peers, distances, strict=True))
    scores = layer_distance_scores(distances)
    log.debug("node %d: distance scores %s", algorithm.node_id,
              dict(zip(update.peers, scores, strict=True)))
    return {peer: Refusal(peer, "model and prototypes", "distance",
                          f"in some layer its model is {score:.3g} times as far from this "
                          f"node's as the median in-neighbour's (at most {bound:g})",
                          judged=True)
            for peer, score in zip(update.peers, scores, strict=True) if score > bound}


# The rule named on the record for the part of a pull beyond the bound, left out.
CLIPPED = "distance_clip"


def clipped(algorithm: Algorithm, model: nn.Module, update: Contributions) -> Contributions:
    """`update` with each kept in-neighbour's deviation from this node's model, in a layer
    where it is beyond aggregation.distance times the layer's median, scaled down to it; the
    part left out is on the record (rule CLIPPED), the rest of the update kept."""
    bound = algorithm.config.aggregation.distance
    if bound <= 0 or not update.peers or not update.states:
        return update
    own = {name: t.detach() for name, t in model.state_dict().items()}
    measured = getattr(algorithm, "layer_distances", {})  # by the screen, this round
    own64 = in_float64(own) if any(peer not in measured for peer in update.peers) else {}
    distances = [measured[peer] if peer in measured else layer_distances(own64, state)
                 for peer, (state, _) in zip(update.peers, update.states[1:], strict=True)]
    algorithm.layer_distances = {}
    states, notes = list(update.states), []
    for index, factors in enumerate(layer_clip_factors(distances, bound)):
        if all(f == 1.0 for f in factors.values()):
            continue
        state, weight = states[index + 1]
        states[index + 1] = ({name: (t + factors[layer_of(name)]
                                     * (state[name].to(t.dtype) - t))
                              if t.is_floating_point() else t.clone()
                              for name, t in own.items()}, weight)
        cut = {layer: f for layer, f in factors.items() if f < 1.0}
        notes.append(Refusal(update.peers[index], "model beyond the distance bound", CLIPPED,
                             "its pull cut to " + ", ".join(
                                 f"{f:.0%} in {layer}" for layer, f in sorted(cut.items()))
                             + f" ({bound:g} times the median in-neighbour's)"))
    return Contributions(states, update.prototypes,
                         sorted([*update.refusals, *notes], key=lambda r: r.peer),
                         update.peers, update.claims)
