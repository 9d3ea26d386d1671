"""Typed federation config: one TOML file, parsed once, validated at the entrance."""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
import types
import typing
from pathlib import Path
from typing import Any

from node.aggregation_rules import AGGREGATION_RULES
from node.algorithms import CATALOGUE
from node.architectures import ARCHITECTURES, check_widths, role_architecture
from node.data import DATASETS
from node.data.custom import is_import_path
from node.data.partition import PARTITIONS
from node.errors import ConfigError
from node.settings import (
    BACKENDS,
    DEVICES,
    HELD_MIXES,
    OPTIMIZERS,
    PLACEMENTS,
    PROTOTYPE_SOURCES,
    RESTARTING_BACKENDS,
    SCREEN_BUDGETS,
    SECURITY,
    SHARED_NETWORK_BACKENDS,
    TOPOLOGY_KINDS,
    FederationConfig,
)
from node.topology_settings import scenario_events
from quant.names import CODECS
from topology.graphs import edge_count
from topology.links import PROFILES as LINK_PROFILES
from topology.links import parse_condition
from topology.schedule import PER_ROUND_KINDS, RESAMPLED_KINDS, ScenarioError, presence

# Keys that moved to an algorithm's own table: a file using the old place is told where.
MOVED = {f"train.{key}": f"profe.{key}"
         for key in ("alpha_s", "alpha_limit", "beta_s", "beta_t", "temperature")}



def load(path: str | Path, overrides: typing.Sequence[str] = ()) -> FederationConfig:
    """Read, override (`key.sub=value` strings) and validate a federation config file."""
    source = str(path)
    try:
        with open(path, "rb") as handle:
            if str(path).endswith(".json"):  # a resolved config written by the launcher
                raw = json.load(handle)
            else:
                raw = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"{source}: config file not found") from None
    except (tomllib.TOMLDecodeError, ValueError) as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read: {exc}") from None
    _resolve_relative_paths(raw, Path(path).resolve().parent)
    return from_dict(raw, source=source, overrides=overrides)


def _resolve_relative_paths(raw: dict[str, Any], base: Path) -> None:
    """Make relative file paths absolute against `base` (a config file's folder for the
    paths written in it; the current directory for those given with --set)."""
    for table, key in (("topology", "path"), ("data", "dir"), ("scenario", "file")):
        section = raw.get(table)
        value = section.get(key) if isinstance(section, dict) else None
        if isinstance(value, str) and value and not Path(value).is_absolute():
            section[key] = str(base / value)


def from_dict(raw: dict[str, Any], *, source: str = "<config>",
              overrides: typing.Sequence[str] = ()) -> FederationConfig:
    """Build a validated config from parsed TOML plus command-line overrides; an error in
    a value an override set names the --set option, not the file."""
    try:
        return _from_dict(raw, source, overrides)
    except ConfigError as exc:
        raise blame_overrides(exc, source, overrides) from None


def _from_dict(raw: dict[str, Any], source: str,
               overrides: typing.Sequence[str]) -> FederationConfig:
    merged = json.loads(json.dumps(raw))  # a deep copy the overrides may change
    for item in overrides:
        apply_override(merged, item, source)
    if not isinstance(merged, dict):
        raise ConfigError(f"{source}: [top level] must be a table")
    # paths still relative came from --set (the file's own were made absolute by `load`):
    # a path typed on the command line is relative to where it was typed
    _resolve_relative_paths(merged, Path.cwd())
    _read_scenario_file(merged, source)
    tables = method_tables()
    _apply_presets(merged, source)
    methods = {name: _build(cls, merged.pop(name, {}), prefix=f"{name}.", source=source)
               for name, cls in tables.items()}
    if "methods" in merged:
        raise ConfigError(f"{source}: unknown key methods (algorithm settings go in their "
                          f"own tables: {', '.join(f'[{n}]' for n in tables)})")
    config = _build(FederationConfig, merged, prefix="", source=source)
    config = dataclasses.replace(config, methods=methods)
    validate(config, source)
    return config


