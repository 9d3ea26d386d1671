"""What a run leaves to look at: a per-round CSV and pictures of the topology, the bytes and
the F1, written beside summary.json from the node records alone."""

from __future__ import annotations

import contextlib
import csv
import io
import logging
import math
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from deploy.views.dynamics import consensus_by_round, node_distances
from node.net.kinds import PAYLOAD_KINDS
from node.profile import PHASES
from node.record import NodeRecord, RoundRecord, final_evaluation, measured

log = logging.getLogger(__name__)

CSV_NAME = "rounds.csv"
CSV_COLUMNS = ("node", "round", "kind", "peer", "bytes_sent", "bytes_received", "f1",
               "accuracy", "seconds", "transfer_seconds", "consensus_distance",
               "distance_from_mean")
PICTURES = ("topology", "bytes_per_round", "f1_per_round")
# drawn where the run has what they show: model sketches; a graph that changed
DYNAMIC_PICTURES = ("consensus_per_round", "edge_activity")
PICTURE_SIZES = {"bytes_per_round": (10.0, 4.4)}  # two panels side by side
FORMATS = ("png", "svg")
PICTURES_OFF = ("no pictures drawn (report.pictures = false): `protofed report RUN` draws "
                "them")
PICTURES_HINT = ("pictures need matplotlib, which this environment lacks (protofed depends on "
                 "it): pip install matplotlib")


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
    the method's rule) and seconds are the round's, repeated on each of its rows;
    transfer_seconds, in runs with [links], is how long what came from that peer took on
    its link (empty when not timed)."""
    rows = []
    consensus = consensus_by_round(records)
    distances = node_distances(records)
    for node in records:
        for record in node.rounds:
            scored = measured(record.global_test)  # no test set, or not evaluated: blank
            common = {"node": node.node, "round": record.round,
                      "f1": record.global_test.f1 if scored else "",
                      "accuracy": record.global_test.accuracy if scored else "",
                      "seconds": round(round_seconds(record), 6),
                      "consensus_distance": _blank(consensus.get(record.round)),
                      "distance_from_mean": _blank(distances.get((node.node, record.round)))}
            pairs = sorted({(peer, kind)
                            for by_peer in (record.bytes_sent_by_peer,
                                            record.bytes_received_by_peer)
                            for peer, kinds in by_peer.items() for kind in kinds},
                           key=lambda pair: (int(pair[0]), pair[1]))
            timed = record.transfer_seconds_by_peer or {}
            if not pairs:
                rows.append({**common, "kind": "", "peer": "", "bytes_sent": 0,
                             "bytes_received": 0, "transfer_seconds": ""})
            for peer, kind in pairs:
                rows.append({**common, "kind": kind, "peer": int(peer),
                             "transfer_seconds": timed.get(peer, {}).get(kind, ""),
                             "bytes_sent": record.bytes_sent_by_peer.get(peer, {}).get(kind, 0),
                             "bytes_received":
                                 record.bytes_received_by_peer.get(peer, {}).get(kind, 0)})
    return [{column: row[column] for column in CSV_COLUMNS} for row in rows]


def _blank(value: float | None) -> float | str:
    return "" if value is None else value


def active_rounds(records: list[NodeRecord]) -> tuple[int, dict[tuple[int, int], int]]:
    """(rounds that exchanged anything, {(u, v): rounds in which u sent v a model or
    prototypes}), from the bytes each node recorded per round and peer."""
    rounds: set[int] = set()
    edges: dict[tuple[int, int], int] = {}
    for node in records:
        for record in node.rounds:
            for peer, kinds in record.bytes_sent_by_peer.items():
                if any(kind in PAYLOAD_KINDS for kind in kinds):
                    rounds.add(record.round)
                    edges[(node.node, int(peer))] = edges.get((node.node, int(peer)), 0) + 1
    return len(rounds), edges


def graph_changed(records: list[NodeRecord]) -> bool:
    """Whether some node's payload peers differed between two rounds it exchanged in."""
    for node in records:
        seen = {frozenset(peer for peer, kinds in r.bytes_sent_by_peer.items()
                          if any(kind in PAYLOAD_KINDS for kind in kinds))
                for r in node.rounds if r.round > 0}
        if len(seen - {frozenset()}) > 1:
            return True
    return False


