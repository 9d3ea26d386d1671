"""Federated splits: global hold-out, iid / class-fraction / Dirichlet partitions, local 80/20."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from node.data import load_dataset
from node.data.partition import (
    PARTITIONS,
    FederatedSplit,
    assign_classes,
    by_classes,
    dirichlet,
    federated_split,
    holdout,
    iid,
    split_local,
    split_warnings,
    subsample,
)
from node.errors import ConfigError, DataError


@pytest.fixture(scope="module")
def mnist_labels(data_dir: Path) -> np.ndarray:
    return load_dataset("mnist", data_dir, download=False).labels


def _balanced(num_classes: int, per_class: int) -> np.ndarray:
    """Labels 0,0,..,1,1,.. with per_class of each class."""
    return np.repeat(np.arange(num_classes), per_class)


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _assert_disjoint(parts: list[np.ndarray]) -> np.ndarray:
    """Every part is sorted int64 and no index appears twice; returns their union."""
    for part in parts:
        assert part.dtype == np.int64
        assert np.all(np.diff(part) > 0)
    union = np.concatenate(parts)
    assert len(np.unique(union)) == len(union)
    return np.sort(union)


def _all_parts(split: FederatedSplit) -> list[np.ndarray]:
    return [split.global_test] + [a for node in split.nodes for a in (node.train, node.test)]


# ---------------------------------------------------------------- federated_split on real MNIST


def test_global_test_is_stratified_ten_percent(mnist_labels: np.ndarray) -> None:
    split = federated_split(mnist_labels, 5, scheme="iid", num_classes=10, seed=0)
    assert len(split.global_test) == 7000
    # 10% of the class counts 6903, 7877, ... floored, plus one for the four largest remainders
    # (.8 for class 9, .7 for 1, .6 for 6, .5 for 8).
    expected = [690, 788, 699, 714, 682, 631, 688, 729, 683, 696]
    assert np.bincount(mnist_labels[split.global_test], minlength=10).tolist() == expected


@pytest.mark.parametrize("scheme", PARTITIONS)
def test_mnist_split_is_disjoint_cover_with_local_80_20(mnist_labels: np.ndarray,
                                                        scheme: str) -> None:
    split = federated_split(mnist_labels, 5, scheme=scheme, num_classes=10, seed=3)
    # All three schemes place every sample here (5 nodes x 6 classes cover all 10 classes).
    np.testing.assert_array_equal(_assert_disjoint(_all_parts(split)), np.arange(70000))
    for node in split.nodes:
        assert len(node.train) == round(0.8 * (len(node.train) + len(node.test)))


# ---------------------------------------------------------------- federated_split, synthetic


@pytest.mark.parametrize("scheme", PARTITIONS)
def test_seeded_determinism(scheme: str) -> None:
    labels = _balanced(10, 60)

    def run(seed: int) -> list[np.ndarray]:
        return _all_parts(federated_split(labels, 4, scheme=scheme, num_classes=10, seed=seed))

    first, again, other = run(7), run(7), run(8)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other, strict=True))


def test_global_test_independent_of_scheme_and_nodes() -> None:
    labels = _balanced(10, 60)
    tests = [federated_split(labels, n, scheme=s, num_classes=10, seed=1).global_test
             for s, n in [("iid", 3), ("classes", 5), ("dirichlet", 4)]]
    assert all(np.array_equal(tests[0], t) for t in tests[1:])


def test_subset_then_holdout() -> None:
    labels = _balanced(10, 100)
    split = federated_split(labels, 4, scheme="iid", num_classes=10, seed=2, subset=200)
    used = _assert_disjoint(_all_parts(split))
    assert len(used) == 200
    assert np.bincount(labels[used]).tolist() == [20] * 10
    assert np.bincount(labels[split.global_test]).tolist() == [2] * 10


@pytest.mark.parametrize(("kwargs", "error", "key"), [
    ({"scheme": "shards"}, ConfigError, "data.partition"),
    ({"n_nodes": 0}, ConfigError, "nodes"),
    ({"n_nodes": 50}, DataError, "nodes: 50 nodes but only 36"),
    ({"seed": -1}, ConfigError, "seed"),
    ({"global_test_fraction": 1.0}, ConfigError, "data.global_test_fraction"),
    ({"local_train_fraction": 0.0}, ConfigError, "data.local_train_fraction"),
    ({"scheme": "classes", "classes_fraction": 0.0}, ConfigError, "data.classes_fraction"),
    ({"scheme": "dirichlet", "alpha": 0.0}, ConfigError, "data.alpha"),
    ({"num_classes": 3}, DataError, "labels must lie in 0..2"),
    ({"subset": 41}, DataError, ("data.subset = 41 is more than the dataset's 40 "
                                 "samples; use at most 40")),
])
def test_federated_split_errors(kwargs: dict, error: type[Exception], key: str) -> None:
    args = {"n_nodes": 2, "scheme": "iid", "num_classes": 4, "seed": 0} | kwargs
    with pytest.raises(error, match=key):
        federated_split(_balanced(4, 10), **args)


def test_node_without_train_samples_is_data_error() -> None:
    # 10 nodes holding one class each; class 9 has no samples, so its node gets nothing.
    labels = _balanced(9, 20)
    with pytest.raises(DataError, match="no training samples"):
        federated_split(labels, 10, scheme="classes", num_classes=10, seed=0, classes_fraction=0.1)


def test_a_split_that_measures_little_is_named_and_one_that_measures_enough_is_not() -> None:
    labels = _balanced(10, 20)  # 200 samples
    fine = federated_split(labels, 2, scheme="iid", num_classes=10, seed=0,
                           global_test_fraction=0.5)  # 100 test images: 10 per class
    assert split_warnings(fine, 10, 0.8) == []
    none = federated_split(labels, 2, scheme="iid", num_classes=10, seed=0,
                           global_test_fraction=0.0)
    assert split_warnings(none, 10, 0.8) == [(
        "data.global_test_fraction = 0: there is no global test set; F1 global is not "
        "measured (the table shows -), only each node's local test split")]
    small = federated_split(labels, 2, scheme="iid", num_classes=10, seed=0, subset=30)
    assert split_warnings(small, 10, 0.8)[0].startswith(
        "the global test set has 3 images for 10 classes (under 100): its F1 is noise")
    tiny = federated_split(labels, 5, scheme="iid", num_classes=10, seed=0, subset=10,
                           global_test_fraction=0.5)  # 5 nodes, one image each: all train
    notes = split_warnings(tiny, 10, 0.8)
    assert notes[-1].startswith("5 of 5 nodes have no local test images (nodes 0, 1, 2, 3, 4)")
    assert len(split_warnings(tiny, 10, 1.0)) == 1  # no local test set was asked for


# ---------------------------------------------------------------- building blocks


@pytest.mark.parametrize(("size", "expected_counts"), [
    (10, [5, 3, 2]), (7, [4, 2, 1]), (0, [50, 30, 20]), (-1, [50, 30, 20]), (100, [50, 30, 20]),
    (150, [50, 30, 20]),
])
def test_subsample_is_stratified(size: int, expected_counts: list[int]) -> None:
    labels = np.repeat([0, 1, 2], [50, 30, 20])
    picked = subsample(labels, size, _rng())
    _assert_disjoint([picked])
    assert np.bincount(labels[picked], minlength=3).tolist() == expected_counts


@pytest.mark.parametrize(("fraction", "held_counts"), [(0.1, [5, 3, 2]), (0.25, [13, 7, 5]),
                                                       (0.0, [0, 0, 0])])
def test_holdout_is_stratified(fraction: float, held_counts: list[int]) -> None:
    labels = np.repeat([0, 1, 2], [50, 30, 20])
    indices = np.arange(100)
    rest, held = holdout(indices, labels, fraction, _rng())
    np.testing.assert_array_equal(_assert_disjoint([rest, held]), indices)
    assert np.bincount(labels[held], minlength=3).tolist() == held_counts


@pytest.mark.parametrize("fraction", [-0.1, 1.0])
def test_holdout_rejects_fraction(fraction: float) -> None:
    with pytest.raises(ConfigError, match="fraction"):
        holdout(np.arange(10), np.zeros(10, dtype=np.int64), fraction, _rng())


@pytest.mark.parametrize(("n_nodes", "sizes"), [(1, [100]), (3, [34, 33, 33]), (7, [15] * 2 + [14] * 5)])
def test_iid_covers_in_near_equal_parts(n_nodes: int, sizes: list[int]) -> None:
    indices = np.arange(100, 200)
    parts = iid(indices, _balanced(10, 30), n_nodes, _rng())
    np.testing.assert_array_equal(_assert_disjoint(parts), indices)
    assert [len(part) for part in parts] == sizes


@pytest.mark.parametrize(("n_nodes", "k", "perm", "expected"), [
    (3, 2, [3, 1, 4, 0, 2], [[3, 1], [4, 0], [2, 3]]),
    (2, 3, [2, 0, 1], [[2, 0, 1], [2, 0, 1]]),
    (5, 2, list(range(10)), [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]),
    (2, 1, [1, 0, 2, 3], [[1], [0]]),
])
def test_assign_classes_by_hand(n_nodes: int, k: int, perm: list[int],
                                expected: list[list[int]]) -> None:
    assert [a.tolist() for a in assign_classes(n_nodes, k, np.array(perm))] == expected


@pytest.mark.parametrize(("fraction", "k"), [(0.6, 6), (0.4, 4), (0.2, 2)])
def test_by_classes_gives_k_classes_per_node(fraction: float, k: int) -> None:
    labels = _balanced(10, 40)
    parts = by_classes(np.arange(400), labels, 5, fraction, 10, _rng(4))
    _assert_disjoint(parts)
    assert [len(np.unique(labels[part])) for part in parts] == [k] * 5
    # k*5 class slots over 10 classes: each class is shared by k/2 nodes, so nothing is dropped.
    assert sum(len(part) for part in parts) == 400


def test_by_classes_disjoint_pairs_take_whole_classes() -> None:
    labels = _balanced(10, 40)
    parts = by_classes(np.arange(400), labels, 5, 0.2, 10, _rng(9))
    node_classes = [set(np.unique(labels[part]).tolist()) for part in parts]
    assert set().union(*node_classes) == set(range(10))
    assert [len(part) for part in parts] == [80] * 5


def test_by_classes_splits_shared_class_evenly() -> None:
    # 3 classes x 10 samples, k = round(2/3 * 3) = 2: every class is held by two nodes.
    labels = _balanced(3, 10)
    parts = by_classes(np.arange(30), labels, 3, 2 / 3, 3, _rng(1))
    _assert_disjoint(parts)
    for part in parts:
        counts = np.bincount(labels[part], minlength=3)
        assert sorted(counts.tolist()) == [0, 5, 5]


def test_by_classes_warns_about_unheld_classes(caplog: pytest.LogCaptureFixture) -> None:
    labels = _balanced(10, 40)
    with caplog.at_level(logging.WARNING, logger="node.data.partition"):
        parts = by_classes(np.arange(400), labels, 2, 0.2, 10, _rng())
    assert "6 of 10 classes are held by no node" in caplog.text
    assert sum(len(part) for part in parts) == 4 * 40


@pytest.mark.parametrize("fraction", [0.0, -0.2, 1.5])
def test_by_classes_rejects_fraction(fraction: float) -> None:
    with pytest.raises(ConfigError, match="data.classes_fraction"):
        by_classes(np.arange(40), _balanced(4, 10), 2, fraction, 4, _rng())


def _mean_max_class_share(parts: list[np.ndarray], labels: np.ndarray) -> float:
    return float(np.mean([np.bincount(labels[part]).max() / len(part) for part in parts]))


def test_dirichlet_small_alpha_is_skewed() -> None:
    labels = _balanced(10, 200)
    skewed = dirichlet(np.arange(2000), labels, 5, 0.1, 10, _rng(5))
    even = dirichlet(np.arange(2000), labels, 5, 100.0, 10, _rng(5))
    for parts in (skewed, even):
        np.testing.assert_array_equal(_assert_disjoint(parts), np.arange(2000))
        assert min(len(part) for part in parts) >= 10
    # alpha=100 keeps each node near the 10% uniform share; alpha=0.1 concentrates it.
    assert _mean_max_class_share(even, labels) < 0.15
    assert _mean_max_class_share(skewed, labels) > 0.3


@pytest.mark.parametrize("min_size", [10, 50])
def test_dirichlet_respects_min_size(min_size: int) -> None:
    labels = _balanced(10, 100)
    parts = dirichlet(np.arange(1000), labels, 8, 0.3, 10, _rng(2), min_size=min_size)
    assert min(len(part) for part in parts) >= min_size


@pytest.mark.parametrize(("n_samples", "n_classes", "alpha", "match"), [
    (30, 3, 0.5, "nodes: 5 nodes with at least 10"),
    (1000, 1, 0.01, "use a larger data.alpha or fewer nodes"),
])
def test_dirichlet_impossible_is_data_error(n_samples: int, n_classes: int, alpha: float,
                                            match: str) -> None:
    labels = np.arange(n_samples) % n_classes
    with pytest.raises(DataError, match=match):
        dirichlet(np.arange(n_samples), labels, 5, alpha, n_classes, _rng())


@pytest.mark.parametrize("alpha", [0.0, -1.0])
def test_dirichlet_rejects_alpha(alpha: float) -> None:
    with pytest.raises(ConfigError, match="data.alpha"):
        dirichlet(np.arange(100), _balanced(10, 10), 2, alpha, 10, _rng())


@pytest.mark.parametrize(("size", "fraction", "n_train"), [(10, 0.8, 8), (5, 0.8, 4), (7, 0.5, 4),
                                                          (3, 1.0, 3)])
def test_split_local_sizes(size: int, fraction: float, n_train: int) -> None:
    indices = np.arange(50, 50 + size)
    share = split_local(indices, fraction, _rng())
    assert len(share.train) == n_train
    np.testing.assert_array_equal(_assert_disjoint([share.train, share.test]), indices)


@pytest.mark.parametrize("fraction", [0.0, 1.2])
def test_split_local_rejects_fraction(fraction: float) -> None:
    with pytest.raises(ConfigError, match="data.local_train_fraction"):
        split_local(np.arange(10), fraction, _rng())
