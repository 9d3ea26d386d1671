"""The intake's screens and bounded claims by hand: influence relative to the other
in-neighbours, distance relative to the median, claims bounded without a plan, and the
attacks built to pass them."""

import math
import types

import pytest
import torch
from torch import nn

from experiments import attacks
from node.algorithms.base import DataPlan, Payload, Refusal
from node.defences import (
    bounded_claims,
    bounded_class_claims,
    class_excess_scores,
    distance_scores,
    layer_distance_scores,
    mixing_share,
    prototype_class_loss,
    spread_bar,
)
from node.intake import gather, plan_of, screened, witnesses
from node.profile import Profile


def test_a_peer_is_scored_by_its_worst_class_over_that_class_median_with_this_node_at_zero():
    rows = [[0.5, None, 2.0], [0.3, 1.0, None], [4.0, 0.2, 0.1], [None, None, None]]
    # references: class 0 median{0, .5, .3, 4} = .4; class 1 median{0, 1, .2} = .2;
    # class 2 median{0, 2, .1} = .1
    assert class_excess_scores(rows) == pytest.approx([1.9, 0.8, 3.6, None])
    # where most mixes improve a class (-9), one that leaves it as it was (0) did no harm:
    # the reference is 0, not -9
    assert class_excess_scores([[-9.0], [-9.0], [-9.0], [0.0]]) == pytest.approx(
        [-9.0, -9.0, -9.0, 0.0])
    assert class_excess_scores([]) == []


def test_a_peer_is_mixed_at_its_weight_against_this_nodes():
    assert mixing_share(4, 4) == 0.5
    assert mixing_share(3, 1) == 0.25
    assert mixing_share(0, 0) == 0.5


def test_distance_is_measured_against_the_median_with_this_node_at_zero():
    assert distance_scores([1.0, 3.0]) == pytest.approx([1.0, 3.0])  # a ring: the nearer
    assert distance_scores([2.0, 2.0, 8.0]) == pytest.approx([1.0, 1.0, 4.0])
    assert distance_scores([0.0]) == [0.0]
    assert distance_scores([]) == []


def test_a_peer_is_as_far_as_its_farthest_layer_against_that_layers_median():
    rows = [{"conv": 1.0, "classifier": 1.0}, {"conv": 1.2, "classifier": 1.0},
            {"conv": 1.0, "classifier": 5.0}]
    # conv: median{0, 1, 1.2, 1} = 1; classifier: median{0, 1, 1, 5} = 1. Near in the whole
    # model (sqrt(26) = 5.1 against 1.4 and 1.6: 3.2 times), the third is 5 times as far in
    # the classifier
    assert layer_distance_scores(rows) == pytest.approx([1.0, 1.2, 5.0])


def test_a_claim_is_capped_at_twice_the_median_claim_with_this_nodes_own():
    # median{100, 90, 110, 1e9} = 105: cap 210
    assert bounded_claims(100, [90, 110, 10**9]) == [90, 110, 210]
    assert bounded_claims(5, []) == []


def test_a_class_count_is_capped_by_its_class_median_or_the_holders_medians_below_three():
    own = [10, 0, 5]
    peers = [[12, 0, 0], [1000, 3, 0], [8, 0, 6]]
    # class 0: four holders, median 11, cap 22; classes 1 and 2: fewer than three holders,
    # the median of the holders' medians (7.5, 12, 501.5, 7: 9.75), cap 19.5
    assert bounded_class_claims(own, peers) == [[12, 0, 0], [22, 3, 0], [8, 0, 6]]


def test_a_peer_claiming_every_class_gets_one_vote_in_the_fallback_cap():
    own = [300, 320, 0, 0]  # median 310
    honest = [0, 0, 280, 260]  # median 270
    liar = [10**6] * 4  # median 10**6
    # every class has two holders: the cap is 2 x median(310, 270, 10**6) = 620 (over the
    # eight counts it would be 2 x 10**6 and the lie would pass whole)
    assert bounded_class_claims(own, [honest, liar]) == [[0, 0, 280, 260], [620] * 4]


class Head(nn.Module):
    """Logits classifier(x), the inputs as their embedding, as the real models are."""

    def __init__(self, weight):
        super().__init__()
        self.classifier = nn.Linear(3, 3, bias=False)
        with torch.no_grad():
            self.classifier.weight.copy_(weight)

    def forward(self, x):
        return self.classifier(x), x


def _node(influence=0.0, distance=0.0, use_plan=True, plan=None, held=(0, 0, 1, 1),
          known=(False, False, True), distance_refuse=1.0, prototype_validation=False,
          validation=0.0, unjudged="hold", held_influence=0.0, held_mates=False,
          held_floor=0.4, witnesses=0, held_mix="model", screen_budget="each"):
    # samples of the classes `held` as one-hot inputs; the global prototypes of the
    # classes `known` are the one-hot vectors
    y = torch.tensor(held)
    x = torch.eye(3)[y]
    aggregation = types.SimpleNamespace(validation=validation, influence=influence,
                                        distance=distance, distance_refuse=distance_refuse,
                                        use_plan=use_plan, unjudged=unjudged,
                                        prototype_validation=prototype_validation,
                                        held_influence=held_influence,
                                        held_mates=held_mates, held_floor=held_floor,
                                        witnesses=witnesses, held_mix=held_mix,
                                        screen_budget=screen_budget)
    return types.SimpleNamespace(
        config=types.SimpleNamespace(aggregation=aggregation, seed=1,
                                     topology=types.SimpleNamespace(hub=None),
                                     train=types.SimpleNamespace(eval_batch_size=2)),
        data=types.SimpleNamespace(train_x=x, train_y=y, test_x=x, test_y=y, num_classes=3,
                                   plan=plan),
        node_id=0, distrusted={}, profile=Profile(), start_state=None,
        global_prototypes=torch.eye(3), known=torch.tensor(known))


