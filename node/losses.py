"""Loss terms of the ProFe paper, section III, as pure functions of tensors."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of softmax(logits) against integer labels (Eq. 1)."""
    return F.cross_entropy(logits, labels)


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
            temperature: float) -> torch.Tensor:
    """KL(p_t || p_s) * T^2 on temperature-softened outputs, averaged over the batch (III-A)."""
    log_p_s = F.log_softmax(student_logits / temperature, dim=1)
    log_p_t = F.log_softmax(teacher_logits / temperature, dim=1)
    kl = (log_p_t.exp() * (log_p_t - log_p_s)).sum(dim=1).mean()
    return kl * temperature**2


def prototype_mse(embeddings: torch.Tensor, labels: torch.Tensor,
                  global_prototypes: torch.Tensor, known: torch.Tensor) -> torch.Tensor:
    """MSE between each embedding and the global prototype of its label (Eq. 6).

    Samples whose class has no global prototype yet (``known[label]`` false) add nothing;
    the mean runs over the remaining samples and the embedding dimension.
    """
    mask = known[labels]
    if not bool(mask.any()):
        return embeddings.new_zeros(())
    return F.mse_loss(embeddings[mask], global_prototypes[labels[mask]])


def feature_mse(student_embeddings: torch.Tensor,
                teacher_embeddings: torch.Tensor) -> torch.Tensor:
    """MSE between student and teacher embeddings, the feature term of Eq. 8."""
    return F.mse_loss(student_embeddings, teacher_embeddings)


def teacher_loss(logits: torch.Tensor, embeddings: torch.Tensor, labels: torch.Tensor,
                 global_prototypes: torch.Tensor, known: torch.Tensor,
                 beta_t: float) -> torch.Tensor:
    """L_t = CE(y_t, y) + beta_t * MSE(f_t1(x), C_bar(y))  (Eq. 9)."""
    return cross_entropy(logits, labels) + beta_t * prototype_mse(
        embeddings, labels, global_prototypes, known)


def student_loss(logits: torch.Tensor, embeddings: torch.Tensor, labels: torch.Tensor,
                 global_prototypes: torch.Tensor, known: torch.Tensor, beta_s: float,
                 alpha_s: float, teacher_logits: torch.Tensor | None,
                 teacher_embeddings: torch.Tensor | None, temperature: float) -> torch.Tensor:
    """L_s = CE + beta_s*MSE(f_s1, C_bar(y)) + alpha_s*[KD(y_s, y_t) + MSE(f_s1, f_t1)] (Eq. 8).

    With alpha_s == 0 the teacher is not needed and its outputs may be None.
    """
    loss = cross_entropy(logits, labels) + beta_s * prototype_mse(
        embeddings, labels, global_prototypes, known)
    if alpha_s > 0.0:
        if teacher_logits is None or teacher_embeddings is None:
            raise ValueError("alpha_s > 0 needs the teacher's logits and embeddings")
        loss = loss + alpha_s * (kd_loss(logits, teacher_logits, temperature)
                                 + feature_mse(embeddings, teacher_embeddings))
    return loss


def decayed_weight(weight: float, limit: float) -> float:
    """Halve the distillation weight after a round; below `limit` it becomes 0 (III-A1)."""
    halved = weight / 2.0
    return halved if halved >= limit else 0.0
