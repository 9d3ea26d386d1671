"""Shared fixtures: where the real datasets live, one torch thread on a shared machine, and
the CurveZMQ keyrings of a small federation."""

import os
from pathlib import Path

import pytest
import torch

from node.net.security import generate_keys, load_keyring, write_keys
from tests.helpers import REPO


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The directory holding MNIST/ and FashionMNIST/ (PROTOFED_DATA_DIR or ../shared/datasets)."""
    path = Path(os.environ.get("PROTOFED_DATA_DIR", REPO.parent / "shared" / "datasets"))
    if not (path / "MNIST").is_dir():
        pytest.fail(f"real MNIST not found under {path}: set PROTOFED_DATA_DIR to the datasets folder")
    return path


@pytest.fixture
def one_thread():
    """Torch on one thread for the test, as a node of a local federation trains: tiny
    tensors gain nothing from intra-op threads, and on a busy CPU they stall."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def rings(tmp_path):
    """The CurveZMQ keyrings of a 3-node federation, node 0's first."""
    folder = tmp_path / "keys"
    write_keys(folder, generate_keys(3))
    return [load_keyring(folder, i, 3) for i in range(3)]


# The longest files first: with each file whole on one worker (`--dist loadfile`), the
# Docker tests (about 4 of the suite's 14 worker-minutes) start at once on one worker while
# the others share the rest, instead of starting last.
FIRST = ("tests/test_docker.py", "tests/test_federation.py")


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: next((i for i, name in enumerate(FIRST)
                                      if item.nodeid.startswith(name)), len(FIRST)))
