"""What the benchmarks read of processes from outside: their tree, their memory from smaps,
the CPU of the ones they waited for."""

from __future__ import annotations

import resource
from pathlib import Path


def children_cpu() -> float:
    """CPU seconds of this process's waited-for descendants so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def process_tree(root: int) -> dict[int, int]:
    """{pid: parent pid} for `root` and every process below it."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(
                    (entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found, todo = {root: parents.get(root, 0)}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found[child] = parents[child]
                todo.append(child)
    return found


def uss_and_pss(pid: int) -> tuple[int, int]:
    """(USS: private clean + dirty, PSS) of one process in bytes; (0, 0) when it is gone."""
    fields: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name in ("Pss", "Private_Clean", "Private_Dirty"):
                fields[name] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return 0, 0
    return fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0), fields.get("Pss", 0)


def processor_model() -> str:
    """The processor's model name (/proc/cpuinfo on Linux), "unknown processor" elsewhere."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown processor"
