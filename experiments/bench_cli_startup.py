"""How long the `protofed` commands that train nothing take to start and answer.

    python -m experiments.bench_cli_startup [--repeat 15] [--label after]
        [--checkout DIR]   # another checkout of protofed (e.g. an older commit), same venv

Runs each command as a whole process (`python -m deploy.cli ...`, from the checkout's
folder) `--repeat` times, interleaved, and records the minimum, median and maximum wall
time, and whether importing the command line loads torch. Commands, chosen so that each one
answers at once:
- `--version`; `status` (asks the local results folder, the Docker engine and the swarm);
- `down NO-SUCH-RUN`, `logs NO-SUCH-RUN 0` (the answer "no such run");
- `report RUN` of a three-node run folder of round records (it prints the table and
  writes the CSV and the pictures: drawing them is part of its answer);
- `monitor`, `compose`, `tensorboard` and `up` with `--help`: the whole import and the
  parser, since they serve, build or train once started.

Each label's figures go to experiments/reports/cli-startup/results.json (other labels kept),
and table.md is written from it: a before/after table when both labels are there.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "reports" / "cli-startup"
REPO = Path(__file__).resolve().parent.parent
RUN_ID = "bench-run"


def commands(results: Path) -> dict[str, list[str]]:
    """The command lines measured, by name."""
    where = ["--results-dir", str(results)]
    return {"--version": ["--version"], "status": ["status", *where],
            "down": ["down", "no-such-run", *where], "logs": ["logs", "no-such-run", "0", *where],
            "report": ["report", RUN_ID, *where],
            "monitor --help": ["monitor", "--help"], "compose --help": ["compose", "--help"],
            "tensorboard --help": ["tensorboard", "--help"], "up --help": ["up", "--help"]}


def write_run_folder(results: Path) -> None:
    """A finished three-node run folder: each node's record of two rounds."""
    folder = results / RUN_ID
    folder.mkdir(parents=True)
    for node in range(3):
        peers = [p for p in range(3) if p != node]
        rounds = [{"round": r, "global_test": {"f1": 0.5 + r / 10, "accuracy": 0.5 + r / 10},
                   "bytes_sent_by_peer": {str(p): {"model": 1000} for p in peers} if r else {},
                   "bytes_received_by_peer": {str(p): {"model": 1000} for p in peers} if r
                   else {}} for r in range(3)]
        record = {"node": node, "status": "finished", "algorithm": "fedavg", "rounds_total": 2,
                  "rounds_done": 2, "in_neighbours": peers, "out_neighbours": peers,
                  "bytes_sent": 4000, "bytes_received": 4000, "rounds": rounds}
        (folder / f"node-{node}.json").write_text(json.dumps(record))


def loads_torch(checkout: Path) -> bool:
    probe = "import sys, deploy.cli; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], cwd=checkout, capture_output=True,
                          text=True, check=True, env=environment(checkout))
    return done.stdout.strip() == "True"


def environment(checkout: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(checkout), "MPLBACKEND": "Agg"}


def measure(checkout: Path, repeat: int) -> dict[str, dict[str, float]]:
    """Seconds per command: min, median, max over `repeat` interleaved runs."""
    with tempfile.TemporaryDirectory() as scratch:
        results = Path(scratch) / "results"
        write_run_folder(results)
        lines = commands(results)
        seconds: dict[str, list[float]] = {name: [] for name in lines}
        for _ in range(repeat):
            for name, arguments in lines.items():
                started = time.perf_counter()
                done = subprocess.run([sys.executable, "-m", "deploy.cli", *arguments],
                                      cwd=checkout, capture_output=True, text=True,
                                      check=False, env=environment(checkout))
                seconds[name].append(time.perf_counter() - started)
                if done.returncode not in (0, 1, 2) or "Traceback" in done.stderr:
                    raise SystemExit(f"{name} failed:\n{done.stderr[-2000:]}")
    return {name: {"min": min(values), "median": statistics.median(values),
                   "max": max(values)} for name, values in seconds.items()}


def table(results: dict) -> str:
    """The report: one row per command, one column per label (median, then min-max)."""
    labels = sorted(results, key=lambda label: label != "before")
    lines = ["| command | " + " | ".join(
                 f"{label}: median (min-max) s" for label in labels) + " |",
             "|---|" + "---|" * len(labels)]
    for name in results[labels[0]]["seconds"]:
        cells = [f"{results[label]['seconds'][name]['median']:.3f} "
                 f"({results[label]['seconds'][name]['min']:.3f}-"
                 f"{results[label]['seconds'][name]['max']:.3f})" for label in labels]
        lines.append(f"| `protofed {name}` | " + " | ".join(cells) + " |")
    lines.append("| importing the command line loads torch | " + " | ".join(
        "yes" if results[label]["loads_torch"] else "no" for label in labels) + " |")
    notes = [f"- {label}: {results[label]['commit']}, {results[label]['repeat']} runs per "
             f"command, {results[label]['machine']}" for label in labels]
    return ("# Start-up of the commands that train nothing\n\n"
            "`python -m experiments.bench_cli_startup` (see its docstring); wall seconds of "
            "the whole process.\n\n" + "\n".join(lines) + "\n\n" + "\n".join(notes) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--label", default="after")
    parser.add_argument("--checkout", type=Path, default=REPO)
    args = parser.parse_args(argv)
    checkout = args.checkout.resolve()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout,
                            capture_output=True, text=True, check=False).stdout.strip()
    OUT.mkdir(parents=True, exist_ok=True)
    archive = OUT / "results.json"
    results = json.loads(archive.read_text()) if archive.is_file() else {}
    results[args.label] = {"commit": commit, "repeat": args.repeat,
                           "machine": f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}",
                           "loads_torch": loads_torch(checkout),
                           "seconds": measure(checkout, args.repeat)}
    archive.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    (OUT / "table.md").write_text(table(results))
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
