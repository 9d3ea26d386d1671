"""What protofed writes for other tools, run by them on a real engine: a Compose file under
docker-compose, a stack file as a swarm stack; and nodes that own their data, each
container mounting its own folder (skipped without an engine, failed under CI)."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from deploy.backends import docker_backend
from node.config import load
from tests import helpers
from tests.docker_support import leftovers, protofed, write_config
from tests.helpers import (
    read_json,
    wait_until,
)

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("docker-federations")


def test_compose_file_runs_under_docker_compose_and_protofed_down_cleans_up(
        client, node_image, workdir, data_dir, installed):
    """Everything with the protofed of the installed wheel: the file, then status, logs
    (Compose names containers its own way), down and report."""
    name = "dk-compose"
    # a line 0-1-2 from a graph file the containers never see
    graph = helpers.write_graph_file(workdir / "own-graphs" / "line.edges", ((0, 1), (1, 2)))
    config = write_config(workdir, data_dir, name, topology="file",
                          topology_extra=f'path = "{graph}"')
    done = installed("compose", "-c", config, "--run-id", name, "--image", node_image)
    assert done.returncode == 0, done.stderr
    compose = Path(done.stdout.strip())
    tool = shutil.which("docker-compose")  # the Compose CLI this project tests
    if tool is None:
        if os.environ.get("CI") == "true":
            pytest.fail("docker-compose is not installed (CI=true: the compose test must run)")
        pytest.skip("docker-compose is not installed: only the file was written")
    assert subprocess.run([tool, "-f", compose, "-p", name, "config", "-q"],
                          check=False).returncode == 0
    try:
        up = subprocess.run([tool, "-f", compose, "-p", name, "up", "--no-color"],
                            capture_output=True, text=True, timeout=600, check=False)
        assert up.returncode == 0, up.stderr[-2000:]
        assert "WARNING" not in up.stderr and "endpoint_mode" not in up.stderr, up.stderr
        status = installed("status").stdout
        assert f"{name}  docker  ended, every container exited" in status, status
        for node in range(3):
            logs = installed("logs", name, node, "--follow")  # ends: the container has
            assert logs.returncode == 0 and "round 2/2 done" in logs.stdout, logs.stderr
        down = installed("down", name)
        assert down.returncode == 0, down.stderr
        assert not leftovers(client, name)  # containers and the network
    finally:
        subprocess.run([tool, "-f", compose, "-p", name, "down", "-v"], capture_output=True,
                       check=False)
    run_dir = compose.parent
    nodes = [json.loads((run_dir / f"node-{i}.json").read_text()) for i in range(3)]
    assert [n["status"] for n in nodes] == ["finished"] * 3
    assert [n["in_neighbours"] for n in nodes] == [[1], [0, 2], [1]]  # the file's line
    for i in range(3):
        log = (run_dir / "logs" / f"node-{i}.log").read_text()
        assert "round 2/2 done" in log and "WARNING" not in log, log
    report = installed("report", run_dir)
    assert report.returncode == 0 and "total" in report.stdout


def test_the_stack_file_runs_as_a_swarm_stack_on_an_overlay_network(client, node_image,
                                                                     workdir, data_dir):
    if client.info().get("Swarm", {}).get("LocalNodeState") != "active":
        if os.environ.get("CI") == "true":
            pytest.fail("this engine is not in a swarm (CI=true: .ci/run initialises one)")
        pytest.skip("this engine is not in a swarm: run `docker swarm init` to test stacks")
    name = "dk-stack"
    done = protofed("compose", "-c", write_config(workdir, data_dir, name), "--run-id", name,
                    "--image", node_image)
    assert done.returncode == 0, done.stderr
    stack = Path(done.stdout.strip()).parent / "stack.yaml"
    try:
        deploy = subprocess.run(["docker", "stack", "deploy", "-c", str(stack), name],
                                capture_output=True, text=True, timeout=120, check=False)
        assert deploy.returncode == 0, deploy.stderr
        overlay = client.networks.get(f"{name}_federation")
        assert overlay.attrs["Driver"] == "overlay"
        results = [stack.parent / f"node-{i}.json" for i in range(3)]
        wait_until(lambda: all((read_json(p) or {}).get("status") == "finished"
                               for p in results), "the stack's nodes finishing", 400, interval=1)
    finally:
        subprocess.run(["docker", "stack", "rm", name], capture_output=True, check=False)
    nodes = [json.loads(p.read_text()) for p in results]
    by_id = {n["node"]: n for n in nodes}
    for sender in nodes:
        for peer, kinds in sender["bytes_sent_by_peer"].items():
            assert by_id[int(peer)]["bytes_received_by_peer"][str(sender["node"])] == kinds


def test_per_node_data_mounts_each_container_its_own_folder_and_trains_as_pooled(
        client, node_image, workdir, data_dir, tmp_path):
    """data.layout = "per-node" in containers: each mounts its node's folder alone (and the
    global test set), PROTOFED_DATA_DIR empty, and the run is the pooled one, byte for byte
    and F1 for F1."""
    import protofed as api
    config = write_config(workdir, data_dir, "dk-own", rounds=2)
    parts = tmp_path / "P"
    assert protofed("partition", "-c", config, "--out", parts).returncode == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    # the pooled run on the sim backend: the same nodes' code, bytes and F1 (tests/test_sim.py)
    pooled = protofed("up", "-c", config, "--run-id", "dk-pooled", "--backend", "sim")
    own = protofed("up", "-c", config, "--run-id", "dk-own", "--set",
                   'data.layout="per-node"', "--set", f'data.dir="{parts}"',
                   env={**os.environ, "PROTOFED_DATA_DIR": str(empty)})
    assert pooled.returncode == 0 and own.returncode == 0, own.stderr[-2000:]

    def figures(run_id):
        run = api.load(workdir / "results" / run_id)
        return [(n["bytes_sent"], n["bytes_received"], round(n["global_f1"], 4),
                 round(n["local_f1"], 4)) for n in run.summary["nodes"]]
    assert figures("dk-own") == figures("dk-pooled")
    plan = docker_backend.plan_docker(load(config, ('data.layout="per-node"',
                                                            f'data.dir="{parts}"')),
                                      config, (), "dk-mounts")
    mounts = {target: source for source, target, _ in
              docker_backend.container_mounts(plan, 1, parts)}
    assert mounts["/data/node-1"] == str(parts / "node-1")
    assert mounts["/data/global-test"] == str(parts / "global-test")
    assert "/data" not in mounts and "/data/node-0" not in mounts
