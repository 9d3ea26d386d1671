"""FedProto: its loss, that only prototypes travel, prototype aggregation, heterogeneous models."""

import math

import pytest
import torch

from node.aggregation import nearest_prototype
from node.algorithms import create
from node.algorithms.base import Payload
from node.algorithms.common import weightless
from node.algorithms.fedproto import FedProto
from node.algorithms.fedproto_losses import fedproto_loss, paper_lambda
from node.runtime import load_node_data
from tests.helpers import (
    CPU,
    as_received,
    hand_prototypes,
    mnist_config,
    peers_of,
    tiny_config,
    tiny_data,
)


def test_loss_by_hand():
    logits = torch.zeros(2, 2)  # uniform over 2 classes: CE = ln 2
    embeddings = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    labels = torch.tensor([0, 1])
    prototypes = torch.tensor([[0.0, 0.0], [3.0, 2.0]])
    known = torch.tensor([True, True])
    total, ce, reg = fedproto_loss(logits, embeddings, labels, prototypes, known, lam=2.0)
    # squared errors: (1-0)^2 + (2-0)^2 = 5 and (3-3)^2 + (4-2)^2 = 4; mean over 2x2 = 9/4
    assert float(ce) == pytest.approx(math.log(2.0))
    assert float(reg) == pytest.approx(9 / 4)
    assert float(total) == pytest.approx(math.log(2.0) + 2.0 * 9 / 4)


def test_loss_skips_classes_without_a_global_prototype():
    logits = torch.zeros(2, 2)
    embeddings = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    labels = torch.tensor([0, 1])
    prototypes = torch.tensor([[0.0, 0.0], [3.0, 2.0]])
    # only class 0 is known: (1 + 4) / 2 = 2.5
    _, _, reg = fedproto_loss(logits, embeddings, labels, prototypes,
                              torch.tensor([True, False]), lam=1.0)
    assert float(reg) == pytest.approx(2.5)
    # none known: the loss is the plain cross-entropy
    total, ce, reg = fedproto_loss(logits, embeddings, labels, prototypes,
                                   torch.tensor([False, False]), lam=1.0)
    assert float(reg) == 0.0 and float(total) == pytest.approx(float(ce))


def test_paper_lambda():
    # "The best lambda values for MNIST, FEMNIST and CIFAR10 are 1, 1 and 0.1"
    assert paper_lambda("mnist") == 1.0 and paper_lambda("cifar10") == 0.1


def test_only_prototypes_travel():
    data = tiny_data()
    algorithm = create("fedproto", tiny_config(), data, CPU, 0)
    algorithm.train_round(1)
    payload = algorithm.payload()
    assert FedProto.kinds == ("prototypes",) and set(payload) == {"prototypes"}
    sent = payload["prototypes"]
    assert set(sent.tensors) == {"prototypes", "classes", "counts"} and sent.meta == {}
    assert sent.tensors["classes"].tolist() == [0, 1, 2]
    assert sent.tensors["counts"].tolist() == [7, 7, 6]  # labels 0,1,2,0,1,2,... over 20
    assert tuple(sent.tensors["prototypes"].shape) == (3, 4)
    # no model weights: 3 prototypes of dimension 4, 3 class ids, 3 counts and nothing else
    assert sum(t.numel() for t in sent.tensors.values()) == 3 * 4 + 3 + 3
    # the prototype of class c is the mean embedding of the class-c training samples
    with torch.no_grad():
        algorithm.model.eval()
        embeddings = algorithm.model(data.train_x)[1]
    for c in range(3):
        assert torch.allclose(sent.tensors["prototypes"][c],
                              embeddings[data.train_y == c].mean(dim=0), atol=1e-6)


def test_nothing_is_sent_before_training():
    payload = create("fedproto", tiny_config(), tiny_data(), CPU, 0).payload()
    assert [t.numel() for t in payload["prototypes"].tensors.values()] == [0, 0, 0]


def test_aggregate_gives_count_weighted_global_prototypes():
    data = tiny_data()  # the arithmetic on hand prototypes: no norm bound (test_poison)
    algorithm = create("fedproto", tiny_config(norm_bound=0, validation=0, held_influence=0), data, CPU, 0)
    assert torch.equal(algorithm.predict(data.global_x),
                       algorithm.model(data.global_x)[0].argmax(dim=1))  # no prototype yet
    own, peer = hand_prototypes()
    assert algorithm.aggregate({"prototypes": own}, {1: {"prototypes": peer}}) == []
    # class 0: (2 * 1 + 1 * 4) / 3 = 2; class 1 only ours; class 2 only the peer's
    expected = torch.tensor([[2.0, 2.0, 2.0, 2.0], [0.0, 2.0, 0.0, 2.0], [1.0, 0.0, 1.0, 0.0]])
    assert torch.allclose(algorithm.global_prototypes, expected)
    assert algorithm.known.tolist() == [True, True, True]
    with torch.no_grad():
        embeddings = algorithm.model(data.global_x)[1]
    assert torch.equal(algorithm.predict(data.global_x),
                       nearest_prototype(embeddings, expected, algorithm.known))


