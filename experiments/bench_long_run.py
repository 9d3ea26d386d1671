"""What a node's round costs late in a long run: the record's share, block by block.

    python -m experiments.bench_long_run [--rounds 400] [--label after]
        [--checkout DIR]   # another checkout of protofed (e.g. an older commit), same venv
    python -m experiments.bench_long_run --report-only

One `protofed up` of examples/custom/fedavg-mlp-mnist.toml on the sim backend, shrunk so
that rounds are short and many: 3 nodes, a 1,500-image MNIST subset, `--rounds` rounds,
the test sets evaluated every 50 rounds, no pictures. From its phases.csv, per block of
100 rounds: the CPU milliseconds of a node-round, of its training and of its record (the
node's record rewritten after the round), means over nodes and rounds; and the run's wall
time. Each label's figures go to experiments/reports/long-run/results.json (other labels
kept), and table.md is written from it.
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "reports" / "long-run"
REPO = Path(__file__).resolve().parent.parent
CONFIG = "examples/custom/fedavg-mlp-mnist.toml"
NODES, SUBSET, EVAL_EVERY, BLOCK = 3, 1500, 50, 100


def command(checkout: Path, rounds: int, results: Path) -> list[str]:
    """The measured command line, run from `checkout`."""
    settings = [f"nodes={NODES}", f"data.subset={SUBSET}", f"rounds={rounds}",
                f"report.eval_every={EVAL_EVERY}", "report.pictures=false",
                f"deploy.results_dir={json.dumps(str(results))}"]
    return [sys.executable, "-m", "deploy.cli", "up", "-c", str(checkout / CONFIG),
            "--backend", "sim", "--run-id", "long", *[a for s in settings
                                                      for a in ("--set", s)]]


def blocks(phases_csv: Path) -> list[dict[str, float]]:
    """Per block of BLOCK rounds after round 0: CPU ms of a node-round, its training and
    its record, means over the block's node-rounds."""
    sums: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    node_rounds: dict[int, set] = collections.defaultdict(set)
    with phases_csv.open() as handle:
        for row in csv.DictReader(handle):
            round_ = int(row["round"])
            if round_ == 0:
                continue
            block = (round_ - 1) // BLOCK
            cpu = float(row["cpu_seconds"]) * 1000
            sums[block]["round"] += cpu
            sums[block][row["phase"]] += cpu
            node_rounds[block].add((row["node"], round_))
    return [{"rounds": f"{b * BLOCK + 1}-{(b + 1) * BLOCK}",
             **{key: round(sums[b][key] / len(node_rounds[b]), 2)
                for key in ("round", "train", "record")}} for b in sorted(sums)]


def measure(checkout: Path, rounds: int) -> dict:
    """One run from `checkout`: its blocks, wall seconds and commit."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": str(checkout)}
        started = time.monotonic()
        subprocess.run(command(checkout, rounds, Path(tmp)), cwd=checkout, env=env, check=True,
                       stdout=subprocess.DEVNULL)
        wall = time.monotonic() - started
        found = blocks(Path(tmp) / "long" / "phases.csv")
    commit = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
                            check=True, capture_output=True, text=True).stdout.strip()
    return {"commit": commit, "rounds": rounds, "wall_s": round(wall, 1), "blocks": found}


def table(results: dict) -> str:
    """table.md: one row per block, a column group per label."""
    labels = list(results["labels"])
    lines = ["# A node's round late in a long run", "",
             (f"Produced by `python -m experiments.bench_long_run` ({NODES} nodes, "
              f"{CONFIG}, the sim backend, a {SUBSET:,}-image MNIST subset, the test sets "
              f"every {EVAL_EVERY} rounds; see the module for how each figure is measured). "
              "CPU milliseconds per node-round, means over each block's node-rounds."), "",
             "| rounds | " + " | ".join(f"{label} ({results['labels'][label]['commit']}): "
                                        "round / train / record" for label in labels) + " |",
             "|---|" + "---|" * len(labels)]
    by_label = {label: {b["rounds"]: b for b in results["labels"][label]["blocks"]}
                for label in labels}
    for rounds in by_label[labels[0]]:
        cells = [by_label[label].get(rounds) for label in labels]
        lines.append(f"| {rounds} | " + " | ".join(
            "-" if c is None else f"{c['round']:g} / {c['train']:g} / {c['record']:g}"
            for c in cells) + " |")
    lines += ["", "The whole run's wall time: " + "; ".join(
        f"{label} {results['labels'][label]['wall_s']:g} s" for label in labels) + "."]
    record_shares = {label: results["labels"][label]["blocks"][-1]["record"]
                     / results["labels"][label]["blocks"][-1]["round"] for label in labels}
    lines += ["", "The record's share of a node-round in the last block: " + "; ".join(
        f"{label} {share:.0%}" for label, share in record_shares.items()) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--label", default="after")
    parser.add_argument("--checkout", type=Path, default=REPO)
    parser.add_argument("--report-only", action="store_true",
                        help="rebuild table.md from results.json")
    args = parser.parse_args(argv)
    store = OUT / "results.json"
    results = json.loads(store.read_text()) if store.is_file() else {"labels": {}}
    if not args.report_only:
        results["labels"][args.label] = measure(args.checkout.resolve(), args.rounds)
        OUT.mkdir(parents=True, exist_ok=True)
        store.write_text(json.dumps(results, indent=1) + "\n")
    text = table(results)
    (OUT / "table.md").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
