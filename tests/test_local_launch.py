"""Local launch: a federation that does not fit this machine's memory is refused up front;
how a run ends is recorded; a Ctrl-C while nodes start leaves none running."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.backends import capacity, local
from deploy.backends.capacity import MiB, NodeFootprint, check_memory, node_memory
from deploy.backends.plan import write_plan
from deploy.run_folder import RUN_FILE
from node.config import from_dict, load
from node.errors import DeployError
from tests.helpers import REPO, deploy_config, local_plan, protofed, run_federation


def total_memory() -> int:
    """MemTotal of this machine in bytes."""
    text = Path("/proc/meminfo").read_text()
    line = next(line for line in text.splitlines() if line.startswith("MemTotal:"))
    return int(line.split()[1]) * 1024


FOOTPRINT = NodeFootprint(runtime=200 * MiB, shared=300 * MiB, peak=340 * MiB,
                          per_neighbour=MiB)



def test_sim_capacity_counts_the_runtime_once_each_node_by_its_pages_and_each_worker_once():
    # the probe: 300 MiB shared, node 0 added 30 MiB and a 10 MiB transient (peak 340);
    # each further node 8 MiB; its messages 1 MiB, 0.5 MiB of it what a robust rule
    # decodes per in-neighbour
    footprint = NodeFootprint(runtime=200 * MiB, shared=300 * MiB, peak=340 * MiB,
                              per_neighbour=MiB, next_node=8 * MiB, transient=10 * MiB,
                              decoded_per_neighbour=MiB // 2)
    config = from_dict({"nodes": 1000, "topology": {"kind": "k_regular", "k": 6}})
    # 340 - 8 + 1000 x (8 + 0.5 + 6 x 0.5) + (2 - 1) x 10 MiB: the sim's receivers share
    # a broadcast's frames, so the wire form counts once per sender
    assert capacity.sim_need(config, footprint, [6] * 1000, workers=2)[0] == \
        (340 - 8 + 1000 * 11.5 + 10) * MiB
    assert capacity.sim_need(config, footprint, [6], workers=2)[0] == (340 + 3.5) * MiB
    # what the probe does not build (threads, transport, records) counted: twice it
    note = capacity.check_sim_memory(config, footprint, [6] * 1000, 30 * 1024**3, workers=2)
    assert note.startswith("memory: about 23.13 GiB for 1,000 sim nodes (measured 300 MiB "
                           "shared, 8 MiB per node, 0.5 MiB of its messages, 0.5 MiB per "
                           "in-neighbour, 10 MiB per node computing at once; 2 x the probe's "
                           "11.56 GiB); this machine: 30.0 GiB available")
    # a part that measured nothing is left out rather than said as "0.00 MiB"
    quiet = dataclasses.replace(footprint, decoded_per_neighbour=0, transient=0,
                                next_node=48_000)
    assert "(measured 300 MiB shared, 0.046 MiB per node, 1 MiB of its messages; 2 x " in \
        capacity.check_sim_memory(config, quiet, [6] * 10, 20 * 1024**3, workers=2)
    with pytest.raises(DeployError, match=r"^1,000 sim nodes would need about 23.1 GiB .* but "
                                          r"this machine has 8.0 GiB available: use fewer "
                                          r"nodes, a smaller model, or a larger host$"):
        capacity.check_sim_memory(config, footprint, [6] * 1000, 8 * 1024**3, workers=2)
    # deploy.memory: that many bytes per node, nothing measured
    fixed = from_dict({"nodes": 1000, "deploy": {"memory": "10m"}})
    assert capacity.sim_need(fixed, None, [6] * 1000, workers=2)[0] == 10_000 * MiB


def test_capacity_counts_the_decoded_models_the_screens_keep_within_the_intakes_budget():
    from node.intake.checks import DECODED_BUDGET
    assert DECODED_BUDGET == 16 * MiB  # the hand figures below assume it
    footprint = dataclasses.replace(FOOTPRINT, decoded_model=MiB // 2)
    screened = from_dict({"nodes": 100})  # the default screens, 20 judged a round
    # 9 in-neighbours: 4.5 MiB kept; 99: 20 judged, 10 MiB kept; a forked node adds
    # 40 MiB over the shared part and 1 MiB of messages per in-neighbour
    assert capacity.kept_models(screened, footprint, 9) == 9 * MiB // 2
    assert capacity.kept_models(screened, footprint, 99) == 10 * MiB
    assert node_memory(screened, footprint, 99, container=False) == (40 + 99 + 10) * MiB
    # 40 judged: 20 MiB together, beyond the budget: none kept, each read decodes again
    wide = from_dict({"nodes": 100, "aggregation": {"judged_per_round": 40}})
    assert capacity.kept_models(wide, footprint, 99) == 0
    # no screen: every in-neighbour is taken, 12 of them fit (6 MiB)
    unscreened = from_dict({"nodes": 100, "aggregation": {
        "validation": 0, "distance": 0, "influence": 0, "held_influence": 0,
        "prototype_validation": False}})
    assert capacity.kept_models(unscreened, footprint, 12) == 6 * MiB
    assert capacity.kept_models(unscreened, footprint, 40) == 0


def test_capacity_counts_the_shared_part_once_and_each_node_by_its_in_degree():
    config = from_dict({"nodes": 20})
    # a forked node: the 40 MiB it added over the shared 300, plus 1 MiB per neighbour
    assert node_memory(config, FOOTPRINT, 4, container=False) == 40 * MiB + 4 * MiB
    assert capacity.need(config, FOOTPRINT, [4] * 20, container=False)[0] == \
        300 * MiB + 20 * 44 * MiB
    check_memory(config, FOOTPRINT, [4] * 20, 2 * 1024**3, container=False, where="here")
    with pytest.raises(DeployError, match=r"20 local nodes would need about 1.2 GiB \(measured 300 "
                                          r"MiB shared by all, 44 MiB per node\) but here has "
                                          r"1.0 GiB"):
        check_memory(config, FOOTPRINT, [4] * 20, 1024**3, container=False, where="here")
    # a container shares nothing: its whole peak plus its neighbours' messages
    assert node_memory(config, FOOTPRINT, 4, container=True) == 344 * MiB
    with pytest.raises(DeployError, match=r"20 nodes would need about 6.7 GiB \(measured 344 MiB "
                                          r"per node\) but the Docker host"):
        check_memory(config, FOOTPRINT, [4] * 20, 4 * 1024**3, container=True,
                     where="the Docker host")
    # its limit: 1.5 x the estimate, in whole MiB
    assert capacity.container_limit(config, FOOTPRINT, 4) == 516 * MiB
    # deploy.memory replaces every estimate (no measurement needed); unknown availability
    # refuses nothing
    small = from_dict({"nodes": 20, "deploy": {"memory": "100m"}})
    assert node_memory(small, None, 4, container=False) == 100 << 20
    assert capacity.container_limit(small, None, 9) == 100 << 20
    check_memory(small, None, [4] * 20, 3 * 1024**3, container=False, where="here")
    check_memory(config, FOOTPRINT, [4] * 20, 0, container=False, where="here")


@pytest.fixture(scope="module")
def quick_footprint(data_dir):
    """One node of examples/quick.toml measured by a fresh process, as for a container."""
    return capacity.probe(load(REPO / "examples" / "quick.toml", (f"data.dir={data_dir}",)))


def test_the_probe_measures_one_node_of_the_config(quick_footprint):
    """A fresh process's footprint: the runtime, then the data on top, then the node's own
    peak; a neighbour's message is the int16 model and prototypes, encoded and decoded."""
    footprint = quick_footprint
    assert 0 < footprint.runtime < footprint.shared < footprint.peak
    # ProFe's student in int16 (2 bytes a weight) and fp32 once decoded: 6 bytes a weight
    assert 400_000 < footprint.per_neighbour < 1_000_000


