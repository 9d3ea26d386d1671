"""Aggregation math against hand computations: model averages and prototypes (Eq. 3-5)."""

import pytest
import torch

from node.aggregation import (
    aggregate_prototypes,
    local_prototypes,
    nearest_prototype,
    weighted_mean,
)


def test_weighted_mean_by_sample_count():
    a = {"w": torch.tensor([1.0, 2.0]), "steps": torch.tensor(7)}
    b = {"w": torch.tensor([3.0, 6.0]), "steps": torch.tensor(9)}
    out = weighted_mean([(a, 1), (b, 3)])
    assert torch.allclose(out["w"], torch.tensor([2.5, 5.0]))
    assert int(out["steps"]) == 7  # integer buffers are not averaged
    assert torch.equal(a["w"], torch.tensor([1.0, 2.0]))  # inputs untouched


def test_weighted_mean_of_one_state_is_that_state():
    a = {"w": torch.randn(3, 4)}
    assert torch.allclose(weighted_mean([(a, 5)])["w"], a["w"])


@pytest.mark.parametrize("states", [[], [({"w": torch.ones(1)}, 0)]])
def test_weighted_mean_rejects_empty_or_zero_weight(states):
    with pytest.raises(ValueError):
        weighted_mean(states)


def test_local_prototypes_are_class_means_with_counts():
    embeddings = torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0]])
    labels = torch.tensor([0, 0, 1])
    protos, counts = local_prototypes(embeddings, labels, num_classes=3)
    assert torch.allclose(protos, torch.tensor([[2.0, 0.0], [0.0, 2.0], [0.0, 0.0]]))
    assert counts.tolist() == [2, 1, 0]


def test_global_prototypes_are_count_weighted_means():
    a = (torch.tensor([[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]]), torch.tensor([2, 0, 0]))
    b = (torch.tensor([[4.0, 4.0], [2.0, 0.0], [0.0, 0.0]]), torch.tensor([1, 3, 0]))
    protos, known = aggregate_prototypes([a, b])
    # class 0: (2*(1,1) + 1*(4,4)) / 3 = (2,2); class 1 only from b; class 2 known by nobody
    assert torch.allclose(protos, torch.tensor([[2.0, 2.0], [2.0, 0.0], [0.0, 0.0]]))
    assert known.tolist() == [True, True, False]


def test_global_prototypes_do_not_shrink_with_the_number_of_nodes():
    same = (torch.tensor([[3.0, -1.0]]), torch.tensor([5]))
    protos, _ = aggregate_prototypes([same] * 7)
    assert torch.allclose(protos, same[0])  # Eq. 4 as printed would give same / 7


def test_nearest_prototype_skips_unknown_classes():
    protos = torch.tensor([[0.0, 0.0], [10.0, 10.0], [1.0, 1.0]])
    known = torch.tensor([True, True, False])
    x = torch.tensor([[0.9, 0.9], [9.0, 8.0]])
    assert nearest_prototype(x, protos, known).tolist() == [0, 1]
