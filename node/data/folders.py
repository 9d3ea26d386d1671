"""A node's own data on disk: the folder format `protofed partition` writes and a user can
write from their own arrays. One folder per node, `node-<i>/data.npz`, holding

- `train_images`, `test_images`: uint8, [n, C, H, W] (or [n, H, W] for one channel),
- `train_labels`, `test_labels`: integers in 0..num_classes-1, one per image,
- `num_classes`: one integer, the classes of the whole task (a node may hold fewer),

an optional `global-test/data.npz` (`images`, `labels`, `num_classes`: a public evaluation
set every node may hold), and `manifest.json`: the dataset's name, class count and image shape, and per
node its samples per class and the file's SHA-256.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from node.errors import DataError

FORMAT = 1
MANIFEST = "manifest.json"
DATA_FILE = "data.npz"
GLOBAL_TEST = "global-test"


def node_folder(root: Path, node: int) -> Path:
    return root / f"node-{node}"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_arrays(folder: Path, **arrays: np.ndarray) -> str:
    """`folder`/data.npz holding `arrays` (written whole, then renamed into place); its
    SHA-256."""
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{DATA_FILE}.partial"
    with open(partial, "wb") as handle:
        np.savez(handle, **arrays)
    os.replace(partial, folder / DATA_FILE)
    return file_sha256(folder / DATA_FILE)


def per_class(labels: np.ndarray, num_classes: int) -> list[int]:
    return np.bincount(labels.astype(np.int64), minlength=num_classes).tolist()


def read_manifest(root: Path) -> dict[str, Any] | None:
    """The folder's manifest, None when it has none; DataError when it is not one."""
    path = root / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: not a partition manifest ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise DataError(f"{path}: not a partition manifest of format {FORMAT}")
    return manifest


@dataclass(frozen=True)
class NodeArrays:
    """A node's file, checked: the task's class count, (images uint8 [n, C, H, W], labels
    int64) of its training and of its local test samples."""

    num_classes: int
    train: tuple[np.ndarray, np.ndarray]
    test: tuple[np.ndarray, np.ndarray]


def read_node(path: Path) -> NodeArrays:
    """A node's data.npz, opened once and checked field by field."""
    arrays = _stored(path)
    classes = _classes(path, arrays)
    train_images = arrays.get("train_images")
    shape = () if train_images is None else tuple(train_images.shape[1:])
    shape = shape if len(shape) == 3 else (1, *shape)  # [H, W] is one channel
    return NodeArrays(classes, _checked(path, arrays, "train", classes, shape),
                      _checked(path, arrays, "test", classes, shape))


def read_split(path: Path, prefix: str, num_classes: int,
               image_shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 [n, C, H, W], labels int64) stored under `prefix` ("train", "test",
    or "" for a global test set's `images`, `labels`) in `path`, checked: one line naming
    the file and the field for a bad one."""
    return _checked(path, _stored(path), prefix, num_classes, image_shape)


def _stored(path: Path) -> dict[str, np.ndarray]:
    """Every array of an .npz file (no pickled objects), or one line saying why not."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            return {key: stored[key] for key in stored.files}
    except FileNotFoundError:
        raise DataError(f"{path}: missing (write the node folders with `protofed partition`, "
                        "or as the command line page describes)") from None
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: not a readable .npz file ({exc})") from None


def _classes(path: Path, arrays: dict[str, np.ndarray]) -> int:
    """The `num_classes` a node's file declares (a node knows its task from its own file)."""
    if "num_classes" not in arrays:
        raise DataError(f"{path}: no array 'num_classes' (the task's class count)")
    value = arrays["num_classes"]
    if value.shape != () or not np.issubdtype(value.dtype, np.integer) or int(value) < 2:
        raise DataError(f"{path}: num_classes must be one integer of at least 2, got "
                        f"{value.dtype} {value.tolist()}")
    return int(value)


def _checked(path: Path, arrays: dict[str, np.ndarray], prefix: str, num_classes: int,
             image_shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The images and labels under `prefix` in `arrays`, checked (see read_split)."""
    name = (lambda field: f"{prefix}_{field}") if prefix else (lambda field: field)
    for key in (name("images"), name("labels")):
        if key not in arrays:
            raise DataError(f"{path}: no array {key!r}")
    images, labels = arrays[name("images")], arrays[name("labels")]
    if images.ndim == 3:
        images = images[:, None]
    if images.dtype != np.uint8 or images.shape[1:] != tuple(image_shape):
        raise DataError(f"{path}: {name('images')} must be uint8 of shape [n, "
                        f"{', '.join(map(str, image_shape))}], got {images.dtype} "
                        f"{list(images.shape)}")
    if labels.ndim != 1 or len(labels) != len(images) or not np.issubdtype(labels.dtype,
                                                                          np.integer):
        raise DataError(f"{path}: {name('labels')} must be {len(images)} integers, got "
                        f"{labels.dtype} {list(labels.shape)}")
    if len(labels) and (labels.min() < 0 or labels.max() >= num_classes):
        raise DataError(f"{path}: {name('labels')} must lie in 0..{num_classes - 1}, found "
                        f"{int(labels.min())}..{int(labels.max())}")
    return images, labels.astype(np.int64)


@dataclass(frozen=True)
class FolderCheck:
    """What the check of one node's folder found: whether it holds local test samples, and
    whether the global test set lies beside it."""

    has_test: bool
    global_test: bool


def check_node_folder(root: Path, node: int, manifest: dict[str, Any] | None) -> FolderCheck:
    """Node `node`'s folder under `root` read and checked as the node will read it: a missing
    or bad file, no training sample, or counts that disagree with `manifest` (when it lists
    the node) raise DataError in one line naming the node and the file."""
    path = node_folder(root, node) / DATA_FILE
    try:
        own = read_node(path)
    except DataError as exc:
        raise DataError(f"node {node}: {exc}") from None
    classes, train, test = own.num_classes, own.train, own.test
    if not len(train[1]):
        raise DataError(f"node {node}: {path} holds no training sample")
    listed = {n.get("node"): n for n in (manifest or {}).get("nodes", [])
              if isinstance(n, dict)}
    expected = listed.get(node, {}).get("train_per_class")
    if expected is not None and per_class(train[1], classes) != expected:
        raise DataError(f"node {node}: {path} holds {per_class(train[1], classes)} "
                        f"training samples per class, its manifest says {expected}")
    return FolderCheck(bool(len(test[1])), (root / GLOBAL_TEST / DATA_FILE).is_file())
