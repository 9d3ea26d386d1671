"""NetworkX builders that decide who sends to whom."""

from topology.graphs import (
    BUILDERS,
    TopologyError,
    build,
    from_file,
    fully_connected,
    in_neighbours,
    k_regular,
    line,
    out_neighbours,
    random,
    ring,
    small_world,
    star,
    validate,
)

__all__ = [
    "BUILDERS",
    "TopologyError",
    "build",
    "from_file",
    "fully_connected",
    "in_neighbours",
    "k_regular",
    "line",
    "out_neighbours",
    "random",
    "ring",
    "small_world",
    "star",
    "validate",
]
