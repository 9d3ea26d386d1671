"""FedPR: its loss (Eq. 4), model + prototypes travelling, both aggregations (Eq. 1, 3)."""

import math

import pytest
import torch

from node.aggregation import nearest_prototype
from node.algorithms import create
from node.algorithms.base import Payload
from node.algorithms.fedpr import FedPR, client_mean_prototypes
from node.algorithms.fedpr_losses import PROTOTYPE_WEIGHT, fedpr_loss, prototype_l2
from tests.helpers import CPU, hand_prototypes, peers_of, snapshot, tiny_config, tiny_data


def test_distance_term_by_hand():
    embeddings = torch.tensor([[3.0, 4.0], [1.0, 1.0], [0.0, 1.0]])
    labels = torch.tensor([0, 1, 2])
    prototypes = torch.tensor([[0.0, 0.0], [1.0, 1.0], [5.0, 5.0]])
    # ||(3,4)-(0,0)|| = 5, ||(1,1)-(1,1)|| = 0; class 2 has no prototype and is skipped
    known = torch.tensor([True, True, False])
    assert float(prototype_l2(embeddings, labels, prototypes, known)) == pytest.approx(2.5)
    # with class 2 known: ||(0,1)-(5,5)|| = sqrt(25 + 16); mean of (5, 0, sqrt 41)
    all_known = torch.tensor([True, True, True])
    assert float(prototype_l2(embeddings, labels, prototypes, all_known)) == pytest.approx(
        (5.0 + math.sqrt(41.0)) / 3)
    assert float(prototype_l2(embeddings, labels, prototypes, torch.zeros(3, dtype=bool))) == 0.0


def test_distance_is_not_squared_and_has_a_finite_gradient_at_zero():
    prototypes = torch.tensor([[0.0, 0.0]])
    known = torch.tensor([True])
    far = prototype_l2(torch.tensor([[6.0, 8.0]]), torch.tensor([0]), prototypes, known)
    assert float(far) == pytest.approx(10.0)  # the l2 distance, not its square 100
    embeddings = torch.zeros(1, 2, requires_grad=True)
    prototype_l2(embeddings, torch.tensor([0]), prototypes, known).backward()
    assert torch.isfinite(embeddings.grad).all()



def test_the_squared_and_unit_length_readings_by_hand():
    embeddings = torch.tensor([[3.0, 4.0], [0.0, 2.0]])
    labels = torch.tensor([0, 1])
    prototypes = torch.tensor([[0.0, 0.0], [2.0, 0.0]])
    known = torch.tensor([True, True])
    # squared: (25 + (4 + 4)) / 2
    assert float(prototype_l2(embeddings, labels, prototypes, known, squared=True)) == \
        pytest.approx(16.5)
    # unit length: (0.6, 0.8) against 0 scaled (0, 0) stays 0 -> distance 1; (0, 1) against
    # (1, 0): sqrt 2
    assert float(prototype_l2(embeddings, labels, prototypes, known, normalized=True)) == \
        pytest.approx((1.0 + math.sqrt(2.0)) / 2)
    total, _, distance = fedpr_loss(torch.zeros(2, 2), embeddings, labels, prototypes, known,
                                    0.5, squared=True)
    assert float(total) == pytest.approx(math.log(2.0) + 0.5 * 16.5)
    assert float(distance) == pytest.approx(16.5)

def test_loss_by_hand():
    logits = torch.tensor([[0.0, math.log(3.0)]])  # softmax (1/4, 3/4)
    embeddings = torch.tensor([[3.0, 4.0]])
    total, ce, distance = fedpr_loss(logits, embeddings, torch.tensor([1]),
                                     torch.zeros(2, 2), torch.tensor([True, True]),
                                     PROTOTYPE_WEIGHT)
    # Eq. 4, unweighted: -ln(3/4) + ||(3,4)|| = ln(4/3) + 5
    assert PROTOTYPE_WEIGHT == 1.0
    assert float(ce) == pytest.approx(math.log(4 / 3))
    assert float(distance) == pytest.approx(5.0)
    assert float(total) == pytest.approx(math.log(4 / 3) + 5.0)


def test_model_and_prototypes_travel():
    data = tiny_data()
    algorithm = create("fedpr", tiny_config(), data, CPU, 0)
    algorithm.train_round(1)
    payload = algorithm.payload()
    assert FedPR.kinds == ("model", "prototypes") and set(payload) == {"model", "prototypes"}
    assert set(payload["model"].tensors) == set(algorithm.model.state_dict())
    counts = data.train_y.bincount(minlength=data.num_classes).tolist()
    assert payload["model"].meta == {"samples": 20, "classes": counts}
    sent = payload["prototypes"]
    assert set(sent.tensors) == {"prototypes", "classes", "counts"} and sent.meta == {}
    assert sent.tensors["classes"].tolist() == [0, 1, 2]
    assert sent.tensors["counts"].tolist() == [7, 7, 6]
    with torch.no_grad():
        algorithm.model.eval()
        embeddings = algorithm.model(data.train_x)[1]
    for c in range(3):  # Eq. 2: the mean embedding of the class
        assert torch.allclose(sent.tensors["prototypes"][c],
                              embeddings[data.train_y == c].mean(dim=0), atol=1e-6)