def edge_bytes(records: list[NodeRecord]) -> dict[tuple[int, int], int]:
    """Bytes each node sent along each of its out-edges over the whole run (every kind)."""
    edges = {}
    for node in records:
        for peer in node.out_neighbours:
            kinds = node.bytes_sent_by_peer.get(str(peer), {})
            edges[(node.node, peer)] = sum(kinds.values())
    return edges


BYTE_UNITS = (("GB", 10**9), ("MB", 10**6), ("KB", 10**3))  # decimal, as the table's


def byte_unit(largest: float) -> tuple[str, int]:
    """The unit to show byte counts up to `largest` in: (name, bytes per unit)."""
    return next(((name, size) for name, size in BYTE_UNITS if largest >= size), ("B", 1))


def bytes_text(count: float) -> str:
    """A byte count for a label: '512 B', '12.8 KB', '3.41 MB', '1,204 MB' (3 digits)."""
    name, size = byte_unit(count)
    value = count / size
    digits = 0 if size == 1 or value >= 100 else (1 if value >= 10 else 2)
    return f"{value:,.{digits}f} {name}"


def bytes_by_kind(records: list[NodeRecord]) -> tuple[list[int], dict[str, list[int]]]:
    """(rounds, {message kind: bytes every node sent in each of those rounds}), the kinds
    in name order; a kind a round did not carry counts 0 there."""
    rounds = sorted({r.round for node in records for r in node.rounds})
    index = {k: i for i, k in enumerate(rounds)}
    series: dict[str, list[int]] = {}
    for node in records:
        for record in node.rounds:
            for kinds in record.bytes_sent_by_peer.values():
                for kind, sent in kinds.items():
                    series.setdefault(kind, [0] * len(rounds))[index[record.round]] += sent
    return rounds, dict(sorted(series.items()))


def cumulative(values: list[int]) -> list[int]:
    """Running totals of `values`."""
    totals, running = [], 0
    for value in values:
        running += value
        totals.append(running)
    return totals


def label_colour(rgba: tuple[float, ...] | str) -> str:
    """Black on a light node, white on a dark one (relative luminance, ITU-R BT.709)."""
    if isinstance(rgba, str):
        return "black"
    red, green, blue = rgba[:3]
    return "black" if 0.2126 * red + 0.7152 * green + 0.0722 * blue > 0.45 else "white"


def prediction_rule(records: list[NodeRecord]) -> str | None:
    """The rule the nodes' F1 is measured with (argmax, prototype, ...), if recorded."""
    return next((evaluation.rule for node in records
                 if (evaluation := final_evaluation(node, "global_test")) is not None
                 and evaluation.rule), None)


PHASES_CSV = "phases.csv"
PHASE_COLUMNS = ("node", "round", "phase", "seconds", "cpu_seconds")


def phase_rows(records: list[NodeRecord]) -> list[dict]:
    """One row per node, round and phase (node.profile.PHASES) the round spent time in."""
    return [{"node": node.node, "round": record.round, "phase": phase,
             "seconds": spent[0], "cpu_seconds": spent[1]}
            for node in records for record in node.rounds
            for phase in PHASES if (spent := (record.phases or {}).get(phase)) is not None]


def write_csv(path: Path, rows: list[dict], columns: tuple[str, ...] = CSV_COLUMNS) -> Path:
    """The rows as a CSV file with a header line."""
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_run_files(run_dir: Path, records: list[NodeRecord],
                    pictures: bool = True) -> RunFiles:
    """rounds.csv, phases.csv and, when asked (`pictures`) and matplotlib is installed, the
    pictures, in `run_dir`."""
    table = write_csv(run_dir / CSV_NAME, round_rows(records))
    write_csv(run_dir / PHASES_CSV, phase_rows(records), PHASE_COLUMNS)
    if not pictures:
        return RunFiles(table, (), PICTURES_OFF)
    try:
        pictures = draw(run_dir, records)
    except ImportError:
        return RunFiles(table, (), PICTURES_HINT)
    except Exception as exc:  # noqa: BLE001 - a broken matplotlib must not cost the run
        log.warning("no pictures: matplotlib failed to load: %s: %s", type(exc).__name__, exc)
        return RunFiles(table, (), f"no pictures: matplotlib failed to load ({exc}); "
                                   "`protofed report RUN` draws them again")
    return RunFiles(table, pictures)


