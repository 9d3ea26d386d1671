"""Load MNIST, Fashion-MNIST, CIFAR-10 and CIFAR-100 from their standard files as uint8 arrays,
or a dataset of the user's own from its loader (`node.data.custom`).

Each dataset is the standard train split followed by the standard test split, pooled: the
federation carves its own global test set out of the pool (see `node.data.partition`). It is
decoded once into a memory-mapped cache beside the data (`node.data.cache`); the launcher
fetches missing files and builds that cache before any node starts (`ensure_dataset`).
"""

from __future__ import annotations

import codecs
import gzip
import hashlib
import logging
import os
import pickle
import shutil
import tarfile
import urllib.request
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

import numpy as np

from node.data.cache import atomic_write, cached_arrays, make_dirs, remove_empty
from node.data.custom import is_import_path, load_user_dataset
from node.errors import ConfigError, DataError

try:
    from numpy._core import multiarray as _np_multiarray
    from numpy._core import numeric as _np_numeric
except ImportError:  # numpy < 2 has no numpy._core
    from numpy.core import multiarray as _np_multiarray
    from numpy.core import numeric as _np_numeric

log = logging.getLogger(__name__)

DATASETS = ("mnist", "fashion_mnist", "cifar10", "cifar100")
# Set by launchers whose nodes get the dataset from an image they did not build (Swarm):
# the node checks every file's md5 before using it.
VERIFY_ENV = "PROTOFED_VERIFY_DATA"

IDX_FOLDERS = {"mnist": "MNIST", "fashion_mnist": "FashionMNIST"}
IDX_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


@dataclass(frozen=True)
class CifarLayout:
    """Where one CIFAR variant's python batches live and how its labels are keyed."""

    folder: str
    batches: tuple[str, ...]
    label_key: bytes
    num_classes: int
    archive: str


CIFAR_LAYOUTS = {
    "cifar10": CifarLayout(
        folder="cifar-10-batches-py",
        batches=tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch",),
        label_key=b"labels",
        num_classes=10,
        archive="cifar-10-python.tar.gz",
    ),
    "cifar100": CifarLayout(
        folder="cifar-100-python",
        batches=("train", "test"),
        label_key=b"fine_labels",
        num_classes=100,
        archive="cifar-100-python.tar.gz",
    ),
}

# Base URLs a missing file is fetched from (file name appended); tests point these at 127.0.0.1.
BASE_URLS = {
    "mnist": "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "fashion_mnist": "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
    "cifar10": "https://www.cs.toronto.edu/~kriz/",
    "cifar100": "https://www.cs.toronto.edu/~kriz/",
}

# IDX entries are md5s of the UNCOMPRESSED files: mirrors recompress the .gz, the content is stable.
# CIFAR entries are md5s of the archives as published.
MD5SUMS = {
    "mnist": {
        "train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
        "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
        "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
        "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637",
    },
    "fashion_mnist": {
        "train-images-idx3-ubyte": "f4a8712d7a061bf5bd6d2ca38dc4d50a",
        "train-labels-idx1-ubyte": "9018921c3c673c538a1fc5bad174d6f9",
        "t10k-images-idx3-ubyte": "8181f5470baa50b63fa0f6fddb340f0a",
        "t10k-labels-idx1-ubyte": "15d484375f8d13e6eb1aabb0c3f46965",
    },
    "cifar10": {"cifar-10-python.tar.gz": "c58f30108f718f92721af3b95e74349a"},
    "cifar100": {"cifar-100-python.tar.gz": "eb9058c3a382ffc7106e4002c42a8d85"},
}

DOWNLOAD_TIMEOUT_S = 30.0

_IDX_DTYPES = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_GZIP_MAGIC = b"\x1f\x8b"
_FIX_HINT = (
    "put the files there, or set PROTOFED_DATA_DIR (or the config key data.dir) "
    "to a folder that has them"
)


