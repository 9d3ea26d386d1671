"""The built-in architectures by name, their widths and the paper's teacher/student pairs:
what the config checks, without torch (node.models builds them)."""

from collections.abc import Sequence

from node.errors import ConfigError

ARCHITECTURES = ("cnn", "fedavg_cnn", "resnet8", "resnet18", "resnet32")

# Sized so one epoch of teacher + student over 10k MNIST samples (batch 64) takes under
# ~10 s on one CPU thread, while both still pass 98% MNIST test accuracy after two epochs.
TEACHER_CNN_CHANNELS = (16, 32)
STUDENT_CNN_CHANNELS = tuple(c // 2 for c in TEACHER_CNN_CHANNELS)
DEFAULT_EMBEDDING_DIM = 128
# FedAvg's MNIST CNN (McMahan et al. 2017) as the FedHP paper counts it (582,026 parameters
# with embedding_dim 512): the CNN's layers with unpadded convolutions.
FEDAVG_CNN_CHANNELS = (32, 64)

# Stage widths: He et al. 2016 (CIFAR, 6n+2 layers) and the usual CIFAR adaptation of
# ResNet18.
RESNET_WIDTHS = {
    "resnet8": (16, 32, 64),
    "resnet18": (64, 128, 256, 512),
    "resnet32": (16, 32, 64),
}

# The paper's teacher/student pairs (section IV); "auto" in [model] picks these.
PAPER_PAIRS = {
    "mnist": ("cnn", "cnn"),
    "fashion_mnist": ("cnn", "cnn"),
    "cifar10": ("resnet18", "resnet8"),
    "cifar100": ("resnet32", "resnet18"),
}
USER_DATASET_PAIR = ("cnn", "cnn")  # any channels and image size; widths as for MNIST


def is_positive_int(value: object) -> bool:
    """Whether `value` is an int above 0 (bool excluded)."""
    # bool is an int subclass; True must not pass as a width of 1
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def check_widths(arch: str, channels: Sequence[int] | None, key: str = "model.arch"
                 ) -> tuple[int, ...]:
    """The layer widths `arch` is built with; ConfigError naming f"{key}_channels" if
    `channels` (None = the defaults) has the wrong length or a non-positive width."""
    if arch not in ARCHITECTURES:
        raise ConfigError(f"{key}: unknown architecture {arch!r}, expected one of {ARCHITECTURES}")
    channels_key = f"{key}_channels"
    default = {"cnn": TEACHER_CNN_CHANNELS, "fedavg_cnn": FEDAVG_CNN_CHANNELS}.get(
        arch, RESNET_WIDTHS.get(arch))
    if channels is None:
        return tuple(default)
    if isinstance(channels, str | bytes) or not isinstance(channels, Sequence):
        raise ConfigError(f"{channels_key}: must be a list of integers, got {channels!r}")
    widths = tuple(channels)
    if len(widths) != len(default):
        raise ConfigError(f"{channels_key}: {arch} needs {len(default)} widths, got {len(widths)}")
    if not all(is_positive_int(c) for c in widths):
        raise ConfigError(f"{channels_key}: widths must be positive integers, got {widths}")
    return widths


def role_architecture(arch: str, role: str, dataset: str) -> str:
    """The architecture a teacher or student gets: `arch`, or the paper's pair for "auto"."""
    if arch != "auto":
        return arch
    return PAPER_PAIRS.get(dataset, USER_DATASET_PAIR)[0 if role == "teacher" else 1]
