"""Graphs that change while the federation trains, and churn from a scenario: the round
graphs are derived from the seed alone, nodes send only to the round's out-neighbours,
and a scripted leave or late join ends as scripted."""

import subprocess
import sys

import networkx as nx
import pytest

from deploy.views.dynamics import consensus_by_round, to_target
from deploy.views.report import summarize
from node.config import from_dict
from node.errors import ConfigError
from node.federation import resolve
from node.record import NodeRecord
from tests.helpers import REPO, mnist_config, run_in_process
from topology.schedule import (
    Drawing,
    Event,
    ScenarioError,
    build_schedule,
    epidemic,
    one_peer_exponential,
    presence,
)


def schedule_of(raw):
    config = from_dict(raw)
    return resolve(config, ["x"] * config.nodes, ["x"] * config.nodes).schedule()


def test_a_resampled_graph_is_the_same_for_the_same_seed_and_changes_with_the_round():
    raw = {"nodes": 10, "rounds": 6, "seed": 3,
           "topology": {"kind": "k_regular", "k": 4, "resample_every": 2}}
    first, again = schedule_of(raw), schedule_of(raw)
    edges = [sorted(g.edges) for g in first.graphs]
    assert edges == [sorted(g.edges) for g in again.graphs]
    assert edges[1] == edges[2] and edges[3] == edges[4]  # held for 2 rounds
    assert edges[2] != edges[3]  # then drawn again
    for graph in first.graphs[1:]:
        assert all(d == 4 for _, d in graph.in_degree()) and nx.is_strongly_connected(graph)
    other = schedule_of({**raw, "seed": 4})
    assert [sorted(g.edges) for g in other.graphs] != edges


def test_static_topologies_keep_one_graph():
    schedule = schedule_of({"nodes": 6, "rounds": 3, "topology": {"kind": "ring"}})
    assert not schedule.dynamic
    assert all(sorted(g.edges) == sorted(nx.DiGraph(nx.cycle_graph(6)).edges)
               for g in schedule.graphs[1:])


def test_epidemic_sampling_sends_to_k_distinct_others():
    graph = epidemic(8, 3, seed=5)
    assert all(graph.out_degree(u) == 3 for u in graph) and nx.number_of_selfloops(graph) == 0
    assert sorted(epidemic(8, 3, seed=5).edges) == sorted(graph.edges)


def test_one_peer_exponential_walks_through_the_hops():
    # 8 nodes: hops 1, 2, 4, then 1 again
    assert [sorted(one_peer_exponential(8, t).successors(0)) for t in range(4)] == [
        [1], [2], [4], [1]]


def test_a_round_graph_that_cannot_be_drawn_is_refused_naming_the_round():
    # 7 nodes present after one leaves: a 3-regular graph needs an even product
    with pytest.raises(ConfigError, match=r"round 2 \(7 nodes present\)"):
        schedule_of({"nodes": 8, "rounds": 3,
                     "topology": {"kind": "k_regular", "k": 3, "resample_every": 1},
                     "scenario": {"events": [{"round": 2, "leave": [5]}]}})


def test_resample_every_applies_only_to_random_graphs():
    with pytest.raises(ConfigError, match="topology.resample_every"):
        from_dict({"topology": {"kind": "ring", "resample_every": 2}})


