"""How cost grows with the federation on one machine: ProFe nodes, MNIST, the paper's CNN
pair, int16, fully connected and 6-regular.

    python -m experiments.scale [--nodes 5 10 20 50 100] [--topologies fully_connected
        k_regular] [--rounds 3] [--report-only]

Each cell is one `protofed up` on the local backend, watched from outside (its result
files every 50 ms, the processes' PSS every PSS_EVERY seconds), with 600 MNIST images per
node (the subset grows with
the federation, so one node's work stays the same). Per cell: start-up to round 0, seconds
per round, CPU seconds of the launcher and every node, peak total PSS, bytes sent per node
per round, and the exit time after the last result. Cells are kept in
experiments/reports/scale/results.json across invocations; scale.md and scale.svg are
rebuilt from that file alone (`--report-only`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from experiments.bench_lifecycle import descendants, node_states, pss_bytes

OUT = Path(__file__).resolve().parent / "reports" / "scale"
REPO = Path(__file__).resolve().parent.parent
IMAGES_PER_NODE = 600
PSS_EVERY = 0.5  # seconds between PSS samples (result files: every 50 ms)
DEGREE = 6  # the sparse topology: a random 6-regular graph
TOPOLOGIES = {"fully_connected": "fully connected", "k_regular": "6-regular"}
# What the capacity check counts per node. Its measured default (450 MiB, a full-MNIST
# node) refuses 50 nodes of 600 images each here; 150 MiB is above this config's measured
# peak per node (the table's peak PSS over nodes).
NODE_MEMORY = "150m"


def cell_key(nodes: int, topology: str) -> str:
    return f"{topology}/{nodes}"


def config_text(nodes: int, topology: str, rounds: int, data_dir: str, results: Path) -> str:
    """The cell's federation: ProFe's defaults (the CNN pair, int16), 600 images a node."""
    # fewer than 7 nodes have no 6-regular graph: each node then has all the others
    degree = min(DEGREE, nodes - 1)
    graph = f'kind = "{topology}"' + (f"\nk = {degree}" if topology == "k_regular" else "")
    return f"""name = "scale"
