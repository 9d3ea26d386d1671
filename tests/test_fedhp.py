"""FedHP (paper 001): loss terms by hand, the seeded hyperspherical init, payload, aggregation."""

import hashlib
import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from node.algorithms.base import Payload
from node.algorithms.fedhp import (
    LAMBDA_H,
    distance_loss,
    fedhp_loss,
    hyperspherical_loss,
    hyperspherical_prototypes,
    uniformity_loss,
)
from tests.helpers import peers_of, synthetic_node, tiny_data

E = math.e


def fedhp_node():
    """A FedHP on tiny random 1x8x8 images of 4 classes (class 3 has no local sample),
    embedding dim 8: fast, no dataset needed."""
    return synthetic_node("fedhp", tiny_data(classes=4, labelled=3, test=4), seed=3)


# --- loss terms --------------------------------------------------------------------------

def test_distance_loss_by_hand():
    # z = (0, 0); prototypes (3, 4), (0, 1), (0, 0): distances 5, 1, 0.
    # label 1: -log(e^-1 / (e^-5 + e^-1 + e^0)) = 1 + log(1.37462) = 1.31818
    # label 2: -log(1 / 1.37462) = 0.31818; mean over the batch = 0.81818
    z = torch.zeros(2, 2)
    prototypes = torch.tensor([[3.0, 4.0], [0.0, 1.0], [0.0, 0.0]])
    denominator = math.exp(-5) + math.exp(-1) + 1
    assert abs(math.log(denominator) - 0.31818) < 1e-5
    expected = ((1 + math.log(denominator)) + math.log(denominator)) / 2
    loss = distance_loss(z, torch.tensor([1, 2]), prototypes)
    assert loss.item() == pytest.approx(expected, abs=1e-6)


def test_hyperspherical_loss_by_hand():
    # anchors (1, 0), (0, 1); prototypes (2, 0), (1, 1): cosines 1 and 1/sqrt(2)
    # L_H = (1 - 1) + (1 - 0.70711) = 0.29289 (a sum over classes, scale-free)
    anchors = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    prototypes = torch.tensor([[2.0, 0.0], [1.0, 1.0]])
    assert hyperspherical_loss(prototypes, anchors).item() == pytest.approx(
        1 - 1 / math.sqrt(2), abs=1e-6)
    assert hyperspherical_loss(anchors * 3, anchors).item() == pytest.approx(0.0, abs=1e-6)


def test_total_loss_is_distance_plus_lambda_hyperspherical():
    # z = (0, 0), label 0, prototypes (1, 0), (0, 2): distances 1, 2
    # L_D = -log(e^-1 / (e^-1 + e^-2)) = log(1 + e^-1) = 0.31326
    # anchors (1, 0), (1, 0): L_H = (1 - 1) + (1 - 0) = 1;  L = 0.31326 + 0.1 * 1 = 0.41326
    assert LAMBDA_H == 0.1
    prototypes = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    anchors = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    loss, l_d, l_h = fedhp_loss(torch.zeros(1, 2), torch.tensor([0]), prototypes, anchors)
    assert loss.item() == pytest.approx(math.log(1 + 1 / E) + 0.1, abs=1e-6)
    assert l_d.item() == pytest.approx(math.log(1 + 1 / E), abs=1e-6)
    assert l_h.item() == pytest.approx(1.0, abs=1e-6)
    loss, _, _ = fedhp_loss(torch.zeros(1, 2), torch.tensor([0]), prototypes, anchors, 0.5)
    assert loss.item() == pytest.approx(math.log(1 + 1 / E) + 0.5, abs=1e-6)


def test_uniformity_loss_by_hand():
    # P = (1, 0), (0.6, 0.8), (-1, 0): cos01 = 0.6, cos02 = -1, cos12 = -0.6; diagonal 1 - 2
    # row maxima 0.6, 0.6, -0.6 -> L_U = 0.6 / 3 = 0.2 (rows are normalised first: x5 same)
    p = torch.tensor([[1.0, 0.0], [0.6, 0.8], [-1.0, 0.0]])
    assert uniformity_loss(p).item() == pytest.approx(0.2, abs=1e-6)
    assert uniformity_loss(5 * p).item() == pytest.approx(0.2, abs=1e-6)
    # three directions 120 degrees apart: every cosine is -1/2, the optimum -1/(C-1)
    angles = torch.tensor([0.0, 2 * math.pi / 3, 4 * math.pi / 3])
    simplex = torch.stack([angles.cos(), angles.sin()], dim=1)
    assert uniformity_loss(simplex).item() == pytest.approx(-0.5, abs=1e-6)


