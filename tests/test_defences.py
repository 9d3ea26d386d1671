"""The decentralized defences by hand: per-class prototype references, trust from clipping
history, the reputation rule's arithmetic, and the attack library's crafted models."""

import dataclasses
import json
import math
import types

import pytest
import torch
from torch import nn

from experiments import attacks
from node.aggregation import reputation_aggregate
from node.algorithms.base import DataPlan, Payload
from node.defences import (
    LOSS_FLOOR,
    below_norm_floor,
    class_references,
    class_weighted_mean,
    clip_scores,
    contributor_median,
    fails_validation,
    floor_reference,
    loss_to_beat,
    relative_trust,
    required_factor,
    shared_with_mates,
    updated_trust,
    witnessed,
)
from node.intake import gather, screened
from node.profile import Profile


def test_a_class_is_bounded_by_its_own_norms_and_a_lone_class_by_the_contributors_medians():
    own = [1.0, None, 2.0]
    peers = [[1.1, 5.0, None], [0.9, 4.0, 2.2], [1.2, None, 8.0]]
    # class 0: four contributors, max(own 1.0, median 1.05); class 1: this node lacks it
    # and only two have it, so the median of the contributors' medians (1.5, 3.05, 2.2,
    # 4.6: 2.625); class 2: max(2.0, 2.2)
    assert class_references(own, peers) == pytest.approx([1.05, 2.625, 2.2])
    # below three contributors this node's own norm is the reference
    assert class_references([3.0], [[10.0]]) == [3.0]


def test_a_peer_sending_every_class_gets_one_vote_in_a_lacking_class_reference():
    own = [20.0, None, None, 22.0]  # median 21
    honest = [None, 18.0, 16.0, None]  # median 17
    zeros = [0.0, 0.0, 0.0, 0.0]
    # class 1: two contributors, the fallback: medians 21, 17, 0 -> 17 (over the eight rows
    # it would be 0.0, and the honest 18 would be beyond any multiple of it)
    assert class_references(own, [honest, zeros])[1] == 17.0
    assert contributor_median([[20.0, 22.0], [18.0, 16.0], [0.0] * 4]) == 17.0
    assert contributor_median([[], [5.0]]) == 5.0
    assert contributor_median([]) == 0.0


def test_the_floor_reference_gives_each_contributor_one_vote_so_ten_zero_rows_move_it_little():
    own = [20.0, None, 22.0]  # median 21
    honest = [None, 18.0, 16.0]  # median 17
    zeros = [0.0, 0.0, 0.0]  # every class, all zero: median 0
    # contributors' medians 21, 17, 0: their median 17 (over rows it would be 0: 5 of 7)
    assert floor_reference(own, [honest, zeros]) == 17.0
    assert floor_reference(own, [honest]) == 19.0  # medians 21 and 17
    assert floor_reference([None, None, None], [[None, 4.0, None]]) == 4.0  # no own row
    assert floor_reference([None], [[None]]) == 0.0
    # below 17 / 3 = 5.667 is out; a reference of 0 or a floor of 0 floors nothing
    assert below_norm_floor(5.6, 17.0, 3.0) and not below_norm_floor(5.7, 17.0, 3.0)
    assert not below_norm_floor(0.0, 17.0, 0.0) and not below_norm_floor(0.0, 0.0, 3.0)


def test_clipping_keeps_all_of_a_pull_within_the_radius_and_radius_over_distance_beyond():
    assert clip_scores([0.5, 1.0, 2.0, 4.0], 1.0) == [1.0, 1.0, 0.5, 0.25]


def test_trust_is_half_history_half_this_round_and_a_newcomer_starts_trusted():
    trust = updated_trust({1: 0.5, 3: 0.2}, {1: 1.0, 2: 0.2}, memory=0.5)
    assert trust == pytest.approx({1: 0.75, 2: 0.6, 3: 0.2})  # 3 not scored: kept


def test_a_neighbour_weighs_its_trust_relative_to_the_most_trusted_one():
    assert relative_trust({1: 0.8, 2: 0.4, 3: 0.1}, [1, 2]) == pytest.approx([1.0, 0.5])
    assert relative_trust({1: 0.0}, [1]) == [1.0]


