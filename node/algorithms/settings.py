"""Each algorithm's own config table ([profe], [fedproto], ...) as a dataclass, with its
checks and presets: torch-free, so the config is checked without loading any algorithm."""

from __future__ import annotations

from dataclasses import dataclass

# [profe]'s choices where the paper leaves a reading open (node.algorithms.profe).
ORDERS = ("teacher_first", "same_batch")
FEATURE_SPACES = ("raw", "normalized")
FEDPR_DISTANCES = ("l2", "squared")
KD_LOGITS = ("capped", "raw", "standardized")
KD_CLASSES = ("local", "all")
PROTOTYPE_LOSSES = ("mse", "softmax")
SCHEDULES = ("halve", "linear")


def choice_problems(settings: object, choices: tuple[tuple[str, tuple[str, ...]], ...],
                    ) -> list[tuple[str, str]]:
    """(key, problem) for each of `choices`' keys whose value is not among its allowed ones."""
    found = []
    for key, allowed in choices:
        if getattr(settings, key) not in allowed:
            names = ", ".join(map(repr, allowed))
            found.append((key, f"must be one of {names}, got {getattr(settings, key)!r}"))
    return found


@dataclass(frozen=True)
class ProFeSettings:
    """[profe]: Eq. 8/9's weights and schedule, and the readings the paper leaves open."""

    alpha_s: float = 1.0
    """Initial distillation weight; 0 turns distillation off: the teacher never trains or runs."""
    alpha_limit: float = 0.1
    """Below it the distillation weight becomes 0 and the teacher retires."""
    alpha_schedule: str = "halve"
    """How the distillation weight falls from round to round."""
    beta_s: float = 1.0
    """The student's prototype-loss weight."""
    beta_t: float = 1.0
    """The teacher's prototype-loss weight."""
    temperature: float = 2.0
    """Distillation temperature T; positive."""
    kd_weight: float = 1.0
    """The KD term's weight inside Eq. 8's bracket."""
    feature_weight: float = 1.0
    """The feature MSE's weight inside Eq. 8's bracket."""
    kd_logits: str = "capped"
    """The logits KD compares: "capped" (spread above 1 scaled down to 1), "standardized"
    (z-scores) or "raw" (see node.algorithms.losses.kd_loss)."""
    features: str = "normalized"
    """The feature term between unit-length embeddings, or "raw"."""
    order: str = "teacher_first"
    """The teacher's epoch, then the student's; or "same_batch"."""
    kd_classes: str = "all"
    """KD over all classes, or "local": over the classes this node holds."""
    prototype_loss: str = "mse"
    """Eq. 6's MSE, or "softmax": the reference implementation's cross-entropy between
    softened prototype and embedding, summed over the batch."""
    fresh_optimizers: bool = False
    """New optimiser state every round."""
    preset: str = ""
    """A named set of values (see The ProFe trainer) that fills in what the file leaves unset;
    empty: none."""

    def problems(self) -> list[tuple[str, str]]:
        found = [(key, f"must be non-negative, got {getattr(self, key)}")
                 for key in ("alpha_s", "alpha_limit", "beta_s", "beta_t", "kd_weight",
                             "feature_weight")
                 if getattr(self, key) < 0.0]
        if self.temperature <= 0.0:
            found.append(("temperature", f"must be positive, got {self.temperature}"))
        return found + choice_problems(self, (
            ("alpha_schedule", SCHEDULES), ("order", ORDERS), ("features", FEATURE_SPACES),
            ("kd_logits", KD_LOGITS), ("kd_classes", KD_CLASSES),
            ("prototype_loss", PROTOTYPE_LOSSES), ("preset", ("", *PROFE_PRESETS))))


