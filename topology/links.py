"""Link conditions per directed edge: bandwidth, delay, jitter and loss, from a default, a
named profile, the graph's edge attributes and per-edge overrides (in that order, later
wins). Pure: parsing and resolution only; deploy.backends.shaping turns them into kernel rules."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import networkx as nx

from topology.graphs import EDGE_CONDITIONS as CONDITIONS
from topology.graphs import TopologyError

# Bandwidth-only profiles, so that they work on kernels without netem; add delay and loss
# explicitly where the kernel has it.
PROFILES = {"lan": {"bandwidth": "1gbit"}, "wan": {"bandwidth": "50mbit"},
            "edge": {"bandwidth": "5mbit"}}
RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}
TIME_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
_NUMBER = r"(\d+(?:\.\d+)?)"


@dataclass(frozen=True)
class Link:
    """What one directed edge is like; None or 0 means not shaped in that respect."""

    bandwidth_bps: int | None = None
    delay_s: float = 0.0
    jitter_s: float = 0.0
    loss: float = 0.0  # a fraction, 0.01 for 1%

    @property
    def shaped(self) -> bool:
        return self.bandwidth_bps is not None or self.needs_netem

    @property
    def needs_netem(self) -> bool:
        """Delay, jitter and loss need the kernel's netem qdisc (sch_netem)."""
        return bool(self.delay_s or self.jitter_s or self.loss)


def parse_rate(text: str) -> int:
    """Bits per second from "5mbit", "1gbit", "800kbit" or "1000bit" (optionally "/s")."""
    match = re.fullmatch(_NUMBER + r"\s*([a-z]+)(?:/s)?", text.strip().lower())
    if not match or match.group(2) not in RATE_UNITS:
        raise ValueError(f"bandwidth {text!r}: write a number and one of "
                         f"{', '.join(RATE_UNITS)}, like \"5mbit\"")
    bits = int(float(match.group(1)) * RATE_UNITS[match.group(2)])
    if bits < 8000:
        raise ValueError(f"bandwidth {text!r}: below 8kbit no transfer finishes in time")
    return bits


def parse_time(text: str, what: str) -> float:
    """Seconds from "50ms", "200us" or "1.5s"."""
    match = re.fullmatch(_NUMBER + r"\s*([a-z]+)", text.strip().lower())
    if not match or match.group(2) not in TIME_UNITS:
        raise ValueError(f"{what} {text!r}: write a number and one of "
                         f"{', '.join(TIME_UNITS)}, like \"50ms\"")
    seconds = float(match.group(1)) * TIME_UNITS[match.group(2)]
    if seconds > 60:
        raise ValueError(f"{what} {text!r}: more than 60 s")
    return seconds


def parse_loss(text: str) -> float:
    """A fraction from "1%" or "0.5%"."""
    match = re.fullmatch(_NUMBER + r"\s*%", text.strip())
    if not match:
        raise ValueError(f"loss {text!r}: write a percentage, like \"1%\"")
    percent = float(match.group(1))
    if percent >= 100:
        raise ValueError(f"loss {text!r}: must be below 100%")
    return percent / 100


def parse_condition(key: str, text: str) -> float:
    """One condition's value alone: bits per second, seconds or a fraction."""
    if key in ("bandwidth", "uplink"):
        return parse_rate(text)
    if key == "loss":
        return parse_loss(text)
    return parse_time(text, key)


def link(values: Mapping[str, str]) -> Link:
    """A Link from text values; empty or missing ones leave that condition off."""
    unknown = sorted(set(values) - set(CONDITIONS))
    if unknown:
        raise ValueError(f"unknown condition {unknown[0]!r} (known: {', '.join(CONDITIONS)})")
    text = {k: str(v).strip() for k, v in values.items() if str(v).strip()}
    delay = parse_time(text["delay"], "delay") if "delay" in text else 0.0
    jitter = parse_time(text["jitter"], "jitter") if "jitter" in text else 0.0
    if jitter and not delay:
        raise ValueError("jitter needs a delay to vary around")
    return Link(parse_rate(text["bandwidth"]) if "bandwidth" in text else None, delay, jitter,
                parse_loss(text["loss"]) if "loss" in text else 0.0)


def edge_links(graph: nx.DiGraph, default: Mapping[str, str],
               overrides: Iterable[tuple[int, int, bool, Mapping[str, str]]] = ()
               ) -> dict[tuple[int, int], Link]:
    """Every directed edge's Link: `default`, then the edge's own attributes in the graph,
    then `overrides` (sender, receiver, both ways, values); an error names the edge."""
    values = {(u, v): {**default, **{k: data[k] for k in CONDITIONS if k in data}}
              for u, v, data in graph.edges(data=True)}
    for sender, receiver, both_ways, given in overrides:
        for edge in [(sender, receiver)] + ([(receiver, sender)] if both_ways else []):
            if edge not in values:
                raise TopologyError(f"link {edge[0]}->{edge[1]}: the topology has no such "
                                    "edge")
            values[edge] = {**values[edge], **{k: v for k, v in given.items() if str(v)}}
    out = {}
    for (u, v), text in sorted(values.items()):
        try:
            out[(u, v)] = link(text)
        except ValueError as exc:
            raise TopologyError(f"link {u}->{v}: {exc}") from exc
    return out
