"""protofed's Python API: `run` a federation and get its tables, `load` a finished run,
`sweep` the product of settings and seeds into one table."""

from __future__ import annotations

import functools
import itertools
import json
import logging
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from deploy.backends.plan import checked_run_id, new_run_id
from deploy.ending import finish_without_launcher, still_running
from deploy.launch import load_config
from deploy.run_folder import FEDERATION_FILE, RUN_FILE, RecordReader, read_node_results
from deploy.views.progress import NotebookProgress, in_notebook
from deploy.views.report import format_table
from node.errors import ConfigError, DeployError
from node.record import NodeRecord
from node.settings import FederationConfig
from protofed.frames import NODE_COLUMNS, node_rows, round_rows

log = logging.getLogger("protofed")

Config = str | Path | Mapping[str, Any] | FederationConfig
POLL_SECONDS = 0.5  # how often the notebook's table is redrawn


@dataclass(frozen=True)
class Run:
    """A federation's results: its folder, summary and node records, as tables."""

    folder: Path
    summary: dict[str, Any]
    records: tuple[NodeRecord, ...]

    @functools.cached_property
    def rounds(self) -> pd.DataFrame:
        """One row per node and round (round 0: before training): F1 and accuracy under
        each prediction rule, bytes sent and received by kind, seconds, refusals."""
        return pd.DataFrame(round_rows(list(self.records)))

    @functools.cached_property
    def nodes(self) -> pd.DataFrame:
        """One row per node: status, bytes in all, final F1 and accuracy, neighbours."""
        return pd.DataFrame(node_rows(self.summary), columns=list(NODE_COLUMNS))

    @property
    def run_id(self) -> str:
        return self.summary["run_id"]

    @property
    def ok(self) -> bool:
        """Whether every node finished (or left as its scenario said)."""
        return not self.summary.get("failed_nodes")

    def table(self, width: int | None = None, every: bool = False) -> str:
        """The end table `protofed up` prints (every node with `every`)."""
        return format_table(self.summary, width, every, show_every_column="table() without a width",
                            show_every_node="table(every=True)")

    def __repr__(self) -> str:
        f1 = self.summary.get("mean_global_f1")
        score = "no F1" if f1 is None else f"mean F1 {f1:.4f}"
        return (f"Run({self.run_id!r}: {len(self.records)} nodes, {score}, "
                f"{self.summary['totals']['bytes_sent']:,} bytes sent, folder {self.folder})")

    def _repr_html_(self) -> str:
        return f"<p>{repr(self)[4:-1]}</p>" + self.nodes.to_html(index=False)


def run(config: Config, *, overrides: Sequence[str] = (), backend: str | None = "local",
        run_id: str | None = None, progress: bool = True) -> Run:
    """Run a federation to its end and return its results. `config`: a config file's path,
    a dict shaped like the file or a loaded config; `overrides`: `--set` strings
    ("rounds=2"); `backend`: local, docker, swarm or sim (None: the config's deploy.backend);
    `run_id`: the results folder's name (default: the config's name and the time).

    The federation runs in a `protofed up` process of its own, so nothing of it (forked
    nodes, signal handlers, torch's threads) touches the caller's. Progress: an HTML table
    in a notebook, `up`'s lines on stderr elsewhere. A bad config raises ConfigError before
    anything starts; a run that cannot start raises DeployError with `up`'s words; Ctrl-C
    stops every node, keeps what they recorded and raises KeyboardInterrupt."""
    overrides = _strings("overrides", overrides) + _backend_override(backend)
    loaded, _ = load_config(config, overrides)  # every mistake named before anything starts
    run_id = checked_run_id(run_id) if run_id else new_run_id(loaded)
    folder = Path(loaded.deploy.results_dir) / run_id
    notebook = progress and in_notebook()
    with tempfile.TemporaryDirectory(prefix="protofed-") as scratch:
        if isinstance(config, (str, Path)):
            command = ["-c", str(config), *(part for item in overrides
                                             for part in ("--set", item))]
        else:  # the validated config, written as the resolved file `up` also reads
            resolved = Path(scratch) / f"{loaded.name}.json"
            resolved.write_text(json.dumps(loaded.to_dict()))
            command = ["-c", str(resolved)]
        said = Path(scratch) / "up.err"
        with open(said, "w") as errors:
            code = _up(command + ["--run-id", run_id], loaded,
                       folder, errors if notebook or not progress else None,
                       NotebookProgress(loaded.rounds) if notebook else None)
        words = said.read_text()
    return _ended(folder, code, words)


def _up(arguments: list[str], config: FederationConfig, folder: Path, errors,
        view: NotebookProgress | None) -> int:
    """`protofed up` with `arguments` in its own process (stderr to `errors`, or shared),
    the notebook's table redrawn from the records as they change; its exit code."""
    # -P: a module in the caller's folder (a user's node.py) must not stand in for ours
    process = subprocess.Popen([sys.executable, "-P", "-m", "deploy.cli", "up", *arguments],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=errors)
    reader = RecordReader(folder, config.nodes)
    try:
        while process.poll() is None:
            if view is not None and folder.is_dir():
                view.show(reader.read())
            time.sleep(POLL_SECONDS)
    except KeyboardInterrupt:
        process.send_signal(signal.SIGINT)  # `up` stops every node and writes the summary
        process.wait()
        raise
    if view is not None and folder.is_dir():
        view.show(reader.read())
    return process.returncode