def _sent(weight, samples=4, classes=None):
    meta = {"samples": samples} if classes is None else {"samples": sum(classes),
                                                         "classes": classes}
    return {"model": Payload({"classifier.weight": weight}, meta)}


def test_influence_refuses_a_mix_that_raises_a_lacking_class_beyond_the_others_mixes():
    # this node holds class 0 only; it knows the prototypes of classes 1 and 2 (e1, e2)
    swap = torch.eye(3)[[1, 0, 2]]
    own = _sent(3 * torch.eye(3))
    received = {1: _sent(3 * torch.eye(3)), 2: _sent(3 * torch.eye(3)), 3: _sent(3 * swap)}
    # peers 1 and 2 change nothing (excess 0). Peer 3 mixed half and half gives 1.5 (I +
    # swap): on e1 the logits [1.5, 1.5, 0], cross-entropy log(2 e^1.5 + 1) - 1.5 = 0.7989,
    # against this node's log(e^3 + 2) - 3 = 0.0949; on e2 both give [0, 0, 3]. Its score:
    # 0.7040 over a median of 0. Class 0, held here, is validation's to judge.
    excess = (math.log(2 * math.exp(1.5) + 1) - 1.5) - (math.log(math.exp(3) + 2) - 3)
    node = _node(influence=0.5, held=(0, 0), known=(True, True, True))
    update = screened(node, Head(3 * torch.eye(3)), gather(own, received, 0))
    assert update.peers == [1, 2]
    [refusal] = update.refusals
    assert (refusal.peer, refusal.rule) == (3, "influence")
    assert f"{excess:.3g} nats" in refusal.reason
    assert node.distrusted == {3: "influence"}
    # a wider margin keeps it; so does a node that holds class 1 (validation's class)
    assert screened(_node(influence=1.0, held=(0, 0), known=(True, True, True)),
                    Head(3 * torch.eye(3)), gather(own, received, 0)).peers == [1, 2, 3]
    assert screened(_node(influence=0.5, held=(0, 1), known=(True, True, True)),
                    Head(3 * torch.eye(3)), gather(own, received, 0)).peers == [1, 2, 3]


def test_influence_judges_a_class_this_node_lacks_by_its_prototype():
    # peer 3 lowers class 2's logit by 8: no sample here shows it, the prototype e2 does:
    # mixed half and half its logits on e2 are [0, 0, -1]: log(2 + e^-1) + 1 = 1.8620
    # against this node's log(2 + e^3) - 3 = 0.0949, 1.767 over the median 0
    erased = 3 * torch.eye(3)
    erased[2, 2] = -5.0
    own = _sent(3 * torch.eye(3))
    received = {1: _sent(3 * torch.eye(3)), 2: _sent(3 * torch.eye(3)), 3: _sent(erased)}
    update = screened(_node(influence=1.0), Head(3 * torch.eye(3)), gather(own, received, 0))
    assert update.peers == [1, 2]
    assert update.refusals[0].rule == "influence"
    # before any global prototype is known (round 1) nothing is judged
    assert screened(_node(influence=1.0, known=(False, False, False)), Head(3 * torch.eye(3)),
                    gather(own, received, 0)).peers == [1, 2, 3]


def test_the_held_class_bar_is_the_median_plus_eight_deviations_between_floor_and_margin():
    # values {0, .1, .15, .2, 5}: median .15, deviations {.15, .05, 0, .05, 4.85}, their
    # median .05: .15 + 8 x .05 = .55, inside [.4, 1.5]; a peer without a score (None) is
    # not counted
    assert spread_bar([0.1, 0.2, None, 5.0, 0.15], 1.5, 0.4) == pytest.approx(0.55)
    # ... and under a floor of 1 nat, the floor
    assert spread_bar([0.1, 0.2, None, 5.0, 0.15], 1.5, 1.0) == pytest.approx(1.0)
    # every mix alike (a spread of 0): the floor, .4, not 0
    assert spread_bar([0.0, 0.0, 0.0, 2.0], 1.5, 0.4) == pytest.approx(0.4)
    # early rounds, mixes anywhere from -3 to 4 nats: median 0, deviation 2, 16 > the margin
    assert spread_bar([-3.0, 2.0, -1.0, 4.0], 1.5, 0.4) == pytest.approx(1.5)
    # fewer than four scores (a ring's two in-neighbours): their spread says nothing
    assert spread_bar([0.1, 0.2, 5.0], 1.5, 0.4) == pytest.approx(1.5)
    assert spread_bar([0.0, 0.0, None, None], 1.5, 0.4) == pytest.approx(1.5)