def preload() -> None:
    """Import matplotlib and draw a small figure once now, while the nodes train (they are
    forked already), so the end of a run pays only for its own pictures (the fonts and
    renderers are loaded); nothing when matplotlib is not installed."""
    with deferred_stop_signals():
        try:
            from matplotlib.figure import Figure
            from networkx.drawing import nx_pylab  # noqa: F401
        except ImportError:
            return
        figure = Figure(figsize=(1, 1))
        figure.add_subplot().plot([0, 1], [0, 1], label="warm")
        figure.axes[0].set_title("warm")
        figure.tight_layout()
        for fmt in FORMATS:
            figure.savefig(io.BytesIO(), format=fmt)


@contextlib.contextmanager
def deferred_stop_signals() -> Iterator[None]:
    """Hold a Ctrl-C or SIGTERM that comes inside the block and hand it to the handler in
    place once the block is done: an import cut in half leaves matplotlib's modules broken
    for the pictures drawn after the nodes are stopped. (Python runs signal handlers in the
    main thread, whichever thread the signal reached.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    previous = {number: signal.signal(number, lambda signum, frame: came.append(signum))
                for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        for number in came[:1]:
            handler = previous[number]
            if callable(handler):
                handler(number, None)
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), number)


def draw(run_dir: Path, records: list[NodeRecord]) -> tuple[Path, ...]:
    """The topology, bytes-per-round and F1-per-round pictures that could be drawn (a
    failure is logged, the others are still drawn); ImportError without matplotlib."""
    import matplotlib.figure  # noqa: F401 - fail here, once, when it is not installed

    painters = dict(zip(PICTURES, (_topology, _bytes_per_round, _f1_per_round)))
    if any(value is not None for value in consensus_by_round(records).values()):
        painters["consensus_per_round"] = _consensus_per_round
    if graph_changed(records):
        painters["edge_activity"] = _edge_activity
    if hasattr(os, "fork") and threading.active_count() == 1:
        drawn = _draw_forked(run_dir, records, painters)  # one core each; safe: no threads
    else:
        drawn = [name for name, painter in painters.items()
                 if _draw_logged(run_dir, name, painter, records)]
    return tuple(run_dir / f"{name}.{fmt}" for name in drawn for fmt in FORMATS)


def _draw_forked(run_dir: Path, records: list[NodeRecord], painters: dict) -> list[str]:
    """Each picture drawn in a forked child at the same time; the names drawn."""
    children = {}
    for name, painter in painters.items():
        pid = os.fork()
        if pid == 0:  # the child: draw, then leave without running the parent's teardown
            code = 0 if _draw_logged(run_dir, name, painter, records) else 1
            logging.shutdown()
            os._exit(code)
        children[pid] = name
    drawn = []
    for pid, name in children.items():
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        if code == 0:
            drawn.append(name)
        else:
            log.warning("the %s picture was not drawn (exit status %d)", name, code)
    return drawn


def _draw_logged(run_dir: Path, name: str, painter, records: list[NodeRecord]) -> bool:
    """Draw one picture in every format; False (and a warning) when drawing fails."""
    from matplotlib.figure import Figure  # no pyplot: no global state, no display needed

    try:
        figure = Figure(figsize=PICTURE_SIZES.get(name, (6.4, 4.8)))
        painter(figure, records)
        figure.tight_layout()
        for fmt in FORMATS:
            figure.savefig(run_dir / f"{name}.{fmt}", dpi=110,
                           metadata={"Date": None} if fmt == "svg" else {})
    except Exception as exc:  # noqa: BLE001 - a picture must never cost the run's results
        log.warning("could not draw the %s picture: %s: %s", name, type(exc).__name__, exc)
        return False
    return True


# Up to this many edges, each gets its byte count written on it.
ARROWS_UP_TO = 2_000  # directed edges drawn as arrows; beyond, as lines
RASTER_FROM = 20_000  # edges drawn as one raster image (in the SVG too) beyond this
EDGE_LABELS_UP_TO = 12
# Up to this many nodes each is a 500 pt² disc with its id in it; about 40 such discs fit
# side by side around the circle of a 6.4 x 4.8 inch picture, beyond that they overlap.
NODE_LABELS_UP_TO = 40
# The colour scale spans the run's own F1, but never less than this, so that equal scores
# do not make a zero-width scale.
MIN_F1_SPAN = 0.02


@dataclass(frozen=True)
class TopologyStyle:
    """How big the topology picture draws nodes and edges, and whether it labels them."""

    node_size: float  # pt²
    labels: bool  # node ids in the nodes, bytes and bandwidth on the edges
    widest: float  # line width of the busiest edge
    alpha: float
    arrow_size: float


def topology_style(nodes: int, edges: int) -> TopologyStyle:
    """Sizes and labels that stay legible for `nodes` nodes joined by `edges` edges."""
    # Dense graphs get thinner, lighter lines, so the widths still read as widths.
    widest = max(1.0, 5.0 * min(1.0, 30 / max(edges, 1)))
    alpha = 0.6 if edges <= 30 else 0.35
    if nodes <= NODE_LABELS_UP_TO:
        return TopologyStyle(500.0, True, widest, alpha, 10.0)
    # The disc's diameter shrinks with the room each node has on the circle (500 pt² at 40).
    return TopologyStyle(max(12.0, (900 / nodes) ** 2), False, 0.6, min(alpha, 0.25), 4.0)


def known_scores(scores: list[float | None]) -> list[float]:
    """The scores that are numbers (no None, no NaN)."""
    return [score for score in scores if score is not None and not math.isnan(score)]


def f1_limits(scores: list[float | None]) -> tuple[float, float]:
    """The colour scale's ends: lowest and highest F1, at least MIN_F1_SPAN apart, in 0-1."""
    known = known_scores(scores)
    if not known:
        return 0.0, 1.0
    low, high = min(known), max(known)
    if high - low >= MIN_F1_SPAN:
        return low, high
    start = min(max(0.0, (low + high - MIN_F1_SPAN) / 2), 1.0 - MIN_F1_SPAN)
    return start, start + MIN_F1_SPAN


