"""Integration on a real Docker engine: one container per node on a private network.

Skipped with a visible reason where no engine answers; under CI (CI=true) that is a failure.
What the round loop decides (topology and codec byte ratios) is tested in one process
(test_exchange_bytes.py); here: what containers, their network and the engine add: the
installed wheel, bytes on the wire, the containers' privileges, refusals. Beside it:
test_docker_lifecycle.py (killed, stopped and orphaned runs), test_docker_files.py
(Compose, swarm stacks, per-node data) and test_docker_graphs.py (graph files, shaped
edges, a hub star); a file each, so the suite's workers run them at once.
"""

import json
import os
import shutil
import subprocess

import pytest

from deploy.backends import docker_backend, image
from tests.docker_support import leftovers, protofed, run_federation, write_config

pytestmark = pytest.mark.docker


# Headers, ZeroMQ framing, TCP/IP and Ethernet: what the wire adds on top of our frames.
WIRE_OVERHEAD = 0.10


def test_the_installed_wheel_runs_from_its_own_copy_and_builds_the_same_image(installed,
                                                                             node_image):
    """Nothing comes from the checkout: the packages, the Dockerfile and the base-image
    script are the wheel's, and the image they describe is the checkout's."""
    probe = ("import deploy, node; from deploy.backends import image; "
             "print(deploy.__file__); print(node.__file__); "
             "print((image.BACKENDS_DIR / 'Dockerfile').is_file(), "
             "(image.BACKENDS_DIR / 'make-base-image.sh').is_file()); "
             "print(image.image_tag(base_image=image.LOCAL_BASE_IMAGE))")
    done = subprocess.run([str(installed.python), "-c", probe], cwd=installed.cwd,
                          env=installed.env, capture_output=True, text=True, check=True)
    deploy_file, node_file, packaged, tag = done.stdout.splitlines()
    venv = str(installed.python.parent.parent)
    assert deploy_file.startswith(venv) and node_file.startswith(venv)
    assert packaged == "True True"
    assert tag == image.image_tag(base_image=image.LOCAL_BASE_IMAGE)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("docker-federations")


@pytest.fixture(scope="module")
def three_fc(client, node_image, workdir, data_dir, installed):
    return run_federation(workdir, data_dir, "dk-three-fc", installed,
                          extra="[report]\ntarget_f1 = 0.01")


def test_containers_finish_and_application_bytes_match(three_fc, client, workdir):
    done, nodes = three_fc
    assert done.returncode == 0, done.stderr
    assert [n["status"] for n in nodes] == ["finished"] * 3
    by_id = {n["node"]: n for n in nodes}
    for sender in nodes:
        for peer, kinds in sender["bytes_sent_by_peer"].items():
            assert by_id[int(peer)]["bytes_received_by_peer"][str(sender["node"])] == kinds
    assert "iface sent" in done.stdout
    assert not leftovers(client, "dk-three-fc")
    run = json.loads((workdir / "results" / "dk-three-fc" / "run.json").read_text())
    assert (run["backend"], run["status"]) == ("docker", "finished")
    assert run["containers"] == {str(i): f"dk-three-fc-node-{i}" for i in range(3)}
    assert run["exit_codes"] == {"0": 0, "1": 0, "2": 0}


def test_containers_report_the_consensus_distance_and_the_target(three_fc, workdir):
    """The figures of a local run, from the records the containers wrote."""
    done, _ = three_fc
    summary = json.loads((workdir / "results" / "dk-three-fc" / "summary.json").read_text())
    assert set(summary["consensus_distance_by_round"]) == {"0", "1", "2"}
    assert all(v >= 0 for v in summary["consensus_distance_by_round"].values())
    assert summary["to_target"]["round"] is not None  # a macro-F1 is above 0.01 from the start
    assert "Consensus distance" in done.stdout