# --- the seeded hyperspherical initialisation --------------------------------------------

def test_init_is_reproducible_unit_norm_and_seed_dependent():
    a = hyperspherical_prototypes(10, 16, seed=5)
    b = hyperspherical_prototypes(10, 16, seed=5)
    assert a.dtype == torch.float32 and a.shape == (10, 16)
    assert torch.equal(a, b)
    assert not torch.equal(a, hyperspherical_prototypes(10, 16, seed=6))
    assert torch.allclose(a.norm(dim=1), torch.ones(10), atol=1e-6)


def test_init_lowers_uniformity_loss_towards_the_simplex():
    generator = torch.Generator().manual_seed(5)
    random_start = F.normalize(torch.randn(10, 16, generator=generator, dtype=torch.float64))
    learned = hyperspherical_prototypes(10, 16, seed=5).double()
    assert uniformity_loss(random_start).item() > 0.2
    assert uniformity_loss(learned).item() < -0.105  # optimum -1/9 = -0.1111


def test_init_is_identical_in_another_process_with_other_threads():
    code = ("import hashlib, torch\n"
            "from node.algorithms.fedhp import hyperspherical_prototypes\n"
            "torch.set_num_threads(2)\n"
            "p = hyperspherical_prototypes(10, 128, seed=11)\n"
            "print(hashlib.sha256(p.numpy().tobytes()).hexdigest())\n")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, timeout=120).stdout.strip()
    here = hashlib.sha256(hyperspherical_prototypes(10, 128, seed=11).numpy().tobytes())
    assert other == here.hexdigest()


def test_two_nodes_start_from_the_same_anchors():
    first, second = fedhp_node(), fedhp_node()
    assert torch.equal(first.anchors, second.anchors)
    assert torch.equal(first.prototypes.detach(), first.anchors)
    assert torch.equal(first.anchors, hyperspherical_prototypes(4, 8, seed=3))


# --- training, payload, aggregation, prediction ------------------------------------------

def test_training_moves_network_and_prototypes_not_anchors():
    node = fedhp_node()
    anchors = node.anchors.clone()
    start = node.prototypes.detach().clone()
    stats = node.train_round(1)
    assert set(stats) == {"loss", "distance_loss", "hyperspherical_loss"}
    assert stats["loss"] == pytest.approx(stats["distance_loss"]
                                          + LAMBDA_H * stats["hyperspherical_loss"])
    assert torch.equal(node.anchors, anchors)
    assert not torch.equal(node.prototypes.detach(), start)
    assert node.prototype_optimizer.param_groups[0]["lr"] == 0.005
    assert node.net_optimizer.param_groups[0]["weight_decay"] == 1e-4


def test_payload_is_only_the_local_prototypes():
    node = fedhp_node()
    node.train_round(1)
    sent = node.payload()
    assert set(sent) == {"prototypes"} == set(node.kinds)
    payload = sent["prototypes"]
    assert set(payload.tensors) == {"prototypes", "classes", "counts"} and payload.meta == {}
    assert payload.tensors["classes"].tolist() == [0, 1, 2]  # class 3: no local sample
    assert payload.tensors["counts"].tolist() == [7, 7, 6]
    assert torch.equal(payload.tensors["prototypes"], node.prototypes.detach()[:3])
    assert sum(t.numel() for t in payload.tensors.values()) == 3 * 8 + 3 + 3


