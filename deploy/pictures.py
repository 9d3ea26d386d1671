"""What a run leaves to look at: a per-round CSV and pictures of the topology, the bytes and
the F1, written beside summary.json from the node records alone."""

from __future__ import annotations

import csv
import logging
from dataclasses import dataclass
from pathlib import Path

from node.record import NodeRecord, RoundRecord

log = logging.getLogger(__name__)

CSV_NAME = "rounds.csv"
CSV_COLUMNS = ("node", "round", "kind", "peer", "bytes_sent", "bytes_received", "f1",
               "accuracy", "seconds")
PICTURES = ("topology", "bytes_per_round", "f1_per_round")
FORMATS = ("png", "svg")
PICTURES_HINT = "pictures need matplotlib: pip install -e '.[experiments]'"


@dataclass(frozen=True)
class RunFiles:
    """What was written for a run; `hint` says why pictures are missing, if they are."""

    csv: Path
    pictures: tuple[Path, ...]
    hint: str = ""


def round_seconds(record: RoundRecord) -> float:
    """Wall seconds of one round: training, communication, aggregation and evaluation."""
    return (record.train_seconds + record.communication_seconds + record.aggregation_seconds
            + record.evaluation_seconds)


def round_rows(records: list[NodeRecord]) -> list[dict]:
    """One CSV row per node, round, message kind and peer (bytes each way); a round with no
    traffic (round 0) gets one row with empty kind and peer. F1, accuracy (global test,
    the method's rule) and seconds are the round's, repeated on each of its rows."""
    rows = []
    for node in records:
        for record in node.rounds:
            common = {"node": node.node, "round": record.round, "f1": record.global_test.f1,
                      "accuracy": record.global_test.accuracy,
                      "seconds": round(round_seconds(record), 6)}
            pairs = sorted({(peer, kind)
                            for by_peer in (record.bytes_sent_by_peer,
                                            record.bytes_received_by_peer)
                            for peer, kinds in by_peer.items() for kind in kinds},
                           key=lambda pair: (int(pair[0]), pair[1]))
            if not pairs:
                rows.append({**common, "kind": "", "peer": "", "bytes_sent": 0,
                             "bytes_received": 0})
            for peer, kind in pairs:
                rows.append({**common, "kind": kind, "peer": int(peer),
                             "bytes_sent": record.bytes_sent_by_peer.get(peer, {}).get(kind, 0),
                             "bytes_received":
                                 record.bytes_received_by_peer.get(peer, {}).get(kind, 0)})
    return [{column: row[column] for column in CSV_COLUMNS} for row in rows]


def edge_bytes(records: list[NodeRecord]) -> dict[tuple[int, int], int]:
    """Bytes each node sent along each of its out-edges over the whole run (every kind)."""
    edges = {}
    for node in records:
        for peer in node.out_neighbours:
            kinds = node.bytes_sent_by_peer.get(str(peer), {})
            edges[(node.node, peer)] = sum(kinds.values())
    return edges


def final_f1(node: NodeRecord) -> float | None:
    """The last recorded global-test F1, or None for a node that recorded no round."""
    return node.rounds[-1].global_test.f1 if node.rounds else None


def write_csv(path: Path, rows: list[dict]) -> Path:
    """The rows as a CSV file with a header line."""
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_run_files(run_dir: Path, records: list[NodeRecord]) -> RunFiles:
    """rounds.csv and, when matplotlib is installed, the pictures, in `run_dir`."""
    table = write_csv(run_dir / CSV_NAME, round_rows(records))
    try:
        pictures = draw(run_dir, records)
    except ImportError:
        return RunFiles(table, (), PICTURES_HINT)
    return RunFiles(table, pictures)


def draw(run_dir: Path, records: list[NodeRecord]) -> tuple[Path, ...]:
    """The topology, bytes-per-round and F1-per-round pictures; ImportError without
    matplotlib."""
    from matplotlib.figure import Figure  # no pyplot: no global state, no display needed

    paths = []
    for name, painter in zip(PICTURES, (_topology, _bytes_per_round, _f1_per_round)):
        figure = Figure(figsize=(6.4, 4.8))
        painter(figure, records)
        figure.tight_layout()
        for fmt in FORMATS:
            path = run_dir / f"{name}.{fmt}"
            figure.savefig(path, dpi=110, metadata={"Date": None} if fmt == "svg" else {})
            paths.append(path)
    return tuple(paths)


def _topology(figure, records: list[NodeRecord]) -> None:
    import matplotlib
    import networkx as nx

    graph = nx.DiGraph()
    graph.add_nodes_from(node.node for node in records)
    edges = edge_bytes(records)
    graph.add_edges_from(edges)
    largest = max(edges.values(), default=0) or 1
    axes = figure.add_subplot()
    layout = nx.circular_layout(graph)
    colour_map = matplotlib.colormaps["viridis"]
    scores = {node.node: final_f1(node) for node in records}
    nodes = list(graph.nodes)  # a peer with no record of its own is drawn grey
    colours = [colour_map(scores[n]) if scores.get(n) is not None else "lightgrey"
               for n in nodes]
    nx.draw_networkx_nodes(graph, layout, ax=axes, nodelist=nodes, node_color=colours,
                           node_size=500)
    nx.draw_networkx_labels(graph, layout, ax=axes)
    nx.draw_networkx_edges(graph, layout, ax=axes, edgelist=list(edges),
                           width=[0.5 + 4.5 * edges[e] / largest for e in edges],
                           arrows=True, arrowsize=10, connectionstyle="arc3,rad=0.08",
                           node_size=500, alpha=0.6)
    scale = matplotlib.cm.ScalarMappable(norm=matplotlib.colors.Normalize(0, 1),
                                         cmap=colour_map)
    figure.colorbar(scale, ax=axes, label="final F1 (global test)")
    axes.set_title(f"who sent to whom: edge width ∝ bytes (widest {largest:,} B)")
    axes.set_axis_off()


def _per_round(figure, records: list[NodeRecord], value, label: str, title: str) -> None:
    from matplotlib.ticker import MaxNLocator

    axes = figure.add_subplot()
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    for node in records:
        if node.rounds:
            axes.plot([r.round for r in node.rounds], [value(r) for r in node.rounds],
                      marker="o", markersize=3, label=f"node {node.node}")
    axes.set_xlabel("round (0: the untrained model)")
    axes.set_ylabel(label)
    axes.set_title(title)
    axes.grid(alpha=0.3)
    if 0 < len(records) <= 10:
        axes.legend(fontsize="small")


def _bytes_per_round(figure, records: list[NodeRecord]) -> None:
    _per_round(figure, records, lambda r: r.bytes_sent, "bytes sent",
               "bytes sent per node per round")


def _f1_per_round(figure, records: list[NodeRecord]) -> None:
    _per_round(figure, records, lambda r: r.global_test.f1, "macro-F1 (global test)",
               "F1 per node per round")
    figure.axes[0].set_ylim(0, 1)
