"""Shared fixtures: where the real datasets live, and one torch thread on a shared machine."""

import os
from pathlib import Path

import pytest
import torch

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
