"""Dataset loading: real MNIST/Fashion-MNIST, IDX parsing, CIFAR pickles and local-only downloads."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import io
import json
import os
import pickle
import signal
import socket
import subprocess
import tarfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from deploy import cli
from deploy.backends import docker_backend, launchers
from deploy.backends.plan import prepare_data
from node import data
from node.config import from_dict
from node.config import load as load_config
from node.data import Dataset, load_dataset, read_idx
from node.data import cache as data_cache
from node.errors import ConfigError, DataError
from node.runtime import load_node_data

IDX_NAMES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


def _closed_local_port() -> int:
    """A 127.0.0.1 port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(autouse=True)
def _local_only_network(monkeypatch: pytest.MonkeyPatch) -> str:
    """Point every download URL at a dead 127.0.0.1 port so no test can reach a public host."""
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
    dead = f"http://127.0.0.1:{_closed_local_port()}/"
    for name in data.DATASETS:
        monkeypatch.setitem(data.BASE_URLS, name, dead)
    monkeypatch.setattr(data, "DOWNLOAD_TIMEOUT_S", 5.0)
    return dead


@pytest.fixture(autouse=True)
def _private_cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fallback cache folder of every test is its own, never the user's ~/.cache."""
    home = tmp_path / "cache-home"
    monkeypatch.setenv("PROTOFED_CACHE_DIR", str(home))
    return home


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """Keep request logs out of the test output."""