def test_a_node_container_is_unprivileged(client, node_image):
    """Same settings as every node: non-root, no capabilities, read-only root, pids bounded."""
    probe = ("id -u; grep CapEff /proc/self/status; touch /opt/x 2>/dev/null && echo root-rw; "
             "touch /tmp/x && echo tmp-rw; cat /sys/fs/cgroup/pids.max 2>/dev/null "
             "|| cat /sys/fs/cgroup/pids/pids.max")
    output = client.containers.run(
        node_image, entrypoint=["sh", "-c", probe], remove=True,
        tmpfs={docker_backend.SCRATCH: "size=1m"}, **docker_backend.hardening()).decode()
    uid, capabilities, *rest = output.splitlines()
    assert int(uid) != 0
    assert capabilities.split()[-1] == "0000000000000000"
    assert "root-rw" not in rest and "tmp-rw" in rest
    assert str(docker_backend.PIDS_LIMIT) in rest


def test_interface_bytes_cover_application_bytes_within_the_overhead_bound(three_fc):
    _, nodes = three_fc
    for node in nodes:
        wire = node["interface_bytes"]
        assert node["bytes_sent"] <= wire["tx_bytes"] <= node["bytes_sent"] * (1 + WIRE_OVERHEAD)
        assert (node["bytes_received"] <= wire["rx_bytes"]
                <= node["bytes_received"] * (1 + WIRE_OVERHEAD))


def test_a_name_in_use_is_refused_and_nothing_is_left_half_started(client, node_image,
                                                                    workdir, data_dir):
    name = "dk-clash"
    blocker = client.networks.create(f"{name}-net", driver="bridge", internal=True)
    try:
        done = protofed("up", "-c", write_config(workdir, data_dir, name), "--run-id", name)
    finally:
        blocker.remove()
    assert done.returncode == 1
    assert "already in use" in done.stderr
    assert not leftovers(client, name)


def test_nodes_map_the_cache_the_launcher_built_beside_a_read_only_data_folder(
        client, node_image, tmp_path, data_dir):
    """The host's data folder cannot take the cache: the launcher writes it under
    PROTOFED_CACHE_DIR, the containers get it at /cache and map it (nothing decoded)."""
    data = tmp_path / "data"
    shutil.copytree(data_dir / "MNIST" / "raw", data / "MNIST" / "raw")
    home = tmp_path / "cache-home"
    locked = ["chattr", "+i", str(data / "MNIST")] if os.getuid() == 0 else None
    if locked and subprocess.run(locked, check=False, capture_output=True).returncode != 0:
        pytest.skip("cannot make a folder read-only for root here (chattr +i failed)")
    if not locked:
        (data / "MNIST").chmod(0o555)
    try:
        config = write_config(tmp_path, data, "dk-cache", nodes=2, rounds=1)
        done = protofed("up", "-c", config, "--run-id", "dk-cache",
                        env={**os.environ, "PROTOFED_CACHE_DIR": str(home)})
    finally:
        if locked:
            subprocess.run(["chattr", "-i", str(data / "MNIST")], check=True)
        else:
            (data / "MNIST").chmod(0o755)
    assert done.returncode == 0, done.stderr
    assert (home / "mnist" / "cache.json").is_file()
    assert not (data / "MNIST" / "protofed-cache").exists()
    for node in range(2):
        log = (tmp_path / "results" / "dk-cache" / "logs" / f"node-{node}.log").read_text()
        assert "loaded mnist" in log
        assert "decoded into memory" not in log and "rebuilding" not in log
        assert "cache written" not in log  # mapped the launcher's, did not build its own


def test_a_node_count_the_machine_cannot_hold_is_refused(client, workdir, data_dir):
    config = write_config(workdir, data_dir, "dk-huge", nodes=400)
    done = protofed("up", "-c", config, "--run-id", "dk-huge")
    assert done.returncode == 1
    assert "GiB" in done.stderr and "fewer nodes" in done.stderr
    assert not leftovers(client, "dk-huge")


def test_no_engine_gives_one_clear_message_and_starts_nothing(tmp_path, data_dir):
    config = write_config(tmp_path, data_dir, "dk-no-engine")
    env = dict(os.environ, DOCKER_HOST=f"unix://{tmp_path}/no-such.sock")
    done = protofed("up", "-c", config, timeout=120, env=env)
    assert done.returncode == 1
    assert "Docker is not available" in done.stderr and "start dockerd" in done.stderr
    assert not (tmp_path / "results").exists()
