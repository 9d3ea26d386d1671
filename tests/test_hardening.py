"""Node containers are unprivileged, in the Docker backend and in Compose files alike."""

import os
import shutil
import subprocess

import pytest

from deploy import docker_backend
from deploy.compose import compose_document
from deploy.plan import keys_dir
from node.security import secret_file
from tests.helpers import written_plan


def test_every_setting_drops_a_privilege():
    settings = docker_backend.hardening()
    assert settings["cap_drop"] == ["ALL"] and settings["read_only"] is True
    assert settings["security_opt"] == ["no-new-privileges:true"]
    assert 0 < settings["pids_limit"] <= 4096
    uid = int(settings["user"].split(":")[0])
    assert uid != 0 and uid == (os.getuid() or docker_backend.NODE_UID)


def test_compose_services_carry_the_same_settings(tmp_path):
    config, plan = written_plan(tmp_path)
    document = compose_document(config, plan, "img:1", tmp_path)
    for line in ("cap_drop: [ALL]", "security_opt: [no-new-privileges:true]",
                 "\n    read_only: true\n",
                 f'user: "{docker_backend.container_user()}"', "target: /tmp"):
        assert document.count(line) == 3, line


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose not installed")
def test_docker_compose_accepts_the_file(tmp_path):
    config, plan = written_plan(tmp_path)
    path = tmp_path / "compose.yaml"
    path.write_text(compose_document(config, plan, "img:1", tmp_path))
    done = subprocess.run(["docker-compose", "-f", str(path), "config", "-q"],
                          capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(os.getuid() != 0, reason="a non-root launcher's nodes run as itself")
def test_a_root_launcher_hands_the_node_user_what_it_must_write_and_read(tmp_path):
    _, plan = written_plan(tmp_path)
    docker_backend.grant_node_access(plan)
    assert plan.results_dir.stat().st_uid == docker_backend.NODE_UID
    for node_id in range(3):
        assert (keys_dir(plan) / secret_file(node_id)).stat().st_uid == docker_backend.NODE_UID
