"""Training nodes batched over nodes with torch.func, beside the sim backend's one node at a
time: seconds per round and how far the weights end apart.

    python -m experiments.bench_batched [--nodes 20] [--repeats 3] [--out DIR]
        [--report-only]

The nodes are FedAvg nodes of one federation (IID MNIST, 432 training images each, the
student-size CNN, batch 64, SGD lr 0.01 momentum 0.9, one epoch), built by the node's own
code. "one at a time" is each node's own `train_round` (the sim backend's path, one torch
thread); "batched" stacks the nodes' weights (torch.func.stack_module_state) and takes each
step for all of them at once (vmap of the gradient of functional_call), SGD with momentum
written out as torch.optim.SGD computes it, each node on the same batches in the same order
(its round generator). Both start from the same weights; the table gives the seconds of one
round for every node and the largest weight difference after it. Results go to
OUT/batched.json; OUT/batched.md is rebuilt from it alone (`--report-only`).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.func import functional_call, grad, stack_module_state, vmap

from node.algorithms import create
from node.algorithms.common import batches, round_generator
from node.config import from_dict
from node.runtime import load_node_data

OUT = Path(__file__).resolve().parent / "reports" / "sim"
IMAGES_PER_NODE = 540  # 432 to train, 108 local test


def federation(nodes: int) -> dict:
    """The benchmark's federation config: FedAvg of the student-size CNN, IID MNIST."""
    return {"nodes": nodes, "seed": 1, "algorithm": "fedavg",
            "model": {"teacher_channels": [8, 16]},
            "data": {"dataset": "mnist", "partition": "iid", "download": False,
                     "subset": IMAGES_PER_NODE * nodes + 1000,
                     "global_test_fraction": 1000 / (IMAGES_PER_NODE * nodes + 1000)}}


def build(nodes: int) -> tuple[object, list]:
    """The config and every node's FedAvg algorithm, on the CPU."""
    config = from_dict(federation(nodes), source="bench_batched")
    cpu = torch.device("cpu")
    return config, [create("fedavg", config, load_node_data(config, i, cpu), cpu, i)
                    for i in range(nodes)]


def one_at_a_time(algorithms: list) -> float:
    """Seconds for every node's own round, one node after another."""
    started = time.perf_counter()
    for algorithm in algorithms:
        algorithm.train_round(1)
    return time.perf_counter() - started


def batched(config: object, algorithms: list) -> tuple[float, list[dict[str, torch.Tensor]]]:
    """Seconds for one round of every node at once, and each node's weights after it."""
    models = [a.model for a in algorithms]
    params, buffers = stack_module_state(models)
    template = copy.deepcopy(models[0]).to("meta")
    t = config.train

    def loss(p: dict, b: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits, _ = functional_call(template, (p, b), (x,))
        return torch.nn.functional.cross_entropy(logits, y)

    step = vmap(grad(loss))
    started = time.perf_counter()
    orders = [list(batches(a.data.train_x, a.data.train_y, t.batch_size,
                           round_generator(config, i, 1))) for i, a in enumerate(algorithms)]
    momentum: dict[str, torch.Tensor] = {}
    for k in range(len(orders[0])):
        x = torch.stack([order[k][0] for order in orders])
        y = torch.stack([order[k][1] for order in orders])
        grads = step(params, buffers, x, y)
        with torch.no_grad():
            for name, g in grads.items():
                # torch.optim.SGD: the buffer starts as the first gradient, then
                # buf = momentum * buf + g (no dampening); p -= lr * buf
                buf = momentum.get(name)
                momentum[name] = g.clone() if buf is None else buf.mul_(t.momentum).add_(g)
                params[name].sub_(t.lr * momentum[name])
    seconds = time.perf_counter() - started
    return seconds, [{name: value[i] for name, value in params.items()}
                     for i in range(len(models))]


def measure(nodes: int, repeats: int) -> dict:
    """`repeats` paired rounds on one torch thread; the weight gap of the last pair."""
    torch.set_num_threads(1)  # a sim node computes on one thread
    sequential, together, gaps = [], [], []
    for _ in range(repeats):
        config, algorithms = build(nodes)
        start = [copy.deepcopy(a.model.state_dict()) for a in algorithms]
        seconds, weights = batched(config, algorithms)
        together.append(seconds)
        for algorithm, state in zip(algorithms, start):
            algorithm.model.load_state_dict(state)
        sequential.append(one_at_a_time(algorithms))
        with torch.no_grad():
            gaps.append(max(float((dict(a.model.named_parameters())[name] - w[name]).abs().max())
                            for a, w in zip(algorithms, weights) for name in w))
    return {"nodes": nodes, "steps_per_round": -(-int(0.8 * IMAGES_PER_NODE) // 64),
            "one_at_a_time_s": [round(s, 3) for s in sequential],
            "batched_s": [round(s, 3) for s in together],
            "largest_weight_difference": max(gaps), "torch": torch.__version__}


def report(results: dict) -> str:
    lines = ["# Nodes trained batched with torch.func", "",
             (f"Produced by `python -m experiments.bench_batched` on {results['machine']}, torch "
              f"{results['runs'][0]['torch']}, one torch thread; rebuild with "
              "`--report-only`. FedAvg nodes of the student-size CNN on 432 IID MNIST images "
              "each, one round of one epoch (7 steps of batch 64): each node's own "
              "`train_round` one after another, as the sim backend trains, beside one vmap of "
              "the gradient over all nodes' stacked weights with SGD momentum written out. "
              "Median of the repeats."), "",
             "| nodes | one at a time (s) | batched (s) | speed-up | largest weight difference |",
             "|---|---|---|---|---|"]
    for r in results["runs"]:
        alone, together = (statistics.median(r["one_at_a_time_s"]),
                           statistics.median(r["batched_s"]))
        lines.append(f"| {r['nodes']} | {alone:.3f} | {together:.3f} | "
                     f"{alone / together:.2f} | {r['largest_weight_difference']:.1e} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.bench_batched",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[5, 20, 100])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    path = args.out / "batched.json"
    if not args.report_only:
        args.out.mkdir(parents=True, exist_ok=True)
        results = {"machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores",
                   "runs": []}
        for nodes in args.nodes:
            results["runs"].append(measure(nodes, args.repeats))
            path.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
            print(f"{nodes} nodes: {results['runs'][-1]}", file=sys.stderr, flush=True)
    (args.out / "batched.md").write_text(report(json.loads(path.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
