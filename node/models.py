"""Teacher and student networks for ProFe: a two-layer CNN and CIFAR-style ResNets.

Every model maps images [B, C, H, W] to ``(logits, embedding)``. The embedding is the
ReLU output of the model's first linear layer, ``model.embed`` (size ``embedding_dim``),
and the logits are exactly ``model.classifier(embedding)``. A teacher and a student built
with the same ``embedding_dim`` therefore share an embedding space, which is what the
class prototypes and the student-teacher feature loss are computed in.
"""

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from node.architectures import (
    ARCHITECTURES,
    DEFAULT_EMBEDDING_DIM,
    STUDENT_CNN_CHANNELS,
    TEACHER_CNN_CHANNELS,
    check_widths,
    is_positive_int,
)
from node.errors import ConfigError

CNN_KERNEL_SIZE = 5

# Blocks per stage (node.architectures.RESNET_WIDTHS has the widths): He et al. 2016 (CIFAR,
# 6n+2 layers) and the usual CIFAR adaptation of ResNet18.
RESNET_BLOCKS = {
    "resnet8": (1, 1, 1),
    "resnet18": (2, 2, 2, 2),
    "resnet32": (5, 5, 5),
}


class CpuMaxPool2d(nn.MaxPool2d):
    """nn.MaxPool2d that pools a CPU batch without torch's NCHW max-pool kernel when no
    gradient is needed, with the same maxima: a 2x2 window is two elementwise maxima (of row
    pairs, then of column pairs), 6 to 8 times faster than channels-last pooling; any other
    window pools in channels-last layout (2 to 7 times faster than the NCHW kernel). With
    gradients it is nn.MaxPool2d: a channels-last pool with the NCHW backward kernel was
    faster alone but slowed a 20-node run's training by a fifth
    (experiments/reports/paper-default/notes.md)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (torch.is_grad_enabled() or x.device.type != "cpu" or x.dim() != 4
                or self.return_indices or torch._C._are_functorch_transforms_active()):
            return super().forward(x)
        if self._halves() and min(x.shape[-2:]) >= 2:
            # floor mode: an odd last row or column is left out, as max_pool2d does
            height, width = x.shape[-2] // 2 * 2, x.shape[-1] // 2 * 2
            rows = torch.maximum(x[..., 0:height:2, :width], x[..., 1:height:2, :width])
            return torch.maximum(rows[..., 0::2], rows[..., 1::2])
        pooled = F.max_pool2d(x.contiguous(memory_format=torch.channels_last), self.kernel_size,
                              self.stride, self.padding, self.dilation, self.ceil_mode)
        return pooled.contiguous()  # back to NCHW: the next layer computes as before

    def _halves(self) -> bool:
        """Whether this pool takes the max of each 2x2 block (window 2, stride 2, no padding
        or dilation, floor mode)."""
        return (self.kernel_size in (2, (2, 2)) and self.stride in (2, (2, 2))
                and self.padding in (0, (0, 0)) and self.dilation in (1, (1, 1))
                and not self.ceil_mode)


class CNN(nn.Module):
    """Two conv+max-pool+ReLU layers, then embed (Linear+ReLU) and a linear classifier;
    `padded` False: unpadded convolutions (FedAvg's MNIST CNN), each cutting 4 pixels."""

    def __init__(
        self,
        in_channels: int,
        image_size: int,
        num_classes: int,
        embedding_dim: int,
        channels: Sequence[int],
        padded: bool = True,
    ) -> None:
        super().__init__()
        c1, c2 = channels
        # "same" convolutions: only the pools shrink the image
        pad = CNN_KERNEL_SIZE // 2 if padded else 0
        # Pool before ReLU: max and ReLU commute exactly (outputs and gradients), and the
        # ReLU then touches a quarter of the values. Parameter names are unchanged.
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, c1, CNN_KERNEL_SIZE, padding=pad),
            CpuMaxPool2d(2),
            nn.ReLU(),
            nn.Conv2d(c1, c2, CNN_KERNEL_SIZE, padding=pad),
            CpuMaxPool2d(2),
            nn.ReLU(),
        )
        side = image_size // 4 if padded else ((image_size - 4) // 2 - 4) // 2
        self.embed = nn.Linear(c2 * side * side, embedding_dim)
        self.classifier = nn.Linear(embedding_dim, num_classes)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return (logits [B, num_classes], embedding [B, embedding_dim])."""
        h = self.features(x).flatten(1)
        emb = F.relu(self.embed(h))
        return self.classifier(emb), emb


class BasicBlock(nn.Module):
    """Two 3x3 conv+BN layers with an identity, or 1x1 conv+BN projection, shortcut."""

    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    """CIFAR-style ResNet: 3x3 stem, no stem pool, BasicBlock stages, global average pool."""

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        embedding_dim: int,
        widths: Sequence[int],
        blocks: Sequence[int],
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, widths[0], 3, stride=1, padding=1, bias=False),
            nn.BatchNorm2d(widths[0]),
            nn.ReLU(),
        )
        layers: list[nn.Module] = []
        in_planes = widths[0]
        for i, (width, n) in enumerate(zip(widths, blocks, strict=True)):
            for j in range(n):
                stride = 2 if i > 0 and j == 0 else 1
                layers.append(BasicBlock(in_planes, width, stride))
                in_planes = width
        self.stages = nn.Sequential(*layers)
        self.embed = nn.Linear(in_planes, embedding_dim)
        self.classifier = nn.Linear(embedding_dim, num_classes)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return (logits [B, num_classes], embedding [B, embedding_dim])."""
        h = self.stages(self.stem(x))
        h = F.adaptive_avg_pool2d(h, 1).flatten(1)
        emb = F.relu(self.embed(h))
        return self.classifier(emb), emb


