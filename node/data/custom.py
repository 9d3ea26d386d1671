"""Models and datasets of the user's own, named by import path "package.module:name".

A model factory is called as ``factory(role=..., in_channels=..., image_size=...,
num_classes=..., embedding_dim=...)`` (role: "teacher" or "student"; single-model methods
train the teacher) and returns an ``nn.Module`` that every method can train:

- ``forward(images [B, C, H, W])`` returns ``(logits [B, num_classes], embedding [B, D])``;
- ``model.classifier`` is an ``nn.Linear(D, num_classes)`` and the logits are exactly
  ``model.classifier(embedding)`` (prototype methods average embeddings, and FedHP and
  FedProc replace the classifier).

The contract is checked once, on a batch of the dataset's shape, before any node starts.

A dataset loader is called as ``loader(data_dir)`` (the run's data folder, a ``Path``) and
returns ``(images, labels)`` or ``(images, labels, num_classes)``: images uint8 (0-255)
``[N, H, W]`` or ``[N, C, H, W]`` with H == W, labels integers ``[N]`` in
``0..num_classes-1`` (num_classes defaults to the largest label + 1). protofed pools them,
carves out the global test set and splits the rest among the nodes as for a built-in
dataset, standardising pixels with the dataset's own mean and std.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from node.architectures import DEFAULT_EMBEDDING_DIM
from node.errors import ConfigError

if TYPE_CHECKING:  # torch is imported when a model is built: config validation needs none
    from torch import nn

CHECK_BATCH = 2


def is_import_path(value: str) -> bool:
    """Whether a [model] or [data] value names user code rather than a built-in."""
    return ":" in value


def resolve(path: str, key: str) -> Callable:
    """The callable that "package.module:name" names; ConfigError naming `key` otherwise."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"{key} = {path!r}: an import path is \"package.module:name\"")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{key} = {path!r}: cannot import {module_name!r} ({exc}); the "
                          "module must be on the Python path (the config file's folder and "
                          "the current directory are)") from None
    except Exception as exc:  # noqa: BLE001 - the user's module raised while importing
        raise ConfigError(f"{key} = {path!r}: importing {module_name!r} raised "
                          f"{type(exc).__name__}: {exc}") from None
    target = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ConfigError(f"{key} = {path!r}: {module_name!r} has no {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ConfigError(f"{key} = {path!r}: {attribute!r} is not callable")
    return target


def add_search_path(folder: Path) -> None:
    """Let import paths find modules in `folder` (the config file's) and the current one."""
    for entry in (str(folder.resolve()), str(Path.cwd())):
        if entry not in sys.path:
            sys.path.insert(0, entry)


def build_model(path: str, key: str, *, role: str, in_channels: int, image_size: int,
                num_classes: int, embedding_dim: int) -> nn.Module:
    """The user's model for `role`, checked against the contract on a batch of zeros."""
    factory = resolve(path, key)
    try:
        model = factory(role=role, in_channels=in_channels, image_size=image_size,
                        num_classes=num_classes, embedding_dim=embedding_dim)
    except Exception as exc:  # noqa: BLE001 - the user's factory: say what it raised
        raise ConfigError(f"{key} = {path!r}: the factory raised {type(exc).__name__}: "
                          f"{exc}") from None
    check_model(model, f"{key} = {path!r}", in_channels, image_size, num_classes)
    return model


def check_model(model: object, where: str, in_channels: int, image_size: int,
                num_classes: int) -> None:
    """Raise ConfigError naming `where` unless `model` meets the contract above."""
    import torch
    from torch import nn

    if not isinstance(model, nn.Module):
        raise ConfigError(f"{where}: the factory must return a torch.nn.Module, got "
                          f"{type(model).__name__}")
    classifier = getattr(model, "classifier", None)
    if not isinstance(classifier, nn.Linear):
        raise ConfigError(f"{where}: the model needs a `classifier` attribute that is an "
                          "nn.Linear from the embedding to the logits")
    images = torch.zeros(CHECK_BATCH, in_channels, image_size, image_size)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            output = model(images)
            if not (isinstance(output, tuple) and len(output) == 2
                    and all(isinstance(t, torch.Tensor) for t in output)):
                raise ConfigError(f"{where}: forward must return a (logits, embedding) pair "
                                  f"of tensors, got {_describe(output)}")
            logits, embedding = output
            if tuple(logits.shape) != (CHECK_BATCH, num_classes):
                raise ConfigError(f"{where}: logits must be [batch, {num_classes}], got "
                                  f"{list(logits.shape)} for a batch of {CHECK_BATCH} images "
                                  f"[{in_channels}, {image_size}, {image_size}]")
            if embedding.dim() != 2 or embedding.shape[0] != CHECK_BATCH:
                raise ConfigError(f"{where}: the embedding must be [batch, D], got "
                                  f"{list(embedding.shape)}")
            if classifier.in_features != embedding.shape[1] \
                    or classifier.out_features != num_classes:
                raise ConfigError(
                    f"{where}: classifier is Linear({classifier.in_features}, "
                    f"{classifier.out_features}) but the embedding has {embedding.shape[1]} "
                    f"features and there are {num_classes} classes")
            if not torch.allclose(classifier(embedding), logits, atol=1e-5):
                raise ConfigError(f"{where}: the logits must be model.classifier(embedding) "
                                  "(prototype methods rely on it)")
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's forward: say what it raised
        raise ConfigError(f"{where}: forward on a batch of [{CHECK_BATCH}, {in_channels}, "
                          f"{image_size}, {image_size}] raised {type(exc).__name__}: "
                          f"{exc}") from None
    finally:
        model.train(was_training)


def _describe(output: object) -> str:
    if isinstance(output, tuple | list):
        return f"{type(output).__name__} of {len(output)}"
    return type(output).__name__


def check_models(config, in_channels: int, image_size: int, num_classes: int) -> int:
    """Build and check every user model the federation's nodes will build; how many."""
    checked = set()
    for node_id in range(config.nodes):
        models = config.model.for_node(node_id)
        for role in ("teacher", "student"):
            path = getattr(models, role)
            if is_import_path(path) and (path, role) not in checked:
                checked.add((path, role))
                build_model(path, f"model.{role}", role=role, in_channels=in_channels,
                            image_size=image_size, num_classes=num_classes,
                            embedding_dim=models.embedding_dim or DEFAULT_EMBEDDING_DIM)
    return len(checked)


def load_user_dataset(path: str, data_dir: Path) -> tuple[np.ndarray, np.ndarray, int]:
    """Call the user's loader and check what it returns against the contract above:
    (images uint8 [N, C, H, W], labels int64 [N], num_classes); ConfigError otherwise."""
    where = f"data.dataset = {path!r}"
    loader = resolve(path, "data.dataset")
    try:
        returned = loader(Path(data_dir))
    except Exception as exc:  # noqa: BLE001 - the user's loader: say what it raised
        raise ConfigError(f"{where}: the loader raised {type(exc).__name__}: {exc}") from None
    if not (isinstance(returned, tuple | list) and len(returned) in (2, 3)):
        raise ConfigError(f"{where}: the loader must return (images, labels) or (images, "
                          f"labels, num_classes), got {_describe(returned)}")
    images = _as_array(returned[0], where, "images")
    labels = _as_array(returned[1], where, "labels")
    return check_dataset(images, labels, returned[2] if len(returned) == 3 else None, where)


def check_dataset(images: np.ndarray, labels: np.ndarray, num_classes: object,
                  where: str) -> tuple[np.ndarray, np.ndarray, int]:
    """The arrays in protofed's layout (uint8 [N, C, H, W], int64 [N]) and the class count,
    or ConfigError naming `where` and the first broken rule."""
    if images.dtype != np.uint8:
        raise ConfigError(f"{where}: images must be uint8 pixel values 0-255, got "
                          f"{images.dtype} (scale floats in [0, 1] by 255 and cast)")
    given = list(images.shape)
    if images.ndim == 3:
        images = images[:, None]  # one channel
    if images.ndim != 4 or images.shape[2] != images.shape[3] or images.shape[2] < 1:
        raise ConfigError(f"{where}: images must be [N, H, W] or [N, C, H, W] with H == W, "
                          f"got shape {given}")
    if labels.ndim != 1 or len(labels) != len(images):
        raise ConfigError(f"{where}: labels must be [N] with N = {len(images)} (one per "
                          f"image), got shape {list(labels.shape)}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise ConfigError(f"{where}: labels must be integers, got {labels.dtype}")
    if len(labels) == 0:
        raise ConfigError(f"{where}: the loader returned no images")
    if labels.min() < 0:
        raise ConfigError(f"{where}: labels must be 0 or more, got {labels.min()}")
    classes = int(labels.max()) + 1 if num_classes is None else num_classes
    if isinstance(classes, bool) or not isinstance(classes, int | np.integer) or classes < 2:
        raise ConfigError(f"{where}: num_classes must be an integer of at least 2, got "
                          f"{classes!r}")
    if labels.max() >= classes:
        raise ConfigError(f"{where}: labels must be below num_classes = {classes}, got "
                          f"{labels.max()}")
    if images.min() == images.max():
        raise ConfigError(f"{where}: every pixel of every image is {images.min()}: "
                          "nothing to learn from")
    return (np.ascontiguousarray(images), np.ascontiguousarray(labels, dtype=np.int64),
            int(classes))


def _as_array(value: object, where: str, what: str) -> np.ndarray:
    """A numpy array (or array-like, such as a CPU tensor) as a numpy array."""
    try:
        return np.asarray(value)
    except Exception as exc:  # noqa: BLE001 - whatever the loader returned
        raise ConfigError(f"{where}: {what} must be an array, got {type(value).__name__} "
                          f"({exc})") from None
