"""Prototypes under the wrong label (aggregation.prototype_classes): each class's prototype a
peer sends must lie nearer this node's global prototype of that class than any other
class's (node.defences.misplaced_classes); a row that does not is taken out (its count set
to 0) and named. A label-flipped sender's prototype of class c is an embedding of another
class; without a data plan what a peer's prototypes claim is also what it is validated on,
so a misplaced claim would otherwise choose its own judge."""

from __future__ import annotations

import torch

from node.algorithms.base import Algorithm, Refusal
from node.defences import misplaced_classes
from node.intake.checks import Contributions
from node.intake.influence import root_prototypes

RULE = "prototype_class"


def distances_to(rows: torch.Tensor, counts: torch.Tensor, reference: torch.Tensor,
                 known: torch.Tensor) -> dict[int, dict[int, float]]:
    """Per class sent (count > 0, reference known), its distance to every known reference."""
    known_classes = [c for c in range(len(known)) if bool(known[c])]
    gaps = torch.cdist(rows.to(torch.float64), reference.to(torch.float64).cpu())
    return {c: {k: float(gaps[c, k]) for k in known_classes}
            for c in known_classes if int(counts[c]) > 0}


def screened(algorithm: Algorithm, update: Contributions) -> Contributions:
    """`update` with every in-neighbour's misplaced prototype rows taken out and named."""
    if not algorithm.config.aggregation.prototype_classes or not update.prototypes:
        return update
    reference, known = root_prototypes(algorithm)
    if reference is None or known is None or int(known.sum()) < 2:
        return update  # no global prototypes yet (round 1)
    known = known.cpu()
    prototypes, refusals = list(update.prototypes), list(update.refusals)
    for index, peer in enumerate(update.peers):
        rows, counts = prototypes[index + 1]
        misplaced = misplaced_classes(distances_to(rows, counts, reference, known))
        if not misplaced:
            continue
        counts = counts.clone()
        counts[misplaced] = 0
        prototypes[index + 1] = (rows, counts)
        refusals += [Refusal(peer, f"prototype of class {c}", RULE,
                             "it lies nearer another class's global prototype than its own")
                     for c in misplaced]
    return Contributions(update.states, prototypes, sorted(refusals, key=lambda r: r.peer),
                         update.peers)