def test_reputation_clips_and_weighs_each_neighbour_by_its_trust():
    def state(value):
        return {"w": torch.tensor([value]), "steps": torch.tensor(7)}
    states = [(state(0.0), 1), (state(1.0), 1), (state(10.0), 1)]
    # distances 0, 1, 10: radius (upper median) 1; scores 1 and 0.1; trust from {} with
    # memory 0.5: 1.0 and 0.55, relative to the top 1.0 the same; peer 9 clipped to 1:
    # (0 + 1 * 1 + 0.55 * 1) / 2.55
    combined, trust = reputation_aggregate(states, [4, 9], {}, 0.5)
    assert trust == pytest.approx({4: 1.0, 9: 0.55})
    assert float(combined["w"]) == pytest.approx(1.55 / 2.55)
    assert int(combined["steps"]) == 7
    # the next round the far one weighs less: trust 0.5 * 0.55 + 0.5 * 0.1 = 0.325
    combined, trust = reputation_aggregate(states, [4, 9], trust, 0.5)
    assert trust[9] == pytest.approx(0.325)
    assert float(combined["w"]) == pytest.approx(1.325 / 2.325)


def test_the_crafted_models_of_the_attack_library():
    start, trained = torch.tensor([1.0, 1.0]), torch.tensor([2.0, 3.0])
    assert attacks.reversed_update(start, trained, 1.0).tolist() == [0.0, -1.0]
    seen = [torch.tensor([2.0, 1.0]), torch.tensor([2.0, 5.0])]
    # coordinate std of (2, 3), (2, 1), (2, 5): 0 and 2
    assert attacks.alie(trained, seen, z=1.0).tolist() == [2.0, 1.0]
    assert attacks.alie(trained, [], z=1.0).tolist() == trained.tolist()
    noise = attacks.gaussian(trained, torch.Generator().manual_seed(0))
    assert float(noise.norm()) == pytest.approx(float(trained.norm()))
    assert attacks.flipped_labels(torch.tensor([0, 3, 9]), 10).tolist() == [9, 6, 0]
    # body_flip: the trained body, another classifier (integer tensors are not in flat)
    like = {"body.w": torch.zeros(2), "steps": torch.tensor(4), "classifier.bias": torch.zeros(1)}
    assert attacks.with_head(torch.tensor([4.0, 5.0, 6.0]), torch.tensor([1.0, 2.0, 3.0]),
                             like).tolist() == [4.0, 5.0, 3.0]


def test_the_every_other_round_flipper_trains_on_flipped_labels_in_odd_rounds_only():
    class Recording:
        def __init__(self, config, data, device, node_id):
            self.config, self.data, self.node_id, self.seen = config, data, node_id, []

        def train_round(self, round_):
            self.seen.append(self.data.train_y.tolist())
            return {}

    data = dataclasses.make_dataclass("Data", ["train_y", "num_classes"])(torch.tensor([0, 3]),
                                                                          10)
    flipper = attacks.attacker_class(Recording, "flip_every_other")(None, data, None, 0)
    for round_ in (1, 2, 3, 4):
        flipper.train_round(round_)
    assert flipper.seen == [[9, 6], [0, 3], [9, 6], [0, 3]]


def test_body_flips_classifier_takes_gradient_steps_towards_each_prototypes_own_class():
    from torch import nn
    head = nn.Linear(2, 3)
    zeros = {"weight": torch.zeros(3, 2), "bias": torch.zeros(3)}
    # classes 0 and 1 known at e0 and e1, class 2 unknown: logits 0, softmax 1/3 each;
    # d loss / d W = mean over the two of (p - onehot) x^T, one step of rate 1 against it
    fitted = attacks.fitted_head(head, zeros, torch.eye(3, 2), torch.tensor([True, True, False]),
                                 steps=1, rate=1.0)
    third = 1 / 3
    assert fitted["weight"].flatten().tolist() == pytest.approx(
        [2 * third / 2, -third / 2, -third / 2, 2 * third / 2, -third / 2, -third / 2])
    assert fitted["bias"].tolist() == pytest.approx([third / 2, third / 2, -2 * third / 2])


def test_the_body_flipper_trains_on_flipped_labels_and_sends_the_classifier_it_saw():
    from torch import nn

    from node.algorithms.base import Payload

    class Tiny:  # a model of a body and a classifier, trained by adding its labels' sum
        def __init__(self, config, data, device, node_id):
            self.config, self.data, self.node_id = config, data, node_id
            self.model = nn.Sequential()
            self.model.body, self.model.classifier = nn.Linear(1, 1), nn.Linear(1, 1)
            for parameter in self.model.parameters():
                nn.init.zeros_(parameter)

        def train_round(self, round_):
            with torch.no_grad():
                for parameter in self.model.parameters():
                    parameter += float(self.data.train_y.sum())
            return {}

        def payload(self):
            return {"model": Payload(dict(self.model.state_dict()), {"classes": [1]})}

    data = dataclasses.make_dataclass("Data", ["train_y", "num_classes"])(torch.tensor([0, 3]),
                                                                          10)
    flipper = attacks.attacker_class(Tiny, "body_flip")(None, data, None, 0)
    assert flipper.data.train_y.tolist() == [9, 6]
    flipper.train_round(1)  # every parameter 0 -> 15 (9 + 6); nothing received yet
    sent = flipper.payload()["model"]
    assert {name: float(t) for name, t in sent.tensors.items()} == {
        "body.weight": 15.0, "body.bias": 15.0, "classifier.weight": 0.0,
        "classifier.bias": 0.0}
    assert sent.meta == {"classes": [1]}
    # having received two models (flat: body weight, body bias, classifier weight and
    # bias), it sends their mean classifier on its body trained on: 15 -> 30
    flipper.seen = (torch.tensor([0.0, 0.0, 2.0, 4.0]), torch.tensor([0.0, 0.0, 4.0, 8.0]))
    flipper.train_round(2)
    assert [float(t) for t in flipper.payload()["model"].tensors.values()] == [30, 30, 3, 6]


