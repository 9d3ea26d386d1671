"""FedAvg: its loss, what travels, sample-weighted averaging and a short in-process federation."""

import math

import pytest
import torch

from node.algorithms import create
from node.algorithms.base import Payload
from node.algorithms.common import local_sgd
from node.algorithms.fedavg import FedAvg
from node.algorithms.losses import cross_entropy
from tests.helpers import CPU, peers_of, snapshot, tiny_config, tiny_data


def test_cross_entropy_term_by_hand():
    logits = torch.tensor([[0.0, math.log(3.0)], [0.0, math.log(3.0)]])
    # softmax = (1/4, 3/4): label 1 costs -ln(3/4) = ln(4/3), label 0 costs ln 4
    assert float(cross_entropy(logits[:1], torch.tensor([1]))) == pytest.approx(math.log(4 / 3))
    both = cross_entropy(logits, torch.tensor([1, 0]))
    assert float(both) == pytest.approx((math.log(4 / 3) + math.log(4.0)) / 2)


def test_reported_loss_is_the_cross_entropy_of_the_step():
    config = tiny_config(batch_size=64)  # one batch holds all 20 samples: one SGD step
    data = tiny_data()
    algorithm = create("fedavg", config, data, CPU, 0)
    with torch.no_grad():
        expected = float(cross_entropy(algorithm.model(data.train_x)[0], data.train_y))
    stats = algorithm.train_round(1)
    assert set(stats) == {"loss"}
    assert stats["loss"] == pytest.approx(expected, rel=1e-5)


def test_local_sgd_averages_each_term_over_steps():
    config = tiny_config(batch_size=8)  # 20 samples: batches of 8, 8, 4 -> 3 steps
    data = tiny_data()
    algorithm = create("fedavg", config, data, CPU, 0)
    seen = []

    def terms(x, labels):
        seen.append(len(labels))
        logits, _ = algorithm.model(x)
        return {"loss": cross_entropy(logits, labels), "size": torch.tensor(float(len(labels)))}

    stats = local_sgd((algorithm.model,), {"loss": (algorithm.optimizer,)}, data, config, 0, 1,
                      terms)
    assert seen == [8, 8, 4]
    assert stats["size"] == pytest.approx((8 + 8 + 4) / 3)


def test_payload_is_the_model_and_nothing_else():
    data = tiny_data()
    algorithm = create("fedavg", tiny_config(), data, CPU, 0)
    payload = algorithm.payload()
    assert FedAvg.kinds == ("model",) and set(payload) == {"model"}
    assert set(payload["model"].tensors) == set(algorithm.model.state_dict())
    counts = data.train_y.bincount(minlength=data.num_classes).tolist()
    assert payload["model"].meta == {"samples": 20, "classes": counts} and sum(counts) == 20
    assert all(not t.requires_grad and t.device.type == "cpu"
               for t in payload["model"].tensors.values())


def shifted(tensors, by):
    return {name: t + by for name, t in tensors.items()}


def test_aggregate_is_the_sample_weighted_average():
    # the mean's arithmetic on hand-shifted weights: no norm bound (test_poison)
    algorithm = create("fedavg", tiny_config(norm_bound=0, validation=0, held_influence=0), tiny_data(), CPU, 0)
    own = algorithm.payload()
    mine = snapshot(own["model"].tensors)
    peer = Payload(shifted(mine, 4.0), {"samples": 60})
    rejected = algorithm.aggregate(own, {1: {"model": peer}})
    # (20 * w + 60 * (w + 4)) / 80 = w + 3
    assert rejected == []
    for name, value in algorithm.model.state_dict().items():
        assert torch.allclose(value, mine[name] + 3.0, atol=1e-6)


def test_malformed_peers_are_rejected_and_the_rest_averaged():
    # the mean's arithmetic on hand-shifted weights: no norm bound (test_poison)
    algorithm = create("fedavg", tiny_config(norm_bound=0, validation=0, held_influence=0), tiny_data(), CPU, 0)
    own = algorithm.payload()
    mine = snapshot(own["model"].tensors)
    first = next(iter(mine))
    missing = {k: v for k, v in mine.items() if k != first}
    wrong_shape = {**mine, first: torch.zeros(3)}
    received = {
        1: {"model": Payload(missing, {"samples": 5})},
        2: {"model": Payload(wrong_shape, {"samples": 5})},
        3: {"model": Payload(shifted(mine, 1.0), {"samples": 0})},
        4: {"prototypes": Payload({"prototypes": torch.zeros(1, 4)}, {})},
        5: {"model": Payload(shifted(mine, 4.0), {"samples": 20})},
    }
    assert peers_of(algorithm.aggregate(own, received)) == [1, 2, 3, 4]
    # only peer 5 counts: (20 * w + 20 * (w + 4)) / 40 = w + 2
    for name, value in algorithm.model.state_dict().items():
        assert torch.allclose(value, mine[name] + 2.0, atol=1e-6)


def test_predict_is_the_argmax_of_the_logits():
    data = tiny_data()
    algorithm = create("fedavg", tiny_config(), data, CPU, 0)
    with torch.no_grad():
        expected = algorithm.model(data.global_x)[0].argmax(dim=1)
    assert torch.equal(algorithm.predict(data.global_x), expected)
