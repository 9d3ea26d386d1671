"""FedProc (paper 004): loss terms by hand, the network, payload, aggregation, a tiny run."""

import math

import pytest
import torch
from torch import nn

from node.algorithms.base import Payload
from node.algorithms.fedproc import (
    PROJECTION_DIM,
    alpha_schedule,
    fedproc_loss,
    gpc_loss,
)
from tests.helpers import as_received, peers_of, synthetic_node, tiny_data

E = math.e


def fedproc_node():
    """A FedProc of 4 rounds on tiny random 1x8x8 images, embedding dim 8: fast, no
    dataset needed."""
    return synthetic_node("fedproc", tiny_data(test=4), rounds=4)


# --- loss terms --------------------------------------------------------------------------

PROTOS = torch.tensor([[2.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
ALL = torch.tensor([True, True, True])


def test_gpc_loss_by_hand():
    # z1 = (1, 0), label 0: cosines to (c0, c1, c2) = (1, 0, -1)
    #   -> -log(e / (e + 1 + 1/e)) = log(e + 1 + 1/e) - 1 = log(4.08616) - 1 = 0.40761
    # z2 = (0, 2), label 1: cosines (0, 1, 0) -> log(1 + e + 1) - 1 = log(4.71828) - 1 = 0.55144
    # mean = 0.47953 (no temperature in Eq. 4)
    z = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    expected = ((math.log(E + 1 + 1 / E) - 1) + (math.log(2 + E) - 1)) / 2
    assert abs(expected - 0.47953) < 1e-5
    assert gpc_loss(z, torch.tensor([0, 1]), PROTOS, ALL).item() == pytest.approx(expected,
                                                                                 abs=1e-6)


def test_gpc_loss_leaves_out_classes_without_prototype():
    # class 2 has no prototype: it leaves the softmax, and the sample labelled 2 adds nothing.
    # z1 = (1, 0), label 0: cosines (1, 0) -> -log(e / (e + 1)) = log(1 + 1/e) = 0.31326
    z = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])
    known = torch.tensor([True, True, False])
    loss = gpc_loss(z, torch.tensor([0, 2]), PROTOS, known)
    assert loss.item() == pytest.approx(math.log(1 + 1 / E), abs=1e-6)
    assert gpc_loss(z, torch.tensor([2, 2]), PROTOS, known).item() == 0.0
    assert gpc_loss(z, torch.tensor([0, 1]), PROTOS, torch.zeros(3, dtype=torch.bool)) == 0.0


def test_alpha_schedule_follows_algorithm_1():
    # paper t = 0..T-1 is runtime round 1..T: alpha = 1 - (round - 1)/T; T = 4 -> 1, .75, .5, .25
    assert [alpha_schedule(r, 4) for r in (1, 2, 3, 4)] == [1.0, 0.75, 0.5, 0.25]
    with pytest.raises(ValueError):
        alpha_schedule(0, 4)
    with pytest.raises(ValueError):
        alpha_schedule(5, 4)


def test_the_final_fit_after_the_last_round_keeps_the_last_rounds_alpha():
    # train.final_fit trains round rounds + 1 = 5 of 4: alpha stays 1 - 3/4
    assert fedproc_node().train_round(5)["alpha"] == 0.25


def test_total_loss_mixes_gpc_and_cross_entropy_by_alpha():
    # logits (0, log 3), label 1: CE = -log(3/4) = log(4/3) = 0.28768
    # z = (0, 2), label 1: gpc = log(2 + e) - 1 = 0.55144
    # alpha = 0.25: 0.25 * 0.55144 + 0.75 * 0.28768 = 0.35362
    logits = torch.tensor([[0.0, math.log(3.0), -100.0]])
    z = torch.tensor([[0.0, 2.0]])
    y = torch.tensor([1])
    expected = 0.25 * (math.log(2 + E) - 1) + 0.75 * math.log(4 / 3)
    assert abs(expected - 0.35362) < 1e-5
    loss, gpc, ce = fedproc_loss(logits, z, y, PROTOS, ALL, 0.25)
    assert loss.item() == pytest.approx(expected, abs=1e-5)
    assert gpc.item() == pytest.approx(math.log(2 + E) - 1, abs=1e-6)
    assert ce.item() == pytest.approx(math.log(4 / 3), abs=1e-6)
    assert fedproc_loss(logits, z, y, PROTOS, ALL, 1.0)[0].item() == pytest.approx(
        math.log(2 + E) - 1, abs=1e-6)
    # temperature 0.5 doubles the similarities (0, 1, 0): gpc = log(2 + e^2) - 2
    loss, gpc, _ = fedproc_loss(logits, z, y, PROTOS, ALL, 1.0, temperature=0.5)
    assert loss.item() == gpc.item() == pytest.approx(math.log(2 + E**2) - 2, abs=1e-6)


# --- network, payload, aggregation -------------------------------------------------------

def test_network_is_encoder_projection_head_and_output_layer():
    node = fedproc_node()
    net = node.net
    assert isinstance(net.encoder.classifier, nn.Identity)  # the teacher's classifier is gone
    linears = [m for m in net.head if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(8, 8), (8, PROJECTION_DIM)]
    assert (net.classifier.in_features, net.classifier.out_features) == (PROJECTION_DIM, 3)
    logits, z = net(node.data.train_x[:5])
    assert logits.shape == (5, 3) and z.shape == (5, PROJECTION_DIM)
    assert torch.allclose(logits, net.classifier(z))
    assert torch.equal(node.predict(node.data.train_x[:5]), logits.argmax(dim=1))


def test_payload_is_the_whole_network_and_projection_prototypes():
    node = fedproc_node()
    node.train_round(1)
    sent = node.payload()
    assert set(sent) == {"model", "prototypes"} == set(node.kinds)
    assert set(sent["model"].tensors) == set(node.net.state_dict())
    assert any(name.startswith("head.") for name in sent["model"].tensors)
    counts = node.data.train_y.bincount(minlength=node.data.num_classes).tolist()
    assert sent["model"].meta == {"samples": 20, "classes": counts}
    protos = sent["prototypes"]
    assert set(protos.tensors) == {"prototypes", "classes", "counts"} and protos.meta == {}
    assert protos.tensors["classes"].tolist() == [0, 1, 2]
    assert protos.tensors["counts"].tolist() == [7, 7, 6]
    assert protos.tensors["prototypes"].shape == (3, PROJECTION_DIM)
    # Eq. 5: the class mean of the projection output z
    node.net.eval()
    with torch.no_grad():
        z = node.net(node.data.train_x)[1]
    assert torch.allclose(protos.tensors["prototypes"][2], z[node.data.train_y == 2].mean(0),
                          atol=1e-5)


def test_first_round_trains_on_initial_class_means():
    node = fedproc_node()
    assert not node.known.any()
    before = [p.detach().clone() for p in node.net.parameters()]
    stats = node.train_round(1)
    assert stats["alpha"] == 1.0 and stats["gpc_loss"] > 0.0
    assert stats["loss"] == pytest.approx(stats["gpc_loss"])
    assert any(not torch.equal(a, b) for a, b in zip(before, node.net.parameters(), strict=True))


def test_aggregate_by_hand_and_rejects_malformed_peers():
    node = fedproc_node()
    dim = PROJECTION_DIM
    ones = torch.ones(dim)
    node.local_prototypes = torch.stack([1 * ones, 2 * ones, 0 * ones])
    node.local_counts = torch.tensor([2, 1, 0])
    own = as_received(node.payload())  # 20 samples
    start = {k: v.clone() for k, v in own["model"].tensors.items()}
    # a peer with an all-zero model and 60 samples: average = own * 20/80 = own / 4
    good = {"model": Payload({k: torch.zeros_like(v) for k, v in start.items()},
                             {"samples": 60}),
            "prototypes": Payload({"prototypes": torch.stack([4 * ones, 5 * ones]),
                                   "classes": torch.tensor([1, 2]),
                                   "counts": torch.tensor([3, 1])})}
    wrong_dim = as_received(good)
    wrong_dim["prototypes"] = Payload({"prototypes": torch.ones(2, 7),
                                       "classes": torch.tensor([1, 2]),
                                       "counts": torch.tensor([3, 1])})
    missing_param = as_received(good)
    del missing_param["model"].tensors["classifier.bias"]
    no_prototypes = {"model": as_received(good)["model"]}
    rejected = node.aggregate(own, {3: good, 5: wrong_dim, 6: missing_param, 7: no_prototypes})
    assert peers_of(rejected) == [5, 6, 7]
    for name, value in node.net.state_dict().items():
        assert torch.allclose(value, start[name] / 4, atol=1e-6), name
    # class 0: own only = 1; class 1: (1*2 + 3*4) / 4 = 3.5; class 2: peer only = 5
    assert node.known.tolist() == [True, True, True]
    assert torch.allclose(node.global_prototypes, torch.stack([ones, 3.5 * ones, 5 * ones]))
