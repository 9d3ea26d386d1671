"""FedHP: federated learning with hyperspherical prototypical regularisation (Fonio et al.,
paper 001, section 2).

Each node trains a backbone f(x; theta) (the teacher-role model up to its embedding,
z = model(x)[1]; its classifier is dropped) together with learnable class prototypes
Pi = {pi_j} in R^d (d = the embedding dimension). Only the prototypes travel.

- Eq. (3), uniform hyperspherical initialisation:
      L_U(Pi) = (1/C) sum_i max_j M_ij,   M = P P^T - 2I,   ||P_i|| = 1,
  i.e. the mean over classes of the largest cosine similarity to another prototype. The
  minimiser becomes the fixed anchors pi_bar and the prototypes' starting value.
- Eq. (2), distance-based cross-entropy:
      L_D = (1/N) sum_i -log( exp(-d(z_i, pi_{y_i})) / sum_j exp(-d(z_i, pi_j)) ),
  d the Euclidean distance (averaged over each mini-batch).
- Eq. (4), anchor regulariser:  L_H = sum_j (1 - cos(pi_bar_j, pi_j)).
- Eq. (1), local objective:  L = L_D + lambda * L_H,  lambda = 0.1 ("The parameter lambda
  in (1) is set to 0.1").
- Optimisers (section 3): "SGD, a learning rate of 0.01, a momentum of 0.9, and weight decay
  set to 10^-4 for parameters theta and Adam with learning rate 0.005 for the prototypes".
  The SGD lr and momentum come from [train]; the weight decay ([fedhp] weight_decay), Adam's
  lr ([fedhp] prototype_lr) and lambda ([fedhp] weight) default to the paper's values. Both
  optimisers live for the run.
- Eq. (5), aggregation, and replacement: "each client substitutes its local prototypes with
  the received ones".
- Prediction: the nearest prototype in Euclidean distance, i.e. the argmax of Eq. (2)'s
  softmax.

Choices and deviations:
- The prototypes' space: the model's embedding layer (`model.embed`, ReLU), the space every
  method here shares; `[fedhp] space = "features"` drops that layer and puts them in the
  features it reads, as the paper's MNIST setting does ("The latent embedding dimension ...
  is 1024 for MNIST": FedAvg's CNN's flattened convolution features).
- Serverless initialisation: the paper computes the initial prototypes on the server and
  broadcasts them. Here every node computes them itself from ``config.seed`` alone
  (`hyperspherical_prototypes`): a seeded CPU torch.Generator draws a Gaussian start, and a
  fixed number of projected gradient steps on the sphere (HYPERSPHERE_STEPS, step size
  HYPERSPHERE_LR decaying linearly to 0, momentum HYPERSPHERE_MOMENTUM; the paper gives no
  optimiser for Eq. 3, these are ours) minimise L_U, in float64 on one thread and with an
  element-wise Gram matrix (no BLAS), so every process on the machine gets bit-identical
  anchors. The result is cast to float32. For C <= d + 1 the optimum is the regular
  simplex, L_U = -1/(C - 1); 1000 steps reach about -0.1108 of -0.1111 for C = 10.
- Serverless aggregation: each node aggregates its own prototypes with its in-neighbours'
  (a star with `topology.hub` is the paper's server: the hub aggregates the drawn clients'
  and sends the result, `served_payload`, to the clients drawn next and, in the last
  round, to all).
  Eq. (5) as printed, (1/K_t) sum_i (N_i^j / N_i) pi_i^j, has weights that do not sum to
  one and would shrink the prototypes; we use the normalised count-weighted mean
  sum_i N_i^j pi_i^j / sum_i N_i^j (`aggregate_prototypes`), which is the stated intent
  ("weighting their contribution according to the number of examples of each class").
  A node sends only the rows of classes it has samples of (with their counts); classes no
  contributor has keep the node's local prototype.
- The paper's final personalisation step (one last local fit after the last round) is
  `train.final_fit`, off by default.
- The backbone's initial weights are the same on every node (seeded by ``config.seed``),
  as in the rest of protofed; the backbone itself never leaves the node.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from node.aggregation import aggregate_prototypes, class_totals, nearest_prototype
from node.algorithms.base import PROTOTYPE, Algorithm, NodeData, Payload, Refusal, Updates
from node.algorithms.common import (
    build_role,
    local_sgd,
    prototype_payload,
)
from node.algorithms.settings import FedHPSettings
from node.intake import gathered
from node.optimizers import SGD, Adam
from node.settings import FederationConfig

LAMBDA_H = 0.1  # "The parameter lambda in (1) is set to 0.1"
HYPERSPHERE_STEPS = 1000  # ours: projected gradient steps minimising L_U (Eq. 3)
HYPERSPHERE_LR = 0.1  # ours: initial step size, decays linearly to 0
HYPERSPHERE_MOMENTUM = 0.9  # ours


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Run torch CPU ops on one thread, so results cannot depend on the thread count."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def cosine_matrix(prototypes: torch.Tensor) -> torch.Tensor:
    """Pairwise cosine similarities [C, C], by element-wise products (no BLAS)."""
    p = F.normalize(prototypes, dim=1)
    return (p.unsqueeze(1) * p.unsqueeze(0)).sum(dim=2)


def uniformity_loss(prototypes: torch.Tensor) -> torch.Tensor:
    """L_U (Eq. 3): mean over classes of max_j M_ij, M = P P^T - 2I on unit-norm rows P.

    Rows are normalised here, so M holds the cosine similarities (diagonal 1 - 2 = -1).
    """
    m = cosine_matrix(prototypes)
    m = m - 2.0 * torch.eye(len(m), dtype=m.dtype, device=m.device)
    return m.max(dim=1).values.mean()


def hyperspherical_prototypes(num_classes: int, dim: int, seed: int,
                              steps: int = HYPERSPHERE_STEPS) -> torch.Tensor:
    """Unit prototypes [C, d] spread on the sphere by minimising L_U, the same for a seed.

    Projected gradient descent on the sphere with momentum: the gradient of L_U at unit
    rows is g_i = (1/C) (p_{j(i)} + sum_{k: j(k) = i} p_k) with j(i) = argmax_j M_ij,
    projected onto the tangent space at p_i; each step moves against the momentum buffer
    with a step size decaying linearly from HYPERSPHERE_LR to 0, then re-normalises the
    rows. Only ``seed`` decides the result: a private CPU generator, float64, one thread,
    element-wise products instead of BLAS.
    """
    with _one_thread(), torch.no_grad():
        generator = torch.Generator().manual_seed(seed)
        p = F.normalize(torch.randn(num_classes, dim, generator=generator,
                                    dtype=torch.float64), dim=1)
        buffer = torch.zeros_like(p)
        diagonal = 2.0 * torch.eye(num_classes, dtype=torch.float64)
        for step in range(steps):
            nearest = (cosine_matrix(p) - diagonal).argmax(dim=1)
            grad = p[nearest]
            grad.index_add_(0, nearest, p)
            grad /= num_classes
            grad -= (grad * p).sum(dim=1, keepdim=True) * p
            buffer.mul_(HYPERSPHERE_MOMENTUM).add_(grad)
            p = F.normalize(p - HYPERSPHERE_LR * (1.0 - step / steps) * buffer, dim=1)
        return p.to(torch.float32)


def distance_loss(z: torch.Tensor, labels: torch.Tensor,
                  prototypes: torch.Tensor) -> torch.Tensor:
    """L_D (Eq. 2): cross-entropy of softmax(-||z - pi_j||_2) against the labels."""
    distances = torch.cdist(z, prototypes, compute_mode="donot_use_mm_for_euclid_dist")
    return F.cross_entropy(-distances, labels)


def hyperspherical_loss(prototypes: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """L_H (Eq. 4): sum over classes of the cosine distance 1 - cos(anchor_j, pi_j)."""
    return (1.0 - F.cosine_similarity(prototypes, anchors, dim=1)).sum()


def fedhp_loss(z: torch.Tensor, labels: torch.Tensor, prototypes: torch.Tensor,
               anchors: torch.Tensor, lambda_h: float = LAMBDA_H,
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(L, L_D, L_H) with L = L_D + lambda * L_H  (Eq. 1)."""
    l_d = distance_loss(z, labels, prototypes)
    l_h = hyperspherical_loss(prototypes, anchors)
    return l_d + lambda_h * l_h, l_d, l_h


