"""What each defence costs a node per round: the seconds of its aggregation step (where the
checks, the screens and the combination run) beside the whole round's CPU seconds, on the
sim backend, where a node's clock is its thread's CPU time.

    python -m experiments.bench_defence [--nodes 10 100] [--rounds 3] [--repeats 1]
        [--defences ...] [--out DIR] [--report-only]

Each cell is `examples/quick.toml` (ProFe, a 20,000-image MNIST subset) fully connected,
run with `protofed.run(..., backend="sim")` under one defence of the robustness report
(experiments.robustness.DEFENCES; `mean` is no screen at all). Per node and round after
round 1 (round 1 also builds and warms up), the aggregation step's seconds and the round's
CPU seconds (the difference of the record's cumulative `cpu_seconds`), medians over nodes
and rounds. With `--repeats N` each size runs its defences N times, interleaved (the order
reversed every other time), and a defence's CPU against `mean`'s is the median of the N
ratios of runs made side by side, so that a host's load drifting between runs moves
single pairs, not the figure. Beside it, the same ratio per unit of fixed work: each
run's CPU over that of its phases whose arithmetic no defence changes (training, the
teacher, both evaluations: experiments.paired_runs.FIXED_PHASES), which takes out how
fast the host ran during each run. Results go to OUT/defence-cost.json;
OUT/defence-cost.md is rebuilt from it alone (`--report-only`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
from pathlib import Path

from experiments.paired_runs import (
    paired_ratios,
    per_fixed_work,
    per_node_round,
)
from experiments.robustness import DEFENCES

OUT = Path(__file__).resolve().parent / "reports" / "robustness"
CONFIG = Path(__file__).resolve().parent.parent / "examples" / "quick.toml"
MEASURED = ("mean", "validated", "distance2", "influence", "clipped2", "guarded_wide",
            "guarded_own3_floor1", "guarded_own3_shared")


def overrides(nodes: int, rounds: int, defence: str, results: str) -> list[str]:
    """The `--set` strings of one cell."""
    settings = DEFENCES[defence]
    return [f"nodes={nodes}", f"rounds={rounds}", "topology.kind=fully_connected",
            f"deploy.results_dir={results}",
            *(f"aggregation.{key}={json.dumps(value)}" for key, value in settings.items())]


def per_round(records) -> dict:
    """Medians over nodes and rounds after the first: the aggregation step's seconds and the
    round's CPU seconds; the run's CPU seconds over those node-rounds, in all and per phase
    (node.profile.PHASES, summed)."""
    aggregation, cpu = [], []
    phases: dict[str, float] = {}
    for record in records:
        rounds = [r for r in record.rounds if r.round >= 1]
        for before, after in itertools.pairwise(rounds):
            aggregation.append(after.aggregation_seconds)
            cpu.append(after.cpu_seconds - before.cpu_seconds)
            for phase, (_, cpu_seconds) in (after.phases or {}).items():
                phases[phase] = phases.get(phase, 0.0) + cpu_seconds
    if not cpu:
        raise ValueError("no round after the first was recorded")
    return {"aggregation_seconds": statistics.median(aggregation),
            "round_cpu_seconds": statistics.median(cpu),
            "rounds_measured": len(cpu), "cpu_seconds": sum(cpu),
            "phase_cpu_seconds": dict(sorted(phases.items()))}


def measure(nodes: int, rounds: int, defence: str) -> dict:
    """One cell, run to its end on the sim backend."""
    import protofed

    with tempfile.TemporaryDirectory(prefix="bench-defence-") as results:
        run = protofed.run(CONFIG, overrides=overrides(nodes, rounds, defence, results),
                           backend="sim", progress=False)
        if not run.ok:
            raise RuntimeError(f"{defence} at {nodes} nodes: {run.summary.get('failed_nodes')}")
        refused = sum(len(r.refusals or []) for record in run.records for r in record.rounds)
        later = [r for record in run.records for r in record.rounds if r.round >= 1]
        undrawn = sum(len(r.undrawn_peers or []) for r in later) / max(len(later), 1)
        return {"nodes": nodes, "defence": defence, "rounds": rounds,
                "mean_f1": run.summary.get("mean_global_f1"), "refusals": refused,
                "drawn_per_node_round": nodes - 1 - undrawn, **per_round(run.records)}


def render(found: list[dict], command: str) -> str:
    """The report's table from the measured cells."""
    lines = ["# What a defence costs per node and round", "",
             (f"Produced by `{command}`; rebuilt from defence-cost.json by "
             "`python -m experiments.bench_defence --report-only`."), "",
             ("`examples/quick.toml` (ProFe, MNIST, 20,000 images) fully connected on the sim "
              "backend, where a node's clock is its thread's CPU time. Per node and round "
              "after the first: the aggregation step's seconds (checks, screens and the "
              "combination) and the whole round's CPU seconds, medians over nodes and rounds "
              "(and over the runs); "
              "beside them, what the screens add to `mean` (no screen), the in-neighbours "
              "a node took up in a round after the first (every one under `mean`; where a "
              "screen is on, at most aggregation.judged_per_round, drawn anew each round, the "
              "rest left out) and the "
              "refusals made in the run (none of them of an attacker: nobody attacks)."), "",
             ("| nodes | defence | aggregation s | round CPU s | added to `mean` (s) | "
             "share of the round | in-neighbours drawn | refusals | mean F1 |"),
             "|---|---|---|---|---|---|---|---|---|"]
    runs = found
    found = pooled(runs)
    base = {cell["nodes"]: cell for cell in found if cell["defence"] == "mean"}
    for cell in sorted(found, key=lambda c: (c["nodes"], MEASURED.index(c["defence"]))):
        plain = base.get(cell["nodes"])
        added = (f"{cell['aggregation_seconds'] - plain['aggregation_seconds']:+.3f}"
                 if plain and cell is not plain else "-")
        share = cell["aggregation_seconds"] / cell["round_cpu_seconds"]
        f1 = "-" if cell["mean_f1"] is None else f"{cell['mean_f1']:.4f}"
        drawn = cell.get("drawn_per_node_round")
        lines.append(f"| {cell['nodes']} | `{cell['defence']}` | "
                     f"{cell['aggregation_seconds']:.3f} | {cell['round_cpu_seconds']:.3f} | "
                     f"{added} | {share:.0%} | {'-' if drawn is None else f'{drawn:g}'} | "
                     f"{cell['refusals']} | {f1} |")
    phases = phase_lines(found, base, paired_ratios(runs),
                         paired_ratios(runs, per_fixed_work))
    return "\n".join(lines + ([""] + phases if phases else [])) + "\n"


