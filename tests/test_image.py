"""Which base the node image is built on: this machine first, the network only if needed."""

import docker.errors
import pytest

from deploy.backends import image


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


def test_runtime_requirements_leave_out_extras_and_pin_the_cpu_torch():
    declared = ["torch>=2.2,<=2.13.0", "pyzmq>=25", 'pytest>=7; extra == "test"',
                "numpy>=1.24; python_version >= '3.11'"]
    assert image.runtime_requirements(declared) == [
        image.TORCH_SPEC, "pyzmq>=25", "numpy>=1.24; python_version >= '3.11'"]


def test_the_installed_requirements_are_the_declared_ones():
    """What the image installs is what pip recorded for protofed, extras left out."""
    required = image.project_requirements()
    assert required[0] == image.TORCH_SPEC
    assert any(r.startswith("pyzmq") for r in required)
    assert not any("pytest" in r or "matplotlib" in r or "pandas" in r for r in required)


def test_the_build_context_holds_the_packages_of_an_installed_copy(tmp_path, monkeypatch):
    """No checkout needed: the packages are copied from wherever they are installed
    (here a site-packages-like folder with no pyproject.toml beside it)."""
    installed = tmp_path / "site-packages"
    for name in image.SOURCE_DIRS:
        (installed / name / "sub").mkdir(parents=True)
        (installed / name / "__init__.py").write_text(f"# {name}\n")
        (installed / name / "sub" / "part.py").write_text("x = 1\n")
        (installed / name / "__pycache__").mkdir()
        (installed / name / "__pycache__" / "stale.py").write_text("")
    downloads = []
    monkeypatch.setattr(image, "_run", lambda command, what: downloads.append(what))
    context = image.prepare_context(tmp_path / "build", installed)
    copied = sorted(str(p.relative_to(context / "app")) for p in (context / "app").rglob("*.py"))
    assert copied == sorted(f"{n}/{f}" for n in image.SOURCE_DIRS
                            for f in ("__init__.py", "sub/part.py"))
    assert (context / "Dockerfile").read_text().startswith("# One federation node.")
    requirements = (context / "deps" / "requirements.txt").read_text().split()
    assert requirements[0] == image.TORCH_SPEC
    assert downloads == ["download the dependency wheels"]


def test_the_tag_changes_with_the_code_and_the_base(tmp_path):
    root = tmp_path / "pkg"
    (root / "node").mkdir(parents=True)
    (root / "node" / "a.py").write_text("x = 1\n")
    first = image.content_hash(root, "base:1", ["torch"])
    assert image.content_hash(root, "base:2", ["torch"]) != first
    assert image.content_hash(root, "base:1", ["torch", "pyzmq"]) != first
    (root / "node" / "a.py").write_text("x = 2\n")
    assert image.content_hash(root, "base:1", ["torch"]) != first
