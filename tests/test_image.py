"""Which base the node image is built on: this machine first, the network only if needed."""

import docker.errors
import pytest

from deploy import image


class Images:
    """A Docker client's image store with some images present; records every pull."""

    def __init__(self, present, pull_fails=False):
        self.present = set(present)
        self.pulls = []
        self.pull_fails = pull_fails

    def get(self, name):
        if name not in self.present:
            raise docker.errors.ImageNotFound(name)
        return name

    def pull(self, name):
        self.pulls.append(name)
        if self.pull_fails:
            raise docker.errors.APIError("no route to the registry")
        self.present.add(name)


class Client:
    def __init__(self, images):
        self.images = images


def test_the_configured_base_is_used_when_it_is_here():
    images = Images({"python:3.11-slim", image.LOCAL_BASE_IMAGE})
    assert image.resolve_base_image(Client(images), "python:3.11-slim") == "python:3.11-slim"
    assert images.pulls == []


def test_the_local_base_is_used_without_trying_the_network(capsys):
    images = Images({image.LOCAL_BASE_IMAGE})
    assert image.resolve_base_image(Client(images), "python:3.11-slim") == image.LOCAL_BASE_IMAGE
    assert images.pulls == []
    assert capsys.readouterr().err == ""  # nothing to say: no pull failure printed


def test_with_nothing_here_the_base_is_pulled():
    images = Images(set())
    assert image.resolve_base_image(Client(images), "python:3.11-slim") == "python:3.11-slim"
    assert images.pulls == ["python:3.11-slim"]


def test_a_failed_pull_is_said_once_and_the_local_base_is_made(monkeypatch, capsys):
    made = []
    monkeypatch.setattr(image, "_run", lambda command, what: made.append(command))
    images = Images(set(), pull_fails=True)
    assert image.resolve_base_image(Client(images), "python:3.11-slim") == image.LOCAL_BASE_IMAGE
    err = capsys.readouterr().err
    assert err.count("cannot pull python:3.11-slim") == 1 and "making the local base" in err
    assert made and made[0][-1] == image.LOCAL_BASE_IMAGE


@pytest.mark.parametrize("present", [set(), {image.LOCAL_BASE_IMAGE}])
def test_asking_for_the_local_base_never_pulls(monkeypatch, present):
    monkeypatch.setattr(image, "_run", lambda command, what: None)
    images = Images(present)
    assert image.resolve_base_image(Client(images), image.LOCAL_BASE_IMAGE) == image.LOCAL_BASE_IMAGE
    assert images.pulls == []
