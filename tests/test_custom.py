"""Models and datasets of the user's own by import path: each contract is checked with one
clear message, and the example MLP trains in a federation, on MNIST and on the example
14x14 MNIST loader (in-process and through `protofed up`), with no file of protofed edited."""

import textwrap

import numpy as np
import pytest
from torch import nn

from deploy.backends.launchers import refuse_user_code
from node import data
from node.config import from_dict, user_code
from node.data import custom
from node.errors import ConfigError
from tests.helpers import REPO, mnist_config, protofed, run_in_process

EXAMPLE = REPO / "examples" / "custom"
GOOD = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self, embedding_dim, num_classes, mismatch=False):
        super().__init__()
        self.embed = nn.Linear(4, embedding_dim)
        self.classifier = nn.Linear(embedding_dim, num_classes)
        self.mismatch = mismatch

    def forward(self, x):
        e = torch.relu(self.embed(x.flatten(1)))
        logits = self.classifier(e)
        return (logits + 1.0 if self.mismatch else logits), e

def good(*, role, in_channels, image_size, num_classes, embedding_dim):
    return Net(embedding_dim, num_classes)
"""
BROKEN = {
    "not_a_module": "def make(**kw):\n    return 3\n",
    "raises": "def make(**kw):\n    raise RuntimeError('no GPU here')\n",
    "no_classifier": "from torch import nn\ndef make(**kw):\n    return nn.Linear(4, 10)\n",
    "one_tensor": GOOD + "class One(Net):\n    def forward(self, x):\n"
                  "        return super().forward(x)[0]\n"
                  "def make(**kw):\n    return One(8, 10)\n",
    "wrong_classes": GOOD + "def make(**kw):\n    return Net(8, 3)\n",
    "not_its_classifier": GOOD + "def make(**kw):\n    return Net(8, 10, mismatch=True)\n",
    "forward_fails": GOOD + "class Bad(Net):\n    def forward(self, x):\n"
                     "        return self.classifier(x), x\n"
                     "def make(**kw):\n    return Bad(8, 10)\n",
}


@pytest.fixture
def user_modules(tmp_path, monkeypatch):
    (tmp_path / "usernets.py").write_text(GOOD)
    for name, text in BROKEN.items():
        (tmp_path / f"user_{name}.py").write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def build(path):
    return custom.build_model(path, "model.teacher", role="teacher", in_channels=1,
                              image_size=2, num_classes=10, embedding_dim=8)


def test_a_model_that_keeps_the_contract_is_built(user_modules):
    model = build("usernets:good")
    assert isinstance(model.classifier, nn.Linear) and model.training


@pytest.mark.parametrize(("path", "message"), [
    ("nosuchmodule:make", "cannot import 'nosuchmodule'"),
    ("usernets:missing", "'usernets' has no 'missing'"),
    ("usernets:torch", "'torch' is not callable"),
    ("usernets:", "an import path is \"package.module:name\""),
    ("user_not_a_module:make", "must return a torch.nn.Module, got int"),
    ("user_raises:make", "the factory raised RuntimeError: no GPU here"),
    ("user_no_classifier:make", "needs a `classifier` attribute that is an nn.Linear"),
    ("user_one_tensor:make", ("forward must return a (logits, embedding) pair of tensors, "
                             "got Tensor")),
    ("user_wrong_classes:make", "logits must be [batch, 10], got [2, 3]"),
    ("user_not_its_classifier:make", "the logits must be model.classifier(embedding)"),
    ("user_forward_fails:make", "forward on a batch of [2, 1, 2, 2] raised RuntimeError"),
])
def test_a_broken_model_is_one_clear_config_error(user_modules, path, message):
    with pytest.raises(ConfigError) as caught:
        build(path)
    assert str(caught.value).startswith(f"model.teacher = {path!r}: ")
    assert message in str(caught.value)


def test_config_accepts_import_paths_and_refuses_widths_for_them():
    config = from_dict({"model": {"teacher": "pkg.mod:make", "student": "auto"}})
    assert user_code(config) == [("model.teacher", "pkg.mod:make")]
    with pytest.raises(ConfigError, match="model.teacher_channels applies to the built-in"):
        from_dict({"model": {"teacher": "pkg.mod:make", "teacher_channels": [4, 8]}})
    with pytest.raises(ConfigError, match="model.student"):
        from_dict({"model": {"student": "no-such-architecture"}})


@pytest.mark.parametrize(("table", "key"), [({"model": {"teacher": "mlp:mlp"}}, "model.teacher"),
                                            ({"data": {"dataset": "sm:load"}}, "data.dataset")])
def test_containers_refuse_user_code_before_starting(table, key):
    with pytest.raises(ConfigError, match=f"{key} = '.*' names a Python module of yours"
                                          ".*local backend"):
        refuse_user_code(from_dict(table))


# --- datasets -----------------------------------------------------------------------------

LOADERS = """
import numpy as np