@pytest.fixture
def http_root(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A folder served over HTTP on 127.0.0.1, and its base URL."""
    root = tmp_path / "served"
    root.mkdir()
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), partial(_QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()
    thread.join()


# ---------------------------------------------------------------- fixture writers


def _idx_bytes(array: np.ndarray) -> bytes:
    """An IDX file for a uint8 array: magic 0x0000 08 ndim, big-endian dims, raw bytes."""
    assert array.dtype == np.uint8
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(d.to_bytes(4, "big") for d in array.shape)
    return header + array.tobytes()


def _tiny_mnist() -> dict[str, np.ndarray]:
    """A 6-train / 4-test MNIST-shaped set; image i has pixel (i, i) = 100 + i."""
    images = np.zeros((10, 28, 28), dtype=np.uint8)
    for i in range(10):
        images[i, i, i] = 100 + i
    labels = np.array([5, 0, 4, 1, 9, 2, 7, 2, 1, 0], dtype=np.uint8)
    return {
        "train-images-idx3-ubyte": images[:6],
        "train-labels-idx1-ubyte": labels[:6],
        "t10k-images-idx3-ubyte": images[6:],
        "t10k-labels-idx1-ubyte": labels[6:],
    }


def _write_idx_set(directory: Path, arrays: dict[str, np.ndarray], gz: bool) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for stem, array in arrays.items():
        content = _idx_bytes(array)
        if gz:
            (directory / f"{stem}.gz").write_bytes(gzip.compress(content))
        else:
            (directory / stem).write_bytes(content)


def _cifar_batches(name: str) -> dict[str, dict[bytes, object]]:
    """Small batches in the standard layout; all pixels 0 except three markers in the 2nd batch."""
    layout = data.CIFAR_LAYOUTS[name]
    batches = {}
    for b, batch in enumerate(layout.batches):
        n = 3 + b
        pixels = np.zeros((n, 3072), dtype=np.uint8)
        labels = [(7 * b + i) % layout.num_classes for i in range(n)]
        if b == 1:
            pixels[0, 0] = 7                     # R plane, row 0, col 0
            pixels[1, 1024 + 5 * 32 + 7] = 201   # G plane, row 5, col 7
            pixels[2, 3071] = 9                  # B plane, row 31, col 31
        content: dict[bytes, object] = {
            b"batch_label": f"batch {b}".encode(),
            b"data": pixels,
            b"filenames": [f"img_{b}_{i}.png".encode() for i in range(n)],
        }
        if name == "cifar10":
            content[b"labels"] = labels
        else:
            content[b"fine_labels"] = labels
            content[b"coarse_labels"] = [label // 5 for label in labels]
        batches[batch] = content
    return batches


def _pickled(content: object, style: str) -> bytes:
    """Pickle bytes; "numpy1" names the numpy 1.x module, as the published CIFAR files do."""
    if style == "protocol5":
        return pickle.dumps(content, protocol=5)
    raw = pickle.dumps(content, protocol=2)
    if style == "numpy1":
        raw = raw.replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")
        assert b"numpy.core.multiarray" in raw
    return raw


def _write_cifar(root: Path, name: str, style: str = "protocol2") -> dict[str, dict[bytes, object]]:
    batches = _cifar_batches(name)
    folder = root / data.CIFAR_LAYOUTS[name].folder
    folder.mkdir(parents=True, exist_ok=True)
    for batch, content in batches.items():
        (folder / batch).write_bytes(_pickled(content, style))
    return batches


def _md5(content: bytes) -> str:
    return hashlib.md5(content, usedforsecurity=False).hexdigest()


# ---------------------------------------------------------------- real datasets

MNIST_COUNTS = [6903, 7877, 6990, 7141, 6824, 6313, 6876, 7293, 6825, 6958]


@pytest.mark.parametrize(("name", "first_labels", "class_counts", "train_mean"), [
    ("mnist", [5, 0, 4, 1, 9], MNIST_COUNTS, 0.1307),
    ("fashion_mnist", [9, 0, 0, 3, 0], [7000] * 10, 0.2860),
])
def test_real_idx_dataset(data_dir: Path, name: str, first_labels: list[int],
                          class_counts: list[int], train_mean: float) -> None:
    dataset = load_dataset(name, data_dir, download=False)
    assert dataset.name == name and dataset.num_classes == 10
    assert dataset.images.shape == (70000, 1, 28, 28) and dataset.images.dtype == np.uint8
    assert dataset.labels.shape == (70000,) and dataset.labels.dtype == np.int64
    assert dataset.labels[:5].tolist() == first_labels
    assert np.bincount(dataset.labels).tolist() == class_counts
    # The widely quoted normalisation means of the 60000 training images.
    assert dataset.images[:60000].mean() / 255 == pytest.approx(train_mean, abs=1e-4)


def test_default_data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PROTOFED_DATA_DIR", raising=False)
    assert data.default_data_dir() == Path("data")
    monkeypatch.setenv("PROTOFED_DATA_DIR", str(tmp_path))
    assert data.default_data_dir() == tmp_path


def test_unknown_dataset_names_config_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="data.dataset"):
        load_dataset("svhn", tmp_path, download=False)


# ---------------------------------------------------------------- IDX parsing


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize(("content", "expected"), [
    (b"\x00\x00\x08\x02\x00\x00\x00\x02\x00\x00\x00\x03" + bytes(range(6)),
     np.array([[0, 1, 2], [3, 4, 5]], dtype=np.uint8)),
    (b"\x00\x00\x0b\x01\x00\x00\x00\x02" + b"\x01\x02\xff\xfe", np.array([258, -2], dtype=np.int16)),
    (b"\x00\x00\x0c\x01\x00\x00\x00\x01" + b"\x00\x01\x00\x00", np.array([65536], dtype=np.int32)),
    (b"\x00\x00\x0d\x01\x00\x00\x00\x01" + b"\x3f\xc0\x00\x00", np.array([1.5], dtype=np.float32)),
    (b"\x00\x00\x09\x01\x00\x00\x00\x02" + b"\x7f\x80", np.array([127, -128], dtype=np.int8)),
])
def test_read_idx(tmp_path: Path, content: bytes, expected: np.ndarray, gz: bool) -> None:
    path = tmp_path / "x-idx"
    path.write_bytes(gzip.compress(content) if gz else content)
    array = read_idx(path)
    assert array.dtype == expected.dtype and array.dtype.isnative
    np.testing.assert_array_equal(array, expected)
    assert array.flags.writeable


GOOD_HEADER = b"\x00\x00\x08\x01\x00\x00\x00\x04"


@pytest.mark.parametrize(("content", "reason"), [
    (b"\x08\x03\x00\x01\x00\x00\x00\x04abcd", "magic"),
    (b"\x00\x00\x07\x01\x00\x00\x00\x04abcd", "dtype"),
    (GOOD_HEADER + b"abc", "truncated"),
    (GOOD_HEADER + b"abcde", "need 4 data bytes"),
    (b"\x00\x00\x08\x02\x00\x00\x00\x04", "header"),
    (b"\x00\x00", "too short"),
    (gzip.compress(GOOD_HEADER + b"abcd", mtime=0)[:-6], "cannot read"),
])
def test_corrupt_idx_names_file(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "broken-idx1-ubyte"
    path.write_bytes(content)
    with pytest.raises(DataError, match=reason) as caught:
        read_idx(path)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize(("name", "where"), [
    ("mnist", "MNIST/raw"), ("mnist", "MNIST"), ("mnist", "."), ("fashion_mnist", "FashionMNIST/raw"),
])
@pytest.mark.parametrize("gz", [False, True])
def test_idx_layouts(tmp_path: Path, name: str, where: str, gz: bool) -> None:
    _write_idx_set(tmp_path / where, _tiny_mnist(), gz)
    dataset = load_dataset(name, tmp_path, download=False)
    assert dataset.images.shape == (10, 1, 28, 28)
    assert dataset.labels.tolist() == [5, 0, 4, 1, 9, 2, 7, 2, 1, 0]
    # Train images come first, then test: image i carries its marker at (i, i).
    assert [int(dataset.images[i, 0, i, i]) for i in range(10)] == list(range(100, 110))
    assert int(dataset.images.sum()) == sum(range(100, 110))


@pytest.mark.parametrize(("stem", "array", "reason"), [
    ("train-labels-idx1-ubyte", np.array([5, 0, 4], dtype=np.uint8), "3 labels for 6 images"),
    ("train-labels-idx1-ubyte", np.array([5, 0, 4, 1, 10, 2], dtype=np.uint8), "labels outside"),
    ("t10k-images-idx3-ubyte", np.zeros((4, 27, 27), dtype=np.uint8), r"\[N, 28, 28\]"),
])
def test_inconsistent_idx_files(tmp_path: Path, stem: str, array: np.ndarray, reason: str) -> None:
    arrays = _tiny_mnist() | {stem: array}
    _write_idx_set(tmp_path, arrays, gz=False)
    with pytest.raises(DataError, match=reason) as caught:
        load_dataset("mnist", tmp_path, download=False)
    assert stem in str(caught.value)


# ---------------------------------------------------------------- CIFAR


@pytest.mark.parametrize("style", ["protocol2", "protocol5", "numpy1"])
@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_cifar_loads_standard_batches(tmp_path: Path, name: str, style: str) -> None:
    batches = _write_cifar(tmp_path, name, style)
    dataset = load_dataset(name, tmp_path, download=False)
    sizes = [3 + b for b in range(len(batches))]
    assert dataset.images.shape == (sum(sizes), 3, 32, 32) and dataset.images.dtype == np.uint8
    assert dataset.num_classes == (10 if name == "cifar10" else 100)
    key = b"labels" if name == "cifar10" else b"fine_labels"
    assert dataset.labels.tolist() == [lab for b in batches.values() for lab in b[key]]
    start = sizes[0]  # markers sit in the second batch, after the first batch's images
    assert dataset.images[start + 0, 0, 0, 0] == 7
    assert dataset.images[start + 1, 1, 5, 7] == 201
    assert dataset.images[start + 2, 2, 31, 31] == 9
    assert int(dataset.images.sum()) == 7 + 201 + 9


def _corrupt_batch(name: str, change: str) -> object:
    content = dict(_cifar_batches(name)[data.CIFAR_LAYOUTS[name].batches[0]])
    key = b"labels" if name == "cifar10" else b"fine_labels"
    if change == "shape":
        content[b"data"] = np.zeros((3, 3000), dtype=np.uint8)
    elif change == "dtype":
        content[b"data"] = np.zeros((3, 3072), dtype=np.float32)
    elif change == "label_range":
        content[key] = [0, 1, 10 if name == "cifar10" else 100]
    elif change == "label_count":
        content[key] = [0, 1]
    elif change == "missing_key":
        del content[key]
    elif change == "not_dict":
        return [content]
    return content


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
@pytest.mark.parametrize(("change", "reason"), [
    ("shape", r"\[N, 3072\]"), ("dtype", r"\[N, 3072\]"), ("label_range", "labels outside"),
    ("label_count", "labels for 3 images"), ("missing_key", "expected a dict"),
    ("not_dict", "expected a dict"), ("garbage", "not a readable CIFAR batch"),
])
def test_corrupt_cifar_batch_names_file(tmp_path: Path, name: str, change: str,
                                        reason: str) -> None:
    _write_cifar(tmp_path, name)
    path = tmp_path / data.CIFAR_LAYOUTS[name].folder / data.CIFAR_LAYOUTS[name].batches[0]
    if change == "garbage":
        path.write_bytes(b"this is not a pickle")
    else:
        path.write_bytes(pickle.dumps(_corrupt_batch(name, change), protocol=2))
    with pytest.raises(DataError, match=reason) as caught:
        load_dataset(name, tmp_path, download=False)
    assert str(path) in str(caught.value)


class _Exploit:
    """Pickles as a call to `func(*args)`, the way a malicious batch file would."""

    def __init__(self, func: object, *args: object) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return self.func, self.args


@pytest.mark.parametrize("payload", ["os.system", "eval", "numpy.load", "nested"])
def test_malicious_pickle_rejected(tmp_path: Path, payload: str) -> None:
    _write_cifar(tmp_path, "cifar10")
    marker = tmp_path / "pwned"
    exploits = {
        "os.system": _Exploit(os.system, f"touch {marker}"),
        "eval": _Exploit(eval, f"open({str(marker)!r}, 'w').close()"),
        "numpy.load": _Exploit(np.load, str(marker)),
        "nested": {b"data": np.zeros((1, 3072), np.uint8),
                   b"labels": [_Exploit(os.system, f"touch {marker}")]},
    }
    path = tmp_path / "cifar-10-batches-py" / "data_batch_1"
    path.write_bytes(pickle.dumps(exploits[payload], protocol=2))
    with pytest.raises(DataError, match="refusing to unpickle global") as caught:
        load_dataset("cifar10", tmp_path, download=False)
    assert str(path) in str(caught.value)
    assert not marker.exists()


# ---------------------------------------------------------------- missing files and downloads


@pytest.mark.parametrize(("name", "expected", "directory"), [
    ("mnist", [f"{stem}[.gz]" for stem in IDX_NAMES], "MNIST/raw"),
    ("fashion_mnist", [f"{stem}[.gz]" for stem in IDX_NAMES], "FashionMNIST/raw"),
    ("cifar10", list(data.CIFAR_LAYOUTS["cifar10"].batches), "cifar-10-batches-py"),
    ("cifar100", ["train", "test"], "cifar-100-python"),
])
@pytest.mark.parametrize(("download", "why"), [
    (False, "download is disabled"), (True, "download failed"),
])
def test_missing_files_message(tmp_path: Path, name: str, expected: list[str], directory: str,
                               download: bool, why: str) -> None:
    with pytest.raises(DataError) as caught:
        load_dataset(name, tmp_path, download=download)
    message = str(caught.value)
    for file_name in expected:
        assert file_name in message
    assert str(tmp_path / directory) in message
    assert why in message
    assert "PROTOFED_DATA_DIR" in message and "data.dir" in message


def _serve_mnist(http_root: tuple[Path, str], monkeypatch: pytest.MonkeyPatch,
                 stems: list[str], md5_ok: bool = True) -> None:
    served, url = http_root
    monkeypatch.setitem(data.BASE_URLS, "mnist", url)
    arrays = _tiny_mnist()
    _write_idx_set(served, {stem: arrays[stem] for stem in stems}, gz=True)
    md5s = {stem: _md5(_idx_bytes(arrays[stem])) if md5_ok else "0" * 32 for stem in IDX_NAMES}
    monkeypatch.setitem(data.MD5SUMS, "mnist", md5s)


@pytest.mark.parametrize("present", [[], ["train-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]])
def test_download_mnist_from_local_server(tmp_path: Path, http_root: tuple[Path, str],
                                          monkeypatch: pytest.MonkeyPatch,
                                          present: list[str]) -> None:
    root = tmp_path / "data"
    arrays = _tiny_mnist()
    _write_idx_set(root / "MNIST", {stem: arrays[stem] for stem in present}, gz=False)
    # Only the missing files are served: fetching a present one would fail with a 404.
    missing = [stem for stem in IDX_NAMES if stem not in present]
    _serve_mnist(http_root, monkeypatch, missing)
    dataset = load_dataset("mnist", root, download=True)
    assert dataset.labels.tolist() == [5, 0, 4, 1, 9, 2, 7, 2, 1, 0]
    assert sorted(p.name for p in (root / "MNIST" / "raw").iterdir()) == sorted(
        f"{stem}.gz" for stem in missing)
    again = load_dataset("mnist", root, download=False)
    np.testing.assert_array_equal(again.images, dataset.images)


def test_download_md5_mismatch_deletes_file(tmp_path: Path, http_root: tuple[Path, str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _serve_mnist(http_root, monkeypatch, list(IDX_NAMES), md5_ok=False)
    with pytest.raises(DataError, match="md5 mismatch") as caught:
        load_dataset("mnist", tmp_path, download=True)
    assert "train-images-idx3-ubyte[.gz]" in str(caught.value)
    assert not (tmp_path / "MNIST").exists()  # no partial file, no empty MNIST/raw folders


def test_download_404_is_data_error(tmp_path: Path, http_root: tuple[Path, str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _serve_mnist(http_root, monkeypatch, [])
    with pytest.raises(DataError, match="404"):
        load_dataset("mnist", tmp_path, download=True)
    assert not (tmp_path / "MNIST").exists()


def _cifar_archive(batches: dict[str, dict[bytes, object]], folder: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.addfile(_tar_dir(folder))
        for batch, content in batches.items():
            payload = pickle.dumps(content, protocol=2)
            info = tarfile.TarInfo(f"{folder}/{batch}")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return buffer.getvalue()


def _tar_dir(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, 0o755
    return info


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_download_cifar_from_local_server(tmp_path: Path, http_root: tuple[Path, str],
                                          monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    served, url = http_root
    layout = data.CIFAR_LAYOUTS[name]
    archive = _cifar_archive(_cifar_batches(name), layout.folder)
    (served / layout.archive).write_bytes(archive)
    monkeypatch.setitem(data.BASE_URLS, name, url)
    monkeypatch.setitem(data.MD5SUMS, name, {layout.archive: _md5(archive)})
    root = tmp_path / "data"
    dataset = load_dataset(name, root, download=True)
    assert dataset.images[3 + 1, 1, 5, 7] == 201
    assert [p.name for p in root.iterdir()] == [layout.folder]  # archive deleted after extraction


def _unsafe_member(kind: str) -> tarfile.TarInfo:
    if kind == "symlink":
        info = tarfile.TarInfo("cifar-10-batches-py/data_batch_1")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        return info
    info = tarfile.TarInfo("../escaped" if kind == "dotdot" else "/tmp/protofed-absolute")
    info.size = 0
    return info


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink"])
def test_unsafe_cifar_archive_rejected(tmp_path: Path, http_root: tuple[Path, str],
                                       monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    served, url = http_root
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.addfile(_unsafe_member(kind), io.BytesIO(b""))
    (served / "cifar-10-python.tar.gz").write_bytes(buffer.getvalue())
    monkeypatch.setitem(data.BASE_URLS, "cifar10", url)
    monkeypatch.setitem(data.MD5SUMS, "cifar10", {"cifar-10-python.tar.gz": _md5(buffer.getvalue())})
    root = tmp_path / "data"
    with pytest.raises(DataError, match="unsafe archive member"):
        load_dataset("cifar10", root, download=True)
    assert not root.exists()  # the folder the download created is removed again
    assert not (tmp_path / "escaped").exists()


def test_dataset_rejects_bad_arrays() -> None:
    images = np.zeros((2, 1, 28, 28), dtype=np.uint8)
    with pytest.raises(DataError, match="labels outside"):
        Dataset("mnist", images, np.array([0, 10], dtype=np.int64), 10)
    with pytest.raises(DataError, match="int64"):
        Dataset("mnist", images, np.array([0, 1], dtype=np.int32), 10)
    with pytest.raises(DataError, match="uint8"):
        Dataset("mnist", images.astype(np.float32), np.array([0, 1], dtype=np.int64), 10)


# ---------------------------------------------------------------- decoded-array cache


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every IDX file decoded from now on, in order."""
    seen: list[Path] = []
    real = data.read_idx

    def counting(path: Path) -> np.ndarray:
        seen.append(Path(path))
        return real(path)

    monkeypatch.setattr(data, "read_idx", counting)
    return seen


def _fresh_load(monkeypatch: pytest.MonkeyPatch, root: Path, name: str = "mnist") -> Dataset:
    """load_dataset as a new process would run it (nothing kept from earlier loads)."""
    monkeypatch.setattr(data, "_LOADED", {})
    return load_dataset(name, root, download=False)


def _is_mapped(array: np.ndarray) -> bool:
    """Whether the array is a view of a memory-mapped file."""
    while array is not None:
        if isinstance(array, np.memmap):
            return True
        array = array.base
    return False


def _tiny_root(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    _write_idx_set(root / "MNIST" / "raw", _tiny_mnist(), gz=True)
    return root


def test_cache_is_built_once_then_mapped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         decodes: list[Path]) -> None:
    root = _tiny_root(tmp_path)
    first = _fresh_load(monkeypatch, root)
    assert len(decodes) == 4
    cache = root / "MNIST" / "protofed-cache"
    assert sorted(p.name for p in cache.iterdir()) == ["cache.json", "images.npy", "labels.npy"]
    second = _fresh_load(monkeypatch, root)
    assert len(decodes) == 4  # mapped, not decoded again
    assert _is_mapped(second.images) and not second.images.flags.writeable
    np.testing.assert_array_equal(second.images, first.images)
    np.testing.assert_array_equal(second.labels, first.labels)
    assert second.images.dtype == np.uint8 and second.labels.dtype == np.int64
    assert second.images[7, 0, 7, 7] == 107 and second.labels.tolist() == [5, 0, 4, 1, 9, 2, 7, 2, 1, 0]
    # A node's indexed images keep the strides of decoded ones (the channel axis a view):
    # torch picks its memory format, and so its exact arithmetic, from them.
    decoded = np.zeros((10, 28, 28), dtype=np.uint8)[:, np.newaxis]
    index = np.array([1, 3, 8])
    assert second.images[index].strides == decoded[index].strides


def test_cache_is_rebuilt_when_a_source_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                decodes: list[Path],
                                                caplog: pytest.LogCaptureFixture) -> None:
    root = _tiny_root(tmp_path)
    _fresh_load(monkeypatch, root)
    arrays = _tiny_mnist()
    arrays["t10k-labels-idx1-ubyte"] = np.array([3, 3, 3, 3], dtype=np.uint8)
    _write_idx_set(root / "MNIST" / "raw", {"t10k-labels-idx1-ubyte": arrays["t10k-labels-idx1-ubyte"]},
                   gz=True)
    labels = root / "MNIST" / "raw" / "t10k-labels-idx1-ubyte.gz"
    os.utime(labels, ns=(labels.stat().st_atime_ns, labels.stat().st_mtime_ns + 10**9))
    with caplog.at_level("WARNING", logger="node.data.cache"):
        dataset = _fresh_load(monkeypatch, root)
    assert len(decodes) == 8
    assert dataset.labels.tolist()[6:] == [3, 3, 3, 3]
    assert "source files changed" in caplog.text and "rebuilding" in caplog.text
    _fresh_load(monkeypatch, root)
    assert len(decodes) == 8  # the rebuilt cache is valid again


