"""Read node result files into one summary and format the end-of-run table."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.run_folder import read_node_results
from deploy.views.dynamics import describe
from node.profile import shares, summed
from node.record import Evaluation, NodeRecord, final_evaluation, measured

AVERAGED = ("finished", "stopped")  # statuses whose last F1 the total row's means count


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
    the nodes that finished or were stopped (`down`, Ctrl-C: their last round's F1 is
    theirs); a dead or failed node's last F1 is stale and left out."""
    rows = []
    for result in records:
        global_ = final_evaluation(result, "global_test") or Evaluation()
        local = final_evaluation(result, "local_test") or Evaluation()
        # a test set with no image (none held out) measures nothing: no figure
        has_global, has_local = (bool(result.rounds) and measured(e)
                                 for e in (global_, local))
        rows.append({
            "node": result.node,
            "status": node_status(result, (exit_codes or {}).get(result.node)),
            "rule": global_.rule or None,
            "global_f1_by_rule": {rule: m["f1"] for rule, m in global_.by_rule.items()},
            "in_neighbours": result.in_neighbours, "out_neighbours": result.out_neighbours,
            "rounds_done": result.rounds_done,
            "bytes_sent": result.bytes_sent, "bytes_received": result.bytes_received,
            "global_f1": global_.f1 if has_global else None,
            "global_accuracy": global_.accuracy if has_global else None,
            "local_f1": local.f1 if has_local else None,
            "local_accuracy": local.accuracy if has_local else None,
            "elapsed_seconds": result.elapsed_seconds,
            "dropped_messages": result.dropped_count or len(result.dropped_messages),
            "interface_bytes": result.interface_bytes,
            "machine": result.machine,
            "in_links": in_link_rates(result),
            "error": result.error,
            "phases": summed([r.phases for r in result.rounds]),
        })
    finished = [r for r in rows if r["global_f1"] is not None and r["status"] in AVERAGED]
    summary = {
        "run_id": run_id, "nodes": rows,
        "totals": {"bytes_sent": sum(r["bytes_sent"] for r in rows),
                   "bytes_received": sum(r["bytes_received"] for r in rows)},
        "mean_global_f1": _mean([r["global_f1"] for r in finished]),
        "mean_global_accuracy": _mean([r["global_accuracy"] for r in finished]),
        "failed_nodes": [r["node"] for r in rows if r["status"] not in ("finished", "left")],
        "phases": summed([r["phases"] for r in rows]),
        "no_global_test": any(r.rounds for r in records) and not any(
            measured(r.rounds[-1].global_test) for r in records if r.rounds),
    }
    summary.update(extra or {})
    return summary


def in_link_rates(result: NodeRecord) -> dict[str, dict[str, float]] | None:
    """[links] runs: per in-neighbour, the configured bandwidth and the achieved one (bits/s
    over the timed transfers of models and prototypes), None where not shaped."""
    if result.in_link_bandwidth is None:
        return None
    bits: dict[str, float] = {}
    seconds: dict[str, float] = {}
    for record in result.rounds:
        for peer, kinds in (record.transfer_seconds_by_peer or {}).items():
            for kind, took in kinds.items():
                size = record.bytes_received_by_peer.get(peer, {}).get(kind, 0)
                bits[peer] = bits.get(peer, 0.0) + 8 * size
                seconds[peer] = seconds.get(peer, 0.0) + took
    return {peer: {"configured": float(configured),
                   "achieved": bits[peer] / seconds[peer] if seconds.get(peer) else 0.0}
            for peer, configured in result.in_link_bandwidth.items()}


def slowest_in_link(links: dict[str, dict[str, float]] | None) -> str:
    """'4.81 of 5 Mbit/s (from 0)': the achieved rate of the in-link set slowest."""
    if not links:
        return "-"
    peer, rates = min(links.items(), key=lambda item: (item[1]["configured"] or float("inf"),
                                                       int(item[0])))
    achieved = f"{rates['achieved'] / 1e6:.2f}" if rates["achieved"] else "untimed"
    configured = f"{rates['configured'] / 1e6:g}" if rates["configured"] else "unlimited"
    return f"{achieved} of {configured} (from {peer})"


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


