"""Topologies that change while the federation trains: static ring, static 4-regular,
4-regular drawn again every round, Epidemic-Learning-style sampling of 4 peers and fully
connected; ProFe (int16) and student-size FedAvg; MNIST and Fashion-MNIST with 20% of the
classes per node; then one churn scenario. Every cell is a whole federation in one process
(`node.inprocess`: the same round loop, peers, codecs and byte counting as over ZeroMQ).

    python -m experiments.dynamic [--seeds 1 2 3] [--only mnist] [--report-only]

Finished runs are kept in the archive (results.json); the report is rebuilt from it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from deploy.views.dynamics import consensus_by_round, round_means
from node.config import from_dict
from node.inprocess import memory_federation, run_in_memory
from node.record import NodeRecord

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "experiments" / "reports" / "dynamic"
NODES, ROUNDS, SUBSET = 20, 8, 12000
TOPOLOGIES = {
    "ring": {"kind": "ring"},
    "4-regular": {"kind": "k_regular", "k": 4},
    "4-regular resampled": {"kind": "k_regular", "k": 4, "resample_every": 1},
    "epidemic 4": {"kind": "epidemic", "k": 4},
    "fully connected": {"kind": "fully_connected"},
}
METHODS = {
    "ProFe int16": {"algorithm": "profe", "exchange": {"codec": "int16"}},
    "FedAvg student-size": {"algorithm": "fedavg", "model": {"teacher_channels": [8, 16]},
                            "exchange": {"codec": "fp32"}},
}
DATASETS = {"mnist": "MNIST", "fashion_mnist": "Fashion-MNIST"}
# Rounds, seconds and bytes until the mean global F1 first reaches these (per dataset).
TARGETS = {"mnist": 0.3, "fashion_mnist": 0.2}
# 30% of the nodes leave at round 3, half of them come back at round 6.
CHURN = [{"round": 3, "leave": [2, 5, 8, 11, 14, 17]}, {"round": 6, "back": [2, 8, 14]}]
CHURN_TOPOLOGIES = ("4-regular", "4-regular resampled")
# The sketch's error, measured: one cell run with each sketch size and once exact (runs are
# deterministic; a sketch as large as the model is the model itself).
SKETCH_CHECK = ("mnist", "4-regular resampled", "ProFe int16", 1)
CHECKED_SKETCHES = (1024, 4096)  # the default, and what the report's cells recorded
CELL_SKETCH = 4096
EXACT = 10**7


def config_for(dataset: str, topology: str, method: str, seed: int, data_dir: str,
               churn: bool = False, sketch: int | None = None) -> Any:
    """The cell's federation."""
    raw = {"name": "dynamic", "nodes": NODES, "rounds": ROUNDS, "seed": seed,
           "topology": TOPOLOGIES[topology],
           "data": {"dataset": dataset, "dir": data_dir, "download": False, "subset": SUBSET,
                    "partition": "classes", "classes_fraction": 0.2},
           "train": {"threads": 1, "device": "cpu", "batch_size": 16},
           "timeouts": {"startup": 120, "round": 900, "shutdown": 10},
           "report": {"target_f1": TARGETS[dataset]}}
    for key, value in METHODS[method].items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    if churn:
        raw["scenario"] = {"events": CHURN}
    raw["report"]["consensus_sketch"] = CELL_SKETCH if sketch is None else sketch
    return from_dict(raw)


def run_cell(config) -> dict[str, Any]:
    """One federation in this process: per round the mean F1 over the nodes present, the
    consensus distance, bytes sent by all nodes, seconds since the start."""
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        results = run_in_memory(memory_federation(config), Path(tmp), timeout=3600)
    records = [NodeRecord.from_dict(r) for r in results]
    means = round_means(records)
    consensus = consensus_by_round(records)
    rounds = sorted(means)
    sent = {r: sum(x.bytes_sent for n in records for x in n.rounds if x.round == r)
            for r in rounds}
    stamps = {r: max(x.recorded_at for n in records for x in n.rounds if x.round == r)
              for r in rounds}
    present = {r: sum(1 for n in records for x in n.rounds if x.round == r) for r in rounds}
    return {"rounds": rounds, "mean_f1": [round(means[r], 6) for r in rounds],
            "consensus": [None if consensus[r] is None else float(f"{consensus[r]:.6g}")
                          for r in rounds],
            "bytes": [sent[r] for r in rounds], "present": [present[r] for r in rounds],
            "seconds": [round(stamps[r] - started, 2) for r in rounds],
            "status": {str(n.node): n.status for n in records},
            "parameters": max((n.model_parameters or 0) for n in records)}


