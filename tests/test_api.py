"""The Python API (protofed): its tables by hand, and real federations run from Python outside
the checkout, in a sweep and in the example notebook."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import protofed
from deploy.views.progress import in_notebook, progress_html
from node.errors import ConfigError
from node.record import Evaluation, NodeRecord, RoundRecord
from protofed.api import sweep_settings
from protofed.frames import round_rows
from tests.helpers import REPO

QUICK = REPO / "examples" / "quick.toml"


def test_a_round_row_sums_each_kinds_bytes_over_peers_and_names_every_rules_scores():
    record = RoundRecord(
        round=1, global_test=Evaluation(accuracy=0.5, f1=0.4, rule="argmax", by_rule={
            "argmax": {"f1": 0.4, "accuracy": 0.5}, "prototype": {"f1": 0.3, "accuracy": 0.35}}),
        local_test=Evaluation(accuracy=0.7, f1=0.6), train_seconds=1.0,
        communication_seconds=0.5, bytes_sent=330, bytes_received=40,
        bytes_sent_by_peer={"1": {"model": 100, "prototypes": 10}, "2": {"model": 200}},
        bytes_received_by_peer={"1": {"prototypes": 40}},
        refusals=[{"peer": 1, "what": "prototypes", "rule": "validation", "reason": "x"}],
        undrawn_peers=[4, 7])
    [row] = round_rows([NodeRecord(node=3, rounds=[record])])
    assert row == {"node": 3, "round": 1, "f1": 0.4, "accuracy": 0.5, "rule": "argmax",
                   "local_f1": 0.6, "local_accuracy": 0.7, "f1_argmax": 0.4,
                   "accuracy_argmax": 0.5, "f1_prototype": 0.3, "accuracy_prototype": 0.35,
                   "bytes_sent": 330, "bytes_received": 40, "bytes_sent_model": 300,
                   "bytes_sent_prototypes": 10, "bytes_received_model": 0,
                   "bytes_received_prototypes": 40, "seconds": 1.5, "refused": 1,
                   "missing_peers": 0, "undrawn_peers": 2}


def test_a_sweep_is_every_combination_of_the_grid_then_each_seed():
    assert sweep_settings({"a": [1, 2], "b": ["x"]}, [7, 8]) == [
        {"a": 1, "b": "x", "seed": 7}, {"a": 1, "b": "x", "seed": 8},
        {"a": 2, "b": "x", "seed": 7}, {"a": 2, "b": "x", "seed": 8}]
    assert sweep_settings({}, []) == [{}]
    with pytest.raises(ConfigError, match="sweep grid: a lists no value"):
        sweep_settings({"a": []}, [])
    with pytest.raises(ConfigError, match="seed is both in the grid and in seeds"):
        sweep_settings({"seed": [1]}, [2])


def test_load_says_what_a_folder_lacks(tmp_path):
    with pytest.raises(ConfigError, match="nowhere: no such folder"):
        protofed.load(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match="no summary.json \\(not a protofed results folder\\)"):
        protofed.load(tmp_path)
    (tmp_path / "federation.json").write_text("{}")
    with pytest.raises(ConfigError, match="no summary.json \\(no node of it started: it has "
                       "no run.json\\)"):
        protofed.load(tmp_path)
    (tmp_path / "run.json").write_text(json.dumps({
        "backend": "local", "pids": {"0": os.getpid()}, "launcher": {}}))
    with pytest.raises(ConfigError, match="no summary.json \\(the run has not ended: node 0 "
                       "is still running and its launcher is gone; `protofed down"):
        protofed.load(tmp_path)


def test_a_config_of_another_type_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="config: expected a file path, a dict or a loaded "
                                          "config, not int"):
        protofed.run(3)


def test_the_notebook_table_escapes_its_text_and_outside_a_kernel_is_not_chosen():
    html = progress_html([NodeRecord(node=0, status="running", rounds_done=1, bytes_sent=1200)],
                         3, "0:05 elapsed <now>")
    assert "<td>0</td><td>running</td>" in html and "1/3" in html and "1,200" in html
    assert "&lt;now&gt;" in html
    assert not in_notebook()


def test_importing_the_api_loads_no_torch():
    script = "import sys, protofed; print(sorted({'torch', 'pandas'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True, timeout=120)
    assert done.stdout.strip() == "['pandas']"


def test_a_module_named_like_ours_in_the_working_folder_cannot_break_the_command(tmp_path):
    for name in ("node", "deploy", "protofed"):
        (tmp_path / f"{name}.py").write_text("raise SystemExit('a module of the user ran')\n")
    command = Path(sys.executable).parent / "protofed"  # the console script of this venv
    done = subprocess.run([str(command), "status"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0 and "a module of the user ran" not in done.stderr, done.stderr
    # the Python API's own `up` process: python -P, so the folder is not on its path
    done = subprocess.run([sys.executable, "-P", "-m", "deploy.cli", "status"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and "a module of the user ran" not in done.stderr, done.stderr


def test_the_errors_the_docs_name_are_importable_from_the_package():
    import protofed
    from node.errors import ConfigError, DataError, DeployError, ProtofedError
    assert (protofed.ConfigError, protofed.DataError, protofed.DeployError,
            protofed.ProtofedError) == (ConfigError, DataError, DeployError, ProtofedError)
    with pytest.raises(protofed.ConfigError, match="rounds"):
        protofed.run(str(REPO / "examples" / "quick.toml"), overrides=["rounds=-1"],
                     progress=False)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: sweep_settings({"aggregation.rule": "mean"}, ()),
     r"sweep grid: aggregation.rule must list its values, e.g. \['mean'\], got 'mean'"),
    (lambda: sweep_settings({"rounds": 3}, ()), r"sweep grid: rounds must list its values"),
    (lambda: sweep_settings({}, 1), r"sweep: seeds must list its values"),
    (lambda: protofed.run(QUICK, overrides="rounds=0", progress=False),
     r"overrides must list its values, e\.g\. \['rounds=0'\]"),
])
def test_a_single_value_where_a_list_belongs_is_named_not_read_a_character_at_a_time(
        call, message):
    with pytest.raises(ConfigError, match=message):
        call()


def test_a_sweep_checks_every_combination_before_the_first_runs(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr("protofed.api.run", lambda *a, **k: ran.append(k))
    with pytest.raises(ConfigError, match=r"sweep \{'aggregation.rule': 'medain'\}: .*medain"):
        protofed.sweep(QUICK, grid={"aggregation.rule": ["mean", "medain"]}, progress=False)
    assert ran == []


def test_a_python_runs_narrow_table_names_the_python_way_to_every_column(tmp_path):
    from tests.test_table import wide_summary
    run = protofed.api.Run(tmp_path, wide_summary(tmp_path, nodes=30), ())
    narrow = " ".join(run.table(width=60).split())  # the notes wrap at the width
    assert "table() without a width shows every column" in narrow
    assert "table(every=True) shows every node" in narrow
    assert "--wide" not in narrow and "--all" not in narrow


def test_a_run_whose_nodes_this_machine_cannot_ask_is_judged_by_their_records(tmp_path):
    """A swarm's services cannot be asked from here: a launcher-less run whose records
    still say running is not summarised over its running nodes' heads."""
    from deploy.ending import still_running
    (tmp_path / "run.json").write_text(json.dumps({"backend": "swarm", "nodes": 2}))
    for node, status in ((0, "finished"), (1, "running")):
        (tmp_path / f"node-{node}.json").write_text(json.dumps(
            {"node": node, "status": status, "rounds": []}))
    assert still_running(tmp_path) == ("node 1 may be still running and its launcher is "
                                       "gone; `protofed down " + tmp_path.name + "` stops them")