@pytest.mark.parametrize(("events", "says"), [
    ([{"round": 2, "leave": [1]}, {"round": 3, "leave": [1]}],
     "round 3: leave [1]: node 1 cannot leave: it is away already"),
    ([{"round": 2, "leave": [7]}], "round 2: leave [7]: node 7 does not exist"),
    ([{"round": 2, "back": [1]}], "node 1 cannot come back: it has not left"),
    ([{"round": 2, "join": [1]}, {"round": 3, "join": [1]}], "node 1 cannot join"),
    ([{"round": 9, "leave": [1]}], "the round must be in 1..4"),
    ([{"round": 2, "edge_up": [[0, 1]]}], "edge 0-1 cannot come up: it is not down"),
    ([{"round": 2, "leave": [0, 1, 2, 3]}], "round 2: every node is away"),
])
def test_a_contradictory_scenario_is_refused_naming_the_event(events, says):
    with pytest.raises(ConfigError) as caught:
        from_dict({"nodes": 4, "rounds": 4, "scenario": {"events": events}})
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_up_stops_before_any_node_starts_on_a_contradictory_scenario(tmp_path):
    scenario = tmp_path / "churn.toml"
    scenario.write_text("[[events]]\nround = 2\nleave = [3]\n\n[[events]]\nround = 3\n"
                        "leave = [3]\n")
    config = tmp_path / "fed.toml"
    config.write_text(f'nodes = 4\nrounds = 4\n[scenario]\nfile = "{scenario.name}"\n'
                      f'[deploy]\nresults_dir = "{tmp_path / "runs"}"\n')
    done = subprocess.run([sys.executable, "-m", "deploy.cli", "up", "-c", str(config)],
                          cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "round 3: leave [3]: node 3 cannot leave: it is away already" in done.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_presence_replays_leave_back_join_and_edges():
    replayed = presence(5, 6, [Event(2, leave=(1, 2)), Event(4, back=(1,)), Event(3, join=(4,)),
                               Event(2, edge_down=((0, 3),)), Event(5, edge_up=((3, 0),))])
    assert replayed.away(1) == [2, 3] and replayed.away(2) == [2, 3, 4, 5, 6]
    assert replayed.away(4) == [0, 1, 2] and replayed.joining[3] == {4}
    assert replayed.down[2] == replayed.down[4] == {(0, 3)} and not replayed.down[5]


def test_a_joining_node_only_listens_in_its_first_round():
    ring = nx.DiGraph(nx.cycle_graph(4))
    schedule = build_schedule(ring, Drawing("ring"), 3, [Event(2, join=(2,))])
    assert schedule.in_neighbours(1, 2) == [] and schedule.out_neighbours(1, 1) == [0]
    assert schedule.in_neighbours(2, 2) == [1, 3] and schedule.out_neighbours(2, 2) == []
    assert schedule.out_neighbours(3, 2) == [1, 3]


def test_scenario_errors_are_value_errors_naming_the_event():
    with pytest.raises(ScenarioError, match="round 1: leave"):
        presence(2, 2, [Event(1, leave=(0,)), Event(1, leave=(0,))])


DYNAMIC = {"name": "dyn", "nodes": 5, "rounds": 3, "algorithm": "fedavg", "seed": 7,
           "topology": {"kind": "epidemic", "k": 2}}


def payload_peers(record: dict, direction: str) -> dict[int, list[int]]:
    """Round -> the peers this node sent (or received) a model to (from)."""
    return {r["round"]: sorted(int(p) for p, kinds in r[f"bytes_{direction}_by_peer"].items()
                               if "model" in kinds) for r in record["rounds"]}


def test_two_runs_of_a_dynamic_config_agree_and_send_only_along_the_round_graph(
        data_dir, tmp_path):
    config = mnist_config(data_dir, 600, **DYNAMIC)
    first = run_in_process(config, tmp_path / "a")
    second = run_in_process(config, tmp_path / "b")
    schedule = resolve(config, ["x"] * 5, ["x"] * 5).schedule()
    for one, two in zip(first, second):
        assert [r["bytes_sent_by_peer"] for r in one["rounds"]] == [
            r["bytes_sent_by_peer"] for r in two["rounds"]]
        assert [r["bytes_received"] for r in one["rounds"]] == [
            r["bytes_received"] for r in two["rounds"]]
        # one torch thread per node on the CPU: the same F1 too
        assert [r["global_test"]["f1"] for r in one["rounds"]] == [
            r["global_test"]["f1"] for r in two["rounds"]]
        node = one["node"]
        sent = payload_peers(one, "sent")
        heard = payload_peers(one, "received")
        for round_ in range(1, 4):
            assert sent[round_] == schedule.out_neighbours(round_, node)
            assert heard[round_] == schedule.in_neighbours(round_, node)
    # the graph changed: some node sent to different peers in two rounds
    assert any(len({tuple(v) for v in payload_peers(n, "sent").values() if v}) > 1
               for n in first)
    records = [NodeRecord.from_dict(n) for n in first]
    consensus = consensus_by_round(records)
    assert set(consensus) == {0, 1, 2, 3} and all(v is not None and v >= 0
                                                  for v in consensus.values())
    pytest.importorskip("matplotlib")
    from deploy.views.pictures import active_rounds, write_run_files

    files = write_run_files(tmp_path / "a", records)
    assert {p.name for p in files.pictures} >= {"consensus_per_round.png", "edge_activity.png"}
    rounds, active = active_rounds(records)
    assert rounds == 3 and active == {
        edge: count for edge, count in schedule.edge_rounds.items()}


def test_a_scripted_leave_and_late_join_end_as_scripted(data_dir, tmp_path):
    # 150 images a node teach nothing in 4 rounds, and validation asks a peer's round to
    # have taught something: it would refuse the late joiner, which this test is not about
    config = mnist_config(data_dir, 600, name="churn", nodes=4, rounds=4, algorithm="fedavg",
                          scenario={"events": [{"round": 2, "leave": [1]},
                                               {"round": 3, "join": [3]}]},
                          report={"target_f1": 0.05}, aggregation={"validation": 0})
    results = run_in_process(config, tmp_path)
    status = {r["node"]: r["status"] for r in results}
    assert status == {0: "finished", 1: "left", 2: "finished", 3: "finished"}
    rounds = {r["node"]: [x["round"] for x in r["rounds"]] for r in results}
    assert rounds[1] == [0, 1] and rounds[3] == [3, 4] and rounds[0] == [0, 1, 2, 3, 4]
    joined = results[3]["rounds"][0]
    assert joined["train"] == {} and joined["bytes_sent"] == 0  # it only listened
    assert joined["bytes_received"] > 0
    assert results[1]["away_rounds"] == [2, 3, 4] and results[3]["away_rounds"] == [0, 1, 2]
    # nobody sent node 1 anything after it left, nor node 3 before it joined
    for record in results:
        for r in record["rounds"]:
            peers = {int(p) for p in r["bytes_sent_by_peer"]
                     if {"model"} & set(r["bytes_sent_by_peer"][p])}
            assert not (r["round"] >= 2 and 1 in peers) and not (r["round"] < 3 and 3 in peers)
    # its goodbye came before the others' last round and counted: nobody waited for it
    assert all(not r.get("no_goodbye_from") for r in results)
    summary = summarize(tmp_path, "churn", 4)
    assert summary["failed_nodes"] == []
    finished = [r["rounds"][-1]["global_test"]["f1"] for r in results if r["node"] != 1]
    assert summary["mean_global_f1"] == pytest.approx(sum(finished) / 3)
    records = [NodeRecord.from_dict(r) for r in results]
    target = to_target(records, 0.05)
    round_two = [r["rounds"][2]["global_test"]["f1"] for r in (results[0], results[2])]
    assert target["round"] is not None and target["bytes"] > 0
    # the means of round 2 are over the two nodes present, not four
    from deploy.views.dynamics import round_means
    assert round_means(records)[2] == pytest.approx(sum(round_two) / 2)