def cell_key(dataset: str, topology: str, method: str, seed: int, churn: bool) -> str:
    return f"{dataset}|{topology}|{method}|{seed}" + ("|churn" if churn else "")


def cells(seeds: list[int], only: list[str]) -> list[tuple]:
    """Every run of the report, in the order they are run."""
    out = []
    for seed in seeds:
        for dataset in DATASETS:
            for method in METHODS:
                for topology in TOPOLOGIES:
                    out.append((dataset, topology, method, seed, False))
        for topology in CHURN_TOPOLOGIES:
            out.append(("mnist", topology, "ProFe int16", seed, True))
    return [c for c in out if not only or c[0] in only]


# -- the report ---------------------------------------------------------------------------
def to_target(run: dict, target: float) -> tuple[int | None, float | None, int | None]:
    """(round, seconds, bytes by all nodes) when the mean F1 first reached `target`."""
    for i, (r, f1) in enumerate(zip(run["rounds"], run["mean_f1"])):
        if f1 >= target:
            return r, run["seconds"][i], sum(run["bytes"][:i + 1])
    return None, None, None


def mean_sd(values: list[float]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.4g}"
    return f"{statistics.mean(values):.4g} ± {statistics.stdev(values):.2g}"


def seeds_of(results: dict, dataset: str, topology: str, method: str, churn: bool = False):
    return [run for key, run in sorted(results["cells"].items())
            if key.startswith(f"{dataset}|{topology}|{method}|") and key.endswith("|churn") == churn]