# The phases shown in the per-phase table, the screens first (node.profile.PHASES).
SHOWN_PHASES = ("validation", "held_influence", "distance", "influence", "prototype_validation",
                "aggregation", "decode", "train", "teacher", "evaluation_global",
                "evaluation_local")


def pooled(runs: list[dict]) -> list[dict]:
    """One cell per size and defence from its repeats: the medians of the per-round
    figures, the CPU seconds and phases summed over the runs."""
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault((run["nodes"], run["defence"]), []).append(run)
    cells = []
    for group in groups.values():
        phases: dict[str, float] = {}
        for run in group:
            for phase, seconds in (run.get("phase_cpu_seconds") or {}).items():
                phases[phase] = phases.get(phase, 0.0) + seconds
        median = {key: statistics.median(run[key] for run in group)
                  for key in ("aggregation_seconds", "round_cpu_seconds", "refusals")}
        drawn = [run["drawn_per_node_round"] for run in group
                 if run.get("drawn_per_node_round") is not None]
        cells.append({**group[0], **median, "runs": len(group),
                      "drawn_per_node_round": statistics.median(drawn) if drawn else None,
                      "cpu_seconds": sum(run["cpu_seconds"] for run in group),
                      "rounds_measured": sum(run["rounds_measured"] for run in group),
                      "per_node_round": statistics.median(map(per_node_round, group)),
                      "phase_cpu_seconds": dict(sorted(phases.items()))})
    return cells


