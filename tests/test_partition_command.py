"""`protofed partition`: a config's split as one folder per node, checked against the split
every node computes, written once."""

import json

import numpy as np
import pytest

from deploy.partition import partition
from node.config import from_dict, load
from node.data import load_dataset
from node.data.folders import file_sha256, read_split
from node.data.partition import split_of
from node.errors import ConfigError, DataError
from tests.helpers import protofed, write_config


@pytest.fixture(scope="module")
def written(tmp_path_factory, data_dir):
    root = tmp_path_factory.mktemp("partition")
    config_file = write_config(root, data_dir, "parts", nodes=3)
    done = protofed("partition", "-c", config_file, "--out", root / "P")
    assert done.returncode == 0, done.stderr
    return load(config_file), root / "P", done.stderr


def test_each_node_folder_holds_its_share_of_the_split_and_the_manifest_counts_it(written):
    config, out, said = written
    assert "partition: 3 of 3 nodes written" in said and "wrote 3 node folders" in said
    dataset = load_dataset("mnist", config.data.dir, download=False)
    split = split_of(config, dataset.labels, dataset.num_classes)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] and manifest["num_classes"] == 10
    for node, share in enumerate(split.nodes):
        path = out / f"node-{node}" / "data.npz"
        images, labels = read_split(path, "train", 10, (1, 28, 28))
        assert np.array_equal(images, dataset.images[share.train])
        assert np.array_equal(labels, dataset.labels[share.train])
        test_images, _ = read_split(path, "test", 10, (1, 28, 28))
        assert np.array_equal(test_images, dataset.images[share.test])
        entry = manifest["nodes"][node]
        assert entry["train_per_class"] == np.bincount(dataset.labels[share.train],
                                                       minlength=10).tolist()
        assert entry["sha256"] == file_sha256(path)
    images, _ = read_split(out / "global-test" / "data.npz", "", 10, (1, 28, 28))
    assert np.array_equal(images, dataset.images[split.global_test])


def test_the_same_split_again_writes_nothing_and_another_is_refused_naming_what_differs(
        written):
    config, out, _ = written
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*.npz")}
    said = []
    assert partition(config, out, said.append) is False and said == []
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.npz")} == before
    reseeded = from_dict({**config.to_dict(), "seed": 8})
    with pytest.raises(DataError, match="holds another split \\(seed 7 there, 8 asked\\)"):
        partition(reseeded, out, said.append)


def test_a_bad_node_file_is_named_with_its_field(tmp_path):
    path = tmp_path / "data.npz"
    np.savez(path, train_images=np.zeros((2, 28, 28), np.uint8),
             train_labels=np.array([0, 12]))
    with pytest.raises(DataError, match=r"data.npz: train_labels must lie in 0..9, found "
                                        r"0..12"):
        read_split(path, "train", 10, (1, 28, 28))
    with pytest.raises(DataError, match=r"data.npz: no array 'test_images'"):
        read_split(path, "test", 10, (1, 28, 28))
    np.savez(path, images=np.zeros((2, 28, 28), np.float32), labels=np.array([0, 1]))
    with pytest.raises(DataError, match=r"images must be uint8 of shape \[n, 1, 28, 28\], got "
                                        r"float32 \[2, 1, 28, 28\]"):
        read_split(path, "", 10, (1, 28, 28))


@pytest.fixture(scope="module")
def pooled_run(written, tmp_path_factory):
    """The pooled run of the partitioned config on the sim backend (local processes give
    the same bytes and F1: tests/test_sim.py)."""
    _, out, _ = written
    results = tmp_path_factory.mktemp("pooled")
    done = protofed("up", "-c", out.parent / "parts.toml", "--backend", "sim", "--run-id",
                    "pooled", "--set", f"deploy.results_dir={results}")
    assert done.returncode == 0, done.stderr[-2000:]
    return _figures(json.loads((results / "pooled" / "summary.json").read_text()))


def _figures(summary):
    return [(n["bytes_sent"], n["bytes_received"], round(n["global_f1"], 4),
             round(n["local_f1"], 4)) for n in summary["nodes"]]


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["local", "sim"])
def test_nodes_reading_only_their_own_folders_train_to_the_pooled_runs_bytes_and_f1(
        written, pooled_run, tmp_path, backend):
    """data.layout = "per-node" with PROTOFED_DATA_DIR an empty folder: every node reads
    its own folder and nothing else, and the run is the pooled one, byte for byte and F1
    for F1 (4 decimals)."""
    import os

    _, out, _ = written
    empty = tmp_path / "empty"
    empty.mkdir()
    done = protofed("up", "-c", out.parent / "parts.toml", "--backend", backend, "--run-id",
                    f"per-node-{backend}", "--set", f"deploy.results_dir={tmp_path}",
                    "--set", 'data.layout="per-node"', "--set", f'data.dir="{out}"',
                    env={**os.environ, "PROTOFED_DATA_DIR": str(empty)})
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((tmp_path / f"per-node-{backend}" / "summary.json").read_text())
    assert _figures(summary) == pooled_run


