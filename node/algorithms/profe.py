"""ProFe: teacher/student distillation, class prototypes and 16-bit exchange (paper 002, III).

Each node trains a large local teacher and a small student. Only the student's weights and
the student's class prototypes (with class counts) travel; the teacher never leaves the
node. Equations used (``node.algorithms.losses``, ``node.aggregation``):

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
- **alpha_s schedule** ([profe] alpha_schedule): halved after every round and 0 below
  alpha_limit (our reading of III-A1, which speaks of beta); the reference implementation
  (NEBULA, KD_prototypes) subtracts 2 * alpha_0 / rounds ("linear"). With alpha_s = 1 and
  limit 0.1, the teacher trains in rounds 1-4 only.
- **Order** ([profe] order, default "teacher_first"): the teacher trains its epoch, then the
  student distils from the trained teacher (the reference implementation's order).
  "same_batch": the teacher steps on a batch and the student distils from its outputs on
  that batch.
- **KD term**: KL(p_t || p_s) * T^2 with T = [profe] temperature (2; the paper gives no T),
  between logits whose spread is capped at 1 ([profe] kd_logits = "capped"): each row
  centred and divided by its standard deviation where that exceeds 1. **Deviation.** On
  disjoint classes the teacher trains on its node's few classes and is never averaged; its
  logits grow without bound, raw KD held every student to that scale, the students drifted
  apart and their average answered one class (MNIST 20%-classes 0.745 at round 10,
  Fashion-MNIST collapsed; experiments/reports/profe-ablation). "raw" restores Eq. 8.
- **Feature term**: MSE between unit-length student and teacher embeddings ([profe]
  features = "normalized"), for the same reason; "raw" is Eq. 8's MSE.
- **Prototype term**: the MSE of Eq. (6), mean over samples whose class has a global
  prototype and over the embedding dimension, weights beta_s = beta_t = 1; "softmax" is the
  reference implementation's cross-entropy between softened prototype and embedding.
- **Presets** ([profe] preset): "paper" is this project's earlier literal reading (raw
  terms, same-batch order); "reference" the reference implementation's settings.
- **Optimizer**: SGD, lr 0.01, momentum 0.9, no weight decay, batch 64, 1 epoch per round
  ([train]); the paper names none of these (the reference implementation: Adam, amsgrad,
  lr 1e-3, a fresh optimiser every round).
- **Models**: MNIST/Fashion-MNIST CNN teacher (16, 32 channels) and student (8, 16), both
  with a 128-dimensional embedding (the paper: "a two-layer CNN"; it gives no sizes; the
  reference implementation: student 32/64 and teacher 64/128 channels with a 2048-wide
  embedding, about 30 times the student's parameters here, too slow for 20 nodes on a CPU).
- **Evaluation**: every node evaluates its student on its local 20% test split and on the
  federation's 10% global test set after each round's aggregation (IV).
- **No server**: each node aggregates itself and the in-neighbours whose update arrived;
  a fully connected topology equals the paper's setting.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from node.algorithms.base import NodeData
from node.algorithms.common import (
    build_role,
    classify,
    local_sgd,
    new_optimizer,
)
from node.algorithms.losses import (
    decayed_weight,
    prototype_mse,
    prototype_softmax_ce,
    student_loss,
    teacher_loss,
)
from node.algorithms.prototype_base import ModelAndPrototypes
from node.algorithms.settings import PROFE_PRESETS as PRESETS
from node.algorithms.settings import ProFeSettings
from node.settings import FederationConfig


class ProFe(ModelAndPrototypes):
    """The ProFe trainer behind the common algorithm interface."""

    name = "profe"
    settings_class = ProFeSettings
    presets = PRESETS

    def __init__(self, config: FederationConfig, data: NodeData, device: torch.device,
                 node_id: int) -> None:
        super().__init__(config, data, device, node_id)
        self.teacher = build_role(config, data, "teacher", node_id).to(device)
        self.student = build_role(config, data, "student", node_id).to(device)
        self.teacher_optimizer = new_optimizer(self.teacher, config)
        self.student_optimizer = new_optimizer(self.student, config)
        self.alpha_s = self.settings.alpha_s
        self.keep_prototypes(self.student.classifier.in_features)
        # the classes this node trains on: what its teacher can speak about (kd_classes)
        self.local_classes = torch.bincount(data.train_y.cpu(), minlength=data.num_classes) > 0

    @property
    def shared_model(self) -> nn.Module:
        return self.student

    def _prototype_term(self):
        s = self.settings
        if s.prototype_loss == "softmax":
            return partial(prototype_softmax_ce, temperature=s.temperature)
        return prototype_mse

    def _teacher_loss(self, logits: torch.Tensor, embeddings: torch.Tensor,
                      y: torch.Tensor) -> torch.Tensor:
        return teacher_loss(logits, embeddings, y, self.global_prototypes, self.known,
                            self.settings.beta_t, self._prototype_term())

    def _teacher_terms(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"teacher_loss": self._teacher_loss(*self.teacher(x), y)}

    def _student_terms(self, x: torch.Tensor, y: torch.Tensor,
                       teacher_out: tuple[torch.Tensor, torch.Tensor] | None,
                       ) -> dict[str, torch.Tensor]:
        s = self.settings
        teacher_logits, teacher_embeddings = teacher_out or (None, None)
        logits, embeddings = self.student(x)
        kd_classes = self.local_classes.to(x.device) if s.kd_classes == "local" else None
        return {"student_loss": student_loss(
            logits, embeddings, y, self.global_prototypes, self.known, s.beta_s, self.alpha_s,
            teacher_logits, teacher_embeddings, s.temperature, kd_weight=s.kd_weight,
            feature_weight=s.feature_weight, normalized_features=s.features == "normalized",
            kd_view=s.kd_logits, kd_classes=kd_classes, prototype_term=self._prototype_term())}

    def _same_batch_terms(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        """Eq. 9 and Eq. 8 on one batch; the student distils from the teacher's outputs
        detached before the teacher's step on that batch."""
        logits, embeddings = self.teacher(x)
        return ({"teacher_loss": self._teacher_loss(logits, embeddings, y)}
                | self._student_terms(x, y, (logits.detach(), embeddings.detach())))

    def _distilled_terms(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        """Eq. 8 on a batch, from the teacher as it stands (trained before, not stepped)."""
        with torch.no_grad():
            teacher_out = self.teacher(x)
        return self._student_terms(x, y, teacher_out)

    def train_round(self, round_: int) -> dict[str, float]:
        s = self.settings
        use_teacher = self.alpha_s > 0.0
        if s.fresh_optimizers:
            self.teacher_optimizer = new_optimizer(self.teacher, self.config)
            self.student_optimizer = new_optimizer(self.student, self.config)
        teacher_step = {"teacher_loss": (self.teacher_optimizer,)}
        student_step = {"student_loss": (self.student_optimizer,)}
        stats = {"teacher_loss": 0.0, "student_loss": 0.0}  # every key, even with no data
        if not use_teacher:
            stats |= local_sgd((self.student,), student_step, self.data, self.config,
                               self.node_id, round_,
                               lambda x, y: self._student_terms(x, y, None))
        elif s.order == "teacher_first":
            with self.profile.phase("teacher"):
                stats |= local_sgd((self.teacher,), teacher_step, self.data, self.config,
                                   self.node_id, round_, self._teacher_terms)
            self.teacher.eval()  # the trained teacher is a fixed target for the student
            stats |= local_sgd((self.student,), student_step, self.data, self.config,
                               self.node_id, round_, self._distilled_terms)
        else:
            self.teacher.train()
            stats |= local_sgd((self.student,), teacher_step | student_step, self.data,
                               self.config, self.node_id, round_, self._same_batch_terms)
        self.teacher.train(False)  # a retired teacher is never run again
        # with "aggregated" the aggregate's prototypes replace these before they travel
        self.refresh_local_prototypes(self.student, deferred=self.prototypes_replaced())
        stats["alpha_s"] = self.alpha_s
        stats["teacher_trained"] = float(use_teacher)
        self.alpha_s = decayed_weight(self.alpha_s, s.alpha_limit, s.alpha_schedule,
                                      s.alpha_s, self.config.rounds)
        return stats

    def predictions(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """The student's argmax (what the paper reports) and the nearest prototype (Eq. 5)."""
        return classify(self.student, x, self.global_prototypes, self.known)
