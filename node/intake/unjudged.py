"""What no check could judge is held back: with prototype validation on, a peer's model that
neither validation (no class in common with this node, or its classes unknown) nor
prototype validation (no global prototype of its classes yet: round 1) can measure is not
averaged this round; its prototypes are kept, so that the next round knows its classes and
their global prototypes and can judge it. An unmeasured model is exactly where an attacker
goes: a label-flipped model let through in round 1 alone cost the honest nodes of a
20%-classes federation up to 5.6 points of F1."""

from __future__ import annotations

from collections.abc import Mapping

from torch import nn

from node.algorithms.base import Algorithm, Refusal
from node.intake import prototype_validation, validation
from node.intake.checks import Contributions

RULE = "unjudged"


def screen(algorithm: Algorithm, model: nn.Module, update: Contributions) -> dict[int, Refusal]:
    """The in-neighbours whose model no screen here can judge this round, held back (their
    prototypes kept)."""
    if not algorithm.config.aggregation.prototype_validation:
        return {}
    held_back = {}
    for index, peer in enumerate(update.peers):
        weights = validation.peer_class_weights(algorithm, update, index)
        if not (validation.judges(algorithm, weights)
                or prototype_validation.judges(algorithm, weights)):
            held_back[peer] = Refusal(
                peer, "model", RULE,
                "no check here can judge it this round (its classes unknown, none of them "
                "held here and no global prototype of them yet): held back, its prototypes "
                "kept")
    return held_back


def held_back(update: Contributions, held: Mapping[int, Refusal]) -> Contributions:
    """`update` with the models of the peers in `held` replaced by this node's own at weight
    0 (no pull under any rule's weights; a copy of this node's own where a rule ignores
    them), their prototypes kept and their refusals on the record."""
    if not held:
        return update
    own = update.states[0][0] if update.states else None
    states = list(update.states)
    for index, peer in enumerate(update.peers):
        if peer in held and own is not None:
            states[index + 1] = (own, 0)
    return Contributions(states, update.prototypes,
                         sorted([*update.refusals, *held.values()], key=lambda r: r.peer),
                         update.peers)