def test_held_influence_refuses_a_lift_that_validation_cannot_see():
    # this node holds classes 0 and 1 (samples e0, e0, e1, e1); peer 3 claims class 2 only,
    # which this node lacks, so validation does not judge it; its classifier lifts class 2
    # on every input (row 2 = [6, 6, 3]). Mixed half and half with this node's 3 I, row 2 is
    # [3, 3, 3]: on e0 the logits [3, 0, 3], cross-entropy log(2 e^3 + 1) - 3 = 0.7178
    # against this node's log(e^3 + 2) - 3 = 0.0949 (class 1 alike): 0.6229 over the
    # median 0 of peers 1, 2 and 4, which change nothing. The others' spread is 0: the bar
    # is the floor, 0.4.
    lifted = 3 * torch.eye(3)
    lifted[2] = torch.tensor([6.0, 6.0, 3.0])
    own = _sent(3 * torch.eye(3), classes=[2, 2, 0])
    received = {1: _sent(3 * torch.eye(3), classes=[2, 2, 0]),
                2: _sent(3 * torch.eye(3), classes=[0, 4, 0]),
                3: _sent(lifted, classes=[0, 0, 4]),
                4: _sent(3 * torch.eye(3), classes=[4, 0, 0])}
    excess = (math.log(2 * math.exp(3) + 1) - 3) - (math.log(math.exp(3) + 2) - 3)

    def run(peers=(1, 2, 3, 4), **settings):
        node = _node(**{"use_plan": False, "validation": 0.5, "known": (False, False, False),
                        "unjudged": "keep", **settings})
        update = gather(own, {p: received[p] for p in peers}, 0)
        return screened(node, Head(3 * torch.eye(3)), update)

    assert run().peers == [1, 2, 3, 4]  # validation alone: peer 3 is not judged
    update = run(held_influence=1.5)
    assert update.peers == [1, 2, 4]
    [refusal] = update.refusals
    assert (refusal.peer, refusal.rule) == (3, "held_influence")
    assert f"{excess:.3g} nats" in refusal.reason and "at most 0.4" in refusal.reason
    # a margin below the floor binds: 0.3; the bar never rises above the margin
    assert "at most 0.3" in run(held_influence=0.3).refusals[0].reason
    # a floor of 1 nat (aggregation.held_floor) keeps the lift's 0.62
    assert run(held_influence=1.5, held_floor=1.0).peers == [1, 2, 3, 4]
    assert run(held_influence=1.5, held_floor=0.6).peers == [1, 2, 4]
    # two in-neighbours, as on a ring: no spread to measure, the margin alone
    assert run(peers=(1, 3), held_influence=1.5).peers == [1, 3]
    assert run(peers=(1, 3), held_influence=0.5).peers == [1]
    # held_mates: a lone lift has no class-mate to share its score: refused all the same
    assert run(held_influence=1.5, held_mates=True).peers == [1, 2, 4]


class BodyHead(nn.Module):
    """A linear body (the embedding) under the classifier, as the real models have."""

    def __init__(self, body, classifier):
        super().__init__()
        self.body = nn.Linear(3, 3, bias=False)
        self.classifier = nn.Linear(3, 3, bias=False)
        with torch.no_grad():
            self.body.weight.copy_(body)
            self.classifier.weight.copy_(classifier)

    def forward(self, x):
        embedding = self.body(x)
        return self.classifier(embedding), embedding


def test_held_mix_head_mixes_the_classifier_alone_on_this_nodes_embeddings():
    # this node holds classes 0 and 1, its body I and classifier 3 I. Peer 3 lifts class 2
    # in its classifier (as in the test above: 0.6229 nats over the median 0 whichever mix,
    # the bodies being alike); peer 5's classifier is this node's, its body swaps e0 and e1.
    # Mixed whole, half and half, the body maps e0 to [0.5, 0.5, 0]: logits [1.5, 1.5, 0],
    # cross-entropy log(2 e^1.5 + 1) - 1.5 = 0.7989 against 0.0949, refused beyond the
    # floor 0.4; mixed as classifiers alone it changes nothing (0 nats) and is kept.
    def sent(body, classifier, classes):
        return {"model": Payload({"body.weight": body, "classifier.weight": classifier},
                                 {"samples": sum(classes), "classes": classes})}
    eye, lifted = torch.eye(3), 3 * torch.eye(3)
    lifted[2] = torch.tensor([6.0, 6.0, 3.0])
    received = {1: sent(eye, 3 * eye, [2, 2, 0]), 2: sent(eye, 3 * eye, [0, 4, 0]),
                3: sent(eye, lifted, [0, 0, 4]), 4: sent(eye, 3 * eye, [4, 0, 0]),
                5: sent(eye[[1, 0, 2]], 3 * eye, [0, 0, 4])}
    swapped = (math.log(2 * math.exp(1.5) + 1) - 1.5) - (math.log(math.exp(3) + 2) - 3)
    lift = (math.log(2 * math.exp(3) + 1) - 3) - (math.log(math.exp(3) + 2) - 3)

    def refusals(held_mix):
        node = _node(use_plan=False, validation=0.5, known=(False, False, False),
                     unjudged="keep", held_influence=1.5, held_mix=held_mix)
        update = gather(sent(eye, 3 * eye, [2, 2, 0]), received, 0)
        return {r.peer: r.reason for r in screened(node, BodyHead(eye, 3 * eye),
                                                   update).refusals}

    whole, head = refusals("model"), refusals("head")
    assert sorted(whole) == [3, 5] and f"{swapped:.3g} nats" in whole[5]
    assert sorted(head) == [3]
    assert f"{lift:.3g} nats" in whole[3] and f"{lift:.3g} nats" in head[3]


def test_held_mates_keeps_a_score_that_two_class_mates_share():
    # four in-neighbours claim class 2 and lift it alike (each 0.6229 nats on this node's
    # classes, as in the test above), eight claim other classes and change nothing: the
    # median reference is 0, the spread 0, the bar the floor 0.4. Each of the four has
    # three class-mates whose lower median score (0.6229) is above the bar too: the class
    # moves this node's loss, not the neighbour, and held_mates keeps them; so it does with
    # one of the four gone (two mates each), not with two gone (one mate each).
    lifted = 3 * torch.eye(3)
    lifted[2] = torch.tensor([6.0, 6.0, 3.0])
    own = _sent(3 * torch.eye(3), classes=[2, 2, 0])
    received = {p: _sent(3 * torch.eye(3), classes=[2, 2, 0]) for p in range(1, 9)}
    received.update({p: _sent(lifted, classes=[0, 0, 4]) for p in range(9, 13)})

    def run(peers=range(1, 13), **settings):
        node = _node(**{"use_plan": False, "validation": 0.5, "known": (False, False, False),
                        "unjudged": "keep", "held_influence": 1.5, **settings})
        return screened(node, Head(3 * torch.eye(3)),
                        gather(own, {p: received[p] for p in peers}, 0))

    refused = run().refusals
    assert sorted(r.peer for r in refused) == [9, 10, 11, 12]
    assert all("at most 0.4" in r.reason for r in refused)
    assert run(held_mates=True).peers == list(range(1, 13))
    assert run(range(1, 12), held_mates=True).peers == list(range(1, 12))
    assert run(range(1, 11), held_mates=True).peers == list(range(1, 9))


