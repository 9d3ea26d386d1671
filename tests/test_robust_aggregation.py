"""Robust aggregation rules: hand computations, a bound on what one poisoned in-neighbour can
do, and an in-process federation with a poisoner."""

import pytest
import torch

from node.aggregation import (
    aggregate_prototypes,
    aggregate_states,
    coordinate_median,
    trimmed_mean,
    weighted_mean,
)
from node.algorithms.fedavg import FedAvg
from tests.helpers import PerNode, mnist_config, run_in_process


def states(values, weights=None):
    weights = weights or [1] * len(values)
    return [({"w": torch.tensor(v, dtype=torch.float32),
              "steps": torch.tensor(7)}, w) for v, w in zip(values, weights)]


def test_median_and_trimmed_mean_by_hand():
    stacked = torch.tensor([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [100.0, -50.0]])
    # column 0 sorted 1 2 3 100 -> median (2+3)/2; column 1 sorted -50 10 20 30 -> 15
    assert coordinate_median(stacked).tolist() == [2.5, 15.0]
    # trim 0.25 of 4 -> drop one at each end: (2+3)/2 and (10+20)/2
    assert trimmed_mean(stacked, 0.25).tolist() == [2.5, 15.0]
    assert trimmed_mean(stacked, 0.0).tolist() == [26.5, 2.5]
    assert coordinate_median(stacked[:3]).tolist() == [2.0, 20.0]


def test_clipped_mean_by_hand():
    # own [0, 0]; peers at distance 1, 2 and 100: radius = upper median of (0, 1, 2, 100) = 2
    got = aggregate_states(states([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0], [100.0, 0.0]]),
                           rule="clipped_mean")["w"]
    # clipped: (0,0), (1,0), (0,2), (2,0) -> mean (0.75, 0.5)
    assert got.tolist() == pytest.approx([0.75, 0.5])
    # a lone in-neighbour is not clipped: upper median of (0, 3) is 3
    alone = aggregate_states(states([[0.0, 0.0], [3.0, 0.0]]), rule="clipped_mean")["w"]
    assert alone.tolist() == pytest.approx([1.5, 0.0])


def test_mean_is_the_papers_weighted_mean_bit_for_bit():
    contributions = states([[1.0, 2.0], [3.0, 5.0]], weights=[1, 3])
    assert torch.equal(aggregate_states(contributions)["w"], weighted_mean(contributions)["w"])
    assert aggregate_states(contributions, rule="median")["steps"].item() == 7


@pytest.mark.parametrize("rule", ["median", "trimmed_mean", "clipped_mean"])
def test_one_poisoned_in_neighbour_moves_a_robust_rule_by_a_bounded_amount(rule):
    torch.manual_seed(0)
    honest = [torch.randn(50) * 0.1 for _ in range(5)]
    clean = aggregate_states(states([h.tolist() for h in honest]), rule=rule)["w"]
    for scale in (1e3, 1e6, 1e9):
        poisoned = honest + [torch.full((50,), scale)]
        mean_shift = (aggregate_states(states([p.tolist() for p in poisoned]))["w"]
                      - clean).norm()
        robust_shift = (aggregate_states(states([p.tolist() for p in poisoned]), rule=rule)["w"]
                        - clean).norm()
        assert mean_shift > scale  # the plain mean follows the poisoner without bound
        assert robust_shift < 1.0  # honest values are ~0.1: bounded whatever the scale


def test_robust_prototypes_per_class_over_the_nodes_that_have_it():
    own = (torch.tensor([[0.0, 0.0], [0.0, 0.0]]), torch.tensor([5, 0]))
    peer = (torch.tensor([[2.0, 2.0], [4.0, 4.0]]), torch.tensor([5, 5]))
    poisoner = (torch.tensor([[1e6, 1e6], [6.0, 6.0]]), torch.tensor([2**31 - 1, 5]))
    protos, known = aggregate_prototypes([own, peer, poisoner], rule="median")
    assert known.tolist() == [True, True]
    assert protos.tolist() == [[2.0, 2.0], [5.0, 5.0]]  # class 1: median of (4, 6)
    mean, _ = aggregate_prototypes([own, peer, poisoner])
    assert mean[0, 0] > 9e5  # the count-weighted mean is owned by the poisoner


class Poisoner(FedAvg):
    """FedAvg that sends huge weights claiming a huge sample count."""

    name = "poisoner"

    def payload(self):
        own = super().payload()["model"]
        tensors = {k: (torch.full_like(v, 1e4) if v.is_floating_point() else v)
                   for k, v in own.tensors.items()}
        return {"model": type(own)(tensors=tensors, meta={"samples": 2**31 - 1})}


def federation(data_dir, rule):
    """Five FedAvg nodes on 6,000 MNIST samples aggregating with `rule`."""
    return mnist_config(data_dir, 6000, name="robust", nodes=5, rounds=3, seed=5,
                        algorithm="fedavg", model={"teacher_channels": [8, 16]},
                        aggregation={"rule": rule}, train={"lr": 0.05},
                        exchange={"codec": "fp32"})


def honest_f1(results, poisoned):
    return sum(r["rounds"][-1]["global_test"]["f1"] for r in results
               if r["node"] not in poisoned) / (len(results) - len(poisoned))


def test_a_robust_rule_keeps_f1_with_one_poisoned_in_neighbour(data_dir, tmp_path,
                                                              monkeypatch, rule="median"):
    """(Under the plain mean the same poisoner drives the honest models to NaN: see the
    unbounded shift in the unit test above.)"""
    import node.algorithms

    clean = honest_f1(run_in_process(federation(data_dir, "mean"), tmp_path / "clean"), {4})
    monkeypatch.setattr(node.algorithms, "ALGORITHMS",
                        PerNode(node.algorithms.ALGORITHMS, {4: Poisoner}))
    attacked = honest_f1(run_in_process(federation(data_dir, rule), tmp_path / rule), {4})
    assert clean > 0.8
    assert attacked >= clean - 0.02, (rule, clean, attacked)
