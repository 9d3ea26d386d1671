"""Influence on the classes this node holds: each in-neighbour's whole model averaged with
this node's own alone, at their weights, and measured per class on this node's own samples
(its only ground truth). Validation judges a peer on the peer's claimed classes alone, so a
model that fits its claimed classes and pushes every other class down (a classifier lifted
on its classes, a label flipper claiming the classes it maps to) passes it; mixed into this
node's model it raises the loss on this node's classes far beyond what the other
in-neighbours' mixes do. Honest mixes of other classes raise that loss too, by amounts that
vary a great deal early in training and little once the federation agrees, so the bar is
relative: `node.defences.spread_bar` over the in-neighbours' scores, at most
aggregation.held_influence nats. Honest holders of a class confusable with one of this
node's raise it alike, and once the federation agrees they rise above that bar together:
with aggregation.held_mates such a shared score is kept (`node.defences.shared_with_mates`)."""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Mapping

import torch
from torch import nn

from node.algorithms.base import Algorithm, Refusal
from node.defences import class_excess_scores, mixing_share, shared_with_mates, spread_bar
from node.intake.checks import Contributions
from node.intake.influence import excess, head_prefix, head_state, mixed
from node.intake.samples import loss_per_class, validation_samples
from node.intake.validation import peer_class_weights

log = logging.getLogger(__name__)

RULE = "held_influence"


def class_means(sums: list[float], total: list[int]) -> list[float | None]:
    """Per class, the mean of summed losses over its samples; None for a class without one.
    Non-finite means read as inf."""
    means = [None if n == 0 else s / n for s, n in zip(sums, total, strict=True)]
    return [m if m is None or math.isfinite(m) else math.inf for m in means]


def held_class_losses(model: nn.Module, x: torch.Tensor, y: torch.Tensor, num_classes: int,
                      batch: int) -> list[float | None]:
    """Per class, `model`'s mean loss on the samples of it in `x`, `y` (`class_means`)."""
    return class_means(*loss_per_class(model, x, y, num_classes, batch))


def head_class_losses(model: nn.Module, embeddings: torch.Tensor, y: torch.Tensor,
                      num_classes: int, head: Mapping[str, torch.Tensor]) -> list[float | None]:
    """Per class, the mean loss of `model`'s classifier computing with `head` (`head_state`
    of a model) on `embeddings`, the samples' embeddings (`class_means`)."""
    logits = torch.func.functional_call(model.classifier, dict(head), (embeddings,)).double()
    losses = torch.nn.functional.cross_entropy(logits, y, reduction="none").cpu()
    sums = torch.zeros(num_classes, dtype=torch.float64).index_add_(0, y.cpu(), losses)
    return class_means(sums.tolist(), torch.bincount(y.cpu(), minlength=num_classes).tolist())


def excess_rows(algorithm: Algorithm, model: nn.Module,
                update: Contributions) -> list[list[float | None]]:
    """Per in-neighbour, its model mixed with this node's at their weights: the loss on this
    node's samples of each class it holds beyond this node's own model's (aggregation.held_mix:
    the whole models mixed, or the classifiers alone on this node's embeddings)."""
    x, y = validation_samples(algorithm, len(update.peers))
    own = {name: t.detach() for name, t in model.state_dict().items()}
    own_weight = float(update.states[0][1])
    mixes = [(state, mixing_share(own_weight, float(weight)))
             for state, weight in update.states[1:]]
    prefix = head_prefix(model) if algorithm.config.aggregation.held_mix == "head" else None
    if prefix is not None:
        return _head_rows(algorithm, model, x, y, head_state(own, prefix), prefix, mixes)
    classes, batch = algorithm.data.num_classes, algorithm.config.train.eval_batch_size
    scratch = copy.deepcopy(model)  # the node's own model is left as training has it
    base = held_class_losses(scratch, x, y, classes, batch)
    rows = []
    for state, share in mixes:
        scratch.load_state_dict(mixed(own, state, share))
        rows.append(excess(held_class_losses(scratch, x, y, classes, batch), base))
    return rows


def _head_rows(algorithm: Algorithm, model: nn.Module, x: torch.Tensor, y: torch.Tensor,
               own_head: dict[str, torch.Tensor], prefix: str,
               mixes: list[tuple[Mapping[str, torch.Tensor], float]]
               ) -> list[list[float | None]]:
    """`excess_rows` with the classifiers alone mixed, on this node's embeddings of `x`: one
    forward pass however many in-neighbours."""
    classes, batch = algorithm.data.num_classes, algorithm.config.train.eval_batch_size
    model.eval()  # as loss_per_class: no batch statistics moved (training sets its mode)
    embeddings = torch.cat([model(x[i:i + batch])[1] for i in range(0, len(x), batch)])
    base = head_class_losses(model, embeddings, y, classes, own_head)
    return [excess(head_class_losses(model, embeddings, y, classes,
                                     mixed(own_head, head_state(state, prefix), share)), base)
            for state, share in mixes]


@torch.no_grad()
def screen(algorithm: Algorithm, model: nn.Module, update: Contributions) -> dict[int, Refusal]:
    """The in-neighbours whose mix with this node's model raises the loss on one of this
    node's classes beyond `spread_bar` of the others' scores (each score: the excess over
    the class's median in-neighbour, `node.defences.class_excess_scores`)."""
    margin = algorithm.config.aggregation.held_influence
    if margin <= 0 or not update.peers:
        return {}
    rows = excess_rows(algorithm, model, update)
    scores = class_excess_scores(rows)
    bar = spread_bar(scores, margin, algorithm.config.aggregation.held_floor)
    kept: set[int] = set()
    if algorithm.config.aggregation.held_mates:
        claimed = [{c for c, w in enumerate(peer_class_weights(algorithm, update, i)) if w > 0}
                   for i in range(len(update.peers))]
        kept = {update.peers[i] for i in shared_with_mates(scores, claimed, bar)}
    log.debug("node %d: held-class influence scores %s, bar %.3g, kept as their class-mates' "
              "%s", algorithm.node_id, dict(zip(update.peers, scores, strict=True)), bar,
              sorted(kept))
    return {peer: Refusal(peer, "model and prototypes", RULE,
                          f"averaged with this node's model it raises the loss on this "
                          f"node's samples of a class {score:.3g} nats beyond the class's "
                          f"median in-neighbour (at most {bar:.3g}: the others' spread, "
                          f"at most {margin:g})", judged=True)
            for peer, score in zip(update.peers, scores, strict=True)
            if score is not None and score > bar and peer not in kept}