def _ended(folder: Path, code: int, words: str) -> Run:
    """The run `up` left in `folder`, or the error it ended with."""
    if code == 130:
        log.warning("interrupted: what the nodes recorded is in %s (protofed.load reads it)",
                    folder)
        raise KeyboardInterrupt
    if not (folder / "summary.json").is_file():
        lines = [line.removeprefix("protofed: ") for line in words.splitlines()
                 if line.strip()]
        raise DeployError(lines[-1] if lines else f"protofed up ended with exit code {code} "
                          "and wrote no summary (what it said is above)")
    result = load(folder)
    if not result.ok:
        log.warning("run %s: nodes %s did not finish (their logs: %s)", result.run_id,
                    result.summary["failed_nodes"], folder / "logs")
    return result


def load(folder: str | Path) -> Run:
    """A finished run read back from its results folder (what `run` returned)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError(f"{folder}: no such folder")
    if finish_without_launcher(folder, "protofed.load") is not None:
        log.warning("run %s: its launcher was gone; wrote its summary from the nodes' "
                    "records", folder.name)
    try:
        summary = json.loads((folder / "summary.json").read_text())
    except FileNotFoundError:
        why = ("not a protofed results folder" if not (folder / FEDERATION_FILE).is_file()
               else "no node of it started: it has no run.json"
               if not (folder / RUN_FILE).is_file() else
               f"the run has not ended: {still_running(folder) or 'unknown why'}")
        raise ConfigError(f"{folder}: no summary.json ({why})") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{folder}/summary.json: cannot read: {exc}") from None
    records = read_node_results(folder, len(summary.get("nodes", [])))
    return Run(folder, summary, tuple(records))


def sweep(config: Config, *, grid: Mapping[str, Iterable[Any]] | None = None,
          seeds: Sequence[int] = (), overrides: Sequence[str] = (),
          backend: str | None = "local", progress: bool = True) -> pd.DataFrame:
    """Run every combination of `grid`'s values ({"aggregation.rule": ["mean", "median"]})
    and `seeds`, one federation after another; one DataFrame of every run's rounds, with a
    column per swept key (and `seed`) and the run's `run_id`."""
    settings = sweep_settings(grid or {}, seeds)
    overrides = _strings("overrides", overrides)
    chosen_overrides = [overrides + tuple(f"{key}={json.dumps(value)}"
                                          for key, value in chosen.items())
                        for chosen in settings]
    for chosen, every in zip(settings, chosen_overrides, strict=True):
        try:  # every combination checked before the first runs
            load_config(config, every + _backend_override(backend))
        except ConfigError as exc:
            raise ConfigError(f"sweep {chosen}: {exc}") from None
    frames = []
    for number, (chosen, every) in enumerate(zip(settings, chosen_overrides, strict=True), 1):
        log.info("sweep %d/%d: %s", number, len(settings), chosen)
        result = run(config, overrides=every, backend=backend, progress=progress)
        frame = result.rounds.copy()
        frame.insert(0, "run_id", result.run_id)
        for index, (key, value) in enumerate(chosen.items(), 1):
            frame.insert(index, key, [value] * len(frame))
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _backend_override(backend: str | None) -> tuple[str, ...]:
    """The --set that picks `backend` (none: the config's deploy.backend)."""
    return (f"deploy.backend={backend}",) if backend else ()


def _listed(what: str, values: Any) -> list[Any]:
    """`values` as a list; a ConfigError for a string or a single value where a list of
    values belongs (a string would otherwise be read a character at a time)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise ConfigError(f"{what} must list its values, e.g. [{values!r}], got {values!r}")
    return list(values)


def _strings(what: str, values: Any) -> tuple[str, ...]:
    """`values` as a tuple of strings (KEY=VALUE options), a ConfigError otherwise."""
    listed = _listed(what, values)
    bad = [v for v in listed if not isinstance(v, str)]
    if bad:
        raise ConfigError(f"{what} must be KEY=VALUE strings, got {bad[0]!r}")
    return tuple(listed)


def sweep_settings(grid: Mapping[str, Iterable[Any]], seeds: Sequence[int]
                   ) -> list[dict[str, Any]]:
    """Every combination of the grid's values, then each seed: [{key: value, "seed": s}]."""
    keys = list(grid)
    values = [_listed(f"sweep grid: {key}", grid[key]) for key in keys]
    seeds = _listed("sweep: seeds", seeds)
    for key, options in zip(keys, values):
        if not options:
            raise ConfigError(f"sweep grid: {key} lists no value")
    if seeds and "seed" in grid:
        raise ConfigError("sweep: seed is both in the grid and in seeds: name it once")
    combos = [dict(zip(keys, combo)) for combo in itertools.product(*values)]
    if seeds:
        combos = [{**combo, "seed": seed} for combo in combos for seed in seeds]
    return combos