def f1_range_text(scores: list[float | None]) -> str:
    """The run's F1 range for the colour bar: 'from 0.840 to 0.940', or 'all 0.900'."""
    known = known_scores(scores)
    if not known:
        return "no node recorded one"
    low, high = min(known), max(known)
    return f"all {low:.3f}" if high - low < 5e-4 else f"from {low:.3f} to {high:.3f}"


def _draw_edges(axes, graph, layout, edges: dict, widths: list[float], symmetric: bool,
                style) -> bool:
    """The graph's edges, as arrows where the exchange is one-sided; whether arrows were
    drawn. An arrow is a patch of its own (1.5 ms each: 17,000 took 25 s): beyond
    ARROWS_UP_TO the directions are left out, and beyond RASTER_FROM the lines are one
    raster image."""
    import networkx as nx

    arrows = not symmetric and len(edges) <= ARROWS_UP_TO
    if arrows:
        nx.draw_networkx_edges(graph, layout, ax=axes, edgelist=list(edges), width=widths,
                               arrows=True, arrowsize=style.arrow_size,
                               connectionstyle="arc3,rad=0.08", node_size=style.node_size,
                               alpha=style.alpha)
    else:
        lines = nx.draw_networkx_edges(graph, layout, ax=axes, edgelist=list(edges),
                                       width=widths, arrows=False, alpha=style.alpha)
        lines.set_rasterized(len(edges) > RASTER_FROM)
    return arrows