@pytest.mark.parametrize("attack", ["sign_flip", "free_rider", "shift_and_lie"])
def test_an_attacker_sends_at_each_step_what_its_payload_makes(attack):
    # a model-and-prototypes node builds only a step's kinds; an attacker that rewrites
    # payload() must still send its rewrite at the model step
    from node.algorithms import create
    from node.algorithms.profe import ProFe
    from node.config import from_dict
    from tests.helpers import CPU, tiny_data

    config = from_dict({"nodes": 2, "seed": 1, "aggregation": {"validation": 0},
                        "model": {"teacher_channels": [4, 8], "student_channels": [2, 4],
                                  "embedding_dim": 4}, "train": {"batch_size": 8}})
    honest = create("profe", config, tiny_data(), CPU, 0)
    attacker = attacks.attacker_class(ProFe, attack)(config, tiny_data(), CPU, 0)
    for node in (honest, attacker):
        node.train_round(1)
    whole = attacker.payload()
    model_step = attacker.payloads_of(("model",))
    assert set(model_step) == {"model"}
    for name, tensor in whole["model"].tensors.items():
        assert torch.equal(model_step["model"].tensors[name], tensor), name
    assert model_step["model"].meta == whole["model"].meta
    if attack == "sign_flip":  # its rewrite, not its trained student
        assert not torch.equal(model_step["model"].tensors["classifier.bias"],
                               honest.payloads_of(("model",))["model"].tensors[
                                   "classifier.bias"])


def test_the_accuser_names_every_other_node_whatever_it_refused():
    class Honest:
        def __init__(self, config, data, device, node_id):
            self.config, self.node_id, self.refused_named = config, node_id, []

    config = types.SimpleNamespace(nodes=4)
    accuser = attacks.attacker_class(Honest, "accuser")(config, None, None, 2)
    accuser.refused_named = [1]  # what the runtime would set from its own refusals
    assert accuser.refused_named == [0, 1, 3]


def test_the_adaptive_attack_reverses_as_far_as_the_limits_it_estimates_let_it():
    start, trained = torch.tensor([10.0, 0.0]), torch.tensor([10.0, 1.0])
    # reversal by L: (10, -L); its distance to the trained model is L + 1
    unlimited = attacks.adaptive(start, trained, attacks.Limits(None, None))
    assert unlimited.tolist() == [10.0, -8.0]
    within = attacks.adaptive(start, trained, attacks.Limits(None, 2.5))
    assert within.tolist() == [10.0, -1.0]  # L = 1: distance 2; L = 2 would be 3
    nothing = attacks.adaptive(start, trained, attacks.Limits(1.0, None))
    assert nothing.tolist() == trained.tolist()  # no reversal is below norm 1


def test_the_adaptive_attack_stays_inside_the_loss_validation_accepts():
    start, trained = torch.tensor([0.0, 0.0]), torch.tensor([1.0, 0.0])
    # the loss: the distance from (1, 0); a limit of 2.5 lets the reversal of length 1 by
    sent = attacks.adaptive(start, trained, attacks.Limits(None, None, loss=2.5),
                            loss=lambda v: float((v - trained).norm()))
    assert sent.tolist() == [-1.0, 0.0]