def _read_scenario_file(raw: dict[str, Any], source: str) -> None:
    """Put the events of [scenario] file into the config itself, so nodes (in containers
    too) never read the file: the resolved config holds them."""
    table = raw.get("scenario")
    if not isinstance(table, dict) or not table.get("file"):
        return
    path = Path(str(table["file"]))
    if table.get("events"):
        raise ConfigError(f"{source}: scenario.file and scenario.events are both set: keep "
                          "the events in one place")
    try:
        events = tomllib.loads(path.read_text()).get("events", [])
    except OSError as exc:
        raise ConfigError(f"{source}: scenario.file {path}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: scenario.file {path}: not valid TOML: {exc}") from None
    if not isinstance(events, list):
        raise ConfigError(f"{source}: scenario.file {path}: [[events]] must be a list of "
                          "tables")
    raw["scenario"] = {"file": "", "events": events}


def blame_overrides(exc: ConfigError, source: str,
                    overrides: typing.Sequence[str]) -> ConfigError:
    """The error re-worded to name the --set options behind it: the one whose key it names
    ("--set topology.k=3: ..."), else those that set keys of the table it is about
    ("quick.toml with --set topology.kind=k_regular: [topology] ...")."""
    text = str(exc)
    if not text.startswith(f"{source}: "):
        return exc
    rest = text[len(source) + 2:]
    # the list of known keys names every key; it says nothing of what the error is about
    subject = re.sub(r"\(known keys [^)]*\)", "", rest)
    for item in overrides:
        key = item.partition("=")[0].strip()
        if key and re.search(rf"(?<![\w.]){re.escape(key)}(?!\w)", subject):
            return ConfigError(f"--set {item.strip()}: {rest}")
    table = re.match(r"\[?([a-z_]+)[\]:. ]", rest)
    involved = [item.strip() for item in overrides if table and
                item.partition("=")[0].strip().split(".")[0] == table.group(1)]
    if involved:
        return ConfigError(f"{source} with " + " ".join(f"--set {item}" for item in involved)
                           + f": {rest}")
    return exc


def _apply_presets(raw: dict[str, Any], source: str) -> None:
    """Fill in what an algorithm's `preset` names wherever the file leaves a key unset."""

    for name, entry in CATALOGUE.items():
        table = raw.get(name)
        preset = table.get("preset") if isinstance(table, dict) else None
        if not isinstance(preset, str) or preset not in entry.presets:
            continue  # no preset, or an unknown one the table's own check will name
        for section, values in entry.presets[preset].items():
            target = raw.setdefault(section, {})
            if not isinstance(target, dict):
                raise ConfigError(f"{source}: [{section}] must be a table")
            for key, value in values.items():
                target.setdefault(key, value)


def default_methods() -> dict[str, Any]:
    """Every registered algorithm's table with its defaults."""
    return {name: cls() for name, cls in method_tables().items()}


def method_tables() -> dict[str, type]:
    """The config table each registered algorithm declares, by algorithm name."""

    return {name: entry.settings_class for name, entry in CATALOGUE.items()
            if entry.settings_class is not None}


