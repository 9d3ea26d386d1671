"""How cost grows with the federation on one machine: ProFe nodes, MNIST, the paper's CNN
pair, int16, fully connected and 6-regular.

    python -m experiments.scale [--nodes 5 10 20 50 100] [--topologies fully_connected
        k_regular] [--rounds 3] [--backend sim] [--again WHY] [--report-only]

Each cell is one `protofed up` on the local backend, with the capacity check measuring its
own estimate. Each node holds the same work at every size: 540 MNIST images (432 to train,
108 to test) and the same global test set of 1,000 images (its size fixed, not a fraction of
a subset that grows with the federation: every node evaluates on it every round). Per cell,
from the nodes' records (their wall-clock and CPU stamps, read after the run, so watching
costs nothing while it runs): start-up to round 0, seconds per round, the nodes' start-up
phases, CPU seconds of the launcher and every node, bytes sent per node per round; from the
kernel: the peak memory of the launcher and all its nodes together (a memory cgroup's
max_usage_in_bytes: every page counted once, nothing sampled; needs root and cgroup v1's
memory controller, as on this machine). Sampling every process's PSS instead was starved
of CPU by the nodes it measured (one sample of 50 busy nodes took 22 s) and missed peaks.
Cells are kept in experiments/reports/scale/results.json across invocations; scale.md and
scale.svg are rebuilt from that file alone (`--report-only`).

With `--backend sim` the cells run on the sim backend (every node a thread of one process,
in virtual time) and get a table of their own. MNIST holds 70,000 images: beyond 127 nodes
a node gets (70,000 - 1,000) / nodes of them instead of 540.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from experiments.bench_lifecycle import node_states
from experiments.processes import children_cpu
from node.profile import group_shares
from node.wording import counted

OUT = Path(__file__).resolve().parent / "reports" / "scale"
REPO = Path(__file__).resolve().parent.parent
IMAGES_PER_NODE = 540  # 432 train + 108 local test
GLOBAL_TEST = 1000
CGROUPS = Path("/sys/fs/cgroup/memory")
DEGREE = 6  # the sparse topology: a random 6-regular graph
TOPOLOGIES = {"fully_connected": "fully connected", "k_regular": "6-regular"}
# what `protofed up` prints of its capacity check
ESTIMATE = re.compile(r"memory: about ([0-9.]+) GiB for")
SIM_ESTIMATE = re.compile(r"measured ([0-9.]+) MiB shared, ([0-9.]+) MiB per node, ([0-9.]+) "
                          r"MiB of its messages, ([0-9.]+) MiB per in-neighbour, ([0-9.]+) MiB "
                          r"per node computing")


PHASES = ("setup", "handshake_with_round0_evaluation", "round0_evaluation")


MNIST_IMAGES = 70_000


# the stretch cells: FedAvg of a CNN at an eighth of the teacher's widths (FedAvg trains
# the teacher-role model)
SMALL_MODEL = {"algorithm": "fedavg", "teacher_channels": [2, 4], "embedding_dim": 32}


def cell_key(nodes: int, topology: str, backend: str = "local", small: bool = False) -> str:
    key = f"{topology}/{nodes}" if backend == "local" else f"{backend}/{topology}/{nodes}"
    return f"{key}/fedavg-small" if small else key


def images_per_node(nodes: int) -> int:
    """540, or MNIST's images shared out where 540 each would need more than it holds."""
    return min(IMAGES_PER_NODE, (MNIST_IMAGES - GLOBAL_TEST) // nodes)


def config_text(nodes: int, topology: str, rounds: int, data_dir: str, results: Path,
                backend: str = "local", small: bool = False) -> str:
    """The cell's federation: ProFe's defaults (the CNN pair, int16), the same data per node
    (`small`: FedAvg of SMALL_MODEL instead)."""
    # fewer than 7 nodes have no 6-regular graph: each node then has all the others
    degree = min(DEGREE, nodes - 1)
    graph = f'kind = "{topology}"' + (f"\nk = {degree}" if topology == "k_regular" else "")
    subset = images_per_node(nodes) * nodes + GLOBAL_TEST
    model = (f"\n[model]\nteacher_channels = {SMALL_MODEL['teacher_channels']}\n"
             f"embedding_dim = {SMALL_MODEL['embedding_dim']}" if small else "")
    return f"""name = "scale"
nodes = {nodes}
rounds = {rounds}
seed = 1
algorithm = "{SMALL_MODEL['algorithm'] if small else 'profe'}"{model}
[topology]
{graph}
[data]
dataset = "mnist"
dir = "{data_dir}"
download = false
subset = {subset}
global_test_fraction = {GLOBAL_TEST / subset!r}
[timeouts]
startup = 300
round = 900
[deploy]
results_dir = "{results}"
backend = "{backend}"
"""


def measure(nodes: int, topology: str, rounds: int, data_dir: str, workdir: Path,
            backend: str = "local", small: bool = False) -> dict:
    """Run one cell to the end; its figures."""
    run_id = f"scale-{topology}-{nodes}"
    config = workdir / f"{run_id}.toml"
    config.write_text(config_text(nodes, topology, rounds, data_dir, workdir / "results",
                                  backend, small))
    run_dir = workdir / "results" / run_id
    cgroup = CGROUPS / f"protofed-{run_id}"
    cgroup.mkdir(exist_ok=True)  # one left by a run that was killed is empty
    cpu_before = children_cpu()
    launched = time.time()
    try:
        launcher = subprocess.run(
            [sys.executable, "-m", "deploy.cli", "up", "-c", str(config), "--run-id", run_id],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            check=False,  # the launcher and every node it forks are charged to the cgroup
            preexec_fn=lambda: (cgroup / "cgroup.procs").write_text(str(os.getpid())))
        exited = time.time()
        peak_memory = int((cgroup / "memory.max_usage_in_bytes").read_text())
    finally:
        cgroup.rmdir()
    stderr = launcher.stderr
    if launcher.returncode != 0:
        raise SystemExit(f"{run_id}: protofed up failed:\n{stderr[-3000:]}")
    estimate = ESTIMATE.search(stderr)
    records = node_states(run_dir, nodes)
    done_at = [max(r["rounds"][k]["recorded_at"] for r in records) - launched
               for k in range(rounds + 1)]
    ended = max((run_dir / f"node-{i}.json").stat().st_mtime for i in range(nodes))

    def phase(values: list[float]) -> list[float]:
        return [round(statistics.median(values), 2), round(max(values), 2)]

    virtual = [max(r["rounds"][k]["recorded_at"] - r["started_at"] for r in records)
               for k in (0, rounds)]
    parts = SIM_ESTIMATE.search(stderr)
    return {"nodes": nodes, "topology": topology, "rounds": rounds, "backend": backend,
            "model": "fedavg-small" if small else "profe",
            "estimate_mib": dict(zip(("shared", "per_node", "messages", "per_in_neighbour",
                                      "per_node_computing"), map(float, parts.groups())))
            if parts else None,
            "images_per_node": images_per_node(nodes),
            "virtual_seconds_per_round": round((virtual[1] - virtual[0]) / rounds, 3)
            if backend == "sim" else None,
            "in_degree": len(records[0]["in_neighbours"]),
            "startup_to_round0_s": round(done_at[0], 2),
            "startup_phases_median_max_s": {
                "setup": phase([r["setup_seconds"] for r in records]),
                "handshake_with_round0_evaluation": phase(
                    [r["handshake_seconds"] for r in records]),
                "round0_evaluation": phase(
                    [r["rounds"][0]["evaluation_seconds"] for r in records])},
            "node_cpu_to_round0_s": round(sum(r["rounds"][0]["cpu_seconds"] for r in records), 1),
            "seconds_per_round": round((done_at[-1] - done_at[0]) / rounds, 2),
            "aggregation_seconds": round(statistics.median(
                sum(k["aggregation_seconds"] for k in r["rounds"][1:]) / rounds
                for r in records), 2),
            "cpu_seconds": round(children_cpu() - cpu_before, 1),
            "peak_memory_gb": round(peak_memory / 1e9, 2),
            "capacity_estimate_gb": round(float(estimate.group(1)) * 2**30 / 1e9, 2)
            if estimate else None,
            "bytes_per_node_per_round": round(sum(r["bytes_sent"] for r in records)
                                              / nodes / rounds),
            "exit_after_last_result_s": round(exited - ended, 2),
            "wall_s": round(exited - launched, 1),
            "mean_f1": round(sum(r["rounds"][-1]["global_test"]["f1"] for r in records)
                             / nodes, 4),
            **round_phases(records)}


def round_phases(records: list[dict]) -> dict:
    """Over every node's rounds after round 0: how many, their CPU seconds by phase
    (node.profile.PHASES, summed) and the in-neighbours a node took up a round (those it
    left undrawn, aggregation.judged_per_round, aside)."""
    later = [k for r in records for k in r["rounds"][1:]]
    phases: dict[str, float] = {}
    for k in later:
        for phase, (_, cpu) in (k.get("phases") or {}).items():
            phases[phase] = phases.get(phase, 0.0) + cpu
    taken = [len(r["in_neighbours"]) - len(k.get("undrawn_peers") or [])
             for r in records for k in r["rounds"][1:]]
    return {"node_rounds": len(later),
            "phase_cpu_seconds": {p: round(v, 2) for p, v in sorted(phases.items())},
            "in_neighbours_taken": round(statistics.mean(taken), 2) if taken else None}


def phase_line(row: dict, topology: str = "") -> str | None:
    """Where a cell's node-rounds after round 0 spent their CPU, by group (the `topology`
    named where given); None for a cell measured before the records had phases."""
    phases, count = row.get("phase_cpu_seconds"), row.get("node_rounds")
    if not phases or not count:
        return None
    total, shares = sum(phases.values()), group_shares(phases)
    taken = row.get("in_neighbours_taken")
    took = (f", taking up {taken:g} of its {row['in_degree']} in-neighbours a round"
            if taken is not None else "")
    where = f", {topology}" if topology else ""
    return (f"- {row['nodes']:,} nodes{where}: {total / count:.3f} CPU s a node-round{took}: "
            + ", ".join(f"{group} {share:.0%}" for group, share in shares.items()))


def expected(rows: list[dict], key: str, grows_with: str) -> dict[int, float]:
    """The figure at each size on the straight line in `grows_with` ("nodes" or
    "in_degree") through the two smallest cells of the same topology."""
    first, second = rows[0], rows[1]
    run = second[grows_with] - first[grows_with]
    slope = (second[key] - first[key]) / run if run else 0.0
    return {r["nodes"]: first[key] + slope * (r[grows_with] - first[grows_with]) for r in rows}


GROWTH = (("peak_memory_gb", "nodes", "peak memory (GB)"),
          ("bytes_per_node_per_round", "in_degree", "bytes sent per node per round"),
          ("aggregation_seconds", "in_degree", "aggregation s per round (median node)"),
          ("cpu_seconds", "nodes", "CPU seconds"))


def why(key: str, ratio: float, rows: list[dict]) -> str:
    """The end of a growth sentence: '.' when the figure follows its line (within 25%),
    else the reason it departs."""
    if abs(ratio - 1) <= 0.25:
        return "."
    in_degree_grows = rows[-1]["in_degree"] > rows[1]["in_degree"]
    if key == "peak_memory_gb" and in_degree_grows:
        return (": every node holds a round's messages from each in-neighbour, so with the "
                "in-degree growing with the nodes, memory grows with their square.")
    if key == "cpu_seconds" and in_degree_grows:
        return (": every node receives and checks each in-neighbour's messages (and judges "
                "and averages up to aggregation.judged_per_round of them), so CPU grows with "
                "the nodes times the in-degree.")
    if key == "aggregation_seconds":
        return (": these are wall-clock seconds of the aggregation step (the screens among "
                "them) while every node shares the machine's cores, so they grow with the "
                "nodes competing for the CPU as well as with the in-degree.")
    return ": not explained here."


def render(results: dict, command: str, few_images: dict | None = None) -> str:
    """The tables and, per topology, how each figure compares with its expected growth."""
    lines = ["# Scale: ProFe nodes on one machine", "",
             (f"Produced by `{command}` on {results.get('machine', '?')}; rebuild from "
             "results.json with `python -m experiments.scale --report-only`."), "",
             (f"Local backend, ProFe defaults (the paper's CNN pair, int16), CurveZMQ on, seed "
              f"1, {results.get('rounds', 3)} rounds. Every node has the same work at every "
              f"size: {IMAGES_PER_NODE} MNIST images of its own and a global test set of "
              f"{GLOBAL_TEST:,} images. Start-up: from launching `protofed up` until the last "
              "node recorded round 0 (its initial model evaluated, every neighbour "
              "connected); seconds per round: from there to the last node's last round, "
              "divided by the rounds; CPU: the launcher and every node; peak memory: the "
              "kernel's peak for the launcher and its nodes together (a memory cgroup, each "
              "page counted once); estimate: what the capacity check counted before "
              "starting the nodes (from its probe of one node)."), ""]
    for topology, title in TOPOLOGIES.items():
        rows = sorted((c for c in results["cells"].values()
                       if c["topology"] == topology and c.get("backend", "local") == "local"),
                      key=lambda c: c["nodes"])
        if not rows:
            continue
        lines += [f"## {title}", "",
                  ("| nodes | in-degree | start-up (s) | s per round | aggregation s per round "
                   "| CPU s | peak memory (GB) | estimate (GB) | estimate / peak | bytes per node "
                   "per round | exit after last result (s) | mean F1 |"),
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['nodes']} | {r['in_degree']} | {r['startup_to_round0_s']} | "
                  f"{r['seconds_per_round']} | {r['aggregation_seconds']} | "
                  f"{r['cpu_seconds']} | {r['peak_memory_gb']} | "
                  f"{r['capacity_estimate_gb']} | "
                  f"{r['capacity_estimate_gb'] / r['peak_memory_gb']:.2f} | "
                  f"{r['bytes_per_node_per_round']:,} | {r['exit_after_last_result_s']} | "
                  f"{r['mean_f1']:.4f} |" for r in rows]
        lines += ["", ("Start-up phases, median and slowest node (s): setup; handshake (with "
                  "round 0's evaluation, which runs while it waits); round 0's evaluation; "
                  "the nodes' CPU seconds until round 0 in all."), ""]
        for r in rows:
            phases = r["startup_phases_median_max_s"]
            # by name: results.json keeps its keys sorted, not in the caption's order
            lines.append(f"- {r['nodes']} nodes: " + "; ".join(
                f"{phases[name][0]} / {phases[name][1]}" for name in PHASES)
                + f"; {r['node_cpu_to_round0_s']} CPU s")
        lines.append("")
        measured = [line for r in rows if (line := phase_line(r))]
        if measured:
            lines += [("Where the nodes' CPU went in the rounds after round 0 (phases of the "
                       "node records, `node.profile`, summed over every node; screens: "
                       "validation, distance, influence, prototype validation; messages: "
                       "encode, decode and waiting):"), "", *measured, ""]
        earlier = sorted((c for c in results.get("superseded", {}).values()
                          if c["topology"] == topology and c.get("backend", "local") == "local"),
                         key=lambda c: c["nodes"])
        for why_ in dict.fromkeys(c["why"] for c in earlier):  # in order, once each
            lines.append(f"- Before {why_}: " + "; ".join(
                f"{c['nodes']} nodes {c['seconds_per_round']} s a round, {c['cpu_seconds']} "
                f"CPU s, {c['peak_memory_gb']} GB at the peak, mean F1 {c['mean_f1']:.4f}"
                for c in earlier if c["why"] == why_) + ".")
        if earlier:
            lines.append("")
        if len(rows) > 2:
            largest = rows[-1]
            for key, grows_with, label in GROWTH:
                ratio = largest[key] / expected(rows, key, grows_with)[largest["nodes"]]
                lines.append(f"- {label} at {largest['nodes']} nodes: {ratio:.2f} times the "
                             f"straight line in {grows_with.replace('_', '-')} through the "
                             f"{rows[0]['nodes']}- and {rows[1]['nodes']}-node cells"
                             + why(key, ratio, rows))
            lines.append("")
    lines += simulated(results, few_images)
    return "\n".join(lines).rstrip() + "\n"


