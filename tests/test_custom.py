"""Models of the user's own by import path: the contract is checked with one clear message,
and the example MLP trains in a federation (in-process and through `protofed up`) with no
file of protofed edited."""

import textwrap

import pytest
from torch import nn

from deploy.cli import refuse_user_code
from node import custom
from node.config import from_dict, user_code
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


def test_containers_refuse_user_code_before_starting():
    config = from_dict({"model": {"teacher": "mlp:mlp"}})
    with pytest.raises(ConfigError, match="model.teacher = 'mlp:mlp' names a Python module "
                                          "of yours.*local backend"):
        refuse_user_code(config)


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
def test_protofed_up_runs_the_example_config_with_nothing_of_protofed_edited(tmp_path):
    done = protofed("up", "-c", EXAMPLE / "mlp-mnist.toml", "--set", "nodes=2",
                    "--set", "rounds=1", "--set", "data.subset=2000",
                    "--set", f"deploy.results_dir={tmp_path}", "--run-id", "mlp", timeout=240)
    assert done.returncode == 0, done.stderr
    assert "finished" in done.stdout


@pytest.mark.integration
def test_protofed_up_refuses_a_broken_user_model_before_any_node_starts(tmp_path):
    (tmp_path / "flat.py").write_text("from torch import nn\ndef make(**kw):\n"
                                      "    return nn.Linear(4, 10)\n")
    config = tmp_path / "flat.toml"
    config.write_text((EXAMPLE / "mlp-mnist.toml").read_text()
                      .replace('"mlp:mlp"', '"flat:make"'))
    done = protofed("up", "-c", config, "--set", f"deploy.results_dir={tmp_path / 'r'}",
                    timeout=240)
    assert done.returncode == 2, done.stderr
    assert "model.teacher = 'flat:make': the model needs a `classifier`" in done.stderr
    assert not (tmp_path / "r").exists()  # nothing planned, nothing started
