"""The configuration reference page: generated from the settings dataclasses, every field
documented, and naming only keys the config accepts."""

import dataclasses
import inspect
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import node.algorithms.settings
import node.settings
from node.config import _check_override_key, from_dict
from node.config_reference import (
    REGENERATE,
    Table,
    fields_of,
    missing_docs,
    render,
    render_table,
    tables,
)

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reference.md"

# A valid entry of each array of tables, so that setting one key of it leaves it valid.
VALID_ENTRIES = {
    "model.groups": {"nodes": [0]},
    "links.edges": {"nodes": [0, 1]},
    "scenario.events": {"round": 1},
}


@dataclass
class Documented:
    """A hand-made table."""

    plain: int = 1
    """One line."""
    wide: list[str] = field(default_factory=lambda: ["a"])
    """First line,
    second line."""
    bare: str = "x"
    commented: bool = False  # a comment is no docstring


@dataclass
class Extended(Documented):
    """A table that adds a key to another."""

    extra: float = 0.5
    """Its own."""


@dataclass
class Small:
    """Two keys."""

    wide: list[str] = field(default_factory=lambda: ["a"])
    """Listed."""
    flag: bool = True
    """On."""


def settings_classes() -> list[type]:
    """Every settings dataclass: those the page has sections for, and any other in the
    settings modules."""
    found = {table.cls for table in tables()}
    for module in (node.settings, node.algorithms.settings):
        found |= {cls for _, cls in inspect.getmembers(module, inspect.isclass)
                  if dataclasses.is_dataclass(cls) and cls.__module__ == module.__name__}
    return sorted(found, key=lambda cls: cls.__name__)


def page_keys() -> list[tuple[str, str, str]]:
    """(table path, key, default cell) of each row of the committed page; the path of an
    array of tables is written "[[path]]"."""
    rows, path = [], None
    for line in PAGE.read_text().splitlines():
        if line.startswith("## "):
            path = line[3:].strip("`")
            path = "" if path == "Top level" else path.removeprefix("[").removesuffix("]")
        elif line.startswith("| `") and path is not None:
            key, default = (cell.strip() for cell in line.strip("|").split(" | ")[:2])
            rows.append((path, key.strip("`"), default.strip("`")))
    return rows


def test_committed_page_is_the_generated_one():
    assert PAGE.read_text() == render(), f"docs/reference.md is stale: run `{REGENERATE}`"


@pytest.mark.parametrize("cls", settings_classes(), ids=lambda cls: cls.__name__)
def test_every_field_has_a_docstring(cls):
    assert not missing_docs(cls), (f"{cls.__name__}: give {', '.join(missing_docs(cls))} an "
                                   "attribute docstring (a string on the line after it)")


def test_fields_of_reads_attribute_docstrings():
    assert fields_of(Documented) == [("plain", "One line."), ("wide", "First line,\nsecond line."),
                                     ("bare", ""), ("commented", "")]
    assert fields_of(Extended)[-1] == ("extra", "Its own.")
    assert missing_docs(Extended) == ["bare", "commented"]


def test_a_field_without_a_docstring_stops_the_render():
    with pytest.raises(ValueError, match=r"Documented\.bare "):
        render_table(Table("`[documented]`", "documented", Documented))


def test_a_documented_table_renders_its_defaults_as_toml():
    text = render_table(Table("`[small]`", "small", Small))
    assert text.splitlines()[:3] == ["## `[small]`", "", "Two keys."]
    assert '| `wide` | `["a"]` | Listed. |' in text and "| `flag` | `true` | On. |" in text


def test_the_page_lists_every_table_and_key():
    listed = {(path, key) for path, key, _ in page_keys()}
    assert ("", "nodes") in listed and ("topology", "kind") in listed
    assert ("[model.groups]", "teacher") in listed and ("fedhp", "weight") in listed
    assert len(listed) == len(page_keys()) > 100


@pytest.mark.parametrize("path, key, default", page_keys(), ids=lambda v: str(v))
def test_every_listed_key_is_accepted(path, key, default):
    if path.startswith("["):  # an entry of an array of tables
        array = path.strip("[]")
        entry = {key: tomllib.loads(f"v = {default}")["v"], **VALID_ENTRIES[array]}
        table, name = array.split(".")
        from_dict({table: {name: [entry]}})
        return
    dotted = f"{path}.{key}" if path else key
    if default == "unset":  # TOML has no null to set it to
        _check_override_key(dotted.split("."), dotted)
    else:
        from_dict({}, overrides=[f"{dotted}={default}"])