def _truncate(cache: Path) -> None:
    path = cache / "images.npy"
    path.write_bytes(path.read_bytes()[:-10])


def _bad_header(cache: Path) -> None:
    path = cache / "images.npy"
    path.write_bytes(b"not a numpy file" + path.read_bytes()[16:])


def _edit_sidecar(cache: Path, change: Callable[[dict], object]) -> None:
    meta = json.loads((cache / "cache.json").read_text())
    change(meta)
    (cache / "cache.json").write_text(json.dumps(meta))


def _longer(cache: Path) -> None:
    with (cache / "labels.npy").open("ab") as out:
        out.write(b"\0" * 8)


@pytest.mark.parametrize("damage", [
    _truncate, _bad_header, _longer,
    lambda cache: (cache / "cache.json").unlink(),
    lambda cache: (cache / "cache.json").write_text("{"),
    lambda cache: _edit_sidecar(cache, lambda meta: meta["arrays"]["labels"].update(shape=[11])),
    lambda cache: _edit_sidecar(cache, lambda meta: meta.update(format=0)),
])
def test_damaged_cache_is_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  decodes: list[Path], caplog: pytest.LogCaptureFixture,
                                  damage: Callable[[Path], object]) -> None:
    root = _tiny_root(tmp_path)
    expected = _fresh_load(monkeypatch, root)
    images, labels = np.array(expected.images), np.array(expected.labels)
    damage(root / "MNIST" / "protofed-cache")
    with caplog.at_level("WARNING", logger="node.data.cache"):
        dataset = _fresh_load(monkeypatch, root)
    assert len(decodes) == 8
    assert "damaged" in caplog.text or "format 0" in caplog.text
    np.testing.assert_array_equal(dataset.images, images)
    np.testing.assert_array_equal(dataset.labels, labels)


