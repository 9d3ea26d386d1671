"""What the Docker test files share: the engine (skipped with a visible reason where none
answers; under CI, CI=true, that is a failure), the node image, protofed installed from a
wheel outside the checkout, and the small config on the Docker backend. tests/conftest.py
makes the fixtures every file's."""

import gc
import os
import shutil
import subprocess
import sys
import sysconfig
import warnings
from pathlib import Path

import pytest

from deploy.backends import docker_backend, image
from tests import helpers


def _engine():
    try:
        return docker_backend.connect()
    except Exception as exc:  # noqa: BLE001 - any failure means: no engine here
        reason = str(exc)
    # The SDK leaves the socket of a refused connection open; collect it here (the error and
    # its traceback are gone) rather than let its ResourceWarning fail a later test.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    return RuntimeError(reason)


@pytest.fixture(scope="session")
def client():
    engine = _engine()
    if isinstance(engine, Exception):
        reason = f"no Docker engine: {engine}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (CI=true: Docker tests must run)")
        pytest.skip(reason)
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def node_image(client):
    """Build (or reuse) the node image once per test process."""
    return image.ensure_image(client, "python:3.11-slim")


# The shared small config on the Docker backend, with container-sized timeouts.
DOCKER = {"deploy": 'backend = "docker"\nmemory = "1g"', "startup": 120, "round_timeout": 90}


def write_config(tmp_path, data_dir, name, **settings):
    return helpers.write_config(tmp_path, data_dir, name, **{**DOCKER, **settings})


def protofed(*args, timeout=600, env=None):
    return helpers.protofed(*args, timeout=timeout, env=env)


@pytest.fixture(scope="session")
def installed(tmp_path_factory):
    """protofed as a user gets it with `pip install`: a wheel built from this repository,
    installed in a fresh venv outside the checkout (its dependencies are the test venv's,
    added as a path so nothing is downloaded). Returns a function running that `protofed`
    from a folder outside the checkout."""
    home = tmp_path_factory.mktemp("installed")
    source, wheels, venv = home / "source", home / "wheels", home / "venv"
    # built from a copy, so no build/ folder of an earlier build can add stale files
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in image.SOURCE_DIRS:
        shutil.copytree(helpers.REPO / name, source / name, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(helpers.REPO / name, source / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    subprocess.run(pip + ["wheel", "--no-deps", "--no-build-isolation", "--wheel-dir",
                          str(wheels), str(source)], check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(pip + ["--python", str(python), "install", "--no-deps",
                          *map(str, wheels.glob("protofed-*.whl"))], check=True,
                   capture_output=True)
    shutil.rmtree(source)
    purelib = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = subprocess.run([str(python), "-c", purelib], check=True, capture_output=True,
                          text=True)
    (Path(site.stdout.strip()) / "test-dependencies.pth").write_text(
        sysconfig.get_path("purelib") + "\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def run(*args, timeout=600):
        return subprocess.run([str(venv / "bin" / "protofed"), *map(str, args)], cwd=home,
                              env=env, capture_output=True, text=True, timeout=timeout,
                              check=False)
    run.python = python
    run.cwd, run.env = home, env
    return run


def run_federation(tmp_path, data_dir, name, installed, **settings):
    """`protofed up` of the installed wheel on Docker to the end: (completed process,
    node results)."""
    config = write_config(tmp_path, data_dir, name, **settings)
    done = installed("up", "-c", config, "--run-id", name)
    return done, helpers.read_results(tmp_path / "results" / name)[1]


def leftovers(client, run_id):
    containers = client.containers.list(all=True, ignore_removed=True, filters={"label": f"protofed.run={run_id}"})
    networks = client.networks.list(filters={"label": f"protofed.run={run_id}"})
    return containers + networks