def phase_lines(found: list[dict], base: dict[int, dict], ratios: dict[tuple, list[float]],
                calibrated: dict[tuple, list[float]] | None = None) -> list[str]:
    """Per cell that recorded its phases: the run's CPU seconds per node-round after the
    first (the median over its runs), against `mean`'s at the same size (the median of the
    paired runs' ratios, each listed; and of their ratios per unit of fixed work,
    `per_fixed_work`), and each phase's share of them."""
    cells = sorted((c for c in found if c.get("phase_cpu_seconds")),
                   key=lambda c: (c["nodes"], MEASURED.index(c["defence"])))
    if not cells:
        return []
    lines = [("The whole run's CPU seconds per node-round after the first (every node's "
              "thread, the median over the runs), against `mean`'s at the same size (the "
              "median of the ratios of runs made side by side, each listed; and of the same "
              "ratios per unit of fixed work: each run's CPU over that of training, the "
              "teacher and both evaluations, whose arithmetic no defence changes, which takes "
              "out how fast the host ran during each run), and where they went (phases of "
              "the node records: `node.profile`; the screens are validation, held-class "
              "influence, distance, influence and prototype validation; aggregation is the checks, bounds and "
              "combination):"), "",
             "| nodes | defence | runs | CPU s per node-round | x `mean` | each pair | "
             "x `mean` per unit of fixed work | each pair | "
             + " | ".join(p.replace("_", " ") for p in SHOWN_PHASES) + " | other |",
             "|---|---|---|---|---|---|---|---|" + "---|" * (len(SHOWN_PHASES) + 1)]
    for cell in cells:
        per = cell.get("per_node_round", cell["cpu_seconds"] / cell["rounds_measured"])
        key = (cell["nodes"], cell["defence"])
        ratio, each = median_and_each(ratios.get(key, []))
        fixed, fixed_each = median_and_each((calibrated or {}).get(key, []))
        phases = cell["phase_cpu_seconds"]
        total = sum(phases.values())
        shown = [phases.get(p, 0.0) / total for p in SHOWN_PHASES]
        lines.append(f"| {cell['nodes']} | `{cell['defence']}` | {cell.get('runs', 1)} | "
                     f"{per:.3f} | {ratio} | {each} | {fixed} | {fixed_each} | "
                     + " | ".join(f"{v:.0%}" for v in shown) + f" | {1 - sum(shown):.0%} |")
    return lines


def median_and_each(ratios: list[float]) -> tuple[str, str]:
    """The median of paired ratios and each of them, as table cells ("-" for none)."""
    if not ratios:
        return "-", "-"
    return f"{statistics.median(ratios):.2f}x", ", ".join(f"{r:.2f}" for r in ratios)


def schedule(sizes: list[int], defences: list[str], repeats: int):
    """(nodes, repeat, defence) in the order run: each size's repeats one after another,
    the defences in turn within each, reversed every other repeat."""
    for nodes in sizes:
        for repeat in range(repeats):
            order = defences if repeat % 2 == 0 else defences[::-1]
            for defence in order:
                yield nodes, repeat, defence


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.bench_defence",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=1,
                        help="interleaved runs of each defence per size (default 1)")
    parser.add_argument("--defences", nargs="+", default=list(MEASURED), choices=MEASURED)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    store = args.out / "defence-cost.json"
    found = json.loads(store.read_text()) if store.is_file() else []
    if not args.report_only:
        if args.repeats < 1:
            parser.error("--repeats must be at least 1")
        measured = {(nodes, defence) for nodes in args.nodes for defence in args.defences}
        found = [c for c in found if (c["nodes"], c["defence"]) not in measured]
        for nodes, repeat, defence in schedule(args.nodes, args.defences, args.repeats):
            cell = {**measure(nodes, args.rounds, defence), "repeat": repeat}
            found.append(cell)
            store.write_text(json.dumps(found, indent=1))
            print(f"{nodes} nodes, run {repeat + 1} of {args.repeats}, {defence}: "
                  f"{cell['aggregation_seconds']:.3f} s of {cell['round_cpu_seconds']:.3f} "
                  "CPU s a round", file=sys.stderr)
    (args.out / "defence-cost.md").write_text(
        render(found, "python -m experiments.bench_defence"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
