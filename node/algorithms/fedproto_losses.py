"""Loss of FedProto (Tan et al., AAAI 2022, "FedProto: Federated Prototype Learning across
Heterogeneous Clients"), as pure functions of tensors.

Local objective (Methodology, "Local Model Update"):

    L(D_i, w_i) = L_S(F_i(w_i; x), y) + lambda * L_R(C_bar_i, C_i)

with L_S the cross-entropy and L_R "the distance (we use L2 distance)" between the
embedding f_i(phi_i; x) and the global prototype of its label; the convergence appendix
writes the per-sample term as lambda * ||f_i(phi_i; x) - C_bar||_2^2. We use the mean
squared error (the squared L2 distance divided by the embedding dimension, averaged over
the samples whose class has a global prototype), i.e. ``node.algorithms.losses.prototype_mse``; the
value of lambda the paper reports was tuned for an MSE-style term.
"""

from __future__ import annotations

import torch

from node.algorithms.losses import cross_entropy, prototype_mse

# lambda, "the importance weight" (Appendix, implementation details): "The best lambda values
# for MNIST, FEMNIST and CIFAR10 are 1, 1 and 0.1". Fashion-MNIST (not in the paper) takes
# the MNIST/FEMNIST value, CIFAR-100 (not in the paper) the CIFAR-10 value.
LAMBDA_BY_DATASET = {"mnist": 1.0, "fashion_mnist": 1.0, "cifar10": 0.1, "cifar100": 0.1}
DEFAULT_LAMBDA = 1.0


def paper_lambda(dataset: str) -> float:
    """The paper's lambda for a dataset (DEFAULT_LAMBDA for one it does not report)."""
    return LAMBDA_BY_DATASET.get(dataset, DEFAULT_LAMBDA)


def fedproto_loss(logits: torch.Tensor, embeddings: torch.Tensor, labels: torch.Tensor,
                  global_prototypes: torch.Tensor, known: torch.Tensor,
                  lam: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(L, L_S, L_R) with L = CE(logits, y) + lam * MSE(f(x), C_bar(y)).

    Samples whose class has no global prototype (``known[y]`` false) add no L_R; before any
    global prototype exists L_R is 0 and L is the plain cross-entropy.
    """
    ce = cross_entropy(logits, labels)
    reg = prototype_mse(embeddings, labels, global_prototypes, known)
    return ce + lam * reg, ce, reg