def test_aggregate_by_hand_and_rejects_malformed_peers():
    node = fedhp_node()
    ones = torch.ones(8)
    with torch.no_grad():
        node.prototypes.copy_(torch.stack([1 * ones, 2 * ones, 7 * ones, 9 * ones]))
    node.counts = torch.tensor([2, 1, 0, 0])
    own = node.payload()

    def peer(protos, classes, counts):
        return {"prototypes": Payload({"prototypes": protos, "classes": torch.tensor(classes),
                                       "counts": torch.tensor(counts)})}

    good = peer(torch.stack([4 * ones, 5 * ones]), [1, 2], [3, 1])
    received = {
        2: good,
        4: peer(torch.ones(2, 8), [1, 2], [3.0, 1.0]),  # float counts
        5: peer(torch.ones(2, 8), [1, 4], [3, 1]),  # class 4 of 4 classes
        6: peer(torch.ones(2, 8), [1, 1], [3, 1]),  # repeated class
        7: peer(torch.ones(1, 7), [1], [3]),  # wrong dimension
        8: {"model": Payload({"w": torch.ones(2)})},  # no prototypes at all
        9: {"prototypes": Payload({"prototypes": torch.ones(1, 8), "classes": torch.tensor([1]),
                                   "counts": torch.tensor([3]), "weights": torch.ones(3)})},
    }
    assert peers_of(node.aggregate(own, received)) == [4, 5, 6, 7, 8, 9]
    # class 0: own only = 1; class 1: (1*2 + 3*4) / (1 + 3) = 3.5; class 2: peer only = 5;
    # class 3: nobody has it -> keeps its local value 9
    expected = torch.stack([1 * ones, 3.5 * ones, 5 * ones, 9 * ones])
    assert torch.allclose(node.prototypes.detach(), expected)


def test_a_hub_serves_the_aggregated_prototypes_of_the_classes_its_clients_sent():
    """A hub (no data) aggregating two clients sends Eq. (5)'s means with the counts summed;
    a class no client sent is not served (its clients keep their own)."""
    hub = synthetic_node("fedhp", tiny_data(samples=0, classes=4, test=0), seed=3)
    assert hub.served_payload()["prototypes"].tensors["classes"].numel() == 0
    ones = torch.ones(8)

    def client(protos, classes, counts):
        return {"prototypes": Payload({"prototypes": protos, "classes": torch.tensor(classes),
                                       "counts": torch.tensor(counts)})}

    received = {1: client(torch.stack([1 * ones, 2 * ones]), [0, 1], [2, 1]),
                2: client(torch.stack([4 * ones, 5 * ones]), [1, 2], [3, 1])}
    assert hub.aggregate(hub.payload(), received) == []
    served = hub.served_payload()["prototypes"].tensors
    # class 0: client 1's, 2 samples; class 1: (1 * 2 + 3 * 4) / 4 = 3.5 from 4; class 2:
    # client 2's, 1 sample; class 3: nobody's
    assert served["classes"].tolist() == [0, 1, 2] and served["counts"].tolist() == [2, 4, 1]
    assert torch.allclose(served["prototypes"], torch.stack([1 * ones, 3.5 * ones, 5 * ones]))


def test_predict_is_the_nearest_prototype():
    node = fedhp_node()
    node.train_round(1)
    x = node.data.train_x
    node.net.eval()
    with torch.no_grad():
        z = node.net(x)[1]
        distances = torch.cdist(z, node.prototypes)
    assert torch.equal(node.predict(x), distances.argmin(dim=1))
    assert torch.equal(node.predict(x), F.softmax(-distances, dim=1).argmax(dim=1))


def test_in_the_features_space_the_prototypes_live_where_the_embedding_layer_reads():
    """[fedhp] space = "features": the embedding layer is gone from the backbone, and the
    prototypes (and what a node sends) have the width of the features it read."""
    data = tiny_data(classes=4, labelled=3, test=4)
    node = synthetic_node("fedhp", data, seed=3, fedhp={"space": "features"})
    embedded = fedhp_node()
    width = embedded.net.embed.in_features  # the default CNN's pooled features of 1x8x8
    assert node.prototypes.shape == node.anchors.shape == (4, width) != (4, 8)
    assert not any(name.startswith("embed.") for name, _ in node.net.named_parameters())
    node.net.eval()
    _, z = node.net(data.train_x[:2])
    assert torch.equal(z, node.net.features(data.train_x[:2]).flatten(1))  # ReLU'd already
    node.train_round(1)
    assert node.payload()["prototypes"].tensors["prototypes"].shape == (3, width)


def test_an_unknown_prototype_space_is_refused_naming_the_key():
    from node.config import from_dict
    from node.errors import ConfigError
    with pytest.raises(ConfigError, match=r"fedhp.space must be one of"):
        from_dict({"algorithm": "fedhp", "fedhp": {"space": "conv"}})
