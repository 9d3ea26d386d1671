"""Set-ups several test files share: tiny synthetic nodes, small MNIST configs, plans,
`protofed` processes and waiting for their files."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from deploy.backends.plan import plan_local, write_plan
from node.algorithms import create
from node.algorithms.base import NodeData, Payload
from node.algorithms.common import prototype_payload
from node.config import from_dict
from node.inprocess import memory_federation, run_in_memory

REPO = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")

# --- tiny synthetic nodes (no dataset) ----------------------------------------------------


def tiny_config(norm_bound=3.0, validation=0.5, held_influence=3.0, **train):
    """Two nodes, a tiny CNN (channels 2, 4; embedding 4) for 1x8x8 images; norm_bound=0,
    validation=0, held_influence=0: the aggregation arithmetic without its defences."""
    return from_dict({"nodes": 2, "seed": 1,
                      "model": {"teacher": "cnn", "teacher_channels": [2, 4], "embedding_dim": 4},
                      "train": {"batch_size": 8, **train},
                      "aggregation": {"norm_bound": norm_bound, "validation": validation,
                                      "held_influence": held_influence}})


def tiny_data(samples=20, classes=3, *, labelled=None, seed=0, test=6):
    """Seeded 1x8x8 noise images labelled 0, 1, ..., labelled - 1 in turn (labelled: all
    `classes` by default); the test set is its first `test` samples, the global set its
    first 6."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, 1, 8, 8, generator=g)
    y = torch.arange(samples) % (labelled or classes)
    return NodeData(train_x=x, train_y=y, test_x=x[:test], test_y=y[:test], global_x=x[:6],
                    global_y=y[:6], num_classes=classes)


def synthetic_node(algorithm, data, **values):
    """Node 0 of `algorithm` with the default CNN and an 8-dimensional embedding on `data`;
    `values` are further top-level config keys (seed, rounds...)."""
    config = from_dict({"model": {"embedding_dim": 8},
                        "train": {"device": "cpu", "batch_size": 8}, **values})
    return create(algorithm, config, data, CPU, node_id=0)


def snapshot(tensors):
    """A copy: on the CPU a state payload shares memory with the live model."""
    return {name: t.clone() for name, t in tensors.items()}


def as_received(payloads):
    """What a peer receives: independent copies (the wire does not share storage)."""
    return {kind: Payload(snapshot(p.tensors), dict(p.meta)) for kind, p in payloads.items()}


def hand_prototypes():
    """(own, peer) prototype payloads of dimension 4 over 3 classes: own has classes 0, 1
    (counts 2, 1) and an empty class 2; the peer has classes 0 and 2 (counts 1, 3)."""
    own = prototype_payload(torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 2.0, 0.0, 2.0],
                                          [0.0, 0.0, 0.0, 0.0]]), torch.tensor([2, 1, 0]))
    peer = Payload({"prototypes": torch.tensor([[4.0, 4.0, 4.0, 4.0], [1.0, 0.0, 1.0, 0.0]]),
                    "classes": torch.tensor([0, 2]), "counts": torch.tensor([1, 3])})
    return own, peer


# --- in-process federations on real MNIST -------------------------------------------------


def mnist_config(data_dir, subset, **values):
    """A federation on a real MNIST subset of `subset` samples, one torch thread per node;
    a table given in `values` updates the default one key by key."""
    raw = {"data": {"dataset": "mnist", "dir": str(data_dir), "download": False,
                    "subset": subset},
           "train": {"threads": 1},
           "timeouts": {"startup": 30, "round": 120, "shutdown": 5}}
    for key, value in values.items():
        raw[key] = {**raw[key], **value} if key in raw else value
    return from_dict(raw)


class PerNode(dict):
    """The algorithm registry with some node ids built as another class: {node id: class}."""

    def __init__(self, real, swaps):
        super().__init__(real)
        self.swaps = swaps

    def __getitem__(self, name):
        real = dict.__getitem__(self, name)
        swaps = self.swaps

        def build(config, data, device, node_id):
            return swaps.get(node_id, real)(config, data, device, node_id)
        return build


def run_in_process(config, tmp_path):
    """Every node of `config` in its own thread on one MemoryHub; their result dicts."""
    return run_in_memory(memory_federation(config), tmp_path)


# --- plans, without starting anything -----------------------------------------------------


def deploy_config(tmp_path, nodes=3, deploy=None, **values):
    """A config of `nodes` nodes whose runs are recorded under tmp_path/results."""
    return from_dict({"nodes": nodes, **values,
                      "deploy": {"results_dir": str(tmp_path / "results"), **(deploy or {})}})


def local_plan(tmp_path, config, first_port=6001):
    """`config` planned on this machine as run-1, node i on first_port + i."""
    return plan_local(config, tmp_path / "c.toml", (), "run-1",
                      [first_port + i for i in range(config.nodes)])


def written_plan(tmp_path, **deploy):
    """Three nodes planned locally with these [deploy] settings, the run folder written:
    (config, plan)."""
    config = deploy_config(tmp_path, deploy=deploy)
    plan = local_plan(tmp_path, config)
    write_plan(plan)
    return config, plan