def test_a_hub_serves_the_global_prototypes_with_their_counts_and_a_client_adopts_them():
    """A hub (no data: no class of its own) aggregating two clients sends their count-weighted
    means with the counts summed, not its empty local prototypes; a client whose own
    prototypes weigh nothing (runtime: weightless) takes them as its global ones."""
    config = tiny_config(norm_bound=0, validation=0, held_influence=0)
    hub = create("fedproto", config, tiny_data(samples=0), CPU, 0)
    assert hub.served_payload()["prototypes"].tensors["classes"].numel() == 0
    first, second = hand_prototypes()
    assert hub.aggregate(hub.payload(), {1: {"prototypes": first},
                                         2: {"prototypes": second}}) == []
    served = hub.served_payload()["prototypes"]
    # class 0: (2 * 1 + 1 * 4) / 3 = 2 from 2 + 1 samples; class 1: the first's alone (1
    # sample); class 2: the second's alone (3 samples)
    expected = torch.tensor([[2.0, 2.0, 2.0, 2.0], [0.0, 2.0, 0.0, 2.0], [1.0, 0.0, 1.0, 0.0]])
    assert served.tensors["classes"].tolist() == [0, 1, 2]
    assert served.tensors["counts"].tolist() == [3, 1, 3]
    assert torch.allclose(served.tensors["prototypes"], expected)
    client = create("fedproto", config, tiny_data(), CPU, 1)
    client.train_round(1)
    assert client.aggregate(weightless(client.payload(), samples=0),
                            {0: as_received({"prototypes": served})}) == []
    assert torch.allclose(client.global_prototypes, expected)
    assert client.known.tolist() == [True, True, True]


def test_malformed_prototypes_are_rejected():
    algorithm = create("fedproto", tiny_config(norm_bound=0, validation=0, held_influence=0), tiny_data(), CPU, 0)
    own, good = hand_prototypes()
    t = good.tensors
    received = {
        1: {"prototypes": Payload({**t, "prototypes": torch.zeros(2, 5)})},  # other dimension
        2: {"prototypes": Payload({**t, "classes": torch.tensor([0, 3])})},  # class 3 of 3
        3: {"prototypes": Payload({**t, "weights": torch.zeros(4)})},  # something extra
        4: {"model": Payload({"embed.weight": torch.zeros(4, 4)}, {"samples": 3})},
        5: {"prototypes": Payload({**t, "counts": torch.tensor([1.0, 3.0])})},  # float counts
        6: {"prototypes": good},
    }
    assert peers_of(algorithm.aggregate({"prototypes": own}, received)) == [1, 2, 3, 4, 5]
    expected = torch.tensor([[2.0, 2.0, 2.0, 2.0], [0.0, 2.0, 0.0, 2.0], [1.0, 0.0, 1.0, 0.0]])
    assert torch.allclose(algorithm.global_prototypes, expected)


def test_two_different_architectures_train_together(data_dir, one_thread):
    config = mnist_config(data_dir, 600, nodes=2, seed=5, train={"batch_size": 16, "lr": 0.05},
                          model={"teacher": "cnn", "teacher_channels": [8, 16],
                                 "embedding_dim": 32,
                                 "groups": [{"nodes": [1], "teacher_channels": [4, 8]}]})
    datas = [load_node_data(config, i, CPU) for i in range(2)]
    nodes = [create("fedproto", config, d, CPU, i) for i, d in enumerate(datas)]
    shapes = [{k: tuple(v.shape) for k, v in n.model.state_dict().items()} for n in nodes]
    assert [s["features.0.weight"][0] for s in shapes] == [8, 4]  # first conv's channels
    assert [s["features.3.weight"][0] for s in shapes] == [16, 8]
    assert shapes[0]["embed.weight"][0] == shapes[1]["embed.weight"][0] == 32
    losses = [[], []]
    for round_ in range(1, 4):
        for i, node in enumerate(nodes):
            losses[i].append(node.train_round(round_))
        payloads = [as_received(n.payload()) for n in nodes]
        for i, node in enumerate(nodes):
            assert node.aggregate(payloads[i], {1 - i: payloads[1 - i]}) == []
        # both nodes see the same two contributions, so hold the same global prototypes
        assert torch.allclose(nodes[0].global_prototypes, nodes[1].global_prototypes)
        assert bool(nodes[0].known.all())
    for stats in losses:
        assert stats[0]["proto_loss"] == 0.0 and stats[1]["proto_loss"] > 0.0
        assert stats[-1]["loss"] < stats[0]["loss"], stats
        assert stats[-1]["ce_loss"] < stats[0]["ce_loss"], stats
