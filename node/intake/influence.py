"""Influence on the classes this node holds none of: each in-neighbour's model averaged with
this node's own alone, at their weights, and measured by its classifier on the global
prototype of each such class (what the federation agreed on: FLTrust's root set, held by the
receiver). A neighbour whose mix raises one such class's loss far beyond what the other
in-neighbours' mixes do is refused (node.defences.class_excess_scores): it needs no class in
common with the sender and no data plan. The classes this node holds are judged by
validation (node.intake.validation) and, where it is on, by node.intake.held_influence: on
them every honest neighbour of other classes raises the loss, by amounts too varied early
in training for this screen's fixed margin, so that one's bar follows the others' spread."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from node.algorithms.base import Algorithm, Refusal
from node.defences import class_excess_scores, mixing_share
from node.intake.checks import Contributions

log = logging.getLogger(__name__)

def mixed(own: Mapping[str, torch.Tensor], peer: Mapping[str, torch.Tensor],
          share: float) -> dict[str, torch.Tensor]:
    """own + share x (peer - own) in every floating-point tensor (others: own's)."""
    return {name: (t + share * (peer[name].to(t.dtype) - t)) if t.is_floating_point()
            else t.clone() for name, t in own.items()}


def head_prefix(model: nn.Module) -> str | None:
    """The state-dict prefix of `model`'s `classifier` ("classifier."), None without one."""
    head = getattr(model, "classifier", None)
    return next((f"{name}." for name, module in model.named_modules() if module is head),
                None) if head is not None else None


def head_state(state: Mapping[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The classifier's tensors of a whole model's state, named as the classifier names them
    (only they are read: a received model decodes each tensor it is asked for)."""
    return {name[len(prefix):]: state[name] for name in state if name.startswith(prefix)}


@torch.no_grad()
def prototype_losses(model: nn.Module, prototypes: torch.Tensor | None,
                     known: torch.Tensor | None,
                     head_tensors: Mapping[str, torch.Tensor] | None = None
                     ) -> list[float | None]:
    """Per class, the cross-entropy of `model`'s classifier on the class's prototype (None
    for a class without one, or a model without a `classifier`); with `head_tensors`, the
    classifier computes with those instead of its own (`head_state` of another model): the
    screens judge a peer's classifier without loading the peer's whole model."""
    head = getattr(model, "classifier", None)
    if prototypes is None or known is None or head is None or not bool(known.any()):
        classes = 0 if known is None else len(known)
        return [None] * classes
    weight = next(head.parameters())
    inputs = prototypes.to(weight.device, weight.dtype)
    if head_tensors is None:
        logits = head(inputs)
    else:
        logits = torch.func.functional_call(
            head, {name: t.to(weight.device, weight.dtype) for name, t in head_tensors.items()},
            (inputs,))
    logits = logits.double().cpu()
    labels = torch.arange(len(known))
    losses = torch.nn.functional.cross_entropy(logits, labels, reduction="none").tolist()
    return [loss if bool(k) else None for loss, k in zip(losses, known.cpu(), strict=True)]


def class_losses(model: nn.Module, y: torch.Tensor, num_classes: int,
                 prototypes: torch.Tensor | None, known: torch.Tensor | None,
                 head_tensors: Mapping[str, torch.Tensor] | None = None
                 ) -> list[float | None]:
    """Per class this node holds no sample of (`y`: its samples' labels), `model`'s loss on
    the class's global prototype (with `head_tensors`: see `prototype_losses`); None for a
    class held here (validation's to judge) or without a prototype. Non-finite losses read
    as inf."""
    held = torch.bincount(y.cpu(), minlength=num_classes) > 0
    on_prototypes = (prototype_losses(model, prototypes, known, head_tensors)
                     or [None] * num_classes)
    out: list[float | None] = []
    for c in range(num_classes):
        value = None if bool(held[c]) or c >= len(on_prototypes) else on_prototypes[c]
        out.append(value if value is None or math.isfinite(value) else math.inf)
    return out


def excess(losses: Sequence[float | None], base: Sequence[float | None]) -> list[float | None]:
    """`losses` minus `base` per class, None where either is missing."""
    return [None if a is None or b is None else a - b for a, b in zip(losses, base, strict=True)]


def root_prototypes(algorithm: Algorithm) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The global prototypes this node knows and which classes they cover (None, None for
    an algorithm without prototypes)."""
    return getattr(algorithm, "global_prototypes", None), getattr(algorithm, "known", None)


def screen(algorithm: Algorithm, model: nn.Module, update: Contributions) -> dict[int, Refusal]:
    """The in-neighbours whose mix with this node's model raises the loss on one of the
    classes it lacks more than aggregation.influence (nats) beyond that class's reference,
    the median over every in-neighbour's mix and its own model's."""
    margin = algorithm.config.aggregation.influence
    if margin <= 0 or not update.peers:
        return {}
    data = algorithm.data
    y = data.train_y
    prototypes, known = root_prototypes(algorithm)
    if prototypes is None or known is None or not bool(known.any()):
        return {}  # no global prototype yet (round 1), or an algorithm without them
    prefix = head_prefix(model)
    if prefix is None:
        return {}  # nothing to measure the prototypes with
    # only the classifier meets the prototypes: the mix of the rest would change nothing
    own_head = head_state({name: t.detach() for name, t in model.state_dict().items()},
                          prefix)
    own_weight = float(update.states[0][1])
    base = class_losses(model, y, data.num_classes, prototypes, known)
    rows = []
    for index in range(len(update.peers)):
        state, weight = update.states[index + 1]
        mix = mixed(own_head, head_state(state, prefix), mixing_share(own_weight, float(weight)))
        rows.append(excess(class_losses(model, y, data.num_classes, prototypes, known, mix),
                           base))
    scores = class_excess_scores(rows)
    log.debug("node %d: influence scores %s", algorithm.node_id,
              dict(zip(update.peers, scores, strict=True)))
    if log.isEnabledFor(logging.DEBUG):  # the rows are built only for a reader
        log.debug("node %d: influence rows %s held %s", algorithm.node_id,
                  {p: [None if v is None else round(v, 2) for v in row]
                   for p, row in zip(update.peers, rows, strict=True)},
                  [int(c) for c in torch.bincount(y.cpu(), minlength=data.num_classes)])
    refused = {}
    for peer, score in zip(update.peers, scores, strict=True):
        if score is not None and score > margin:
            refused[peer] = Refusal(
                peer, "model and prototypes", "influence",
                f"averaged with this node's model it raises the loss on the prototype of a "
                f"class this node lacks {score:.3g} nats beyond the class's median "
                f"in-neighbour (at most {margin:g})", judged=True)
    return refused
