"""The consensus distance and its sketch, against hand computations."""

import numpy as np
import pytest
import torch

from node.consensus import (
    consensus_distance,
    distances_from_mean,
    flat_parameters,
    from_text,
    sketch,
    to_text,
)


def test_consensus_distance_by_hand():
    # mean (1, 0): each of the two is at squared distance 1
    assert consensus_distance([np.array([0.0, 0.0]), np.array([2.0, 0.0])]) == 1.0
    # mean (1, 1): squared distances 2, 0, 2 -> 4/3
    three = [np.array([0.0, 0.0]), np.array([1.0, 1.0]), np.array([2.0, 2.0])]
    assert consensus_distance(three) == pytest.approx(4 / 3)
    assert distances_from_mean(dict(enumerate(three))) == pytest.approx({0: 2, 1: 0, 2: 2})


def test_no_distance_without_two_comparable_models():
    assert consensus_distance([np.ones(3)]) is None
    assert consensus_distance([np.ones(3), np.ones(4)]) is None
    assert consensus_distance([np.ones(2), np.array([np.nan, 1.0])]) is None


def test_a_sketch_as_large_as_the_model_is_the_model():
    vector = np.arange(5.0)
    assert np.array_equal(sketch(vector, 5, seed=1), vector.astype(np.float32))


def test_the_sketch_is_linear_and_estimates_squared_distances():
    generator = np.random.default_rng(0)
    a, b = generator.normal(size=100_000), generator.normal(size=100_000)
    sa, sb = (sketch(v, 4096, seed=3) for v in (a, b))
    assert np.allclose(sketch(a + b, 4096, seed=3), sa + sb, atol=1e-3)
    # ||S(a - b)||^2 estimates ||a - b||^2 with a relative deviation near sqrt(2/4096) = 2.2%
    estimate, exact = float(np.sum((sa - sb) ** 2.0)), float(np.sum((a - b) ** 2))
    assert estimate == pytest.approx(exact, rel=0.1)
    models = [a + 0.1 * generator.normal(size=100_000) for _ in range(6)]
    sketched = consensus_distance([sketch(m, 4096, seed=3) for m in models])
    assert sketched == pytest.approx(consensus_distance(models), rel=0.1)


def test_every_node_draws_the_same_sketch_from_the_seed():
    vector = np.linspace(-1, 1, 10_000)
    assert np.array_equal(sketch(vector, 64, seed=9), sketch(vector.copy(), 64, seed=9))
    assert not np.array_equal(sketch(vector, 64, seed=9), sketch(vector, 64, seed=10))


def test_sketches_travel_as_text_and_garbage_reads_as_nothing():
    values = np.array([1.5, -2.0, 0.0], dtype=np.float32)
    assert np.array_equal(from_text(to_text(values)), values)
    assert len(from_text("not base64!")) == 0 and len(from_text("AAA=")) == 0


def test_flat_parameters_take_the_float_tensors_in_order():
    state = {"w": torch.tensor([[1.0, 2.0]]), "steps": torch.tensor(3), "b": torch.tensor([4.0])}
    assert flat_parameters(state).tolist() == [1.0, 2.0, 4.0]