def test_a_model_no_screen_can_judge_is_held_out_of_the_round_its_prototypes_kept():
    # this node holds class 0; round 1: no global prototype known. Peer 1 claims class 0
    # (validation judges it: the same model as this node's, a cut of 0 against a factor of
    # 1, kept); peer 2 claims class 1 only: nothing can judge it
    own = _sent(3 * torch.eye(3), classes=[4, 0, 0])
    received = {1: _sent(3 * torch.eye(3), classes=[4, 0, 0]),
                2: _sent(3 * torch.eye(3), classes=[0, 4, 0])}

    def run(**settings):
        node = _node(**{"use_plan": False, "held": (0, 0), "validation": 0.5,
                         "influence": 1.5, "known": (False, False, False), **settings})
        return node, screened(node, Head(3 * torch.eye(3)), gather(own, received, 0))

    node, update = run()
    assert update.peers == [1]
    assert [(r.peer, r.what, r.rule) for r in update.refusals] == [(2, "model", "unjudged")]
    assert node.distrusted == {}  # its prototypes are kept for the next round
    # kept: under "keep", or once a global prototype of a class this node lacks is known
    # (influence then judges every peer), or where validation is off
    assert run(unjudged="keep")[1].peers == [1, 2]
    assert run(known=(False, True, False))[1].peers == [1, 2]
    assert run(validation=0.0)[1].peers == [1, 2]
    # an algorithm without prototypes (FedAvg) has nothing else to judge it by: kept
    node = _node(use_plan=False, held=(0, 0), validation=0.5)
    node.known = None
    assert screened(node, Head(3 * torch.eye(3)), gather(own, received, 0)).peers == [1, 2]


def test_a_prototype_loss_is_the_peers_classes_mean_weighed_by_its_counts():
    assert prototype_class_loss([0.5, None, 2.0], [1.0, 5.0, 3.0]) == pytest.approx(
        (0.5 + 3 * 2.0) / 4)
    assert prototype_class_loss([0.5, None, 2.0], [0.0, 5.0, 0.0]) is None


def test_prototype_validation_refuses_a_peer_whose_classifier_unlearns_its_own_classes():
    # this node holds class 0 only and knows every global prototype (e0, e1, e2); without a
    # plan peer 1 and peer 3 claim class 1 (their models' class counts), peer 2 class 0
    own = _sent(3 * torch.eye(3), classes=[4, 0, 0])
    flipped = 3 * torch.eye(3)[[0, 2, 1]]  # trained on class 1 labelled 2, and back
    received = {1: _sent(3.6 * torch.eye(3), classes=[0, 4, 0]),
                2: _sent(-3 * torch.eye(3), classes=[4, 0, 0]),
                3: _sent(flipped, classes=[0, 4, 0])}
    node = _node(use_plan=False, held=(0, 0), known=(True, True, True),
                 prototype_validation=True)
    # on e1 the start of round (3I) gives log(e^3 + 2) - 3 = 0.0949; the bar is a uniform
    # guess's ln 3 = 1.0986, higher; peer 1: log(e^3.6 + 2) - 3.6 = 0.0539, kept; peer 3:
    # logits [0, 0, 3], log(2 + e^3) = 3.0949, refused. Peer 2 claims
    # only class 0, held here: validation's, not judged here.
    update = screened(node, Head(3 * torch.eye(3)), gather(own, received, 0))
    assert update.peers == [1, 2]
    [refusal] = update.refusals
    assert node.distrusted == {3: "prototype_validation"}
    assert (refusal.peer, refusal.rule) == (3, "prototype_validation")
    assert f"is {math.log(2 + math.exp(3)):.3g}, more than {math.log(3):.3g}" in refusal.reason
    # off, or before any global prototype is known, nothing is judged
    node.config.aggregation.prototype_validation = False
    assert screened(node, Head(3 * torch.eye(3)), gather(own, received, 0)).peers == [1, 2, 3]
    quiet = _node(use_plan=False, held=(0, 0), known=(False, False, False),
                  prototype_validation=True)
    assert screened(quiet, Head(3 * torch.eye(3)), gather(own, received, 0)).peers == [1, 2, 3]


def test_a_peer_that_says_nothing_of_its_classes_is_judged_on_every_class():
    # peer 3's flipped classifier, its model claiming no class counts: judged on classes 1
    # and 2 (class 0 is held here), mean loss (3.0949 + 3.0949) / 2, above the bar ln 3
    own = _sent(3 * torch.eye(3), classes=[4, 0, 0])
    received = {1: _sent(3.6 * torch.eye(3), classes=[0, 4, 0]),
                3: _sent(3 * torch.eye(3)[[0, 2, 1]])}
    node = _node(use_plan=False, held=(0, 0), known=(True, True, True),
                 prototype_validation=True)
    update = screened(node, Head(3 * torch.eye(3)), gather(own, received, 0))
    assert update.peers == [1]
    assert [r.rule for r in update.refusals] == ["prototype_validation"]