def test_up_refuses_a_federation_larger_than_the_machine_before_starting_it(
        tmp_path, data_dir, quick_footprint):
    quick, footprint = REPO / "examples" / "quick.toml", quick_footprint
    # a fully connected federation whose messages alone (each node holding a round's from
    # every other) need more than the machine's whole memory: refused whatever else the
    # probe measures and whatever else runs just now
    nodes = 5
    while nodes * (nodes - 1) * footprint.per_neighbour < 1.2 * total_memory():
        nodes += 5
    done = protofed("up", "-c", quick, "--set", f"nodes={nodes}", "--set",
                    f"data.dir={data_dir}", "--set", f"deploy.results_dir={tmp_path}",
                    timeout=120)
    assert done.returncode == 1, done.stderr
    assert f"{nodes} local nodes would need about" in done.stderr
    assert "(measured " in done.stderr and "MiB shared by all" in done.stderr
    assert not any(tmp_path.iterdir())  # nothing was planned or started



def test_the_sim_backend_refuses_a_federation_larger_than_the_machine_before_starting_it(
        tmp_path, data_dir):
    # 64 GiB a node (deploy.memory) for 5 nodes: more than this machine has
    done = protofed("up", "-c", REPO / "examples" / "quick.toml", "--backend", "sim",
                    "--set", "deploy.memory=64g", "--set", f"data.dir={data_dir}",
                    "--set", f"deploy.results_dir={tmp_path}", timeout=120)
    assert done.returncode == 1, done.stderr
    assert "5 sim nodes would need about 320.0 GiB (deploy.memory 65536 MiB per node) but " \
           "this machine has" in done.stderr
    assert "use fewer nodes, a smaller model, or a larger host" in done.stderr
    assert not any(tmp_path.iterdir())