@contextmanager
def _read_only(folder: Path) -> Iterator[None]:
    """`folder` unwritable, even for root (immutable attribute), while the block runs."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
        return
    if subprocess.run(["chattr", "+i", str(folder)], check=False, capture_output=True).returncode != 0:
        pytest.skip("cannot make a folder read-only for root here (chattr +i failed)")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


def test_read_only_data_folder_caches_in_the_fallback_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, decodes: list[Path],
        _private_cache_home: Path) -> None:
    root = _tiny_root(tmp_path)
    with _read_only(root / "MNIST"):
        dataset = _fresh_load(monkeypatch, root)
        again = _fresh_load(monkeypatch, root)
    assert not (root / "MNIST" / "protofed-cache").exists()
    assert (_private_cache_home / "mnist" / "cache.json").is_file()
    assert len(decodes) == 4 and _is_mapped(again.images)
    np.testing.assert_array_equal(again.images, dataset.images)


def test_no_writable_cache_folder_decodes_into_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    root = _tiny_root(tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("PROTOFED_CACHE_DIR", str(blocker / "cache"))  # cannot be a folder
    with _read_only(root / "MNIST"), caplog.at_level("WARNING", logger="node.data.cache"):
        dataset = _fresh_load(monkeypatch, root)
    assert dataset.labels.tolist() == [5, 0, 4, 1, 9, 2, 7, 2, 1, 0]
    assert "decoded into memory" in caplog.text and "PROTOFED_CACHE_DIR" in caplog.text


def test_racing_cache_writers_leave_a_valid_cache(tmp_path: Path) -> None:
    images = np.arange(6 * 28 * 28, dtype=np.uint8).reshape(6, 1, 28, 28)
    labels = np.arange(6, dtype=np.int64)
    source = tmp_path / "source"
    source.write_bytes(b"x")
    cache = tmp_path / "cache"
    threads = [threading.Thread(target=data_cache.write_cache,
                                args=(cache, images, labels, tmp_path, [source]))
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    (mapped_images, _), problem = data_cache.open_cache(
        cache, data_cache.source_stamp(tmp_path, [source]))
    assert problem == ""
    np.testing.assert_array_equal(mapped_images, images)
    assert sorted(p.name for p in cache.iterdir()) == ["cache.json", "images.npy", "labels.npy"]


def test_cifar_is_cached_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_cifar(tmp_path, "cifar10")
    first = _fresh_load(monkeypatch, tmp_path, "cifar10")
    monkeypatch.setattr(data, "_restricted_unpickle", None)  # a second load must not unpickle
    second = _fresh_load(monkeypatch, tmp_path, "cifar10")
    np.testing.assert_array_equal(second.images, first.images)
    assert second.images[3 + 1, 1, 5, 7] == 201
    assert (tmp_path / "cifar-10-batches-py" / "protofed-cache" / "cache.json").is_file()


# ---------------------------------------------------------------- fetched once, by the launcher


@pytest.fixture
def downloads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The URL of every download from now on."""
    seen: list[str] = []
    real = data._download_verified

    def counting(url: str, *args: Any, **kwargs: Any) -> None:
        seen.append(url)
        real(url, *args, **kwargs)

    monkeypatch.setattr(data, "_download_verified", counting)
    return seen