def test_a_missing_or_bad_node_folder_stops_the_run_before_anything_starts(written, tmp_path):
    import shutil
    _, out, _ = written
    source = out.parent / "parts.toml"
    broken = tmp_path / "P"
    shutil.copytree(out, broken)
    (broken / "node-2" / "data.npz").unlink()
    per_node = ("--set", 'data.layout="per-node"', "--set", f'data.dir="{broken}"',
                "--set", f"deploy.results_dir={tmp_path}")
    done = protofed("up", "-c", source, *per_node)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"protofed: node 2: {broken / 'node-2' / 'data.npz'}: missing (write the node folders with "
        "`protofed partition`, or as the command line page describes)")
    with np.load(out / "node-1" / "data.npz") as stored:
        arrays = {key: stored[key] for key in stored.files}
    arrays["train_labels"][0] = 10
    np.savez(broken / "node-1" / "data.npz", **arrays)
    done = protofed("up", "-c", source, *per_node)
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("protofed: node 1: ") and last.endswith(
        "node-1/data.npz: train_labels must lie in 0..9, found 0..10")
    assert not list(tmp_path.glob("parts-*"))  # no run folder: nothing started


def test_per_node_data_on_a_swarm_needs_every_node_pinned_to_its_folders_machine(tmp_path):
    from deploy.backends.launchers import launcher_for
    with pytest.raises(ConfigError, match=r'deploy.pin must name, for every node, the machine '
                                          r"that holds its folder \(nodes without one: 1, 2\)"):
        launcher_for(from_dict({"nodes": 3, "data": {"layout": "per-node", "dir": "/srv/p"},
                                "deploy": {"backend": "swarm", "pin": ["a"], "registry": "r:5000"}}))
    with pytest.raises(ConfigError, match="set data.dir, the folder of the nodes' folders "
                                          "on each machine"):
        launcher_for(from_dict({"nodes": 2, "data": {"layout": "per-node"},
                                "deploy": {"backend": "swarm", "pin": ["a", "b"], "registry": "r:5000"}}))
    from deploy.backends.compose import compose_run
    config = from_dict({"data": {"layout": "per-node"},
                        "deploy": {"registry": "127.0.0.1:5000"}})
    with pytest.raises(ConfigError, match='data.layout = "per-node" with deploy.registry: a '
                                          "stack for any swarm"):
        compose_run(config, tmp_path / "c.toml", (), "r")


def test_a_composed_per_node_service_mounts_its_own_folder_alone(written, tmp_path):
    from deploy.backends.compose import compose_document
    from deploy.backends.docker_backend import plan_docker
    config, out, _ = written
    raw = config.to_dict()
    config = from_dict({**raw, "data": {**raw["data"], "layout": "per-node", "dir": str(out)},
                        "deploy": {**raw["deploy"], "memory": "512m"}})
    plan = plan_docker(config, tmp_path / "c.toml", (), "r")
    for swarm in (False, True):  # compose.yaml, and the one-machine stack.yaml
        document = compose_document(config, plan, "img", out, swarm=swarm)
        for node, service in enumerate(document["services"].values()):
            data = {v["target"]: v["source"] for v in service["volumes"]
                    if v["target"].startswith("/data")}
            assert data == {f"/data/node-{node}": str(out / f"node-{node}"),
                            "/data/global-test": str(out / "global-test")}


def test_a_node_whose_counts_disagree_with_the_manifest_is_named(written, tmp_path):
    import shutil

    from deploy.backends.plan import check_node_folders
    config, out, _ = written
    copy = tmp_path / "P"
    shutil.copytree(out, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["nodes"][1]["train_per_class"][0] += 1
    (copy / "manifest.json").write_text(json.dumps(manifest))
    raw = config.to_dict()
    per_node = from_dict({**raw, "data": {**raw["data"], "layout": "per-node",
                                          "dir": str(copy)}})
    with pytest.raises(DataError, match=r"^node 1: .*node-1/data.npz holds \[.*\] training "
                                        r"samples per class, its manifest says \["):
        check_node_folders(per_node)
