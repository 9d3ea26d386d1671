"""Validation on this node's own data (the receiver's samples of the peer's classes): a peer
whose model fits them worse than this node's start of round did, by a share of the cut this
node's own round made, is refused with its prototypes that round (node.defences)."""

from __future__ import annotations

import copy
import math

from torch import nn

from node.algorithms.base import Algorithm, Refusal
from node.defences import (
    class_weighted_mean,
    fails_validation,
    loss_to_beat,
    required_factor,
)
from node.intake.checks import Contributions
from node.intake.samples import loss_per_class, own_round_losses, validation_samples


def peer_class_weights(algorithm: Algorithm, update: Contributions,
                       index: int) -> list[float]:
    """The class counts the data plan gives the peer at `index` of `update.peers`; without
    a plan, those its model claims (else the prototypes beside it). A peer that claims no
    class, or says nothing of its classes, is judged on every class alike: a claim of
    nothing must not leave its model unjudged."""
    weights = _class_weights(algorithm, update, index)
    if weights is not None and any(w > 0 for w in weights):
        return weights
    return [1.0] * algorithm.data.num_classes


def _class_weights(algorithm: Algorithm, update: Contributions,
                   index: int) -> list[float] | None:
    peer = update.peers[index]
    plan = algorithm.data.plan if algorithm.config.aggregation.use_plan else None
    if plan is not None and plan.counts_of(peer) is not None:
        return [float(n) for n in plan.counts_of(peer).tolist()]
    # as claimed: bounded counts would tilt it to its rarest classes
    claimed = update.claims.get(peer)
    return None if claimed is None else [float(n) for n in claimed]


def screen(algorithm: Algorithm, model: nn.Module, update: Contributions) -> dict[int, Refusal]:
    """The in-neighbours whose model fails validation on this node's samples of the peer's
    classes (`node.defences.fails_validation` against the model this node began the round
    with, or a uniform guess where that fits better: `node.defences.loss_to_beat`), asking
    for aggregation.validation of the cut this node's own round made
    (`node.defences.required_factor`). A peer none of whose classes this node holds is not
    judged here (the influence screen judges it)."""
    share = algorithm.config.aggregation.validation
    if share <= 0 or not update.peers:
        return {}
    x, y = validation_samples(algorithm, len(update.peers))
    classes, batch = algorithm.data.num_classes, algorithm.config.train.eval_batch_size
    scratch = copy.deepcopy(model)
    if algorithm.start_state is not None:
        scratch.load_state_dict(algorithm.start_state)
    start_sums, total = loss_per_class(scratch, x, y, classes, batch)
    factor = required_factor(*own_round_losses(algorithm, model, scratch), share)
    refused = {}
    for index, peer in enumerate(update.peers):
        weights = peer_class_weights(algorithm, update, index)
        start = class_weighted_mean(start_sums, total, weights)
        if start is None:
            continue  # none of its classes here: not judged here
        start = loss_to_beat(start, classes)
        scratch.load_state_dict(dict(update.states[index + 1][0]))
        loss = class_weighted_mean(loss_per_class(scratch, x, y, classes, batch)[0], total,
                                   weights)
        if not math.isfinite(loss) or fails_validation(loss, start, factor):
            refused[peer] = Refusal(peer, "model and prototypes", "validation",
                                    f"its model's loss on this node's samples of its classes "
                                    f"is {loss:.3g}, more than {factor:.3g} x {start:.3g} (the "
                                    f"start of round's, or a uniform guess's where lower)",
                                    judged=True)
    return refused
