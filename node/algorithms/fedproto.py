"""FedProto: only class prototypes travel; models stay local and may differ per node.

Paper: Tan et al., "FedProto: Federated Prototype Learning across Heterogeneous Clients"
(AAAI 2022). Equations used:

- local prototype of class j on client i (Methodology):
  C_i^(j) = 1/|D_ij| * sum_{(x,y) in D_ij} f_i(phi_i; x), the mean embedding of the class;
- global prototype (Global Prototype Aggregation): the average of the C_i^(j) of the clients
  that have class j, weighted by |D_ij| / N_j. As printed the formula also divides by
  |N_j|, which would shrink prototypes with the number of clients; we use the normalised
  count-weighted mean sum_i |D_ij| C_i^(j) / N_j (``node.aggregation.aggregate_prototypes``);
- local loss (Local Model Update): L = L_S(F_i(w_i; x), y) + lambda * L_R, with L_S the
  cross-entropy and L_R the distance between f_i(phi_i; x) and C_bar^(y) ("we use L2
  distance"; lambda * ||f_i(phi_i; x) - C_bar||_2^2 in the appendix). We use the MSE form
  (``node.algorithms.fedproto_losses.fedproto_loss``) over samples whose class has a global
  prototype, with the paper's lambda for the dataset: 1 for MNIST/FEMNIST, 0.1 for CIFAR-10
  (see LAMBDA_BY_DATASET);
- inference (Prototype-based model inference): y_hat = argmin_j ||f(phi; x) - C^(j)||_2 over
  the global prototypes (``nearest_prototype``).

Deviations:
- No server by default: every node aggregates its own prototypes with those of its
  in-neighbours that arrived this round; with a fully connected topology every node holds
  the server's global prototypes. A star with `topology.hub` is the paper's server: the
  hub aggregates the drawn clients' prototypes and sends them (`served_payload`) on.
- Local prototypes are computed after the round's local training, in eval mode, with the
  final local weights over the whole local train set (the paper's definition), not
  accumulated from the training mini-batches.
- Before any global prototype exists (round 0, or a node whose neighbourhood has not seen
  any of its classes) prediction falls back to the argmax of the local classifier, and
  classes without a global prototype are skipped by the nearest-prototype rule.
- lambda is a constant per dataset until a config key exists.

Only the "prototypes" kind travels (rows of locally seen classes, their class ids and
counts); the model (the teacher-role model of [model], per-node [model.groups] honoured)
never leaves the node, so nodes may run different architectures as long as they share
``model.embedding_dim``. A peer prototype payload of another dimension is rejected.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from node.algorithms.base import PROTOTYPE, NodeData, Payload, Refusal, Updates
from node.algorithms.common import (
    build_role,
    classify,
    local_sgd,
    new_optimizer,
    prototype_payload,
)
from node.algorithms.fedproto_losses import fedproto_loss, paper_lambda
from node.algorithms.prototype_base import PrototypeAlgorithm
from node.algorithms.settings import FedProtoSettings
from node.intake import gathered
from node.settings import FederationConfig


class FedProto(PrototypeAlgorithm):
    """FedProto behind the common algorithm interface: only prototypes travel."""

    name = "fedproto"
    kinds = ("prototypes",)
    reported_rule = PROTOTYPE
    settings_class = FedProtoSettings

    def __init__(self, config: FederationConfig, data: NodeData, device: torch.device,
                 node_id: int) -> None:
        super().__init__(config, data, device, node_id)
        self.model = build_role(config, data, "teacher", node_id).to(device)
        self.optimizer = new_optimizer(self.model, config)
        weight = self.settings.weight
        self.lam = paper_lambda(config.data.dataset) if weight is None else weight
        self.keep_prototypes(self.model.classifier.in_features)

    def _loss_terms(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        logits, embeddings = self.model(x)
        loss, ce, reg = fedproto_loss(logits, embeddings, labels, self.global_prototypes,
                                      self.known, self.lam)
        return {"loss": loss, "ce_loss": ce, "proto_loss": reg}

    def train_round(self, round_: int) -> dict[str, float]:
        stats = local_sgd((self.model,), {"loss": (self.optimizer,)}, self.data, self.config,
                          self.node_id, round_, self._loss_terms)
        self.refresh_local_prototypes(self.model)
        stats["lambda"] = self.lam
        return stats

    def payload(self) -> dict[str, Payload]:
        return {"prototypes": self.local_prototype_payload()}

    def served_payload(self) -> dict[str, Payload]:
        """A hub's global prototypes with the class counts behind them (its clients')."""
        return {"prototypes": prototype_payload(self.global_prototypes, self.global_counts)}

    def aggregate(self, own: Mapping[str, Payload], received: Updates) -> list[Refusal]:
        update = gathered(self, own, received, self.data.num_classes, self.dim)
        self.combine_prototypes(update.prototypes)
        return update.refusals

    def predictions(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Nearest global prototype (argmax until one exists) and the local model's argmax."""
        return classify(self.model, x, self.global_prototypes, self.known)
