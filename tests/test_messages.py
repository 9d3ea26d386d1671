"""What a new user reads when a setting is wrong: one line that names the --set option or
the file behind it, no exception class names, counts in the singular when there is one."""

import sys

import pytest

from deploy import cli
from deploy.backends.capacity import NodeFootprint, check_memory
from node.config import from_dict, load
from node.errors import ConfigError, DeployError
from node.federation import resolve
from node.wording import counted
from tests.helpers import REPO

QUICK = REPO / "examples" / "quick.toml"


def addresses(n):
    return [f"tcp://127.0.0.1:{7000 + i}" for i in range(n)]


def test_a_graph_the_set_options_made_impossible_names_them_and_the_file():
    overrides = ("topology.kind=k_regular", "topology.k=3", "rounds=2")
    config = load(QUICK, overrides)
    with pytest.raises(ConfigError) as caught:
        resolve(config, addresses(5), addresses(5), str(QUICK), overrides)
    assert str(caught.value).startswith(
        f"{QUICK} with --set topology.kind=k_regular --set topology.k=3: [topology] ")


def test_link_values_given_with_set_are_blamed_on_the_option():
    with pytest.raises(ConfigError, match=r"^--set links.bandwidth=abc: links.bandwidth 'abc': "
                                          "write a number"):
        load(QUICK, ["links.bandwidth=abc"])
    with pytest.raises(ConfigError, match=r"^--set links.edges=\[\{a=1\}\]: unknown key "
                                          r"links.edges\[0\].a"):
        load(QUICK, ["links.edges=[{a=1}]"])
    # a value of the file itself is still the file's
    with pytest.raises(ConfigError, match=r"^<config>: links.delay '5xs'"):
        from_dict({"links": {"delay": "5xs"}}, overrides=["rounds=2"])


def test_the_topology_kinds_are_listed_once_each():
    with pytest.raises(ConfigError) as caught:
        from_dict({"topology": {"kind": "nonsense"}})
    listed = str(caught.value).split("must be one of ")[1].split(", got")[0].split(", ")
    assert len(listed) == len(set(listed)) and "file" in listed


def test_a_swarm_without_a_registry_reads_as_a_sentence():
    with pytest.raises(ConfigError, match=r"^<config>: deploy.registry must name a registry "
                                          r"every machine can pull from"):
        from_dict({"deploy": {"backend": "swarm"}})


def test_the_command_prints_the_message_without_the_exception_class(capsys):
    assert cli.main(["up", "-c", str(QUICK), "--set", "topology.kind=nonsense"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("protofed: --set topology.kind=nonsense: topology.kind must be")
    assert "ConfigError" not in err


def test_counts_of_one_are_singular():
    assert counted(1, "round") == "1 round" and counted(3, "round") == "3 rounds"
    footprint = NodeFootprint(runtime=200 * 2**20, shared=300 * 2**20, peak=340 * 2**20,
                              per_neighbour=2**20)
    note = check_memory(from_dict({"nodes": 1}), footprint, [0], 0, container=False,
                        where="here")
    assert "for 1 local node (" in note
    with pytest.raises(DeployError, match=r"^1 local node would need about"):
        check_memory(from_dict({"nodes": 1}), footprint, [0], 2**20, container=False,
                     where="here")


@pytest.mark.parametrize("where", ["a-file", "/proc/protofed-results"])
def test_a_results_folder_that_cannot_hold_the_run_stops_it_in_one_line(tmp_path, capsys,
                                                                        where):
    (tmp_path / "a-file").write_text("not a folder")
    folder = tmp_path / where if where == "a-file" else where
    assert cli.main(["up", "-c", str(QUICK), "--set", f"deploy.results_dir={folder}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"protofed: --set deploy.results_dir={folder}: deploy.results_dir "
                          f"'{folder}': cannot hold the run's folder: "), err
    assert "Traceback" not in err and len(err.splitlines()) == 1


def test_up_says_it_is_preparing_before_the_slow_part(capsys, monkeypatch, tmp_path):
    from deploy import launch
    from node.errors import DataError

    def slow_part(config):
        print("(the dataset is read here)", file=sys.stderr)
        raise DataError("mnist: stop here")
    monkeypatch.setattr(launch, "prepare_data", slow_part)
    assert cli.main(["up", "-c", str(QUICK), "--run-id", "early", "--set",
                     f"deploy.results_dir={tmp_path}"]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "protofed: preparing run early: the mnist dataset, then what one " \
                       "node needs in memory"
    assert lines[1:] == ["(the dataset is read here)", "protofed: mnist: stop here"]


def test_the_live_table_stays_off_the_terminal_until_the_first_look():
    import io

    from deploy.views.progress import LiveProgress

    stream = io.StringIO()
    progress = LiveProgress(rounds=2, stream=stream)
    assert not progress.live.is_started and stream.getvalue() == ""
    progress.finish()


def test_install_hints_work_wherever_protofed_is_installed():
    from deploy.views import monitor, pictures, tensorboard

    # an editable install of the checkout (-e '.[extra]') fails outside the checkout
    for hint in (pictures.PICTURES_HINT, monitor.HINT, tensorboard.HINT):
        assert "pip install " in hint and "-e" not in hint and ".[" not in hint, hint
