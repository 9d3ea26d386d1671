"""Each registry by name (what the config checks, torch-free) equals its implementation
registry, and checking a config loads no torch."""

import importlib
import inspect
import pkgutil
import subprocess
import sys
import textwrap

import pytest

import node.algorithms
from node.aggregation import COMBINERS, robust_combine
from node.aggregation_rules import AGGREGATION_RULES
from node.algorithms import ALGORITHMS, CATALOGUE, algorithm_class
from node.algorithms.base import Algorithm
from node.architectures import (
    ARCHITECTURES,
    PAPER_PAIRS,
    RESNET_WIDTHS,
    USER_DATASET_PAIR,
    check_widths,
)
from node.models import RESNET_BLOCKS, build_model
from quant.codecs import FLOAT_CODECS
from quant.names import CODECS, RAW, WIRE_CODECS
from tests.helpers import REPO

CHECK_WITHOUT_TORCH = """
    import sys
    from pathlib import Path

    import node.config, node.federation, node.settings
    from node.data.custom import add_search_path

    examples = [*sorted(Path("examples").glob("*.toml")),
                *sorted(Path("examples/custom").glob("*.toml"))]
    assert Path("examples/quick.toml") in examples, examples
    for path in examples:
        add_search_path(path.parent.resolve())
        node.config.load(path)
    node.config.from_dict({"algorithm": "fedhp", "exchange": {"codec": "int8"},
                           "aggregation": {"rule": "median"}, "profe": {"preset": "reference"}})
    loaded = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
    assert not loaded, loaded
"""


def test_checking_every_example_config_loads_no_torch():
    """In a fresh interpreter: the test process has torch already."""
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(CHECK_WITHOUT_TORCH)],
                         check=False, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr


def _algorithm_modules():
    return [importlib.import_module(f"node.algorithms.{m.name}")
            for m in pkgutil.iter_modules(node.algorithms.__path__)]


def test_every_catalogued_algorithm_is_its_class():
    assert list(ALGORITHMS) == list(CATALOGUE)
    for name, entry in CATALOGUE.items():
        cls = algorithm_class(name)
        assert cls is ALGORITHMS[name]
        assert issubclass(cls, Algorithm) and not inspect.isabstract(cls), name
        assert cls.name == name
        assert cls.settings_class is entry.settings_class, name
        assert cls.presets == entry.presets, name
    with pytest.raises(KeyError):
        algorithm_class("fedsgd")
    assert "fedsgd" not in ALGORITHMS


def test_every_algorithm_class_is_in_the_catalogue():
    concrete = {cls.name for module in _algorithm_modules()
                for _, cls in inspect.getmembers(module, inspect.isclass)
                if issubclass(cls, Algorithm) and not inspect.isabstract(cls)
                and cls.__module__.startswith("node.algorithms.")}
    assert concrete == set(CATALOGUE)


def test_every_settings_class_is_a_catalogued_table():
    settings = importlib.import_module("node.algorithms.settings")
    declared = {cls for _, cls in inspect.getmembers(settings, inspect.isclass)
                if cls.__module__ == settings.__name__}
    assert declared == {e.settings_class for e in CATALOGUE.values()} - {None}


def test_the_aggregation_rules_are_the_combiners():
    assert tuple(COMBINERS) == AGGREGATION_RULES
    with pytest.raises(ValueError, match="unknown aggregation rule"):
        robust_combine(None, None, "mode", 0.2)


def test_the_codec_names_are_the_codecs():
    assert tuple(FLOAT_CODECS) == CODECS
    assert all(codec.name == name for name, codec in FLOAT_CODECS.items())
    assert WIRE_CODECS == (*CODECS, RAW) and RAW not in FLOAT_CODECS


def test_the_architecture_names_are_the_built_models():
    assert set(ARCHITECTURES) == {"cnn", "fedavg_cnn", *RESNET_WIDTHS} \
        == {"cnn", "fedavg_cnn", *RESNET_BLOCKS}
    assert {arch for pair in (*PAPER_PAIRS.values(), USER_DATASET_PAIR) for arch in pair} \
        <= set(ARCHITECTURES)
    for arch in ARCHITECTURES:
        widths = check_widths(arch, None)
        model = build_model(arch, in_channels=1, image_size=16, num_classes=3, embedding_dim=4,
                            channels=[1] * len(widths))
        assert model.classifier.out_features == 3, arch
