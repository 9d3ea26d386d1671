"""The sim backend: virtual time computed right, and the same federation as node processes."""

from __future__ import annotations

import json
import random
import re
import threading

import pytest

from node.sim.engine import Engine, SimTransport
from node.sim.wire import (
    FRAME_OVERHEAD,
    MIN_RETRANSMIT_S,
    Wire,
    lost_packets,
    retransmission_seconds,
    wire_bytes,
)
from tests.helpers import assert_hub_rounds_drawn, run_federation
from topology.links import Link

FIVE_MBIT = 5_000_000


# --- the wire: hand computations ------------------------------------------------------------


def test_a_message_on_a_shaped_edge_takes_its_size_over_the_rate_plus_the_delay():
    wire = Wire({(0, 1): Link(FIVE_MBIT, delay_s=0.04)}, seed=1)
    nbytes = wire_bytes([100, 250_000])
    assert nbytes == 250_100 + 2 * FRAME_OVERHEAD
    [arrival] = wire.arrivals(0, 10.0, [(1, nbytes)])
    assert arrival == pytest.approx(10.0 + nbytes * 8 / FIVE_MBIT + 0.04)  # 10.44023 s


def test_messages_on_one_edge_queue_behind_each_other_and_an_unshaped_edge_takes_no_time():
    wire = Wire({(0, 1): Link(1_000_000)}, seed=1)
    first = wire.arrivals(0, 0.0, [(1, 125_000), (2, 125_000)])
    second = wire.arrivals(0, 0.5, [(1, 125_000)])
    assert first == [pytest.approx(1.0), 0.0]  # 1 Mbit on a 1 Mbit/s edge; edge 0->2 unshaped
    assert second == [pytest.approx(2.0)]  # sent at 0.5, behind the first until 1.0


def test_a_broadcast_shares_the_uplink_and_the_next_one_waits_for_it():
    wire = Wire({(0, 3): Link(1_000_000)}, seed=1, uplinks={0: 3_000_000})
    # three copies of 1 Mbit: 1 Mbit/s each on the uplink's share; edge 0->3 is 1 Mbit/s too
    arrivals = wire.arrivals(0, 0.0, [(1, 125_000), (2, 125_000), (3, 125_000)])
    assert arrivals == [pytest.approx(1.0)] * 3
    # alone on the uplink at 3 Mbit/s, but it starts once the broadcast is through
    assert wire.arrivals(0, 0.2, [(1, 375_000)]) == [pytest.approx(2.0)]


def test_jitter_never_lets_a_message_overtake_the_one_before_it_on_its_edge():
    wire = Wire({(0, 1): Link(None, delay_s=0.05, jitter_s=0.05)}, seed=3)
    arrivals = [wire.arrivals(0, t / 1000, [(1, 100)])[0] for t in range(200)]
    assert arrivals == sorted(arrivals)  # 1 ms apart: many wait behind a later draw
    spaced = [wire.arrivals(0, 1.0 + t, [(1, 100)])[0] - (1.0 + t) for t in range(400)]
    assert 0.04 < sum(spaced) / len(spaced) < 0.07  # 50 ms, jitter cut at zero delay
    assert len(set(spaced)) > 300  # a draw per message (a sixth cut at zero delay)


def test_lost_packets_cost_one_retransmission_timeout_each():
    rng = random.Random(0)
    lost = [lost_packets(1448 * 100, 0.05, rng) for _ in range(400)]
    assert 4.0 < sum(lost) / len(lost) < 6.0  # 100 packets at 5%
    assert lost_packets(10_000, 0.0, rng) == 0
    assert retransmission_seconds(3, Link(delay_s=0.01)) == pytest.approx(3 * MIN_RETRANSMIT_S)
    assert retransmission_seconds(2, Link(delay_s=0.3)) == pytest.approx(2 * 0.6)


# --- the engine: virtual time between real threads ----------------------------------------


