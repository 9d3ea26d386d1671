"""`protofed down` against a `protofed up` that removes the same run at the same moment:
what down reports, and how every container is stopped at once, without an engine (the
engine-backed ones are in test_docker_lifecycle.py)."""

from types import SimpleNamespace

from deploy.backends import docker_backend


def test_down_counts_the_containers_it_stopped_even_when_up_removed_them_first(monkeypatch,
                                                                               tmp_path):
    found = [SimpleNamespace(labels={"protofed.node": str(i)},
                             attrs={"Mounts": [{"Type": "bind",  # as the engine lists it
                                                "Destination": docker_backend.RESULTS_MOUNT,
                                                "Source": str(tmp_path)}]})
             for i in range(3)]
    stopped, logs_saved = [], []
    monkeypatch.setattr(docker_backend, "run_containers", lambda client, run_id: found)
    monkeypatch.setattr(docker_backend, "stop_containers",
                        lambda containers, grace: stopped.extend(containers))
    monkeypatch.setattr(docker_backend, "save_logs",
                        lambda by_node, folder: logs_saved.append((sorted(by_node), folder)))
    # `up` saw its containers exit during the grace period and removed them and the network
    monkeypatch.setattr(docker_backend, "remove_run", lambda client, run_id: (0, 0))
    assert docker_backend.down_run(object(), "run-1") == (3, 0)
    assert stopped == found and logs_saved == [([0, 1, 2], tmp_path / "logs")]


class Container:
    """A container that records each request and exits on SIGTERM unless `stubborn`."""

    def __init__(self, name: str, calls: list, stubborn: bool = False):
        self.name, self.calls, self.stubborn, self.status = name, calls, stubborn, "running"

    def kill(self, signal: str = "SIGKILL"):
        self.calls.append((signal, self.name))
        if signal == "SIGKILL" or not self.stubborn:
            self.status = "exited"

    def reload(self):
        self.calls.append(("inspect", self.name))

    def wait(self, timeout):
        self.calls.append(("wait", self.name))


def test_every_container_is_signalled_before_any_is_waited_for_and_a_stubborn_one_is_killed():
    calls = []
    containers = [Container("a", calls), Container("b", calls, stubborn=True),
                  Container("c", calls)]
    docker_backend.stop_containers(containers, grace=0.0)
    # one grace period for the run, not one per container: all three are asked at once
    assert calls[:3] == [("SIGTERM", "a"), ("SIGTERM", "b"), ("SIGTERM", "c")]
    assert ("SIGKILL", "b") in calls and ("SIGKILL", "a") not in calls
    assert [c.status for c in containers] == ["exited"] * 3
