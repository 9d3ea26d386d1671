"""Integration: real node processes over ZeroMQ on 127.0.0.1, real MNIST subsets.

What the round loop decides (every algorithm, topologies, codecs, seeds) is tested in one
process (test_contract.py, test_exchange_bytes.py); here: one real run of ProFe, and what
only processes and sockets show (signals, down, a killed node, restarts, timeouts.run).
"""

import contextlib
import csv
import json
import os
import signal
import socket
import subprocess

import pytest

from tests.helpers import (
    alive,
    close_output_after,
    protofed,
    protofed_up,
    run_federation,
    wait_for_training_nodes,
    wait_until,
    write_config,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("federations")


@pytest.fixture(scope="module")
def three_fc(workdir, data_dir):
    return run_federation(workdir, data_dir, "three-fc", pictures=True)


def test_every_node_finishes_and_the_table_is_printed(three_fc):
    done, summary, nodes = three_fc
    assert done.returncode == 0, done.stderr
    assert [n["status"] for n in nodes] == ["finished"] * 3
    assert all(n["rounds_done"] == 2 and len(n["rounds"]) == 3 for n in nodes)
    assert "bytes sent" in done.stdout and "total" in done.stdout
    assert summary["failed_nodes"] == []
    assert all(0.0 <= n["rounds"][-1]["global_test"]["f1"] <= 1.0 for n in nodes)
    assert all(n["dropped_messages"] == [] for n in nodes)


def test_the_run_leaves_a_csv_and_pictures_that_report_writes_again(three_fc, workdir):
    done, _, nodes = three_fc
    run_dir = workdir / "results" / "three-fc"
    assert f"per-round CSV: {run_dir / 'rounds.csv'}" in done.stderr
    assert f"pictures: {run_dir / 'topology.png'}" in done.stderr
    with (run_dir / "rounds.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    for node in nodes:
        mine = [r for r in rows if int(r["node"]) == node["node"]]
        assert sum(int(r["bytes_sent"]) for r in mine) == node["bytes_sent"]
        assert sum(int(r["bytes_received"]) for r in mine) == node["bytes_received"]
        assert {int(r["round"]) for r in mine} == {0, 1, 2}
    # not a terminal: plain lines, one per federation round, not one per change
    progress = [line for line in done.stderr.splitlines() if line.startswith(("every", "round"))]
    assert progress[0].startswith("every node started (round 0): 3 nodes")
    assert [line.split(":")[0] for line in progress[1:]] == ["round 1/2", "round 2/2"]
    pngs = [run_dir / f"{name}.png" for name in ("topology", "bytes_per_round", "f1_per_round")]
    for path in pngs:
        assert path.read_bytes()[:4] == b"\x89PNG"
        path.unlink()
    (run_dir / "rounds.csv").unlink()
    again = protofed("report", "three-fc", "--results-dir", workdir / "results")
    assert again.returncode == 0, again.stderr
    assert "total" in again.stdout and all(p.is_file() for p in pngs)
    assert (run_dir / "rounds.csv").read_text().count("\n") == len(rows) + 1


def test_bytes_sent_to_a_peer_equal_bytes_that_peer_received(three_fc):
    _, _, nodes = three_fc
    by_id = {n["node"]: n for n in nodes}
    for sender in by_id.values():
        assert set(sender["bytes_sent_by_peer"]) == {str(p) for p in sender["out_neighbours"]}
        for peer, kinds in sender["bytes_sent_by_peer"].items():
            assert kinds["model"] and kinds["prototypes"]
            received = by_id[int(peer)]["bytes_received_by_peer"][str(sender["node"])]
            assert kinds == received, (sender["node"], peer)
    assert sum(n["bytes_sent"] for n in nodes) == sum(n["bytes_received"] for n in nodes)


def test_a_node_killed_mid_run_does_not_stop_the_others(workdir, data_dir):
    name = "killed"
    # never waited for (the lost connection says node 2 is gone): were it waited for, the
    # run would outlast the wait below by far
    round_timeout = 3600
    # node 2 is killed once every node has done a round: two more rounds to go at least
    config = write_config(workdir, data_dir, name, rounds=4, round_timeout=round_timeout)
    with protofed_up(config, name) as (process, run_dir):
        pids = wait_for_training_nodes(run_dir, 3)
        os.kill(pids[2], signal.SIGKILL)
        _, stderr = process.communicate(timeout=240)
    assert process.returncode == 1
    assert "node 2 did not finish" in stderr
    survivors = [json.loads((run_dir / f"node-{i}.json").read_text()) for i in (0, 1)]
    for node in survivors:
        assert node["status"] == "finished"
        assert node["rounds_done"] == 4
        assert 2 in node["rounds"][-1]["missing_peers"]
        assert node["unreachable_peers"] == [2]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["failed_nodes"] == [2]
    # its own record no longer says it runs: the launcher wrote what became of it
    killed = json.loads((run_dir / "node-2.json").read_text())
    assert killed["status"] == "dead" and "killed by signal 9" in killed["error"]


@contextlib.contextmanager
def long_federation(workdir, data_dir, name):
    """`protofed up` on a federation that would run for hours, once the launcher has
    recorded every node and every node trains: (process, node pids, run folder)."""
    config = write_config(workdir, data_dir, name, rounds=1000)  # never ends on its own
    with protofed_up(config, name) as (process, run_dir):
        yield process, wait_for_training_nodes(run_dir, 3), run_dir


def test_status_then_down_stops_a_running_federation(workdir, data_dir):
    with long_federation(workdir, data_dir, "to-stop") as (process, pids, _):
        results = workdir / "results"
        status = protofed("status", "--results-dir", results)
        assert "to-stop" in status.stdout
        down = protofed("down", "to-stop", "--results-dir", results)
        assert down.returncode == 0, down.stderr
        assert "stopped to-stop" in down.stdout
        _, stderr = process.communicate(timeout=60)
        assert process.returncode != 0
        assert "3 of 3 nodes were stopped from outside" in stderr, stderr
        assert "did not finish" not in stderr, stderr  # no log tail for a node asked to stop
        assert not any(alive(pid) for pid in pids)
        # (the suite runs in two workers: the other's Docker runs may be listed)
        assert "to-stop" not in protofed("status", "--results-dir", results).stdout


def test_a_closed_output_pipe_leaves_the_launcher_watching_to_the_end(workdir, data_dir):
    """`protofed up ... 2>&1 | head -3`: the launcher goes quiet, not away; its run ends
    with its summary, CSV and pictures, and no node is left."""
    import protofed as api
    name = "closed-pipe"
    config = write_config(workdir, data_dir, name, rounds=2)
    with protofed_up(config, name) as (process, run_dir):
        close_output_after(process, lines=3, timeout=300)
        pids = [int(pid) for pid in json.loads((run_dir / "run.json").read_text())["pids"]
                .values()]
    assert process.returncode == 0
    assert not any(alive(pid) for pid in pids)
    assert (run_dir / "rounds.csv").is_file()
    run = api.load(run_dir)
    assert run.ok and [n["status"] for n in run.summary["nodes"]] == ["finished"] * 3


def test_a_killed_launchers_nodes_run_on_and_down_stops_them_and_writes_the_summary(
        workdir, data_dir):
    import protofed as api
    results = workdir / "results"
    with long_federation(workdir, data_dir, "orphaned") as (process, pids, run_dir):
        process.kill()  # SIGKILL: the launcher cannot say or do anything more
        process.wait(timeout=60)
        assert all(alive(pid) for pid in pids)  # the federation outlives its launcher
        status = protofed("status", "--results-dir", results).stdout
        assert "orphaned  local  nodes alive: 0, 1, 2  (its launcher is gone" in status
        with pytest.raises(api.ConfigError, match="has not ended: nodes 0, 1, 2 are still "
                           "running and its launcher is gone; `protofed down orphaned`"):
            api.load(run_dir)
        down = protofed("down", "orphaned", "--results-dir", results)
        assert down.returncode == 0, down.stderr
        assert f"its launcher was gone: wrote {run_dir / 'summary.json'}" in down.stdout
        assert not any(alive(pid) for pid in pids)
    run = api.load(run_dir)
    assert [n["status"] for n in run.summary["nodes"]] == ["stopped"] * 3
    assert run.summary["written_by"] == "protofed down (its launcher was gone)"
    assert json.loads((run_dir / "run.json").read_text())["status"] == "stopped"
    assert (run_dir / "rounds.csv").is_file()


def test_a_killed_launchers_run_that_ends_by_itself_is_summarised_by_report(workdir,
                                                                              data_dir):
    import protofed as api
    name = "ends-alone"
    config = write_config(workdir, data_dir, name, rounds=3)
    with protofed_up(config, name) as (process, run_dir):
        pids = wait_for_training_nodes(run_dir, 3)
        process.kill()
        wait_until(lambda: not any(alive(pid) for pid in pids), "the nodes finishing")
    assert not (run_dir / "summary.json").exists()
    report = protofed("report", run_dir)
    assert report.returncode == 0, report.stderr
    assert "its launcher was gone; wrote" in report.stderr
    assert "bytes sent" in report.stdout
    run = api.load(run_dir)
    assert run.ok and [n["status"] for n in run.summary["nodes"]] == ["finished"] * 3
    assert json.loads((run_dir / "run.json").read_text())["status"] == "finished"


def test_ctrl_c_stops_every_child(workdir, data_dir):
    with long_federation(workdir, data_dir, "interrupted") as (process, pids, run_dir):
        process.send_signal(signal.SIGINT)
        try:
            _, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"protofed up ignored SIGINT for 60 s: {(exc.stderr or b'')[-1500:]!r}")
        assert process.returncode == 130, stderr[-1500:]
        assert "stopping every node" in stderr
        assert "per-round CSV:" in stderr and "results:" in stderr, stderr[-1500:]
        assert not any(alive(pid) for pid in pids)
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["failed_nodes"] == [0, 1, 2]
        assert json.loads((run_dir / "run.json").read_text())["status"] == "stopped"


def test_up_stops_a_run_that_outlives_timeouts_run(workdir, data_dir):
    name = "deadline"
    config = write_config(workdir, data_dir, name, rounds=1000)  # would run for hours
    with protofed_up(config, name, "--set", "timeouts.run=5") as (process, run_dir):
        _, stderr = process.communicate(timeout=120)  # raises if the run outlives it
    assert process.returncode == 1
    assert "timeouts.run (5 s) passed" in stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [n["status"] for n in summary["nodes"]] != ["finished"] * 3
    run = json.loads((run_dir / "run.json").read_text())
    assert not any(alive(int(pid)) for pid in run["pids"].values())


def test_a_killed_node_is_started_again_and_rejoins_the_running_federation(workdir, data_dir):
    name = "rejoin"
    # while node 2 is gone the others wait for it up to 5 s a round (timeouts.absent), so
    # they are still in the run when it is back, however loaded the machine, at the CPU of
    # 12 rounds (60 rounds of training once gave it that room)
    rounds = 12
    config = write_config(workdir, data_dir, name, rounds=rounds, absent=5)
    with protofed_up(config, name, "--set", "deploy.restarts=1") as (process, run_dir):
        os.kill(wait_for_training_nodes(run_dir, 3)[2], signal.SIGKILL)
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


def test_a_scripted_leave_over_zeromq_exits_zero_and_reports_the_new_figures(workdir,
                                                                             data_dir):
    """Real processes on a graph drawn again every round: node 2 leaves for good at round 2;
    the run exits 0, node 2 is `left`, the others waited for nobody, and the summary has
    the consensus distance per round and when the mean F1 reached the target. The same
    run writes TensorBoard runs and serves the monitor page (stopped with the run)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done, summary, nodes = run_federation(
        workdir, data_dir, "churn-zmq", nodes=4, rounds=3, algorithm="fedavg",
        topology="k_regular", codec="fp32",
        topology_extra="k = 2\nresample_every = 1",
        extra="[scenario]\nevents = [{round = 2, leave = [2]}]\n[report]\ntarget_f1 = 0.01",
        options=("--tensorboard", workdir / "boards", "--monitor", "--port", str(port)))
    assert done.returncode == 0, done.stderr
    assert [n["status"] for n in nodes] == ["finished", "finished", "left", "finished"]
    assert [r["round"] for r in nodes[2]["rounds"]] == [0, 1]
    assert all(not n.get("no_goodbye_from") for n in nodes)
    assert summary["failed_nodes"] == []
    assert set(summary["consensus_distance_by_round"]) == {"0", "1", "2", "3"}
    assert summary["to_target"]["round"] is not None and summary["to_target"]["bytes"] >= 0
    assert "Consensus distance" in done.stdout and "first reached 0.01" in done.stdout
    assert f"protofed: monitor: http://127.0.0.1:{port}/" in done.stderr
    with pytest.raises(OSError):  # the page stopped with the run
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    # the TensorBoard runs were written as the rounds came in, node 2's up to its leaving
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for node in nodes:
        events = EventAccumulator(str(workdir / "boards" / "churn-zmq" / f"node-{node['node']}"))
        events.Reload()
        assert [(e.step, e.value) for e in events.Scalars("f1/global")] == [
            (r["round"], pytest.approx(r["global_test"]["f1"], rel=1e-6)) for r in node["rounds"]]


def test_a_finished_run_converts_to_tensorboard(three_fc, workdir, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    done = protofed("tensorboard", workdir / "results" / "three-fc", tmp_path)
    assert done.returncode == 0, done.stderr
    for node in three_fc[2]:
        events = EventAccumulator(str(tmp_path / "three-fc" / f"node-{node['node']}"))
        events.Reload()
        assert [e.value for e in events.Scalars("bytes/sent")] == [
            r["bytes_sent"] for r in node["rounds"]]
    missing = protofed("tensorboard", tmp_path / "nothing", tmp_path)
    assert missing.returncode == 2 and "no such run folder" in missing.stderr


def test_a_run_whose_graph_file_is_deleted_once_planned_finishes(workdir, data_dir, tmp_path):
    """The launcher reads the graph file once, when it resolves the federation: deleted as
    soon as federation.json appears, every node still finishes on the file's graph."""
    graph = tmp_path / "g4.edges"
    graph.write_text("0 1\n1 2\n2 3\n3 0\n")  # a ring of four
    name = "graph-file-gone"
    config = write_config(workdir, data_dir, name, nodes=4, topology="file",
                          topology_extra=f'path = "{graph}"')
    with protofed_up(config, name) as (process, run_dir):
        wait_until(lambda: (run_dir / "federation.json").is_file(), "federation.json written")
        graph.unlink()
        _, stderr = process.communicate(timeout=240)
    assert process.returncode == 0, stderr[-2000:]
    nodes = [json.loads((run_dir / f"node-{i}.json").read_text()) for i in range(4)]
    assert [n["status"] for n in nodes] == ["finished"] * 4
    assert [n["in_neighbours"] for n in nodes] == [[1, 3], [0, 2], [1, 3], [0, 2]]
