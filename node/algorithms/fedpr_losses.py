"""Loss of FedPR (Qiao, Le and Hong, "Boosting Federated Learning Convergence with Prototype
Regularization"), as pure functions of tensors.

Local objective, Eq. (4):

    L_i(w_i) = L_i(F(w; x_i), y_i) + l2(f_e(w_e; x_i) - y_bar_j)

"where ... l2(f_e(w_e; x_i) - y_bar_j) calculates the l2 distance between the local
representation and the corresponding global prototype". We read l2 as the Euclidean norm
(not squared) per sample, averaged over the samples whose class has a global prototype. Eq.
(4) has no weight on the term, so PROTOTYPE_WEIGHT = 1.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from node.algorithms.losses import cross_entropy

PROTOTYPE_WEIGHT = 1.0  # Eq. (4): the distance term enters unweighted


def prototype_l2(embeddings: torch.Tensor, labels: torch.Tensor,
                 global_prototypes: torch.Tensor, known: torch.Tensor,
                 squared: bool = False, normalized: bool = False) -> torch.Tensor:
    """Mean over samples of ||f_e(x) - y_bar(y)||_2, skipping classes without a prototype
    (`squared`: its square; `normalized`: between both scaled to unit length).

    At a zero distance the gradient is 0 (torch's subgradient of the norm), never NaN.
    """
    mask = known[labels]
    if not bool(mask.any()):
        return embeddings.new_zeros(())
    own = embeddings[mask]
    target = global_prototypes[labels[mask]].to(embeddings.dtype)
    if normalized:
        own, target = F.normalize(own, dim=1), F.normalize(target, dim=1)
    distance = torch.linalg.vector_norm(own - target, dim=1)
    return (distance.square() if squared else distance).mean()


def fedpr_loss(logits: torch.Tensor, embeddings: torch.Tensor, labels: torch.Tensor,
               global_prototypes: torch.Tensor, known: torch.Tensor,
               weight: float, squared: bool = False,
               normalized: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(L, CE, D) with L = CE(logits, y) + weight * mean_x ||f_e(x) - y_bar(y)||_2 (Eq. 4);
    `squared` and `normalized` as in prototype_l2."""
    ce = cross_entropy(logits, labels)
    distance = prototype_l2(embeddings, labels, global_prototypes, known, squared, normalized)
    return ce + weight * distance, ce, distance