def _topology(figure, records: list[NodeRecord]) -> None:
    import matplotlib
    import networkx as nx

    edges = edge_bytes(records)
    # A symmetric exchange is drawn as one line per pair (width: bytes both ways), which
    # draws in a fraction of the time of an arrow per direction.
    symmetric = all((b, a) in edges for a, b in edges)
    if symmetric:
        edges = undirected_bytes(edges)
    graph = nx.DiGraph() if not symmetric else nx.Graph()
    graph.add_nodes_from(node.node for node in records)
    graph.add_edges_from(edges)
    style = topology_style(graph.number_of_nodes(), len(edges))
    largest = max(edges.values(), default=0)
    axes = figure.add_subplot()
    layout = nx.circular_layout(graph)
    colour_map = matplotlib.colormaps["viridis"]
    scores = {node.node: evaluation.f1 for node in records
              if (evaluation := final_evaluation(node, "global_test")) is not None}
    norm = matplotlib.colors.Normalize(*f1_limits(list(scores.values())))
    nodes = list(graph.nodes)  # a peer with no record of its own is drawn grey
    colours = [colour_map(norm(scores[n])) if scores.get(n) is not None else "lightgrey"
               for n in nodes]
    nx.draw_networkx_nodes(graph, layout, ax=axes, nodelist=nodes, node_color=colours,
                           node_size=style.node_size)
    if style.labels:
        for node, colour in zip(nodes, colours):
            nx.draw_networkx_labels(graph, layout, ax=axes, labels={node: str(node)},
                                    font_color=label_colour(colour))
    widths = [0.25 * style.widest + 0.75 * style.widest * edges[e] / (largest or 1)
              for e in edges]
    arrows = _draw_edges(axes, graph, layout, edges, widths, symmetric, style)
    limits = link_labels(records, symmetric) if style.labels else {}
    if style.labels and edges and len(edges) <= EDGE_LABELS_UP_TO:
        nx.draw_networkx_edge_labels(
            graph, layout, ax=axes, font_size=7, label_pos=0.5 if symmetric else 0.35,
            edge_labels={e: bytes_text(b) + (f"\n{limits[e]}" if e in limits else "")
                         for e, b in edges.items()})
    elif limits:  # too many edges for byte labels: the limited links still say their limit
        nx.draw_networkx_edge_labels(graph, layout, ax=axes, font_size=7, edge_labels=limits,
                                     label_pos=0.5 if symmetric else 0.35)
    scale = matplotlib.cm.ScalarMappable(norm=norm, cmap=colour_map)
    rule = prediction_rule(records)
    figure.colorbar(scale, ax=axes, label="final F1, global test"
                    + (f" ({rule} rule)" if rule else "")
                    + f"\nscaled to this run's range: {f1_range_text(list(scores.values()))}")
    title = topology_title(edges, symmetric)
    if not symmetric and not arrows:
        title += f"\n{len(edges):,} directed edges: drawn without their directions"
    if not style.labels:
        title += f"\n{len(nodes)} nodes: ids and edge labels left out"
    axes.set_title(title)
    axes.set_axis_off()


def link_labels(records: list[NodeRecord], symmetric: bool) -> dict[tuple[int, int], str]:
    """[links]: '5 Mbit/s' on every edge whose bandwidth was limited (a pair drawn as one
    line shows both directions, sender's first, when they differ)."""
    limits = {(int(peer), node.node): bits for node in records
              for peer, bits in (node.in_link_bandwidth or {}).items() if bits}
    text = {edge: f"{bits / 1e6:g} Mbit/s" for edge, bits in limits.items()}
    if not symmetric:
        return text
    pairs = {}
    for low, high in sorted({(min(a, b), max(a, b)) for a, b in text}):
        forward, backward = text.get((low, high)), text.get((high, low))
        pairs[(low, high)] = forward if forward == backward else " ".join(
            f"{a}→{b} {label}" for a, b, label in ((low, high, forward), (high, low, backward))
            if label)
    return pairs


def topology_title(edges: dict[tuple[int, int], int], symmetric: bool) -> str:
    """What the topology picture's edges show, with the smallest and largest edge."""
    how = "bytes both ways" if symmetric else "bytes sent along the arrow"
    moved = [b for b in edges.values() if b > 0]
    if not moved:
        return "who sent to whom\nno bytes were exchanged along any edge"
    spread = bytes_text(max(moved)) if min(moved) == max(moved) else \
        f"{bytes_text(min(moved))} to {bytes_text(max(moved))}"
    return f"who sent to whom\nedge width ∝ {how} ({spread} per edge)"


def undirected_bytes(edges: dict[tuple[int, int], int]) -> dict[tuple[int, int], int]:
    """Directed (sender, receiver) byte counts summed per unordered pair (low id first)."""
    pairs: dict[tuple[int, int], int] = {}
    for (a, b), sent in edges.items():
        key = (min(a, b), max(a, b))
        pairs[key] = pairs.get(key, 0) + sent
    return pairs


