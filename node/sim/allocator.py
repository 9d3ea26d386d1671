"""The C allocator of a simulation process: as many malloc arenas as nodes computing at once.

glibc gives each new thread an arena of its own, up to 8 per core, and memory a node's
thread freed stays in its arena for later allocations of that thread. With thousands of node
threads and a few computing at a time, arenas shared by those few hold less, and a probe
of a few nodes sees what every further node costs (deploy.backends.capacity).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("node")
M_ARENA_MAX = -8  # glibc's malloc.h


def share_arenas(workers: int) -> bool:
    """Cap this process's malloc arenas at `workers`; False where the C library is not
    glibc (nothing changes there)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        done = bool(libc and libc.mallopt(M_ARENA_MAX, max(1, workers)))
    except (OSError, AttributeError):
        done = False
    if not done:
        log.debug("malloc arenas left as they are: no glibc mallopt here")
    return done
