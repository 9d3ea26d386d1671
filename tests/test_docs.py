"""The README stays a quick start, and the documentation site builds with no broken link,
no missing anchor and no page left out of its navigation."""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO

README = REPO / "README.md"
DOCS = REPO / "docs"
REPORTS = REPO / "experiments" / "reports"
# [text](target) and ![alt](target), the target up to a space or the closing bracket
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)")


def _relative_links(text: str) -> list[str]:
    """The link targets of a Markdown text that point into the repository."""
    return [target for target in LINK.findall(text)
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target) and not target.startswith("#")]


def _pages() -> set[str]:
    """Every Markdown page under docs/, as mkdocs finds them (the reports link followed)."""
    found = set()
    for folder, _, files in os.walk(DOCS, followlinks=True):
        for name in files:
            if name.endswith(".md"):
                found.add((Path(folder) / name).relative_to(DOCS).as_posix())
    return found


def _nav_pages(entries) -> set[str]:
    """The pages mkdocs.yml's nav lists, at any depth."""
    found = set()
    for entry in entries:
        if isinstance(entry, str):
            found.add(entry)
        elif isinstance(entry, dict):
            for value in entry.values():
                found |= _nav_pages(value) if isinstance(value, list) else _nav_pages([value])
    return found


def _config() -> dict:
    return yaml.safe_load((REPO / "mkdocs.yml").read_text())


def test_the_readme_is_a_quick_start_of_at_most_20000_bytes():
    size = len(README.read_bytes())
    assert size <= 20_000, f"README.md is {size:,} bytes: move the details to a page in docs/"


def test_every_relative_link_in_the_readme_names_a_file_that_exists():
    targets = _relative_links(README.read_text())
    assert targets, "the README links no page of docs/"
    missing = [target for target in targets
               if not (REPO / target.split("#", 1)[0]).exists()]
    assert not missing, f"README.md links files that do not exist: {missing}"


def test_every_page_in_docs_is_in_the_nav():
    pages = _pages()
    listed = _nav_pages(_config()["nav"])
    assert not pages - listed, f"pages missing from mkdocs.yml's nav: {sorted(pages - listed)}"
    assert not listed - pages - {"reference.md"}, \
        f"mkdocs.yml's nav names pages that do not exist: {sorted(listed - pages)}"


def test_the_experiments_page_links_every_committed_report():
    linked = set(_relative_links((DOCS / "experiments.md").read_text()))
    reports = {"reports/" + path.relative_to(REPORTS).as_posix()
               for path in REPORTS.glob("*/*.md")}
    assert reports and not reports - linked, \
        f"reports the experiments page does not link: {sorted(reports - linked)}"


def test_the_site_builds_strictly(tmp_path):
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed: pip install -e '.[docs]'")
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs, symlinks=True, ignore=shutil.ignore_patterns("reports"))
    (docs / "reports").symlink_to(REPORTS, target_is_directory=True)
    if not (docs / "reference.md").exists():  # the generated page, in this copy only
        (docs / "reference.md").write_text("# Configuration reference\n")
    config = {**_config(), "docs_dir": str(docs), "site_dir": str(tmp_path / "site")}
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(tmp_path / "mkdocs.yml")], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "index.html").is_file()


def test_the_readme_example_is_the_kept_run_of_quick_toml_as_protofed_printed_it():
    from deploy.views.report import format_table
    from experiments import readme_example
    kept = REPO / "experiments" / "reports" / "readme-example"
    output = (kept / "output.txt").read_text()
    for page in readme_example.PAGES:  # the README and the docs' front page
        assert readme_example.readme_block(output) in page.read_text(), page
    summary = json.loads((kept / "summary.json").read_text())
    table = output.split("\n\n")[0]
    assert table == format_table(summary, None)


F1_ACROSS_PROCESSORS = 0.005  # what one run's F1 may differ by between two processors


@pytest.mark.integration
def test_quick_toml_still_trains_to_the_readme_examples_bytes_and_f1(tmp_path, data_dir):
    """A change of default (or of training) that moves quick.toml's figures must regenerate
    the README's example: `python -m experiments.readme_example`."""

    import protofed
    kept = json.loads((REPO / "experiments" / "reports" / "readme-example" /
                       "summary.json").read_text())
    # no pictures: they show what the run recorded and change none of it (2 CPU s)
    run = protofed.run(REPO / "examples" / "quick.toml", backend="sim", progress=False,
                       overrides=[f"data.dir={data_dir}", f"deploy.results_dir={tmp_path}",
                                  "report.pictures=false"])

    def traffic(summary):
        return [(n["bytes_sent"], n["bytes_received"]) for n in summary["nodes"]]

    def f1s(summary):
        return [f for n in summary["nodes"] for f in (n["global_f1"], n["local_f1"])]
    assert traffic(run.summary) == traffic(kept), \
        "quick.toml's bytes moved: run `python -m experiments.readme_example`"
    # bytes are exact on any machine; F1 only up to the processor's float kernels (the same
    # code and seed end 0.0016 apart in one node's local F1 on two x86 processors)
    assert f1s(run.summary) == pytest.approx(f1s(kept), abs=F1_ACROSS_PROCESSORS), \
        "quick.toml's F1 moved: run `python -m experiments.readme_example`"


def test_the_cli_page_names_every_column_of_rounds_csv():
    from deploy.views.pictures import CSV_COLUMNS
    page = (DOCS / "cli.md").read_text()
    assert f"`{', '.join(CSV_COLUMNS)}`" in page


def test_the_own_data_pages_example_writes_folders_the_launcher_accepts(tmp_path):
    """The page's function, run on synthetic arrays for three nodes, then the launcher's
    check of every folder, and a node's data read as the node reads it."""
    import numpy as np
    import torch

    from deploy.backends.plan import check_node_folders
    from node.config import from_dict
    from node.runtime import load_node_data
    page = (DOCS / "own-data.md").read_text()
    code = re.search(r"```python\n(.*?)```", page, re.DOTALL).group(1)
    namespace: dict = {}
    exec(code, namespace)  # noqa: S102 - the page's own example
    rng = np.random.default_rng(1)
    for node in range(3):
        images = rng.integers(0, 256, (20, 28, 28), dtype=np.uint8)
        namespace["write_node_folder"](tmp_path, node, images, np.arange(20) % 4, 4)
    config = from_dict({"nodes": 3, "data": {"layout": "per-node", "dir": str(tmp_path),
                                             "dataset": "mnist"}})
    notes = check_node_folders(config)
    assert notes[0].startswith("no global test set")
    data = load_node_data(config, 2, torch.device("cpu"))
    assert data.num_classes == 4 and len(data.train_y) == 16 and len(data.test_y) == 4
    assert data.plan is None and len(data.global_y) == 0