# Up to this many nodes each gets a line of its own (and a legend entry up to
# NODE_LEGEND_UP_TO); beyond, the lines tangle and the mean with a band tells more.
SINGLE_LINES_UP_TO = 20
NODE_LEGEND_UP_TO = 10
# The band's percentiles: one straggler among hundreds of nodes does not stretch it.
BAND_PERCENTILES = (10, 90)
MEAN_LABEL = "mean of the nodes present"


@dataclass(frozen=True)
class RoundSpread:
    """Per round, over the nodes that recorded it: the mean and the band's low and high."""

    rounds: list[int]
    mean: list[float]
    low: list[float]
    high: list[float]


def node_series(rounds: list[RoundRecord], value) -> tuple[list[int], list[float]]:
    """A node's rounds, first to last, and `value` in each: NaN (a break) where it missed one;
    a round where `value` is None (not evaluated: report.eval_every) is left out, so the
    line joins the rounds on either side."""
    got = {record.round: value(record) for record in rounds}
    span = range(min(got), max(got) + 1) if got else range(0)
    kept = [number for number in span if got.get(number, math.nan) is not None]
    return kept, [got.get(number, math.nan) for number in kept]


def round_spread(records: list[NodeRecord], value,
                 percentiles: tuple[int, int] = BAND_PERCENTILES) -> RoundSpread:
    """`value`'s mean and percentile band per round, over the nodes that recorded it."""
    import numpy  # with the drawing, not with the command line's start-up

    by_round: dict[int, list[float]] = {}
    for node in records:
        for record in node.rounds:
            by_round.setdefault(record.round, []).extend(known_scores([value(record)]))
    rounds = sorted(r for r, values in by_round.items() if values)
    return RoundSpread(rounds, [sum(by_round[r]) / len(by_round[r]) for r in rounds],
                       [float(numpy.percentile(by_round[r], percentiles[0])) for r in rounds],
                       [float(numpy.percentile(by_round[r], percentiles[1])) for r in rounds])


def _per_round(figure, records: list[NodeRecord], value, label: str, title: str) -> None:
    from matplotlib.ticker import MaxNLocator

    axes = figure.add_subplot()
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    drawn = [node for node in records if node.rounds]
    many = len(drawn) > SINGLE_LINES_UP_TO
    for index, node in enumerate(drawn):
        rounds, values = node_series(node.rounds, value)
        if many:
            axes.plot(rounds, values, color="grey", linewidth=0.5, alpha=0.25,
                      label="each node" if index == 0 else "_node")
        else:
            axes.plot(rounds, values, marker="o", markersize=3,
                      label=f"node {node.node}" if len(drawn) <= NODE_LEGEND_UP_TO
                      else f"_node {node.node}")
    spread = round_spread(drawn, value)
    if many:
        low, high = BAND_PERCENTILES
        axes.fill_between(spread.rounds, spread.low, spread.high, color="C0", alpha=0.3,
                          linewidth=0, label=f"{low}th–{high}th percentile of the nodes")
    if spread.rounds:
        axes.plot(spread.rounds, spread.mean, color="black", linewidth=2,
                  linestyle="-" if many else "--", label=MEAN_LABEL)
        axes.legend(fontsize="small")
    axes.set_xlabel("round (0: the untrained model)")
    axes.set_ylabel(label)
    axes.set_title(title)
    axes.grid(alpha=0.3)


