"""FedAvg: local SGD on cross-entropy, then sample-weighted model averaging (the baseline).

Paper: McMahan et al., "Communication-Efficient Learning of Deep Networks from Decentralized
Data" (AISTATS 2017), cited as the baseline by FedPR (its Eq. 1):

    min_w sum_i D_i / (sum_k D_k) * L_i(F(w; x_i), y_i),   L_i = cross-entropy,

solved by E epochs of mini-batch SGD on each client followed by the average of the client
models weighted by their sample counts, w <- sum_i D_i w_i / sum_i D_i.

Deviations:
- No server: every node averages its own model with the models of its in-neighbours that
  arrived this round (weights = their training-sample counts), so a fully connected
  topology gives every node the server's average and sparser ones a gossip average.
- Every client trains every round (no client sampling fraction C).
- The model is the teacher-role model of [model] (single-model algorithm); all nodes must
  build the same architecture, since a peer model of another shape is rejected.
- Prediction is the argmax of the (averaged) model's logits.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import torch
from torch import nn

from node.aggregation import weighted_mean
from node.algorithms.base import Algorithm, NodeData, Payload, Updates
from node.algorithms.common import (
    batches,
    build_role,
    checked_state,
    round_generator,
    sgd,
    state_payload,
)
from node.config import FederationConfig
from node.errors import ProtocolError
from node.losses import cross_entropy

log = logging.getLogger(__name__)

# (logits, embeddings, labels) -> named loss terms; "loss" is the one minimised.
LossTerms = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], dict[str, torch.Tensor]]


def local_sgd(model: nn.Module, optimizer: torch.optim.Optimizer, data: NodeData,
              config: FederationConfig, node_id: int, round_: int,
              loss_terms: LossTerms) -> dict[str, float]:
    """[train] epochs of mini-batch SGD on the local train set minimising terms["loss"].

    Returns each term averaged over the steps (all zero when there are no training samples).
    """
    t = config.train
    generator = round_generator(config, node_id, round_)
    sums: dict[str, float] = {}
    steps = 0
    model.train()
    for _ in range(t.epochs):
        for x, y in batches(data.train_x, data.train_y, t.batch_size, generator):
            logits, embeddings = model(x)
            terms = loss_terms(logits, embeddings, y)
            optimizer.zero_grad()
            terms["loss"].backward()
            optimizer.step()
            for key, value in terms.items():
                sums[key] = sums.get(key, 0.0) + float(value.detach())
            steps += 1
    return {key: value / max(steps, 1) for key, value in sums.items()}


def require_kind(update: Mapping[str, Payload], kind: str) -> Payload:
    """The peer's payload of `kind`, or ProtocolError when the peer did not send one."""
    if kind not in update:
        raise ProtocolError(f"no {kind!r} payload (got {sorted(update)})")
    return update[kind]


class FedAvg(Algorithm):
    """FedAvg behind the common algorithm interface: only model weights travel."""

    name = "fedavg"
    kinds = ("model",)

    def __init__(self, config: FederationConfig, data: NodeData, device: torch.device,
                 node_id: int) -> None:
        super().__init__(config, data, device, node_id)
        torch.manual_seed(config.seed)  # every node starts from the same weights
        self.model = build_role(config, data, "teacher", node_id).to(device)
        self.optimizer = sgd(self.model, config)

    def train_round(self, round_: int) -> dict[str, float]:
        return local_sgd(self.model, self.optimizer, self.data, self.config, self.node_id,
                         round_, lambda logits, _, y: {"loss": cross_entropy(logits, y)})

    def payload(self) -> dict[str, Payload]:
        return {"model": state_payload(self.model, len(self.data.train_y))}

    def aggregate(self, own: Mapping[str, Payload], received: Updates) -> list[int]:
        reference = own["model"].tensors
        states = [(reference, own["model"].meta["samples"])]
        rejected = []
        for peer, update in sorted(received.items()):
            try:
                states.append(checked_state(reference, require_kind(update, "model")))
            except ProtocolError as exc:
                log.warning("node %d: update from peer %d rejected: %s", self.node_id, peer, exc)
                rejected.append(peer)
        self.model.load_state_dict(weighted_mean(states))
        return rejected

    @torch.no_grad()
    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """The argmax of the model's logits."""
        self.model.eval()
        logits, _ = self.model(x)
        return logits.argmax(dim=1)