@dataclass(frozen=True, eq=False)
class Dataset:
    """Pooled train+test images (uint8 [N, C, H, W]) and labels (int64 [N])."""

    name: str
    images: np.ndarray
    labels: np.ndarray
    num_classes: int
    # Pixel (mean, std) on the 0-1 scale for a user's dataset; the built-ins use the usual
    # published figures (`node.runtime.NORMALIZATION`).
    normalization: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        """Reject arrays that break the documented dtypes and shapes."""
        if self.images.dtype != np.uint8 or self.images.ndim != 4:
            raise DataError(f"{self.name}: images must be uint8 [N, C, H, W], "
                            f"got {self.images.dtype} {self.images.shape}")
        if self.labels.dtype != np.int64 or self.labels.shape != (len(self.images),):
            raise DataError(f"{self.name}: labels must be int64 [{len(self.images)}], "
                            f"got {self.labels.dtype} {self.labels.shape}")
        _check_label_range(self.labels, self.num_classes, self.name)


def default_data_dir() -> Path:
    """The data folder: $PROTOFED_DATA_DIR if set, else ./data."""
    env = os.environ.get("PROTOFED_DATA_DIR")
    return Path(env) if env else Path("data")


def load_dataset(name: str, data_dir: str | Path | None = None, download: bool = True) -> Dataset:
    """Load `name` (one of DATASETS, or a loader's import path "package.module:name") from
    `data_dir`, downloading a built-in's missing files if allowed."""
    if name not in DATASETS and not is_import_path(name):
        raise ConfigError(f"data.dataset: unknown dataset {name!r}; choose one of {DATASETS} "
                          "or name a loader of yours as \"package.module:function\"")
    root = Path(data_dir) if data_dir is not None else default_data_dir()
    key = (name, str(root.resolve()))
    if key in _LOADED:  # decoded once per process; forked nodes share it copy-on-write
        return _LOADED[key]
    if is_import_path(name):
        dataset = _load_user_dataset(name, root)
    elif name in IDX_FOLDERS:
        dataset = _load_idx_dataset(name, root, download)
    else:
        dataset = _load_cifar(name, root, download)
    dataset.images.flags.writeable = False  # shared by every node of the process
    dataset.labels.flags.writeable = False
    log.info("loaded %s: %d images %s from %s", name, len(dataset.labels),
             dataset.images.shape[1:], root)
    _LOADED[key] = dataset
    return dataset


_LOADED: dict[tuple[str, str], Dataset] = {}


def _load_user_dataset(path: str, root: Path) -> Dataset:
    images, labels, num_classes = load_user_dataset(path, root.absolute())
    return Dataset(name=path, images=images, labels=labels, num_classes=num_classes,
                   normalization=pixel_statistics(images))


def dataset_sources(name: str, data_dir: str | Path) -> list[Path]:
    """The files a built-in dataset is read from (none downloaded: DataError if missing)."""
    root = Path(data_dir)
    if name in IDX_FOLDERS:
        return list(_idx_sources(name, root, download=False).values())
    if name in CIFAR_LAYOUTS:
        return _cifar_sources(name, root, download=False)
    raise ConfigError(f"data.dataset = {name!r} is not a built-in dataset: only those can be "
                      "shipped to other machines in the node image")


def pixel_statistics(images: np.ndarray, chunk: int = 1 << 22) -> tuple[float, float]:
    """Exact mean and std of uint8 pixels on the 0-1 scale, from a 256-bin histogram built
    chunk by chunk (no float copy of the images)."""
    flat = images.reshape(-1)
    counts = np.zeros(256, dtype=np.int64)
    for start in range(0, len(flat), chunk):
        counts += np.bincount(flat[start:start + chunk], minlength=256)
    values = np.arange(256, dtype=np.float64) / 255.0
    total = counts.sum()
    mean = float(counts @ values / total)
    return mean, float(np.sqrt(counts @ (values - mean) ** 2 / total))