def test_distance_refuses_a_model_far_beyond_the_median_neighbours():
    own = _sent(torch.eye(3))
    near = torch.eye(3)
    near[0, 1] = 1.0  # distance 1
    nearish = torch.eye(3)
    nearish[0, 1] = 1.2  # distance 1.2
    received = {1: _sent(near), 2: _sent(nearish), 3: _sent(-torch.eye(3))}
    # -I is 2 sqrt(3) = 3.4641 away; median{0, 1, 1.2, 3.46} = 1.1: scores .909, 1.09, 3.15
    update = screened(_node(distance=2.0), Head(torch.eye(3)), gather(own, received, 0))
    assert update.peers == [1, 2]
    [refusal] = update.refusals
    assert (refusal.peer, refusal.rule) == (3, "distance")
    assert "in some layer its model is 3.15 times as far" in refusal.reason


def test_a_pull_beyond_the_bound_is_clipped_to_it_and_one_far_beyond_refused():
    own = _sent(torch.zeros(3, 3))
    one = torch.zeros(3, 3)
    one[0, 0] = 1.0
    received = {1: _sent(one), 2: _sent(one), 3: _sent(2.5 * one), 4: _sent(-4 * one)}
    # distances 1, 1, 2.5, 4; median{0, 1, 1, 2.5, 4} = 1: peer 4 (4 > 2 x 1.5) refused;
    # then among the kept, median{0, 1, 1, 2.5} = 1: peer 3's pull cut to 2 / 2.5 = 80%
    update = screened(_node(distance=2.0, distance_refuse=1.5), Head(torch.zeros(3, 3)),
                      gather(own, received, 0))
    assert update.peers == [1, 2, 3]
    assert float(update.states[3][0]["classifier.weight"][0, 0]) == pytest.approx(2.0)
    assert float(update.states[1][0]["classifier.weight"][0, 0]) == pytest.approx(1.0)
    assert [(r.peer, r.rule) for r in update.refusals] == [(3, "distance_clip"),
                                                           (4, "distance")]
    assert "its pull cut to 80% in classifier" in update.refusals[0].reason


def test_a_later_prototype_step_leaves_out_the_prototypes_of_a_refused_model():
    node = _node(distance=2.0)
    node.distrusted = {3: "distance"}
    protos = {"prototypes": Payload({"prototypes": torch.ones(1, 2),
                                     "classes": torch.tensor([0]), "counts": torch.tensor([2])})}
    later = screened(node, None, gather(protos, {1: protos, 3: protos}, 0, num_classes=3,
                                        dim=2))
    assert later.peers == [1]
    assert [(r.peer, r.what, r.rule) for r in later.refusals] == [(3, "prototypes", "distance")]


def test_without_a_plan_a_lying_sample_count_weighs_twice_the_median_at_most():
    own = _sent(torch.eye(3))
    received = {1: _sent(torch.eye(3)), 2: _sent(torch.eye(3)),
                3: _sent(torch.eye(3), samples=10**6)}
    update = gather(own, received, 0)
    # median{4, 4, 4, 1e6} = 4: cap 8
    assert [weight for _, weight in update.states] == [4, 4, 4, 8]
    # aggregation.claim_cap = 1: no claim above the median's 4; a claim of 6 among claims
    # of 4 and 2 (median{4, 2, 6, 1e6} = 5) is cut to 5
    capped = gather(own, {**received, 2: _sent(torch.eye(3), samples=2),
                          1: _sent(torch.eye(3), samples=6)}, 0, claim_cap=1.0)
    assert [weight for _, weight in capped.states] == [4, 5, 2, 5]


def test_use_plan_false_makes_a_node_weigh_claims_though_it_has_a_plan():
    plan = DataPlan(samples=(4, 4), class_counts=torch.tensor([[2, 2, 0], [2, 2, 0]]))
    assert plan_of(_node(plan=plan)) is plan
    assert plan_of(_node(plan=plan, use_plan=False)) is None


def test_class_shift_raises_the_senders_classes_bias_and_rows_along_its_embeddings():
    like = {"classifier.weight": torch.zeros(3, 2), "classifier.bias": torch.zeros(3)}
    direction = torch.tensor([0.6, 0.8])
    sent = attacks.unflat(attacks.shifted(attacks.flat(like), like, [5, 0, 2], 4.0,
                                          direction), like)
    assert sent["classifier.bias"].tolist() == [4.0, 0.0, 4.0]
    assert torch.allclose(sent["classifier.weight"],
                          torch.tensor([[2.4, 3.2], [0.0, 0.0], [2.4, 3.2]]))


def test_a_targeted_flip_goes_only_to_recipients_sharing_no_class():
    plan = DataPlan(samples=(4,) * 3, class_counts=torch.tensor([[2, 2, 0], [0, 3, 0],
                                                                 [0, 0, 4]]))
    data = types.SimpleNamespace(plan=plan)
    assert attacks.shares_a_class(data, 0, 1)
    assert not attacks.shares_a_class(data, 0, 2)
    assert attacks.shares_a_class(types.SimpleNamespace(plan=None), 0, 2)


