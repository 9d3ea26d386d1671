"""Both prediction rules are recorded, and prototype inference does not collapse on disjoint
classes once prototypes come from the aggregated model (in-process federations)."""

import dataclasses

import pytest
import torch

from node.algorithms import ALGORITHMS
from node.algorithms.base import ARGMAX, PROTOTYPE, NodeData
from node.config import from_dict
from node.runtime import evaluate
from tests.helpers import mnist_config, run_in_process

CONSTANT_PREDICTOR_F1 = 2 / 11 / 10  # macro-F1 of answering one class on 10 balanced classes


def disjoint_config(data_dir, algorithm, prototypes_from="aggregated"):
    """5 nodes, each holding 2 of MNIST's 10 classes: every class lives on one node."""
    return mnist_config(data_dir, 4000, name="rules", nodes=5, rounds=3, seed=3,
                        algorithm=algorithm,
                        data={"partition": "classes", "classes_fraction": 0.2},
                        exchange={"codec": "int16", "prototypes_from": prototypes_from})


@pytest.mark.parametrize("algorithm", ["profe", "fedpr"])
def test_prototype_rule_is_well_above_a_constant_predictor_on_disjoint_classes(
        data_dir, tmp_path, algorithm):
    results = run_in_process(disjoint_config(data_dir, algorithm), tmp_path)
    for result in results:
        assert result["status"] == "finished"
        final = result["rounds"][-1]["global_test"]
        prototype = final["by_rule"][PROTOTYPE]
        assert prototype["f1"] > 0.4, (result["node"], final)
        assert prototype["f1"] > 10 * CONSTANT_PREDICTOR_F1
        assert prototype["top_class_share"] < 0.5
        assert set(final["by_rule"]) == {ARGMAX, PROTOTYPE}
        assert final["rule"] == ALGORITHMS[algorithm].reported_rule
        assert final["f1"] == final["by_rule"][final["rule"]]["f1"]


def test_aggregated_prototypes_cost_no_extra_bytes_over_local_ones(data_dir, tmp_path):
    """The second exchange step moves the same prototype message, only later in the round."""
    sent = {}
    for source in ("aggregated", "local"):
        config = from_dict({**disjoint_config(data_dir, "profe", source).to_dict(),
                            "rounds": 1, "nodes": 3})
        results = run_in_process(config, tmp_path / source)
        sent[source] = [r["bytes_sent_by_kind"] for r in results]
    for aggregated, local in zip(sent["aggregated"], sent["local"]):
        assert aggregated["model"] == local["model"]
        # same classes, same counts; int16 payloads of equal shape have equal sizes
        assert aggregated["prototypes"] == local["prototypes"]


class OneRule:
    """A stand-in algorithm: argmax answers class 0, the prototype rule reads x's value."""

    reported_rule = ARGMAX

    def predictions(self, x):
        return {ARGMAX: torch.zeros(len(x), dtype=torch.int64),
                PROTOTYPE: x[:, 0].to(torch.int64)}


def test_evaluate_records_every_rule_and_the_top_class_share():
    y = torch.tensor([0, 1, 0, 1])
    x = y.to(torch.float32).unsqueeze(1)
    result = dataclasses.asdict(evaluate(OneRule(), x, y, num_classes=2, batch_size=3))
    assert result["rule"] == ARGMAX
    # argmax answers 0 for everything: class 0 F1 = 2*2/(4+2), class 1 F1 = 0
    assert result["by_rule"][ARGMAX] == pytest.approx(
        {"accuracy": 0.5, "f1": (2 / 3 + 0.0) / 2, "top_class_share": 1.0})
    assert result["by_rule"][PROTOTYPE] == pytest.approx(
        {"accuracy": 1.0, "f1": 1.0, "top_class_share": 0.5})
    assert result["f1"] == result["by_rule"][ARGMAX]["f1"]


def test_evaluate_on_an_empty_set():
    empty = evaluate(OneRule(), torch.zeros(0, 1), torch.zeros(0, dtype=torch.int64), 2, 8)
    assert empty.f1 == 0.0 and empty.by_rule == {}


def test_every_algorithm_reports_a_rule_it_has():
    data = NodeData(train_x=torch.randn(6, 1, 8, 8), train_y=torch.arange(6) % 3,
                    test_x=torch.randn(2, 1, 8, 8), test_y=torch.tensor([0, 1]),
                    global_x=torch.randn(2, 1, 8, 8), global_y=torch.tensor([0, 1]),
                    num_classes=3)
    config = from_dict({"nodes": 2, "seed": 1, "fedhp": {"init_steps": 5},
                        "model": {"teacher": "cnn", "student": "cnn",
                                  "teacher_channels": [2, 4], "student_channels": [2, 4],
                                  "embedding_dim": 4}})
    for name, cls in ALGORITHMS.items():
        algorithm = cls(config, data, torch.device("cpu"), 0)
        rules = algorithm.predictions(data.global_x)
        assert algorithm.reported_rule in rules, name
        assert torch.equal(algorithm.predict(data.global_x), rules[algorithm.reported_rule])