def ensure_dataset(name: str, data_dir: str | Path | None = None,
                   download: bool = True) -> Path | None:
    """Find, or download and verify, every file of a built-in dataset, then build or check
    its decoded-array cache: run once by the launcher, before any node starts (nodes load
    with download=False). Returns the folder the decoded arrays are mapped from: None when
    they could only be decoded into memory, and for a user's dataset, which is loaded (its
    contract checked) and kept in this process, which the nodes fork from."""
    root = Path(data_dir) if data_dir is not None else default_data_dir()
    if is_import_path(name):
        load_dataset(name, root)
        return None
    if name in IDX_FOLDERS:
        _, cache = _cached_idx(name, root, download)
    elif name in CIFAR_LAYOUTS:
        _, cache = _cached_cifar(name, root, download)
    else:
        raise ConfigError(f"data.dataset: unknown dataset {name!r}; choose one of {DATASETS}")
    return cache


# ---------------------------------------------------------------- IDX (MNIST, Fashion-MNIST)


def read_idx(path: Path) -> np.ndarray:
    """Read one IDX file (gzip detected by its magic bytes) into a native-endian array."""
    path = Path(path)
    content = _read_maybe_gzip(path)
    if len(content) < 4:
        raise DataError(f"{path}: too short for an IDX header ({len(content)} bytes)")
    if content[0] != 0 or content[1] != 0:
        raise DataError(f"{path}: bad IDX magic number {content[:4].hex()} (must start 0000)")
    dtype = _IDX_DTYPES.get(content[2])
    if dtype is None:
        raise DataError(f"{path}: unknown IDX dtype code 0x{content[2]:02x}")
    ndim = content[3]
    header = 4 + 4 * ndim
    if ndim == 0 or len(content) < header:
        raise DataError(f"{path}: IDX header with {ndim} dimensions is invalid or truncated")
    dims = tuple(int.from_bytes(content[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    expected = int(np.prod(dims, dtype=object)) * dtype.itemsize
    if len(content) - header != expected:
        raise DataError(f"{path}: IDX dims {dims} need {expected} data bytes, "
                        f"file has {len(content) - header} (truncated or corrupt)")
    array = np.frombuffer(content, dtype=dtype, count=expected // dtype.itemsize, offset=header)
    return array.reshape(dims).astype(dtype.newbyteorder("="))


def _read_maybe_gzip(path: Path) -> bytes:
    """The file's bytes, gunzipped when it starts with the gzip magic."""
    try:
        with path.open("rb") as raw:
            gzipped = raw.read(2) == _GZIP_MAGIC
        if not gzipped:
            return path.read_bytes()
        with gzip.open(path, "rb") as stream:
            return stream.read()
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path}: cannot read ({exc})") from exc


def _idx_dirs(root: Path, folder: str) -> list[Path]:
    """The folders searched for IDX files, in order."""
    return [root / folder / "raw", root / folder, root]


def _find_idx(root: Path, folder: str, stem: str) -> Path | None:
    """The first existing `stem` or `stem.gz` in the searched folders."""
    for directory in _idx_dirs(root, folder):
        for candidate in (directory / stem, directory / f"{stem}.gz"):
            if candidate.is_file():
                return candidate
    return None


def _idx_sources(name: str, root: Path, download: bool) -> dict[str, Path]:
    """The four IDX files of MNIST or Fashion-MNIST, downloaded first if missing and allowed."""
    folder = IDX_FOLDERS[name]
    paths = {stem: _find_idx(root, folder, stem) for stem in IDX_FILES}
    missing = [stem for stem, path in paths.items() if path is None]
    if missing:
        dirs = _idx_dirs(root, folder)
        expected = [f"{stem}[.gz]" for stem in missing]
        _obtain(name, expected, dirs, download,
                lambda: _fetch_idx(name, missing, root / folder / "raw"))
        paths = {stem: _find_idx(root, folder, stem) for stem in IDX_FILES}
    if os.environ.get(VERIFY_ENV) == "1":
        verify_idx(name, paths)  # type: ignore[arg-type]
    return paths  # type: ignore[return-value]  # every entry found, or _obtain raised


def verify_idx(name: str, paths: dict[str, Path]) -> None:
    """DataError unless every IDX file's uncompressed md5 is the published one."""
    for stem, path in paths.items():
        got = _md5_of(path, gunzip=path.suffix == ".gz")
        if got != MD5SUMS[name][stem]:
            raise DataError(f"{path}: md5 {got} is not {name}'s {stem} "
                            f"({MD5SUMS[name][stem]}): the dataset copy is damaged")
    log.info("verified the md5 of %s's %d files", name, len(paths))


def _load_idx_dataset(name: str, root: Path, download: bool) -> Dataset:
    """Pool the train and test IDX pairs of MNIST or Fashion-MNIST (mapped from the cache)."""
    return _cached_idx(name, root, download)[0]


def _cached_idx(name: str, root: Path, download: bool) -> tuple[Dataset, Path | None]:
    """The IDX dataset mapped from its cache (built first if needed), and the cache folder."""
    paths = _idx_sources(name, root, download)
    (images, labels), cache = cached_arrays(name, root, IDX_FOLDERS[name],
                                            list(paths.values()), lambda: _decode_idx(paths))
    # The channel axis is added as a view (stride 0), as it always was: the strides of a
    # node's indexed images decide torch's memory format, and with it the exact results.
    return Dataset(name=name, images=images[:, np.newaxis], labels=labels, num_classes=10), cache


def _decode_idx(paths: dict[str, Path]) -> tuple[np.ndarray, np.ndarray]:
    """Images uint8 [N, 28, 28] and labels int64 [N]: the train pair, then the test pair."""
    train = _read_idx_pair(paths["train-images-idx3-ubyte"], paths["train-labels-idx1-ubyte"])
    test = _read_idx_pair(paths["t10k-images-idx3-ubyte"], paths["t10k-labels-idx1-ubyte"])
    images = np.concatenate([train[0], test[0]])
    labels = np.concatenate([train[1], test[1]])
    return images, labels


def _read_idx_pair(images_path: Path, labels_path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Images uint8 [N, 28, 28] and labels int64 [N], checked against each other."""
    images = read_idx(images_path)
    labels = read_idx(labels_path)
    if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != (28, 28):
        raise DataError(f"{images_path}: expected uint8 images [N, 28, 28], "
                        f"got {images.dtype} {images.shape}")
    if labels.dtype != np.uint8 or labels.ndim != 1:
        raise DataError(f"{labels_path}: expected uint8 labels [N], got {labels.dtype} {labels.shape}")
    if len(labels) != len(images):
        raise DataError(f"{labels_path}: {len(labels)} labels for {len(images)} images "
                        f"in {images_path}")
    labels = labels.astype(np.int64)
    _check_label_range(labels, 10, str(labels_path))
    return images, labels


def _fetch_idx(name: str, stems: list[str], raw_dir: Path) -> None:
    """Download the missing `<stem>.gz` files into raw_dir, checking uncompressed md5s."""
    with _created_dirs(raw_dir):
        for stem in stems:
            url = BASE_URLS[name] + f"{stem}.gz"
            _download_verified(url, raw_dir / f"{stem}.gz", MD5SUMS[name][stem], gunzip=True)


# ---------------------------------------------------------------- CIFAR python batches


def _cifar_sources(name: str, root: Path, download: bool) -> list[Path]:
    """The python batch files of CIFAR-10 or CIFAR-100, downloaded first if missing and allowed."""
    layout = CIFAR_LAYOUTS[name]
    folder = root / layout.folder
    missing = [batch for batch in layout.batches if not (folder / batch).is_file()]
    if missing:
        _obtain(name, missing, [folder], download, lambda: _fetch_cifar(name, layout, root))
    return [folder / batch for batch in layout.batches]


def _load_cifar(name: str, root: Path, download: bool) -> Dataset:
    """Pool the train batches then the test batch of CIFAR-10 or CIFAR-100 (mapped from the cache)."""
    return _cached_cifar(name, root, download)[0]


def _cached_cifar(name: str, root: Path, download: bool) -> tuple[Dataset, Path | None]:
    """The CIFAR dataset mapped from its cache (built first if needed), and the cache folder."""
    layout = CIFAR_LAYOUTS[name]
    sources = _cifar_sources(name, root, download)
    (images, labels), cache = cached_arrays(name, root, layout.folder, sources,
                                            lambda: _decode_cifar(sources, layout))
    return Dataset(name=name, images=images, labels=labels, num_classes=layout.num_classes), cache


def _decode_cifar(sources: list[Path], layout: CifarLayout) -> tuple[np.ndarray, np.ndarray]:
    """Images uint8 [N, 3, 32, 32] and labels int64 [N] of the batches, in order."""
    parts = [_read_cifar_batch(path, layout) for path in sources]
    images = np.concatenate([images for images, _ in parts])
    labels = np.concatenate([labels for _, labels in parts])
    return images, labels


def _read_cifar_batch(path: Path, layout: CifarLayout) -> tuple[np.ndarray, np.ndarray]:
    """Images uint8 [N, 3, 32, 32] and labels int64 [N] from one python batch file."""
    batch = _restricted_unpickle(path)
    if not isinstance(batch, dict) or b"data" not in batch or layout.label_key not in batch:
        raise DataError(f"{path}: expected a dict with keys b'data' and {layout.label_key!r}")
    data = batch[b"data"]
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 \
            or data.shape[1] != 3 * 32 * 32:
        shape = getattr(data, "shape", type(data).__name__)
        raise DataError(f"{path}: b'data' must be a uint8 array [N, 3072], got {shape}")
    try:
        labels = np.asarray(batch[layout.label_key], dtype=np.int64)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{path}: {layout.label_key!r} is not a list of integers") from exc
    if labels.shape != (len(data),):
        raise DataError(f"{path}: {labels.shape} labels for {len(data)} images")
    _check_label_range(labels, layout.num_classes, str(path))
    # Each row holds the R, G and B planes in turn, each plane row-major 32x32.
    return data.reshape(-1, 3, 32, 32), labels


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """An unpickler that can rebuild numpy arrays and nothing else."""

    def find_class(self, module: str, name: str) -> Any:
        """Resolve only allow-listed globals; anything else is refused."""
        found = _ALLOWED_GLOBALS.get((module, name))
        if found is None:
            raise DataError(f"refusing to unpickle global {module}.{name} (not a numpy array part)")
        return found


_ALLOWED_GLOBALS: dict[tuple[str, str], Any] = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("numpy.core.multiarray", "_reconstruct"): _np_multiarray._reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _np_multiarray._reconstruct,
    # Protocol-5 pickles rebuild arrays from a buffer instead of _reconstruct.
    ("numpy.core.numeric", "_frombuffer"): _np_numeric._frombuffer,
    ("numpy._core.numeric", "_frombuffer"): _np_numeric._frombuffer,
    # Python 3 protocol-2 pickles encode bytes as _codecs.encode(str, "latin1"): a pure function.
    ("_codecs", "encode"): codecs.encode,
}


def _restricted_unpickle(path: Path) -> object:
    """Unpickle a CIFAR batch (Python 2 strings kept as bytes) with the numpy-only unpickler."""
    try:
        with path.open("rb") as stream:
            return _NumpyOnlyUnpickler(stream, encoding="bytes").load()
    except DataError as exc:
        raise DataError(f"{path}: {exc}") from exc
    except Exception as exc:  # a corrupt pickle can fail in many ways; all mean a bad file
        raise DataError(f"{path}: not a readable CIFAR batch ({type(exc).__name__}: {exc})") from exc


def _fetch_cifar(name: str, layout: CifarLayout, root: Path) -> None:
    """Download the CIFAR archive into root, check its md5, extract it safely, delete it."""
    with _created_dirs(root):
        archive = root / layout.archive
        _download_verified(BASE_URLS[name] + layout.archive, archive,
                           MD5SUMS[name][layout.archive], gunzip=False)
        try:
            _safe_extract(archive, root)
        finally:
            archive.unlink(missing_ok=True)
        absent = [b for b in layout.batches if not (root / layout.folder / b).is_file()]
        if absent:
            raise DataError(f"{layout.archive} did not contain {layout.folder}/{absent}")


def _safe_extract(archive: Path, root: Path) -> None:
    """Extract a tar archive into root, refusing links, devices, absolute paths and '..'."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            for member in members:
                _check_member(member, archive)
            log.info("extracting %s into %s", archive.name, root)
            if hasattr(tarfile, "data_filter"):
                tar.extractall(root, members=members, filter="data")
            else:  # Python < 3.11.4: our member checks above are the only guard
                tar.extractall(root, members=members)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{archive}: cannot extract ({exc})") from exc


def _check_member(member: tarfile.TarInfo, archive: Path) -> None:
    """Raise DataError unless the member is a plain file or folder inside the target."""
    parts = PurePosixPath(member.name).parts
    if member.name.startswith(("/", "\\")) or ".." in parts or not (member.isfile() or member.isdir()):
        raise DataError(f"{archive}: unsafe archive member {member.name!r}")


# ---------------------------------------------------------------- download and error reporting


def _obtain(name: str, expected: list[str], dirs: list[Path], download: bool,
            fetch: Callable[[], None]) -> None:
    """Run `fetch` if downloads are allowed; any failure becomes a DataError saying what to do."""
    if not download:
        raise _missing_error(name, expected, dirs, "download is disabled")
    log.info("%s: %s missing under %s, downloading", name, expected, dirs[0])
    try:
        fetch()
    except Exception as exc:  # any download failure means the same thing to the user
        raise _missing_error(name, expected, dirs, f"download failed: {exc}") from exc


def _missing_error(name: str, expected: list[str], dirs: list[Path], why: str) -> DataError:
    """A DataError listing the expected files, where they were looked for, why and the fix."""
    where = ", ".join(str(d) for d in dirs)
    return DataError(f"{name}: missing files {', '.join(expected)} "
                     f"(looked in {where}); {why}. To fix: {_FIX_HINT}.")


def _download_verified(url: str, dest: Path, md5: str, *, gunzip: bool) -> None:
    """Fetch url into a uniquely named tmp file beside dest, check its md5 (of the gunzipped
    content if asked), fsync it and rename it onto dest; a failure leaves nothing behind."""
    log.info("downloading %s -> %s", url, dest)

    def fetch(out: BinaryIO) -> None:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
            shutil.copyfileobj(response, out, 1 << 20)

    def check(part: Path) -> None:
        got = _md5_of(part, gunzip=gunzip)
        if got != md5:
            raise DataError(f"md5 mismatch for {url}: got {got}, expected {md5}; "
                            "the downloaded file was deleted")

    atomic_write(dest, fetch, verify=check)
    log.info("verified md5 of %s", dest.name)


@contextmanager
def _created_dirs(directory: Path) -> Iterator[None]:
    """mkdir -p directory; if the block fails, remove the folders it created (when empty)."""
    made = make_dirs(directory)
    try:
        yield
    except BaseException:
        remove_empty(made)
        raise


def _md5_of(path: Path, *, gunzip: bool) -> str:
    """The md5 hex digest of the file, or of its gunzipped content."""
    opener: Any = gzip.open if gunzip else open
    with opener(path, "rb") as stream:
        return hashlib.file_digest(stream, lambda: hashlib.md5(usedforsecurity=False)).hexdigest()


def _check_label_range(labels: np.ndarray, num_classes: int, where: str) -> None:
    """Raise DataError if any label falls outside [0, num_classes)."""
    if len(labels) and (labels.min() < 0 or labels.max() >= num_classes):
        raise DataError(f"{where}: labels outside 0..{num_classes - 1} "
                        f"(min {labels.min()}, max {labels.max()})")
