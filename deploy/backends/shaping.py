"""Link conditions enforced by the kernel: an HTB class per shaped directed edge with a u32
filter on the edge's packets, and netem under it for delay, jitter and loss.

Pure rule generation (`tc_commands`) is kept apart from running `tc` (`apply`, `clear`), which
needs root (CAP_NET_ADMIN), locally on `lo` or inside a container's network namespace.
"""

from __future__ import annotations

import functools
import gzip
import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from node.errors import DeployError
from node.federation import Federation
from topology.links import Link

log = logging.getLogger(__name__)

UNSHAPED_RATE = "100gbit"  # the default class: traffic no rule matches passes at once
MIN_BURST = 16 * 1024  # bytes a class may send at once; larger for fast links (10 ms worth)


@dataclass(frozen=True)
class Rule:
    """One shaped directed edge on one device: packets matching every given field (IPv4
    source, IPv4 destination, TCP destination port) take class 1:`minor`."""

    minor: int
    link: Link
    src: str | None = None
    dst: str | None = None
    dport: int | None = None


def netem_arguments(link: Link) -> list[str]:
    """netem's arguments for a link's delay, jitter and loss."""
    arguments: list[str] = []
    if link.delay_s:
        arguments += ["delay", _ms(link.delay_s)]
        if link.jitter_s:
            arguments += [_ms(link.jitter_s), "distribution", "normal"]
    if link.loss:
        arguments += ["loss", f"{link.loss * 100:g}%"]
    return arguments


