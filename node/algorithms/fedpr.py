"""FedPR: FedAvg plus class prototypes that regularise local training and drive inference.

Paper: Qiao, Le and Hong, "Boosting Federated Learning Convergence with Prototype
Regularization". Both the model weights and the class prototypes travel every round
(Fig. 1, steps 1-5). Equations used:

- Eq. (1): the global model is the sample-weighted average of the client models,
  w <- sum_i D_i w_i / sum_i D_i (``node.aggregation.weighted_mean``, the default
  [aggregation] rule);
- Eq. (2): the prototype of class j on client i is the mean embedding f_e(w_e; x) of the
  client's class-j samples (``node.aggregation.local_prototypes``);
- Eq. (3): y_bar_j = 1/N sum_i y~_ij, "the average of these prototypes from all clients
  that have samples of the j-th class": an unweighted mean over the clients that have
  class j (``client_mean_prototypes``; N read as the number of those clients, since
  dividing by all clients would shrink prototypes of classes some clients lack);
- Eq. (4): L_i = CE(F(w; x), y) + l2(f_e(w_e; x) - y_bar_y), the Euclidean distance to the
  global prototype of the label, unweighted (``node.algorithms.fedpr_losses.fedpr_loss``, weight
  PROTOTYPE_WEIGHT = 1), over samples whose class has a global prototype;
- Algorithm 1, inference: the class of the nearest global prototype in l2 distance.

Order within a round (Algorithm 1): local update with Eq. (4), local prototypes with Eq.
(2) from the locally trained model, then model averaging and prototype aggregation.

Deviations:
- When prototypes are computed ([exchange] prototypes_from, default "aggregated"): after
  model averaging, each node recomputes its class means on the averaged model and sends
  them in a second exchange step, so inference (Algorithm 1) and the next round's Eq. (4)
  use prototypes of the model they are applied to. "local" keeps the paper's order below.
- Reported metric: the nearest global prototype (the paper's inference); the argmax of the
  logits is recorded beside it.
- No server: every node averages its model and aggregates prototypes over itself and the
  in-neighbours whose update arrived; a fully connected topology equals the server.
- Prototypes travel as the rows of locally seen classes with class ids and counts (the
  counts are carried, not used by Eq. 3); a peer is rejected as a whole when its model or
  its prototypes are malformed.
- Before any global prototype exists (round 0) prediction is the argmax of the logits.
- Local prototypes are computed in eval mode after local training over the whole local
  train set.
- The model is the teacher-role model of [model]; all nodes must share its architecture.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from node.aggregation import aggregate_prototypes
from node.algorithms.base import PROTOTYPE, NodeData
from node.algorithms.common import (
    build_role,
    classify,
    local_sgd,
    new_optimizer,
)
from node.algorithms.fedpr_losses import fedpr_loss
from node.algorithms.prototype_base import ModelAndPrototypes
from node.algorithms.settings import FedPRSettings
from node.settings import FederationConfig


def client_mean_prototypes(contributions: Sequence[tuple[torch.Tensor, torch.Tensor]],
                           rule: str = "mean", trim_fraction: float = 0.2,
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. (3): per class, the unweighted mean of the prototypes of the nodes that have it.

    Each contribution is (prototypes [C, D], counts [C]); only counts > 0 matter.
    Returns (prototypes [C, D], known [C] bool).
    """
    return aggregate_prototypes([(protos, (counts > 0).to(torch.int64))
                                 for protos, counts in contributions], rule, trim_fraction)


class FedPR(ModelAndPrototypes):
    """FedPR behind the common algorithm interface: model and prototypes travel."""

    name = "fedpr"
    reported_rule = PROTOTYPE
    settings_class = FedPRSettings

    def __init__(self, config: FederationConfig, data: NodeData, device: torch.device,
                 node_id: int) -> None:
        super().__init__(config, data, device, node_id)
        self.model = build_role(config, data, "teacher", node_id).to(device)
        self.optimizer = new_optimizer(self.model, config)
        self.weight = self.settings.weight
        self.keep_prototypes(self.model.classifier.in_features)

    @property
    def shared_model(self) -> nn.Module:
        return self.model

    def _loss_terms(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        logits, embeddings = self.model(x)
        loss, ce, distance = fedpr_loss(logits, embeddings, labels, self.global_prototypes,
                                        self.known, self.weight,
                                        squared=self.settings.distance == "squared",
                                        normalized=self.settings.features == "normalized")
        return {"loss": loss, "ce_loss": ce, "proto_loss": distance}

    def train_round(self, round_: int) -> dict[str, float]:
        stats = local_sgd((self.model,), {"loss": (self.optimizer,)}, self.data, self.config,
                          self.node_id, round_, self._loss_terms)
        # with "aggregated" the aggregate's prototypes replace these before they travel
        self.refresh_local_prototypes(self.model, deferred=self.prototypes_replaced())
        return stats

    def combine(self, contributions, **rule):
        """Eq. 3: the unweighted mean over the clients that have each class."""
        return client_mean_prototypes(contributions, **rule)

    def predictions(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Nearest global prototype (Algorithm 1, inference; argmax until one exists) and the
        logits' argmax."""
        return classify(self.model, x, self.global_prototypes, self.known)