def docs_table(results: dict) -> str:
    """The development docs' table of the local cells (docs/experiments.md): start-up,
    seconds per round, peak memory and the estimate per size and topology."""
    cells = {(c["nodes"], c["topology"]): c for c in results["cells"].values()
             if c.get("backend", "local") == "local" and c.get("model", "profe") == "profe"}

    def cell(nodes: int, topology: str) -> str:
        c = cells.get((nodes, topology))
        if c is None:
            return "-"
        degree = (f" ({c['in_degree']}-regular)"
                  if topology == "k_regular" and c["in_degree"] != DEGREE else "")
        return (f"{c['startup_to_round0_s']:.1f} s / {c['seconds_per_round']:.1f} s / "
                f"{c['peak_memory_gb']:.2f} GB / {c['capacity_estimate_gb']:.2f} GB{degree}")
    lines = [("| nodes | fully connected: start-up / s per round / peak memory / estimate | "
              "6-regular: the same |"), "|---|---|---|"]
    lines += [f"| {n} | {cell(n, 'fully_connected')} | {cell(n, 'k_regular')} |"
              for n in sorted({n for n, _ in cells})]
    return "\n".join(lines)


MODELS = {"profe": "ProFe, CNN pair",
          "fedavg-small": "FedAvg, CNN " + "/".join(map(str, SMALL_MODEL["teacher_channels"]))}
