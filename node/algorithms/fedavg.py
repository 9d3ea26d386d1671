"""FedAvg: local SGD on cross-entropy, then sample-weighted model averaging (the baseline).

Paper: McMahan et al., "Communication-Efficient Learning of Deep Networks from Decentralized
Data" (AISTATS 2017), cited as the baseline by FedPR (its Eq. 1):

    min_w sum_i D_i / (sum_k D_k) * L_i(F(w; x_i), y_i),   L_i = cross-entropy,

solved by E epochs of mini-batch SGD on each client followed by the average of the client
models weighted by their sample counts, w <- sum_i D_i w_i / sum_i D_i.

Deviations:
- No server by default: every node averages its own model with the models of its
  in-neighbours that arrived this round (weights = their training-sample counts), so a
  fully connected topology gives every node the server's average and sparser ones a gossip
  average. A star with `topology.hub` is the paper's client/server: the hub averages the
  drawn clients' models and the clients drawn next adopt its average before they train.
- Every client trains every round unless `participation` (the paper's fraction C) is below
  1: then the drawn nodes only, the same draw on every node.
- The model is the teacher-role model of [model] (single-model algorithm); all nodes must
  build the same architecture, since a peer model of another shape is rejected.
- Prediction is the argmax of the (averaged) model's logits.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from node.algorithms.base import ARGMAX, Algorithm, NodeData, Payload, Refusal, Updates
from node.algorithms.common import (
    adopt,
    build_role,
    local_sgd,
    new_optimizer,
    state_payload,
)
from node.algorithms.losses import cross_entropy
from node.intake import combined_state, gathered, screened
from node.settings import FederationConfig


class FedAvg(Algorithm):
    """FedAvg behind the common algorithm interface: only model weights travel."""

    name = "fedavg"
    kinds = ("model",)

    def __init__(self, config: FederationConfig, data: NodeData, device: torch.device,
                 node_id: int) -> None:
        super().__init__(config, data, device, node_id)
        self.model = build_role(config, data, "teacher", node_id).to(device)
        self.optimizer = new_optimizer(self.model, config)

    def _loss_terms(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        """The batch's cross-entropy, the term SGD minimises."""
        logits, _ = self.model(x)
        return {"loss": cross_entropy(logits, y)}

    def train_round(self, round_: int) -> dict[str, float]:
        return local_sgd((self.model,), {"loss": (self.optimizer,)}, self.data, self.config,
                         self.node_id, round_, self._loss_terms)

    def travelling_model(self) -> torch.nn.Module:
        return self.model

    def payload(self) -> dict[str, Payload]:
        return {"model": state_payload(self.model, self.data.train_y, self.data.num_classes)}

    def aggregate(self, own: Mapping[str, Payload], received: Updates) -> list[Refusal]:
        update = gathered(self, own, received)
        update = screened(self, self.model, update)
        state = combined_state(self, update)
        adopt(self, self.model, state)
        return update.refusals

    @torch.no_grad()
    def predictions(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """The argmax of the model's logits."""
        self.model.eval()
        logits, _ = self.model(x)
        return {ARGMAX: logits.argmax(dim=1)}
