"""ProFe: teacher/student distillation, class prototypes and 16-bit exchange (paper 002, III).

Each node trains a large local teacher and a small student. Only the student's weights and
the student's class prototypes (with class counts) travel; the teacher never leaves the
node. The distillation weight alpha_s halves after every round and becomes 0 below its
limit (III-A1), after which the teacher is neither trained nor run.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from node.aggregation import aggregate_prototypes, weighted_mean
from node.algorithms.base import Algorithm, NodeData, Payload, Updates
from node.algorithms.common import (
    batches,
    build_role,
    classify,
    gather,
    model_then_prototypes,
    prototype_payload,
    round_generator,
    sgd,
    state_payload,
    train_prototypes,
)
from node.config import FederationConfig
from node.losses import decayed_weight, student_loss, teacher_loss


class ProFe(Algorithm):
    """The ProFe trainer behind the common algorithm interface."""

    name = "profe"
    kinds = ("model", "prototypes")

    def __init__(self, config: FederationConfig, data: NodeData, device: torch.device,
                 node_id: int) -> None:
        super().__init__(config, data, device, node_id)
        torch.manual_seed(config.seed)  # every node starts from the same weights
        self.teacher = build_role(config, data, "teacher", node_id).to(device)
        self.student = build_role(config, data, "student", node_id).to(device)
        self.teacher_optimizer = sgd(self.teacher, config)
        self.student_optimizer = sgd(self.student, config)
        self.alpha_s = config.train.alpha_s
        dim = self.student.classifier.in_features
        self.global_prototypes = torch.zeros(data.num_classes, dim, device=device)
        self.known = torch.zeros(data.num_classes, dtype=torch.bool, device=device)
        self.local_prototypes = torch.zeros(data.num_classes, dim)
        self.local_counts = torch.zeros(data.num_classes, dtype=torch.int64)

    def train_round(self, round_: int) -> dict[str, float]:
        t = self.config.train
        generator = round_generator(self.config, self.node_id, round_)
        use_teacher = self.alpha_s > 0.0
        sums = {"teacher_loss": 0.0, "student_loss": 0.0}
        steps = 0
        self.student.train()
        self.teacher.train(use_teacher)
        for _ in range(t.epochs):
            for x, y in batches(self.data.train_x, self.data.train_y, t.batch_size, generator):
                teacher_logits = teacher_embeddings = None
                if use_teacher:
                    teacher_logits, teacher_embeddings = self.teacher(x)
                    loss_t = teacher_loss(teacher_logits, teacher_embeddings, y,
                                          self.global_prototypes, self.known, t.beta_t)
                    self.teacher_optimizer.zero_grad()
                    loss_t.backward()
                    self.teacher_optimizer.step()
                    sums["teacher_loss"] += loss_t.item()
                    teacher_logits = teacher_logits.detach()
                    teacher_embeddings = teacher_embeddings.detach()
                logits, embeddings = self.student(x)
                loss_s = student_loss(logits, embeddings, y, self.global_prototypes, self.known,
                                      t.beta_s, self.alpha_s, teacher_logits,
                                      teacher_embeddings, t.temperature)
                self.student_optimizer.zero_grad()
                loss_s.backward()
                self.student_optimizer.step()
                sums["student_loss"] += loss_s.item()
                steps += 1
        self.local_prototypes, self.local_counts = train_prototypes(
            self.student, self.data, t.eval_batch_size)
        stats = {key: value / max(steps, 1) for key, value in sums.items()}
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
            self.student.load_state_dict(weighted_mean(update.states))
            if self.config.exchange.prototypes_from == "aggregated":
                self.local_prototypes, self.local_counts = train_prototypes(
                    self.student, self.data, self.config.train.eval_batch_size)
        if "prototypes" in own:
            global_prototypes, known = aggregate_prototypes(update.prototypes)
            self.global_prototypes = global_prototypes.to(self.device)
            self.known = known.to(self.device)
        return update.rejected

    def predictions(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """The student's argmax (what the paper reports) and the nearest prototype (Eq. 5)."""
        return classify(self.student, x, self.global_prototypes, self.known)
