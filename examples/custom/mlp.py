"""A model of your own for protofed: the 784-256-128-10 multilayer perceptron.

Named in a config as `model.teacher = "mlp:mlp"` (this folder is the config's, so `mlp`
imports). protofed calls the factory with keyword arguments and checks what it returns: a
module whose forward gives (logits, embedding), with `classifier` mapping the embedding to
the logits. ProFe asks for a teacher and a student; single-model methods for the teacher.
"""

import torch
from torch import nn

HIDDEN = {"teacher": 256, "student": 128}


class MLP(nn.Module):
    """Flatten, one hidden layer, the embedding layer, then the classifier."""

    def __init__(self, inputs: int, hidden: int, embedding_dim: int, num_classes: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(inputs, hidden), nn.ReLU(),
                                  nn.Linear(hidden, embedding_dim), nn.ReLU())
        self.classifier = nn.Linear(embedding_dim, num_classes)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        embedding = self.body(images)
        return self.classifier(embedding), embedding


def mlp(*, role: str, in_channels: int, image_size: int, num_classes: int,
        embedding_dim: int) -> MLP:
    """784-256-128-10 on MNIST for the teacher; a 128-unit hidden layer for the student."""
    return MLP(in_channels * image_size * image_size, HIDDEN[role], embedding_dim, num_classes)
