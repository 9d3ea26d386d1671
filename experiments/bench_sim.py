"""A paper cell as node processes and on the sim backend: wall clock, CPU, bytes and F1.

    python -m experiments.bench_sim [--out experiments/reports/sim] [--report-only]

The cell is the ProFe paper's setting as experiments/matrices/paper.toml runs it: 20 ProFe
nodes fully connected, full MNIST, 20% of the classes per node, 10 rounds of one epoch,
seed 1. Each backend runs it through `protofed up`; wall clock from launch to exit, CPU of
the launcher and everything it started (their rusage once reaped), and from the records:
bytes sent per node and round, the final mean F1. Results go to OUT/throughput.json;
OUT/throughput.md is rebuilt from it alone (`--report-only`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from experiments.processes import children_cpu

OUT = Path(__file__).resolve().parent / "reports" / "sim"
CELL = {"name": "paper-cell", "nodes": 20, "rounds": 10, "seed": 1, "algorithm": "profe",
        "topology": {"kind": "fully_connected"},
        "data": {"dataset": "mnist", "partition": "classes", "classes_fraction": 0.2,
                 "download": False},
        "train": {"epochs": 1}, "timeouts": {"round": 1800}}
BACKENDS = ("local", "sim")


def run(backend: str) -> dict:
    """One run of the cell on `backend`; its figures."""
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        config = {**CELL, "deploy": {"results_dir": str(root / "results"), "backend": backend}}
        (root / "cell.json").write_text(json.dumps(config))
        cpu, started = children_cpu(), time.monotonic()
        done = subprocess.run([sys.executable, "-m", "deploy.cli", "up", "-c",
                               str(root / "cell.json"), "--run-id", "cell"],
                              capture_output=True, text=True, check=False)
        wall, cpu = time.monotonic() - started, children_cpu() - cpu
        if done.returncode != 0:
            raise SystemExit(f"{backend}: protofed up exited {done.returncode}: "
                             f"{done.stderr[-2000:]}")
        nodes = [json.loads((root / "results" / "cell" / f"node-{i}.json").read_text())
                 for i in range(CELL["nodes"])]
    return {"wall_seconds": round(wall, 1), "cpu_seconds": round(cpu, 1),
            "bytes_by_node_and_round": [[r["bytes_sent"] for r in n["rounds"]] for n in nodes],
            "mean_f1": round(sum(n["rounds"][-1]["global_test"]["f1"] for n in nodes)
                             / len(nodes), 4),
            "node_seconds_to_last_round": round(max(
                n["rounds"][-1]["recorded_at"] - n["started_at"] for n in nodes), 1)}


def report(results: dict) -> str:
    runs = results["runs"]
    lines = ["# A paper cell as processes and in simulation", "",
             (f"Produced by `python -m experiments.bench_sim` on {results['machine']}; rebuild "
              "with `--report-only`. 20 ProFe nodes fully connected, full MNIST, 20% of the "
              "classes per node, 10 rounds of one epoch, seed 1 (experiments/matrices/"
              "paper.toml's cell), through `protofed up`. Wall: launch to exit; CPU: the "
              "launcher and everything it started; last round: the slowest node's last "
              "record after its start (wall seconds for processes, virtual for the sim)."), "",
             "| backend | wall (s) | CPU (s) | last round (s) | mean F1 | bytes sent |",
             "|---|---|---|---|---|---|"]
    for backend in BACKENDS:
        if backend in runs:
            r = runs[backend]
            lines.append(f"| {backend} | {r['wall_seconds']} | {r['cpu_seconds']} | "
                         f"{r['node_seconds_to_last_round']} | {r['mean_f1']:.4f} | "
                         f"{sum(map(sum, r['bytes_by_node_and_round'])):,} |")
    if all(b in runs for b in BACKENDS):
        local, sim = runs["local"], runs["sim"]
        same = local["bytes_by_node_and_round"] == sim["bytes_by_node_and_round"]
        lines += ["", (f"- Bytes sent per node and round: "
                      f"{'equal' if same else 'different'} on the two backends."),
                  (f"- The sim took {sim['wall_seconds'] / local['wall_seconds']:.2f} times the "
                  f"processes' wall clock and {sim['cpu_seconds'] / local['cpu_seconds']:.2f} "
                  "times their CPU.")]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.bench_sim",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    path = args.out / "throughput.json"
    results = json.loads(path.read_text()) if path.exists() else {"runs": {}}
    if not args.report_only:
        args.out.mkdir(parents=True, exist_ok=True)
        results["machine"] = f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores"
        for backend in args.backends:
            results["runs"][backend] = run(backend)
            path.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
            print(f"{backend}: {results['runs'][backend]['wall_seconds']} s wall",
                  file=sys.stderr, flush=True)
    (args.out / "throughput.md").write_text(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
