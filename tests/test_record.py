"""The node's record: its file written whole, read back, an unfinished one found again for a
restart, totals of an earlier process added; and the launcher's watch over a run."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from deploy.backends.runner import WATCH_SHARE, next_pause, watch
from node.record import Evaluation, NodeRecord, RoundRecord, final_evaluation
from node.runtime import Recorder, add_counts


def record(status="running", digest="abc"):
    return NodeRecord(node=2, status=status, config_digest=digest, rounds_done=1,
                      rounds=[RoundRecord(round=0, global_test=Evaluation(f1=0.1)),
                              RoundRecord(round=1, global_test=Evaluation(f1=0.7))])


def test_a_record_survives_the_round_trip_through_its_file(tmp_path):
    recorder = Recorder(tmp_path / "node-2.json", record())
    recorder.write()
    assert not (tmp_path / "node-2.tmp").exists()  # replaced atomically
    back = NodeRecord.from_dict(json.loads((tmp_path / "node-2.json").read_text()))
    assert back == record()
    assert final_evaluation(back, "global_test").f1 == 0.7


def test_the_written_text_is_the_whole_records_json_and_only_changed_rounds_are_encoded(
        monkeypatch):
    """A node rewrites its record every round: each round's part is encoded once, and again
    only when its byte counts were recounted (new dicts); the text is always the record's
    whole JSON, as `to_json(to_dict())` gives it."""
    import node.record as records
    encoded = []
    monkeypatch.setattr(records, "plain", lambda value, real=records.plain: (
        encoded.append(value) if isinstance(value, RoundRecord) else None) or real(value))
    whole = record()
    text = records.RecordText()

    def written(encodes: int) -> bool:
        """The text is the whole record's JSON, and `encodes` rounds were encoded for it."""
        before = len(encoded)
        got = text.text(whole)
        fresh = encoded[before:]
        return got == records.to_json(whole.to_dict()) and len(fresh) == encodes
    assert written(2)
    whole.rounds.append(RoundRecord(round=2, global_test=Evaluation(f1=0.8)))
    whole.status, whole.error = "failed", "a reason"
    assert written(1)
    assert written(0)
    whole.rounds[0].bytes_sent_by_peer = {"1": {"control": 7}}  # a late hello, recounted
    whole.rounds[0].bytes_sent = 7
    before = len(encoded)
    assert written(1) and encoded[before] is whole.rounds[0]
    whole.rounds = whole.rounds[1:]  # an earlier process's rounds, replaced on a restart
    assert written(2)
    whole.rounds[0].final_fit = {"f1": 0.9}  # nothing changes a kept round in place, but a
    assert text.text(whole) != records.to_json(whole.to_dict())  # node's last record is
    before = len(encoded)  # encoded whole, whatever it held
    got, count = text.text(whole, fresh=True), len(encoded) - before
    assert got == records.to_json(whole.to_dict()) and count == 2


def test_the_meter_keeps_each_rounds_counts_and_which_rounds_changed():
    from node.net.peers import RECEIVED, SENT, Meter
    meter = Meter()
    for round_ in range(1, 4):
        for peer in (2, 1):
            meter.add(SENT, round_, peer, "model", 100 * round_)
            meter.add(RECEIVED, round_, peer, "hello", 10)
    assert meter.take_changed() == {1, 2, 3} and meter.take_changed() == set()
    meter.add(SENT, 2, 1, "prototypes", 5)  # late: round 2's again
    assert meter.take_changed() == {2}
    assert meter.total(SENT, round_=2) == 405 and meter.total(SENT) == 1205
    assert meter.total(RECEIVED, peer=1, kind="control") == 30
    assert meter.breakdown(SENT, 2) == {"1": {"model": 200, "prototypes": 5},
                                        "2": {"model": 200}}
    assert meter.breakdown(RECEIVED) == {"1": {"control": 30}, "2": {"control": 30}}
    assert meter.breakdown(SENT, 9) == {} and meter.total(SENT, round_=9) == 0


