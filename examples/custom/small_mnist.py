"""A dataset of your own for protofed: MNIST shrunk to 14x14 pixels, read straight from the
standard IDX files with gzip and numpy (nothing of protofed's).

Named in a config as `data.dataset = "small_mnist:load"` (this folder is the config's, so
`small_mnist` imports). protofed calls the loader with the run's data folder and checks
what it returns: images as uint8 [N, H, W] or [N, C, H, W] with H == W, integer labels [N]
from 0, and optionally the number of classes. It pools them, carves out the global test set
and splits the rest among the nodes like a built-in dataset.
"""

import gzip
from pathlib import Path

import numpy as np

FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
         "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def read_idx(path: Path) -> np.ndarray:
    """One IDX file (gzipped or not) as a uint8 array of its stated shape."""
    if not path.exists():
        path = path.with_name(path.name + ".gz")
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    dims = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(data_dir: Path) -> tuple[np.ndarray, np.ndarray, int]:
    """MNIST's train and test images, each 2x2 block averaged (28x28 -> 14x14), and labels."""
    raw = data_dir / "MNIST" / "raw"
    train_x, train_y, test_x, test_y = (read_idx(raw / name) for name in FILES)
    images = np.concatenate([train_x, test_x]).astype(np.uint16)
    small = images.reshape(-1, 14, 2, 14, 2).sum(axis=(2, 4)) // 4
    return small.astype(np.uint8), np.concatenate([train_y, test_y]).astype(np.int64), 10
