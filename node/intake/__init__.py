"""What a node does with its in-neighbours' updates before it combines them: how many are
judged a round (`drawn`: the runtime leaves the undrawn out before any of this), the checks
every message passes (`checks`), the weight each carries (`weights`: the data plan's, or
bounded claims), the norm bounds (`norms`), then the screens that judge a model by what it
does on this node's own data, one module each behind one interface (`Screen`):
`distance` (per layer, against the median in-neighbour's; what it keeps is clipped to the
bound), `validation` (on the receiver's samples of the peer's classes), `held_influence` (a
peer's mix on the receiver's samples of every class it holds, against the other
in-neighbours'), `influence` (on the global prototypes of the classes this node lacks,
against the other in-neighbours'), `unjudged` (a model none of them could judge, held
out of the round) and, last, `witnesses` (the peers the others refused in each of their
last two rounds: this node's own judgement of a peer comes first and is what it passes on).
What is refused is named in the node's record; nothing a peer sends can stop the round."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import torch
from torch import nn

from node.aggregation import aggregate_states, reputation_aggregate, state_norm
from node.algorithms.base import Algorithm, DataPlan, Payload, Refusal
from node.defences import CLAIM_FACTOR
from node.intake import (
    distance,
    held_influence,
    influence,
    prototype_validation,
    unjudged,
    validation,
    witnesses,
)
from node.intake.checks import (
    MAX_SAMPLES,
    Contributions,
    checked_class_claim,
    checked_prototypes,
    checked_state,
    each_or_refused,
    keeps_decoded,
    own_prototypes,
    require_kind,
    state_bytes,
    without_peers,
)
from node.intake.norms import models_within_bound, prototypes_within_norms
from node.intake.weights import claimed, planned

__all__ = ["MAX_SAMPLES", "SCREENS", "Contributions", "combined_state", "gather", "gathered",
           "screened"]

log = logging.getLogger(__name__)

# A screen: (algorithm, its travelling model trained this round, the gathered update) ->
# the peers it refuses, each with why. Each sees only the peers the screens before it kept.
Screen = Callable[[Algorithm, nn.Module, Contributions], dict[int, Refusal]]
SCREENS: dict[str, Screen] = {"distance": distance.screen, "validation": validation.screen,
                              "held_influence": held_influence.screen,
                              "prototype_validation": prototype_validation.screen,
                              "influence": influence.screen, "unjudged": unjudged.screen,
                              "witnesses": witnesses.screen}


def plan_of(algorithm: Algorithm) -> DataPlan | None:
    """The data plan this node weighs its peers by: None where it ignores the plan
    (aggregation.use_plan = false) or has none."""
    return algorithm.data.plan if algorithm.config.aggregation.use_plan else None


def gather(own: Mapping[str, Payload], received: Mapping[int, Mapping[str, Payload]],
           node_id: int, num_classes: int = 0, dim: int = 0,
           plan: DataPlan | None = None, norm_bound: float = 0.0,
           claim_cap: float = CLAIM_FACTOR, norm_floor: float = 0.0,
           names: bool = False) -> Contributions:
    """Check every peer's update against this node's own; a bad one is left out and named.

    The model is checked when `own` has a "model" payload, the prototypes (expanded to
    [num_classes, dim]) when it has a "prototypes" one. With a data `plan`, a peer's model
    weighs what the plan gives it and its prototypes count only the classes the plan gives
    it, whatever it claims: one peer cannot outweigh the others by claiming more. A model
    with a norm beyond `norm_bound` times the reference (`norm_reference`) is refused, and
    so is each prototype below `norm_floor` or beyond `norm_bound` (`prototypes_within_norms`).
    With `names`, the peers each model names as refused are read too (`node.intake.witnesses`).
    """
    with_model, with_prototypes = "model" in own, "prototypes" in own
    reference = own["model"].tensors if with_model else {}
    states = [(dict(reference), own["model"].meta["samples"])] if with_model else []
    prototypes = [own_prototypes(own["prototypes"], num_classes, dim, node_id)
                  ] if with_prototypes else []
    # the class counts a peer's model may claim: as many as this node's own model claims
    classes = (num_classes or len(own["model"].meta.get("classes", ()))) if with_model else 0
    model_claims: dict[int, list[int]] = {}
    named: dict[int, frozenset[int]] = {}
    keep_decoded = keeps_decoded(len(received), state_bytes(reference))

    def check(peer: int, update: Mapping[str, Payload]) -> tuple:
        model = (checked_state(reference, require_kind(update, "model"), keep_decoded)
                 if with_model else None)
        if model is not None:
            claim = checked_class_claim(update["model"], model[1], classes)
            model_claims.update({} if claim is None else {peer: claim})
            named.update({peer: witnesses.checked_names(update["model"])} if names else {})
        protos = (checked_prototypes(require_kind(update, "prototypes"), num_classes, dim)
                  if with_prototypes else None)
        state, protos = planned(peer, model and model[:2], protos, plan, node_id)
        return state, protos, model and model[2]

    refusals: list[Refusal] = []
    checked = dict(each_or_refused(received, check, node_id, refusals))
    claims = {} if plan is not None else classes_claimed(checked, model_claims)
    if plan is None:
        checked = claimed(states[0][1] if with_model else None,
                          prototypes[0][1] if with_prototypes else None, checked, claim_cap)
    kept = dict(each_or_refused(checked, models_within_bound(state_norm(reference), checked,
                                                               norm_bound),
                                  node_id, refusals, rule="norm_bound", what="model"))
    if with_prototypes:
        kept, rows = prototypes_within_norms(prototypes[0], kept, norm_bound, norm_floor)
        refusals += rows
    states += [state for state, _ in kept.values()] if with_model else []  # in peer order
    prototypes += [protos for _, protos in kept.values()] if with_prototypes else []
    for refusal in refusals:
        log.warning("node %d: %s of peer %d refused (%s): %s", node_id, refusal.what,
                    refusal.peer, refusal.rule, refusal.reason)
    return Contributions(states, prototypes, sorted(refusals, key=lambda r: r.peer),
                         list(kept), {peer: claims[peer] for peer in kept if peer in claims},
                         {peer: named[peer] for peer in kept if peer in named})


def gathered(algorithm: Algorithm, own: Mapping[str, Payload],
             received: Mapping[int, Mapping[str, Payload]], num_classes: int = 0,
             dim: int = 0) -> Contributions:
    """`gather` with the algorithm's node, data plan (`plan_of`), norm bound, norm floor,
    claim cap and whether it reads the peers' refusals (aggregation.witnesses)."""
    settings = algorithm.config.aggregation
    return gather(own, received, algorithm.node_id, num_classes, dim, plan=plan_of(algorithm),
                  norm_bound=settings.norm_bound, claim_cap=settings.claim_cap,
                  norm_floor=settings.norm_floor, names=settings.witnesses > 0)