def build_model(
    arch: str,
    *,
    in_channels: int,
    image_size: int,
    num_classes: int,
    embedding_dim: int,
    channels: Sequence[int] | None = None,
    key: str = "model.arch",
) -> nn.Module:
    """Build one of ARCHITECTURES; forward returns (logits, embedding).

    ``key`` is the config key that chose ``arch`` (e.g. "model.teacher"); errors name it, or
    f"{key}_channels" for bad ``channels``. ``channels=None`` means the architecture's default
    widths (TEACHER_CNN_CHANNELS for "cnn").
    """
    if arch not in ARCHITECTURES:
        raise ConfigError(f"{key}: unknown architecture {arch!r}, expected one of {ARCHITECTURES}")
    for name, value in (
        ("in_channels", in_channels),
        ("image_size", image_size),
        ("num_classes", num_classes),
        ("model.embedding_dim", embedding_dim),
    ):
        if not is_positive_int(value):
            raise ConfigError(f"{name}: must be a positive integer, got {value!r}")

    widths = check_widths(arch, channels, key)

    if arch in ("cnn", "fedavg_cnn"):
        least = 4 if arch == "cnn" else 16
        if image_size < least:
            raise ConfigError(f"image_size: {arch} needs at least {least} pixels, got "
                              f"{image_size}")
        return CNN(in_channels, image_size, num_classes, embedding_dim, widths,
                   padded=arch == "cnn")
    return ResNet(in_channels, num_classes, embedding_dim, widths, RESNET_BLOCKS[arch])


def parameter_count(model: nn.Module) -> int:
    """Number of scalar parameters (trainable or not; BatchNorm buffers excluded)."""
    return sum(p.numel() for p in model.parameters())


# The names and widths are node.architectures' (torch-free, for the config); re-exported.
__all__ = ["ARCHITECTURES", "CNN", "CNN_KERNEL_SIZE", "DEFAULT_EMBEDDING_DIM", "RESNET_BLOCKS",
           "STUDENT_CNN_CHANNELS", "TEACHER_CNN_CHANNELS", "BasicBlock", "CpuMaxPool2d",
           "ResNet", "build_model", "check_widths", "parameter_count"]
