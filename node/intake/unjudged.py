"""The models no screen could judge: a peer that claims no class this node holds (validation
measures nothing) while no global prototype of a class this node lacks is known yet (round
1: the influence and prototype screens measure nothing). Such a model is left out of this
round's mix under aggregation.unjudged = "hold": what no check could measure is exactly
where an attacker goes (on 20% of the classes a sender of a shifted classifier reached
every node in round 1). Its prototypes, norm-bounded, are kept, so the next round has the
global prototypes that judge it."""

from __future__ import annotations

from torch import nn

from node.algorithms.base import Algorithm, Refusal
from node.intake.checks import Contributions
from node.intake.influence import root_prototypes
from node.intake.validation import peer_class_weights

RULE = "unjudged"


def held_classes(algorithm: Algorithm) -> list[bool]:
    """Per class, whether this node holds a training sample of it."""
    data = algorithm.data
    return [n > 0 for n in data.train_y.bincount(minlength=data.num_classes).tolist()]


def prototypes_judge(settings, known: list[bool], held: list[bool]) -> bool:
    """Whether the prototype screens measure every peer this round: one is on and a global
    prototype of a class this node lacks is known."""
    on = settings.influence > 0 or settings.prototype_validation
    return on and any(k and not h for k, h in zip(known, held, strict=True))


def validation_judges(settings, weights: list[float], held: list[bool]) -> bool:
    """Whether validation measures a peer claiming class counts `weights`: it is on and
    the peer claims a class this node holds."""
    return settings.validation > 0 and any(w > 0 and h for w, h in zip(weights, held,
                                                                        strict=True))


def screen(algorithm: Algorithm, model: nn.Module, update: Contributions) -> dict[int, Refusal]:
    """The in-neighbours whose model neither validation nor a prototype screen can judge this
    round, refused (the model only) under aggregation.unjudged = "hold" where validation is
    on (without it every model is judged by nothing here, by choice). An algorithm without
    prototypes has no screen for a peer of other classes in any round: its models are kept
    (the norm bound and the distance clip bound them), as docs/security.md says."""
    settings = algorithm.config.aggregation
    if settings.unjudged != "hold" or settings.validation <= 0 or not update.peers:
        return {}
    _, known = root_prototypes(algorithm)
    if known is None:
        return {}
    held = held_classes(algorithm)
    if prototypes_judge(settings, [bool(k) for k in known.tolist()], held):
        return {}
    refused = {}
    for index, peer in enumerate(update.peers):
        if validation_judges(settings, peer_class_weights(algorithm, update, index), held):
            continue
        refused[peer] = Refusal(
            peer, "model", RULE,
            "no screen could judge its model this round (it claims no class this node "
            "holds, and no global prototype of a class this node lacks is known yet): left "
            "out of this round's mix, its prototypes kept")
    return refused
