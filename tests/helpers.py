"""Small set-ups several test files share: a tiny model config and synthetic node data."""

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
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


REPO = Path(__file__).resolve().parents[1]


def write_config(tmp_path, data_dir, name, *, nodes=3, rounds=2, algorithm="profe",
                 topology="fully_connected", codec="int16", startup=60, round_timeout=60,
                 deploy="", extra=""):
    """A small federation config file: MNIST subset of 1,500, short timeouts; `deploy`
    adds lines to [deploy], `extra` whole tables."""
    text = f"""
name = "{name}"
nodes = {nodes}
rounds = {rounds}
seed = 7
algorithm = "{algorithm}"
[topology]
kind = "{topology}"
[data]
dataset = "mnist"
dir = "{data_dir}"
download = false
subset = 1500
[exchange]
codec = "{codec}"
[timeouts]
startup = {startup}
round = {round_timeout}
shutdown = 5
[deploy]
results_dir = "{tmp_path / "results"}"
{deploy}
{extra}
"""
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def protofed(*args, timeout=300):
    """Run the `protofed` command to the end in a child process."""
    return subprocess.run([sys.executable, "-m", "deploy.cli", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, check=False)


def run_federation(tmp_path, data_dir, name, timeout=300, **settings):
    """`protofed up` to the end: (completed process, summary or None, node results)."""
    config = write_config(tmp_path, data_dir, name, **settings)
    done = protofed("up", "-c", config, "--run-id", name, timeout=timeout)
    run_dir = tmp_path / "results" / name
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else None
    nodes = [json.loads(p.read_text())
             for p in sorted(run_dir.glob("node-*.json"), key=lambda p: int(p.stem[5:]))]
    return done, summary, nodes


@contextlib.contextmanager
def protofed_running(*args):
    """`protofed` started in the background; killed and reaped on the way out, whatever
    happened, so no process or pipe outlives the test."""
    process = subprocess.Popen([sys.executable, "-m", "deploy.cli", *map(str, args)],
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        for pipe in (process.stdout, process.stderr):
            pipe.close()


def wait_for_rounds(result_path, rounds=1, timeout=180.0):
    """Wait until a node's result file records `rounds` rounds done; fail the test if not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if json.loads(Path(result_path).read_text())["rounds_done"] >= rounds:
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    pytest.fail(f"{result_path} never recorded {rounds} rounds done")
