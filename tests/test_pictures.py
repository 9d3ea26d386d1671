"""What a run leaves to look at: the per-round CSV, the edge byte totals, the pictures (or
the hint when matplotlib is missing), and the progress lines when output is not a terminal."""

import csv
import io
import os
import signal
import sys
import threading

import pytest

from deploy.views import pictures
from deploy.views.progress import LineProgress, LiveProgress, clock_text, progress_for, seconds_left
from node.record import Evaluation, NodeRecord, RoundRecord


def _round(number, f1, sent=None, received=None, seconds=(1.0, 0.5, 0.25, 0.25)):
    train, communication, aggregation, evaluation = seconds
    measured = {"argmax": {"accuracy": f1 + 0.01, "f1": f1}}  # as a measured test set has
    return RoundRecord(round=number, global_test=Evaluation(accuracy=f1 + 0.01, f1=f1,
                                                            rule="argmax", by_rule=measured),
                       train_seconds=train, communication_seconds=communication,
                       aggregation_seconds=aggregation, evaluation_seconds=evaluation,
                       bytes_sent=sum(sum(k.values()) for k in (sent or {}).values()),
                       bytes_sent_by_peer=sent or {}, bytes_received_by_peer=received or {})


def two_nodes():
    """Node 0 sends to 1 and 2 (1 only prototypes back); one round after round 0."""
    zero = NodeRecord(node=0, status="finished", out_neighbours=[1, 2], in_neighbours=[1],
                      rounds_done=1,
                      rounds=[_round(0, 0.1),
                              _round(1, 0.8, sent={"1": {"model": 100, "prototypes": 10},
                                                   "2": {"model": 100}},
                                     received={"1": {"prototypes": 7}})],
                      bytes_sent_by_peer={"1": {"model": 100, "prototypes": 10},
                                          "2": {"model": 100}})
    one = NodeRecord(node=1, status="finished", out_neighbours=[0], in_neighbours=[0],
                     rounds_done=1, rounds=[_round(0, 0.1), _round(1, 0.7)],
                     bytes_sent_by_peer={"0": {"prototypes": 7, "control": 3}})
    return [zero, one]


def test_rows_per_node_round_kind_and_peer():
    rows = pictures.round_rows(two_nodes())
    assert list(rows[0]) == list(pictures.CSV_COLUMNS)
    assert all(r["consensus_distance"] == r["distance_from_mean"] == "" for r in rows)  # no sketch
    rows = [{k: v for k, v in r.items() if k not in ("consensus_distance", "distance_from_mean")}
            for r in rows]
    assert rows[:4] == [
        {"node": 0, "round": 0, "kind": "", "peer": "", "bytes_sent": 0, "bytes_received": 0,
         "f1": 0.1, "accuracy": 0.11, "seconds": 2.0, "transfer_seconds": ""},
        {"node": 0, "round": 1, "kind": "model", "peer": 1, "bytes_sent": 100,
         "bytes_received": 0, "f1": 0.8, "accuracy": 0.81, "seconds": 2.0, "transfer_seconds": ""},
        {"node": 0, "round": 1, "kind": "prototypes", "peer": 1, "bytes_sent": 10,
         "bytes_received": 7, "f1": 0.8, "accuracy": 0.81, "seconds": 2.0, "transfer_seconds": ""},
        {"node": 0, "round": 1, "kind": "model", "peer": 2, "bytes_sent": 100,
         "bytes_received": 0, "f1": 0.8, "accuracy": 0.81, "seconds": 2.0, "transfer_seconds": ""},
    ]
    assert [(r["node"], r["round"]) for r in rows[4:]] == [(1, 0), (1, 1)]


def test_edge_bytes_are_the_senders_totals_over_every_kind():
    assert pictures.edge_bytes(two_nodes()) == {(0, 1): 110, (0, 2): 100, (1, 0): 10}


