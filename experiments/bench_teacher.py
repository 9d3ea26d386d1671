"""What ProFe's teacher costs: CPU seconds of one node's local round with the teacher
training, once it is retired, without distillation, and for student-size FedAvg.

    python -m experiments.bench_teacher [--repeats 3] [--out DIR] [--report-only]

The node is node 0 of the ProFe paper's cell (20 nodes, full MNIST, 20% of the classes per
node, batch 64, SGD lr 0.01 momentum 0.9, one epoch), built by the node's own code on the
CPU with one torch thread; each figure is the CPU time of `train_round` (training and the
local prototypes), the median of the repeats, each repeat a fresh node. "teacher
training": a round while alpha_s > 0 (rounds 1-4 under the default schedule: the teacher's
epoch, then the student's, distilling); "teacher retired": a round once alpha_s has
decayed to 0 (rounds 5-10: the student alone); "no distillation": alpha_s = 0 from the
start; FedAvg of the student-size CNN for comparison. Within the teacher-training round,
hooks on the teacher time its inference during the student's epoch (one forward a batch,
logits and embedding together). Results go to OUT/teacher.json; OUT/teacher.md is rebuilt
from it alone (`--report-only`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from node.algorithms import create
from node.config import from_dict
from node.runtime import load_node_data

OUT = Path(__file__).resolve().parent / "reports" / "teacher-cost"
CELL = {"nodes": 20, "seed": 1, "rounds": 10, "algorithm": "profe",
        "data": {"dataset": "mnist", "partition": "classes", "classes_fraction": 0.2,
                 "download": False}, "train": {"epochs": 1}}
CASES = {
    "teacher training": {},
    "teacher retired": {"retired": True},
    "no distillation": {"profe": {"alpha_s": 0.0}},
    "FedAvg, student-size": {"algorithm": "fedavg", "model": {"teacher_channels": [8, 16]}},
}

INFERENCE = "teacher inference in the student's epoch"


class InferenceClock:
    """CPU seconds a module spends in forward passes run without gradients."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.seconds, self._started = 0.0, 0.0
        module.register_forward_pre_hook(self._start)
        module.register_forward_hook(self._stop)

    def _start(self, *_) -> None:
        self._started = time.process_time()

    def _stop(self, *_) -> None:
        if not torch.is_grad_enabled():
            self.seconds += time.process_time() - self._started


def round_cpu(case: dict) -> tuple[float, float]:
    """CPU seconds of one local round of a fresh node 0 in `case`, and of the teacher's
    forward passes without gradients within it (0 where no teacher runs)."""
    settings = {key: value for key, value in case.items() if key != "retired"}
    config = from_dict({**CELL, **settings}, source="bench_teacher")
    cpu = torch.device("cpu")
    algorithm = create(config.algorithm, config, load_node_data(config, 0, cpu), cpu, 0)
    if case.get("retired"):
        algorithm.alpha_s = 0.0  # as the schedule leaves it after round 4
    teacher = getattr(algorithm, "teacher", None)
    clock = InferenceClock(teacher) if teacher is not None else None
    started = time.process_time()
    algorithm.train_round(1)
    return time.process_time() - started, clock.seconds if clock else 0.0


def report(results: dict) -> str:
    runs = results["runs"]
    base = statistics.median(runs["teacher training"])
    lines = ["# What ProFe's teacher costs", "",
             (f"Produced by `python -m experiments.bench_teacher` on {results['machine']}, "
              "one torch thread; rebuild with `--report-only`. CPU seconds of one local round "
              "(training and local prototypes) of node 0 of the ProFe paper's cell (20 nodes, "
              "full MNIST, 20% of the classes per node, one epoch of batch 64), the median of "
              f"{len(runs['teacher training'])} fresh nodes. Under the default schedule "
              "(alpha_s halved each round, 0 below 0.1) the teacher trains in rounds 1-4 and "
              "is retired in rounds 5-10."), "",
             "| round | CPU s | against a round with the teacher training |", "|---|---|---|"]
    for name, values in runs.items():
        value = statistics.median(values)
        lines.append(f"| {name} | {value:.2f} | {value / base:.2f} |")
    trained, retired = base, statistics.median(runs["teacher retired"])
    ten_rounds = 4 * trained + 6 * retired
    alone = 10 * statistics.median(runs["no distillation"])
    lines += ["", (f"- Ten rounds under the default schedule: {ten_rounds:.1f} CPU s a node; "
                   f"without distillation {alone:.1f} CPU s, {1 - alone / ten_rounds:.0%} "
                   "less.")]
    if INFERENCE in results:
        inference = statistics.median(results[INFERENCE])
        extra = trained - retired
        lines.append(f"- Of the {extra:.2f} CPU s a teacher-training round costs beyond a retired "
                     f"one, the teacher's inference in the student's epoch (one forward a "
                     f"batch, its logits and embedding used together) takes {inference:.2f} "
                     f"({inference / extra:.0%}); the rest is the teacher's own training epoch "
                     "and the distillation terms. Once the schedule retires the teacher, "
                     "neither runs.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.bench_teacher",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    path = args.out / "teacher.json"
    if not args.report_only:
        torch.set_num_threads(1)
        measured = {name: [round_cpu(case) for _ in range(args.repeats)]
                    for name, case in CASES.items()}
        results = {"machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores",
                   "torch": torch.__version__,
                   "runs": {name: [round(total, 3) for total, _ in runs]
                            for name, runs in measured.items()},
                   INFERENCE: [round(inference, 3)
                               for _, inference in measured["teacher training"]]}
        args.out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=1) + "\n")
    (args.out / "teacher.md").write_text(report(json.loads(path.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
