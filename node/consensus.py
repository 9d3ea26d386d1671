"""Consensus distance: how far the nodes' models are from their average, from a small sketch
of each model that every node records per round.

The federation's consensus distance in a round is (1/n) sum_i ||x_i - x_bar||^2 over the n
nodes present (Kong et al., ICML 2021, "Consensus control for decentralized deep learning").
A node sees only its own model, so it records S x_i, where S is a CountSketch the same for
every node (each coordinate added, with a random sign, to one of k buckets, both drawn from
the run's seed). S is linear, so S x_bar is the mean of the sketches, and ||S y||^2 is an
unbiased estimate of ||y||^2 with a relative standard deviation of about sqrt(2/k)
(Charikar, Chen and Farach-Colton 2002; Thorup and Zhang 2012). With k at least the
model's size the sketch is the model itself, and the distance is exact.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the reports read sketches without loading torch
    import torch


def flat_parameters(tensors: Mapping[str, torch.Tensor]) -> np.ndarray:
    """The floating-point tensors of a model, one after another in the mapping's order."""
    parts = [t.detach().reshape(-1).double().cpu().numpy()
             for t in tensors.values() if t.is_floating_point()]
    return np.concatenate(parts) if parts else np.zeros(0)


@functools.lru_cache(maxsize=4)
def _hashes(length: int, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    generator = np.random.default_rng([seed, length, size])
    buckets = generator.integers(0, size, length, dtype=np.int32)
    signs = generator.integers(0, 2, length, dtype=np.int8) * 2 - 1
    return buckets, signs


def sketch(vector: np.ndarray, size: int, seed: int) -> np.ndarray:
    """`vector` itself when it has at most `size` values, else its CountSketch of `size`."""
    if len(vector) <= size:
        return vector.astype(np.float32)
    buckets, signs = _hashes(len(vector), size, seed)
    return np.bincount(buckets, weights=vector * signs, minlength=size).astype(np.float32)


def to_text(values: np.ndarray) -> str:
    """Little-endian float32 values as base64, for a JSON record."""
    return base64.b64encode(values.astype("<f4").tobytes()).decode("ascii")


def from_text(text: str) -> np.ndarray:
    """The float32 values `to_text` wrote; empty for text that is not such values."""
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        return np.zeros(0, dtype=np.float32)
    if len(raw) % 4:
        return np.zeros(0, dtype=np.float32)
    return np.frombuffer(raw, dtype="<f4").astype(np.float32)


def consensus_distance(sketches: Sequence[np.ndarray]) -> float | None:
    """(1/n) sum_i ||s_i - s_bar||^2 over sketches of one length; None for fewer than two,
    lengths that differ (models that differ) or values that are not finite."""
    if len(sketches) < 2 or len({len(s) for s in sketches}) != 1 or not len(sketches[0]):
        return None
    stacked = np.stack([s.astype(np.float64) for s in sketches])
    if not np.isfinite(stacked).all():
        return None
    return float(np.mean(np.sum((stacked - stacked.mean(axis=0)) ** 2, axis=1)))


def distances_from_mean(sketches: Mapping[int, np.ndarray]) -> dict[int, float]:
    """Each node's ||s_i - s_bar||^2 (its share of the consensus distance), by node."""
    if consensus_distance(list(sketches.values())) is None:
        return {}
    mean = np.mean(np.stack([s.astype(np.float64) for s in sketches.values()]), axis=0)
    return {node: float(np.sum((s.astype(np.float64) - mean) ** 2))
            for node, s in sketches.items()}