def test_csv_and_pictures_are_written(tmp_path):
    files = pictures.write_run_files(tmp_path, two_nodes())
    with files.csv.open(newline="") as handle:
        read = list(csv.DictReader(handle))
    assert len(read) == 6 and read[1]["kind"] == "model" and read[1]["bytes_sent"] == "100"
    assert files.hint == ""
    assert sorted(p.name for p in files.pictures) == sorted(
        f"{name}.{fmt}" for name in pictures.PICTURES for fmt in pictures.FORMATS)
    for path in files.pictures:
        head = path.read_bytes()[:8]
        assert head == b"\x89PNG\r\n\x1a\n" if path.suffix == ".png" else head.startswith(b"<?xml")


@pytest.mark.parametrize("threads", [1, 2])  # 1: each picture in a forked child
def test_a_picture_that_fails_is_logged_and_the_others_are_drawn(tmp_path, monkeypatch,
                                                                 caplog, threads):
    def broken(figure, records):
        raise ValueError("no data")

    monkeypatch.setattr(pictures, "_bytes_per_round", broken)
    monkeypatch.setattr(pictures.threading, "active_count", lambda: threads)
    drawn = pictures.draw(tmp_path, two_nodes())
    assert sorted(p.name for p in drawn) == sorted(
        f"{name}.{fmt}" for name in ("topology", "f1_per_round") for fmt in pictures.FORMATS)
    assert all(p.is_file() for p in drawn) and not list(tmp_path.glob("bytes_per_round.*"))
    assert "bytes_per_round picture" in caplog.text


def test_a_stop_signal_during_preload_waits_until_matplotlib_is_loaded(monkeypatch):
    import matplotlib.figure

    class Interrupted(Exception):
        pass

    def handler(signum, frame):
        assert signal.getsignal(signal.SIGINT) is handler  # the preload put it back first
        raise Interrupted

    finished = []

    class SignalledFigure(matplotlib.figure.Figure):
        def __init__(self, *args, **kwargs):
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C in the middle of the preload
            super().__init__(*args, **kwargs)
            finished.append(True)

    monkeypatch.setattr(matplotlib.figure, "Figure", SignalledFigure)
    previous = signal.signal(signal.SIGINT, handler)
    # Another thread alive, as in a process with helper threads: it may be the one the
    # kernel hands the signal to.
    release = threading.Event()
    bystander = threading.Thread(target=release.wait)
    bystander.start()
    try:
        with pytest.raises(Interrupted):
            pictures.preload()
    finally:
        release.set()
        bystander.join()
        signal.signal(signal.SIGINT, previous)
    assert finished == [True]  # the signal was raised after the preload, not inside it


def test_a_broken_matplotlib_leaves_the_csv_and_a_hint(tmp_path, monkeypatch):
    def broken(run_dir, records):
        raise AttributeError("module 'matplotlib' has no attribute 'get_data_path'")

    monkeypatch.setattr(pictures, "draw", broken)
    files = pictures.write_run_files(tmp_path, two_nodes())
    assert files.csv.is_file() and files.pictures == ()
    assert "get_data_path" in files.hint and "protofed report" in files.hint


def test_symmetric_exchanges_are_drawn_as_one_line_per_pair():
    assert pictures.undirected_bytes({(0, 1): 5, (1, 0): 7, (2, 0): 1, (0, 2): 1}) == {
        (0, 1): 12, (0, 2): 2}