def apply_override(raw: dict[str, Any], item: str, source: str = "<config>") -> None:
    """Set `a.b=value` in a raw dict; the value is read as TOML (bare words are strings)."""
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set topology.kind=ring")
    try:
        value = tomllib.loads(f"v = {text.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = text.strip()
    parts = key.split(".")
    _check_override_key(parts, key)
    target = raw
    for part in parts[:-1]:
        target = target.setdefault(part, {})
        if not isinstance(target, dict):
            raise ConfigError(f"{source}: --set {key}: {part!r} is not a table")
    target[parts[-1]] = value


def _check_override_key(parts: list[str], key: str) -> None:
    """A --set key must name a config value: the error names the option, not the file."""
    tables = method_tables()
    cls, where = FederationConfig, "top level"
    if parts[0] in tables:
        cls, where, parts = tables[parts[0]], f"[{parts[0]}]", parts[1:]
    for depth, part in enumerate(parts):
        names = [f.name for f in dataclasses.fields(cls) if f.name != "methods"]
        if part not in names:
            known = names + (sorted(tables) if cls is FederationConfig else [])
            raise ConfigError(f"--set {key}: unknown key {part!r} (known keys in {where}: "
                              f"{', '.join(sorted(known))})")
        hint = typing.get_type_hints(cls)[part]
        if dataclasses.is_dataclass(hint):
            cls, where = hint, f"[{'.'.join(parts[:depth + 1])}]"
        elif depth < len(parts) - 1:
            raise ConfigError(f"--set {key}: {part!r} is a value, not a table")


def _build(cls: type, raw: Any, *, prefix: str, source: str) -> Any:
    """Turn a raw TOML table into the dataclass `cls`, rejecting unknown keys and wrong types."""
    where = prefix.rstrip(".") or "top level"
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: [{where}] must be a table, got {type(raw).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - fields)
    if unknown and f"{prefix}{unknown[0]}" in MOVED:
        raise ConfigError(f"{source}: {prefix}{unknown[0]} is now "
                          f"{MOVED[prefix + unknown[0]]} (the algorithm's own table)")
    if unknown:
        known = sorted(fields - {"methods"})
        if cls is FederationConfig:  # each algorithm's own table is a top-level key too
            known = sorted(known + [f"[{name}]" for name in method_tables()])
        raise ConfigError(f"{source}: unknown key {prefix}{unknown[0]!s} "
                          f"(known keys in {where}: {', '.join(known)})")
    values = {}
    for name, value in raw.items():
        hint = hints[name]
        key = f"{prefix}{name}"
        if dataclasses.is_dataclass(hint):
            values[name] = _build(hint, value, prefix=f"{key}.", source=source)
        else:
            values[name] = _coerce(value, hint, key, source)
    return cls(**values)


def _coerce(value: Any, hint: Any, key: str, source: str) -> Any:
    """Check a scalar or list against its annotation; ints are accepted where floats are."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return None
        return _coerce(value, options[0], key, source)
    if origin is list:
        (item_hint,) = typing.get_args(hint)
        if not isinstance(value, list):
            raise ConfigError(f"{source}: {key} must be a list, got {value!r}")
        if dataclasses.is_dataclass(item_hint):
            return [_build(item_hint, v, prefix=f"{key}[{i}].", source=source)
                    for i, v in enumerate(value)]
        return [_coerce(v, item_hint, f"{key}[{i}]", source) for i, v in enumerate(value)]
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint is bool and not isinstance(value, bool):
        raise ConfigError(f"{source}: {key} must be true or false, got {value!r}")
    if hint is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"{source}: {key} must be an integer, got {value!r}")
    if not isinstance(value, hint):
        raise ConfigError(f"{source}: {key} must be of type {hint.__name__}, got {value!r}")
    return value


def user_code(config: FederationConfig) -> list[tuple[str, str]]:
    """(key, import path) of every [model] and [data] value that names the user's code."""
    found = [(f"model.{role}", getattr(config.model, role)) for role in ("teacher", "student")]
    found += [(f"model.groups[{i}].{role}", getattr(g, role))
              for i, g in enumerate(config.model.groups) for role in ("teacher", "student")]
    found.append(("data.dataset", config.data.dataset))
    return [(key, value) for key, value in found if is_import_path(value)]


def _architecture(value: str, channels: list[int], allowed: tuple[str, ...], source: str,
                  key: str) -> None:
    """A built-in architecture, or an import path "package.module:factory" (no widths)."""
    if is_import_path(value):
        _check(not channels, source, f"{key}_channels",
               f"applies to the built-in architectures, not to {key} = {value!r}")
        return
    _check(value in allowed, source, key,
           f"must be one of {', '.join(allowed)}, or a factory of yours as "
           f"\"package.module:function\", got {value!r}")


def _check(ok: bool, source: str, key: str, message: str) -> None:
    if not ok:
        raise ConfigError(f"{source}: {key} {message}")


def validate(config: FederationConfig, source: str = "<config>") -> None:
    """Reject impossible values, naming the key and the file: each table's checks in turn.

    The graph is not built here: `node.federation.resolve` builds it, once per federation.
    """
    for check in SECTION_CHECKS:
        check(config, source)



# The most rounds a federation may run: every node keeps each round's record and its
# schedule holds each round's presence, so the bound keeps both within memory.
MAX_ROUNDS = 10_000
DATA_LAYOUTS = ("pooled", "per-node")
# The most nodes: each is a process or thread with its record, data share and plan row;
# 10,000 is the most measured (the sim backend, 6.7 GiB: experiments/reports/scale).
MAX_NODES = 10_000
# The most directed edges of a graph: the launcher builds it and writes every edge into
# federation.json before the capacity check can speak; 1,000,000 (1,000 nodes fully
# connected) took 4 s and 0.45 GB, 4,000,000 took 18 s and 1.7 GB.
MAX_EDGES = 1_000_000


def _check_federation(c: FederationConfig, source: str) -> None:
    """The top-level keys."""
    _check(1 <= c.nodes <= MAX_NODES, source, "nodes",
           f"must be in 1..{MAX_NODES:,} (each node is a process or thread with its own "
           f"record and data), got {c.nodes:,}")
    _check(1 <= c.rounds <= MAX_ROUNDS, source, "rounds",
           f"must be in 1..{MAX_ROUNDS:,} (each round is kept in every node's record and "
           f"schedule), got {c.rounds:,}")
    _check(c.seed >= 0, source, "seed", f"must be non-negative, got {c.seed}")
    _check(bool(c.name) and all(ch.isalnum() or ch in "-_" for ch in c.name), source, "name",
           f"must be letters, digits, '-' or '_', got {c.name!r}")
    _check(c.algorithm in CATALOGUE, source, "algorithm",
           f"must be one of {', '.join(sorted(CATALOGUE))}, got {c.algorithm!r}")
    _check(0.0 < c.participation <= 1.0, source, "participation",
           f"must be in (0, 1] (the share of nodes that train each round), got "
           f"{c.participation}")


def _check_topology(c: FederationConfig, source: str) -> None:
    """[topology]."""
    _one_of(c.topology.kind, TOPOLOGY_KINDS, source, "topology.kind")
    _check(0.0 <= c.topology.p <= 1.0, source, "topology.p",
           f"must be in [0, 1], got {c.topology.p}")
    _check(c.topology.k >= 1, source, "topology.k", f"must be at least 1, got {c.topology.k}")
    edges = edge_count(c.topology.kind, c.nodes, k=c.topology.k, p=c.topology.p)
    _check(edges is None or edges <= MAX_EDGES, source, "topology.kind",
           f"{c.topology.kind} on {c.nodes:,} nodes has {edges or 0:,} directed edges, more "
           f"than {MAX_EDGES:,} (the launcher builds every edge into federation.json "
           "before anything starts): use fewer nodes or a sparser graph")
    _check(c.topology.kind != "file" or bool(c.topology.path), source, "topology.path",
           "must name a graph file when topology.kind = \"file\"")
    _check_hub(c, source)
    every = c.topology.resample_every
    _check(every >= 0, source, "topology.resample_every", f"must be 0 or more, got {every}")
    _check(every == 0 or c.topology.kind in (*RESAMPLED_KINDS, *PER_ROUND_KINDS), source,
           "topology.resample_every", "draws a random graph again: it applies to kinds "
           f"{', '.join((*RESAMPLED_KINDS, *PER_ROUND_KINDS))}, not {c.topology.kind!r}")


# Algorithms a hub can serve: what they exchange is one kind a hub aggregates and sends
# back (Algorithm.served_payload). ProFe, FedPR and FedProc also exchange prototypes each
# node computes on its own data from the model it aggregated, which a hub has none of.
HUB_ALGORITHMS = ("fedavg", "fedproto", "fedhp")


def _check_hub(c: FederationConfig, source: str) -> None:
    """topology.hub: a star's centre, in a federation whose nodes weigh the hub's model by
    the data plan (it speaks for its clients' data)."""
    hub = c.topology.hub
    if hub is None:
        return
    _check(c.topology.kind == "star", source, "topology.hub",
           f"makes a star's centre a hub: it needs topology.kind = \"star\", got "
           f"{c.topology.kind!r}")
    _check(c.nodes >= 2, source, "topology.hub", "needs at least one client besides the hub "
           f"(nodes >= 2), got nodes = {c.nodes}")
    _check(0 <= hub < c.nodes, source, "topology.hub",
           f"must be a node id in 0..{c.nodes - 1}, got {hub}")
    _check(c.algorithm in HUB_ALGORITHMS, source, "topology.hub",
           f"needs algorithm {', '.join(map(repr, HUB_ALGORITHMS))} (ProFe, FedPR and "
           "FedProc send a model and prototypes each node computes from it on its own data, "
           f"which a hub has none of), got {c.algorithm!r}")
    _check(c.aggregation.rule == "mean", source, "topology.hub",
           "needs aggregation.rule = \"mean\" (a client adopts the hub's model; the other "
           f"rules would mix it with the client's own), got {c.aggregation.rule!r}")
    _check(c.data.layout == "pooled" and c.aggregation.use_plan, source, "topology.hub",
           "needs the federation's data plan (data.layout = \"pooled\" and "
           "aggregation.use_plan = true): the clients weigh the hub's model by it")


def _check_scenario(c: FederationConfig, source: str) -> None:
    """[scenario]: each event well formed, then replayed: one line names the first event
    that contradicts the ones before it or names a node that does not exist."""
    for i, event in enumerate(c.scenario.events):
        key = f"scenario.events[{i}]"
        _check(all(len(edge) == 2 for edge in (*event.edge_down, *event.edge_up)), source,
               key, "edges are written [u, v]")
    events = scenario_events(c)
    for event in events:
        _check(1 <= event.round <= c.rounds, source, "scenario",
               f"{event.describe()}: the round must be in 1..{c.rounds}")
    try:  # replayed up to its last event: what follows it changes nothing
        presence(c.nodes, max((event.round for event in events), default=0), events)
    except ScenarioError as exc:
        raise ConfigError(f"{source}: scenario: {exc}") from None


def _check_report(c: FederationConfig, source: str) -> None:
    """[report]."""
    r = c.report
    _check(0.0 <= r.target_f1 <= 1.0, source, "report.target_f1",
           f"must be in [0, 1], got {r.target_f1}")
    _check(r.eval_every >= 1, source, "report.eval_every",
           f"must be 1 (every round) or more, got {r.eval_every}")
    _check(r.consensus_sketch >= 0, source, "report.consensus_sketch",
           f"must be 0 or more, got {r.consensus_sketch}")


def _check_data(c: FederationConfig, source: str) -> None:
    """[data]."""
    d = c.data
    # A loader of the user's ("package.module:function") is checked when the launcher calls it.
    _check(d.dataset in DATASETS or is_import_path(d.dataset), source, "data.dataset",
           f"must be one of {', '.join(DATASETS)} or a loader's import path "
           f"\"package.module:function\", got {d.dataset!r}")
    _one_of(d.partition, PARTITIONS, source, "data.partition")
    _check(0.0 < d.classes_fraction <= 1.0, source, "data.classes_fraction",
           f"must be in (0, 1], got {d.classes_fraction}")
    _check(d.alpha > 0.0, source, "data.alpha", f"must be positive, got {d.alpha}")
    _check(d.subset >= 0, source, "data.subset", f"must be 0 (all) or positive, got {d.subset}")
    _check(0.0 <= d.global_test_fraction < 1.0, source, "data.global_test_fraction",
           f"must be in [0, 1), got {d.global_test_fraction}")
    _check(0.0 < d.local_train_fraction <= 1.0, source, "data.local_train_fraction",
           f"must be in (0, 1], got {d.local_train_fraction}")
    _one_of(d.layout, DATA_LAYOUTS, source, "data.layout")


def _check_model(c: FederationConfig, source: str) -> None:
    """[model] and its groups, with the widths each node's models get."""
    m = c.model
    architectures = ("auto", *ARCHITECTURES)
    for role in ("teacher", "student"):
        _architecture(getattr(m, role), getattr(m, f"{role}_channels"), architectures, source,
                      f"model.{role}")
    grouped: set[int] = set()
    for i, group in enumerate(m.groups):
        key = f"model.groups[{i}]"
        _check(bool(group.nodes) and all(0 <= n < c.nodes for n in group.nodes), source,
               f"{key}.nodes", f"must list node ids in 0..{c.nodes - 1}, got {group.nodes}")
        _check(not grouped & set(group.nodes), source, f"{key}.nodes",
               f"lists nodes {sorted(grouped & set(group.nodes))} that an earlier group has")
        grouped |= set(group.nodes)
        for role in ("teacher", "student"):
            if getattr(group, role):
                _architecture(getattr(group, role), getattr(group, f"{role}_channels"),
                              architectures, source, f"{key}.{role}")
    _check(m.embedding_dim >= 0, source, "model.embedding_dim",
           f"must be positive (or 0 for the default), got {m.embedding_dim}")
    for node_id in range(c.nodes):  # the widths each node's models will be built with
        node_model = m.for_node(node_id)
        for role in ("teacher", "student"):
            arch = getattr(node_model, role)
            if is_import_path(arch):
                continue  # the user's model: checked when built, before any node starts
            where = next((f"model.groups[{i}].{role}" for i, g in enumerate(m.groups)
                          if node_id in g.nodes and getattr(g, f"{role}_channels")),
                         f"model.{role}")
            try:
                check_widths(role_architecture(arch, role, c.data.dataset),
                             getattr(node_model, f"{role}_channels") or None, where)
            except ConfigError as exc:
                raise ConfigError(f"{source}: {exc}") from None


def _check_train(c: FederationConfig, source: str) -> None:
    """[train]."""
    t = c.train
    _check(t.epochs >= 1, source, "train.epochs", f"must be at least 1, got {t.epochs}")
    _check(t.batch_size >= 1, source, "train.batch_size", f"must be at least 1, got {t.batch_size}")
    _check(t.eval_batch_size >= 1, source, "train.eval_batch_size",
           f"must be at least 1, got {t.eval_batch_size}")
    _check(t.lr > 0.0, source, "train.lr", f"must be positive, got {t.lr}")
    _check(0.0 <= t.momentum < 1.0, source, "train.momentum",
           f"must be in [0, 1), got {t.momentum}")
    _check(t.weight_decay >= 0.0, source, "train.weight_decay",
           f"must be non-negative, got {t.weight_decay}")
    _check(len(t.adam_betas) == 2 and all(0.0 <= b < 1.0 for b in t.adam_betas), source,
           "train.adam_betas", f"must be two numbers in [0, 1), got {t.adam_betas}")
    _one_of(t.device, DEVICES, source, "train.device")
    _one_of(t.optimizer, OPTIMIZERS, source, "train.optimizer")
    _check(t.threads >= 0, source, "train.threads",
           f"must be 0 (auto) or positive, got {t.threads}")


def _check_exchange(c: FederationConfig, source: str) -> None:
    """[exchange]."""
    _one_of(c.exchange.codec, CODECS, source, "exchange.codec")
    if c.exchange.prototype_codec:
        _one_of(c.exchange.prototype_codec, CODECS, source, "exchange.prototype_codec")
    _one_of(c.exchange.prototypes_from, PROTOTYPE_SOURCES, source, "exchange.prototypes_from")
    _check(c.exchange.max_message_bytes == 0 or c.exchange.max_message_bytes >= 1024, source,
           "exchange.max_message_bytes", "must be 0 (from the model) or at least 1024, got "
           f"{c.exchange.max_message_bytes}")


def _check_aggregation(c: FederationConfig, source: str) -> None:
    """[aggregation]."""
    _one_of(c.aggregation.rule, AGGREGATION_RULES, source, "aggregation.rule")
    _check(0.0 <= c.aggregation.trim_fraction < 0.5, source, "aggregation.trim_fraction",
           f"must be in [0, 0.5), got {c.aggregation.trim_fraction}")
    _check(c.aggregation.norm_bound == 0 or c.aggregation.norm_bound >= 1, source,
           "aggregation.norm_bound", "must be 0 (no bound) or at least 1, got "
           f"{c.aggregation.norm_bound}")
    _check(c.aggregation.norm_floor == 0 or c.aggregation.norm_floor >= 1, source,
           "aggregation.norm_floor", "must be 0 (no floor) or at least 1, got "
           f"{c.aggregation.norm_floor}")
    _check(0 <= c.aggregation.trust_memory < 1, source, "aggregation.trust_memory",
           f"must be in [0, 1), got {c.aggregation.trust_memory}")
    _check(0 <= c.aggregation.validation <= 1, source, "aggregation.validation",
           f"must be in [0, 1] (0: no validation), got {c.aggregation.validation}")
    _check(c.aggregation.distance == 0 or c.aggregation.distance > 1, source,
           "aggregation.distance", "must be 0 (no distance screen) or above 1, got "
           f"{c.aggregation.distance}")
    _check(1 <= c.aggregation.distance_refuse <= 10, source, "aggregation.distance_refuse",
           f"must be in [1, 10], got {c.aggregation.distance_refuse}")
    _check(1 <= c.aggregation.claim_cap <= 100, source, "aggregation.claim_cap",
           f"must be in [1, 100], got {c.aggregation.claim_cap}")
    _check(c.aggregation.unjudged in ("hold", "keep"), source, "aggregation.unjudged",
           f"must be \"hold\" or \"keep\", got {c.aggregation.unjudged!r}")
    _check(0 <= c.aggregation.influence <= 100, source, "aggregation.influence",
           f"must be in [0, 100] nats (0: no influence screen), got {c.aggregation.influence}")
    _check(c.aggregation.judged_per_round >= 0, source, "aggregation.judged_per_round",
           f"must be 0 (every in-neighbour) or a positive count, got "
           f"{c.aggregation.judged_per_round}")
    _check(0 <= c.aggregation.held_influence <= 100, source, "aggregation.held_influence",
           f"must be in [0, 100] nats (0: no held-class influence screen), got "
           f"{c.aggregation.held_influence}")
    _check(0 <= c.aggregation.held_floor <= 100, source, "aggregation.held_floor",
           f"must be in [0, 100] nats, got {c.aggregation.held_floor}")
    _check(c.aggregation.held_mix in HELD_MIXES, source, "aggregation.held_mix",
           f"must be one of {', '.join(HELD_MIXES)}, got {c.aggregation.held_mix!r}")
    _check(c.aggregation.screen_budget in SCREEN_BUDGETS, source, "aggregation.screen_budget",
           f"must be one of {', '.join(SCREEN_BUDGETS)}, got {c.aggregation.screen_budget!r}")
    _check(0 <= c.aggregation.witnesses <= MAX_NODES, source, "aggregation.witnesses",
           f"must be 0 (no witnesses) to {MAX_NODES} in-neighbours, got "
           f"{c.aggregation.witnesses}")
    _check(0.5 <= c.aggregation.witness_memory < 1, source, "aggregation.witness_memory",
           f"must be in [0.5, 1), got {c.aggregation.witness_memory}")
    _check(not c.aggregation.held_mates or c.aggregation.held_influence > 0, source,
           "aggregation.held_mates", "needs aggregation.held_influence above 0: it keeps "
           "neighbours that screen refuses, and with held_influence = 0 there is none")


def _check_timeouts(c: FederationConfig, source: str) -> None:
    """[timeouts]."""
    for key in ("startup", "round", "shutdown"):
        value = getattr(c.timeouts, key)
        _check(value > 0.0, source, f"timeouts.{key}", f"must be positive seconds, got {value}")
    _check(c.timeouts.run >= 0.0, source, "timeouts.run",
           f"must be 0 (never) or positive seconds, got {c.timeouts.run}")
    _check(0.0 <= c.timeouts.absent <= c.timeouts.round, source, "timeouts.absent",
           f"must be 0 to timeouts.round ({c.timeouts.round}) seconds, got {c.timeouts.absent}")


def _check_methods(c: FederationConfig, source: str) -> None:
    """Each algorithm's own table, judged by the algorithm's settings class."""
    for name, settings in c.methods.items():  # each algorithm judges its own table
        for key, message in getattr(settings, "problems", list)():
            _check(False, source, f"{name}.{key}", message)


def _check_deploy(c: FederationConfig, source: str) -> None:
    """[deploy]."""
    _check(c.deploy.restarts >= 0, source, "deploy.restarts",
           f"must be 0 or more, got {c.deploy.restarts}")
    _check(c.deploy.restarts == 0 or c.deploy.backend in RESTARTING_BACKENDS, source,
           "deploy.restarts", "restarting nodes is supported by the "
           f"{', '.join(RESTARTING_BACKENDS)} backend only")
    _one_of(c.deploy.backend, BACKENDS, source, "deploy.backend")
    _one_of(c.deploy.security, SECURITY, source, "deploy.security")
    _one_of(c.deploy.placement, PLACEMENTS, source, "deploy.placement")
    _check(len(c.deploy.pin) <= c.nodes, source, "deploy.pin",
           f"names machines for {len(c.deploy.pin)} nodes, but there are {c.nodes}")
    _check(c.deploy.backend != "swarm" or bool(c.deploy.registry), source, "deploy.registry",
           'must name a registry every machine can pull from ("host:port") for the swarm '
           "backend")
    _check(c.deploy.security != "none" or c.deploy.backend not in SHARED_NETWORK_BACKENDS
           or c.deploy.allow_insecure, source, "deploy.security",
           f'"none" on the {c.deploy.backend} backend lets anything on its network pose as a '
           'node: use "curve", or also set deploy.allow_insecure = true')
    _check(0 <= c.deploy.base_port <= 65535 - c.nodes, source, "deploy.base_port",
           f"must leave room for {c.nodes} ports below 65536 (0 picks free ports), "
           f"got {c.deploy.base_port}")
    _check(c.deploy.cores >= 0, source, "deploy.cores",
           f"must be 0 (all) or positive, got {c.deploy.cores}")
    _check(c.deploy.cpus >= 0.0, source, "deploy.cpus",
           f"must be 0 (no limit) or positive, got {c.deploy.cpus}")
    _check(c.deploy.memory == "" or memory_bytes(c.deploy.memory) > 0, source, "deploy.memory",
           f"must be like \"512m\" or \"2g\" (or empty for no limit), got {c.deploy.memory!r}")
    _check(1 <= c.deploy.port <= 65535, source, "deploy.port",
           f"must be a TCP port, got {c.deploy.port}")


def _check_sim(c: FederationConfig, source: str) -> None:
    """[sim], and what only the sim backend models."""
    _check(c.sim.slowdown > 0, source, "sim.slowdown", f"must be positive, got {c.sim.slowdown}")
    _check(not c.sim.node_slowdowns or len(c.sim.node_slowdowns) == c.nodes, source,
           "sim.node_slowdowns", f"must list one factor per node ({c.nodes}), got "
           f"{len(c.sim.node_slowdowns)}")
    _check(all(x > 0 for x in c.sim.node_slowdowns), source, "sim.node_slowdowns",
           f"must be positive numbers, got {c.sim.node_slowdowns}")
    _check(not c.links.uplink or c.deploy.backend == "sim", source, "links.uplink",
           "is modelled by the sim backend only (the kernel shapes each edge, not a node's "
           "uplink): leave it empty or use --backend sim")


def _check_links(c: FederationConfig, source: str) -> None:
    """[links]: the profile, each edge's form and each value alone; how they combine with a
    graph file's attributes, and that each edge is in the graph, are checked when the
    federation is resolved (node.federation.resolve)."""
    _check(not c.links.profile or c.links.profile in LINK_PROFILES, source, "links.profile",
           f"must be one of {', '.join(LINK_PROFILES)} (or empty), got {c.links.profile!r}")
    for index, edge in enumerate(c.links.edges):
        _check(len(edge.nodes) == 2 and edge.nodes[0] != edge.nodes[1], source,
               f"links.edges[{index}].nodes", f"must be [sender, receiver], got {edge.nodes}")
    named = [("links", c.links.default())] + [
        (f"links.edges[{i}]", values) for i, (_, _, _, values) in enumerate(c.links.overrides())]
    if c.links.uplink:
        named.append(("links", {"uplink": c.links.uplink}))
    for where, values in named:
        for key, value in values.items():
            try:
                if str(value).strip():
                    parse_condition(key, str(value))
            except ValueError as exc:
                # the parser's words begin with the condition's name
                words = str(exc).replace("bandwidth", key, 1)
                raise ConfigError(f"{source}: {where}.{words}") from None


SECTION_CHECKS = (_check_federation, _check_topology, _check_data, _check_model,
                  _check_train, _check_exchange, _check_aggregation, _check_timeouts,
                  _check_methods, _check_deploy, _check_sim, _check_links, _check_scenario,
                  _check_report)


def _one_of(value: str, allowed: tuple[str, ...], source: str, key: str) -> None:
    _check(value in allowed, source, key, f"must be one of {', '.join(allowed)}, got {value!r}")


def memory_bytes(text: str) -> int:
    """Bytes in a Docker-style size ("512m", "2g", "1024k", "4096"); 0 if unreadable."""
    units = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
    number, unit = text.strip().lower()[:-1], text.strip().lower()[-1:]
    if unit.isdigit():
        number, unit = text.strip(), ""
    try:
        return int(float(number) * units[unit])
    except (ValueError, KeyError):
        return 0
