"""The Python API running real federations: from outside the checkout against the command
line's bytes, and a sweep over two seeds."""

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

import protofed
from tests.helpers import REPO, read_results
from tests.helpers import protofed as protofed_command

QUICK = REPO / "examples" / "quick.toml"


def _bytes(nodes: list[dict]) -> list[tuple[int, int, int, int]]:
    return [(n["node"], r["round"], r["bytes_sent"], r["bytes_received"])
            for n in nodes for r in n["rounds"]]


@pytest.mark.integration
def test_a_run_from_python_outside_the_checkout_has_the_command_lines_bytes(tmp_path, data_dir):
    # deploy.memory skips the memory probe (seconds per run) and pictures are not drawn (2 CPU
    # s a run): the bytes depend on neither
    settings = ["rounds=2", "data.subset=1000", 'deploy.memory="512m"', "report.pictures=false",
                "model.teacher_channels=[4, 8]", f"deploy.results_dir={tmp_path / 'results'}"]
    script = (f"import json, protofed\n"
              f"run = protofed.run({str(QUICK)!r}, overrides={settings!r}, run_id='api', "
              f"progress=False)\n"
              f"print(json.dumps(run.rounds[['node', 'round', 'bytes_sent', 'bytes_received']]"
              f".values.tolist()))\n")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {**os.environ, "PROTOFED_DATA_DIR": str(data_dir)}
    done = subprocess.run([sys.executable, "-c", script], cwd=outside, capture_output=True,
                          text=True, timeout=600, env=env, check=False)
    assert done.returncode == 0, done.stderr
    rows = [tuple(row) for row in json.loads(done.stdout.splitlines()[-1])]
    assert sorted({(node, round_) for node, round_, _, _ in rows}) == [
        (node, round_) for node in range(5) for round_ in range(3)]
    cli = protofed_command("up", "-c", QUICK, "--run-id", "cli",
                           *[part for s in settings for part in ("--set", s)], timeout=600,
                           env=env)
    assert cli.returncode == 0, cli.stderr
    assert rows == _bytes(read_results(tmp_path / "results" / "cli")[1])
    # read back from its folder, the same tables
    again = protofed.load(tmp_path / "results" / "api")
    assert again.rounds[["node", "round", "bytes_sent", "bytes_received"]].values.tolist() \
        == [list(row) for row in rows]
    assert again.nodes["status"].tolist() == ["finished"] * 5


@pytest.mark.integration
def test_a_sweep_over_two_seeds_is_one_table_with_a_column_per_swept_key(tmp_path, data_dir):
    """On the sim backend, as a sweep of many runs would be."""
    config = {"name": "sweep", "nodes": 2, "rounds": 1,
              "data": {"dataset": "mnist", "subset": 1000, "dir": str(data_dir)},
              "model": {"teacher_channels": [4, 8]},
              "deploy": {"results_dir": str(tmp_path), "memory": "512m"}}
    frame = protofed.sweep(config, grid={"aggregation.rule": ["mean"]}, seeds=[1, 2],
                           backend="sim", progress=False)
    assert list(frame.columns[:3]) == ["run_id", "aggregation.rule", "seed"]
    assert len(frame) == 2 * 2 * 2  # seeds x nodes x rounds 0-1
    assert frame.groupby("seed")["run_id"].nunique().tolist() == [1, 1]
    assert frame["run_id"].nunique() == 2
    runs = [protofed.load(tmp_path / run_id) for run_id in frame["run_id"].unique()]
    assert [run.summary["nodes"][0]["status"] for run in runs] == ["finished", "finished"]
    assert all(json.loads((run.folder / "run.json").read_text())["backend"] == "sim"
               for run in runs)
    by_seed = frame[frame["round"] == 1].set_index(["seed", "node"])["f1"]
    assert not by_seed.isna().any() and isinstance(frame, pd.DataFrame)