def test_up_refuses_a_run_id_whose_results_folder_exists_as_a_config_error(tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "node-0.json").write_text("{}")
    done = protofed("up", "-c", REPO / "examples" / "quick.toml", "--run-id", "taken",
                    "--set", f"deploy.results_dir={tmp_path}", timeout=120)
    assert done.returncode == 2, done.stderr
    assert f"results folder {tmp_path / 'taken'} already exists: pick another run id (--run-id" \
        in done.stderr
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["node-0.json"]  # untouched


@pytest.mark.parametrize("codes, stopping, status", [
    ({0: 0, 1: 0}, False, "finished"),
    ({0: 1, 1: 1}, False, "failed"),  # every node failed: not "finished"
    ({0: 0, 1: -9}, False, "failed"),
    ({0: 143, 1: 143}, False, "stopped"),  # protofed down sent SIGTERM
    ({0: 0, 1: 1}, True, "stopped"),  # Ctrl-C or timeouts.run: the launcher stopped them
    ({0: 0}, False, "failed"),  # a node never reported an exit
])
def test_the_run_file_says_how_the_run_ended(codes, stopping, status):
    assert local.run_status(codes, 2, stopping) == status


def test_a_federation_of_one_runs_and_says_so(tmp_path, data_dir):
    done, summary, nodes = run_federation(tmp_path, data_dir, "solo", nodes=1, rounds=1)
    assert done.returncode == 0, done.stderr
    assert "nodes = 1: a single node trains on its own" in done.stderr
    assert nodes[0]["bytes_sent"] == 0 and summary["nodes"][0]["status"] == "finished"


UNBLOCKED_SLEEP = ("import signal, time; "
                   "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM}); "
                   "time.sleep(60)")


def test_ctrl_c_while_the_nodes_start_stops_those_already_started(tmp_path, monkeypatch):
    """Nodes run in their own sessions: one started before the Ctrl-C would outlive the
    launcher unless start() stops it."""
    plan = local_plan(tmp_path, deploy_config(tmp_path, deploy={"security": "none"}))
    write_plan(plan)
    started = []

    def fork_node(plan, node_id, listeners, gate=None):
        if node_id == 2:
            raise KeyboardInterrupt
        # like a forked node: its own session, the stop signals it was forked under unblocked
        started.append(subprocess.Popen([sys.executable, "-c", UNBLOCKED_SLEEP],
                                        start_new_session=True))
        return started[-1]

    monkeypatch.setattr(local, "fork_node", fork_node)
    try:
        with pytest.raises(KeyboardInterrupt):
            local.start(plan, [])
        assert [p.poll() for p in started] == [-signal.SIGTERM] * 2
        run = json.loads((plan.results_dir / RUN_FILE).read_text())
        assert run["status"] == "stopped" and sorted(run["pids"]) == ["0", "1"]
    finally:
        for process in started:
            process.kill()
            process.wait()


def test_down_of_an_unknown_run_says_why_docker_was_not_asked(tmp_path):
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    done = protofed("down", "nothing-here", "--results-dir", tmp_path, timeout=60, env=env)
    assert done.returncode == 1
    # one short line: Docker was not asked, without the engine's connection error
    assert done.stderr.strip().splitlines() == [(
        "protofed: no running federation found named nothing-here (not asked: docker, which "
        "has no engine here)")]


def test_a_model_too_large_for_memory_is_named_with_the_settings_that_shrink_it(tmp_path):
    from deploy.backends.capacity import probe_failure
    assert "set deploy.memory" in str(probe_failure("ValueError: x"))
    done = protofed("up", "-c", REPO / "examples" / "quick.toml", "--set",
                    "model.embedding_dim=100000000", "--set",
                    f"deploy.results_dir={tmp_path}")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("protofed: one node does not fit in this machine's memory (")
    assert last.endswith("use smaller model widths (model.teacher_channels, "
                         "model.student_channels, model.embedding_dim) or a smaller data.subset")


def test_a_node_forked_from_the_warm_launcher_imports_nothing_of_its_own(tmp_path, data_dir):
    """What every node imports is imported once, by the launcher's warm-up, before the
    nodes are forked: building and exercising node 0 after it imports no module of
    protofed's or of torch's (the algorithm classes, imported on first use, were once
    imported again by every node)."""
    config = tmp_path / "one.toml"
    config.write_text(f'nodes = 2\nrounds = 1\nalgorithm = "fedproc"\n[data]\ndir = "{data_dir}"'
                      '\ndownload = false\nsubset = 600\n[model]\nteacher_channels = [4, 8]\n')
    script = ("import json, sys\n"
              "from deploy.backends import capacity, local\n"
              "from node.config import load\n"
              f"config = load({str(config)!r}, ())\n"
              "local.warm_up(config)\n"
              "before = set(sys.modules)\n"
              "capacity.measure_footprint(config, forked=True)\n"
              "print(json.dumps(sorted(set(sys.modules) - before)))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = json.loads(done.stdout.strip().splitlines()[-1])
    ours = [name for name in imported
            if name.split(".")[0] in ("node", "topology", "quant", "deploy", "torch")]
    assert ours == [], ours