# What `[profe] preset = NAME` fills in where the file sets nothing, table by table.
PROFE_PRESETS = {
    # ProFe's reference implementation (NEBULA, KD_prototypes), as far as it differs from
    # our defaults: Adam (amsgrad) at 1e-3 with its tuned betas, a fresh optimiser every
    # round, the teacher trained before the student, KD over all classes, the prototype
    # term as a softmax cross-entropy at weight 0.05 summed over the batch, alpha lowered
    # linearly by 2 * alpha_0 / rounds, KD and feature terms on the raw outputs.
    "reference": {
        "train": {"optimizer": "adam", "lr": 1e-3, "amsgrad": True,
                  "adam_betas": [0.851436, 0.999689]},
        "profe": {"alpha_schedule": "linear", "alpha_limit": 0.01, "beta_s": 0.05,
                  "beta_t": 0.05, "order": "teacher_first", "kd_logits": "raw",
                  "features": "raw", "prototype_loss": "softmax", "fresh_optimizers": True},
    },
    # The paper's Eq. 8 and 9 as this project read them before the disjoint-classes fix.
    "paper": {
        "profe": {"order": "same_batch", "kd_logits": "raw", "features": "raw"},
    },
}


@dataclass(frozen=True)
class FedProtoSettings:
    """[fedproto]: the prototype-loss weight lambda; unset = the paper's value for the dataset."""

    weight: float | None = None
    """The prototype-loss weight lambda; unset: the paper's for the dataset (1 for
    (Fashion-)MNIST and datasets of yours, 0.1 for CIFAR)."""

    def problems(self) -> list[tuple[str, str]]:
        if self.weight is not None and self.weight < 0:
            return [("weight", f"must be non-negative, got {self.weight}")]
        return []


@dataclass(frozen=True)
class FedProcSettings:
    """[fedproc]: projection head output size and contrastive temperature (paper: 256, 1)."""

    projection_dim: int = 256
    """Output size of the projection head."""
    temperature: float = 1.0
    """Temperature of the contrastive loss; positive."""

    def problems(self) -> list[tuple[str, str]]:
        found = []
        if self.projection_dim < 1:
            found.append(("projection_dim", f"must be at least 1, got {self.projection_dim}"))
        if self.temperature <= 0:
            found.append(("temperature", f"must be positive, got {self.temperature}"))
        return found


FEDHP_SPACES = ("embedding", "features")


@dataclass(frozen=True)
class FedHPSettings:
    """[fedhp]: anchor weight lambda, prototype Adam lr, backbone weight decay, L_U init steps,
    the prototypes' space."""

    weight: float = 0.1
    """The anchor loss's weight lambda."""
    prototype_lr: float = 0.005
    """The prototypes' Adam learning rate."""
    weight_decay: float = 1e-4
    """The backbone's weight decay (its SGD: lr and momentum from [train])."""
    init_steps: int = 1000
    """Steps of the seeded hyperspherical initialisation of the prototypes (L_U)."""
    space: str = "embedding"
    """Where the prototypes live: "embedding" (the model's embedding layer, as every method
    here) or "features" (the features that layer reads, its own weights left out: the
    FedHP paper's 1,024 convolution features of FedAvg's MNIST CNN)."""

    def problems(self) -> list[tuple[str, str]]:
        found = [(key, f"must be non-negative, got {getattr(self, key)}")
                 for key in ("weight", "weight_decay") if getattr(self, key) < 0]
        if self.space not in FEDHP_SPACES:
            found.append(("space", f"must be one of {FEDHP_SPACES}, got {self.space!r}"))
        if self.prototype_lr <= 0:
            found.append(("prototype_lr", f"must be positive, got {self.prototype_lr}"))
        if self.init_steps < 1:
            found.append(("init_steps", f"must be at least 1, got {self.init_steps}"))
        return found


@dataclass(frozen=True)
class FedPRSettings:
    """[fedpr]: the weight on the l2 distance to the global prototype (Eq. 4 has none: 1)."""

    weight: float = 1.0
    """The weight on the l2 distance to the global prototype."""
    distance: str = "l2"
    """"l2": the Euclidean distance (our reading of Eq. 4); "squared": its square."""
    features: str = "raw"
    """"raw": the embedding as the model gives it (Eq. 4); "normalized": embedding and
    prototype scaled to unit length before the distance."""

    def problems(self) -> list[tuple[str, str]]:
        found = [] if self.weight >= 0 else [("weight",
                                               f"must be non-negative, got {self.weight}")]
        return found + choice_problems(self, (("distance", FEDPR_DISTANCES),
                                              ("features", FEATURE_SPACES)))
