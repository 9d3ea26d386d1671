"""Shared fixtures: where the real datasets live."""

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The directory holding MNIST/ and FashionMNIST/ (PROTOFED_DATA_DIR or ../shared/datasets)."""
    path = Path(os.environ.get("PROTOFED_DATA_DIR", REPO_ROOT.parent / "shared" / "datasets"))
    if not (path / "MNIST").is_dir():
        pytest.fail(f"real MNIST not found under {path}: set PROTOFED_DATA_DIR to the datasets folder")
    return path