def two_nodes(link: Link, timeout: float = 60.0):
    """Node 0 sends one known message to node 1 on `link`; (sent at, received at, frames)."""
    engine = Engine(2, Wire({(0, 1): link}, seed=1), epoch=0.0, workers=2)
    payload = [b"header", bytes(300_000)]
    seen = {}

    def sender():
        engine.begin(0)
        transport = SimTransport(engine, 0, [1])
        seen["sent"] = engine.now(0)
        transport.send(1, payload)
        transport.close(0)

    def receiver():
        engine.begin(1)
        transport = SimTransport(engine, 1, [])
        seen["message"] = transport.receive(timeout)
        seen["received"] = engine.now(1)
        transport.close(0)

    threads = [threading.Thread(target=sender), threading.Thread(target=receiver)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return seen, wire_bytes([len(frame) for frame in payload])


def test_one_5_mbit_edge_carries_a_known_message_in_its_virtual_transfer_time():
    seen, nbytes = two_nodes(Link(FIVE_MBIT, delay_s=0.05))
    expected = nbytes * 8 / FIVE_MBIT + 0.05  # 0.53 s
    assert seen["message"] == (0, [b"header", bytes(300_000)])
    assert seen["received"] - seen["sent"] == pytest.approx(expected, rel=0.01)


def test_a_wait_shorter_than_the_transfer_times_out_in_virtual_time():
    seen, _ = two_nodes(Link(FIVE_MBIT), timeout=0.1)
    assert seen["message"] is None
    assert seen["received"] == pytest.approx(0.1, abs=0.05)  # its clock: the timeout, no later


# --- whole federations ----------------------------------------------------------------------


def comparable(node):
    """What must not depend on the backend: bytes by round, peer and kind, and the F1s."""
    return [(r["round"], r["bytes_sent"], r["bytes_received"], r["bytes_sent_by_peer"],
             r["bytes_received_by_peer"], r["global_test"]["by_rule"], r["local_test"]["f1"])
            for r in node["rounds"]], node["bytes_sent_by_kind"], node["bytes_received_by_kind"]


@pytest.mark.integration
def test_local_processes_and_the_sim_backend_give_the_same_bytes_and_f1(tmp_path, data_dir):
    """Five ProFe nodes, non-IID on a 2-regular graph, one torch thread each: every
    node's bytes per round, peer and kind, and its F1 under every rule, are equal."""
    runs = {}
    for backend in ("local", "sim"):
        (tmp_path / backend).mkdir()
        options = ("--backend", backend, "--set", "train.threads=1", "--set",
                   "data.partition=dirichlet", "--set", "deploy.memory=512m")
        done, _, nodes = run_federation(tmp_path / backend, data_dir, backend, nodes=5,
                                        rounds=3, topology="k_regular", topology_extra="k = 2",
                                        options=options)
        assert done.returncode == 0, done.stderr
        assert [n["status"] for n in nodes] == ["finished"] * 5
        runs[backend] = nodes
    assert runs["local"][0]["bytes_sent"] > 0
    for local, sim in zip(runs["local"], runs["sim"], strict=True):
        assert comparable(local) == comparable(sim)


def test_a_straggler_misses_the_round_deadline_in_virtual_time(tmp_path, data_dir):
    """Node 2 computes 2,000 times slower than the others: each of its rounds takes far
    longer than timeouts.round in virtual time, so its neighbours go on without it, as on
    a network, though every thread runs as fast as this machine lets it."""
    from node.inprocess import memory_federation
    from node.sim.run import simulate
    from tests.helpers import mnist_config

    # its start-up is 2,000 times slower too: the others wait for it (timeouts.startup)
    rounds, deadline, grace = 2, 20.0, 1.0
    config = mnist_config(data_dir, 600, nodes=3, rounds=rounds,
                          timeouts={"startup": 1e5, "round": deadline, "absent": grace,
                                    "shutdown": 5.0},
                          sim={"node_slowdowns": [1.0, 1.0, 2000.0]})
    nodes = simulate(memory_federation(config), tmp_path)
    assert [n["status"] for n in nodes] == ["finished"] * 3
    for fast in nodes[:2]:
        assert [r["missing_peers"] for r in fast["rounds"][1:]] == [[2], [2]]
        # from the end of start-up (which waits for node 2's, 2,000 times its CPU time on
        # whatever machine runs this), each round waits at most its deadline and the
        # absent peer's grace: its own CPU time is the only other virtual time it spends
        first, last = fast["rounds"][0], fast["rounds"][-1]
        own_cpu = last["cpu_seconds"] - first["cpu_seconds"]
        assert last["recorded_at"] - first["recorded_at"] <= rounds * (deadline + grace) + own_cpu
    slow = nodes[2]
    assert all(r["train_seconds"] > deadline for r in slow["rounds"][1:])  # virtual seconds
    assert slow["rounds"][-1]["recorded_at"] > (fast["rounds"][-1]["recorded_at"]
                                                + rounds * deadline)


@pytest.mark.integration
def test_protofed_up_on_the_sim_backend_writes_what_a_local_run_writes(tmp_path, data_dir):
    links = '[links]\nbandwidth = "5mbit"\ndelay = "20ms"\n[report]\ntarget_f1 = 0.05\n'
    done, summary, nodes = run_federation(tmp_path, data_dir, "simrun", nodes=4, rounds=2,
                                          options=("--backend", "sim"), extra=links,
                                          pictures=True)
    assert done.returncode == 0, done.stderr
    # the capacity check measured the nodes as threads of one process
    assert re.search(r"memory: about [0-9.]+ GiB for 4 sim nodes \(measured [0-9]+ MiB "
                     r"shared, [0-9.]+ MiB per node, [0-9.]+ MiB of its messages",
                     done.stderr), done.stderr
    run_dir = tmp_path / "results" / "simrun"
    for name in ("summary.json", "rounds.csv", "f1_per_round.png", "federation.json",
                 "logs/node-0.log"):
        assert (run_dir / name).is_file(), name
    run_file = json.loads((run_dir / "run.json").read_text())
    assert run_file["backend"] == "sim"
    assert isinstance(run_file["start_times"]["sim"], int)  # kept after the process ended
    target = summary["to_target"]
    assert target["round"] is not None and target["seconds"] > 0  # virtual seconds
    # stamped transfers on the 5 Mbit/s links: a model message's size over the rate at least
    received = nodes[0]["rounds"][1]["bytes_received_by_peer"]["1"]["model"]
    seconds = nodes[0]["rounds"][1]["transfer_seconds_by_peer"]["1"]["model"]
    assert seconds >= received * 8 / FIVE_MBIT + 0.02


def test_churn_a_changing_graph_a_robust_rule_and_an_attacker_run_as_they_do_in_memory(
        tmp_path, data_dir, monkeypatch):
    """Epidemic sampling (a new graph every round), a node leaving and coming back, one
    joining late, the median rule, and node 1 sending sign-flipped models: the sim gives
    every node the bytes, F1 and refusals the in-memory federation (real time) gives it."""
    import node.algorithms
    from experiments.attacks import attacker_class
    from node.algorithms.profe import ProFe
    from node.inprocess import memory_federation, run_in_memory
    from node.sim.run import simulate
    from tests.helpers import PerNode, mnist_config

    monkeypatch.setattr(node.algorithms, "ALGORITHMS",
                        PerNode(node.algorithms.ALGORITHMS,
                                {1: attacker_class(ProFe, "sign_flip")}))
    config = mnist_config(
        data_dir, 1500, nodes=6, rounds=4, seed=5, topology={"kind": "epidemic", "k": 3},
        aggregation={"rule": "median"},
        model={"teacher_channels": [8, 16], "student_channels": [4, 8]},
        scenario={"events": [{"round": 2, "leave": [4], "join": [5]},
                             {"round": 3, "back": [4]}]})
    runs = {"memory": run_in_memory(memory_federation(config), tmp_path / "memory"),
            "sim": simulate(memory_federation(config), tmp_path / "sim")}

    def seen(nodes):
        return [[(r["round"], r["bytes_sent"], r["bytes_received"], r["global_test"]["f1"],
                  r["missing_peers"], [x["peer"] for x in r["refusals"]]) for r in n["rounds"]]
                for n in nodes]

    assert [n["status"] for n in runs["sim"]] == [n["status"] for n in runs["memory"]]
    assert seen(runs["sim"]) == seen(runs["memory"])
    assert any(x["peer"] == 1 for n in runs["sim"] for r in n["rounds"] for x in r["refusals"])
    assert [r["round"] for r in runs["sim"][4]["rounds"]] == [0, 1, 3, 4]  # away in round 2


@pytest.mark.integration
def test_status_lists_a_sim_run_and_down_stops_every_node_of_it(tmp_path, data_dir):
    from tests.helpers import (
        protofed,
        protofed_running,
        read_json,
        wait_for_rounds,
        wait_until,
        write_config,
    )

    config = write_config(tmp_path, data_dir, "simdown", nodes=3, rounds=200)
    run_dir = tmp_path / "results" / "simdown"
    with protofed_running("up", "-c", config, "--run-id", "simdown", "--backend", "sim") as up:
        wait_until(lambda: (read_json(run_dir / "run.json") or {}).get("status") == "running",
                   "the sim run's run.json")
        wait_for_rounds(run_dir / "node-2.json", 1)
        status = protofed("status", "--results-dir", tmp_path / "results")
        assert "simdown  sim  3 nodes in process" in status.stdout, status.stdout
        down = protofed("down", "simdown", "--results-dir", tmp_path / "results")
        assert down.returncode == 0, down.stderr
        up.wait(timeout=120)
    for i in range(3):
        record = read_json(run_dir / f"node-{i}.json")
        assert record["status"] == "stopped", record["status"]
        assert record["rounds_done"] < 200


@pytest.mark.integration
def test_a_run_without_a_global_test_set_is_warned_of_and_its_table_shows_no_global_f1(
        tmp_path, data_dir):
    done, summary, _ = run_federation(tmp_path, data_dir, "no-global", nodes=3, rounds=1,
                                      options=("--backend", "sim", "--set",
                                               "data.global_test_fraction=0"))
    assert done.returncode == 0, done.stderr
    assert "warning: data.global_test_fraction = 0: there is no global test set" in done.stderr
    assert [n["global_f1"] for n in summary["nodes"]] == [None] * 3
    assert all(n["local_f1"] > 0 for n in summary["nodes"])
    assert "No global test set" in done.stdout and "mean F1 -" in done.stderr


@pytest.mark.integration
def test_a_sim_of_fewer_nodes_than_start_the_arenas_still_counts_what_a_node_adds(tmp_path,
                                                                                 data_dir):
    done, _, _ = run_federation(tmp_path, data_dir, "three", nodes=3, rounds=1,
                                options=("--backend", "sim", "--set", "deploy.cores=2"))
    assert done.returncode == 0, done.stderr
    per_node = re.search(r"shared, ([0-9.]+) MiB per node", done.stderr)
    assert per_node and float(per_node.group(1)) > 0, done.stderr  # it once said 0 MiB


@pytest.mark.integration
@pytest.mark.parametrize("algorithm, final_fit", [("fedavg", False), ("fedproto", False),
                                                  ("fedhp", True)])
def test_a_hub_star_at_half_participation_runs_alike_on_local_processes_and_the_sim(
        tmp_path, data_dir, algorithm, final_fit):
    """A hub (node 0) and four clients, two drawn per round: real processes and the sim
    give every node the same bytes by round, peer and kind and the same F1 (FedHP's after
    the final fit); only the drawn clients train, the hub trains none, and nobody waits for
    a client not drawn."""
    runs = {}
    for backend in ("local", "sim"):
        (tmp_path / backend).mkdir()
        options = ("--backend", backend, "--set", "train.threads=1", "--set",
                   "participation=0.5", "--set", "deploy.memory=512m", "--set",
                   f"train.final_fit={str(final_fit).lower()}")
        done, _, nodes = run_federation(tmp_path / backend, data_dir, backend, nodes=5,
                                        rounds=3, algorithm=algorithm, topology="star",
                                        topology_extra="hub = 0", options=options)
        assert done.returncode == 0, done.stderr
        assert [n["status"] for n in nodes] == ["finished"] * 5
        runs[backend] = nodes
    for local, sim in zip(runs["local"], runs["sim"], strict=True):
        assert comparable(local) == comparable(sim)
    nodes = runs["local"]
    assert_hub_rounds_drawn(nodes, rounds=3, drawn=2)
    assert [bool(n["rounds"][-1]["final_fit"]) for n in nodes] == [False] + [final_fit] * 4