def _bytes_per_round(figure, records: list[NodeRecord]) -> None:
    """Two panels: what the whole federation sent in each round, one line per message kind
    (and the total), and the running total of each kind, stacked."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    rounds, series = bytes_by_kind(records)
    total = [sum(values) for values in zip(*series.values())] or [0] * len(rounds)
    running = {kind: cumulative(values) for kind, values in series.items()}
    per_round, stacked = figure.subplots(1, 2)
    for axes, largest in ((per_round, max(total, default=0)),
                          (stacked, sum(v[-1] for v in running.values()) if rounds else 0)):
        unit, size = byte_unit(largest)
        axes.yaxis.set_major_formatter(FuncFormatter(lambda v, _, s=size: f"{v / s:,.3g}"))
        axes.set_ylabel(f"bytes ({unit}, 1 {unit} = {size:,} B)" if size > 1 else "bytes")
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.set_xlabel("round")
        axes.grid(alpha=0.3)
    for kind, values in series.items():
        per_round.plot(rounds, values, marker="o", markersize=3, label=kind)
    if len(series) > 1:
        per_round.plot(rounds, total, color="black", linewidth=1, linestyle="--",
                       label="total")
    per_round.set_title(f"sent per round, all {len(records)} nodes", fontsize="medium")
    if series:
        stacked.stackplot(rounds, *running.values(), labels=list(running), alpha=0.8)
        per_round.legend(fontsize="small")
        stacked.legend(fontsize="small", loc="upper left")
    stacked.set_title("sent so far, by kind", fontsize="medium")
    figure.suptitle("bytes sent by message kind (round 0: the hellos)")


# A log axis when the distances span more than this factor, or all lie below LOG_BELOW:
# a linear axis shows 1e-9 as 0 and the first rounds' drop as a cliff.
LOG_SPAN = 100.0
LOG_BELOW = 1e-3


@dataclass(frozen=True)
class ConsensusAxis:
    """The consensus picture's scale, what it draws, and the rounds at 0 a log axis drops."""

    scale: str
    rounds: list[int]
    values: list[float]
    zeros: list[int]


def consensus_axis(consensus: dict[int, float | None]) -> ConsensusAxis:
    """What to draw of each round's consensus distance (None: not known) and on which scale."""
    known = {r: v for r, v in sorted(consensus.items()) if v is not None}
    positive = [v for v in known.values() if v > 0]
    if not positive or (max(positive) <= LOG_SPAN * min(positive)
                        and max(known.values()) >= LOG_BELOW):
        return ConsensusAxis("linear", list(known), list(known.values()), [])
    shown = {r: v for r, v in known.items() if v > 0}
    return ConsensusAxis("log", list(shown), list(shown.values()),
                         [r for r, v in known.items() if v <= 0])


def _consensus_per_round(figure, records: list[NodeRecord]) -> None:
    from matplotlib.ticker import MaxNLocator

    axis = consensus_axis(consensus_by_round(records))
    axes = figure.add_subplot()
    axes.plot(axis.rounds, axis.values, marker="o")
    axes.set_yscale(axis.scale)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("round")
    axes.set_ylabel("consensus distance" + (" (log scale)" if axis.scale == "log" else ""))
    title = "Mean squared distance of the models from their average"
    if axis.zeros:
        count = len(axis.zeros)
        title += (f"\n{count} round{'s' if count > 1 else ''} at exactly 0 left out "
                  "(the log axis has no 0)")
    axes.set_title(title)
    axes.grid(alpha=0.3)


def _edge_activity(figure, records: list[NodeRecord]) -> None:
    import matplotlib
    import networkx as nx

    rounds, active = active_rounds(records)
    graph = nx.DiGraph()
    graph.add_nodes_from(node.node for node in records)
    graph.add_edges_from(active)
    axes = figure.add_subplot()
    layout = nx.circular_layout(graph)
    colour_map = matplotlib.colormaps["plasma"]
    shares = [active[e] / max(rounds, 1) for e in graph.edges]
    nx.draw_networkx_nodes(graph, layout, ax=axes, node_color="lightgrey", node_size=400)
    nx.draw_networkx_labels(graph, layout, ax=axes, font_size=8)
    nx.draw_networkx_edges(graph, layout, ax=axes, edge_color=[colour_map(s) for s in shares],
                           width=[0.4 + 2.6 * s for s in shares], arrows=True, arrowsize=7,
                           connectionstyle="arc3,rad=0.08", node_size=400, alpha=0.7)
    scale = matplotlib.cm.ScalarMappable(norm=matplotlib.colors.Normalize(0, 1),
                                         cmap=colour_map)
    figure.colorbar(scale, ax=axes, label=f"share of the {rounds} rounds it was used")
    axes.set_title(f"How often each edge carried models or prototypes\n"
                   f"({len(active)} edges used)")
    axes.set_axis_off()


def _f1_per_round(figure, records: list[NodeRecord]) -> None:
    rule = prediction_rule(records)
    _per_round(figure, records,
               lambda r: r.global_test.f1 if measured(r.global_test) else None,
               "macro-F1 (global test)",
               "F1 per node per round" + (f", {rule} rule" if rule else ""))
    figure.axes[0].set_ylim(0, 1)