def test_global_prototypes_are_unweighted_means_over_the_nodes_that_have_the_class():
    a = (torch.tensor([[1.0, 1.0], [2.0, 0.0], [0.0, 0.0]]), torch.tensor([2, 5, 0]))
    b = (torch.tensor([[4.0, 4.0], [0.0, 0.0], [0.0, 0.0]]), torch.tensor([1, 0, 0]))
    protos, known = client_mean_prototypes([a, b])
    # class 0: ((1,1) + (4,4)) / 2 = (2.5, 2.5), whatever the counts; class 1 only from a
    assert torch.allclose(protos, torch.tensor([[2.5, 2.5], [2.0, 0.0], [0.0, 0.0]]))
    assert known.tolist() == [True, True, False]


def hand_updates(algorithm):
    """(own update, a copy of own model, a peer's update): the peer's model is own + 4
    with 60 samples; the prototypes are hand_prototypes()."""
    own = algorithm.payload()
    own["prototypes"], peer_prototypes = hand_prototypes()
    mine = snapshot(own["model"].tensors)
    peer = {"model": Payload({k: t + 4.0 for k, t in mine.items()}, {"samples": 60}),
            "prototypes": peer_prototypes}
    return own, mine, peer


# class 0: ((1,1,1,1) + (4,4,4,4)) / 2; class 1 only ours; class 2 only the peer's
EXPECTED = torch.tensor([[2.5, 2.5, 2.5, 2.5], [0.0, 2.0, 0.0, 2.0], [1.0, 0.0, 1.0, 0.0]])


def test_aggregate_averages_models_by_samples_and_prototypes_by_nodes():
    data = tiny_data()
    # the mean's arithmetic on hand-shifted weights: no norm bound (test_poison)
    algorithm = create("fedpr", tiny_config(norm_bound=0, validation=0, held_influence=0), data, CPU, 0)
    own, mine, peer = hand_updates(algorithm)
    assert algorithm.aggregate(own, {1: peer}) == []
    # (20 * w + 60 * (w + 4)) / 80 = w + 3
    for name, value in algorithm.model.state_dict().items():
        assert torch.allclose(value, mine[name] + 3.0, atol=1e-6)
    assert torch.allclose(algorithm.global_prototypes, EXPECTED)
    with torch.no_grad():
        embeddings = algorithm.model(data.global_x)[1]
    assert torch.equal(algorithm.predict(data.global_x),
                       nearest_prototype(embeddings, EXPECTED, algorithm.known))


def test_a_peer_with_a_bad_model_or_bad_prototypes_is_left_out_entirely():
    # the mean's arithmetic on hand-shifted weights: no norm bound (test_poison)
    algorithm = create("fedpr", tiny_config(norm_bound=0, validation=0, held_influence=0), tiny_data(), CPU, 0)
    own, mine, good = hand_updates(algorithm)
    first = next(iter(mine))
    bad_model = {"model": Payload({**mine, first: torch.zeros(2)}, {"samples": 9}),
                 "prototypes": Payload({"prototypes": torch.full((1, 4), 100.0),
                                        "classes": torch.tensor([1]),
                                        "counts": torch.tensor([5])})}
    bad_prototypes = {"model": Payload({k: t + 100.0 for k, t in mine.items()}, {"samples": 9}),
                      "prototypes": Payload({"prototypes": torch.zeros(1, 3),  # dimension 3
                                             "classes": torch.tensor([1]),
                                             "counts": torch.tensor([5])})}
    only_model = {"model": good["model"]}
    received = {1: bad_model, 2: bad_prototypes, 3: only_model, 4: good}
    assert peers_of(algorithm.aggregate(own, received)) == [1, 2, 3]
    for name, value in algorithm.model.state_dict().items():
        assert torch.allclose(value, mine[name] + 3.0, atol=1e-6)
    assert torch.allclose(algorithm.global_prototypes, EXPECTED)


def test_predict_is_the_argmax_before_any_prototype():
    data = tiny_data()
    algorithm = create("fedpr", tiny_config(), data, CPU, 0)
    with torch.no_grad():
        expected = algorithm.model(data.global_x)[0].argmax(dim=1)
    assert torch.equal(algorithm.predict(data.global_x), expected)
