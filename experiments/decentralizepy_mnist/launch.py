"""Start a decentralizepy D-PSGD federation on this machine, one process per node, over
loopback: the way decentralizepy's eval/testing.py runs one machine's processes.

    /work/dpy/venv/bin/python experiments/decentralizepy_mnist/launch.py \
        --log-dir DIR [--config config.ini] [--nodes 5] [--rounds 3] [--data-dir MNIST/raw]

Runs under decentralizepy's own Python (never protofed's). Writes into DIR the graph file
(fully connected), the ip file (machine 0 = 127.0.0.1) and the config it ran, and each node
writes there its log `<rank>.log` and `<rank>_results.json` (test accuracy and bytes sent
per iteration). Exits 1 when a node process fails.
"""

import argparse
import json
import logging
import os
import random
import socket
import sys
from itertools import permutations
from pathlib import Path

from decentralizepy.graphs.Graph import Graph
from decentralizepy.mappings.Linear import Linear
from decentralizepy.node.DPSGDNode import DPSGDNode
from localconfig import LocalConfig
from torch import multiprocessing

HERE = Path(__file__).resolve().parent


def read_config(path: Path) -> dict[str, dict]:
    """The .ini as {section: {key: typed value}}, as decentralizepy's nodes take it."""
    config = LocalConfig(str(path))
    return {section: dict(config.items(section)) for section in config}


def ports_free(offset: int, nodes: int) -> bool:
    """Whether the ports decentralizepy's TCP gives ranks 0..nodes-1 (2r+1+offset) are free."""
    for rank in range(nodes):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", 2 * rank + 1 + offset))
            except OSError:
                return False
    return True


def free_offset(nodes: int) -> int:
    """A port offset whose node ports are all free on loopback."""
    for _ in range(200):
        offset = random.randrange(20000, 40000)
        if ports_free(offset, nodes):
            return offset
    raise SystemExit("no free range of loopback ports found")


def write_graph(path: Path, nodes: int) -> None:
    """decentralizepy's edges format: the node count, then one `a b` line per directed edge."""
    edges = [f"{a} {b}" for a, b in permutations(range(nodes), 2)]
    path.write_text("\n".join([str(nodes), *edges]) + "\n")


def prepare(args: argparse.Namespace, log_dir: Path) -> tuple[dict, Graph]:
    """Fill in the run's paths and ports, write the graph, ip and config files."""
    config = read_config(args.config)
    data = config["DATASET"]
    data["train_dir"] = data["train_dir"] or str(args.data_dir)
    data["test_dir"] = data["test_dir"] or str(args.data_dir)
    ip_file = log_dir / "ip.json"
    ip_file.write_text(json.dumps({"0": "127.0.0.1"}) + "\n")
    comm = config["COMMUNICATION"]
    comm["addresses_filepath"] = str(ip_file)
    comm["offset"] = comm["offset"] or free_offset(args.nodes)
    (log_dir / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    write_graph(log_dir / "graph.edges", args.nodes)
    graph = Graph()
    graph.read_graph_from_file(str(log_dir / "graph.edges"), "edges")
    return config, graph


def run(args: argparse.Namespace) -> int:
    """Fork one DPSGDNode per rank, wait for all; 1 if any failed."""
    log_dir = args.log_dir.resolve()
    (log_dir / "weights").mkdir(parents=True, exist_ok=True)
    config, graph = prepare(args, log_dir)
    mapping = Linear(1, args.nodes)
    context = multiprocessing.get_context("fork")
    # (rank, machine, mapping, graph, config, iterations, log dir, weights dir, log level,
    #  test every iteration, never the separate train-loss pass, keep optimiser state)
    procs = [context.Process(target=DPSGDNode, args=[
        rank, 0, mapping, graph, config, args.rounds, str(log_dir), str(log_dir / "weights"),
        logging.INFO, 1, args.rounds + 1, 0]) for rank in range(args.nodes)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    failed = [rank for rank, proc in enumerate(procs) if proc.exitcode != 0]
    if failed:
        print(f"decentralizepy nodes failed: {failed} (logs in {log_dir})", file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log-dir", type=Path, required=True)
    parser.add_argument("--config", type=Path, default=HERE / "config.ini")
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    data = Path(os.environ.get("PROTOFED_DATA_DIR", "data")) / "MNIST" / "raw"
    parser.add_argument("--data-dir", type=Path, default=data)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