def classes_claimed(checked: Mapping[int, tuple],
                    model_claims: Mapping[int, list[int]]) -> dict[int, list[int]]:
    """Each checked peer's class counts as it claims them (without a plan): its model's
    where it says, else those of the prototypes beside it; peers that claim none left out."""
    return {peer: (model_claims[peer] if peer in model_claims else update[1][1].tolist())
            for peer, update in checked.items()
            if peer in model_claims or update[1] is not None}


def screened(algorithm: Algorithm, model: nn.Module | None,
             update: Contributions) -> Contributions:
    """`update` less the in-neighbours some screen refuses (SCREENS, in order) and, in a
    later prototype step of the same round (`model` None), less the prototypes of those
    whose model was refused this round. A hub's update is its clients' server's model:
    they take it unjudged (its intake checks and norm bound still apply)."""
    if algorithm.config.topology.hub in update.peers:
        return update
    if model is None:
        refused = {peer: Refusal(peer, "prototypes", rule,
                                 f"its model was refused this round ({rule})")
                   for peer, rule in algorithm.distrusted.items() if peer in update.peers}
        return without_peers(update, refused)
    refused: dict[int, Refusal] = {}
    for name, screen in SCREENS.items():
        with algorithm.profile.phase(name):
            refused |= screen(algorithm, model, without_peers(update, refused))
    for refusal in refused.values():
        log.warning("node %d: %s of peer %d refused (%s): %s", algorithm.node_id,
                    refusal.what, refusal.peer, refusal.rule, refusal.reason)
    # a model held out unjudged keeps its prototypes: the next round judges it by them
    algorithm.distrusted = {peer: refusal.rule for peer, refusal in refused.items()
                            if refusal.what != "model"}
    # what it keeps, each layer's pull bounded against the kept in-neighbours' median
    with algorithm.profile.phase("distance"):
        return distance.clipped(algorithm, model, without_peers(update, refused))


def combined_state(algorithm: Algorithm, update: Contributions) -> dict[str, torch.Tensor]:
    """The gathered models combined under the configured rule; "reputation" also carries
    the algorithm's trust in its neighbours on to the next round."""
    settings = algorithm.config.aggregation
    if not sum(weight for _, weight in update.states) > 0:
        return dict(update.states[0][0])  # a node without samples, every peer refused
    if settings.rule == "reputation":
        state, algorithm.trust = reputation_aggregate(update.states, update.peers,
                                                      algorithm.trust, settings.trust_memory)
        return state
    return aggregate_states(update.states, **settings.kwargs())
