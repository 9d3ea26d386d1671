"""Read node result files into one summary and format the end-of-run table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from node.record import Evaluation, NodeRecord, final_evaluation


def read_node_results(results_dir: Path, nodes: int) -> list[NodeRecord]:
    """Every node's record; a node that wrote none (or garbage) gets a 'missing' one."""
    out = []
    for node_id in range(nodes):
        path = results_dir / f"node-{node_id}.json"
        try:
            out.append(NodeRecord.from_dict(json.loads(path.read_text())))
        except (OSError, ValueError, TypeError, AttributeError):
            out.append(NodeRecord(node=node_id))
    return out


def node_status(result: NodeRecord, exit_code: int | None) -> str:
    """The node's status; a node whose process ended while its file says it was still
    working died without a word (killed): it is "dead", not "running"."""
    if exit_code is not None and result.status in ("starting", "running"):
        return "dead"
    return result.status


def summarize(results_dir: Path, run_id: str, nodes: int,
              extra: dict[str, Any] | None = None,
              exit_codes: dict[int, int] | None = None) -> dict[str, Any]:
    """The summary of the run recorded in `results_dir` (see `summarize_records`)."""
    return summarize_records(read_node_results(results_dir, nodes), run_id, extra, exit_codes)


def summarize_records(records: list[NodeRecord], run_id: str,
                      extra: dict[str, Any] | None = None,
                      exit_codes: dict[int, int] | None = None) -> dict[str, Any]:
    """One summary of a run: per-node bytes and final metrics, plus totals, and means over
    the nodes that finished (a dead node's last F1 is stale and left out)."""
    rows = []
    for result in records:
        global_ = final_evaluation(result, "global_test") or Evaluation()
        local = final_evaluation(result, "local_test") or Evaluation()
        measured = bool(result.rounds)
        rows.append({
            "node": result.node,
            "status": node_status(result, (exit_codes or {}).get(result.node)),
            "rule": global_.rule or None,
            "global_f1_by_rule": {rule: m["f1"] for rule, m in global_.by_rule.items()},
            "in_neighbours": result.in_neighbours, "out_neighbours": result.out_neighbours,
            "rounds_done": result.rounds_done,
            "bytes_sent": result.bytes_sent, "bytes_received": result.bytes_received,
            "global_f1": global_.f1 if measured else None,
            "global_accuracy": global_.accuracy if measured else None,
            "local_f1": local.f1 if measured else None,
            "local_accuracy": local.accuracy if measured else None,
            "elapsed_seconds": result.elapsed_seconds,
            "dropped_messages": result.dropped_count or len(result.dropped_messages),
            "interface_bytes": result.interface_bytes,
            "error": result.error,
        })
    finished = [r for r in rows if r["global_f1"] is not None and r["status"] == "finished"]
    summary = {
        "run_id": run_id, "nodes": rows,
        "totals": {"bytes_sent": sum(r["bytes_sent"] for r in rows),
                   "bytes_received": sum(r["bytes_received"] for r in rows)},
        "mean_global_f1": _mean([r["global_f1"] for r in finished]),
        "mean_global_accuracy": _mean([r["global_accuracy"] for r in finished]),
        "failed_nodes": [r["node"] for r in rows if r["status"] != "finished"],
    }
    summary.update(extra or {})
    return summary


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def format_table(summary: dict[str, Any]) -> str:
    """A fixed-width table: one row per node, then the totals."""
    rule = next((r["rule"] for r in summary["nodes"] if r.get("rule")), None)
    others = sorted({o for r in summary["nodes"] for o in r.get("global_f1_by_rule", {})}
                    - {rule})
    named = f" ({rule})" if rule else ""
    header = ("node", "out/in", "bytes sent", "bytes received", f"F1 global{named}",
              f"acc global{named}", f"F1 local{named}",
              *(f"F1 global ({o})" for o in others), "status")
    rows = [(str(r["node"]), f"{len(r['out_neighbours'])}/{len(r['in_neighbours'])}",
             f"{r['bytes_sent']:,}", f"{r['bytes_received']:,}", _fmt(r["global_f1"]),
             _fmt(r["global_accuracy"]), _fmt(r["local_f1"]),
             *(_fmt(r.get("global_f1_by_rule", {}).get(o)) for o in others), r["status"])
            for r in summary["nodes"]]
    totals = summary["totals"]
    finished = [r for r in summary["nodes"]
                if r["global_f1"] is not None and r["status"] == "finished"]
    rows.append(("total", "", f"{totals['bytes_sent']:,}", f"{totals['bytes_received']:,}",
                 _fmt(summary["mean_global_f1"]), _fmt(summary["mean_global_accuracy"]),
                 "(mean of finished)",
                 *(_fmt(_mean([r["global_f1_by_rule"][o] for r in finished
                               if o in r.get("global_f1_by_rule", {})])) for o in others),
                 ""))
    if any(r.get("interface_bytes") for r in summary["nodes"]):
        # Containers: the bytes their network interface moved, beside the application's.
        header = (*header[:4], "iface sent", "iface received", *header[4:])
        wire = [r.get("interface_bytes") or {} for r in summary["nodes"]]
        cells = [(f"{w['tx_bytes']:,}", f"{w['rx_bytes']:,}") if w else ("-", "-") for w in wire]
        cells.append((f"{sum(w.get('tx_bytes', 0) for w in wire):,}",
                      f"{sum(w.get('rx_bytes', 0) for w in wire):,}"))
        rows = [(*row[:4], *cell, *row[4:]) for row, cell in zip(rows, cells)]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    last = len(header) - 1

    def line(row: tuple[str, ...]) -> str:
        return "  ".join(cell.rjust(w) if 0 < i < last else cell.ljust(w)
                         for i, (cell, w) in enumerate(zip(row, widths))).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *map(line, rows[:-1]), rule, line(rows[-1])])
