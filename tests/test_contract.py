"""Every registered algorithm fulfils the same contract, in a small in-process federation
on real MNIST: it learns, meters exactly what it sends, records both prediction rules where
it has them, and repeats itself for the same seed."""

import pytest
import torch

from node.algorithms import ALGORITHMS, create
from node.algorithms.base import ARGMAX, PROTOTYPE
from node.config import from_dict
from node.inprocess import memory_federation, run_in_memory
from node.optimizers import Adam
from node.runtime import load_node_data
from tests.helpers import mnist_config

# What each method sends every round (ProFe, FedProc and FedPR: a model and prototypes).
KINDS = {"fedavg": {"model"}, "fedproto": {"prototypes"}, "fedhp": {"prototypes"}}
# The prediction rules each method has (the others: the argmax and the nearest prototype).
RULES = {"fedavg": {ARGMAX}, "fedproc": {ARGMAX}, "fedhp": {PROTOTYPE}}
ROUNDS = 3
CHANCE_F1 = 0.1  # ten classes


def small_federation(data_dir, algorithm, subset=3000, rounds=ROUNDS):
    """Three nodes on `subset` MNIST samples for `rounds` rounds (3,000 and three: the
    learning run)."""
    # FedProc trains its output layer only late (alpha = 1 - t/T): a larger step
    return mnist_config(data_dir, subset, name=f"contract-{algorithm}", nodes=3, rounds=rounds,
                        seed=11, algorithm=algorithm, fedhp={"init_steps": 200},
                        train={"device": "cpu", "lr": 0.05 if algorithm == "fedproc" else 0.01})


def _run(config, results_dir):
    """The federation's records, run in this process; torch's thread count restored."""
    threads = torch.get_num_threads()
    try:
        return run_in_memory(memory_federation(config), results_dir)
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module", params=sorted(ALGORITHMS))
def runs(request, data_dir, tmp_path_factory):
    """The small federation, for one algorithm: (algorithm, its nodes' records)."""
    return request.param, _run(small_federation(data_dir, request.param),
                                tmp_path_factory.mktemp(request.param))


def test_every_node_finishes_and_learns_well_above_chance(runs):
    algorithm, nodes = runs
    for node in nodes:
        assert node["status"] == "finished" and node["rounds_done"] == ROUNDS
        assert [r["round"] for r in node["rounds"]] == list(range(ROUNDS + 1))
        first, last = node["rounds"][0]["global_test"], node["rounds"][-1]["global_test"]
        assert last["f1"] > max(first["f1"] + 0.2, 3 * CHANCE_F1), (algorithm, first, last)
        assert last["top_class_share"] < 0.5, algorithm  # not one class for everything


def test_bytes_sent_to_a_peer_are_the_bytes_it_received_kind_by_kind(runs):
    algorithm, nodes = runs
    for sender in nodes:
        sent = {kind for kind, n in sender["bytes_sent_by_kind"].items()
                if n and kind != "control"}
        assert sent == KINDS.get(algorithm, {"model", "prototypes"})
        assert set(sender["bytes_sent_by_peer"]) == {str(p) for p in sender["out_neighbours"]}
        for peer, kinds in sender["bytes_sent_by_peer"].items():
            assert nodes[int(peer)]["bytes_received_by_peer"][str(sender["node"])] == kinds
        assert sender["dropped_count"] == 0


def test_the_message_bound_from_the_model_holds_every_message_with_room(runs):
    """exchange.max_message_bytes = 0: the bound each node computes before its first round
    is larger than all the bytes of one kind it received from one peer in any round (one
    message, or two for a kind sent in two exchange steps), so no message came near it."""
    algorithm, nodes = runs
    for node in nodes:
        largest = max(n for record in node["rounds"]
                      for kinds in record["bytes_received_by_peer"].values()
                      for kind, n in kinds.items() if kind != "control")
        assert node["max_message_bytes"] >= largest > 0, (algorithm, node["max_message_bytes"])
        assert node["max_message_bytes"] < 64 * 1024 * 1024, algorithm  # not a blanket cap


def test_the_reported_rule_is_recorded_beside_every_other(runs):
    algorithm, nodes = runs
    reported = ALGORITHMS[algorithm].reported_rule
    for node in nodes:
        for split in ("global_test", "local_test"):
            evaluation = node["rounds"][-1][split]
            assert evaluation["rule"] == reported
            assert set(evaluation["by_rule"]) == RULES.get(algorithm, {ARGMAX, PROTOTYPE})
            for metrics in evaluation["by_rule"].values():
                assert set(metrics) == {"accuracy", "f1", "top_class_share"}
            for metric in ("accuracy", "f1", "top_class_share"):
                assert evaluation[metric] == evaluation["by_rule"][reported][metric]


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_the_same_seed_gives_the_same_results(algorithm, data_dir, tmp_path):
    """Two runs of the same config, node by node and round by round, on a smaller federation
    than the learning run's (900 samples, two rounds: a first round and one that uses what
    the first exchanged)."""
    config = small_federation(data_dir, algorithm, subset=900, rounds=2)
    first, second = (_run(config, tmp_path / name) for name in ("a", "b"))
    for a, b in zip(first, second, strict=True):
        assert len(a["rounds"]) == config.rounds + 1
        assert [r["global_test"] for r in a["rounds"]] == [r["global_test"] for r in b["rounds"]]
        assert [r["train"] for r in a["rounds"]] == [r["train"] for r in b["rounds"]]
        assert a["bytes_sent_by_peer"] == b["bytes_sent_by_peer"]


def test_adam_is_a_choice_every_model_sharing_method_trains_with(data_dir, tmp_path):
    config = from_dict({**small_federation(data_dir, "fedavg").to_dict(),
                        "train": {"threads": 1, "device": "cpu", "optimizer": "adam",
                                  "lr": 0.001}})
    federation = memory_federation(config)
    nodes = run_in_memory(federation, tmp_path)
    assert all(n["rounds"][-1]["global_test"]["f1"] > 0.5 for n in nodes)
    algorithm = create("fedavg", config, load_node_data(config, 0, torch.device("cpu")),
                       torch.device("cpu"), 0)
    assert isinstance(algorithm.optimizer, Adam)