def test_without_a_plan_a_model_is_validated_on_the_classes_it_claims_from_its_first_round():
    """The class counts travel with the model: a node's first model step (before any
    prototype of the peer) and the round after its prototypes were refused judge it on
    them, where nothing was judged before (no plan, Dirichlet ring: a sign-flipped model
    kept in round 1 cost 6.5 points)."""
    from node.intake.validation import peer_class_weights

    node = _node(use_plan=False)
    own = _sent(torch.eye(3), classes=[2, 2, 0])
    model_step = gather(own, {3: _sent(torch.eye(3), classes=[0, 5, 7]),
                              4: _sent(torch.eye(3))}, 0)
    assert peer_class_weights(node, model_step, 0) == [0.0, 5.0, 7.0]
    assert peer_class_weights(node, model_step, 1) == [1.0, 1.0, 1.0]  # says nothing: all
    # a claim that does not add up to the model's sample count, or has the wrong length,
    # is refused at the checks, named
    bad = gather(own, {3: {"model": Payload({"classifier.weight": torch.eye(3)},
                                            {"samples": 4, "classes": [1, 1, 1]})},
                       4: {"model": Payload({"classifier.weight": torch.eye(3)},
                                            {"samples": 2, "classes": [1, 1]})}}, 0)
    assert bad.peers == []
    assert [("sum to 3" in r.reason, r.rule) for r in bad.refusals] == [
        (True, "checks"), (False, "checks")]
    assert "must be 3 counts" in bad.refusals[1].reason
    # with the plan, the plan's counts, whatever the model claims
    planned_node = _node(plan=DataPlan(samples=(4,) * 5, class_counts=torch.tensor(
        [[2, 2, 0]] * 3 + [[4, 0, 0]] * 2)))
    assert peer_class_weights(planned_node, model_step, 0) == [4.0, 0.0, 0.0]


def test_without_a_plan_a_peer_is_judged_on_its_classes_as_it_claims_them_not_as_bounded():
    """Bounded counts weigh a peer; the classes it is judged on are its own: bounded, a
    Dirichlet node's 900 images of one class weighed as 20 against its 2 of another, and
    its model was judged mostly on the class it barely holds (no plan, ring: 4 points of
    clean F1 lost to honest refusals)."""
    from node.intake.validation import peer_class_weights

    def protos(counts):
        return {"prototypes": Payload({"prototypes": torch.ones(2, 2),
                                       "classes": torch.tensor([0, 1]),
                                       "counts": torch.tensor(counts)})}
    own = protos([10, 10])
    received = {1: protos([10, 10]), 2: protos([10, 10]), 3: protos([900, 2])}
    update = gather(own, received, 0, num_classes=3, dim=2)
    assert update.prototypes[3][1].tolist() == [20, 2, 0]  # weighed: 2 x median{10, 10, 10, 900}
    node = _node(use_plan=False)
    assert peer_class_weights(node, update, 2) == [900.0, 2.0, 0.0]


def test_validation_shares_one_budget_among_the_in_neighbours_down_to_a_floor():
    from node.intake.samples import (
        MIN_VALIDATION_SAMPLES,
        VALIDATION_BUDGET,
        VALIDATION_SAMPLES,
        samples_per_peer,
        validation_samples,
    )
    # up to 9 in-neighbours every one gets 256 samples; 99 share 2304 (23 each) but never
    # fewer than 64; the cost 256 x k grows no more beyond 9, until the floor
    assert [samples_per_peer(k) for k in (0, 1, 9, 10, 18, 36, 99)] == [
        256, 256, 256, 230, 128, 64, 64]
    assert VALIDATION_BUDGET == 9 * VALIDATION_SAMPLES and MIN_VALIDATION_SAMPLES == 64
    node = _node()
    node.data.train_x, node.data.train_y = torch.randn(400, 3), torch.arange(400) % 3
    few, many = validation_samples(node, 72), validation_samples(node, 1)
    assert len(few[1]) == 64 and len(many[1]) == 256
    assert torch.equal(few[0], many[0][:64])  # the smaller draw starts the larger one


def test_a_shared_screen_budget_halves_what_validation_and_the_held_class_screen_each_judge_on():
    from node.intake.samples import budget_shares, validation_samples
    node = _node(validation=0.5, held_influence=3.0, screen_budget="shared")
    node.data.train_x, node.data.train_y = torch.randn(400, 3), torch.arange(400) % 3
    # 9 in-neighbours: 2304 / 18 = 128 samples a peer, not 256; 20: the floor of 64, not 115
    assert budget_shares(node.config.aggregation) == 2
    assert len(validation_samples(node, 9)[1]) == 128
    assert len(validation_samples(node, 20)[1]) == 64
    shared = validation_samples(node, 9)[0]
    # each screen spends the whole budget, or one of them is off, or the held-class screen
    # mixes the classifiers alone (one pass however many peers): 256 each
    for settings in ({"screen_budget": "each"}, {"held_influence": 0.0},
                     {"validation": 0.0}, {"held_mix": "head"}):
        vars(node.config.aggregation).update({"validation": 0.5, "held_influence": 3.0,
                                              "held_mix": "model", "screen_budget": "shared",
                                              **settings})
        assert budget_shares(node.config.aggregation) == 1
        whole = validation_samples(node, 9)[0]
        assert len(whole) == 256 and torch.equal(shared, whole[:128])


def test_a_nodes_own_cut_is_measured_on_at_most_as_many_test_samples_as_all_peers_get():
    """Validation's bar (the cut this node's own round made) is measured on the local test
    set, all of it up to the peers' budget and a fixed draw of that many beyond: a node
    with much data would otherwise pay two forward passes of its whole test set a round."""
    from node.intake.samples import VALIDATION_BUDGET, own_test_samples, validation_samples
    node = _node()
    node.data.test_x = torch.randn(VALIDATION_BUDGET, 3)
    node.data.test_y = torch.zeros(VALIDATION_BUDGET, dtype=torch.int64)
    assert own_test_samples(node)[0] is node.data.test_x  # small enough: all of it, as is
    # distinct first columns by construction (5,000 draws of randn can repeat a float32)
    rows = torch.arange(5000, dtype=torch.float32)[torch.randperm(5000)]
    node.data.test_x, node.data.test_y = rows[:, None].repeat(1, 3), torch.arange(5000) % 3
    x, y = own_test_samples(node)
    assert len(y) == VALIDATION_BUDGET and len(set(x[:, 0].tolist())) == VALIDATION_BUDGET
    assert torch.equal(x, own_test_samples(node)[0])  # the same draw every round
    assert set(x[:, 0].tolist()) <= set(node.data.test_x[:, 0].tolist())
    node.data.test_x, node.data.test_y = torch.zeros(0, 3), torch.zeros(0, dtype=torch.int64)
    assert torch.equal(own_test_samples(node)[0], validation_samples(node)[0])