FEW_IMAGES = "few-images"  # the ablation of the cells whose nodes hold few images


def simulated(results: dict, few_images: dict | None = None) -> list[str]:
    """The sim backend's cells: wall and virtual seconds, CPU and memory per node, what a
    node's memory holds, and why cells of few images per node end at chance."""
    rows = sorted((c for c in results["cells"].values() if c.get("backend") == "sim"),
                  key=lambda c: (c.get("model", "profe"), c["topology"], c["nodes"]))
    if not rows:
        return []
    lines = ["## In simulation (the sim backend)", "",
             ("`python -m experiments.scale --backend sim` (FedAvg rows: `--small-model`): "
              "the same cells with every node a thread of one process in virtual time, 2 "
              "nodes computing at once (one per core). Wall: from launching `protofed up` to "
              "its exit; virtual seconds per round: the federation's own time (each node's "
              "compute its CPU time, unshaped links taking no time); peak memory as above, "
              "here one process; estimate: the sim capacity check's (– where the cell "
              "predates it); images: each node's own (the global test set of 1,000 "
              "aside)."), "",
             ("| model | topology | nodes | in-degree | images per node | rounds | wall (s) | "
              "virtual s per round | CPU s | peak memory (GB) | estimate (GB) | MB per node | "
              "bytes per node per round | mean F1 |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {MODELS[r.get('model', 'profe')]} | {TOPOLOGIES[r['topology']]} | "
              f"{r['nodes']:,} | {r['in_degree']} | {r['images_per_node']} | {r['rounds']} | "
              f"{r['wall_s']} | "
              f"{r['virtual_seconds_per_round']} | {r['cpu_seconds']} | "
              f"{r['peak_memory_gb']} | {r.get('capacity_estimate_gb') or '–'} | "
              f"{1000 * r['peak_memory_gb'] / r['nodes']:.1f} | "
              f"{r['bytes_per_node_per_round']:,} | {r['mean_f1']:.4f} |" for r in rows]
    both = [(r, results["cells"][cell_key(r["nodes"], r["topology"])]) for r in rows
            if r.get("model", "profe") == "profe"
            and cell_key(r["nodes"], r["topology"]) in results["cells"]]
    same = sum(local["bytes_per_node_per_round"] == r["bytes_per_node_per_round"]
               for r, local in both)
    lines += ["", (f"- Bytes per node per round equal the process cell's in {same} of "
                   f"the {len(both)} sizes run both ways.")]
    lines += [memory_parts(r) for r in rows if r.get("estimate_mib")]
    lines += [f"- Before {r['why']}, the {TOPOLOGIES[r['topology']]} "
              f"{MODELS[r.get('model', 'profe')]} cell of {r['nodes']:,} nodes peaked at "
              f"{r['peak_memory_gb']} GB and took {r['wall_s']} s and {r['cpu_seconds']} CPU s."
              for r in sorted((c for c in results.get("superseded", {}).values()
                               if c.get("backend") == "sim"),
                              key=lambda c: (c.get("model", "profe"), c["nodes"]))]
    measured = [line for r in rows if (line := phase_line(r, TOPOLOGIES[r["topology"]]))]
    if measured:
        lines += ["", "Where the nodes' CPU went in the rounds after round 0 (as above):", "",
                  *measured]
    low = [r for r in rows if r["mean_f1"] < 0.1]
    if low:
        lines.append(at_chance(low, few_images))
    return [*lines, ""]


def memory_parts(row: dict) -> str:
    """One cell's memory by part: the capacity probe's figures beside the measured peak."""
    parts, nodes = row["estimate_mib"], row["nodes"]
    named = {"the process (Python, torch, the dataset)": parts["shared"],
             "the nodes' models, optimiser state and data": parts["per_node"] * nodes,
             "their messages (two rounds of each node's broadcast, which every receiver "
             "shares)": parts["messages"] * nodes}
    peak = row["peak_memory_gb"] * 1e9 / 2**20
    rest = peak - sum(named.values())
    words = "; ".join(f"{name} {value / 1024:.2f} GiB" for name, value in named.items())
    return (f"- {MODELS[row.get('model', 'profe')]}, {nodes:,} nodes: {words}; the rest of the "
            f"{peak / 1024:.2f} GiB peak, {rest / 1024:.2f} GiB, is what the probe does not "
            "build (each node's thread, its in-memory transport, peers and growing record) "
            "and training's transient on the nodes computing at once.")


def at_chance(low: list[dict], few_images: dict | None) -> str:
    """Why the cells at chance are there: the ablation of their per-node data, if run."""
    cells = "; ".join(f"{MODELS[r.get('model', 'profe')]}, {r['nodes']:,} nodes "
                      f"({r['images_per_node']} images each, "
                      f"{counted(r['rounds'], 'round')}): mean F1 {r['mean_f1']:.4f}"
                      for r in low)
    if not few_images:
        return f"- At chance, not yet explained: {cells}."
    results = few_images["results"]

    def at_round(variant: str, round_: int) -> str:
        f1 = [v["rounds"][round_][0] for k, v in results.items()
              if k.startswith("69-images-") and k.endswith(f"/{variant}")]
        return f"{statistics.mean(f1):.3f}" if f1 else "not run"

    def final(variant: str) -> str:
        return at_round(variant, -1)

    return (f"- At chance: {cells}. The cause is the training budget, not the scale or the "
            "backend: with at most 64 training images a node takes one optimiser step a round "
            f"at batch 64. [The ablation]({FEW_IMAGES}/ablation.md) gives 10 "
            "nodes the same 69 images each (3 seeds, mean F1 after 3 and 10 rounds): ProFe's "
            f"defaults {at_round('default', 3)} and {final('default')}; without validation "
            f"{final('no validation')} and without distillation {final('no distillation')} "
            f"after 10 (neither is the cause); batch 8 (7 steps a round) {at_round('batch 8', 3)} "
            f"and {final('batch 8')}; 5 epochs {at_round('5 epochs', 3)} and "
            f"{final('5 epochs')}; FedAvg {final('FedAvg')} after 10.")


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
            rows = sorted((c for c in results["cells"].values()
                       if c["topology"] == topology and c.get("backend", "local") == "local"),
                          key=lambda c: c["nodes"])
            if not rows:
                continue
            sizes = [r["nodes"] for r in rows]
            line, = axis.plot(sizes, [r[key] for r in rows], marker="o", label=title)
            if grows_with and len(rows) > 2:
                guess = expected(rows, key, grows_with)
                axis.plot(sizes, [guess[n] for n in sizes], linestyle="--",
                          color=line.get_color(), label=f"{title}: expected")
        axis.set_xlabel("nodes")
        axis.set_title(label, fontsize=9)
    axes[0].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, metadata={"Date": None})
    plt.close(figure)