def test_class_erasure_lowers_the_bias_of_the_classes_held_least_inside_the_limits():
    like = {"w": torch.zeros(2), "classifier.bias": torch.zeros(3)}
    trained = torch.tensor([1.0, 2.0, 0.0, 0.0, 0.0])
    assert attacks.erased(trained, like, [0, 2], 4.0).tolist() == [1, 2, -4, 0, -4]
    # held least: class 1 (0 samples), then 2, 0, 3; most damage (classes x shift) first
    assert attacks.erasure_candidates([5, 0, 3, 9])[:3] == [((1, 2), 64.0), ((1,), 64.0),
                                                            ((1, 2), 32.0)]
    # the norm may grow from sqrt(5) to 3 at most: a shift of 2 on class 1
    sent = attacks.class_erasure(trained, like, [5, 0, 3], attacks.Limits(3.0, None),
                                 None)
    assert sent.tolist() == [1, 2, 0, -2, 0]
    # nothing inside the limits: the honest model
    assert attacks.class_erasure(trained, like, [5, 0, 3],
                                 attacks.Limits(2.0, None), None).tolist() == trained.tolist()


def test_every_attack_of_the_library_builds_an_attacker_and_an_unknown_one_is_refused():
    from node.algorithms.fedavg import FedAvg
    for attack in attacks.ATTACKS[1:]:
        assert issubclass(attacks.attacker_class(FedAvg, attack), FedAvg)
    with pytest.raises(ValueError, match="unknown attack 'nope'"):
        attacks.attacker_class(FedAvg, "nope")


def test_validation_loss_weighs_each_shared_class_by_the_peers_count():
    # class 0: loss 3 over 4 samples, class 1: 1 over 2; the peer has 1 and 3 of them
    assert class_weighted_mean([3, 1], [4, 2], [1.0, 3.0]) == pytest.approx(0.5625)
    # class 1 has no samples here, class 2 no weight from the peer: class 0 alone
    assert class_weighted_mean([3, 0, 5], [4, 0, 10], [2.0, 7.0, 0.0]) == 0.75
    assert class_weighted_mean([1], [2], [0.0]) is None


def test_a_peer_must_cut_its_loss_by_a_share_of_what_this_nodes_own_round_cut():
    # this node's round took its loss from 2.0 to 1.0 (a cut of 50%): with share 0.5 a
    # peer must end at most 75% of the start's loss; no cut asks for no fall
    assert required_factor(1.0, 2.0, 0.5) == 0.75
    assert required_factor(2.5, 2.0, 0.5) == 1.0 and required_factor(1.0, 0.0, 0.5) == 1.0
    assert fails_validation(0.76, 1.0, 0.75) and not fails_validation(0.75, 1.0, 0.75)
    # a fit within the floor passes whatever the start
    assert not fails_validation(LOSS_FLOOR, 0.05, 0.75)
    assert fails_validation(1.01 * LOSS_FLOOR, 0.05, 0.75)

    assert loss_to_beat(3.0, 10) == pytest.approx(math.log(10))
    assert loss_to_beat(1.0, 10) == 1.0 and loss_to_beat(0.5, 1) == 0.5