def test_unknown_keys_of_a_newer_version_are_ignored():
    raw = record().to_dict() | {"from_the_future": 1}
    assert NodeRecord.from_dict(raw) == record()


def test_only_an_unfinished_record_of_the_same_config_is_taken_up_again(tmp_path):
    path = tmp_path / "node-2.json"
    for status, digest, found in (("running", "abc", True), ("finished", "abc", False),
                                  ("running", "other", False)):
        Recorder(path, record(status, digest)).write()
        assert (Recorder(path, NodeRecord()).unfinished("abc") is not None) == found
    path.write_text("{ half a file")
    assert Recorder(path, NodeRecord()).unfinished("abc") is None


def test_a_failure_is_recorded_with_its_reason(tmp_path):
    recorder = Recorder(tmp_path / "node-2.json", record())
    recorder.fail("stopped by signal", status="stopped")
    back = json.loads((tmp_path / "node-2.json").read_text())
    assert (back["status"], back["error"]) == ("stopped", "stopped by signal")


def test_an_earlier_process_totals_are_added_key_by_key():
    assert add_counts(5, 3) == 8
    # a peer only the earlier process sent to keeps its counts (it was 0 before)
    assert add_counts({"1": {"model": 10}},
                      {"1": {"model": 5, "control": 2}, "3": {"model": 4}}) == {
        "1": {"model": 15, "control": 2}, "3": {"model": 4}}
    assert add_counts("finished", "running") == "finished"


class FakeRun:
    """Nodes that exit one per poll; records every sleep."""

    def __init__(self, tmp_path: Path, nodes: int):
        self.plan = SimpleNamespace(nodes=list(range(nodes)), results_dir=tmp_path)
        self.exit_codes = {}
        self.slept = []

    def poll_exits(self):
        if len(self.exit_codes) < len(self.plan.nodes):
            self.exit_codes[len(self.exit_codes)] = 0
        return dict(self.exit_codes)

    def wait(self, timeout):
        self.slept.append(timeout)


def test_watch_reports_until_every_node_exited_and_once_at_the_end(tmp_path):
    run = FakeRun(tmp_path, 3)
    seen = []
    assert watch(run, lambda results: seen.append(len(results)), interval=0.0)
    assert seen and seen[-1] == 3 and len(run.exit_codes) == 3


def test_watch_gives_up_at_its_deadline_and_leaves_the_nodes_running(tmp_path):
    run = FakeRun(tmp_path, 3)
    run.poll_exits = dict  # nobody ever exits
    assert not watch(run, lambda results: None, interval=0.0, deadline=0.0)


def test_the_reader_parses_a_record_again_only_once_its_file_was_replaced(tmp_path,
                                                                         monkeypatch):
    """The watcher reads every record twice a second: unchanged files are not parsed again,
    a replaced one (nodes rename a new file over it) is, and a missing one reads as missing."""
    from deploy import run_folder

    for node in (0, 1):
        Recorder(tmp_path / f"node-{node}.json", NodeRecord(node=node, status="running")).write()
    parsed = []
    real = NodeRecord.from_dict
    monkeypatch.setattr(run_folder.NodeRecord, "from_dict",
                        lambda raw: parsed.append(raw["node"]) or real(raw))
    reader = run_folder.RecordReader(tmp_path, 3)
    assert [r.status for r in reader.read()] == ["running", "running", "missing"]
    assert [r.status for r in reader.read()] == ["running", "running", "missing"]
    assert parsed == [0, 1]
    Recorder(tmp_path / "node-1.json", NodeRecord(node=1, status="finished")).write()
    assert [r.status for r in reader.read()] == ["running", "finished", "missing"]
    assert parsed == [0, 1, 1]


def test_the_records_are_read_less_often_where_reading_them_takes_a_tenth_of_a_core():
    assert WATCH_SHARE == 0.1
    assert next_pause(0.5, 0.01) == 0.5  # 2% of a core at twice a second: as asked
    assert next_pause(0.5, 0.3) == pytest.approx(3.0)  # five 7.7 MB records: every 3 s
    assert next_pause(0.0, 0.0) == 0.0