def supersede(results: dict, key: str, why: str) -> None:
    """Move cell `key` to the superseded ones as measured before `why`, keeping what it
    superseded before under `key#1`, `key#2`, ... (the report lists every one)."""
    superseded = results.setdefault("superseded", {})
    if key in superseded:
        earlier = next(f"{key}#{n}" for n in itertools.count(1)
                       if f"{key}#{n}" not in superseded)
        superseded[earlier] = superseded.pop(key)
    superseded[key] = {**results["cells"].pop(key), "why": why}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.scale",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[5, 10, 20, 50, 100],
                        help="federation sizes")
    parser.add_argument("--topologies", nargs="+", default=list(TOPOLOGIES),
                        choices=list(TOPOLOGIES), help="topologies")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per cell")
    parser.add_argument("--out", type=Path, default=OUT, help="folder of the archive")
    parser.add_argument("--backend", choices=("local", "sim"), default="local",
                        help="where the nodes run (sim: threads of one process, virtual time)")
    parser.add_argument("--small-model", action="store_true",
                        help="FedAvg of a CNN at an eighth of the teacher's widths instead of "
                        "ProFe (the stretch cells)")
    parser.add_argument("--report-only", action="store_true",
                        help="rebuild scale.md and scale.svg from results.json, run nothing")
    parser.add_argument("--again", metavar="WHY",
                        help="measure the cells again even where results.json has them, "
                        "keeping each earlier one in the report as measured before WHY")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    store = args.out / "results.json"
    results = json.loads(store.read_text()) if store.is_file() else {"cells": {}}
    if not args.report_only:
        if not os.access(CGROUPS, os.W_OK):
            raise SystemExit(f"python -m experiments.scale: {CGROUPS} is not writable here; "
                             "the peak memory is read from a memory cgroup (cgroup v1's "
                             "memory controller, as root)")
        data_dir = os.environ.get("PROTOFED_DATA_DIR", str(REPO.parent / "shared" / "datasets"))
        results["machine"] = f"{os.cpu_count()} cores"
        results.setdefault("rounds", args.rounds)  # the local cells' (the header says it)
        for nodes in args.nodes:
            for topology in args.topologies:
                key = cell_key(nodes, topology, args.backend, args.small_model)
                if key in results["cells"]:
                    if not args.again:
                        continue
                    supersede(results, key, args.again)
                with tempfile.TemporaryDirectory() as tmp:
                    results["cells"][key] = measure(nodes, topology, args.rounds, data_dir,
                                                    Path(tmp), args.backend, args.small_model)
                store.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
                print(f"{key}: {results['cells'][key]}", file=sys.stderr, flush=True)
    few = args.out / FEW_IMAGES / "results.json"
    (args.out / "scale.md").write_text(render(results, "python -m experiments.scale",
                                              json.loads(few.read_text()) if few.is_file()
                                              else None))
    picture(results, args.out / "scale.svg")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