@dataclass(frozen=True, eq=False)
class Column:
    """One table column: its header, a cell per node row and the total row's cell, and
    its rank (the lowest ranked are left out first when the table must be narrower)."""

    header: str
    cells: list[str]
    total: str
    rank: int

    def width(self) -> int:
        return max(len(self.header), len(self.total), *map(len, self.cells))


# Left out first when the terminal is narrow: wire bytes, the other rules, accuracy, degree.
RANK_WIRE, RANK_OTHER_RULE, RANK_ACCURACY, RANK_DEGREE, RANK_LOCAL, RANK_KEEP = range(6)


def table_columns(summary: dict[str, Any]) -> list[Column]:
    """Every column of the end table, in display order."""
    nodes = summary["nodes"]
    rule = next((r["rule"] for r in nodes if r.get("rule")), None)
    others = sorted({o for r in nodes for o in r.get("global_f1_by_rule", {})} - {rule})
    finished = [r for r in nodes if r["global_f1"] is not None and r["status"] in AVERAGED]
    totals = summary["totals"]
    columns = [
        Column("node", [str(r["node"]) for r in nodes], "total", RANK_KEEP),
        Column("out/in", [f"{len(r['out_neighbours'])}/{len(r['in_neighbours'])}"
                          for r in nodes], "", RANK_DEGREE),
        Column("bytes sent", [f"{r['bytes_sent']:,}" for r in nodes],
               f"{totals['bytes_sent']:,}", RANK_KEEP),
        Column("bytes received", [f"{r['bytes_received']:,}" for r in nodes],
               f"{totals['bytes_received']:,}", RANK_KEEP)]
    if any(r.get("machine") for r in nodes):  # a swarm: which machine each node ran on
        columns.append(Column("machine", [r.get("machine") or "-" for r in nodes], "",
                              RANK_KEEP))
    wire = [r.get("interface_bytes") or {} for r in nodes]
    if any(wire):  # containers: what their network interface moved, beside the application
        for key, header in (("tx_bytes", "iface sent"), ("rx_bytes", "iface received")):
            columns.append(Column(header, [f"{w[key]:,}" if w else "-" for w in wire],
                                  f"{sum(w.get(key, 0) for w in wire):,}", RANK_WIRE))
    if any(r.get("in_links") for r in nodes):  # [links]: achieved beside configured
        columns.append(Column("in-link Mbit/s", [slowest_in_link(r.get("in_links"))
                                                for r in nodes], "", RANK_LOCAL))
    columns += [
        Column("F1 global", [_fmt(r["global_f1"]) for r in nodes],
               _fmt(summary["mean_global_f1"]), RANK_KEEP),
        Column("acc global", [_fmt(r["global_accuracy"]) for r in nodes],
               _fmt(summary["mean_global_accuracy"]), RANK_ACCURACY),
        Column("F1 local", [_fmt(r["local_f1"]) for r in nodes], "", RANK_LOCAL)]
    for other in others:
        columns.append(Column(
            f"F1 global ({other})",
            [_fmt(r.get("global_f1_by_rule", {}).get(other)) for r in nodes],
            _fmt(_mean([r["global_f1_by_rule"][other] for r in finished
                        if other in r.get("global_f1_by_rule", {})])), RANK_OTHER_RULE))
    columns.append(Column("status", [r["status"] for r in nodes], "", RANK_KEEP))
    return columns


def fitting(columns: list[Column], width: int | None) -> list[Column]:
    """The columns that fit in `width` characters, lowest ranks left out first (the
    rightmost of equal rank first); all of them when `width` is None."""
    kept = list(columns)
    order = sorted(range(len(columns)), key=lambda i: (columns[i].rank, -i))
    for column in (columns[i] for i in order):
        if width is None or _line_width(kept) <= width or column.rank == RANK_KEEP:
            break
        kept.remove(column)
    return kept


