"""Per-round participation and the hub: the seeded draw, each round's graph, and what a
federation in one process does with them on real MNIST."""

import pytest
import torch

from node.algorithms import create
from node.config import from_dict
from node.topology_settings import build_graph, schedule_over
from tests.helpers import CPU, mnist_config, run_in_process, synthetic_node, tiny_data
from topology import fully_connected, ring
from topology.participation import Participation, chosen, chosen_count
from topology.schedule import Drawing, Event, build_schedule


@pytest.mark.parametrize("fraction, candidates, count", [
    (1.0, 10, 10), (0.1, 10, 1), (0.25, 10, 3), (0.24, 10, 2), (0.04, 10, 1), (0.5, 1, 1),
    (0.5, 5, 3), (0.1, 100, 10),
])
def test_the_chosen_count_is_the_share_rounded_half_up_and_at_least_one(fraction, candidates,
                                                                         count):
    assert chosen_count(fraction, candidates) == count


def test_the_draw_is_the_seeded_generators_and_replays_alike():
    # numpy's Generator(SeedSequence([42, 1, SALT])).choice(10, 3) picks positions 3, 4, 1
    assert chosen(range(10), 0.3, 42, 1) == {1, 3, 4}
    assert chosen(range(10), 0.3, 42, 2) == {2, 7, 9}
    # candidates are positions in the sorted pool: the same draw over ids 10..19
    assert chosen(range(19, 9, -1), 0.3, 42, 1) == {11, 13, 14}
    assert chosen(range(10), 1.0, 42, 1) == frozenset(range(10))
    rounds = [chosen(range(1, 11), 0.1, 7, r) for r in range(1, 41)]
    assert rounds == [chosen(range(1, 11), 0.1, 7, r) for r in range(1, 41)]
    assert all(len(s) == 1 and s <= set(range(1, 11)) for s in rounds)
    assert len(set(rounds)) > 5  # the draw changes with the round


def test_the_hub_is_never_drawn_and_round_zero_has_everyone():
    part = Participation(0.25, seed=3, hub=2)
    assert part.chosen(5, 0) == {0, 1, 3, 4}
    for round_ in range(1, 30):
        drawn = part.chosen(5, round_)
        assert len(drawn) == 1 and 2 not in drawn  # round(0.25 x 4 clients)


def test_only_edges_between_chosen_nodes_carry_a_round():
    """A 4-ring 0-1-2-3 with half the nodes drawn: an edge stays when both ends are drawn."""
    part = Participation(0.5, seed=42)
    schedule = build_schedule(ring(4), Drawing("ring"), 6, [], part)
    assert not schedule.plain
    for round_ in range(1, 7):
        drawn = part.chosen(4, round_)
        assert len(drawn) == 2
        expected = {(u, v) for u, v in ring(4).edges if u in drawn and v in drawn}
        assert set(schedule.graph(round_).edges) == expected
        assert schedule.chosen(round_) == drawn


def test_the_hub_hears_the_drawn_clients_and_sends_to_those_drawn_next_and_to_all_last():
    """Hub 2 and clients 0, 1, 3, 4, half drawn: seed 7 draws {0, 1}, {0, 1}, {1, 4}, {0, 3}
    in rounds 1-4. Round r: the drawn clients send to the hub, the hub sends its aggregate
    to the clients drawn for round r + 1 (they start it from the global state), and in the
    last round to every client."""
    config = from_dict({"nodes": 5, "rounds": 4, "seed": 7, "algorithm": "fedavg",
                        "participation": 0.5, "topology": {"kind": "star", "hub": 2}})
    static = build_graph(config)
    assert set(static.edges) == {(2, v) for v in (0, 1, 3, 4)} | {(v, 2) for v in (0, 1, 3, 4)}
    schedule = schedule_over(static, config)
    assert [sorted(schedule.chosen(r)) for r in range(1, 5)] == [[0, 1], [0, 1], [1, 4], [0, 3]]
    assert [schedule.in_neighbours(r, 2) for r in range(1, 5)] == [[0, 1], [0, 1], [1, 4],
                                                                    [0, 3]]
    assert [schedule.out_neighbours(r, 2) for r in range(1, 5)] == [[0, 1], [1, 4], [0, 3],
                                                                     [0, 1, 3, 4]]
    # node 4, drawn for round 3 only: it hears the hub in round 2 and in the last round
    assert [schedule.in_neighbours(r, 4) for r in range(1, 5)] == [[], [2], [], [2]]
    assert [schedule.out_neighbours(r, 4) for r in range(1, 5)] == [[], [], [2], []]
    for round_ in range(1, 5):
        after = schedule.chosen(round_ + 1) if round_ < 4 else {0, 1, 3, 4}
        assert set(schedule.graph(round_).edges) == ({(c, 2) for c in schedule.chosen(round_)}
                                                     | {(2, c) for c in after})


def weights(node):
    """The node's model's tensors (FedHP's backbone, with its prototypes)."""
    model = node.net if node.name == "fedhp" else node.model
    extra = [node.prototypes.detach()] if node.name == "fedhp" else []
    return [*model.state_dict().values(), *extra]