def render(results: dict) -> str:
    lines = ["# Topologies that change while the federation trains", "",
             ("Produced by `python -m experiments.dynamic` on 2 cores; rebuild from "
              "results.json with `python -m experiments.dynamic --report-only`."), "",
             (f"{NODES} nodes, {ROUNDS} rounds, a {SUBSET:,}-image subset of the dataset split "
             "by classes (20% of the classes, 2 of 10, per node), one torch thread per node, "
             "every federation in one process. Mean over 3 seeds ± their standard deviation "
             "(each seed a whole run). F1: macro-F1 on the global test set, each method's own "
             "prediction rule, the mean over the nodes present. Consensus distance: the mean "
             "squared distance of the exchanged models from their average, estimated from "
             f"the nodes' {CELL_SKETCH:,}-value sketches "
             "(their error is measured below). Rounds to target: the first round whose "
             "mean F1 reached the target (- where no seed reached it; the mean is over the "
             "seeds that did, their count in brackets)."), ""]
    for dataset, name in DATASETS.items():
        target = TARGETS[dataset]
        lines += [f"## {name}", "",
                  (f"| method | topology | F1 after round {ROUNDS} | consensus distance "
                   f"after round 1 | after round {ROUNDS} | rounds to F1 {target} | seconds "
                   "to it | MB sent by all nodes to it | MB per node per round |"),
                  "|---|---|---|---|---|---|---|---|---|"]
        for method in METHODS:
            for topology in TOPOLOGIES:
                runs = seeds_of(results, dataset, topology, method)
                if not runs:
                    continue
                reached = [to_target(run, target) for run in runs]
                hit = [x for x in reached if x[0] is not None]
                per_round = [sum(run["bytes"]) / NODES / ROUNDS / 1e6 for run in runs]
                lines.append(
                    f"| {method} | {topology} | {mean_sd([r['mean_f1'][-1] for r in runs])} | "
                    f"{mean_sd([r['consensus'][1] for r in runs])} | "
                    f"{mean_sd([r['consensus'][-1] for r in runs])} | "
                    + (f"{mean_sd([x[0] for x in hit])} [{len(hit)}]" if hit else "-") + " | "
                    + (mean_sd([x[1] for x in hit]) if hit else "-") + " | "
                    + (mean_sd([x[2] / 1e6 for x in hit]) if hit else "-") + " | "
                    f"{mean_sd(per_round)} |")
        lines.append("")
    churn_runs = {t: seeds_of(results, "mnist", t, "ProFe int16", churn=True)
                  for t in CHURN_TOPOLOGIES}
    if any(churn_runs.values()):
        lines += ["## Churn (MNIST, ProFe int16)", "",
                  ("Nodes 2, 5, 8, 11, 14 and 17 (30%) leave at round 3; 2, 8 and 14 come "
                   "back at round 6. The mean F1 is over the nodes present in the round."), "",
                  "| topology | " + " | ".join(f"round {r}" for r in range(ROUNDS + 1))
                  + " |", "|---|" + "---|" * (ROUNDS + 1)]
        for topology, runs in churn_runs.items():
            if runs:
                lines.append(f"| {topology}, F1 with churn | " + " | ".join(
                    mean_sd([run["mean_f1"][i] for run in runs]) for i in range(ROUNDS + 1))
                    + " |")
                static = seeds_of(results, "mnist", topology, "ProFe int16")
                if static:
                    lines.append(f"| {topology}, F1 without | " + " | ".join(
                        mean_sd([run["mean_f1"][i] for run in static])
                        for i in range(ROUNDS + 1)) + " |")
                lines.append(f"| {topology}, consensus with churn | " + " | ".join(
                    mean_sd([run["consensus"][i] for run in runs]) for i in range(ROUNDS + 1))
                    + " |")
        lines.append("")
    check = results.get("sketch_check")
    if check:
        lines += ["## The consensus distance's estimator", "",
                  (f"Nodes record a CountSketch of their model ({check['parameters']:,} values; "
                   f"node.consensus). The same run ({', '.join(map(str, SKETCH_CHECK))}; runs "
                   "are deterministic"
                   + (", and the F1 of every run was the same" if check["same_f1"] else "")
                   + ") made with each sketch size and once exact:"), ""]
        for size, sketched in sorted(check["sketches"].items(), key=lambda kv: int(kv[0])):
            errors = [abs(s - e) / e for s, e in zip(sketched, check["exact"])
                      if s is not None and e]
            lines.append(f"- {int(size):,} values: off by {100 * statistics.mean(errors):.1f}% "
                         f"on average and {100 * max(errors):.1f}% at most over "
                         f"{len(errors)} rounds.")
        lines.append("")
    lines += findings(results)
    return "\n".join(lines) + "\n"


def _rounds(reached: list[int | None]) -> str:
    return ", ".join("never" if r is None else str(r) for r in reached)


def findings(results: dict) -> list[str]:
    """Sentences the figures support: resampled against static 4-regular, per method."""
    out = ["## What the figures show", ""]
    for dataset, name in DATASETS.items():
        for method in METHODS:
            static = seeds_of(results, dataset, "4-regular", method)
            resampled = seeds_of(results, dataset, "4-regular resampled", method)
            if not static or not resampled:
                continue
            cs = statistics.mean(r["consensus"][-1] for r in static)
            cr = statistics.mean(r["consensus"][-1] for r in resampled)
            fs = statistics.mean(r["mean_f1"][-1] for r in static)
            fr = statistics.mean(r["mean_f1"][-1] for r in resampled)
            target = TARGETS[dataset]
            reach = {label: [to_target(run, target)[0] for run in runs]
                     for label, runs in (("static", static), ("resampled", resampled))}
            out.append(f"- {name}, {method}: resampling the 4-regular graph every round "
                       f"{'lowers' if cr < cs else 'does not lower'} the consensus distance "
                       f"after round {ROUNDS} ({cr:.4g} against {cs:.4g} static, "
                       f"{cr / cs:.2f}×); the final F1 is {fr:.4f} against {fs:.4f}; the mean "
                       f"F1 reached {target} in rounds {_rounds(reach['resampled'])} resampled "
                       f"against {_rounds(reach['static'])} static (per seed).")
    for topology in CHURN_TOPOLOGIES:
        churned = seeds_of(results, "mnist", topology, "ProFe int16", churn=True)
        static = seeds_of(results, "mnist", topology, "ProFe int16")
        if not churned or not static:
            continue
        def mean_at(runs, i):
            return statistics.mean(r["mean_f1"][i] for r in runs)
        out.append(f"- Churn, MNIST, ProFe int16, {topology}: the mean F1 of the nodes present "
                   f"after round {ROUNDS} is {mean_at(churned, -1):.4f} against "
                   f"{mean_at(static, -1):.4f} without churn; in round 6, when 3 nodes come back "
                   f"with the models they left with, it goes from {mean_at(churned, 5):.4f} to "
                   f"{mean_at(churned, 6):.4f}.")
    return out + [""]


