"""Integration: real node processes over ZeroMQ on 127.0.0.1, real MNIST subsets."""

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import (
    protofed,
    protofed_running,
    run_federation,
    wait_for_rounds,
    write_config,
)

pytestmark = pytest.mark.integration



@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("federations")


@pytest.fixture(scope="module")
def three_fc(workdir, data_dir):
    return run_federation(workdir, data_dir, "three-fc")


@pytest.fixture(scope="module")
def four_fc(workdir, data_dir):
    return run_federation(workdir, data_dir, "four-fc", nodes=4)


@pytest.fixture(scope="module")
def four_ring(workdir, data_dir):
    return run_federation(workdir, data_dir, "four-ring", nodes=4, topology="ring")


@pytest.fixture(scope="module")
def four_fc_fp32(workdir, data_dir):
    return run_federation(workdir, data_dir, "four-fc-fp32", nodes=4, codec="fp32")


def test_every_node_finishes_and_the_table_is_printed(three_fc):
    done, summary, nodes = three_fc
    assert done.returncode == 0, done.stderr
    assert [n["status"] for n in nodes] == ["finished"] * 3
    assert all(n["rounds_done"] == 2 and len(n["rounds"]) == 3 for n in nodes)
    assert "bytes sent" in done.stdout and "total" in done.stdout
    assert summary["failed_nodes"] == []
    assert all(0.0 <= n["rounds"][-1]["global_test"]["f1"] <= 1.0 for n in nodes)
    assert all(n["dropped_messages"] == [] for n in nodes)


def test_bytes_sent_to_a_peer_equal_bytes_that_peer_received(three_fc):
    _, _, nodes = three_fc
    by_id = {n["node"]: n for n in nodes}
    for sender in by_id.values():
        for peer, kinds in sender["bytes_sent_by_peer"].items():
            received = by_id[int(peer)]["bytes_received_by_peer"][str(sender["node"])]
            assert kinds == received, (sender["node"], peer)
    assert sum(n["bytes_sent"] for n in nodes) == sum(n["bytes_received"] for n in nodes)


def test_ring_and_fully_connected_move_the_bytes_their_graphs_imply(four_fc, four_ring):
    _, _, fc = four_fc
    _, _, ring = four_ring
    assert all(len(n["out_neighbours"]) == 3 and len(n["in_neighbours"]) == 3 for n in fc)
    assert all(len(n["out_neighbours"]) == 2 and len(n["in_neighbours"]) == 2 for n in ring)
    for a, b in zip(fc, ring):
        for kind in ("model", "prototypes"):
            ratio = b["bytes_sent_by_kind"][kind] / a["bytes_sent_by_kind"][kind]
            assert ratio == pytest.approx(2 / 3, rel=0.01), (kind, a["node"])


def test_int16_sends_about_half_the_model_bytes_of_fp32(four_fc, four_fc_fp32):
    _, _, int16 = four_fc
    _, _, fp32 = four_fc_fp32
    for a, b in zip(int16, fp32):
        ratio = a["bytes_sent_by_kind"]["model"] / b["bytes_sent_by_kind"]["model"]
        assert ratio == pytest.approx(0.5, abs=0.01)


# Every algorithm's contract is tested in-process (test_contract.py); over real sockets and
# processes: a two-step exchange (model, then prototypes) and mixed architectures.
@pytest.mark.parametrize("algorithm", ["fedproto", "fedpr"])
def test_algorithms_train_over_zeromq(workdir, data_dir, algorithm):
    extra = {
        # FedProto shares only prototypes, so node 2 runs a narrower network than the others.
        "fedproto": "[[model.groups]]\nnodes = [2]\nteacher_channels = [8, 16]\n",
        # FedProc trains its output layer only from round 2 (alpha = 1 - t/T), and ~360
        # samples per node give few steps: a larger step and a second epoch show it learning.
        "fedproc": "[train]\nlr = 0.05\nepochs = 2\n",
    }.get(algorithm, "")
    done, _, nodes = run_federation(workdir, data_dir, f"algo-{algorithm}", algorithm=algorithm,
                                    extra=extra)
    assert done.returncode == 0, done.stderr
    kinds = {"fedproto": {"prototypes"}, "fedhp": {"prototypes"}, "fedavg": {"model"}}
    for node in nodes:
        assert node["algorithm"] == algorithm
        sent = {kind for kind, n in node["bytes_sent_by_kind"].items() if n and kind != "control"}
        assert sent == kinds.get(algorithm, {"model", "prototypes"})
        first, last = node["rounds"][0]["global_test"], node["rounds"][-1]["global_test"]
        assert last["f1"] > first["f1"] + 0.05, (node["node"], first, last)


def test_same_seed_gives_the_same_results(three_fc, workdir, data_dir):
    _, _, again = run_federation(workdir, data_dir, "three-fc-again")
    _, _, first = three_fc
    for a, b in zip(first, again):
        assert a["train_samples"] == b["train_samples"]
        assert a["rounds"][-1]["global_test"] == b["rounds"][-1]["global_test"]
        assert a["bytes_sent"] == b["bytes_sent"]