def images(n=6, size=4):
    return (np.arange(n * size * size) % 256).astype(np.uint8).reshape(n, size, size)

def good(data_dir):
    return images(), np.array([0, 1, 2, 0, 1, 2])

def with_classes(data_dir):
    return images()[:, None], np.array([0, 1, 0, 1, 0, 1], dtype=np.int32), 5

def floats(data_dir):
    return images() / 255.0, np.zeros(6, dtype=int)

def not_square(data_dir):
    return images().reshape(6, 2, 8), np.zeros(6, dtype=int)

def too_few_labels(data_dir):
    return images(), np.zeros(5, dtype=int)

def negative(data_dir):
    return images(), np.array([0, 1, -1, 0, 1, 0])

def beyond(data_dir):
    return images(), np.array([0, 1, 2, 0, 1, 0]), 2

def float_labels(data_dir):
    return images(), np.zeros(6)

def one_class(data_dir):
    return images(), np.zeros(6, dtype=int)

def blank(data_dir):
    return np.zeros((6, 4, 4), dtype=np.uint8), np.array([0, 1, 0, 1, 0, 1])

def raises(data_dir):
    raise FileNotFoundError(f"no file in {data_dir}")

def one_thing(data_dir):
    return images()
"""


@pytest.fixture
def user_loaders(tmp_path, monkeypatch):
    (tmp_path / "loaders.py").write_text(LOADERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_a_loader_that_keeps_the_contract_gives_protofeds_layout(user_loaders):
    images, labels, classes = custom.load_user_dataset("loaders:good", user_loaders)
    assert images.shape == (6, 1, 4, 4) and images.dtype == np.uint8  # one channel added
    assert labels.dtype == np.int64 and classes == 3  # the largest label + 1
    images, labels, classes = custom.load_user_dataset("loaders:with_classes", user_loaders)
    assert images.shape == (6, 1, 4, 4) and labels.dtype == np.int64 and classes == 5


@pytest.mark.parametrize(("name", "message"), [
    ("floats", "images must be uint8 pixel values 0-255, got float64"),
    ("not_square", "images must be [N, H, W] or [N, C, H, W] with H == W, got shape [6, 2, 8]"),
    ("too_few_labels", "labels must be [N] with N = 6 (one per image), got shape [5]"),
    ("negative", "labels must be 0 or more, got -1"),
    ("beyond", "labels must be below num_classes = 2, got 2"),
    ("float_labels", "labels must be integers, got float64"),
    ("one_class", "num_classes must be an integer of at least 2, got 1"),
    ("blank", "every pixel of every image is 0"),
    ("raises", "the loader raised FileNotFoundError: no file in "),
    ("one_thing", "must return (images, labels) or (images, labels, num_classes), got ndarray"),
    ("missing", "'loaders' has no 'missing'"),
])
def test_a_broken_loader_is_one_clear_config_error(user_loaders, name, message):
    with pytest.raises(ConfigError) as caught:
        custom.load_user_dataset(f"loaders:{name}", user_loaders)
    assert str(caught.value).startswith(f"data.dataset = 'loaders:{name}': ")
    assert message in str(caught.value)


def test_pixel_statistics_are_the_exact_mean_and_std_on_the_0_1_scale():
    assert data.pixel_statistics(np.array([0, 255, 0, 255], dtype=np.uint8)) == (0.5, 0.5)
    images = np.random.default_rng(0).integers(0, 256, (50, 1, 7, 7), dtype=np.uint8)
    mean, std = data.pixel_statistics(images, chunk=100)  # many chunks, one partial
    scaled = images / 255.0
    assert mean == pytest.approx(scaled.mean(), abs=1e-12)
    assert std == pytest.approx(scaled.std(), abs=1e-12)


def test_config_accepts_a_loader_path_and_names_it_for_an_unknown_dataset():
    assert user_code(from_dict({"data": {"dataset": "pkg.mod:load"}})) == [
        ("data.dataset", "pkg.mod:load")]
    with pytest.raises(ConfigError, match="data.dataset must be one of mnist.*or a loader's "
                                          "import path"):
        from_dict({"data": {"dataset": "svhn"}})


def test_the_example_model_trains_on_the_example_dataset_in_a_federation(data_dir, tmp_path,
                                                                        monkeypatch,
                                                                        one_thread):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    config = mnist_config(data_dir, 3000, name="small", nodes=3, rounds=2, seed=3,
                          algorithm="fedavg", train={"lr": 0.05},
                          data={"dataset": "small_mnist:load"},
                          model={"teacher": "mlp:mlp", "student": "mlp:mlp"})
    nodes = run_in_process(config, tmp_path)
    for node in nodes:
        first, last = node["rounds"][0]["global_test"], node["rounds"][-1]["global_test"]
        assert node["status"] == "finished"
        assert last["f1"] > max(first["f1"] + 0.4, 0.6), (first, last)
        assert last["top_class_share"] < 0.5


@pytest.mark.parametrize("algorithm", ["fedavg", "profe"])
def test_the_example_mlp_trains_in_a_federation(algorithm, data_dir, tmp_path, monkeypatch,
                                                one_thread):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    config = mnist_config(data_dir, 3000, name=f"mlp-{algorithm}", nodes=3, rounds=2, seed=3,
                          algorithm=algorithm, train={"lr": 0.05},
                          model={"teacher": "mlp:mlp", "student": "mlp:mlp"})
    nodes = run_in_process(config, tmp_path)
    for node in nodes:
        first, last = node["rounds"][0]["global_test"], node["rounds"][-1]["global_test"]
        assert node["status"] == "finished"
        assert last["f1"] > max(first["f1"] + 0.4, 0.6), (algorithm, first, last)
        assert last["top_class_share"] < 0.5


@pytest.mark.integration
def test_protofed_up_runs_the_example_model_and_dataset_with_nothing_of_protofed_edited(
        tmp_path):
    done = protofed("up", "-c", EXAMPLE / "mlp-small-mnist.toml", "--set", "nodes=2",
                    "--set", "rounds=1", "--set", "data.subset=2000", "--set",
                    "report.pictures=false",
                    "--set", f"deploy.results_dir={tmp_path}", "--run-id", "mlp", timeout=240)
    assert done.returncode == 0, done.stderr
    assert sum(line.endswith(" finished") for line in done.stdout.splitlines()) == 2


@pytest.mark.integration
@pytest.mark.parametrize(("replace", "message"), [
    ('"mlp:mlp"', "model.teacher = 'flat:make': the model needs a `classifier`"),
    ('"mnist"', "data.dataset = 'flat:load': the loader raised OSError: no such file"),
])
def test_protofed_up_refuses_broken_user_code_before_any_node_starts(tmp_path, replace,
                                                                    message):
    (tmp_path / "flat.py").write_text("from torch import nn\n"
                                      "def make(**kw):\n    return nn.Linear(4, 10)\n"
                                      "def load(data_dir):\n    raise OSError('no such file')\n")
    config = tmp_path / "flat.toml"
    config.write_text((EXAMPLE / "mlp-mnist.toml").read_text()
                      .replace(replace, '"flat:make"' if "mlp" in replace else '"flat:load"'))
    done = protofed("up", "-c", config, "--set", f"deploy.results_dir={tmp_path / 'r'}",
                    timeout=240)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert not (tmp_path / "r").exists()  # nothing planned, nothing started
