"""FedProc: prototypical contrastive federated learning (Mu et al., paper 004, section 3.3).

Network (3.3, "Local Network Architecture", 4.1): a base encoder (the teacher-role model up
to and including its embedding, r = model(x)[1]), a projection head "2-layer MLP with an
output size of 256" (Linear(D, D) -> ReLU -> Linear(D, 256), z in R^256) and an output
layer "just a single linear layer" s = f_c(z). The whole network (encoder, head and output
layer) is the model that travels and is averaged.

Loss, Eq. (2)/(3):      l = alpha * l_gpc + (1 - alpha) * l_ce,   alpha = 1 - t/T.
Global prototypical contrastive loss, Eq. (4), with sim the cosine similarity:

    l_gpc = -log exp(sim(z, c_y)) / (exp(sim(z, c_y)) + sum_{k' != y} exp(sim(z, c_k')))

i.e. a cross-entropy over the cosine similarities to the global class prototypes. Eq. (4)
has no temperature, so the similarities enter exp() unscaled (GPC_TEMPERATURE = 1).
Prototypes, Eq. (5): c_k = mean of z = f_e(x) (projection output) over the local samples of
class k, computed with the model after local training (Algorithm 1, lines 27-30).
Prediction: argmax of the output layer's logits s (the paper evaluates the global model's
top-1 accuracy; it never classifies by prototype distance).

Choices and deviations:
- Serverless: each node does the server's lines 9-10 of Algorithm 1 over itself and its
  in-neighbours: the model is averaged weighted by training samples (line 10), the
  prototypes by class counts. Line 9 prints a plain mean (1/m) sum_i c_i; we use the
  count-weighted mean sum_i |D_i^k| c_i,k / sum_i |D_i^k| so that nodes without class k do
  not pull c_k towards zero (`aggregate_prototypes`). Classes no contributor has are left
  out of the contrast (masked from the softmax) until someone has them.
- Round index: Algorithm 1 counts rounds t = 0..T-1 with alpha = 1 - t/T (lines 3, 21).
  The runtime's rounds are 1..T, so round r uses t = r - 1: the first round is pure
  feature learning (alpha = 1) and the last has alpha = 1/T, exactly as in the paper.
- Initial prototypes c^0 (Algorithm 1, line 2, unspecified there): before its first round
  a node has received nothing, so it uses its own class means of z under the initial
  weights, which every node shares (same seed). Without them l_gpc would be empty in round
  1, where alpha = 1, and the network would not train at all.
- Samples whose class has no global prototype add nothing to l_gpc (mean over the rest).
- The projection head's hidden width is the embedding dimension D (the paper gives only
  the output size, 256); the encoder's output r is the model's ReLU embedding.
- Optimiser: SGD with the [train] lr, momentum and weight decay, kept across rounds.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from node.aggregation import aggregate_prototypes
from node.algorithms.base import ARGMAX, Algorithm, NodeData, Payload, Refusal, Updates
from node.algorithms.common import (
    adopt,
    build_role,
    local_sgd,
    new_optimizer,
    prototype_payload,
    state_payload,
    train_prototypes,
)
from node.algorithms.settings import FedProcSettings
from node.intake import combined_state, gathered, screened
from node.settings import FederationConfig

PROJECTION_DIM = 256  # "the projection head consists of a 2-layer MLP with an output size of 256"
GPC_TEMPERATURE = 1.0  # Eq. (4) is exp(sim(z, c)) with no temperature


class FedProcNet(nn.Module):
    """Base encoder -> projection head -> output layer; forward returns (logits s, z).

    ``encoder`` is a model from `build_model`; its own classifier is dropped (replaced by
    the identity) so that only the layers up to the embedding remain and train.
    """

    def __init__(self, encoder: nn.Module, num_classes: int,
                 projection_dim: int = PROJECTION_DIM) -> None:
        super().__init__()
        dim = encoder.classifier.in_features
        encoder.classifier = nn.Identity()
        self.encoder = encoder
        self.head = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, projection_dim))
        self.classifier = nn.Linear(projection_dim, num_classes)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return (logits [B, K], projection z [B, projection_dim])."""
        _, r = self.encoder(x)
        z = self.head(r)
        return self.classifier(z), z


def alpha_schedule(round_: int, rounds: int) -> float:
    """alpha = 1 - t/T with the paper's t = round_ - 1 (runtime rounds start at 1)."""
    if not 1 <= round_ <= rounds:
        raise ValueError(f"round {round_} is outside 1..{rounds}")
    return 1.0 - (round_ - 1) / rounds


