"""Start-up, shutdown and memory of a whole local federation, measured from outside.

    python -m experiments.bench_lifecycle [--nodes 5 20] [--rounds 2]

Runs `protofed up` on an MNIST subset with FedAvg on the small CNN, watching the result
files and the node processes every 50 ms, and writes experiments/reports/lifecycle/
bench.{json,md}:
- start-up to round 0: from launching `protofed up` until every node has recorded round 0
  (its untrained model evaluated after the peers' handshake);
- exit after the last result: from the moment every node's file says "finished" until
  the command has exited;
- peak total PSS: the largest sum, over the launcher and node processes, of their
  proportional set size (shared pages divided among the processes sharing them).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from experiments.processes import process_tree, uss_and_pss

OUT = Path(__file__).resolve().parent / "reports" / "lifecycle"
REPO = Path(__file__).resolve().parent.parent


def node_states(run_dir: Path, nodes: int) -> list[dict]:
    states = []
    for i in range(nodes):
        try:
            states.append(json.loads((run_dir / f"node-{i}.json").read_text()))
        except (OSError, ValueError):
            states.append({})
    return states


def measure(nodes: int, rounds: int, data_dir: str, workdir: Path) -> dict:
    config = workdir / f"bench-{nodes}.toml"
    config.write_text(f"""name = "bench"
nodes = {nodes}
rounds = {rounds}
algorithm = "fedavg"
[data]
dataset = "mnist"
dir = "{data_dir}"
download = false
subset = {2500 * nodes}
[exchange]
codec = "fp32"
[deploy]
results_dir = "{workdir / 'results'}"
""")
    run_id = f"lifecycle-{nodes}"
    run_dir = workdir / "results" / run_id
    started = time.monotonic()
    launcher = subprocess.Popen([sys.executable, "-m", "deploy.cli", "up", "-c", str(config),
                                 "--run-id", run_id], cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
    round0 = finished = None
    peak_pss = 0
    while launcher.poll() is None:
        states = node_states(run_dir, nodes)
        now = time.monotonic()
        if round0 is None and all(s.get("rounds") for s in states):
            round0 = now - started
        if finished is None and all(s.get("status") == "finished" for s in states):
            finished = now
        peak_pss = max(peak_pss, sum(uss_and_pss(p)[1] for p in process_tree(launcher.pid)))
        time.sleep(0.05)
    exited = time.monotonic()
    if finished is None:  # the command was gone before the next look at the files
        finished = exited
    if launcher.returncode != 0:
        raise SystemExit(f"{nodes} nodes: protofed up failed:\n{launcher.stderr.read()[-2000:]}")
    return {"nodes": nodes, "rounds": rounds,
            "startup_to_round0_s": round(round0, 2),
            "exit_after_last_result_s": round(exited - finished, 2),
            "wall_s": round(exited - started, 2),
            "peak_total_pss_gb": round(peak_pss / 1e9, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[5, 20])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    data_dir = os.environ.get("PROTOFED_DATA_DIR", str(REPO.parent / "shared" / "datasets"))
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(n, args.rounds, data_dir, Path(tmp)) for n in args.nodes]
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "bench.json").write_text(json.dumps({"cpus": os.cpu_count(), "runs": rows},
                                               indent=1) + "\n")
    lines = ["# Start-up, shutdown and memory of a local federation", "",
             (f"Produced by `python -m experiments.bench_lifecycle --nodes "
             f"{' '.join(map(str, args.nodes))} --rounds {args.rounds}` on {os.cpu_count()} "
             "cores: FedAvg, small CNN, 2,500 MNIST images per node, fp32."), "",
             ("| nodes | start-up to round 0 (s) | exit after the last result (s) | "
             "wall clock (s) | peak total PSS (GB) |"), "|---|---|---|---|---|"]
    lines += [f"| {r['nodes']} | {r['startup_to_round0_s']} | {r['exit_after_last_result_s']} "
              f"| {r['wall_s']} | {r['peak_total_pss_gb']} |" for r in rows]
    (OUT / "bench.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
