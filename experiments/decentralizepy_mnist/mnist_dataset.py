"""MNIST and the 784-256-128-10 MLP for decentralizepy (which ships neither).

Named in config.ini as `dataset_package = mnist_dataset` (launch.py puts this folder on the
path). Runs in decentralizepy's own venv: it imports decentralizepy, never protofed. Like
decentralizepy's dataset classes, every node reads the whole training file and keeps its
own partition (drawn by decentralizepy's DataPartitioner); images are standardised with
MNIST's mean and std, as protofed does.
"""

import gzip
import logging
from pathlib import Path

import numpy as np
import torch
from decentralizepy.datasets.Data import Data
from decentralizepy.datasets.Dataset import Dataset
from decentralizepy.datasets.Partitioner import DataPartitioner
from decentralizepy.models.Model import Model
from torch import nn
from torch.utils.data import DataLoader

NUM_CLASSES = 10
MEAN, STD = 0.1307, 0.3081
log = logging.getLogger(__name__)
FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
         "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}


def read_idx(path: Path) -> np.ndarray:
    """One IDX file (gzipped or not) as a numpy array of its stored shape."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        raw = handle.read()
    dims = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def find(folder: str, name: str) -> Path:
    """`name` or `name.gz` in folder."""
    for candidate in (Path(folder) / name, Path(folder) / f"{name}.gz"):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"no {name}[.gz] in {folder}")


def load_split(folder: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    """The uint8 images [N, 28, 28] and int64 labels [N] of "train" or "test"."""
    images, labels = (read_idx(find(folder, name)) for name in FILES[split])
    return images, labels.astype(np.int64)


def standardised(images: np.ndarray) -> np.ndarray:
    """float32 [N, 1, 28, 28], standardised."""
    return ((images.astype(np.float32) / 255.0 - MEAN) / STD)[:, None]


class MNIST(Dataset):
    """MNIST partitioned among decentralizepy's processes: `train_per_node` training images
    per node (0: an equal share of all 60,000) and `test_samples` test images (0: all)."""

    def __init__(self, rank, machine_id, mapping, random_seed=1234, only_local=False,
                 train_dir="", test_dir="", sizes="", test_batch_size=256,
                 validation_source="", validation_size="", train_per_node=0,
                 test_samples=0):
        super().__init__(rank, machine_id, mapping, random_seed, only_local, train_dir,
                         test_dir, sizes, test_batch_size, validation_source, validation_size)
        self.num_classes = NUM_CLASSES
        self.train_per_node, self.test_samples = int(train_per_node), int(test_samples)
        if self.__training__:
            self.load_trainset()
        if self.__testing__:
            self.load_testset()

    def partition_sizes(self, total: int) -> list[float]:
        """Fractions for DataPartitioner: `sizes` if given, else train_per_node each."""
        if self.sizes:
            return self.sizes
        share = self.train_per_node or total // self.num_partitions
        return [(share + 0.5) / total] * self.num_partitions

    def load_trainset(self) -> None:
        """Read the whole training file, keep this node's partition."""
        images, labels = load_split(self.train_dir, "train")
        sizes = self.partition_sizes(len(labels))
        mine = np.asarray(DataPartitioner(list(range(len(labels))), sizes,
                                          seed=self.random_seed).use(self.dataset_id).index)
        self.train_x, self.train_y = standardised(images[mine]), labels[mine]
        log.info("train_x.shape: %s", self.train_x.shape)

    def load_testset(self) -> None:
        """Read the test file; a seeded sample of `test_samples` of it when set."""
        images, labels = load_split(self.test_dir, "test")
        if 0 < self.test_samples < len(labels):
            pick = np.sort(np.random.RandomState(self.random_seed).choice(
                len(labels), self.test_samples, replace=False))
            images, labels = images[pick], labels[pick]
        self.test_x, self.test_y = standardised(images), labels
        log.info("test_x.shape: %s", self.test_x.shape)

    def get_trainset(self, batch_size=1, shuffle=False):
        """The local training set as decentralizepy's trainer iterates it."""
        if not self.__training__:
            raise RuntimeError("Training set not initialized!")
        return DataLoader(Data(self.train_x, self.train_y), batch_size=batch_size,
                          shuffle=shuffle)

    def get_testset(self):
        """The test set in batches of test_batch_size."""
        if not self.__testing__:
            raise RuntimeError("Test set not initialized!")
        return DataLoader(Data(self.test_x, self.test_y), batch_size=self.test_batch_size)

    def test(self, model, loss):
        """(accuracy in percent, mean batch loss) of the model on the test set."""
        model.eval()
        correct, seen, total_loss, batches = 0, 0, 0.0, 0
        with torch.no_grad():
            for images, labels in self.get_testset():
                logits = model(images)
                total_loss += loss(logits, labels).item()
                correct += int((logits.argmax(dim=1) == labels).sum())
                seen, batches = seen + len(labels), batches + 1
        accuracy = 100.0 * correct / seen
        log.info("Overall accuracy is: %.2f %%", accuracy)
        return accuracy, total_loss / batches


class MLP(Model):
    """784-256-128-10 with ReLUs: 235,146 parameters, protofed's examples/custom/mlp.py."""

    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),
                                    nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, NUM_CLASSES))

    def forward(self, x):
        return self.layers(x)