def _config_file(tmp_path: Path, root: Path, download: bool = True) -> Path:
    path = tmp_path / "federation.toml"
    path.write_text(f"""nodes = 2
rounds = 1
[data]
dataset = "mnist"
dir = "{root}"
download = {str(download).lower()}
[deploy]
results_dir = "{tmp_path / 'results'}"
""")
    return path


def test_launcher_downloads_once_and_nodes_only_load(
        tmp_path: Path, http_root: tuple[Path, str], monkeypatch: pytest.MonkeyPatch,
        downloads: list[str]) -> None:
    _serve_mnist(http_root, monkeypatch, list(IDX_NAMES))
    root = tmp_path / "data"
    config = load_config(_config_file(tmp_path, root))
    cache_dir = prepare_data(config)
    assert len(downloads) == 4
    assert cache_dir == root / "MNIST" / "protofed-cache"
    prepare_data(config)
    assert len(downloads) == 4  # present and verified: nothing fetched again

    def no_download(*args: object, **kwargs: object) -> None:
        raise AssertionError("a node downloaded")

    monkeypatch.setattr(data, "_download_verified", no_download)
    monkeypatch.setattr(data, "_LOADED", {})
    shares = [load_node_data(config, node, torch.device("cpu")) for node in range(2)]
    assert sum(len(share.train_y) + len(share.test_y) for share in shares) == 9


