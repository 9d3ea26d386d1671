"""What each defence costs a node per round: the seconds of its aggregation step (where the
checks, the screens and the combination run) beside the whole round's CPU seconds, on the
sim backend, where a node's clock is its thread's CPU time.

    python -m experiments.bench_defence [--nodes 10 100] [--rounds 2] [--out DIR]
        [--report-only]

Each cell is `examples/quick.toml` (ProFe, a 20,000-image MNIST subset) fully connected,
run with `protofed.run(..., backend="sim")` under one defence of the robustness report
(experiments.robustness.DEFENCES; `mean` is no screen at all). Per node and round after
round 1 (round 1 also builds and warms up), the aggregation step's seconds and the round's
CPU seconds (the difference of the record's cumulative `cpu_seconds`), medians over nodes
and rounds. Results go to OUT/defence-cost.json; OUT/defence-cost.md is rebuilt from it
alone (`--report-only`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
from pathlib import Path

from experiments.robustness import DEFENCES

OUT = Path(__file__).resolve().parent / "reports" / "robustness"
CONFIG = Path(__file__).resolve().parent.parent / "examples" / "quick.toml"
MEASURED = ("mean", "validated", "distance2", "influence", "clipped2", "guarded_wide",
            "guarded_own3_floor1")


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
              "combination) and the whole round's CPU seconds, medians over nodes and rounds; "
              "beside them, what the screens add to `mean` (no screen), the in-neighbours "
              "a node took up in a round after the first (every one under `mean`; where a "
              "screen is on, at most aggregation.judged_per_round, drawn anew each round, the "
              "rest left out) and the "
              "refusals made in the run (none of them of an attacker: nobody attacks)."), "",
             ("| nodes | defence | aggregation s | round CPU s | added to `mean` (s) | "
             "share of the round | in-neighbours drawn | refusals | mean F1 |"),
             "|---|---|---|---|---|---|---|---|---|"]
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
    phases = phase_lines(found, base)
    return "\n".join(lines + ([""] + phases if phases else [])) + "\n"


# The phases shown in the per-phase table, the screens first (node.profile.PHASES).
SHOWN_PHASES = ("validation", "held_influence", "distance", "influence", "prototype_validation",
                "aggregation", "decode", "train", "teacher", "evaluation_global",
                "evaluation_local")


def phase_lines(found: list[dict], base: dict[int, dict]) -> list[str]:
    """Per cell that recorded its phases: the run's CPU seconds per node-round after the
    first, against `mean`'s at the same size, and each phase's share of them."""
    cells = sorted((c for c in found if c.get("phase_cpu_seconds")),
                   key=lambda c: (c["nodes"], MEASURED.index(c["defence"])))
    if not cells:
        return []
    lines = [("The whole run's CPU seconds per node-round after the first (every node's "
              "thread), against `mean`'s at the same size, and where they went (phases of "
              "the node records: `node.profile`; the screens are validation, held-class "
              "influence, distance, influence and prototype validation; aggregation is the checks, bounds and "
              "combination):"), "",
             "| nodes | defence | CPU s per node-round | x `mean` | "
             + " | ".join(p.replace("_", " ") for p in SHOWN_PHASES) + " | other |",
             "|---|---|---|---|" + "---|" * (len(SHOWN_PHASES) + 1)]
    for cell in cells:
        per = cell["cpu_seconds"] / cell["rounds_measured"]
        plain = base.get(cell["nodes"])
        ratio = (f"{cell['cpu_seconds'] / plain['cpu_seconds']:.2f}x"
                 if plain and plain.get("cpu_seconds") and cell is not plain else "-")
        phases = cell["phase_cpu_seconds"]
        total = sum(phases.values())
        shown = [phases.get(p, 0.0) / total for p in SHOWN_PHASES]
        lines.append(f"| {cell['nodes']} | `{cell['defence']}` | {per:.3f} | {ratio} | "
                     + " | ".join(f"{v:.0%}" for v in shown) + f" | {1 - sum(shown):.0%} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.bench_defence",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--defences", nargs="+", default=list(MEASURED), choices=MEASURED)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    store = args.out / "defence-cost.json"
    found = json.loads(store.read_text()) if store.is_file() else []
    if not args.report_only:
        for nodes in args.nodes:
            for defence in args.defences:
                cell = measure(nodes, args.rounds, defence)
                found = [c for c in found if (c["nodes"], c["defence"]) != (nodes, defence)]
                found.append(cell)
                store.write_text(json.dumps(found, indent=1))
                print(f"{nodes} nodes, {defence}: {cell['aggregation_seconds']:.3f} s of "
                      f"{cell['round_cpu_seconds']:.3f} CPU s a round", file=sys.stderr)
    (args.out / "defence-cost.md").write_text(
        render(found, "python -m experiments.bench_defence"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