class CountingReads(dict):
    """A payload's tensors that count their reads (a received message decodes on each)."""

    reads = 0

    def __getitem__(self, name):
        CountingReads.reads += 1
        return super().__getitem__(name)


def test_a_checked_model_is_decoded_once_when_kept_and_on_every_read_when_not():
    from node.intake.checks import checked_state
    reference = {"w": torch.zeros(3), "b": torch.zeros(1)}
    payload = Payload(CountingReads(w=torch.tensor([3.0, 0.0, 4.0]), b=torch.tensor([0.0])),
                      {"samples": 2})
    for keep, reads in ((True, 2), (False, 2 + 2 * 3)):
        CountingReads.reads = 0
        state, samples, norm = checked_state(reference, payload, keep_decoded=keep)
        assert (samples, norm) == (2, 5.0)
        for _ in range(3):
            assert state["w"].tolist() == [3.0, 0.0, 4.0] and state["b"].tolist() == [0.0]
        assert CountingReads.reads == reads


def test_a_model_is_refused_naming_the_parameter_that_is_not_finite_or_the_overflow():
    from node.errors import ProtocolError
    from node.intake.checks import checked_state
    reference = {"w": torch.zeros(2, dtype=torch.float64), "b": torch.zeros(1)}

    def sent(w, b=0.0):
        return Payload({"w": torch.tensor(w, dtype=torch.float64), "b": torch.tensor([b])},
                       {"samples": 1})
    with pytest.raises(ProtocolError, match="parameter b holds NaN"):
        checked_state(reference, sent([1.0, 2.0], float("nan")))
    # finite values whose squares overflow float64 (1e200² = 1e400)
    with pytest.raises(ProtocolError, match="too large to square"):
        checked_state(reference, sent([1e200, 0.0]))


def test_gather_keeps_the_decoded_models_only_while_the_in_neighbours_fit_the_budget(
        monkeypatch):
    from node.intake import checks
    own = {"model": Payload({"w": torch.zeros(4)}, {"samples": 2})}  # 16 bytes a model

    def received():
        return {peer: {"model": Payload(CountingReads(w=torch.ones(4)), {"samples": 2})}
                for peer in (1, 2)}
    # two in-neighbours of 16 bytes: kept within 32 bytes (a later read decodes nothing),
    # read from the message again within 31 (once for each of the two models)
    for budget, later_reads in ((32, 0), (31, 2)):
        monkeypatch.setattr(checks, "DECODED_BUDGET", budget)
        update = gather(own, received(), 0)
        CountingReads.reads = 0
        for state, _ in update.states[1:]:
            assert state["w"].tolist() == [1.0] * 4
        assert CountingReads.reads == later_reads


def test_an_attacker_that_knows_the_held_class_screen_keeps_under_its_floor():
    # it cannot see the receivers' spread; what always passes is the floor (held_floor)
    def limits(influence, held, seen=4, floor=0.4):
        aggregation = types.SimpleNamespace(norm_bound=0.0, rule="mean", distance=0.0,
                                            influence=influence, held_influence=held,
                                            held_floor=floor)
        algorithm = types.SimpleNamespace(config=types.SimpleNamespace(
            aggregation=aggregation), model=nn.Linear(2, 2))
        return attacks.estimated_limits(algorithm, torch.zeros(6), None,
                                        (torch.zeros(6),) * seen).influence

    assert limits(1.5, 0.0) == pytest.approx(attacks.EDGE * 1.5)
    assert limits(1.5, 1.5) == pytest.approx(attacks.EDGE * 0.4)
    assert limits(1.5, 3.0, floor=1.0) == pytest.approx(attacks.EDGE * 1.0)
    assert limits(0.0, 0.3) == pytest.approx(attacks.EDGE * 0.3)
    assert limits(0.0, 0.0) is None
    # two in-neighbours of its own (a ring): the receivers' bar is the margin
    assert limits(0.0, 1.5, seen=2) == pytest.approx(attacks.EDGE * 1.5)


# --- the in-neighbours judged in a round (node.intake.drawn) ---------------------------------


def test_a_draw_keeps_every_peer_up_to_its_size_and_that_many_beyond_it():
    from node.intake.drawn import drawn
    peers = [9, 3, 5, 1, 7]
    assert drawn(peers, 0, torch.Generator().manual_seed(1)) == [1, 3, 5, 7, 9]
    assert drawn(peers, 5, torch.Generator().manual_seed(1)) == [1, 3, 5, 7, 9]
    two = drawn(peers, 2, torch.Generator().manual_seed(1))
    assert len(two) == 2 and set(two) <= set(peers) and two == sorted(two)
    assert drawn(peers, 2, torch.Generator().manual_seed(1)) == two  # seeded: drawn alike
    draws = {tuple(drawn(peers, 2, torch.Generator().manual_seed(s))) for s in range(20)}
    assert len(draws) > 3  # not the same two every round


