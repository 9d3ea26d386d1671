"""Shared fixtures: where the real datasets live, one torch thread on a shared machine, the
CurveZMQ keyrings of a small federation, and the Docker engine, node image and installed
wheel of the Docker test files (tests/docker_support.py)."""

import os
from pathlib import Path

# Before torch loads OpenMP, here and in every process the tests start: three test workers
# share two cores, and a torch thread that spins while it waits for its sibling burns the
# core the sibling needs (one node on two threads, on a busy machine: 5 to 14 CPU s
# spinning, 0.8 to 0.9 waiting passively).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest
import torch

from node.net.security import generate_keys, load_keyring, write_keys
from tests.docker_support import client, installed, node_image  # noqa: F401 (fixtures)
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


# The longest files first (`--durations` on a quiet machine): with each file whole on one
# worker (`--dist loadfile`) and this order kept (`--no-loadscope-reorder`, as `make test`
# runs), the longest start at once on the workers and the short ones fill in after, instead
# of a long one starting last. The Docker tests were one file of
# 5.4 worker-minutes, longer than the rest of the suite on the other workers: a file each
# for lifecycle, files and graphs now.
FIRST = ("tests/test_federation.py", "tests/test_sim.py", "tests/test_docker_lifecycle.py",
         "tests/test_docker_files.py", "tests/test_docker_graphs.py", "tests/test_contract.py",
         "tests/test_docs.py", "tests/test_poison.py", "tests/test_docker.py")


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: next((i for i, name in enumerate(FIRST)
                                      if item.nodeid.startswith(name)), len(FIRST)))
