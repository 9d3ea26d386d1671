"""Interleaved benchmark runs compared in pairs: each run against `mean`'s run of the same
size and repeat, raw or per unit of fixed work (experiments.bench_defence makes the runs;
experiments.robustness reads their verdict)."""

from __future__ import annotations


def repeat_of(cell: dict) -> int:
    """Which of a size's interleaved repeats a run was (0 for a run made alone)."""
    return cell.get("repeat", 0)


def per_node_round(cell: dict) -> float:
    """A run's CPU seconds per node-round after the first."""
    return cell["cpu_seconds"] / cell["rounds_measured"]


# The phases whose arithmetic is the same under every defence (the same data, steps and
# test sets): what they cost in a run measures the host's speed during it.
FIXED_PHASES = ("train", "teacher", "evaluation_global", "evaluation_local")


def per_fixed_work(run: dict) -> float | None:
    """A run's CPU seconds over those of its FIXED_PHASES (None where it recorded none)."""
    fixed = sum((run.get("phase_cpu_seconds") or {}).get(p, 0.0) for p in FIXED_PHASES)
    return run["cpu_seconds"] / fixed if fixed > 0 else None


def paired_ratios(runs: list[dict], measure=per_node_round) -> dict[tuple, list[float]]:
    """Per size and defence, its `measure` (by default CPU per node-round) over `mean`'s in
    the same repeat, in the order of the repeats."""
    plain = {(run["nodes"], repeat_of(run)): run for run in runs if run["defence"] == "mean"}
    ratios: dict[tuple, list[float]] = {}
    for run in sorted(runs, key=repeat_of):
        partner = plain.get((run["nodes"], repeat_of(run)))
        if partner is None or run is partner:
            continue
        mine, theirs = measure(run), measure(partner)
        if mine is not None and theirs:
            ratios.setdefault((run["nodes"], run["defence"]), []).append(mine / theirs)
    return ratios