def gpc_loss(z: torch.Tensor, labels: torch.Tensor, prototypes: torch.Tensor,
             known: torch.Tensor, temperature: float = GPC_TEMPERATURE) -> torch.Tensor:
    """Global prototypical contrastive loss, Eq. (4), averaged over the batch.

    Cross-entropy of softmax(cos(z, c_k) / temperature) over the classes with a prototype
    (``known``); samples whose own class has none are skipped. Zero if none remain.
    """
    mask = known[labels]
    if not bool(mask.any()):
        return z.new_zeros(())
    sims = F.cosine_similarity(z[mask].unsqueeze(1), prototypes.unsqueeze(0), dim=2)
    logits = (sims / temperature).masked_fill(~known.unsqueeze(0), float("-inf"))
    return F.cross_entropy(logits, labels[mask])


def fedproc_loss(logits: torch.Tensor, z: torch.Tensor, labels: torch.Tensor,
                 prototypes: torch.Tensor, known: torch.Tensor, alpha: float,
                 temperature: float = GPC_TEMPERATURE,
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(l, l_gpc, l_ce) with l = alpha * l_gpc + (1 - alpha) * l_ce  (Eq. 2)."""
    gpc = gpc_loss(z, labels, prototypes, known, temperature)
    ce = F.cross_entropy(logits, labels)
    return alpha * gpc + (1.0 - alpha) * ce, gpc, ce


class FedProc(Algorithm):
    """The FedProc trainer behind the common algorithm interface."""

    name = "fedproc"
    kinds = ("model", "prototypes")
    settings_class = FedProcSettings

    def __init__(self, config: FederationConfig, data: NodeData, device: torch.device,
                 node_id: int) -> None:
        super().__init__(config, data, device, node_id)
        encoder = build_role(config, data, "teacher", node_id)
        self.net = FedProcNet(encoder, data.num_classes,
                              projection_dim=self.settings.projection_dim).to(device)
        self.optimizer = new_optimizer(self.net, config)
        dim = self.net.classifier.in_features
        self.global_prototypes = torch.zeros(data.num_classes, dim, device=device)
        self.known = torch.zeros(data.num_classes, dtype=torch.bool, device=device)
        self.local_prototypes = torch.zeros(data.num_classes, dim)
        self.local_counts = torch.zeros(data.num_classes, dtype=torch.int64)

    def _compute_local_prototypes(self) -> None:
        self.local_prototypes, self.local_counts = train_prototypes(
            self.net, self.data, self.config.train.eval_batch_size)

    def _loss_terms(self, x: torch.Tensor, y: torch.Tensor,
                    alpha: float) -> dict[str, torch.Tensor]:
        """Eq. (2) on a batch, against the global prototypes of the last aggregation."""
        logits, z = self.net(x)
        loss, gpc, ce = fedproc_loss(logits, z, y, self.global_prototypes, self.known, alpha,
                                     self.settings.temperature)
        return {"loss": loss, "gpc_loss": gpc, "ce_loss": ce}

    def train_round(self, round_: int) -> dict[str, float]:
        if not bool(self.known.any()):  # c^0: own class means under the shared initial weights
            self._compute_local_prototypes()
            self.global_prototypes = self.local_prototypes.to(self.device)
            self.known = (self.local_counts > 0).to(self.device)
        # train.final_fit trains once more after the last round: at the last round's alpha
        alpha = alpha_schedule(min(round_, self.config.rounds), self.config.rounds)
        # zeros keep every key when there is nothing to train on
        stats = {"loss": 0.0, "gpc_loss": 0.0, "ce_loss": 0.0} | local_sgd(
            (self.net,), {"loss": (self.optimizer,)}, self.data, self.config, self.node_id,
            round_, lambda x, y: self._loss_terms(x, y, alpha))
        self._compute_local_prototypes()
        stats["alpha"] = alpha
        return stats

    def travelling_model(self) -> torch.nn.Module:
        return self.net

    def payload(self) -> dict[str, Payload]:
        return {"model": state_payload(self.net, self.data.train_y, self.data.num_classes),
                "prototypes": prototype_payload(self.local_prototypes, self.local_counts)}

    def aggregate(self, own: Mapping[str, Payload], received: Updates) -> list[Refusal]:
        update = gathered(self, own, received, self.data.num_classes,
                          self.local_prototypes.shape[1])
        update = screened(self, self.net, update)
        state = combined_state(self, update)
        adopt(self, self.net, state)
        global_prototypes, known = aggregate_prototypes(
            update.prototypes, **self.config.aggregation.kwargs())
        self.global_prototypes = global_prototypes.to(self.device)
        self.known = known.to(self.device)
        return update.refusals

    @torch.no_grad()
    def predictions(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """argmax of the output layer's logits s = f_c(z)."""
        self.net.eval()
        logits, _ = self.net(x)
        return {ARGMAX: logits.argmax(dim=1)}
