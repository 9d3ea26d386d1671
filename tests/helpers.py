"""Small set-ups several test files share: a tiny model config and synthetic node data."""

import torch

from node.algorithms.base import NodeData
from node.config import from_dict
from node.inprocess import memory_federation, run_in_memory

CPU = torch.device("cpu")


def tiny_config(**train):
    """Two nodes, a tiny CNN (channels 2, 4; embedding 4) for 1x8x8 images."""
    return from_dict({"nodes": 2, "seed": 1,
                      "model": {"teacher": "cnn", "teacher_channels": [2, 4], "embedding_dim": 4},
                      "train": {"batch_size": 8, **train}})


def tiny_data(samples=20, classes=3):
    """Seeded 1x8x8 noise images with cycling labels; test and global sets are its head."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(samples, 1, 8, 8, generator=g)
    y = torch.arange(samples) % classes
    return NodeData(train_x=x, train_y=y, test_x=x[:6], test_y=y[:6], global_x=x[:6],
                    global_y=y[:6], num_classes=classes)


def run_in_process(config, tmp_path):
    """Every node of `config` in its own thread on one MemoryHub; their result dicts."""
    return run_in_memory(memory_federation(config), tmp_path)
