"""Node containers are unprivileged, in the Docker backend and in Compose files alike."""

import os
import shutil
import subprocess

import pytest

from deploy.backends import docker_backend
from deploy.backends.compose import compose_document, render
from deploy.backends.plan import keys_dir
from node.net.security import secret_file
from tests.helpers import written_docker_plan, written_plan


def test_every_setting_drops_a_privilege():
    settings = docker_backend.hardening()
    assert settings["cap_drop"] == ["ALL"] and settings["read_only"] is True
    assert settings["security_opt"] == ["no-new-privileges:true"]
    assert 0 < settings["pids_limit"] <= 4096
    uid = int(settings["user"].split(":")[0])
    assert uid != 0 and uid == (os.getuid() or docker_backend.NODE_UID)


def test_compose_services_carry_the_same_settings(tmp_path):
    config, plan = written_docker_plan(tmp_path)
    services = compose_document(config, plan, "img:1", tmp_path)["services"]
    assert len(services) == 3
    for service in services.values():
        assert service["cap_drop"] == ["ALL"] and service["read_only"] is True
        assert service["security_opt"] == ["no-new-privileges:true"]
        assert service["user"] == docker_backend.container_user()
        assert {"type": "tmpfs", "target": "/tmp"} in service["volumes"]


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose not installed")
def test_docker_compose_accepts_the_file(tmp_path):
    config, plan = written_docker_plan(tmp_path)
    path = tmp_path / "compose.yaml"
    path.write_text(render(compose_document(config, plan, "img:1", tmp_path), "test"))
    done = subprocess.run(["docker-compose", "-f", str(path), "config", "-q"],
                          capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(os.getuid() != 0, reason="a non-root launcher's nodes run as itself")
def test_a_root_launcher_hands_the_node_user_what_it_must_write_and_read(tmp_path):
    _, plan = written_plan(tmp_path)
    docker_backend.prepare_node_access(plan)
    for node_id in range(3):
        assert docker_backend.node_folder(plan, node_id).stat().st_uid == docker_backend.NODE_UID
    assert plan.results_dir.stat().st_uid == 0  # the run folder itself stays the launcher's
    for node_id in range(3):
        assert (keys_dir(plan) / secret_file(node_id)).stat().st_uid == docker_backend.NODE_UID