def tc_commands(device: str, rules: list[Rule]) -> list[list[str]]:
    """The tc invocations that shape `device` by `rules` (its root qdisc is replaced)."""
    commands = [["tc", "qdisc", "add", "dev", device, "root", "handle", "1:", "htb",
                 "default", "1"],
                ["tc", "class", "add", "dev", device, "parent", "1:", "classid", "1:1", "htb",
                 "rate", UNSHAPED_RATE]]
    for rule in rules:
        classid = f"1:{rule.minor:x}"
        if rule.link.bandwidth_bps:
            burst = str(max(MIN_BURST, rule.link.bandwidth_bps // 8 // 100))
            shape = ["rate", f"{rule.link.bandwidth_bps}bit", "burst", burst, "cburst", burst]
        else:
            shape = ["rate", UNSHAPED_RATE]
        commands.append(["tc", "class", "add", "dev", device, "parent", "1:", "classid",
                         classid, "htb", *shape])
        if rule.link.needs_netem:
            commands.append(["tc", "qdisc", "add", "dev", device, "parent", classid, "handle",
                             f"{rule.minor:x}:", "netem", *netem_arguments(rule.link)])
        match: list[str] = []
        if rule.src:
            match += ["match", "ip", "src", f"{rule.src}/32"]
        if rule.dst:
            match += ["match", "ip", "dst", f"{rule.dst}/32"]
        if rule.dport is not None:
            match += ["match", "ip", "dport", str(rule.dport), "0xffff"]
        commands.append(["tc", "filter", "add", "dev", device, "parent", "1:", "protocol",
                         "ip", "prio", "1", "u32", *match, "flowid", classid])
    return commands


def clear_command(device: str) -> list[str]:
    return ["tc", "qdisc", "del", "dev", device, "root"]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:g}ms"


def _in_namespace(command: list[str], netns_pid: int | None) -> list[str]:
    return command if netns_pid is None else ["nsenter", "-t", str(netns_pid), "-n", *command]


def apply(device: str, rules: list[Rule], netns_pid: int | None = None) -> None:
    """Shape `device` (in the network namespace of process `netns_pid`, if given)."""
    for command in tc_commands(device, rules):
        done = subprocess.run(_in_namespace(command, netns_pid), capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            clear(device, netns_pid)
            raise DeployError(f"link shaping: `{' '.join(command)}` failed: "
                              f"{done.stderr.strip() or done.stdout.strip()}")
    log.info("shaped %d links on %s%s", len(rules), device,
             f" (namespace of pid {netns_pid})" if netns_pid else "")


def clear(device: str, netns_pid: int | None = None) -> bool:
    """Remove the root qdisc of `device` (and every class and filter under it); False if
    there was none of ours or the namespace is gone."""
    done = subprocess.run(_in_namespace(clear_command(device), netns_pid), capture_output=True,
                          text=True, check=False)
    return done.returncode == 0


def root_qdisc(device: str) -> str:
    """The kind of `device`'s root qdisc ("noqueue", "htb", ...), "" if unknown."""
    done = subprocess.run(["tc", "qdisc", "show", "dev", device, "root"], capture_output=True,
                          text=True, check=False)
    words = done.stdout.split()
    return words[1] if done.returncode == 0 and len(words) > 1 else ""


@functools.cache
def netem_available() -> bool:
    """Whether this kernel has netem: tried in a throwaway network namespace, else read
    from the kernel's config."""
    if shutil.which("unshare") and shutil.which("tc") and os.geteuid() == 0:
        done = subprocess.run(["unshare", "-n", "tc", "qdisc", "add", "dev", "lo", "root",
                               "netem", "delay", "1ms"], capture_output=True, check=False)
        return done.returncode == 0
    try:
        config = gzip.decompress(Path("/proc/config.gz").read_bytes()).decode()
    except OSError:
        return False
    return "CONFIG_NET_SCH_NETEM=y" in config or "CONFIG_NET_SCH_NETEM=m" in config


def preflight(links: dict[tuple[int, int], Link], tools: tuple[str, ...] = ("tc",)) -> None:
    """Refuse, before any node starts, shaping this machine cannot do."""
    if not any(link.shaped for link in links.values()):
        return
    missing = [tool for tool in tools if not shutil.which(tool)]
    if missing:
        raise DeployError(f"[links] needs {', '.join(missing)} (Debian: apt install iproute2 "
                          "util-linux)")
    if os.geteuid() != 0:
        raise DeployError("[links] shapes links with the kernel's traffic control, which needs "
                          "root (CAP_NET_ADMIN): run protofed up as root, or drop [links]")
    netem = sorted(f"{u}->{v}" for (u, v), link in links.items() if link.needs_netem)
    if netem and not netem_available():
        raise DeployError(
            f"[links] asks for delay, jitter or loss (links {', '.join(netem[:5])}"
            f"{' ...' if len(netem) > 5 else ''}), which need the kernel module sch_netem "
            "(CONFIG_NET_SCH_NETEM); this kernel does not have it. Bandwidth alone works "
            "without it")


def port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


LOOPBACK = "lo"


def loopback_rules(federation: Federation, shaped: dict[tuple[int, int], Link]) -> list[Rule]:
    """Rules on this machine's loopback for the `shaped` edges: an edge's packets leave
    from its sender's own address (Member.source) for its receiver's port."""
    members = federation.members
    return [Rule(minor=index + 2, link=link, src=members[u].source,
                 dport=port_of(members[v].address))
            for index, ((u, v), link) in enumerate(sorted(shaped.items()))]


def shape_loopback(federation: Federation) -> str:
    """Shape `lo` for a local run (the launcher's plan ran `preflight`); the device shaped,
    or "" when nothing is. A root HTB left on `lo` by a launcher that did not finish is
    removed first."""
    rules = loopback_rules(federation, federation.shaped_links)
    if not rules:
        return ""
    host = federation.members[0].address.removeprefix("tcp://").rsplit(":", 1)[0]
    if not host.startswith("127."):
        raise DeployError(f"[links] on the local backend needs deploy.host on the loopback "
                          f"(127.0.0.1), got {host!r}: each node's traffic is told apart by "
                          "its own 127.x source address")
    if root_qdisc(LOOPBACK) == "htb":
        log.warning("lo still had link shaping from an earlier run: removed")
        clear(LOOPBACK)
    apply(LOOPBACK, rules)
    return LOOPBACK


def shape_containers(federation: Federation, containers: dict, network: str,
                     device: str) -> int:
    """Shape each started container's `device`, from the host inside its network
    namespace (the containers keep every capability dropped); the rules go with the
    container. The number of shaped edges."""
    shaped = federation.shaped_links
    if not shaped:
        return 0
    for container in containers.values():
        container.reload()
    address = {i: c.attrs["NetworkSettings"]["Networks"][network]["IPAddress"]
               for i, c in containers.items()}
    members = federation.members
    for sender in sorted({u for u, _ in shaped}):
        pid = containers[sender].attrs["State"]["Pid"]
        if not pid:
            raise DeployError(f"link shaping: node {sender}'s container is not running")
        rules = [Rule(minor=index + 2, link=link, dst=address[v],
                      dport=port_of(members[v].address))
                 for index, ((u, v), link) in enumerate(sorted(shaped.items())) if u == sender]
        apply(device, rules, netns_pid=pid)
    return len(shaped)
