"""Where a round's time goes: phases timed on a clock, nested phases counted once, summed
over rounds and nodes, and what the end table and phases.csv say of them."""

import pytest

from deploy.views.pictures import phase_rows
from deploy.views.report import phase_note
from node.intake import SCREENS
from node.profile import PHASE_GROUPS, PHASES, Profile, shares, summed
from node.record import NodeRecord, RoundRecord


class StepClock:
    """A clock that moves only when told: wall and CPU seconds set by hand."""

    def __init__(self):
        self.wall = self.used = 0.0

    def monotonic(self):
        return self.wall

    def time(self):
        return self.wall

    def cpu(self):
        return self.used

    def spend(self, wall, cpu):
        self.wall += wall
        self.used += cpu


def test_an_inner_phase_is_not_also_counted_in_the_outer_one_and_the_rest_is_other():
    clock = StepClock()
    profile = Profile(clock)
    clock.spend(1.0, 1.0)  # before any phase: other
    with profile.phase("aggregation"):
        clock.spend(2.0, 2.0)
        with profile.phase("validation"):
            clock.spend(3.0, 2.5)
        clock.spend(0.5, 0.5)
    with profile.phase("wait"):
        clock.spend(4.0, 0.0)  # waiting costs wall time, no CPU
    assert profile.take() == {"wait": [4.0, 0.0], "validation": [3.0, 2.5],
                              "aggregation": [2.5, 2.5], "other": [1.0, 1.0]}
    # the phases add up to the wall time; a take starts the counts again
    clock.spend(0.25, 0.25)
    assert profile.take() == {"other": [0.25, 0.25]}


def test_a_phase_that_raises_is_still_charged():
    clock = StepClock()
    profile = Profile(clock)
    with pytest.raises(ValueError), profile.phase("decode"):
        clock.spend(1.0, 1.0)
        raise ValueError("a peer's garbage")
    assert profile.take() == {"decode": [1.0, 1.0]}


def test_phases_add_up_over_rounds_and_nodes_and_share_the_cpu():
    total = summed([{"train": [2.0, 2.0], "wait": [1.0, 0.0]}, None,
                    {"train": [1.0, 1.0], "validation": [1.0, 1.0]}])
    assert total == {"train": [3.0, 3.0], "validation": [1.0, 1.0], "wait": [1.0, 0.0]}
    assert shares(total) == {"train": 0.75, "validation": 0.25, "wait": 0.0}
    assert shares({"wait": [1.0, 0.0]}) == {}


def test_phases_csv_has_a_row_per_node_round_and_phase_and_the_table_a_line():
    record = NodeRecord(node=3, rounds=[
        RoundRecord(round=0),
        RoundRecord(round=1, phases={"wait": [0.5, 0.0], "train": [2.0, 1.5]})])
    assert phase_rows([record]) == [
        {"node": 3, "round": 1, "phase": "train", "seconds": 2.0, "cpu_seconds": 1.5},
        {"node": 3, "round": 1, "phase": "wait", "seconds": 0.5, "cpu_seconds": 0.0}]
    note = phase_note({"phases": {"train": [6.0, 3.0], "validation": [1.0, 1.0],
                                  "wait": [9.0, 0.001]}})
    assert note == [("CPU time by phase (4.0 s over every node and round): train 75%, "
                    "validation 25% (per node and round in phases.csv).")]
    assert phase_note({}) == []


def test_eval_every_skips_the_rounds_between_and_changes_no_byte_nor_the_last_f1(
        tmp_path, data_dir):
    """report.eval_every = 2 over 3 rounds: rounds 0, 2 and 3 (the last) evaluated, round 1
    not; bytes and the final F1 as with every round evaluated; each round's phases name the
    evaluation only where it ran."""
    from tests.helpers import mnist_config, run_in_process

    runs = {}
    for every in (1, 2):
        config = mnist_config(data_dir, 600, nodes=3, rounds=3, report={"eval_every": every})
        runs[every] = run_in_process(config, tmp_path / str(every))
    for every_round, every_other in zip(runs[1], runs[2], strict=True):
        assert [bool(r["global_test"]["by_rule"]) for r in every_other["rounds"]] == [
            True, False, True, True]
        assert "evaluation_global" not in every_other["rounds"][1]["phases"]
        assert "evaluation_global" in every_other["rounds"][2]["phases"]
        assert every_other["bytes_sent"] == every_round["bytes_sent"]
        assert (every_other["rounds"][-1]["global_test"]["f1"]
                == every_round["rounds"][-1]["global_test"]["f1"])
        for record in every_round["rounds"][1:]:
            assert {"train", "teacher", "aggregation", "validation", "distance",
                    "evaluation_local", "evaluation_global"} <= set(record["phases"])


def test_every_screen_is_a_phase_so_its_time_is_never_dropped_from_the_profile():
    assert set(SCREENS) <= set(PHASES)
    assert set(SCREENS) <= set(PHASE_GROUPS["screens"])