class FedHP(Algorithm):
    """The FedHP trainer behind the common algorithm interface."""

    name = "fedhp"
    kinds = ("prototypes",)
    reported_rule = PROTOTYPE
    settings_class = FedHPSettings

    def __init__(self, config: FederationConfig, data: NodeData, device: torch.device,
                 node_id: int) -> None:
        super().__init__(config, data, device, node_id)
        self.net = build_role(config, data, "teacher", node_id)
        h = self.settings
        dim = self.net.classifier.in_features
        self.net.classifier = nn.Identity()  # FedHP uses only the backbone
        if h.space == "features":  # the paper's: the features the embedding layer reads
            dim = self.net.embed.in_features
            self.net.embed = nn.Identity()  # its ReLU then leaves the ReLU'd features as they are
        self.net.to(device)
        anchors = hyperspherical_prototypes(data.num_classes, dim, config.seed, h.init_steps)
        self.anchors = anchors.to(device)
        self.prototypes = nn.Parameter(anchors.clone().to(device))
        t = config.train
        self.net_optimizer = SGD(self.net.parameters(), lr=t.lr, momentum=t.momentum,
                                 weight_decay=h.weight_decay)
        self.prototype_optimizer = Adam([self.prototypes], lr=h.prototype_lr)
        self.counts = torch.bincount(data.train_y.cpu(), minlength=data.num_classes)
        # the samples behind the last aggregate, by class (a hub's payload)
        self.aggregated_counts = torch.zeros_like(self.counts)

    def _loss_terms(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        """Eq. (1) on a batch; backbone and prototypes both descend on it."""
        _, z = self.net(x)
        loss, l_d, l_h = fedhp_loss(z, y, self.prototypes, self.anchors, self.settings.weight)
        return {"loss": loss, "distance_loss": l_d, "hyperspherical_loss": l_h}

    def train_round(self, round_: int) -> dict[str, float]:
        optimizers = (self.net_optimizer, self.prototype_optimizer)
        # zeros keep every key when there is nothing to train on
        return {"loss": 0.0, "distance_loss": 0.0, "hyperspherical_loss": 0.0} | local_sgd(
            (self.net,), {"loss": optimizers}, self.data, self.config, self.node_id, round_,
            self._loss_terms)

    def payload(self) -> dict[str, Payload]:
        return {"prototypes": prototype_payload(self.prototypes.detach(), self.counts)}

    def served_payload(self) -> dict[str, Payload]:
        """A hub's Eq. (5) aggregate: the classes its clients sent, with their counts summed."""
        return {"prototypes": prototype_payload(self.prototypes.detach(),
                                                self.aggregated_counts)}

    def aggregate(self, own: Mapping[str, Payload], received: Updates) -> list[Refusal]:
        num_classes, dim = self.prototypes.shape
        update = gathered(self, own, received, num_classes, dim)
        global_prototypes, known = aggregate_prototypes(
            update.prototypes, **self.config.aggregation.kwargs())
        self.aggregated_counts = class_totals(update.prototypes)
        known = known.to(self.device)
        with torch.no_grad():
            self.prototypes[known] = global_prototypes.to(self.device,
                                                          self.prototypes.dtype)[known]
        return update.refusals

    @torch.no_grad()
    def predictions(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """The nearest prototype in Euclidean distance (argmax of Eq. 2's softmax).

        The backbone has no classifier, so this is FedHP's only rule.
        """
        self.net.eval()
        _, z = self.net(x)
        everyone = torch.ones(len(self.prototypes), dtype=torch.bool, device=z.device)
        return {PROTOTYPE: nearest_prototype(z, self.prototypes, everyone)}