class Linear(nn.Module):
    """Logits x @ w, the inputs as their embedding."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.eye(3))

    def forward(self, x):
        return x @ self.w, x


def test_validation_refuses_a_model_that_misfits_the_peers_classes_and_its_prototypes_later():
    # this node holds two samples each of classes 0 and 1, as one-hot inputs
    x, y = torch.eye(3)[[0, 0, 1, 1]], torch.tensor([0, 0, 1, 1])
    plan = DataPlan(samples=(4,) * 5, class_counts=torch.tensor(
        [[2, 2, 0], [3, 1, 0], [3, 1, 0], [0, 0, 4], [1, 1, 0]]))
    algorithm = types.SimpleNamespace(
        config=types.SimpleNamespace(
            aggregation=types.SimpleNamespace(validation=0.5, influence=0.0, distance=0.0,
                                              prototype_validation=False, held_influence=0.0,
                                              distance_refuse=1.0, use_plan=True,
                                              unjudged="keep", witnesses=0),
            train=types.SimpleNamespace(eval_batch_size=2), seed=1,
            topology=types.SimpleNamespace(hub=None)),
        data=types.SimpleNamespace(train_x=x, train_y=y, test_x=x[1:3] / 2, test_y=y[1:3],
                                   num_classes=3, plan=plan),
        node_id=0, distrusted={}, profile=Profile(), start_state={"w": torch.eye(3)})
    model = Linear()  # the start of round, identity, trained this round into 3 x identity
    with torch.no_grad():
        model.w.copy_(3 * torch.eye(3))

    def sent(w):
        return {"model": Payload({"w": w}, {"samples": 4})}
    swapped = torch.eye(3)[[1, 0, 2]]  # reads class 0 as 1 and 1 as 0
    own = sent(3 * torch.eye(3))
    received = {1: sent(2 * torch.eye(3)), 2: sent(swapped), 3: sent(swapped),
                4: sent(torch.eye(3))}
    update = screened(algorithm, model, gather(own, received, 0, plan=plan))
    # cross-entropies on one-hot inputs: logit k on the right class and 0 on two others,
    # log(1 + 2 e^-k): 0.5514 (k = 1, the start of round and peer 4), 0.2395 (k = 2, peer
    # 1), 0.0949 (k = 3, this node's trained model); 0 on the right one and 1 on another,
    # log(e + 2) = 1.5514 (peer 2). This node's round cut its loss on its test samples
    # (halved one-hot inputs: logits 1.5 and 0.5, log(1 + 2 e^-1.5) = 0.3690 after, log(1 +
    # 2 e^-0.5) = 0.7944 before) by 53.6%, not the 82.8% of its training samples, so a peer
    # must cut by half that on this node's training samples of its classes: to at most
    # 0.732 x 0.5514 = 0.404. Peer 1
    # (0.2395) is kept; peer 2 (1.5514) and peer 4 (no cut) are refused; peer 3 has only
    # class 2, absent here: not validated
    assert update.peers == [1, 3] and len(update.states) == 3
    assert [(r.peer, r.rule) for r in update.refusals] == [(2, "validation"),
                                                           (4, "validation")]
    assert "loss on this node's samples of its classes is 1.55, more than 0.732 x 0.551 " \
           "(the start of round's" in update.refusals[0].reason
    assert algorithm.distrusted == {2: "validation", 4: "validation"}
    # the round's prototype step then leaves out peer 2's prototypes
    protos = {"prototypes": Payload({"prototypes": torch.ones(1, 2),
                                     "classes": torch.tensor([0]), "counts": torch.tensor([2])})}
    later = screened(algorithm, None, gather(protos, {1: protos, 2: protos}, 0, num_classes=3,
                                              dim=2))
    assert later.peers == [1] and len(later.prototypes) == 2
    assert [(r.peer, r.what) for r in later.refusals] == [(2, "prototypes")]
    # validation off (0): nothing is validated
    algorithm.config.aggregation.validation = 0.0
    assert screened(algorithm, model, gather(own, received, 0, plan=plan)).peers == [1, 2, 3, 4]


def test_a_model_that_knows_nothing_fails_validation_against_a_start_worse_than_guessing():
    # the start of round reads class 0 as 1 and 1 as 0, confidently (logit 3): on this
    # node's one-hot samples its loss is log(e^3 + 2) = 3.1698, worse than a uniform
    # guess's log 3 = 1.0986, which becomes the fit to beat. On the halved test samples the
    # start's loss, log(e^1.5 + 2) = 1.8689, is also beaten by log 3, and this node's trained
    # 3 x identity reaches 0.3690: a cut of 66.4%, so a peer must reach 0.668 x 1.0986 =
    # 0.734. The all-zero model (a uniform guess, 1.0986) is refused, though measured against
    # the start it would have cut 65%; identity (0.5514) is kept.
    x, y = torch.eye(3)[[0, 0, 1, 1]], torch.tensor([0, 0, 1, 1])
    plan = DataPlan(samples=(4,) * 3, class_counts=torch.tensor([[2, 2, 0], [2, 2, 0],
                                                                 [2, 2, 0]]))
    algorithm = types.SimpleNamespace(
        config=types.SimpleNamespace(
            aggregation=types.SimpleNamespace(validation=0.5, influence=0.0, distance=0.0,
                                              prototype_validation=False, held_influence=0.0,
                                              distance_refuse=1.0, use_plan=True,
                                              unjudged="keep", witnesses=0),
            train=types.SimpleNamespace(eval_batch_size=2), seed=1,
            topology=types.SimpleNamespace(hub=None)),
        data=types.SimpleNamespace(train_x=x, train_y=y, test_x=x[1:3] / 2, test_y=y[1:3],
                                   num_classes=3, plan=plan),
        node_id=0, distrusted={}, profile=Profile(), start_state={"w": 3 * torch.eye(3)[[1, 0, 2]]})
    model = Linear()
    with torch.no_grad():
        model.w.copy_(3 * torch.eye(3))

    def sent(w):
        return {"model": Payload({"w": w}, {"samples": 4})}
    update = screened(algorithm, model, gather(sent(3 * torch.eye(3)),
                                                {1: sent(torch.zeros(3, 3)),
                                                 2: sent(torch.eye(3))}, 0, plan=plan))
    assert update.peers == [2]
    assert "is 1.1, more than 0.668 x 1.1 " in update.refusals[0].reason


def test_an_erasure_that_lies_claims_none_of_the_classes_it_lowers():
    from experiments import attacks
    # the bias of classes 1 and 3 lowered: their 7 samples claimed as class 0 (the largest)
    assert attacks.lowered_classes(torch.tensor([1.0, -2.0, 0.5, 0.0]),
                                   torch.tensor([1.0, 0.0, 0.5, 0.3])) == [1, 3]
    assert attacks.claim_without([10, 3, 2, 4], [1, 3]) == [17, 0, 2, 0]
    assert sum(attacks.claim_without([10, 3, 2, 4], [1, 3])) == 19
    assert attacks.claim_without([0, 3], [1]) == [0, 3]  # nothing left to claim: honest
    assert "erasure_lie" in attacks.ATTACKS


def test_the_diagnosis_strips_the_label_flippers_prototypes_and_keeps_its_model():
    from experiments.diagnose_label_flip import without_prototypes
    from node.algorithms.profe import ProFe
    from tests.helpers import CPU, tiny_config, tiny_data
    data = tiny_data()

    def trained(kind):
        torch.manual_seed(1)  # both start from the same weights, as a federation's nodes do
        node = kind(tiny_config(), data, CPU, 0)
        node.train_round(1)
        return node
    flipper = trained(without_prototypes(ProFe, "label_flip"))
    full = trained(attacks.attacker_class(ProFe, "label_flip"))
    sent, honest_shape = flipper.payload(), full.payload()
    assert len(honest_shape["prototypes"].tensors["classes"]) == 3
    assert [len(sent["prototypes"].tensors[k]) for k in ("prototypes", "classes", "counts")] \
        == [0, 0, 0]
    # the model is the flipper's, as sent by the full attack
    assert all(torch.equal(sent["model"].tensors[k], honest_shape["model"].tensors[k])
               for k in honest_shape["model"].tensors)
    assert without_prototypes(ProFe, "sign_flip") is not flipper.__class__


def test_the_head_diagnosis_scores_a_loss_against_the_median_of_the_others_on_its_class():
    from experiments.diagnose_label_flip import largest_excess
    rows = [[1.0, None, 0.5], [2.0, 5.0, 0.5], [4.0, 1.0, None], [None, 3.0, 0.5]]
    # row 0: class 0 against median(2, 4) = 3 -> -2; class 2 against median(0.5, 0.5) -> 0
    # row 1: class 0 against median(1, 4) -> -0.5; class 1 against median(1, 3) = 2 -> +3
    # row 2: class 0 against median(1, 2) -> +2.5; class 1 against median(5, 3) = 4 -> -3
    # row 3: class 1 against median(5, 1) = 3 -> 0; class 2 against median(0.5, 0.5) -> 0
    assert largest_excess(rows) == [0.0, 3.0, 2.5, 0.0]
    assert largest_excess([[1.0], [2.0]]) == [None, None]  # one other: nothing to judge by


def test_the_diagnosis_refuses_a_key_that_is_no_label_flip_cell_in_one_line(capsys):
    from experiments.diagnose_label_flip import main
    for key, named in (("nonsense", "not a cell key"),
                       ("classes20/1x/ring/guarded_wide/sign_flip/s1", "not a label_flip cell")):
        with pytest.raises(SystemExit) as stopped:
            main([key])
        assert stopped.value.code == 2 and named in capsys.readouterr().err


def test_protosmall_sends_every_class_its_mean_direction_just_above_the_floor_it_estimates():
    own = {"prototypes": Payload({"prototypes": torch.tensor([[3.0, 4.0], [0.0, 10.0]]),
                                  "classes": torch.tensor([1, 2]),
                                  "counts": torch.tensor([7, 9])})}

    def sent(floor):
        algorithm = types.SimpleNamespace(
            config=types.SimpleNamespace(aggregation=types.SimpleNamespace(norm_floor=floor)),
            data=types.SimpleNamespace(num_classes=3))
        return attacks.SENDERS["protosmall"](algorithm, own)["prototypes"].tensors
    # own norms 5 and 10: median 7.5, floor 7.5 / 3 = 2.5, sent at 1.05 x 2.5 = 2.625, along
    # the rows' mean (1.5, 7) / 7.159
    rows = sent(3.0)
    assert rows["classes"].tolist() == [0, 1, 2]
    assert rows["counts"].tolist() == [attacks.MAX_SAMPLES] * 3
    expected = torch.tensor([1.5, 7.0]) / math.hypot(1.5, 7.0) * 2.625
    for row in rows["prototypes"]:
        assert row.tolist() == pytest.approx(expected.tolist(), rel=1e-6)
    assert sent(0.0)["prototypes"].abs().sum() == 0  # no floor: protozero's zeros


def test_a_score_its_class_mates_share_is_kept_and_one_beyond_them_or_alone_is_not():
    """ProFe's paper cell: four holders of 3 and 9 raise a holder of 4's loss on 4 alike
    (about 0.5 nats over a bar of 0.485); a lone lift scores far beyond its mates."""
    holders_3_9 = [{3, 9}] * 4
    others = [{0, 1}, {2, 5}, {6, 7}, {0, 8}]
    scores = [0.495, 0.52, 0.50, 0.51, 0.05, 0.0, 0.1, 0.02]
    # each of the four has three mates whose lower median (0.50 to 0.51) is above the bar,
    # and its own score within twice that
    assert shared_with_mates(scores, holders_3_9 + others, bar=0.485) == {0, 1, 2, 3}
    # one of the four gone (withheld, dropped out): two mates each, still kept
    assert shared_with_mates(scores[1:], holders_3_9[1:] + others, bar=0.485) == {0, 1, 2}
    # a fifth holder of 9 scoring 7.8 nats: beyond twice its mates' lower median (0.50)
    assert shared_with_mates([*scores, 7.8], [*holders_3_9, *others, {9}],
                             bar=0.485) == {0, 1, 2, 3}
    # two holders alone (one mate each, below the quorum of two): nothing kept
    assert shared_with_mates([0.6, 0.6, 0.0, 0.1], [{3, 9}, {3, 9}, {0}, {1}],
                             bar=0.485) == set()
    # a colluder beside one honest mate above the bar: its cover is twice the honest score
    # (the lower median of 0.5 and its partner's 5.0), and the partner beyond it is not kept
    assert shared_with_mates([0.9, 5.0, 0.5, 0.0, 0.1], [{3, 9}] * 3 + [{0}, {1}],
                             bar=0.485) == {0, 2}
    # two colluders claiming 3 beside two honest holders scoring under the bar: each
    # colluder's mates' lower median is an honest one's, under the bar
    assert shared_with_mates([2.0, 2.0, 0.1, 0.2], [{3}, {3}, {3}, {3}], bar=0.485) == set()
    # a liar claiming every class: its mates are everyone, whose lower median is under the bar
    assert shared_with_mates([3.0, 0.1, 0.2, 0.0, 0.1], [set(range(10)), {1}, {2}, {3}, {4}],
                             bar=0.485) == set()
    # under the bar, or unmeasured: nothing to keep
    assert shared_with_mates([0.4, None, 0.1, 0.2], [{3}] * 4, bar=0.485) == set()


def test_the_mates_bar_is_twice_the_mates_lower_median_only_where_two_are_above_the_bar():
    # eight honest neighbours at 0.1, three class-mates at 0.6, 0.7, 0.65: median of this
    # node's 0 and the scores 0.1, deviation 0, so the spread bar is its floor 0.4; the
    # mates' lower median 0.65 (of two scored, the lower one)
    scores = [0.1] * 8 + [0.6, 0.7, 0.65, None]
    assert attacks.mates_bar(scores, [8, 9, 10], 3.0, 0.4) == pytest.approx(2 * 0.65)
    assert attacks.mates_bar(scores, [8, 9, 11], 3.0, 0.4) == pytest.approx(2 * 0.6)  # two
    assert attacks.mates_bar(scores, [8, 11], 3.0, 0.4) == pytest.approx(0.4)  # one scored
    assert attacks.mates_bar(scores, [0, 1, 2], 3.0, 0.4) == pytest.approx(0.4)  # under the bar


def test_mates_shift_lifts_each_receiver_as_far_as_its_class_mates_cover():
    """A toy receiver whose loss per class is the model itself: a mix at one half raises
    class c by half the model's c minus the receiver's. Eight neighbours of class 2 raise
    the receiver's class 0 by 0.1, three of the attacker's class 1 by 0.65: the reference
    is 0.1, their scores 0 and 0.55, the bar 0.4, and the mates' median 0.55 lets a score
    of up to 2 x 0.55 = 1.1 through (0.95 of it, EDGE: 1.045): the shift 2 scores 0.9 and
    4 scores 1.9. Where the three are not its class-mates, the bar 0.4 (0.38) lets only the
    shift 0.5 through (0.15)."""
    def stand_ins(mates_class):
        found = {10: attacks.StandIn(torch.zeros(3), frozenset({0}))}
        found.update({11 + i: attacks.StandIn(torch.tensor([0.2, 0.0, 0.0]), frozenset({2}))
                      for i in range(8)})
        found.update({19 + i: attacks.StandIn(torch.tensor([1.3, 0.0, 0.0]),
                                              frozenset({mates_class})) for i in range(3)})
        return found
    candidates = [torch.tensor([shift, 0.0, 0.0]) for shift in (4.0, 2.0, 1.0, 0.5)]
    chosen = attacks.mates_shifts(lambda v: v.tolist(), candidates, frozenset({1}),
                                  stand_ins(1), 3.0, 0.0, 0.4)
    assert chosen[10] is candidates[1]
    chosen = attacks.mates_shifts(lambda v: v.tolist(), candidates, frozenset({1}),
                                  stand_ins(2), 3.0, 0.0, 0.4)
    assert chosen[10] is candidates[3]
    # the influence screen on the class the receiver lacks (2): a candidate raising it by
    # 0.5 x 4 = 2 beyond the others' 0 is past 0.95 x 1.5; none passes at 1.0 x 4
    lifted = [torch.tensor([0.5, 0.0, 4.0])]
    assert attacks.mates_shifts(lambda v: v.tolist(), lifted, frozenset({1}), stand_ins(1),
                                3.0, 1.5, 0.4)[10] is None


def test_mates_shift_sends_each_receiver_its_own_model_and_the_rest_the_common_one():
    class Base:
        def addressed(self, kind, payload, recipients):
            return [(payload, recipients)]
    attacker = object.__new__(attacks.model_attacker(Base, "mates_shift"))
    sent = Payload({"w": torch.zeros(2)}, {"samples": 3})
    lifted, honest = torch.tensor([1.0, 2.0]), torch.tensor([0.5, 0.5])
    attacker.addressed_poisons = {1: lifted, 3: lifted, 4: honest}
    groups = attacker.addressed("model", sent, [1, 2, 3, 4])
    assert sorted((p.tensors["w"].tolist(), list(to)) for p, to in groups) == [
        ([0.0, 0.0], [2]), ([0.5, 0.5], [4]), ([1.0, 2.0], [1, 3])]
    assert all(p.meta == {"samples": 3} for p, _ in groups)
    # prototypes, and a round with nothing crafted per receiver, go to everyone alike
    assert attacker.addressed("prototypes", sent, [1, 2]) == [(sent, [1, 2])]
    attacker.addressed_poisons = {}
    assert attacker.addressed("model", sent, [1, 2]) == [(sent, [1, 2])]


def test_a_peer_is_witnessed_by_a_quorum_of_the_other_peers_and_by_no_one_else():
    accusations = {1: {2, 3}, 2: {2, 3}, 3: {1}, 9: {1, 2}}  # 9 is not an in-neighbour
    # peer 2 names itself (no word); 3 is named by 1 and 2; 1 by 3 alone (9 does not count)
    assert witnessed(accusations, [1, 2, 3], 2) == {3: [1, 2]}
    assert witnessed(accusations, [1, 2, 3], 1) == {1: [3], 2: [1], 3: [1, 2]}
    assert witnessed(accusations, [1, 2, 3], 3) == {}
    assert witnessed(accusations, [1, 2, 3], 0) == {}
    # a witness left out of the round (refused at the door) has no word
    assert witnessed(accusations, [1, 3], 2) == {}


def test_the_refusers_diagnosis_sets_the_attacker_beside_the_most_refused_honest_peer(tmp_path):
    from experiments.diagnose_label_flip import main, refusers_line
    record = {"key": "k/1x", "attackers": [0], "f1": [0.1, 0.5, 0.5],
              "rounds": [{"judged": {"0": 9, "3": 9, "5": 9}, "refused": {"0": 5, "3": 7}},
                         {"judged": {"0": 9, "3": 9}, "refused": {}}]}
    # round 1: the attacker 5 of 9, honest node 3 the most refused, 7 of 9; round 2: none
    assert refusers_line(record) == "| k/1x | 5/9; 7/9 (node 3) | 0/9; 0 |"
    clean = {**record, "key": "k/none", "attackers": []}
    assert refusers_line(clean) == "| k/none | -; 7/9 (node 3) | -; 0 |"
    out = tmp_path / "refusers.jsonl"
    out.write_text(json.dumps({**record, "rounds": []}) + "\n" + json.dumps(record) + "\n"
                   + json.dumps(clean) + "\n")
    assert main(["--report-only", "--out", str(out)]) == 0
    table = (tmp_path / "refusers.md").read_text()
    # the last line of a key is the one read, sorted by key
    assert table.endswith("| k/1x | 5/9; 7/9 (node 3) | 0/9; 0 |\n"
                          "| k/none | -; 7/9 (node 3) | -; 0 |\n")
    assert "| cell | round 1 | round 2 |" in table


def test_the_committed_refusers_table_is_rebuilt_from_its_committed_records():
    from experiments.diagnose_label_flip import REFUSERS, refusers_records, refusers_report
    assert (REFUSERS.parent / "refusers.md").read_text() == refusers_report(
        refusers_records(REFUSERS))
