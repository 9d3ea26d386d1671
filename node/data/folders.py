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


def read_split(path: Path, prefix: str, num_classes: int,
               image_shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 [n, C, H, W], labels int64) stored under `prefix` ("train", "test",
    or "" for a global test set's `images`, `labels`) in `path`, checked: one line naming
    the file and the field for a bad one."""
    name = (lambda field: f"{prefix}_{field}") if prefix else (lambda field: field)
    try:
        with np.load(path, allow_pickle=False) as stored:
            for key in (name("images"), name("labels")):
                if key not in stored.files:
                    raise DataError(f"{path}: no array {key!r}")
            images, labels = stored[name("images")], stored[name("labels")]
    except FileNotFoundError:
        raise DataError(f"{path}: missing") from None
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: not a readable .npz file ({exc})") from None
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


def stored_classes(path: Path) -> int:
    """The `num_classes` a node's file declares (a node knows its task from its own file)."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            if "num_classes" not in stored.files:
                raise DataError(f"{path}: no array 'num_classes' (the task's class count)")
            value = stored["num_classes"]
    except FileNotFoundError:
        raise DataError(f"{path}: missing (write the node folders with `protofed partition`, "
                        "or as the command line page describes)") from None
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: not a readable .npz file ({exc})") from None
    if value.shape != () or not np.issubdtype(value.dtype, np.integer) or int(value) < 2:
        raise DataError(f"{path}: num_classes must be one integer of at least 2, got "
                        f"{value.dtype} {value.tolist()}")
    return int(value)


def image_shape(path: Path) -> tuple[int, ...]:
    """[C, H, W] of the training images a node's file holds ([H, W] is one channel)."""
    with np.load(path, allow_pickle=False) as stored:
        shape = tuple(stored["train_images"].shape[1:]) if "train_images" in stored.files \
            else ()
    return shape if len(shape) == 3 else (1, *shape)