def picture(results: dict, path: Path) -> None:
    """F1 per round, F1 against bytes and consensus distance per round, per dataset and
    method (seed means)."""
    import matplotlib
    from matplotlib.figure import Figure

    matplotlib.rcParams["svg.hashsalt"] = "protofed-dynamic"  # the same file every time
    figure = Figure(figsize=(13, 4 * len(DATASETS) * len(METHODS) / 2))
    rows = [(d, m) for d in DATASETS for m in METHODS]
    axes = figure.subplots(len(rows), 3, squeeze=False)
    for (dataset, method), (a_f1, a_bytes, a_cons) in zip(rows, axes):
        for topology in TOPOLOGIES:
            runs = seeds_of(results, dataset, topology, method)
            if not runs:
                continue
            rounds = runs[0]["rounds"]
            f1 = [statistics.mean(r["mean_f1"][i] for r in runs) for i in range(len(rounds))]
            sent = [statistics.mean(sum(r["bytes"][:i + 1]) for r in runs) / 1e6
                    for i in range(len(rounds))]
            cons = [statistics.mean(r["consensus"][i] for r in runs) for i in range(len(rounds))]
            a_f1.plot(rounds, f1, marker=".", label=topology)
            a_bytes.plot(sent, f1, marker=".", label=topology)
            if topology != "fully connected":  # about 1e-10: it would flatten the others
                a_cons.plot(rounds[1:], cons[1:], marker=".", label=topology)
        a_f1.set_title(f"{DATASETS[dataset]}, {method}: mean F1")
        a_f1.set_xlabel("round")
        a_bytes.set_title("mean F1 against MB sent by all nodes")
        a_bytes.set_xscale("log")
        a_cons.set_title("consensus distance (fully connected: about 0)")
        a_cons.set_ylim(bottom=0)
        a_cons.set_xlabel("round")
        a_f1.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, metadata={"Date": None})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.dynamic",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--only", nargs="*", default=[], choices=list(DATASETS),
                        help="datasets to run (default: both)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--report-only", action="store_true",
                        help="rebuild dynamic.md and dynamic.svg from results.json")
    parser.add_argument("--sketch-check", action="store_true",
                        help="measure the consensus sketch's error on one cell")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    store = args.out / "results.json"
    results = json.loads(store.read_text()) if store.is_file() else {"cells": {}}
    data_dir = os.environ.get("PROTOFED_DATA_DIR", str(REPO.parent / "shared" / "datasets"))
    if args.sketch_check:
        runs = {size: run_cell(config_for(*SKETCH_CHECK, data_dir, sketch=size))
                for size in (*CHECKED_SKETCHES, EXACT)}
        exact = runs.pop(EXACT)
        results["sketch_check"] = {
            "parameters": exact["parameters"], "exact": exact["consensus"],
            "sketches": {str(size): run["consensus"] for size, run in runs.items()},
            "same_f1": all(run["mean_f1"] == exact["mean_f1"] for run in runs.values())}
        store.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    elif not args.report_only:
        todo = [c for c in cells(args.seeds, args.only) if cell_key(*c) not in results["cells"]]
        for i, cell in enumerate(todo, 1):
            started = time.monotonic()
            results["cells"][cell_key(*cell)] = run_cell(config_for(*cell[:4], data_dir,
                                                                    churn=cell[4]))
            store.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
            run = results["cells"][cell_key(*cell)]
            print(f"[{i}/{len(todo)}] {cell_key(*cell)}: F1 {run['mean_f1'][-1]:.4f}, "
                  f"consensus {run['consensus'][-1]}, {time.monotonic() - started:.0f} s",
                  file=sys.stderr, flush=True)
    (args.out / "dynamic.md").write_text(render(results))
    if results["cells"]:
        picture(results, args.out / "dynamic.svg")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
