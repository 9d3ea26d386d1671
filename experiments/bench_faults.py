"""What dead nodes cost: a local federation run clean, then with some nodes killed mid-run.

    python -m experiments.bench_faults [--nodes 10] [--kill 3] [--out experiments/reports/faults]

Both runs use the same config (ProFe, MNIST subset, fully connected, timeouts.round 120 s);
in the second, `--kill` nodes are SIGKILLed once every node has finished round 1. The
figures are the survivors' own elapsed times and the launcher's wall clock.
Needs PROTOFED_DATA_DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROUND_TIMEOUT = 120


def write_config(folder: Path, name: str, nodes: int, rounds: int) -> Path:
    path = folder / f"{name}.toml"
    path.write_text(f"""
name = "{name}"
nodes = {nodes}
rounds = {rounds}
seed = 3
[data]
dataset = "mnist"
subset = {nodes * 1000}
[timeouts]
round = {ROUND_TIMEOUT}
[deploy]
results_dir = "{folder / "results"}"
""")
    return path


def read_nodes(run_dir: Path, nodes: int) -> list[dict | None]:
    out: list[dict | None] = []
    for i in range(nodes):
        try:
            out.append(json.loads((run_dir / f"node-{i}.json").read_text()))
        except (OSError, ValueError):
            out.append(None)
    return out


def run(folder: Path, name: str, nodes: int, rounds: int, kill: int) -> dict:
    """One `protofed up`; kill `kill` nodes after round 1; the figures of the run."""
    config = write_config(folder, name, nodes, rounds)
    run_dir = folder / "results" / name
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "deploy.cli", "up", "-c", str(config),
                                "--run-id", name], cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    victims = list(range(nodes - kill, nodes))
    killed_at = None
    while kill and killed_at is None and process.poll() is None:
        states = read_nodes(run_dir, nodes)
        if all(s is not None and s.get("rounds_done", 0) >= 1 for s in states):
            pids = json.loads((run_dir / "run.json").read_text())["pids"]
            for victim in victims:
                os.kill(int(pids[str(victim)]), signal.SIGKILL)
            killed_at = time.monotonic() - started
        time.sleep(0.1)
    process.communicate(timeout=3600)
    wall = time.monotonic() - started
    states = read_nodes(run_dir, nodes)
    survivors = [s for i, s in enumerate(states) if s is not None and i not in victims[:kill]]
    return {"name": name, "nodes": nodes, "killed": victims[:kill], "killed_at_s": killed_at,
            "exit_code": process.returncode, "wall_s": round(wall, 1),
            "survivor_elapsed_s": [round(s["elapsed_seconds"], 1) for s in survivors],
            "survivors_finished": sum(s["status"] == "finished" for s in survivors),
            "survivor_f1": [round(s["rounds"][-1]["global_test"]["f1"], 4) for s in survivors],
            # per round, the longest any survivor spent exchanging (waiting included)
            "communication_s": [round(max(s["rounds"][r]["communication_seconds"]
                                          for s in survivors), 2) for r in range(1, rounds + 1)],
            "setup_s": [round(s["setup_seconds"] + s["handshake_seconds"], 1) for s in survivors],
            "unreachable_peers": sorted({p for s in survivors
                                         for p in s.get("unreachable_peers", [])})}


def markdown(clean: dict, faulty: dict, command: str) -> str:
    extra = max(faulty["survivor_elapsed_s"]) - max(clean["survivor_elapsed_s"])
    return "\n".join([
        "# What dead nodes cost", "",
        f"Produced by `{command}` on {platform.machine()}, {os.cpu_count()} cores.", "",
        (f"{clean['nodes']} ProFe nodes, MNIST subset, fully connected, timeouts.round "
        f"{ROUND_TIMEOUT} s. In the faulty run nodes {faulty['killed']} were SIGKILLed "
        f"{faulty['killed_at_s']:.1f} s after start, once every node had finished round 1."), "",
        ("| run | survivors finished | slowest survivor (s) | launcher wall clock (s) | "
        "survivors' final F1 |"),
        "|---|---|---|---|---|",
        *(f"| {r['name']} | {r['survivors_finished']} | {max(r['survivor_elapsed_s'])} | "
          f"{r['wall_s']} | {min(r['survivor_f1'])}-{max(r['survivor_f1'])} |"
          for r in (clean, faulty)),
        "",
        (f"The faulty run's slowest survivor took {extra:+.1f} s against the clean run "
        f"(promised: at most one timeouts.round, {ROUND_TIMEOUT} s); survivors saw "
        f"nodes {faulty['unreachable_peers']} unreachable."), ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--kill", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", type=Path, default=REPO / "experiments/reports/faults")
    args = parser.parse_args(argv)
    command = "python -m experiments.bench_faults" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        clean = run(folder, "clean", args.nodes, args.rounds, 0)
        print(f"clean: {clean['wall_s']} s", flush=True)
        faulty = run(folder, "faulty", args.nodes, args.rounds, args.kill)
        print(f"faulty: {faulty['wall_s']} s", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench.json").write_text(json.dumps({"clean": clean, "faulty": faulty,
                                                     "command": command}, indent=1) + "\n")
    (args.out / "bench.md").write_text(markdown(clean, faulty, command))
    print(args.out / "bench.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