def test_a_node_killed_mid_run_does_not_stop_the_others(workdir, data_dir):
    name = "killed"
    round_timeout = 60  # never waited for: the lost connection says node 2 is gone
    config = write_config(workdir, data_dir, name, rounds=3, round_timeout=round_timeout)
    run_dir = workdir / "results" / name
    with protofed_running("up", "-c", config, "--run-id", name) as process:
        wait_for_rounds(run_dir / "node-2.json", 1)
        os.kill(json.loads((run_dir / "run.json").read_text())["pids"]["2"], signal.SIGKILL)
        _, stderr = process.communicate(timeout=240)
    assert process.returncode == 1
    assert "node 2 did not finish" in stderr
    survivors = [json.loads((run_dir / f"node-{i}.json").read_text()) for i in (0, 1)]
    for node in survivors:
        assert node["status"] == "finished"
        assert node["rounds_done"] == 3
        assert 2 in node["rounds"][-1]["missing_peers"]
        assert node["unreachable_peers"] == [2]
        assert node["elapsed_seconds"] < round_timeout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["failed_nodes"] == [2]


@contextlib.contextmanager
def long_federation(workdir, data_dir, name):
    """`protofed up` on a federation that would run for hours, once every node trains:
    (process, node pids)."""
    config = write_config(workdir, data_dir, name, rounds=1000)  # never ends on its own
    run_dir = workdir / "results" / name
    with protofed_running("up", "-c", config, "--run-id", name) as process:
        for i in range(3):
            wait_for_rounds(run_dir / f"node-{i}.json", 1)
        pids = json.loads((run_dir / "run.json").read_text())["pids"]
        yield process, [int(p) for p in pids.values()]


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_status_then_down_stops_a_running_federation(workdir, data_dir):
    with long_federation(workdir, data_dir, "to-stop") as (process, pids):
        results = workdir / "results"
        status = protofed("status", "--results-dir", results)
        assert "to-stop" in status.stdout
        down = protofed("down", "to-stop", "--results-dir", results)
        assert down.returncode == 0, down.stderr
        assert "stopped to-stop" in down.stdout
        process.communicate(timeout=60)
        assert process.returncode != 0
        assert not any(alive(pid) for pid in pids)
        assert "no running federations" in protofed("status", "--results-dir", results).stdout


def test_ctrl_c_stops_every_child(workdir, data_dir):
    with long_federation(workdir, data_dir, "interrupted") as (process, pids):
        process.send_signal(signal.SIGINT)
        try:
            _, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"protofed up ignored SIGINT for 60 s: {(exc.stderr or b'')[-1500:]!r}")
        assert process.returncode == 130
        assert "stopping every node" in stderr
        assert not any(alive(pid) for pid in pids)
        summary = json.loads((workdir / "results" / "interrupted" / "summary.json").read_text())
        assert summary["failed_nodes"] == [0, 1, 2]


def test_up_stops_a_run_that_outlives_timeouts_run(workdir, data_dir):
    name = "deadline"
    config = write_config(workdir, data_dir, name, rounds=1000)  # would run for hours
    started = time.monotonic()
    done = protofed("up", "-c", config, "--run-id", name, "--set", "timeouts.run=5",
                    timeout=180)
    assert done.returncode == 1
    assert "timeouts.run (5 s) passed" in done.stderr
    assert time.monotonic() - started < 120
    summary = json.loads((workdir / "results" / name / "summary.json").read_text())
    assert [n["status"] for n in summary["nodes"]] != ["finished"] * 3
    run = json.loads((workdir / "results" / name / "run.json").read_text())
    assert not any(alive(int(pid)) for pid in run["pids"].values())


def test_a_killed_node_is_started_again_and_rejoins_the_running_federation(workdir, data_dir):
    name = "rejoin"
    rounds = 60  # about 0.5 s each here: the others are still training when node 2 is back
    config = write_config(workdir, data_dir, name, rounds=rounds)
    run_dir = workdir / "results" / name
    with protofed_running("up", "-c", config, "--run-id", name,
                          "--set", "deploy.restarts=1") as process:
        wait_for_rounds(run_dir / "node-2.json", 1)
        os.kill(int(json.loads((run_dir / "run.json").read_text())["pids"]["2"]), signal.SIGKILL)
        _, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr[-3000:]
    nodes = [json.loads((run_dir / f"node-{i}.json").read_text()) for i in range(3)]
    assert [n["status"] for n in nodes] == ["finished"] * 3
    restarted = nodes[2]
    assert restarted["restarts"] == 1
    joined = restarted["rejoined_at"][0]
    assert 2 < joined < rounds
    done = [r["round"] for r in restarted["rounds"]]
    assert done[0] == 0 and 1 in done and done[-1] == rounds and joined in done
    for survivor in nodes[:2]:  # node 2's updates count again from the round it rejoined
        assert 2 not in survivor["rounds"][-1]["missing_peers"]
        assert survivor["bytes_sent_by_peer"]["2"] and survivor["bytes_received_by_peer"]["2"]
    assert json.loads((run_dir / "run.json").read_text())["restarts"] == {"2": 1}
