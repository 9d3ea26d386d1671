"""What a run leaves to look at: the per-round CSV, the edge byte totals, the pictures (or
the hint when matplotlib is missing), and the progress lines when output is not a terminal."""

import csv
import io
import os
import signal
import sys
import threading

import pytest

from deploy import pictures
from deploy.progress import LineProgress, progress_for
from node.record import Evaluation, NodeRecord, RoundRecord


def _round(number, f1, sent=None, received=None, seconds=(1.0, 0.5, 0.25, 0.25)):
    train, communication, aggregation, evaluation = seconds
    return RoundRecord(round=number, global_test=Evaluation(accuracy=f1 + 0.01, f1=f1),
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
    assert rows[:4] == [
        {"node": 0, "round": 0, "kind": "", "peer": "", "bytes_sent": 0, "bytes_received": 0,
         "f1": 0.1, "accuracy": 0.11, "seconds": 2.0},
        {"node": 0, "round": 1, "kind": "model", "peer": 1, "bytes_sent": 100,
         "bytes_received": 0, "f1": 0.8, "accuracy": 0.81, "seconds": 2.0},
        {"node": 0, "round": 1, "kind": "prototypes", "peer": 1, "bytes_sent": 10,
         "bytes_received": 7, "f1": 0.8, "accuracy": 0.81, "seconds": 2.0},
        {"node": 0, "round": 1, "kind": "model", "peer": 2, "bytes_sent": 100,
         "bytes_received": 0, "f1": 0.8, "accuracy": 0.81, "seconds": 2.0},
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
    assert "pip install" in files.hint and "experiments" in files.hint
    assert not list(tmp_path.glob("*.png"))


def _states(*nodes):
    """Records of nodes given as (status, the global-test F1 of each round recorded); each
    round after round 0 sends 1,000 bytes to peer 9."""
    return [NodeRecord(node=i, status=status, rounds_done=max(len(f1s) - 1, 0),
                       bytes_sent=1000 * max(len(f1s) - 1, 0),
                       rounds=[_round(k, f1, {9: {"model": 1000}} if k else None)
                               for k, f1 in enumerate(f1s)])
            for i, (status, f1s) in enumerate(nodes)]


def test_plain_progress_is_one_line_per_federation_round_and_per_failure():
    progress = LineProgress(rounds=2, stream=io.StringIO())
    seen = [progress.lines(_states(("missing", []), ("starting", []))),
            progress.lines(_states(("running", [0.1]), ("starting", []))),
            progress.lines(_states(("running", [0.1]), ("running", [0.12]))),
            progress.lines(_states(("running", [0.1, 0.5]), ("running", [0.12]))),
            progress.lines(_states(("running", [0.1, 0.5]), ("running", [0.12]))),
            progress.lines(_states(("running", [0.1, 0.5]), ("failed", [0.12]))),
            progress.lines(_states(("finished", [0.1, 0.5, 0.9]), ("failed", [0.12])))]
    assert seen == [
        [], [],
        ["every node started (round 0): 2 nodes, mean F1 0.1100, 0 bytes sent"],
        [], [],
        ["node 1 failed after 0/2 rounds", "round 1/2: 1 node, mean F1 0.5000, 1,000 bytes sent"],
        ["round 2/2: 1 node, mean F1 0.9000, 2,000 bytes sent"],
    ]


def test_plain_progress_says_every_round_even_when_several_ended_between_two_looks():
    progress = LineProgress(rounds=2, stream=io.StringIO())
    assert progress.lines(_states(("finished", [0.1, 0.5, 0.9]), ("running", [0.2, 0.6, 0.8]))) \
        == ["every node started (round 0): 2 nodes, mean F1 0.1500, 0 bytes sent",
            "round 1/2: 2 nodes, mean F1 0.5500, 2,000 bytes sent",
            "round 2/2: 2 nodes, mean F1 0.8500, 4,000 bytes sent"]


def test_a_pipe_gets_plain_lines():
    assert isinstance(progress_for(3, io.StringIO()), LineProgress)