def _line_width(columns: list[Column]) -> int:
    return sum(c.width() for c in columns) + 2 * (len(columns) - 1)


ROW_LIMIT = 20  # more nodes than this: the table shows the extremes (every row with --all)
EXTREMES = 5


def shown_rows(summary: dict[str, Any], every: bool = False) -> list[int]:
    """Indices of the nodes the table shows: all of them up to ROW_LIMIT (or with
    `every`), else every node that did not finish and the EXTREMES best and worst by
    global F1, in node order."""
    nodes = summary["nodes"]
    if every or len(nodes) <= ROW_LIMIT:
        return list(range(len(nodes)))
    unfinished = {i for i, r in enumerate(nodes) if r["status"] != "finished"
                  or r["global_f1"] is None}
    ranked = sorted((i for i in range(len(nodes)) if i not in unfinished),
                    key=lambda i: (nodes[i]["global_f1"], i))
    return sorted(unfinished | set(ranked[:EXTREMES]) | set(ranked[-EXTREMES:]))


def format_table(summary: dict[str, Any], width: int | None = None,
                 every: bool = False, *, show_every_column: str = "--wide",
                 show_every_node: str = "--all") -> str:
    """A fixed-width table: one row per node (the extremes only beyond ROW_LIMIT nodes,
    unless `every`), then the totals over all nodes, then what the figures mean. With
    `width`, columns are left out until every line fits (and the footnote says so, naming
    `show_every_column`, as it names `show_every_node` where nodes are left out)."""
    columns = table_columns(summary)
    kept = fitting(columns, width)
    last = len(kept) - 1

    def line(cells: list[str]) -> str:
        return "  ".join(cell.rjust(c.width()) if 0 < i < last else cell.ljust(c.width())
                         for i, (cell, c) in enumerate(zip(cells, kept))).rstrip()

    rule = next((r["rule"] for r in summary["nodes"] if r.get("rule")), None)
    separator = "  ".join("-" * c.width() for c in kept)
    shown = shown_rows(summary, every)
    rows = [line([c.cells[i] for c in kept]) for i in shown]
    notes = ["F1 and accuracy: the global test set" + (f", {rule} rule" if rule else "")
             + "; in the total row, the mean over the finished nodes"
             + (" and those stopped" if any(r["status"] == "stopped" for r in summary["nodes"])
                else "") + "."]
    if summary.get("no_global_test"):
        notes = [("No global test set (data.global_test_fraction = 0): F1 global is not "
                  "measured; F1 local is each node's own test split.")]
    if len(shown) < len(summary["nodes"]):
        notes.append(f"Shown: {len(shown)} of {len(summary['nodes'])} nodes, the "
                     f"{EXTREMES} best and {EXTREMES} worst by global F1 and any that did not "
                     f"finish; the totals are over all of them ({show_every_node} shows every "
                     "node).")
    notes += describe(summary) + phase_note(summary)
    left_out = [c.header for c in columns if c not in kept]
    if left_out:
        notes.append(f"Not shown at this width: {', '.join(left_out)} ({show_every_column} "
                     "shows every column).")
    return "\n".join([line([c.header for c in kept]), separator, *rows, separator,
                      line([c.total for c in kept]), *_wrapped(notes, width)])


def phase_note(summary: dict[str, Any]) -> list[str]:
    """Where the nodes' CPU time went, phase by phase, summed over nodes and rounds."""
    phases = summary.get("phases") or {}
    spent = shares(phases)
    if not spent:
        return []
    parts = [f"{name.replace('_', ' ')} {share:.0%}" for name, share in
             sorted(spent.items(), key=lambda item: -item[1]) if share >= 0.005]
    cpu = sum(seconds for _, seconds in phases.values())
    note = (f"CPU time by phase ({cpu:,.1f} s over every node and round): "
            f"{', '.join(parts)} (per node and round in phases.csv).")
    return [note]


def _wrapped(notes: list[str], width: int | None) -> list[str]:
    return [part for note in notes
            for part in (textwrap.wrap(note, width) if width else [note])]
