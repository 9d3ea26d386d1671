"""The figures decentralized-learning papers compare topologies by, from the node records
alone: consensus distance per round, and rounds, seconds and bytes until the federation's
mean F1 first reaches a target. Rounds a node was away are left out: it has no record."""

from __future__ import annotations

from typing import Any

from node.consensus import consensus_distance, distances_from_mean, from_text
from node.record import NodeRecord, measured


def round_means(records: list[NodeRecord]) -> dict[int, float]:
    """Each round's mean global F1 over the nodes that measured it (report.eval_every)."""
    by_round: dict[int, list[float]] = {}
    for node in records:
        for record in node.rounds:
            if measured(record.global_test):
                by_round.setdefault(record.round, []).append(record.global_test.f1)
    return {r: sum(v) / len(v) for r, v in sorted(by_round.items())}


def sketches(records: list[NodeRecord], round_: int) -> dict[int, Any]:
    """Node -> its model sketch in `round_`, for the nodes that recorded one."""
    out = {}
    for node in records:
        for record in node.rounds:
            if record.round == round_ and record.model_sketch:
                values = from_text(record.model_sketch)
                if len(values):
                    out[node.node] = values
    return out


def consensus_by_round(records: list[NodeRecord]) -> dict[int, float | None]:
    """Each round's consensus distance over the nodes present (None where it cannot be
    told: fewer than two sketches, or models of different sizes)."""
    rounds = sorted({r.round for node in records for r in node.rounds})
    return {r: consensus_distance(list(sketches(records, r).values())) for r in rounds}


def node_distances(records: list[NodeRecord]) -> dict[tuple[int, int], float]:
    """(node, round) -> the node's squared distance from the round's mean model."""
    rounds = sorted({r.round for node in records for r in node.rounds})
    return {(node, r): value for r in rounds
            for node, value in distances_from_mean(sketches(records, r)).items()}


def bytes_through(records: list[NodeRecord], round_: int) -> int:
    """Bytes every node sent in rounds 0..round_, together."""
    return sum(r.bytes_sent for node in records for r in node.rounds if r.round <= round_)


def to_target(records: list[NodeRecord], target_f1: float) -> dict[str, Any] | None:
    """When the mean global F1 first reached `target_f1`: the round, the seconds from the
    first node's start to the last record of that round, and the bytes sent until then
    (all None where it never did); None without a target."""
    if not target_f1:
        return None
    reached = next((r for r, mean in round_means(records).items() if mean >= target_f1), None)
    found = {"target_f1": target_f1, "round": reached, "seconds": None, "bytes": None}
    starts = [node.started_at for node in records if node.started_at]
    if reached is not None:
        stamps = [r.recorded_at for node in records for r in node.rounds
                  if r.round == reached and r.recorded_at]
        if starts and stamps:
            found["seconds"] = round(max(stamps) - min(starts), 3)
        found["bytes"] = bytes_through(records, reached)
    return found


def dynamics(records: list[NodeRecord], target_f1: float) -> dict[str, Any]:
    """The summary's part: consensus distance by round, mean F1 by round, the target."""
    consensus = consensus_by_round(records)
    return {"mean_f1_by_round": {str(r): round(v, 6) for r, v in round_means(records).items()},
            "consensus_distance_by_round": {str(r): v for r, v in consensus.items()
                                            if v is not None} or None,
            "to_target": to_target(records, target_f1)}


def describe(summary: dict[str, Any]) -> list[str]:
    """Lines under the table: the last round's consensus distance and the target."""
    lines = []
    consensus = summary.get("consensus_distance_by_round") or {}
    if consensus:
        last = max(consensus, key=int)
        lines.append(f"Consensus distance (mean squared distance of the exchanged models from "
                     f"their average) after round {last}: {consensus[last]:.4g}.")
    target = summary.get("to_target")
    if target:
        if target["round"] is None:
            lines.append(f"The mean global F1 never reached the target {target['target_f1']:g}.")
        else:
            seconds = f"{target['seconds']:.1f} s, " if target["seconds"] is not None else ""
            lines.append(f"The mean global F1 first reached {target['target_f1']:g} in round "
                         f"{target['round']} ({seconds}{target['bytes']:,} bytes sent by all "
                         "nodes until then).")
    return lines
