"""The command line without nodes: every argument explained, a bare `down` that never stops
other people's runs unasked, `logs --follow` on a node that is still writing."""

import argparse
import io
import subprocess
import sys
import threading

import pytest

from deploy import cli
from deploy.backends import launchers, local
from node.errors import DeployError
from tests.helpers import REPO, wait_until


def every_action(parser):
    """(command, action) for every argument of the parser and its subcommands."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from ((f"{name} {a.dest}", a) for a in sub._actions)
        else:
            yield "protofed", action


def test_every_argument_has_help_text():
    missing = [name for name, action in every_action(cli.build_parser())
               if not (action.help or "").strip()]
    assert missing == []


def no_swarm(manager=""):
    raise DeployError("no swarm manager here")


@pytest.fixture
def two_runs(monkeypatch):
    """One local run and one Docker run are running; records what gets stopped."""
    stopped = []
    monkeypatch.setattr(local, "running_runs", lambda root: [
        {"run_id": "mine", "alive": {"0": 1}, "start_times": {}, "dir": "/nonexistent"}])
    monkeypatch.setattr(local, "stop_pids", lambda pids, starts: stopped.append("mine"))
    monkeypatch.setattr(launchers.docker, "connect", lambda: object())
    monkeypatch.setattr(launchers.swarm, "connect", no_swarm)
    monkeypatch.setattr(launchers.docker, "running_runs", lambda client: {"theirs": [("0", "up")]})
    monkeypatch.setattr(launchers.docker, "run_folder_of", lambda client, run_id: None)
    monkeypatch.setattr(launchers.docker, "down_run", lambda client, run_id: (
        stopped.append(run_id) or (1, 1)) if run_id == "theirs" else (0, 0))
    return stopped


class Stdin(io.StringIO):
    def __init__(self, text, terminal):
        super().__init__(text)
        self.terminal = terminal

    def isatty(self):
        return self.terminal


def test_a_bare_down_in_a_script_stops_nothing_and_says_how(two_runs, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", Stdin("", terminal=False))
    assert cli.main(["down"]) == 2
    assert two_runs == []
    err = capsys.readouterr().err
    assert "would stop every running federation (mine, theirs)" in err and "--all" in err


@pytest.mark.parametrize(("answer", "code", "stopped"), [
    ("y\n", 0, ["mine", "theirs"]), ("\n", 2, []), ("no\n", 2, []), ("", 2, [])])
def test_a_bare_down_on_a_terminal_asks_first(two_runs, monkeypatch, capsys, answer, code,
                                              stopped):
    monkeypatch.setattr("sys.stdin", Stdin(answer, terminal=True))
    assert cli.main(["down"]) == code
    assert two_runs == stopped
    assert "stop every running federation (mine, theirs)? [y/N]" in capsys.readouterr().out


def test_down_all_and_down_of_one_run_do_not_ask(two_runs, monkeypatch):
    monkeypatch.setattr("sys.stdin", Stdin("", terminal=False))
    assert cli.main(["down", "theirs"]) == 0
    assert two_runs == ["theirs"]
    two_runs.clear()
    assert cli.main(["down", "--all"]) == 0
    assert two_runs == ["mine", "theirs"]


def test_follow_prints_the_tail_then_what_is_written_until_the_node_ends(tmp_path):
    log = tmp_path / "node-0.log"
    log.write_text("".join(f"line {i}\n" for i in range(5)))
    writing = threading.Event()
    out = io.StringIO()

    def node():
        try:
            for i in range(5, 8):
                # each line once the follower has printed what came before (the tail first):
                # it is following while the node writes
                before = f"line {i - 1}\n"
                wait_until(lambda before=before: out.getvalue().endswith(before),
                           f"{before!r} printed", timeout=60, interval=0.01)
                with open(log, "a") as handle:
                    handle.write(f"line {i}\n")
        finally:
            writing.set()  # the node ends right after its last line

    threading.Thread(target=node, daemon=True).start()
    local.follow_file(log, 2, lambda: not writing.is_set(), out, poll=0.01)
    assert out.getvalue() == "".join(f"line {i}\n" for i in (3, 4, 5, 6, 7))


def test_every_backend_the_config_accepts_has_a_launcher():
    from deploy.backends.launchers import LAUNCHERS
    from node.settings import BACKENDS

    assert set(LAUNCHERS) == set(BACKENDS)


def test_the_command_line_loads_no_torch():
    """Commands that train nothing start without torch: importing the command line, the
    resolved federation and loading a config leave it unloaded."""
    probe = ("import sys, deploy.cli, node.federation, node.config; "
             "node.config.load('examples/quick.toml'); "
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                          text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout[:500]


@pytest.mark.parametrize("argv", [
    ["up", "-c", "QUICK", "--run-id", "../evil"], ["compose", "-c", "QUICK", "--run-id", "a/b"],
    ["collect", "../x"], ["down", ".hidden"]])
def test_a_run_id_that_leaves_the_results_folder_is_refused_before_anything(argv, capsys,
                                                                            tmp_path,
                                                                            monkeypatch):
    monkeypatch.chdir(tmp_path)
    quick = str(REPO / "examples" / "quick.toml")
    with pytest.raises(SystemExit) as stop:
        cli.main([quick if arg == "QUICK" else arg for arg in argv])
    assert stop.value.code == 2
    assert "run id must be letters, digits" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_the_python_api_refuses_such_a_run_id_too(tmp_path):
    import protofed
    from node.errors import ConfigError
    with pytest.raises(ConfigError, match="run id must be"):
        protofed.run(str(REPO / "examples" / "quick.toml"), run_id="../evil",
                     overrides=[f"deploy.results_dir={tmp_path}"], progress=False)
    assert list(tmp_path.iterdir()) == []


def test_logs_takes_a_run_folder_like_report_or_an_id_under_the_results_folder(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(launchers.docker, "connect", no_swarm)  # no engine needed
    monkeypatch.setattr(launchers.swarm, "connect", no_swarm)
    monkeypatch.chdir(tmp_path)
    logs = tmp_path / "elsewhere" / "r1" / "logs"
    logs.mkdir(parents=True)
    (logs / "node-0.log").write_text("round 1 done\n")
    assert cli.main(["logs", str(tmp_path / "elsewhere" / "r1"), "0"]) == 0
    assert "round 1 done" in capsys.readouterr().out
    assert cli.main(["logs", "r1", "0", "--results-dir", str(tmp_path / "elsewhere")]) == 0
    assert "round 1 done" in capsys.readouterr().out
    assert cli.main(["logs", "../nosuch", "0"]) == 2
    assert "run id must be letters, digits" in capsys.readouterr().err


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA")
def test_cuda_on_a_machine_without_it_names_the_setting_to_change(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = cli.main(["up", "-c", str(REPO / "examples" / "quick.toml"),
                     "--set", "train.device=cuda"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert 'train.device = "cuda"' in err[0] and 'set train.device = "auto"' in err[0]
    assert "deploy.memory" not in err[0]

