"""One capacity rule for every backend: nodes x memory per node must fit the memory a host
can give, checked before anything starts.

What a node counts differs by backend for one reason: a local process may briefly use more
than its average, so the estimate is the measured average; a container's figure is also
its hard memory limit (an OOM kill beyond it), so it must cover the peak. `deploy.memory`
replaces both.
"""

from __future__ import annotations

from pathlib import Path

from node.config import FederationConfig, memory_bytes
from node.errors import DeployError

MiB, GiB = 1024**2, 1024**3
# Measured: 475 MB average RSS over the 20 nodes of a full-MNIST ProFe run.
LOCAL_NODE_MEMORY = 450 * MiB
# Measured peak RSS of an MNIST node ~0.8 GB; the container's limit when deploy.memory is unset.
CONTAINER_NODE_MEMORY = GiB
HEADROOM = 0.9  # of a machine's available memory, leave a tenth to everything else


def node_memory(config: FederationConfig, container: bool) -> int:
    """Bytes one node counts: deploy.memory, else the backend's measured figure."""
    if config.deploy.memory:
        return memory_bytes(config.deploy.memory)
    return CONTAINER_NODE_MEMORY if container else LOCAL_NODE_MEMORY


def check_memory(config: FederationConfig, available: int, container: bool, where: str) -> None:
    """Refuse a federation whose nodes would not fit in `available` bytes of `where`
    (0: unknown, nothing is refused)."""
    per_node = node_memory(config, container)
    needed = config.nodes * per_node
    if available and needed > HEADROOM * available:
        source = "deploy.memory" if config.deploy.memory else "measured"
        raise DeployError(
            f"{config.nodes} {'' if container else 'local '}nodes need about "
            f"{needed / GiB:.1f} GiB ({source} {per_node / MiB:.0f} MiB per node) but "
            f"{where} has {available / GiB:.1f} GiB available: use fewer nodes, a smaller "
            "deploy.memory, or a larger host")


def available_memory() -> int:
    """MemAvailable of this machine in bytes (0 when /proc/meminfo cannot be read)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0
