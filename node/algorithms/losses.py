"""Loss terms of the ProFe paper, section III, as pure functions of tensors."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

# (embeddings, labels, global prototypes, known) -> the prototype term of Eqs. 8 and 9
PrototypeTerm = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of softmax(logits) against integer labels (Eq. 1)."""
    return F.cross_entropy(logits, labels)


def standardized(logits: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Each row's logits minus their mean, over their standard deviation (z-scores)."""
    centred = logits - logits.mean(dim=1, keepdim=True)
    return centred / (centred.pow(2).mean(dim=1, keepdim=True) + eps).sqrt()


def capped(logits: torch.Tensor, limit: float = 1.0) -> torch.Tensor:
    """Each row's logits, centred, with their standard deviation brought down to `limit`
    where it is larger (rows with a smaller spread are only centred)."""
    centred = logits - logits.mean(dim=1, keepdim=True)
    # clamp before the square root: equal logits (spread 0) must not give a NaN gradient
    spread = centred.pow(2).mean(dim=1, keepdim=True).clamp(min=limit**2).sqrt()
    return centred / spread


LOGIT_VIEWS = {"raw": lambda z: z, "standardized": standardized, "capped": capped}


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
            temperature: float, classes: torch.Tensor | None = None,
            logits: str = "raw") -> torch.Tensor:
    """KL(p_t || p_s) * T^2 on temperature-softened outputs, averaged over the batch (III-A).

    With `classes` (a bool mask over the classes), both distributions are renormalised over
    those classes only. `logits` picks what both sides are compared as: "raw", z-scores
    ("standardized") or "capped" (spread above 1 scaled down to 1), so a teacher whose
    logits grew large on its few classes passes on its ranking of the classes, not its
    scale, and the gradient never grows with that scale.
    """
    if classes is not None:
        student_logits, teacher_logits = student_logits[:, classes], teacher_logits[:, classes]
    view = LOGIT_VIEWS[logits]
    log_p_s = F.log_softmax(view(student_logits) / temperature, dim=1)
    log_p_t = F.log_softmax(view(teacher_logits) / temperature, dim=1)
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


def prototype_softmax_ce(embeddings: torch.Tensor, labels: torch.Tensor,
                         global_prototypes: torch.Tensor, known: torch.Tensor,
                         temperature: float) -> torch.Tensor:
    """Cross-entropy between softmax(C_bar(y)/T) and softmax(f(x)/T) over the embedding
    dimensions, summed over the samples whose class has a global prototype.

    The prototype term of ProFe's reference implementation (global prototype distillation,
    Wu et al. 2024), which sums rather than averages over the batch.
    """
    mask = known[labels]
    if not bool(mask.any()):
        return embeddings.new_zeros(())
    target = F.softmax(global_prototypes[labels[mask]] / temperature, dim=1)
    log_p = F.log_softmax(embeddings[mask] / temperature, dim=1)
    return -(target * log_p).sum()


def feature_mse(student_embeddings: torch.Tensor, teacher_embeddings: torch.Tensor,
                normalized: bool = False) -> torch.Tensor:
    """MSE between student and teacher embeddings, the feature term of Eq. 8.

    `normalized`: between the embeddings scaled to unit length, so the term matches
    directions and stays bounded however large the teacher's embeddings grow.
    """
    if normalized:
        student_embeddings = F.normalize(student_embeddings, dim=1)
        teacher_embeddings = F.normalize(teacher_embeddings, dim=1)
    return F.mse_loss(student_embeddings, teacher_embeddings)


def teacher_loss(logits: torch.Tensor, embeddings: torch.Tensor, labels: torch.Tensor,
                 global_prototypes: torch.Tensor, known: torch.Tensor,
                 beta_t: float, prototype_term: PrototypeTerm = prototype_mse) -> torch.Tensor:
    """L_t = CE(y_t, y) + beta_t * MSE(f_t1(x), C_bar(y))  (Eq. 9)."""
    return cross_entropy(logits, labels) + beta_t * prototype_term(
        embeddings, labels, global_prototypes, known)


def student_loss(logits: torch.Tensor, embeddings: torch.Tensor, labels: torch.Tensor,
                 global_prototypes: torch.Tensor, known: torch.Tensor, beta_s: float,
                 alpha_s: float, teacher_logits: torch.Tensor | None,
                 teacher_embeddings: torch.Tensor | None, temperature: float, *,
                 kd_weight: float = 1.0, feature_weight: float = 1.0,
                 normalized_features: bool = False, kd_view: str = "raw",
                 kd_classes: torch.Tensor | None = None,
                 prototype_term: PrototypeTerm = prototype_mse) -> torch.Tensor:
    """L_s = CE + beta_s*MSE(f_s1, C_bar(y)) + alpha_s*[KD(y_s, y_t) + MSE(f_s1, f_t1)] (Eq. 8).

    `kd_weight` and `feature_weight` scale the two terms inside the bracket; `kd_classes`
    and `kd_view` shape the KD term (kd_loss's `classes` and `logits`),
    `normalized_features` the feature term (feature_mse); `prototype_term` replaces Eq. 6's
    MSE. With alpha_s == 0 the teacher is not needed and its outputs may be None.
    """
    loss = cross_entropy(logits, labels) + beta_s * prototype_term(
        embeddings, labels, global_prototypes, known)
    if alpha_s > 0.0:
        if teacher_logits is None or teacher_embeddings is None:
            raise ValueError("alpha_s > 0 needs the teacher's logits and embeddings")
        loss = loss + alpha_s * (kd_weight * kd_loss(logits, teacher_logits, temperature,
                                                     kd_classes, kd_view)
                                 + feature_weight * feature_mse(embeddings, teacher_embeddings,
                                                                normalized_features))
    return loss


def decayed_weight(weight: float, limit: float, schedule: str = "halve",
                   initial: float = 0.0, rounds: int = 1) -> float:
    """The distillation weight for the next round; below `limit` it becomes 0 (III-A1).

    "halve": weight / 2. "linear": weight - 2 * initial / rounds (the reference
    implementation's schedule, which reaches 0 halfway through the run).
    """
    if schedule == "linear":
        nxt = weight - 2.0 * initial / rounds
    else:
        nxt = weight / 2.0
    return nxt if nxt >= limit and nxt > 0.0 else 0.0