@pytest.mark.parametrize("algorithm", ["fedavg", "fedproto", "fedhp"])
def test_the_hub_and_every_client_start_from_the_same_seeded_state(algorithm):
    """Round 1's drawn clients start from the shared initial state: every node builds its
    model from the seed alone, whatever its id and data (the hub has none)."""
    hub = synthetic_node(algorithm, tiny_data(samples=0, test=0), seed=5)
    client = synthetic_node(algorithm, tiny_data(samples=30, seed=1), seed=5)
    third = create(algorithm, client.config, client.data, CPU, node_id=3)
    other_seed = synthetic_node(algorithm, client.data, seed=6)
    for node in (client, third):
        assert all(map(torch.equal, weights(node), weights(hub)))
    assert not all(map(torch.equal, weights(other_seed), weights(hub)))


def test_a_graph_drawn_each_round_keeps_the_chosen_nodes_edges_and_the_scenarios_changes():
    part = Participation(0.5, seed=1)
    drawing = Drawing("epidemic", k=3, seed=1)
    schedule = build_schedule(fully_connected(8), drawing, 5, [Event(round=2, leave=(0,))], part)
    plain = build_schedule(fully_connected(8), drawing, 5, [Event(round=2, leave=(0,))])
    for round_ in range(1, 6):
        drawn = part.chosen(8, round_)
        expected = {(u, v) for u, v in plain.graph(round_).edges if u in drawn and v in drawn}
        assert set(schedule.graph(round_).edges) == expected
        assert all(0 not in edge for edge in schedule.graph(round_).edges) or round_ == 1


def test_everyone_taking_part_is_the_plain_schedule():
    schedule = build_schedule(ring(4), Drawing("ring"), 3, [], Participation(1.0, seed=42))
    assert schedule.plain and schedule.graph(2) is schedule.static


# --- in-process federations on real MNIST -------------------------------------------------


def payload_bytes(by_peer):
    """A round's bytes by peer without the control messages (goodbyes)."""
    return {peer: {k: n for k, n in kinds.items() if k != "control"}
            for peer, kinds in by_peer.items() if set(kinds) - {"control"}}


def test_on_a_full_graph_only_the_chosen_nodes_train_and_send_and_nobody_waits_for_the_rest(
        data_dir, tmp_path):
    """Six FedAvg nodes fully connected, half drawn each round: the others train nothing,
    send nothing and keep their model; nobody is missing (a node waited for in vain would
    be), and every node records the same chosen set."""
    config = mnist_config(data_dir, 1200, name="part", nodes=6, rounds=3, seed=3,
                          algorithm="fedavg", participation=0.5,
                          timeouts={"round": 60, "absent": 5})
    nodes = run_in_process(config, tmp_path)
    assert [n["status"] for n in nodes] == ["finished"] * 6
    for round_ in (1, 2, 3):
        drawn = set(nodes[0]["rounds"][round_]["participants"])
        assert len(drawn) == 3
        for node in nodes:
            record, before = node["rounds"][round_], node["rounds"][round_ - 1]
            assert set(record["participants"]) == drawn
            assert record["missing_peers"] == []
            sent = payload_bytes(record["bytes_sent_by_peer"])
            if node["node"] in drawn:
                assert record["train"] and set(sent) == {str(p) for p in drawn - {node["node"]}}
                assert set(payload_bytes(record["bytes_received_by_peer"])) == set(sent)
            else:
                assert record["train"] == {} and sent == {}
                assert payload_bytes(record["bytes_received_by_peer"]) == {}
                assert record["model_sketch"] == before["model_sketch"]  # its state kept


def bytes_and_f1(record):
    """A round's bytes by peer and kind, and its local and global F1."""
    return (record["bytes_sent_by_peer"], record["bytes_received_by_peer"],
            record["local_test"]["f1"], record["global_test"]["f1"])


def test_the_final_fit_changes_the_last_rounds_f1_and_no_byte(data_dir, tmp_path):
    """FedProto with a hub (node 0) and four clients, half drawn: with train.final_fit every
    client trains once more after the last aggregation and is evaluated after it, so its
    last F1 differs from the same run's without the fit; every byte, every earlier round and
    the hub (no data: no fit) are the same."""
    runs = {}
    for fit in (False, True):
        config = mnist_config(data_dir, 1000, name=f"fit{fit}", nodes=5, rounds=3, seed=7,
                              algorithm="fedproto", participation=0.5,
                              topology={"kind": "star", "hub": 0},
                              train={"threads": 1, "final_fit": fit})
        (tmp_path / str(fit)).mkdir()
        runs[fit] = run_in_process(config, tmp_path / str(fit))
        assert [n["status"] for n in runs[fit]] == ["finished"] * 5
    for plain, fitted in zip(runs[False], runs[True], strict=True):
        assert [bytes_and_f1(r) for r in plain["rounds"][:-1]] == [
            bytes_and_f1(r) for r in fitted["rounds"][:-1]]
        assert bytes_and_f1(plain["rounds"][-1])[:2] == bytes_and_f1(fitted["rounds"][-1])[:2]
        assert (plain["bytes_sent"], plain["bytes_received"]) == (fitted["bytes_sent"],
                                                                   fitted["bytes_received"])
        assert plain["rounds"][-1]["final_fit"] is None
    hub, clients = runs[True][0], runs[True][1:]
    assert hub["rounds"][-1]["final_fit"] is None
    assert bytes_and_f1(hub["rounds"][-1]) == bytes_and_f1(runs[False][0]["rounds"][-1])
    assert all(set(c["rounds"][-1]["final_fit"]) >= {"loss", "ce_loss", "proto_loss"}
               for c in clients)
    assert all(c["rounds"][-1]["local_test"]["f1"] != p["rounds"][-1]["local_test"]["f1"]
               for c, p in zip(clients, runs[False][1:], strict=True))