def test_a_round_draws_only_where_some_screen_judges_and_more_arrived_than_it_judges():
    from node.intake.drawn import only_drawn, round_draw
    from node.settings import AggregationConfig, FederationConfig
    arrived = list(range(1, 21))
    config = FederationConfig(aggregation=AggregationConfig(judged_per_round=4))
    draw = round_draw(config, 0, 3, arrived)
    assert draw is not None and len(draw) == 4 and draw <= set(arrived)
    assert round_draw(config, 0, 3, arrived) == draw
    assert round_draw(config, 0, 4, arrived) != draw or round_draw(config, 0, 5, arrived) != draw
    assert round_draw(config, 0, 3, arrived[:4]) is None  # no more than it judges
    unscreened = FederationConfig(aggregation=AggregationConfig(
        judged_per_round=4, validation=0.0, distance=0.0, influence=0.0,
        prototype_validation=False, held_influence=0.0))
    assert round_draw(unscreened, 0, 3, arrived) is None  # nothing judges: all mixed
    assert round_draw(config, 0, 3, arrived, models=False) is None  # prototypes alone
    every = FederationConfig(aggregation=AggregationConfig(judged_per_round=0))
    assert round_draw(every, 0, 3, arrived) is None
    kept, left = only_drawn({peer: f"update {peer}" for peer in arrived}, draw)
    assert set(kept) == draw and kept[min(draw)] == f"update {min(draw)}"
    assert left == sorted(set(arrived) - draw)
    assert only_drawn({1: "a"}, None) == ({1: "a"}, [])


def _naming(names, weight=None):
    """A model message (an honest identity model unless `weight`) naming `names` refused."""
    sent = _sent(3 * torch.eye(3) if weight is None else weight)
    return witnesses.naming(sent, names)


def test_a_peer_two_others_refused_last_round_is_refused_and_one_word_is_not_enough():
    # peer 3 is named by 1 and 2; peer 4 by 1 alone; peer 2 names itself, which is no word
    own = _sent(3 * torch.eye(3))
    received = {1: _naming([3, 4]), 2: _naming([2, 3]), 3: _naming([]), 4: _naming([1])}
    node = _node(witnesses=2, unjudged="keep")
    update = screened(node, Head(3 * torch.eye(3)), gather(own, received, 0, names=True))
    assert update.peers == [1, 2, 4]
    [refusal] = update.refusals
    assert (refusal.peer, refusal.rule, refusal.what) == (3, "witnessed",
                                                          "model and prototypes")
    assert "2 of this node's in-neighbours (nodes 1, 2)" in refusal.reason
    assert node.distrusted == {3: "witnessed"}  # its prototypes follow in the next step
    # a quorum of three, or no witnesses at all, keeps everyone
    for quorum in (3, 0):
        assert screened(_node(witnesses=quorum, unjudged="keep"), Head(3 * torch.eye(3)),
                        gather(own, received, 0, names=True)).peers == [1, 2, 3, 4]
    # a witness refused at the door has no word: peer 2's message names a bad id
    received[2] = _naming([2, 3])
    received[2]["model"].meta["refused"] = [3, 3]
    update = screened(_node(witnesses=2, unjudged="keep"), Head(3 * torch.eye(3)),
                      gather(own, received, 0, names=True))
    assert update.peers == [1, 3, 4]
    assert [(r.peer, r.rule) for r in update.refusals] == [(2, "checks")]


@pytest.mark.parametrize("named", [[3, 3], [-1], 7, [1, "2"], [True]])
def test_a_list_of_refused_peers_that_is_not_distinct_node_ids_refuses_the_update(named):
    own = _sent(3 * torch.eye(3))
    bad = _naming([])
    bad["model"].meta["refused"] = named
    update = gather(own, {1: bad, 2: _naming([])}, 0, names=True)
    assert update.peers == [2]
    assert "'refused' must be distinct node ids" in update.refusals[0].reason
    # a node that reads no names (witnesses 0) never looks at them
    assert gather(own, {1: bad, 2: _naming([])}, 0).peers == [1, 2]


def test_a_node_names_only_what_it_refused_itself_and_only_in_its_model():
    refusals = [Refusal(1, "model and prototypes", "validation", "", judged=True),
                Refusal(2, "model and prototypes", "unjudged", ""),  # no judgement
                Refusal(3, "model and prototypes", "witnessed", ""),  # others' word
                Refusal(4, "update", "checks", "", judged=True),
                Refusal(1, "prototypes", "validation", "")]
    assert witnesses.judged_refused(refusals) == {1, 4}
    # at memory 0.5, named once refused two rounds running: a refusal that comes and goes
    # is not. Peer 4 refused in rounds 1 and 2 (1 + 0.5), peer 5 in rounds 1, 2 and 4
    # (0.25 * 1.5 + 1 = 1.375), peer 1 in round 2 alone (0.5 * 0.5 by round 4)
    rounds = [{4, 5}, {1, 4, 5}, set(), {5}]
    remembered = {}
    names = []
    for judged in rounds:
        remembered = witnesses.suspicion(remembered, judged, 0.5)
        names.append(witnesses.named(remembered))
    assert names == [[], [4, 5], [], []]
    assert remembered == {1: 0.25, 4: 0.375, 5: 1.375}
    # at 0.9 two refusals four rounds apart still name it: 0.9^4 + 1 = 1.6561
    remembered = witnesses.suspicion({}, {7}, 0.9)
    for _ in range(3):
        remembered = witnesses.suspicion(remembered, set(), 0.9)
    assert witnesses.named(witnesses.suspicion(remembered, {7}, 0.9)) == [7]
    # what has faded below FORGOTTEN is dropped
    assert witnesses.suspicion({3: 0.0015}, set(), 0.5) == {}
    prototypes = Payload({"prototypes": torch.zeros(1, 3)}, {})
    payloads = witnesses.naming({"model": _sent(torch.eye(3))["model"],
                                 "prototypes": prototypes}, [4, 1])
    assert payloads["model"].meta == {"samples": 4, "refused": [1, 4]}
    assert payloads["prototypes"] is prototypes
    assert witnesses.naming({"prototypes": prototypes}, [1]) == {"prototypes": prototypes}
