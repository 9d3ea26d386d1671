"""Split a labelled dataset into a global test set and per-node train/test shares.

Every function takes `labels`, the label array of the whole dataset, and `indices`, distinct
positions into it, and returns index arrays (np.int64, sorted ascending) drawn from `indices`.
All randomness comes from the numpy Generator passed in, so equal seeds give equal splits.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from node.errors import ConfigError, DataError
from node.wording import counted

log = logging.getLogger(__name__)

PARTITIONS = ("iid", "classes", "dirichlet")

DIRICHLET_TRIES = 100


@dataclass(frozen=True, eq=False)
class NodeShare:
    """One node's local train and test indices into the dataset."""

    train: np.ndarray
    test: np.ndarray


@dataclass(frozen=True, eq=False)
class FederatedSplit:
    """The global test indices and one NodeShare per node, in node order."""

    global_test: np.ndarray
    nodes: tuple[NodeShare, ...]


def subsample(labels: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """A stratified random subset of `size` indices into labels (size <= 0 or >= N: all)."""
    everything = np.arange(len(labels), dtype=np.int64)
    if size <= 0 or size >= len(labels):
        return everything
    return _stratified_pick(everything, labels, size, rng)


def holdout(indices: np.ndarray, labels: np.ndarray, fraction: float,
            rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Hold out round(fraction * len(indices)) indices, stratified by label: (rest, held_out)."""
    if not 0 <= fraction < 1:
        raise ConfigError(f"holdout fraction must be in [0, 1), got {fraction}")
    indices = np.asarray(indices, dtype=np.int64)
    held = _stratified_pick(indices, labels, round(fraction * len(indices)), rng)
    return np.setdiff1d(indices, held), held


def iid(indices: np.ndarray, labels: np.ndarray, n_nodes: int,
        rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffle and cut into n_nodes parts whose sizes differ by at most one (labels unused)."""
    _check_nodes(n_nodes, len(indices))
    shuffled = rng.permutation(np.asarray(indices, dtype=np.int64))
    return [np.sort(part) for part in np.array_split(shuffled, n_nodes)]


def assign_classes(n_nodes: int, k: int, perm: np.ndarray) -> list[np.ndarray]:
    """Node i holds perm[(i*k + j) % C] for j < k: consecutive runs of k classes, wrapping around.

    With 5 nodes, 10 classes and k=2 the nodes get disjoint pairs covering every class.
    """
    count = len(perm)
    return [np.array([perm[(i * k + j) % count] for j in range(k)], dtype=np.int64)
            for i in range(n_nodes)]


def by_classes(indices: np.ndarray, labels: np.ndarray, n_nodes: int, fraction: float,
               num_classes: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Give each node k = max(1, round(fraction * C)) classes (see assign_classes).

    Each class's shuffled samples are split evenly among the nodes holding it; classes that
    no node holds are left out.
    """
    if not 0 < fraction <= 1:
        raise ConfigError(f"data.classes_fraction must be in (0, 1], got {fraction}")
    _check_nodes(n_nodes, len(indices))
    members = _class_members(indices, labels, num_classes)
    k = max(1, round(fraction * num_classes))
    assignment = assign_classes(n_nodes, k, rng.permutation(num_classes))
    holders: list[list[int]] = [[] for _ in range(num_classes)]
    for node, classes in enumerate(assignment):
        for cls in classes:
            holders[cls].append(node)
    unheld = sum(1 for nodes in holders if not nodes)
    if unheld:
        log.warning("classes partition: %d of %d classes are held by no node and left out",
                    unheld, num_classes)
    parts: list[list[np.ndarray]] = [[] for _ in range(n_nodes)]
    for cls, nodes in enumerate(holders):
        if nodes:
            chunks = np.array_split(rng.permutation(members[cls]), len(nodes))
            for node, chunk in zip(nodes, chunks, strict=True):
                parts[node].append(chunk)
    return [_sorted_union(chunks) for chunks in parts]


def dirichlet(indices: np.ndarray, labels: np.ndarray, n_nodes: int, alpha: float,
              num_classes: int, rng: np.random.Generator, min_size: int = 10) -> list[np.ndarray]:
    """Split each class by proportions ~ Dirichlet(alpha); redraw until every node has min_size.

    Redraws continue from the same Generator, at most DIRICHLET_TRIES times.
    """
    if not alpha > 0:
        raise ConfigError(f"data.alpha must be > 0, got {alpha}")
    _check_nodes(n_nodes, len(indices))
    if n_nodes * min_size > len(indices):
        raise DataError(f"nodes: {n_nodes} nodes with at least {min_size} samples each need "
                        f"{n_nodes * min_size}, only {len(indices)} to share; use fewer nodes "
                        f"or a larger data.subset")
    members = _class_members(indices, labels, num_classes)
    best = 0
    for _ in range(DIRICHLET_TRIES):
        parts = _dirichlet_draw(members, n_nodes, alpha, rng)
        smallest = min(len(part) for part in parts)
        if smallest >= min_size:
            return parts
        best = max(best, smallest)
    raise DataError(f"data.alpha={alpha}: after {DIRICHLET_TRIES} draws some node still had "
                    f"fewer than {min_size} samples (best draw's smallest node: {best}); "
                    f"use a larger data.alpha or fewer nodes")


def split_local(indices: np.ndarray, train_fraction: float, rng: np.random.Generator) -> NodeShare:
    """Shuffle, then the first round(train_fraction * len) go to train and the rest to test."""
    if not 0 < train_fraction <= 1:
        raise ConfigError(f"data.local_train_fraction must be in (0, 1], got {train_fraction}")
    shuffled = rng.permutation(np.asarray(indices, dtype=np.int64))
    cut = round(train_fraction * len(shuffled))
    return NodeShare(train=np.sort(shuffled[:cut]), test=np.sort(shuffled[cut:]))


def federated_split(labels: np.ndarray, n_nodes: int, *, scheme: str, num_classes: int,
                    seed: int, classes_fraction: float = 0.6, alpha: float = 0.5,
                    global_test_fraction: float = 0.1, local_train_fraction: float = 0.8,
                    subset: int = 0) -> FederatedSplit:
    """Subset -> global test hold-out -> partition among nodes by scheme -> local train/test.

    Each stage draws from its own stream of SeedSequence(seed), so the global test set depends
    only on labels, seed, subset and global_test_fraction, not on the scheme or node count.
    """
    if scheme not in PARTITIONS:
        raise ConfigError(f"data.partition: unknown scheme {scheme!r}; choose one of {PARTITIONS}")
    if not 0 <= global_test_fraction < 1:
        raise ConfigError(f"data.global_test_fraction must be in [0, 1), got {global_test_fraction}")
    if not isinstance(seed, int | np.integer) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer, got {seed!r}")
    labels = _checked_labels(labels, num_classes)
    if subset > len(labels):
        raise DataError(f"data.subset = {subset:,} is more than the dataset's {len(labels):,} "
                        f"samples; use at most {len(labels):,} (0: all of them)")
    subset_rng, test_rng, part_rng, local_rng = (
        np.random.default_rng(child) for child in np.random.SeedSequence(int(seed)).spawn(4))
    pool = subsample(labels, subset, subset_rng)
    rest, global_test = holdout(pool, labels, global_test_fraction, test_rng)
    shares = _partition(scheme, rest, labels, n_nodes, num_classes=num_classes,
                        classes_fraction=classes_fraction, alpha=alpha, rng=part_rng)
    nodes = tuple(split_local(share, local_train_fraction, local_rng) for share in shares)
    for node, share in enumerate(nodes):
        if len(share.train) == 0:
            raise DataError(f"nodes: node {node} got no training samples under "
                            f"data.partition={scheme!r}; use fewer nodes, a larger data.subset "
                            f"or another data.partition")
    log.info("split %d samples: global test %d, %d nodes with %d..%d train samples",
             len(pool), len(global_test), n_nodes, min(len(s.train) for s in nodes),
             max(len(s.train) for s in nodes))
    return FederatedSplit(global_test=global_test, nodes=nodes)


def split_of(config, labels: np.ndarray, num_classes: int) -> FederatedSplit:
    """The split a federation config (node.settings.FederationConfig) asks for: the one
    call every process makes, so the launcher's check and the nodes split alike. A hub
    (topology.hub) holds no data: the others share it all."""
    d, hub = config.data, config.topology.hub
    split = federated_split(labels, config.nodes - (hub is not None), scheme=d.partition,
                            num_classes=num_classes, seed=config.seed,
                            classes_fraction=d.classes_fraction, alpha=d.alpha,
                            global_test_fraction=d.global_test_fraction,
                            local_train_fraction=d.local_train_fraction, subset=d.subset)
    return split if hub is None else with_empty_share(split, hub)


def with_empty_share(split: FederatedSplit, node: int) -> FederatedSplit:
    """`split` with an empty share put in at `node`, the shares from there on shifted by one."""
    empty = NodeShare(np.zeros(0, np.int64), np.zeros(0, np.int64))
    shares = (*split.nodes[:node], empty, *split.nodes[node:])
    return FederatedSplit(global_test=split.global_test, nodes=shares)


SMALL_TEST_PER_CLASS = 10  # below this many images per class, a test set's F1 is noise


def split_warnings(split: FederatedSplit, num_classes: int,
                   local_train_fraction: float) -> list[str]:
    """What the user must hear about a split that runs but measures little: no global
    test set, one too small for its F1 to mean much, nodes without a local test set."""
    notes = []
    smallest = SMALL_TEST_PER_CLASS * num_classes
    if len(split.global_test) == 0:
        notes.append("data.global_test_fraction = 0: there is no global test set; F1 "
                     "global is not measured (the table shows -), only each node's local "
                     "test split")
    elif len(split.global_test) < smallest:
        notes.append(f"the global test set has {counted(len(split.global_test), 'image')} for "
                     f"{num_classes} classes (under {smallest}): its F1 is noise; use a larger "
                     "data.subset or data.global_test_fraction")
    # a hub (no training samples either) has no test set by design
    empty = [i for i, share in enumerate(split.nodes) if len(share.test) == 0 and len(share.train)]
    if empty and local_train_fraction < 1:  # at 1, no local test set is what was asked
        listed = ", ".join(map(str, empty[:10])) + (" ..." if len(empty) > 10 else "")
        notes.append(f"{len(empty)} of {len(split.nodes)} nodes have no local test images "
                     f"(nodes {listed}): their local F1 is not measured; use a larger "
                     "data.subset or a smaller data.local_train_fraction")
    return notes


def _partition(scheme: str, indices: np.ndarray, labels: np.ndarray, n_nodes: int, *,
               num_classes: int, classes_fraction: float, alpha: float,
               rng: np.random.Generator) -> list[np.ndarray]:
    """Dispatch to the partition function named by scheme."""
    if scheme == "iid":
        return iid(indices, labels, n_nodes, rng)
    if scheme == "classes":
        return by_classes(indices, labels, n_nodes, classes_fraction, num_classes, rng)
    return dirichlet(indices, labels, n_nodes, alpha, num_classes, rng)


def _check_nodes(n_nodes: int, n_samples: int) -> None:
    """Raise unless 1 <= n_nodes <= n_samples."""
    if n_nodes < 1:
        raise ConfigError(f"nodes: need at least 1 node, got {n_nodes}")
    if n_nodes > n_samples:
        raise DataError(f"nodes: {n_nodes} nodes but only {n_samples} samples to share; "
                        f"use fewer nodes or a larger data.subset")


def _checked_labels(labels: np.ndarray, num_classes: int) -> np.ndarray:
    """labels as a 1-D int64 array, every value in [0, num_classes)."""
    labels = np.asarray(labels)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise DataError(f"labels must be a 1-D integer array, got {labels.dtype} {labels.shape}")
    if len(labels) and (labels.min() < 0 or labels.max() >= num_classes):
        raise DataError(f"labels must lie in 0..{num_classes - 1}, "
                        f"got {labels.min()}..{labels.max()}")
    return labels.astype(np.int64, copy=False)


def _class_members(indices: np.ndarray, labels: np.ndarray, num_classes: int) -> list[np.ndarray]:
    """indices grouped by class: entry c holds the indices whose label is c, ascending."""
    indices = np.asarray(indices, dtype=np.int64)
    own = _checked_labels(labels, num_classes)[indices]
    order = np.argsort(own, kind="stable")
    bounds = np.searchsorted(own[order], np.arange(num_classes + 1))
    return [np.sort(indices[order[bounds[c]:bounds[c + 1]]]) for c in range(num_classes)]


def _apportion(counts: np.ndarray, total: int) -> np.ndarray:
    """Split total across groups in proportion to counts (largest remainder, ties by position)."""
    whole = int(counts.sum())
    if whole == 0:
        return np.zeros_like(counts)
    scaled = counts.astype(np.int64) * total
    quotas = scaled // whole
    remainders = scaled % whole
    shortfall = total - int(quotas.sum())
    quotas[np.argsort(-remainders, kind="stable")[:shortfall]] += 1
    return quotas


def _stratified_pick(indices: np.ndarray, labels: np.ndarray, count: int,
                     rng: np.random.Generator) -> np.ndarray:
    """count indices drawn without replacement, each class in proportion to its share."""
    indices = np.asarray(indices, dtype=np.int64)
    classes, inverse = np.unique(np.asarray(labels)[indices], return_inverse=True)
    quotas = _apportion(np.bincount(inverse, minlength=len(classes)), count)
    picks = [rng.choice(indices[inverse == c], size=quota, replace=False)
             for c, quota in enumerate(quotas)]
    return _sorted_union(picks)


def _dirichlet_draw(members: list[np.ndarray], n_nodes: int, alpha: float,
                    rng: np.random.Generator) -> list[np.ndarray]:
    """One draw: each class's shuffled samples cut by Dirichlet(alpha * ones) proportions."""
    parts: list[list[np.ndarray]] = [[] for _ in range(n_nodes)]
    for class_indices in members:
        shuffled = rng.permutation(class_indices)
        shares = rng.dirichlet(np.full(n_nodes, alpha))
        cuts = np.clip((np.cumsum(shares)[:-1] * len(shuffled)).astype(np.int64), 0, len(shuffled))
        for node, chunk in enumerate(np.split(shuffled, cuts)):
            parts[node].append(chunk)
    return [_sorted_union(chunks) for chunks in parts]


def _sorted_union(chunks: list[np.ndarray]) -> np.ndarray:
    """The chunks concatenated and sorted ascending, as int64 (empty if none)."""
    if not chunks:
        return np.empty(0, dtype=np.int64)
    return np.sort(np.concatenate(chunks).astype(np.int64, copy=False))
