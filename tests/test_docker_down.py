"""`protofed down` against a `protofed up` that removes the same run at the same moment:
what down reports, without an engine (the engine-backed test is in test_docker.py)."""

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