def test_without_matplotlib_the_csv_is_written_and_the_hint_given(tmp_path, monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    files = pictures.write_run_files(tmp_path, two_nodes())
    assert files.csv.is_file() and files.pictures == ()
    assert "pip install matplotlib" in files.hint
    assert not list(tmp_path.glob("*.png"))


def _states(*nodes):
    """Records of nodes given as (status, the global-test F1 of each round recorded); each
    round after round 0 sends 1,000 bytes to peer 9."""
    return [NodeRecord(node=i, status=status, rounds_done=max(len(f1s) - 1, 0),
                       bytes_sent=1000 * max(len(f1s) - 1, 0),
                       rounds=[_round(k, f1, {9: {"model": 1000}} if k else None)
                               for k, f1 in enumerate(f1s)])
            for i, (status, f1s) in enumerate(nodes)]


class Clock:
    """A clock that moves 10 s at every reading."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        self.now += 10.0
        return self.now


def test_plain_progress_is_one_line_per_federation_round_and_per_failure():
    progress = LineProgress(rounds=2, stream=io.StringIO(), clock=Clock())
    seen = [progress.lines(_states(("missing", []), ("starting", []))),
            progress.lines(_states(("running", [0.1]), ("starting", []))),
            progress.lines(_states(("running", [0.1]), ("running", [0.12]))),
            progress.lines(_states(("running", [0.1, 0.5]), ("running", [0.12]))),
            progress.lines(_states(("running", [0.1, 0.5]), ("running", [0.12]))),
            progress.lines(_states(("running", [0.1, 0.5]), ("failed", [0.12]))),
            progress.lines(_states(("finished", [0.1, 0.5, 0.9]), ("failed", [0.12])))]
    # launched at 10 s, every node started at 20 s (read again for round 0's line: 30 s);
    # round 1 read at 40 s: 20 s for one round, so about 20 s left for the second
    assert seen == [
        [], [],
        ["every node started (round 0): 2 nodes, mean F1 0.1100, 0 bytes sent, 0:20 elapsed"],
        [], [],
        ["node 1 failed after 0/2 rounds",
         "round 1/2: 1 node, mean F1 0.5000, 1,000 bytes sent, 0:30 elapsed, about 0:20 left"],
        ["round 2/2: 1 node, mean F1 0.9000, 2,000 bytes sent, 0:40 elapsed"],
    ]


def test_plain_progress_says_every_round_even_when_several_ended_between_two_looks():
    progress = LineProgress(rounds=2, stream=io.StringIO(), clock=Clock())
    lines = progress.lines(_states(("finished", [0.1, 0.5, 0.9]), ("finished", [0.2, 0.6, 0.8])))
    assert [line.split(", ")[:3] for line in lines] == [
        ["every node started (round 0): 2 nodes", "mean F1 0.1500", "0 bytes sent"],
        ["round 1/2: 2 nodes", "mean F1 0.5500", "2,000 bytes sent"],
        ["round 2/2: 2 nodes", "mean F1 0.8500", "4,000 bytes sent"]]


def test_the_last_progress_line_waits_for_every_end_and_says_the_tables_total():
    """Goodbyes go out after the last round: the last line once read 172 bytes below the
    table's total."""
    progress = LineProgress(rounds=2, stream=io.StringIO(), clock=Clock())
    states = _states(("running", [0.1, 0.5, 0.9]), ("running", [0.2, 0.6, 0.8]))
    assert [line.split(":")[0] for line in progress.lines(states)] == [
        "every node started (round 0)", "round 1/2"]
    for record in states:
        record.status, record.bytes_sent = "finished", record.bytes_sent + 86  # goodbyes
    assert [line.split(", ")[2] for line in progress.lines(states)] == ["4,172 bytes sent"]


def test_a_node_that_left_after_a_round_counts_in_that_rounds_line():
    progress = LineProgress(rounds=2, stream=io.StringIO(), clock=Clock())
    # node 0 left (churn) after round 1; node 1 goes on to round 2
    lines = progress.lines(_states(("left", [0.1, 0.5]), ("finished", [0.1, 0.7, 0.9])))
    assert [line.split(", ")[:2] for line in lines] == [
        ["node 0 left after 1/2 rounds"],
        ["every node started (round 0): 2 nodes", "mean F1 0.1000"],
        ["round 1/2: 2 nodes", "mean F1 0.6000"],
        ["round 2/2: 1 node", "mean F1 0.9000"]]


def test_the_time_left_is_the_pace_of_the_rounds_done_times_the_rounds_to_go():
    assert seconds_left(30.0, 3, 10) == 70.0
    assert seconds_left(30.0, 0, 10) is None  # no round done: no pace yet
    assert seconds_left(30.0, 10, 10) == 0.0
    assert [clock_text(s) for s in (0, 59.6, 61, 3600, 3725)] == [
        "0:00", "1:00", "1:01", "1:00:00", "1:02:05"]


def test_the_live_table_says_elapsed_and_time_left():
    progress = LiveProgress(rounds=4, stream=io.StringIO(), clock=Clock())
    try:
        progress.table(_states(("running", [0.1]), ("running", [0.1])))  # started at 20 s
        table = progress.table(_states(("running", [0.1, 0.5]), ("running", [0.1, 0.4])))
    finally:
        progress.finish()
    # launched at 10 s, training since 20 s; read at 40 s: one round in 20 s, three to go
    assert table.caption == "0:30 elapsed, about 1:00 left"


def test_a_pipe_gets_plain_lines():
    assert isinstance(progress_for(3, io.StringIO()), LineProgress)


def test_byte_counts_read_in_decimal_units_with_separators():
    assert pictures.byte_unit(999) == ("B", 1)
    assert pictures.byte_unit(12_841_440) == ("MB", 10**6)
    assert [pictures.bytes_text(n) for n in (512, 12_800, 3_410_000, 1_204_000_000_000)] == [
        "512 B", "12.8 KB", "3.41 MB", "1,204 GB"]


def test_bytes_by_kind_sum_every_node_per_round_and_add_up():
    rounds, series = pictures.bytes_by_kind(two_nodes())
    assert rounds == [0, 1]
    assert series == {"model": [0, 200], "prototypes": [0, 10]}
    assert pictures.cumulative([0, 200, 50]) == [0, 200, 250]


def test_the_bytes_picture_has_a_series_per_kind_in_a_named_unit():
    """Per round and cumulative, one series per message kind; the axis says the unit."""
    from matplotlib.figure import Figure

    records = two_nodes()
    records[0].rounds[1] = _round(1, 0.8, sent={"1": {"model": 2_500_000, "control": 40},
                                                 "2": {"prototypes": 9_000}})
    figure = Figure()
    pictures._bytes_per_round(figure, records)
    per_round, stacked = figure.axes
    lines = {line.get_label(): list(line.get_ydata()) for line in per_round.get_lines()}
    assert lines == {"control": [0, 40], "model": [0, 2_500_000], "prototypes": [0, 9_000],
                     "total": [0, 2_509_040]}
    assert per_round.get_ylabel() == "bytes (MB, 1 MB = 1,000,000 B)"
    assert per_round.yaxis.get_major_formatter()(2_500_000, 0) == "2.5"
    assert [t.get_text() for t in stacked.get_legend().get_texts()] == [
        "control", "model", "prototypes"]
    assert stacked.get_ylabel().startswith("bytes (MB")


def test_the_f1_picture_and_the_colour_bar_name_the_prediction_rule():
    from matplotlib.figure import Figure

    records = two_nodes()
    for node in records:
        node.rounds[-1].global_test.rule = "prototype"
    figure = Figure()
    pictures._f1_per_round(figure, records)
    assert figure.axes[0].get_title() == "F1 per node per round, prototype rule"
    topology = Figure()
    pictures._topology(topology, records)
    assert "prototype rule" in topology.axes[-1].get_ylabel()  # the colour bar


def test_node_labels_are_white_on_dark_nodes_and_black_on_light_ones():
    import matplotlib

    viridis = matplotlib.colormaps["viridis"]
    assert pictures.label_colour(viridis(0.0)) == "white"  # dark purple: F1 near 0
    assert pictures.label_colour(viridis(1.0)) == "black"  # yellow: F1 near 1
    assert pictures.label_colour("lightgrey") == "black"


def test_the_topology_title_after_an_early_stop_says_nothing_moved():
    assert pictures.topology_title({(0, 1): 0, (1, 0): 0}, symmetric=False).endswith(
        "no bytes were exchanged along any edge")
    assert pictures.topology_title({(0, 1): 12_800, (0, 2): 3_410_000}, True).endswith(
        "(12.8 KB to 3.41 MB per edge)")


def test_few_edges_get_their_bytes_written_on_them():
    from matplotlib.figure import Figure

    figure = Figure()
    pictures._topology(figure, two_nodes())
    texts = {t.get_text() for t in figure.axes[0].texts}
    assert {"110 B", "100 B", "10 B"} <= texts


def test_limited_links_are_labelled_with_their_bandwidth():
    records = [NodeRecord(node=0, in_link_bandwidth={"1": 0}),
               NodeRecord(node=1, in_link_bandwidth={"0": 5_000_000, "2": 50_000_000}),
               NodeRecord(node=2, in_link_bandwidth={"1": 50_000_000})]
    assert pictures.link_labels(records, symmetric=False) == {
        (0, 1): "5 Mbit/s", (2, 1): "50 Mbit/s", (1, 2): "50 Mbit/s"}
    assert pictures.link_labels(records, symmetric=True) == {
        (0, 1): "0→1 5 Mbit/s", (1, 2): "50 Mbit/s"}
    records[1].in_link_bandwidth["2"] = 1_000_000  # 2->1 now differs from 1->2
    assert pictures.link_labels(records, symmetric=True)[(1, 2)] == "1→2 50 Mbit/s 2→1 1 Mbit/s"
    assert pictures.link_labels([NodeRecord(node=0)], symmetric=True) == {}


def test_rows_carry_the_consensus_distance_from_the_nodes_sketches():
    import numpy as np

    from node.consensus import to_text

    records = two_nodes()
    for record, vector in zip(records, ([0.0, 0.0], [2.0, 0.0])):
        record.rounds[1].model_sketch = to_text(np.array(vector))
    rows = [r for r in pictures.round_rows(records) if r["round"] == 1]
    # mean model (1, 0): each node at squared distance 1, the federation's mean 1
    assert {(r["consensus_distance"], r["distance_from_mean"]) for r in rows} == {(1.0, 1.0)}
    assert all(r["consensus_distance"] == "" for r in pictures.round_rows(records)
               if r["round"] == 0)


def _ring(count, f1s=None):
    """`count` nodes in a ring, each sending 100 bytes of model to both neighbours in round 1;
    node i's final F1 is f1s[i] (0.5 when not given)."""
    f1s = f1s or [0.5] * count
    records = []
    for i in range(count):
        peers = sorted({(i + 1) % count, (i - 1) % count} - {i})
        sent = {str(p): {"model": 100} for p in peers}
        records.append(NodeRecord(node=i, status="finished", out_neighbours=peers,
                                  in_neighbours=peers, rounds_done=1,
                                  rounds=[_round(0, 0.1), _round(1, f1s[i], sent=sent)],
                                  bytes_sent_by_peer=sent))
    return records


def _churned(*rounds_by_node):
    """Nodes that recorded the given rounds, each round's F1 being round / 10 + node / 100."""
    return [NodeRecord(node=i, rounds=[_round(k, k / 10 + i / 100) for k in rounds])
            for i, rounds in enumerate(rounds_by_node)]


def test_the_colour_scale_spans_the_runs_own_f1():
    from matplotlib.figure import Figure

    assert pictures.f1_limits([0.84, 0.94, None]) == pytest.approx((0.84, 0.94))
    low, high = pictures.f1_limits([0.9, 0.9])  # identical: a small span around them
    assert high - low == pytest.approx(pictures.MIN_F1_SPAN) and low < 0.9 < high
    low, high = pictures.f1_limits([1.0, 1.0])
    assert high == 1.0 and high - low == pytest.approx(pictures.MIN_F1_SPAN)
    assert pictures.f1_limits([]) == (0.0, 1.0)
    figure = Figure()
    pictures._topology(figure, _ring(5, [0.84, 0.9, 0.94, 0.86, 0.88]))
    colour_bar = figure.axes[-1]
    assert colour_bar.get_ylim() == pytest.approx((0.84, 0.94))
    assert "0.840 to 0.940" in colour_bar.get_ylabel()


def test_a_large_topology_drops_the_labels_and_shrinks_the_nodes():
    from matplotlib.figure import Figure

    small, large = pictures.topology_style(5, 5), pictures.topology_style(200, 200)
    assert small.labels and not large.labels
    assert large.node_size < small.node_size and large.widest < small.widest
    figure = Figure()
    pictures._topology(figure, _ring(200))
    assert len(figure.axes[0].texts) == 0  # no node ids, no bytes on the edges
    figure = Figure()
    pictures._topology(figure, _ring(5))
    assert {str(n) for n in range(5)} <= {t.get_text() for t in figure.axes[0].texts}


def test_many_directed_edges_are_drawn_as_lines_not_arrows_and_as_a_raster_beyond_that(
        monkeypatch):
    """An arrow is a patch of its own: 17,000 of them (a 300-node run stopped early) took
    25 s to draw after the table."""
    from matplotlib.figure import Figure

    records = _ring(6)
    records[0].out_neighbours = []  # node 0 sends to nobody: the exchange is one-sided
    figure = Figure()
    pictures._topology(figure, records)
    assert len(figure.axes[0].patches) == 10  # an arrow per directed edge
    monkeypatch.setattr(pictures, "ARROWS_UP_TO", 9)
    monkeypatch.setattr(pictures, "RASTER_FROM", 9)
    figure = Figure()
    pictures._topology(figure, records)
    axes = figure.axes[0]
    assert len(axes.patches) == 0 and axes.collections[-1].get_rasterized()
    assert axes.get_title().endswith("10 directed edges: drawn without their directions")


def test_many_nodes_get_the_mean_and_a_band_instead_of_a_line_each():
    from matplotlib.figure import Figure

    spread = pictures.round_spread(_ring(30, [i / 29 for i in range(30)]),
                                   lambda r: r.global_test.f1)
    assert spread.rounds == [0, 1]
    assert spread.mean == pytest.approx([0.1, 0.5])
    assert spread.low == pytest.approx([0.1, 0.1]) and spread.high == pytest.approx([0.1, 0.9])
    figure = Figure()
    pictures._f1_per_round(figure, _ring(30))
    axes = figure.axes[0]
    legend = [t.get_text() for t in axes.get_legend().get_texts()]
    assert "mean of the nodes present" in legend
    assert any("10th–90th percentile" in text for text in legend)
    assert len(axes.collections) == 1  # the band
    assert max(line.get_linewidth() for line in axes.get_lines()
               if line.get_label() != "mean of the nodes present") < 1
    figure = Figure()
    pictures._f1_per_round(figure, two_nodes())  # few nodes: a line each and the mean
    labels = [line.get_label() for line in figure.axes[0].get_lines()]
    assert labels == ["node 0", "node 1", "mean of the nodes present"]
    assert len(figure.axes[0].collections) == 0


def test_a_nodes_line_breaks_over_the_rounds_it_missed():
    import math

    from matplotlib.figure import Figure

    records = _churned([0, 1, 3], [0, 1, 2, 3], [0, 1])  # node 0 away in 2, node 2 left after 1
    rounds, values = pictures.node_series(records[0].rounds, lambda r: r.global_test.f1)
    assert rounds == [0, 1, 2, 3] and math.isnan(values[2])
    assert values[:2] + values[3:] == pytest.approx([0.0, 0.1, 0.3])
    spread = pictures.round_spread(records, lambda r: r.global_test.f1)
    assert spread.mean == pytest.approx([0.01, 0.11, 0.21, 0.305])  # who recorded the round
    figure = Figure()
    pictures._f1_per_round(figure, records)
    first = figure.axes[0].get_lines()[0]
    assert list(first.get_xdata()) == [0, 1, 2, 3] and math.isnan(first.get_ydata()[2])


def test_tiny_or_widely_spread_consensus_distances_go_on_a_log_axis(monkeypatch):
    from matplotlib.figure import Figure

    axis = pictures.consensus_axis({0: 0.0, 1: 2e-9, 2: 1e-9, 3: None})
    assert (axis.scale, axis.rounds, axis.values, axis.zeros) == ("log", [1, 2], [2e-9, 1e-9],
                                                                  [0])
    assert pictures.consensus_axis({1: 3.0, 2: 0.001}).scale == "log"  # 3 orders of magnitude
    assert pictures.consensus_axis({1: 3.0, 2: 0.5, 3: 0.0}) == pictures.ConsensusAxis(
        "linear", [1, 2, 3], [3.0, 0.5, 0.0], [])
    assert pictures.consensus_axis({1: 0.0, 2: 0.0}).scale == "linear"  # nothing to log
    monkeypatch.setattr(pictures, "consensus_by_round", lambda records: {0: 0.0, 1: 1e-9,
                                                                         2: 5e-10})
    figure = Figure()
    pictures._consensus_per_round(figure, two_nodes())
    axes = figure.axes[0]
    assert axes.get_yscale() == "log" and "log scale" in axes.get_ylabel()
    assert "1 round at exactly 0" in axes.get_title()
    assert list(axes.get_lines()[0].get_ydata()) == [1e-9, 5e-10]
