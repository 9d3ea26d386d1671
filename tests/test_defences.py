"""The decentralized defences by hand: per-class prototype references, trust from clipping
history, the reputation rule's arithmetic, and the attack library's crafted models."""

import pytest
import torch

from experiments import attacks
from node.aggregation import reputation_aggregate
from node.defences import class_references, clip_scores, relative_trust, updated_trust


def test_a_class_is_bounded_by_its_own_norms_and_a_lone_class_by_every_row():
    own = [1.0, None, 2.0]
    peers = [[1.1, 5.0, None], [0.9, 4.0, 2.2], [1.2, None, 8.0]]
    # class 0: four contributors, max(own 1.0, median 1.05); class 1: this node lacks it
    # and only two have it, so the median of all nine rows (2.0); class 2: max(2.0, 2.2)
    assert class_references(own, peers) == pytest.approx([1.05, 2.0, 2.2])
    # below three contributors this node's own norm is the reference
    assert class_references([3.0], [[10.0]]) == [3.0]


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


def test_the_adaptive_attack_reverses_as_far_as_the_limits_it_estimates_let_it():
    start, trained = torch.tensor([10.0, 0.0]), torch.tensor([10.0, 1.0])
    # reversal by L: (10, -L); its distance to the trained model is L + 1
    unlimited = attacks.adaptive(start, trained, attacks.Limits(None, None))
    assert unlimited.tolist() == [10.0, -8.0]
    within = attacks.adaptive(start, trained, attacks.Limits(None, 2.5))
    assert within.tolist() == [10.0, -1.0]  # L = 1: distance 2; L = 2 would be 3
    nothing = attacks.adaptive(start, trained, attacks.Limits(1.0, None))
    assert nothing.tolist() == trained.tolist()  # no reversal is below norm 1


def test_every_attack_of_the_library_builds_an_attacker_and_an_unknown_one_is_refused():
    from node.algorithms.fedavg import FedAvg
    for attack in attacks.ATTACKS[1:]:
        assert issubclass(attacks.attacker_class(FedAvg, attack), FedAvg)
    with pytest.raises(ValueError, match="unknown attack 'nope'"):
        attacks.attacker_class(FedAvg, "nope")
