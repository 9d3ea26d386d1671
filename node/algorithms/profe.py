"""ProFe: teacher/student distillation, class prototypes and 16-bit exchange (paper 002, III).

Each node trains a large local teacher and a small student. Only the student's weights and
the student's class prototypes (with class counts) travel; the teacher never leaves the
node. Equations used (``node.losses``, ``node.aggregation``):

- Eq. (8), student: CE + beta_s * MSE(f_s1(x), C_bar(y)) + alpha_s * [KD(y_s, y_t) +
  MSE(f_s1(x), f_t1(x))]; Eq. (9), teacher: CE + beta_t * MSE(f_t1(x), C_bar(y)).
- Eq. (3) local prototypes, Eq. (4) their count-weighted aggregation, Eq. (5) inference by
  the nearest global prototype; III-D 16-bit quantization of everything that travels.

Deviations and readings, each a choice the paper leaves open or one we changed:
- **When prototypes are computed** ([exchange] prototypes_from, default "aggregated"): the
  paper computes them with the locally trained student and sends them with it. Inference
  and the next round's loss then apply prototypes of pre-aggregation students to the
  aggregated one; on disjoint classes every input fell to one prototype (macro-F1 0.018).
  By default the round has two exchange steps: the student first, then prototypes
  recomputed on the aggregated student (the same prototype message, sent later).
  "local" restores the paper's order.
- **Reported metric**: the student's argmax, as the paper's reference implementation
  (NEBULA, KD_prototypes) logs its F1; the nearest-prototype rule (Eq. 5) is recorded
  beside it every round.
- **alpha_s schedule**: halved after every round and 0 below [train] alpha_limit (our
  reading of III-A1, which speaks of beta); NEBULA instead subtracts 2 * alpha_0 / rounds.
  With alpha_s = 1 and limit 0.1, the teacher trains in rounds 1-4 only.
- **Teacher and student steps alternate per batch**: the teacher takes its step on a batch,
  then the student distils from the teacher's detached outputs on the same batch.
- **Prototype term**: the MSE of Eq. (6), mean over samples whose class has a global
  prototype and over the embedding dimension, weights beta_s = beta_t = 1 ([train]).
- **KD term**: KL(p_t || p_s) * T^2 with T = [train] temperature (2); the paper gives no T.
- **Optimizer**: SGD, lr 0.01, momentum 0.9, no weight decay, batch 64, 1 epoch per round
  ([train]); the paper names none of these.
- **Models**: MNIST/Fashion-MNIST CNN teacher (16, 32 channels) and student (8, 16), both
  with a 128-dimensional embedding (the paper: "a two-layer CNN"; it gives no sizes).
- **Evaluation**: every node evaluates its student on its local 20% test split and on the
  federation's 10% global test set after each round's aggregation (IV).
- **No server**: each node aggregates itself and the in-neighbours whose update arrived;
  a fully connected topology equals the paper's setting.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

from node.aggregation import aggregate_prototypes, aggregate_states
from node.algorithms.base import Algorithm, NodeData, Payload, Updates
from node.algorithms.common import (
    build_role,
    classify,
    gather,
    local_sgd,
    model_then_prototypes,
    new_optimizer,
    prototype_payload,
    state_payload,
    train_prototypes,
)
from node.losses import decayed_weight, student_loss, teacher_loss

if TYPE_CHECKING:  # config imports the registry, never the other way round
    from node.config import FederationConfig


class ProFe(Algorithm):
    """The ProFe trainer behind the common algorithm interface."""

    name = "profe"
    kinds = ("model", "prototypes")

    def __init__(self, config: FederationConfig, data: NodeData, device: torch.device,
                 node_id: int) -> None:
        super().__init__(config, data, device, node_id)
        self.teacher = build_role(config, data, "teacher", node_id).to(device)
        self.student = build_role(config, data, "student", node_id).to(device)
        self.teacher_optimizer = new_optimizer(self.teacher, config)
        self.student_optimizer = new_optimizer(self.student, config)
        self.alpha_s = config.train.alpha_s
        dim = self.student.classifier.in_features
        self.global_prototypes = torch.zeros(data.num_classes, dim, device=device)
        self.known = torch.zeros(data.num_classes, dtype=torch.bool, device=device)
        self.local_prototypes = torch.zeros(data.num_classes, dim)
        self.local_counts = torch.zeros(data.num_classes, dtype=torch.int64)

    def _loss_terms(self, x: torch.Tensor, y: torch.Tensor,
                    use_teacher: bool) -> dict[str, torch.Tensor]:
        """Eq. (9) for the teacher (when it trains) and Eq. (8) for the student on a batch.

        The student distils from the teacher's outputs detached before the teacher's step.
        """
        t = self.config.train
        terms = {}
        teacher_logits = teacher_embeddings = None
        if use_teacher:
            teacher_logits, teacher_embeddings = self.teacher(x)
            terms["teacher_loss"] = teacher_loss(teacher_logits, teacher_embeddings, y,
                                                 self.global_prototypes, self.known, t.beta_t)
            teacher_logits = teacher_logits.detach()
            teacher_embeddings = teacher_embeddings.detach()
        logits, embeddings = self.student(x)
        terms["student_loss"] = student_loss(logits, embeddings, y, self.global_prototypes,
                                             self.known, t.beta_s, self.alpha_s, teacher_logits,
                                             teacher_embeddings, t.temperature)
        return terms

    def train_round(self, round_: int) -> dict[str, float]:
        t = self.config.train
        use_teacher = self.alpha_s > 0.0
        minimise = {"teacher_loss": (self.teacher_optimizer,)} if use_teacher else {}
        minimise["student_loss"] = (self.student_optimizer,)
        self.teacher.train(use_teacher)  # a retired teacher is never run again
        # zeros keep every key when there is nothing to train on
        stats = {"teacher_loss": 0.0, "student_loss": 0.0} | local_sgd(
            (self.student,), minimise, self.data, self.config, self.node_id, round_,
            lambda x, y: self._loss_terms(x, y, use_teacher))
        self.local_prototypes, self.local_counts = train_prototypes(
            self.student, self.data, t.eval_batch_size)
        stats["alpha_s"] = self.alpha_s
        stats["teacher_trained"] = float(use_teacher)
        self.alpha_s = decayed_weight(self.alpha_s, t.alpha_limit)
        return stats

    def payload(self) -> dict[str, Payload]:
        return {"model": state_payload(self.student, len(self.data.train_y)),
                "prototypes": prototype_payload(self.local_prototypes, self.local_counts)}

    def exchange_steps(self) -> tuple[tuple[str, ...], ...]:
        return model_then_prototypes(self.config, self.kinds)

    def aggregate(self, own: Mapping[str, Payload], received: Updates) -> list[int]:
        update = gather(own, received, self.node_id, self.data.num_classes,
                        self.local_prototypes.shape[1])
        if "model" in own:
            state = aggregate_states(update.states, **self.config.aggregation.kwargs())
            self.student.load_state_dict(state)
            if self.config.exchange.prototypes_from == "aggregated":
                self.local_prototypes, self.local_counts = train_prototypes(
                    self.student, self.data, self.config.train.eval_batch_size)
        if "prototypes" in own:
            global_prototypes, known = aggregate_prototypes(
                update.prototypes, **self.config.aggregation.kwargs())
            self.global_prototypes = global_prototypes.to(self.device)
            self.known = known.to(self.device)
        return update.rejected

    def predictions(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """The student's argmax (what the paper reports) and the nearest prototype (Eq. 5)."""
        return classify(self.student, x, self.global_prototypes, self.known)
