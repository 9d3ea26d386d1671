"""`protofed partition`: a config's split written as one folder per node (the format of
`node.data.folders`), so that each node of a deployment can be given its own data and
nothing else. The same config and folder a second time write nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from deploy.backends.plan import host_data_dir, prepare_data
from node.data import load_dataset
from node.data.folders import (
    DATA_FILE,
    FORMAT,
    GLOBAL_TEST,
    MANIFEST,
    file_sha256,
    node_folder,
    per_class,
    read_manifest,
    write_arrays,
)
from node.data.partition import split_of
from node.errors import DataError
from node.settings import FederationConfig


def split_settings(config: FederationConfig) -> dict:
    """What decides the split: equal settings, equal folders."""
    d = config.data
    return {"dataset": d.dataset, "nodes": config.nodes, "seed": config.seed,
            "partition": d.partition, "classes_fraction": d.classes_fraction,
            "alpha": d.alpha, "subset": d.subset,
            "global_test_fraction": d.global_test_fraction,
            "local_train_fraction": d.local_train_fraction}


def partition(config: FederationConfig, out: Path, say: Callable[[str], None]) -> bool:
    """Write `config`'s split into `out`; False (nothing written) when `out` already holds
    exactly it. DataError for a folder holding something else."""
    settings = split_settings(config)
    if _already_there(out, settings):
        return False
    prepare_data(config)
    dataset = load_dataset(config.data.dataset, host_data_dir(config), download=False)
    split = split_of(config, dataset.labels, dataset.num_classes)
    classes = dataset.num_classes
    out.mkdir(parents=True, exist_ok=True)
    # marked unfinished until the last file is written: a stopped partition is redone
    (out / MANIFEST).write_text(json.dumps({"format": FORMAT, "split": settings,
                                            "complete": False}) + "\n")
    nodes, every = [], max(1, config.nodes // 10)
    for node, share in enumerate(split.nodes):
        digest = write_arrays(node_folder(out, node),
                              train_images=dataset.images[share.train],
                              train_labels=dataset.labels[share.train],
                              test_images=dataset.images[share.test],
                              test_labels=dataset.labels[share.test],
                              num_classes=np.array(classes))
        nodes.append({"node": node, "train_per_class": per_class(
            dataset.labels[share.train], classes), "test_per_class": per_class(
            dataset.labels[share.test], classes), "sha256": digest})
        if (node + 1) % every == 0 or node + 1 == config.nodes:
            say(f"partition: {node + 1} of {config.nodes} nodes written")
    manifest = {"format": FORMAT, "split": settings, "complete": True, "num_classes": classes,
                "image_shape": list(dataset.images.shape[1:]), "nodes": nodes}
    if len(split.global_test):
        index = split.global_test
        manifest["global_test"] = {
            "per_class": per_class(dataset.labels[index], classes),
            "sha256": write_arrays(out / GLOBAL_TEST, images=dataset.images[index],
                                   labels=dataset.labels[index],
                                   num_classes=np.array(classes))}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return True


def _already_there(out: Path, settings: dict) -> bool:
    """Whether `out` holds this split whole; DataError when it holds anything else."""
    if not out.exists():
        return False
    if not out.is_dir():
        raise DataError(f"{out}: not a folder")
    manifest = read_manifest(out)
    if manifest is None:
        if any(out.iterdir()):
            raise DataError(f"{out}: not empty and no {MANIFEST}: partition into an empty or "
                            "new folder")
        return False
    if manifest.get("split") == settings and not manifest.get("complete"):
        return False  # a partition of this split that was stopped: written again
    held = manifest.get("split") or {}
    if held != settings:
        differ = ", ".join(f"{key} {held.get(key)!r} there, {value!r} asked"
                           for key, value in settings.items() if held.get(key) != value)
        raise DataError(f"{out}: holds another split ({differ}): partition into another "
                        "folder")
    files = [(node_folder(out, n["node"]) / DATA_FILE, n["sha256"])
             for n in manifest.get("nodes", [])]
    if "global_test" in manifest:
        files.append((out / GLOBAL_TEST / DATA_FILE, manifest["global_test"]["sha256"]))
    return len(files) >= settings["nodes"] and all(
        path.is_file() and file_sha256(path) == digest for path, digest in files)