def test_a_node_never_downloads(tmp_path: Path, downloads: list[str]) -> None:
    config = load_config(_config_file(tmp_path, tmp_path / "empty", download=True))
    with pytest.raises(DataError, match="download is disabled"):
        load_node_data(config, 0, torch.device("cpu"))
    assert downloads == [] and not (tmp_path / "empty").exists()


@pytest.fixture
def launcher_signals() -> Iterator[None]:
    """Give back pytest's SIGINT and SIGTERM handlers after `protofed up` set its own."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_up_downloads_before_any_node_starts(
        tmp_path: Path, http_root: tuple[Path, str], monkeypatch: pytest.MonkeyPatch,
        downloads: list[str], launcher_signals: None) -> None:
    _serve_mnist(http_root, monkeypatch, list(IDX_NAMES))
    root = tmp_path / "data"
    seen_at_start: list[int] = []

    def warm_up(config: object) -> None:
        seen_at_start.append(len(downloads))

    def start(*args: object, **kwargs: object) -> None:
        seen_at_start.append(len(downloads))
        raise KeyboardInterrupt  # stands in for the nodes; the test ends here

    monkeypatch.setattr(launchers.local, "warm_up", warm_up)
    monkeypatch.setattr(launchers.local, "start", start)
    assert cli.main(["up", "-c", str(_config_file(tmp_path, root))]) == 130
    assert seen_at_start == [4, 4]
    assert (root / "MNIST" / "protofed-cache" / "cache.json").is_file()


def test_docker_up_reports_a_missing_dataset_with_host_paths(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        launcher_signals: None) -> None:
    def no_docker() -> None:
        raise AssertionError("Docker was reached before the data was checked")

    monkeypatch.setattr(launchers.docker, "connect", no_docker)
    root = tmp_path / "host-datasets"
    code = cli.main(["up", "-c", str(_config_file(tmp_path, root, download=False)),
                     "--backend", "docker"])
    message = capsys.readouterr().err
    assert code == 1
    assert str(root / "MNIST" / "raw") in message and "train-images-idx3-ubyte" in message
    assert "PROTOFED_DATA_DIR" in message and "data.dir" in message
    assert "/data/" not in message.replace(str(root), "")
    assert not (tmp_path / "results").exists() and not root.exists()


@pytest.mark.parametrize("inside", [True, False])
def test_containers_map_the_cache_the_launcher_built(tmp_path: Path, inside: bool) -> None:
    data_dir = tmp_path / "datasets"
    cache_dir = data_dir / "MNIST" / "protofed-cache" if inside else tmp_path / "home" / "mnist"
    config = from_dict({"nodes": 2, "deploy": {"results_dir": str(tmp_path / "results")}})
    plan = docker_backend.plan_docker(config, tmp_path / "c.toml", (), "run-1")
    mounts = docker_backend.container_mounts(plan, 0, data_dir, cache_dir)
    environment = docker_backend.container_environment(data_dir, cache_dir)
    assert (str(data_dir.resolve()), "/data", True) in mounts
    if inside:  # seen through the /data mount
        assert all(target != "/cache" for _, target, _ in mounts)
        assert "PROTOFED_CACHE_DIR" not in environment
    else:
        assert (str(tmp_path / "home"), "/cache", True) in mounts
        assert environment["PROTOFED_CACHE_DIR"] == "/cache"
