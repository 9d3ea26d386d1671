"""Local launch: a federation that does not fit this machine's memory is refused up front."""


import pytest

from deploy import local
from node.config import from_dict
from node.errors import DeployError
from tests.helpers import REPO, protofed, run_federation


def test_capacity_is_nodes_times_the_measured_footprint():
    config = from_dict({"nodes": 20})
    local.check_capacity(config, 20 * local.LOCAL_NODE_MEMORY * 2)  # fits
    with pytest.raises(DeployError, match=r"20 local nodes need about 8.8 GiB"):
        local.check_capacity(config, 8 * 1024**3)
    # deploy.memory replaces the estimate; unknown availability refuses nothing
    small = from_dict({"nodes": 20, "deploy": {"memory": "100m"}})
    local.check_capacity(small, 3 * 1024**3)
    local.check_capacity(config, 0)


def test_up_refuses_a_federation_larger_than_the_machine_before_starting_it(tmp_path):
    nodes = int(local.available_memory() / local.LOCAL_NODE_MEMORY) + 10
    done = protofed("up", "-c", REPO / "examples" / "quick.toml", "--set", f"nodes={nodes}",
                    "--set", f"deploy.results_dir={tmp_path}", timeout=120)
    assert done.returncode == 1, done.stderr
    assert f"{nodes} local nodes need about" in done.stderr
    assert not any(tmp_path.iterdir())  # nothing was planned or started


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
