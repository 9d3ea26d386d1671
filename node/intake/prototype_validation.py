"""Validation on the federation's prototypes: a peer's model is measured by its classifier on
the global prototype of each of the peer's classes that this node holds no sample of (what
the federation agreed on: FLTrust's root set, here the receiver's global prototypes). Where
validation on this node's own samples cannot judge a peer, this still can: a model that
fits its own classes worse than this node's start of round does (a label-flipped, negated or
reversed one) is refused with its prototypes that round: a wrong label fits the federation's
prototype of its class worse than guessing (`bar_of`)."""

from __future__ import annotations

import math

from torch import nn

from node.algorithms.base import Algorithm, Refusal
from node.defences import prototype_class_loss
from node.intake.checks import Contributions
from node.intake.influence import head_prefix, head_state, prototype_losses, root_prototypes
from node.intake.validation import peer_class_weights

RULE = "prototype_validation"


def bar_of(start: float, classes: int) -> float:
    """The loss a peer's classifier may reach on the global prototypes of its classes: the
    start of round's, or a uniform guess's (ln of the classes) where that is higher. Those
    prototypes are last round's, in an embedding space the peer's own round has moved on
    from, so an honest fit there can be a little worse than the start's (on Dirichlet 0.5 a
    bar at the start alone refused 96 honest models in one seed and cost 2.6 points of F1);
    a wrong label is confidently wrong, worse than guessing."""
    return max(start, math.log(classes)) if classes > 1 else start


def screen(algorithm: Algorithm, model: nn.Module, update: Contributions) -> dict[int, Refusal]:
    """The in-neighbours whose classifier fits the global prototypes of their classes this
    node lacks worse than both the model this node began the round with and a uniform guess
    (`bar_of`). Nothing before a global prototype is known (round 1)."""
    if not algorithm.config.aggregation.prototype_validation or not update.peers:
        return {}
    prototypes, known = root_prototypes(algorithm)
    if prototypes is None or known is None or not bool(known.any()):
        return {}
    data = algorithm.data
    held = [n > 0 for n in data.train_y.bincount(minlength=data.num_classes).tolist()]
    prefix = head_prefix(model)
    if prefix is None:
        return {}  # no classifier to measure on the prototypes
    start_head = (None if algorithm.start_state is None
                  else head_state(algorithm.start_state, prefix))
    start_losses = prototype_losses(model, prototypes, known, start_head)
    refused = {}
    for index, peer in enumerate(update.peers):
        claimed = peer_class_weights(algorithm, update, index)
        weights = [0.0 if held[c] else w for c, w in enumerate(claimed)]
        start = prototype_class_loss(start_losses, weights)
        if start is None:
            continue  # no class of the peer's lacked here with a global prototype
        peer_head = head_state(update.states[index + 1][0], prefix)
        loss = prototype_class_loss(prototype_losses(model, prototypes, known, peer_head),
                                    weights)
        bar = bar_of(start, data.num_classes)
        if loss is None or not math.isfinite(loss) or loss > bar:
            refused[peer] = Refusal(
                peer, "model and prototypes", RULE,
                f"its classifier's loss on the global prototypes of its classes this node "
                f"lacks is {loss if loss is None else f'{loss:.3g}'}, more than {bar:.3g} (the "
                f"start of round's, or a uniform guess's where higher)", judged=True)
    return refused