nodes = {nodes}
rounds = {rounds}
seed = 1
algorithm = "profe"
[topology]
{graph}
[data]
dataset = "mnist"
dir = "{data_dir}"
download = false
subset = {min(70000, IMAGES_PER_NODE * nodes)}
[timeouts]
startup = 300
round = 900
[deploy]
results_dir = "{results}"
memory = "{NODE_MEMORY}"
"""


def children_cpu() -> float:
    """CPU seconds of this process's waited-for descendants so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(nodes: int, topology: str, rounds: int, data_dir: str, workdir: Path) -> dict:
    """Run one cell to the end, watching it; its figures."""
    run_id = f"scale-{topology}-{nodes}"
    config = workdir / f"{run_id}.toml"
    config.write_text(config_text(nodes, topology, rounds, data_dir, workdir / "results"))
    run_dir = workdir / "results" / run_id
    cpu_before, started = children_cpu(), time.monotonic()
    launcher = subprocess.Popen([sys.executable, "-m", "deploy.cli", "up", "-c", str(config),
                                 "--run-id", run_id], cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
    done_at: dict[int, float] = {}  # round -> when every node had recorded it
    finished = None
    peak_pss, pss_at = 0, 0.0
    while launcher.poll() is None:
        states = node_states(run_dir, nodes)
        now = time.monotonic()
        recorded = min(len(s.get("rounds") or []) for s in states)
        for round_ in range(recorded):
            done_at.setdefault(round_, now - started)
        if finished is None and all(s.get("status") == "finished" for s in states):
            finished = now
        # Reading every process's smaps is costly with 100 nodes on 2 cores (it slowed the
        # start-up being measured): PSS is sampled less often than the result files.
        if now - pss_at >= PSS_EVERY:
            peak_pss = max(peak_pss, sum(pss_bytes(p) for p in descendants(launcher.pid)))
            pss_at = now
        time.sleep(0.05)
    exited = time.monotonic()
    stderr = launcher.stderr.read() if launcher.stderr else ""
    if launcher.returncode != 0:
        raise SystemExit(f"{run_id}: protofed up failed:\n{stderr[-3000:]}")
    records = node_states(run_dir, nodes)
    last = max(done_at) if done_at else 0
    return {"nodes": nodes, "topology": topology, "rounds": rounds,
            "in_degree": len(records[0]["in_neighbours"]),
            "startup_to_round0_s": round(done_at.get(0, exited - started), 2),
            "seconds_per_round": round((done_at.get(last, 0) - done_at.get(0, 0))
                                       / max(last, 1), 2),
            "cpu_seconds": round(children_cpu() - cpu_before, 1),
            "peak_total_pss_gb": round(peak_pss / 1e9, 2),
            "bytes_per_node_per_round": round(sum(r["bytes_sent"] for r in records)
                                              / nodes / rounds),
            "exit_after_last_result_s": round(exited - (finished or exited), 2),
            "wall_s": round(exited - started, 1),
            "mean_f1": round(sum(r["rounds"][-1]["global_test"]["f1"] for r in records)
                             / nodes, 4)}


def expected(rows: list[dict], key: str, grows_with: str) -> dict[int, float]:
    """The figure at each size if it grew as `grows_with` ("nodes" or "in_degree") from
    the smallest cell of the same topology."""
    first = min(rows, key=lambda r: r["nodes"])
    unit = first[key] / first[grows_with]
    return {r["nodes"]: unit * r[grows_with] for r in rows}


GROWTH = (("peak_total_pss_gb", "nodes", "peak total PSS (GB)"),
          ("bytes_per_node_per_round", "in_degree", "bytes sent per node per round"),
          ("cpu_seconds", "nodes", "CPU seconds"))


def render(results: dict, command: str) -> str:
    """The tables and, per topology, how each figure compares with its expected growth."""
    lines = ["# Scale: ProFe nodes on one machine", "",
             (f"Produced by `{command}` on {results.get('machine', '?')}; rebuild from "
             "results.json with `python -m experiments.scale --report-only`."), "",
             (f"Local backend, ProFe defaults (the paper's CNN pair, int16), MNIST with "
              f"{IMAGES_PER_NODE} images per node, CurveZMQ on, seed 1, deploy.memory = "
              f"{NODE_MEMORY} (what the capacity check counts). Start-up: from "
              "launching `protofed up` until every node recorded round 0; seconds per "
              "round: between every node's round 0 and its last round, divided by the "
              "rounds; CPU: the launcher and every node; PSS: the largest sum over those "
              f"processes, sampled every {PSS_EVERY:g} s (the result files every 50 ms)."), ""]
    for topology, title in TOPOLOGIES.items():
        rows = sorted((c for c in results["cells"].values() if c["topology"] == topology),
                      key=lambda c: c["nodes"])
        if not rows:
            continue
        lines += [f"## {title}", "",
                  ("| nodes | in-degree | start-up (s) | s per round | CPU s | peak PSS (GB) | "
                  "bytes per node per round | exit after last result (s) | mean F1 |"),
                  "|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['nodes']} | {r['in_degree']} | {r['startup_to_round0_s']} | "
                  f"{r['seconds_per_round']} | {r['cpu_seconds']} | {r['peak_total_pss_gb']} | "
                  f"{r['bytes_per_node_per_round']:,} | {r['exit_after_last_result_s']} | "
                  f"{r['mean_f1']:.4f} |" for r in rows]
        lines.append("")
        if len(rows) > 1:
            largest = rows[-1]
            for key, grows_with, label in GROWTH:
                ratio = largest[key] / expected(rows, key, grows_with)[largest["nodes"]]
                lines.append(f"- {label} at {largest['nodes']} nodes: {ratio:.2f} times "
                             f"what growth in proportion to {grows_with.replace('_', '-')} "
                             f"from {rows[0]['nodes']} nodes predicts.")
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def picture(results: dict, path: Path) -> None:
    """Each figure against nodes, measured (solid) beside its expected growth (dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "protofed-scale"  # the same file every time
    from matplotlib import pyplot as plt

    panels = (("startup_to_round0_s", None, "start-up to round 0 (s)"),
              ("seconds_per_round", None, "seconds per round"), *GROWTH)
    figure, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.4))
    for axis, (key, grows_with, label) in zip(axes, panels, strict=True):
        for topology, title in TOPOLOGIES.items():
            rows = sorted((c for c in results["cells"].values() if c["topology"] == topology),
                          key=lambda c: c["nodes"])
            if not rows:
                continue
            sizes = [r["nodes"] for r in rows]
            line, = axis.plot(sizes, [r[key] for r in rows], marker="o", label=title)
            if grows_with and len(rows) > 1:
                guess = expected(rows, key, grows_with)
                axis.plot(sizes, [guess[n] for n in sizes], linestyle="--",
                          color=line.get_color(), label=f"{title}: expected")
        axis.set_xlabel("nodes")
        axis.set_title(label, fontsize=9)
    axes[0].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, metadata={"Date": None})
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.scale",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[5, 10, 20, 50, 100],
                        help="federation sizes")
    parser.add_argument("--topologies", nargs="+", default=list(TOPOLOGIES),
                        choices=list(TOPOLOGIES), help="topologies")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per cell")
    parser.add_argument("--out", type=Path, default=OUT, help="folder of the archive")
    parser.add_argument("--report-only", action="store_true",
                        help="rebuild scale.md and scale.svg from results.json, run nothing")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    store = args.out / "results.json"
    results = json.loads(store.read_text()) if store.is_file() else {"cells": {}}
    if not args.report_only:
        data_dir = os.environ.get("PROTOFED_DATA_DIR", str(REPO.parent / "shared" / "datasets"))
        results["machine"] = f"{os.cpu_count()} cores"
        for nodes in args.nodes:
            for topology in args.topologies:
                key = cell_key(nodes, topology)
                if key in results["cells"]:
                    continue
                with tempfile.TemporaryDirectory() as tmp:
                    results["cells"][key] = measure(nodes, topology, args.rounds, data_dir,
                                                    Path(tmp))
                store.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
                print(f"{key}: {results['cells'][key]}", file=sys.stderr, flush=True)
    (args.out / "scale.md").write_text(render(results, "python -m experiments.scale"))
    picture(results, args.out / "scale.svg")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