def written_docker_plan(tmp_path, **deploy):
    """Three nodes planned for Docker (one container name each) with these [deploy] settings,
    the run folder written, each container's memory limit set from a made-up measurement of
    400 MiB a node (as the Docker launcher sets it from its probe): (config, plan)."""
    from deploy.backends.capacity import MiB, NodeFootprint, with_limits
    from deploy.backends.docker_backend import plan_docker

    config = deploy_config(tmp_path, deploy=deploy)
    plan = plan_docker(config, tmp_path / "c.toml", (), "run-1")
    write_plan(plan)
    measured = NodeFootprint(runtime=250 * MiB, shared=350 * MiB, peak=400 * MiB,
                             per_neighbour=MiB)
    return config, with_limits(config, measured, plan)


def free_address():
    """A ZeroMQ TCP address on 127.0.0.1 that nothing listens on just now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{sock.getsockname()[1]}"


def drain(transport, seconds):
    """Every message `transport` receives in the next `seconds`: for checking that nothing
    (more) comes. To wait for messages that should come, use receive_until."""
    got, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        received = transport.receive(0.1)
        if received is not None:
            got.append(received)
    return got


def receive_until(transport, condition, what, timeout=60.0):
    """The messages `transport` receives until `condition` holds for the list of them so
    far (checked before each receive); fail the test saying `what` never happened."""
    got, deadline = [], time.monotonic() + timeout
    while not condition(got):
        if time.monotonic() >= deadline:
            pytest.fail(f"{what} did not happen within {timeout:g} s (received from "
                        f"{[peer for peer, _ in got]})")
        received = transport.receive(0.1)
        if received is not None:
            got.append(received)
    return got


# --- protofed processes -------------------------------------------------------------------


# The model of the federations write_config writes (see there).
SMALL_MODEL = "[model]\nteacher_channels = [4, 8]\n"


def write_config(tmp_path, data_dir, name, *, nodes=3, rounds=2, algorithm="profe",
                 topology="fully_connected", codec="int16", startup=60, round_timeout=60,
                 deploy="", extra="", topology_extra="", pictures=False, absent=None):
    """A small federation config file: MNIST subset of 1,500, short timeouts; `deploy`
    adds lines to [deploy], `topology_extra` to [topology], `extra` whole tables. No
    pictures unless asked (`pictures`): drawing them is about 2 s of CPU a run, a quarter of
    a small run's, and the tests that read them ask. `absent`: timeouts.absent, the seconds
    a node waits each round for a peer known gone (the default's when None). A node waits
    up to 30 s at the end for its in-neighbours' goodbyes, which a loaded machine delays
    past 5 s (a gone neighbour is not waited for). The teacher is the CNN at widths 4, 8
    (the student 2, 4) unless `extra` has a [model] table: these tests check what runs, not
    how well, and the default widths cost the suite about 35 CPU seconds."""
    setting = f"pictures = {str(pictures).lower()}"
    if "[model]" not in extra:
        extra = f"{extra}\n{SMALL_MODEL}"
    if "[report]" in extra:
        extra = extra.replace("[report]", f"[report]\n{setting}", 1)
    else:
        extra = f"{extra}\n[report]\n{setting}\n"
    text = f"""
name = "{name}"
nodes = {nodes}
rounds = {rounds}
seed = 7
algorithm = "{algorithm}"
[topology]
kind = "{topology}"
{topology_extra}
[data]
dataset = "mnist"
dir = "{data_dir}"
download = false
subset = 1500
[exchange]
codec = "{codec}"
[timeouts]
startup = {startup}
round = {round_timeout}
shutdown = 30
{"" if absent is None else f"absent = {absent}"}
[deploy]
results_dir = "{tmp_path / "results"}"
{deploy}
{extra}
"""
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def protofed_command(*args):
    return [sys.executable, "-m", "deploy.cli", *map(str, args)]


def protofed(*args, timeout=300, env=None):
    """Run the `protofed` command to the end in a child process. Past `timeout` it gets a
    Ctrl-C, so `up` stops the nodes it started (they run in sessions of their own), and
    the test fails with TimeoutExpired."""
    process = subprocess.Popen(protofed_command(*args), cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGINT)
        try:
            process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def read_results(run_dir):
    """(summary or None, node results in node order) of a run folder."""
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else None
    nodes = [json.loads(p.read_text())
             for p in sorted(run_dir.glob("node-*.json"), key=lambda p: int(p.stem[5:]))]
    return summary, nodes


def run_federation(tmp_path, data_dir, name, timeout=300, options=(), **settings):
    """`protofed up` (with `options`) to the end: (completed process, summary or None, node
    results)."""
    config = write_config(tmp_path, data_dir, name, **settings)
    done = protofed("up", "-c", config, "--run-id", name, *options, timeout=timeout)
    return done, *read_results(tmp_path / "results" / name)


@contextlib.contextmanager
def protofed_running(*args):
    """`protofed` started in the background; killed and reaped on the way out, whatever
    happened, so no process or pipe outlives the test."""
    process = subprocess.Popen(protofed_command(*args), cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        for pipe in (process.stdout, process.stderr):
            pipe.close()


@contextlib.contextmanager
def protofed_up(config, name, *options):
    """`protofed up` of a config file as run `name`, in the background: (process, run
    folder). On the way out the launcher is killed and reaped and any node it left behind
    is killed, whatever happened."""
    run_dir = config.parent / "results" / name
    try:
        with protofed_running("up", "-c", config, "--run-id", name, *options) as process:
            yield process, run_dir
    finally:
        pids = (read_json(run_dir / "run.json") or {}).get("pids", {})
        kill_leftover_nodes([int(pid) for pid in pids.values()])


def close_output_after(process, lines, timeout):
    """`protofed up ... 2>&1 | head -LINES`: read that many lines of what the launcher
    says, close both its pipes, and wait for it to end."""
    for _ in range(lines):
        assert process.stderr.readline()
    process.stderr.close()
    process.stdout.close()
    process.wait(timeout=timeout)


def alive(pid):
    """The process exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:  # it ended between the two looks
        return False


# --- waiting for files --------------------------------------------------------------------


def wait_until(condition, what, timeout=180.0, interval=0.1):
    """Call `condition` until it is true; fail the test saying `what` never happened."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(interval)
    pytest.fail(f"{what} did not happen within {timeout:g} s")


def read_json(path):
    """A JSON file's content, or None while it is missing or half written."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def wait_for_rounds(result_path, rounds=1, timeout=180.0):
    """Wait until a node's result file records `rounds` rounds done; fail the test if not."""
    wait_until(lambda: (read_json(result_path) or {}).get("rounds_done", 0) >= rounds,
               f"{result_path} recording {rounds} rounds done", timeout)


def wait_for_training_nodes(run_dir, nodes, timeout=180.0):
    """Wait until the launcher has recorded every node's pid (its Ctrl-C handling is set
    up by then) and every node has done a round; their pids, in node order."""
    def every_node_listed():
        run = read_json(run_dir / "run.json") or {}
        return run.get("status") == "running" and len(run.get("pids", {})) == nodes
    wait_until(every_node_listed, f"{run_dir}/run.json listing {nodes} running nodes", timeout)
    for i in range(nodes):
        wait_for_rounds(run_dir / f"node-{i}.json", 1, timeout)
    pids = read_json(run_dir / "run.json")["pids"]
    return [int(pids[str(i)]) for i in range(nodes)]


def kill_leftover_nodes(pids, timeout=30.0):
    """SIGKILL the process group of every node still alive and wait until they are gone,
    so a failed test leaves no node behind."""
    for pid in pids:
        if alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
    wait_until(lambda: not any(alive(pid) for pid in pids), "leftover nodes ending", timeout)


# --- graph files of a user's own ------------------------------------------------------------

# Six nodes on a ring with one chord: a graph no [topology] kind builds.
SIX_EDGES = ((0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 0), (0, 3))


def write_graph_file(path, edges=SIX_EDGES, bandwidths=None):
    """An undirected graph file of `edges` in the format its suffix names (.edges: an edge
    list, .graphml: GraphML), edge (u, v) carrying bandwidth `bandwidths[(u, v)]`."""
    bandwidths = bandwidths or {}
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".graphml":
        nodes = sorted({n for edge in edges for n in edge})
        path.write_text(
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<graphml xmlns="http://graphml.graphdrawing.org/xmlns">\n'
            ' <key id="bw" for="edge" attr.name="bandwidth" attr.type="string"/>\n'
            ' <graph edgedefault="undirected">\n'
            + "".join(f'  <node id="{n}"/>\n' for n in nodes)
            + "".join(f'  <edge source="{u}" target="{v}">'
                      + (f'<data key="bw">{bandwidths[(u, v)]}</data>'
                         if (u, v) in bandwidths else "") + "</edge>\n" for u, v in edges)
            + " </graph>\n</graphml>\n")
    else:
        path.write_text("# a graph of the user's own\n" + "".join(
            f"{u} {v}" + (f" bandwidth={bandwidths[(u, v)]}" if (u, v) in bandwidths else "")
            + "\n" for u, v in edges))
    return path


def neighbours_in(edges, node):
    """`node`'s neighbours in the undirected graph of `edges`, sorted."""
    return sorted({v for u, v in edges if u == node} | {u for u, v in edges if v == node})


def peers_of(refusals) -> list[int]:
    """The peers of an aggregation's refusals, each once, in order."""
    return sorted({refusal.peer for refusal in refusals})


def assert_hub_rounds_drawn(nodes: list[dict], rounds: int, drawn: int) -> None:
    """Every round of a hub star (hub node 0): `drawn` clients, the same set in every node's
    record, nobody missing, and only the drawn clients trained."""
    for round_ in range(1, rounds + 1):
        chosen = nodes[0]["rounds"][round_]["participants"]
        assert len(chosen) == drawn and 0 not in chosen
        for node in nodes:
            record = node["rounds"][round_]
            assert record["participants"] == chosen and record["missing_peers"] == []
            assert bool(record["train"]) == (node["node"] in chosen)
